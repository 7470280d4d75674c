"""The sink rate of Gu et al. (ICLR 2025): the share of heads that park mass on one key.

>>> rows = torch.tensor([[[1.0, 0.0], [0.8, 0.2]]])   # one head, [query, key], causal
>>> sink_rate(rows, key=0, eps=0.3).scores            # (1.0 + 0.8) / 2 = 0.9
tensor([0.9000], dtype=torch.float64)

For one head's attention matrix ``A`` (``[query, key]``, rows summing to 1 over the
available keys) and a key position ``k``, the *sink score* of ``k`` is the mean weight
that the queries able to attend to ``k`` put on it::

    alpha_k = (1 / |Q_k|) * sum_{t in Q_k} A[t, k],   Q_k = {t : key k available to query t}

For a causal model without padding ``Q_k = {k, ..., T - 1}``, ``T - k`` queries, which is
Gu et al.'s ``alpha_k = 1/(T - k + 1) sum_{i=k}^{T} A_{i,k}`` in their 1-based count: their
``Sink_1`` is ``key=0`` here. The *sink rate* of a set of heads is the share whose score
exceeds a threshold ``eps``::

    Sink_k^eps = mean over heads of 1[alpha_k > eps]

Gu et al. use ``eps = 0.3`` and ``T = 64`` and average the indicator over sequences,
layers and heads; :func:`sink_rate` averages it over every leading entry of ``rows``
(e.g. ``[batch, layer, head_index, query, key]``), which is the same mean. Scores are
fractions of a row's mass in [0, 1]; the rate is a fraction of heads in [0, 1]. A sink
score is a property of the weights alone (a concentration number): it says where heads
put their mass, not whether that mass matters.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from interv._checks import as_finite, as_int
from interv.errors import IntervError
from interv.metrics._rows import prepare_rows

__all__ = ["GU_EPS", "SinkRate", "sink_rate", "sink_scores"]

GU_EPS = 0.3
"""The threshold of Gu et al. (ICLR 2025), chosen there as strict and insensitive to T."""


@dataclass(frozen=True, eq=False)
class SinkRate:
    """Sink scores of a set of heads and the share of them above a threshold.

    Attributes:
        key: the key position ``k`` (0-based; Gu et al.'s ``k + 1``).
        eps: the threshold, in (0, 1).
        scores: ``rows.shape[:-2]`` float64 sink scores ``alpha_k`` in [0, 1] (fraction of
            a row's mass); NaN where no query can attend to ``k``.
        rate: share of defined scores above ``eps`` (fraction of heads in [0, 1]); NaN
            when no score is defined.
        n_scores: number of defined scores (the heads counted, over every leading dim).
        n_undefined: number of NaN scores (no query sees ``k``), not counted.
    """

    key: int
    eps: float
    scores: torch.Tensor
    rate: float
    n_scores: int
    n_undefined: int

    @property
    def above(self) -> torch.Tensor:
        """``scores.shape`` bool: the score exceeds ``eps`` (False where undefined)."""
        return self.scores > self.eps


def check_eps(eps: float) -> float:
    eps = as_finite(eps, "eps")
    if not 0 < eps < 1:
        raise IntervError(
            f"eps must lie in (0, 1) (a fraction of a row's mass; Gu et al. use {GU_EPS}); "
            f"got {eps}"
        )
    return eps


def sink_scores(
    rows: torch.Tensor,
    key: int = 0,
    *,
    key_mask: torch.Tensor | None = None,
    causal: bool = True,
    allow_deficit: bool = False,
) -> torch.Tensor:
    """The sink score ``alpha_k``: mean weight on key ``k`` over the queries that can see it.

    Args:
        rows: ``[..., query, key]`` attention weights (e.g. ``[batch, layer, head_index,
            query_pos, key_pos]``), each row summing to 1 over its available keys.
        key: the key position ``k``, ``0 <= k < key_pos``.
        key_mask: optional bool, broadcastable to ``rows``; True = available key
            (e.g. padding). Combined with the causal mask when ``causal``.
        causal: key ``j`` is available to query ``t`` only if ``j <= t`` (needs as many
            queries as keys); False for a bidirectional encoder (every query).
        allow_deficit: accept rows summing to less than 1 (an off-row learned sink, e.g.
            gpt-oss); the score stays the mean weight on key ``k``.

    Returns:
        ``rows.shape[:-2]`` float64 in [0, 1]; NaN where no query can attend to ``k``.

    Raises:
        IntervError: rows that are not attention rows (see :mod:`interv.metrics`), fewer
            than two dims, a key beyond the rows, or a causal mask on non-square rows.
    """
    if not isinstance(rows, torch.Tensor) or rows.ndim < 2:
        shape = tuple(rows.shape) if isinstance(rows, torch.Tensor) else type(rows).__name__
        raise IntervError(f"rows must be a tensor of shape [..., query, key]; got {shape}")
    n_queries, n_keys = rows.shape[-2:]
    key = as_int(key, "key")
    if not 0 <= key < n_keys:
        raise IntervError(
            f"key position {key} is beyond the prompt: rows have {n_keys} key positions "
            f"(valid keys 0..{n_keys - 1})"
        )
    if not isinstance(causal, bool):
        raise IntervError(f"causal must be True or False; got {causal!r}")
    mask = key_mask
    if causal:
        if n_queries != n_keys:
            raise IntervError(
                f"a causal mask needs as many queries as keys; got rows of shape "
                f"{tuple(rows.shape)} ({n_queries} queries, {n_keys} keys)"
            )
        tril = torch.ones(n_keys, n_keys, dtype=torch.bool, device=rows.device).tril()
        mask = tril if key_mask is None else tril & key_mask.to(rows.device)
    prepared = prepare_rows(rows, mask, allow_deficit=allow_deficit)
    sees = prepared.mask[..., key]  # [..., query]: key k is available to the query
    weights = torch.where(sees, prepared.weights[..., key], 0.0)
    count = sees.sum(dim=-1)
    return torch.where(count > 0, weights.sum(dim=-1) / count.clamp(min=1), torch.nan)


def sink_rate(
    rows: torch.Tensor,
    *,
    key: int = 0,
    eps: float = GU_EPS,
    key_mask: torch.Tensor | None = None,
    causal: bool = True,
    allow_deficit: bool = False,
) -> SinkRate:
    """Gu et al.'s ``Sink_k^eps``: the share of heads whose sink score of key ``k`` exceeds
    ``eps``, over every leading entry of ``rows``.

    Args:
        rows: ``[..., query, key]`` attention weights, e.g. ``[batch, layer, head_index,
            query_pos, key_pos]`` (then the rate is the mean over sequences, layers and
            heads, as in Gu et al.).
        key: the key position ``k`` (0-based; default 0, the first token).
        eps: the threshold, in (0, 1) (default 0.3, Gu et al.'s).
        key_mask, causal, allow_deficit: as in :func:`sink_scores`.

    Returns:
        A :class:`SinkRate` (scores, rate, counts).
    """
    eps = check_eps(eps)
    scores = sink_scores(rows, key, key_mask=key_mask, causal=causal, allow_deficit=allow_deficit)
    defined = ~scores.isnan()
    n_scores = int(defined.sum())
    rate = float((scores[defined] > eps).to(torch.float64).mean()) if n_scores else math.nan
    return SinkRate(
        key=int(key),
        eps=eps,
        scores=scores,
        rate=rate,
        n_scores=n_scores,
        n_undefined=int((~defined).sum()),
    )
