"""Concentration of one attention row: how a head spreads its mass over the keys.

A query row after masking and softmax is a probability distribution ``a`` over the
``n`` *available* keys (key mask True: causal AND padding). Concentration is a
property of these weights alone: it never sees values, outputs or later layers.

- entropy ``H(a) = -sum_{i available} a_i log a_i`` (``0 log 0 = 0``), in nats or bits;
- normalized entropy ``H(a) / log n`` in [0, 1], undefined (NaN) for ``n <= 1``;
- effective support ``exp(H(a))`` in [1, n] keys (the perplexity of the row);
- max weight and top-k mass.

All functions take ``rows`` of shape ``[..., key]`` (e.g. ``[batch, head_index,
query_pos, key_pos]``) and an optional bool ``key_mask`` broadcastable to it, compute in
float64 whatever the input dtype, and return float64 of shape ``rows.shape[:-1]``
(after broadcasting with the mask). Rows with no available key give NaN. Validation
rules and the dtype-aware tolerance are those of :mod:`interv.metrics._rows`; with
``allow_deficit=True`` a row may sum to less than 1 and its deficit counts as one more
available key (the off-row sink).
"""

from __future__ import annotations

import torch

from interv.errors import IntervError
from interv.metrics._rows import Rows, check_unit, divide_by_log_n, prepare_rows

__all__ = [
    "available_keys",
    "effective_support",
    "entropy",
    "max_weight",
    "normalized_entropy",
    "top_k_mass",
]


def _nan_where_empty(values: torch.Tensor, rows: Rows) -> torch.Tensor:
    return torch.where(rows.empty, torch.nan, values)


def _entropy_nats(rows: Rows) -> torch.Tensor:
    """``[...]`` entropy in nats of validated rows (0 in empty rows; callers mask them)."""
    return torch.special.entr(rows.weights).sum(dim=-1)


def available_keys(rows: torch.Tensor, *, key_mask: torch.Tensor | None = None) -> torch.Tensor:
    """Number of available keys ``n`` per row: the count of True in the key mask.

    Args:
        rows: ``[..., key]`` attention weights (validated like every metric).
        key_mask: optional bool, broadcastable to ``rows``; True = available key.

    Returns:
        ``rows.shape[:-1]`` int64 in ``0..key``. A causal row at query position ``t``
        has ``n = t + 1``; left padding lowers it by the number of padding keys.
    """
    return prepare_rows(rows, key_mask).n


def entropy(
    rows: torch.Tensor,
    *,
    key_mask: torch.Tensor | None = None,
    unit: str = "nats",
    allow_deficit: bool = False,
) -> torch.Tensor:
    """Shannon entropy of each row over its available keys.

    Definition: ``H(a) = -sum_{i: key_mask_i} a_i log a_i`` with ``0 log 0 = 0``.

    Args:
        rows: ``[..., key]`` attention weights, summing to 1 over available keys.
        key_mask: optional bool, broadcastable to ``rows``; True = available key.
        unit: ``"nats"`` (natural log) or ``"bits"`` (log base 2).
        allow_deficit: accept rows summing to less than 1 (off-row sink as one more key).

    Returns:
        ``rows.shape[:-1]`` float64 in ``[0, log n]`` in ``unit``; NaN where ``n == 0``.
    """
    divisor = check_unit(unit)
    prepared = prepare_rows(rows, key_mask, allow_deficit=allow_deficit)
    return _nan_where_empty(_entropy_nats(prepared) / divisor, prepared)


def normalized_entropy(
    rows: torch.Tensor, *, key_mask: torch.Tensor | None = None, allow_deficit: bool = False
) -> torch.Tensor:
    """Entropy divided by its maximum: ``H(a) / log n``, unitless.

    Args:
        rows: ``[..., key]`` attention weights, summing to 1 over available keys.
        key_mask: optional bool, broadcastable to ``rows``; True = available key.
        allow_deficit: accept rows summing to less than 1 (off-row sink as one more key).

    Returns:
        ``rows.shape[:-1]`` float64 in ``[0, 1]`` (0 = one-hot, 1 = uniform over the
        available keys); NaN where ``n <= 1`` (undefined, never 0). Count the NaN rows
        with ``(available_keys(...) <= 1).sum()``.
    """
    prepared = prepare_rows(rows, key_mask, allow_deficit=allow_deficit)
    return divide_by_log_n(_entropy_nats(prepared), prepared.n)


def effective_support(
    rows: torch.Tensor, *, key_mask: torch.Tensor | None = None, allow_deficit: bool = False
) -> torch.Tensor:
    """Effective number of keys attended: ``exp(H(a))`` with ``H`` in nats (perplexity).

    Args:
        rows: ``[..., key]`` attention weights, summing to 1 over available keys.
        key_mask: optional bool, broadcastable to ``rows``; True = available key.
        allow_deficit: accept rows summing to less than 1 (off-row sink as one more key).

    Returns:
        ``rows.shape[:-1]`` float64 in ``[1, n]``, unit: keys (1 = one-hot, ``n`` =
        uniform over the available keys); NaN where ``n == 0``.
    """
    prepared = prepare_rows(rows, key_mask, allow_deficit=allow_deficit)
    return _nan_where_empty(_entropy_nats(prepared).exp(), prepared)


def max_weight(
    rows: torch.Tensor, *, key_mask: torch.Tensor | None = None, allow_deficit: bool = False
) -> torch.Tensor:
    """Largest weight of each row over its available keys.

    Args:
        rows: ``[..., key]`` attention weights, summing to 1 over available keys.
        key_mask: optional bool, broadcastable to ``rows``; True = available key.
        allow_deficit: accept rows summing to less than 1 (off-row sink as one more key).

    Returns:
        ``rows.shape[:-1]`` float64 in ``[1/n, 1]``, unit: share of the row's mass;
        NaN where ``n == 0``.
    """
    prepared = prepare_rows(rows, key_mask, allow_deficit=allow_deficit)
    return _nan_where_empty(prepared.weights.amax(dim=-1), prepared)


def top_k_mass(
    rows: torch.Tensor,
    k: int,
    *,
    key_mask: torch.Tensor | None = None,
    allow_deficit: bool = False,
) -> torch.Tensor:
    """Mass of the ``k`` largest weights of each row (all of it when ``k >= n``).

    Args:
        rows: ``[..., key]`` attention weights, summing to 1 over available keys.
        k: number of keys, an int >= 1.
        key_mask: optional bool, broadcastable to ``rows``; True = available key.
        allow_deficit: accept rows summing to less than 1 (off-row sink as one more key).

    Returns:
        ``rows.shape[:-1]`` float64 in ``[min(k, n)/n, 1]``, unit: share of the row's
        mass; NaN where ``n == 0``.
    """
    if isinstance(k, bool) or not isinstance(k, int) or k < 1:
        raise IntervError(f"k must be an int >= 1 (number of keys); got {k!r}")
    prepared = prepare_rows(rows, key_mask, allow_deficit=allow_deficit)
    k_kept = min(k, prepared.weights.shape[-1])
    mass = prepared.weights.topk(k_kept, dim=-1).values.sum(dim=-1)
    return _nan_where_empty(mass, prepared)
