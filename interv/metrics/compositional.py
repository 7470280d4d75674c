"""Attention rows as compositions: only the ratios between available weights matter.

Aitchison geometry treats a row over ``n`` available keys as a point of the simplex
whose coordinates are log-ratios. The centred log-ratio is
``clr(a)_i = log a_i - mean_{j available} log a_j`` and the Aitchison distance is the
Euclidean distance between clr vectors. It is scale invariant (renormalizing a row
does not move it) and subcompositionally coherent (the distance between the content
parts of two rows is the same whether or not they were renormalized after dropping
the sink).

For a sink set ``S`` (``r`` parts) and content set ``C`` (``c`` parts) an orthonormal
(ilr) basis splits the squared distance exactly into the *balance* between sink and
content parts, ``b(a) = sqrt(r c / (r + c)) * ln(gmean(a_S) / gmean(a_C))``, the
Aitchison distance within the sink parts (0 for one sink position) and within the
content parts::

    d(x, y)^2 = (b(x) - b(y))^2 + d_S(x_S, y_S)^2 + d_C(x_C, y_C)^2

Log-ratios need positive parts. Exact zeros among available keys (underflow in a
softmax) raise :class:`IntervError` unless the caller passes ``zero_replacement``: then
every exact zero among available keys becomes that value and the row is re-closed
(divided by its new sum). :class:`AitchisonSplit` reports how many zeros were replaced
per row pair; for :func:`clr` and :func:`aitchison_distance` that count is
``((rows == 0) & key_mask).sum(-1)``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from interv.errors import IntervError
from interv.metrics._rows import Rows, prepare_rows, resolve_sink

__all__ = ["AitchisonSplit", "aitchison_distance", "aitchison_split", "clr"]


def replace_zeros(
    weights: torch.Tensor, mask: torch.Tensor, zero_replacement: float | None
) -> tuple[torch.Tensor, torch.Tensor]:
    """Apply the zero rule to closed ``[..., key]`` rows over the keys in ``mask``.

    Returns the rows (re-closed over ``mask`` if zeros were replaced) and the ``[...]``
    int64 number of zeros replaced. Raises :class:`IntervError` on exact zeros when
    ``zero_replacement`` is None, and on a replacement outside (0, 1).
    """
    zeros = (weights == 0) & mask
    n_zeros = zeros.sum(dim=-1)
    if zero_replacement is None:
        if bool(zeros.any()):
            index = tuple(int(i) for i in zeros.nonzero()[0])
            raise IntervError(
                f"rows[{', '.join(map(str, index[:-1]))}] has an exact zero at available key "
                f"{index[-1]} ({int(n_zeros.sum())} zeros in all); log-ratios need positive "
                "parts: pass zero_replacement=<float in (0, 1)>, e.g. 1e-12, to replace them "
                "and re-close the row"
            )
        return weights, n_zeros
    if isinstance(zero_replacement, bool) or not 0 < zero_replacement < 1:
        raise IntervError(
            f"zero_replacement must be a float in (0, 1) (weight given to exact zeros); "
            f"got {zero_replacement!r}"
        )
    replaced = torch.where(zeros, float(zero_replacement), weights)
    total = torch.where(mask, replaced, 0.0).sum(dim=-1, keepdim=True)
    return replaced / torch.where(total > 0, total, 1.0), n_zeros


def _positive_parts(
    rows: torch.Tensor, key_mask: torch.Tensor | None, zero_replacement: float | None
) -> tuple[Rows, torch.Tensor]:
    """Validated rows with no exact zero among available keys, and ``[...]`` zeros replaced."""
    prepared = prepare_rows(rows, key_mask)
    weights, n_zeros = replace_zeros(prepared.weights, prepared.mask, zero_replacement)
    return Rows(weights, prepared.mask, prepared.n, prepared.n_keys, False), n_zeros


def centred_log_ratio(weights: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """``[..., key]`` clr over the keys in ``mask`` (0 elsewhere and in rows with no key)."""
    logs = torch.where(mask, weights, 1.0).log()
    count = mask.sum(dim=-1, keepdim=True).clamp(min=1)
    centre = logs.sum(dim=-1, keepdim=True) / count
    return torch.where(mask, logs - centre, 0.0)


def _distance(x: Rows, y: Rows, mask: torch.Tensor) -> torch.Tensor:
    """``[...]`` Aitchison distance of the sub-compositions on ``mask``."""
    return (
        (centred_log_ratio(x.weights, mask) - centred_log_ratio(y.weights, mask))
        .square()
        .sum(dim=-1)
        .sqrt()
    )


def _same_mask(x: Rows, y: Rows) -> tuple[Rows, Rows, torch.Tensor]:
    """Broadcast ``x`` and ``y`` together; they share one mask by construction."""
    shape = torch.broadcast_shapes(x.weights.shape, y.weights.shape)
    x = Rows(x.weights.expand(shape), x.mask.expand(shape), x.n.expand(shape[:-1]), x.n_keys, False)
    y = Rows(y.weights.expand(shape), y.mask.expand(shape), y.n.expand(shape[:-1]), y.n_keys, False)
    return x, y, x.mask


def _pair(
    x: torch.Tensor,
    y: torch.Tensor,
    key_mask: torch.Tensor | None,
    zero_replacement: float | None,
) -> tuple[Rows, Rows, torch.Tensor, torch.Tensor]:
    """Validate a pair of row tensors; return both, their shared mask and zeros replaced."""
    try:
        torch.broadcast_shapes(x.shape, y.shape)
    except (RuntimeError, AttributeError) as error:
        raise IntervError(
            f"x and y must be tensors of broadcastable shapes [..., key]; got "
            f"{getattr(x, 'shape', type(x))} and {getattr(y, 'shape', type(y))}"
        ) from error
    first, zeros_x = _positive_parts(x, key_mask, zero_replacement)
    second, zeros_y = _positive_parts(y, key_mask, zero_replacement)
    first, second, mask = _same_mask(first, second)
    return first, second, mask, zeros_x + zeros_y


def clr(
    rows: torch.Tensor,
    *,
    key_mask: torch.Tensor | None = None,
    zero_replacement: float | None = None,
) -> torch.Tensor:
    """Centred log-ratio of each row over its available keys.

    Definition: ``clr(a)_i = log a_i - (1/n) sum_{j available} log a_j`` for available
    ``i``; 0 at masked keys (ragged masks: each row is centred over its own keys).

    Args:
        rows: ``[..., key]`` attention weights, summing to 1 over available keys.
        key_mask: optional bool, broadcastable to ``rows``; True = available key.
        zero_replacement: value in (0, 1) for exact zeros among available keys (then the
            row is re-closed); without it such zeros raise :class:`IntervError`.

    Returns:
        ``[..., key]`` float64 (broadcast shape), unit: nats of log-ratio, unbounded; each
        row sums to 0 over its available keys.
    """
    prepared, _ = _positive_parts(rows, key_mask, zero_replacement)
    return centred_log_ratio(prepared.weights, prepared.mask)


def aitchison_distance(
    x: torch.Tensor,
    y: torch.Tensor,
    *,
    key_mask: torch.Tensor | None = None,
    zero_replacement: float | None = None,
) -> torch.Tensor:
    """Aitchison distance between corresponding rows: ``||clr(x) - clr(y)||_2``.

    Args:
        x, y: ``[..., key]`` attention weights with broadcastable shapes.
        key_mask: optional bool broadcastable to both; True = available key. Masked keys
            are not parts of either composition.
        zero_replacement: value in (0, 1) for exact zeros (see :func:`clr`).

    Returns:
        Broadcast ``[...]`` float64 in ``[0, inf)``, unit: nats of log-ratio; 0 iff the
        rows are proportional over the available keys. Rows with ``n <= 1`` give 0.
    """
    first, second, mask, _ = _pair(x, y, key_mask, zero_replacement)
    return _distance(first, second, mask)


@dataclass(frozen=True, eq=False)
class AitchisonSplit:
    """Orthogonal split of the Aitchison distance into sink and content terms.

    All fields have the broadcast row shape without the key dim; distances are float64
    in nats of log-ratio.

    Attributes:
        distance: ``d(x, y)``, the Aitchison distance of the full rows.
        balance_term: ``|b(x) - b(y)|``, the change of the ilr balance between the sink
            parts and the content parts; 0 where either set is empty.
        within_sink_term: Aitchison distance of the sink sub-compositions (0 for a
            single sink position).
        content_term: Aitchison distance of the content sub-compositions, equal to the
            distance of the renormalized content rows (subcompositional coherence).
        n_zeros_replaced: int64, exact zeros replaced in ``x`` and ``y`` together (0
            without ``zero_replacement``).

    Identity (exact to float64 rounding): ``distance**2 == sink_term**2 + content_term**2``.
    """

    distance: torch.Tensor
    balance_term: torch.Tensor
    within_sink_term: torch.Tensor
    content_term: torch.Tensor
    n_zeros_replaced: torch.Tensor

    @property
    def sink_term(self) -> torch.Tensor:
        """``sqrt(balance_term**2 + within_sink_term**2)``: all the sink's share of ``d``."""
        return torch.hypot(self.balance_term, self.within_sink_term)


def _balance(
    weights: torch.Tensor, in_sink: torch.Tensor, in_content: torch.Tensor
) -> torch.Tensor:
    """``[...]`` ilr balance of sink parts against content parts (0 if either is empty)."""
    logs = torch.where(in_sink | in_content, weights, 1.0).log()
    r = in_sink.sum(dim=-1).to(torch.float64)
    c = in_content.sum(dim=-1).to(torch.float64)
    both = (r > 0) & (c > 0)
    r_safe, c_safe = r.clamp(min=1), c.clamp(min=1)
    log_ratio = (logs * in_sink).sum(dim=-1) / r_safe - (logs * in_content).sum(dim=-1) / c_safe
    scale = (r_safe * c_safe / (r_safe + c_safe)).sqrt()
    return torch.where(both, scale * log_ratio, 0.0)


def aitchison_split(
    x: torch.Tensor,
    y: torch.Tensor,
    *,
    sink: int | Sequence[int] | torch.Tensor = 0,
    key_mask: torch.Tensor | None = None,
    zero_replacement: float | None = None,
) -> AitchisonSplit:
    """Split the Aitchison distance of ``x`` and ``y`` into a sink and a content term.

    Args:
        x, y: ``[..., key]`` attention weights with broadcastable shapes.
        sink: the sink set ``S``: a key position, a sequence of positions, or a bool
            tensor over keys (as in :func:`interv.metrics.sink_split`); must be available keys.
        key_mask: optional bool broadcastable to both; True = available key.
        zero_replacement: value in (0, 1) for exact zeros (see :func:`clr`).

    Returns:
        An :class:`AitchisonSplit` with ``distance**2 == sink_term**2 + content_term**2``.
    """
    first, second, mask, n_zeros = _pair(x, y, key_mask, zero_replacement)
    in_sink = resolve_sink(sink, first) & mask
    in_content = mask & ~in_sink
    return AitchisonSplit(
        distance=_distance(first, second, mask),
        balance_term=(
            _balance(first.weights, in_sink, in_content)
            - _balance(second.weights, in_sink, in_content)
        ).abs(),
        within_sink_term=_distance(first, second, in_sink),
        content_term=_distance(first, second, in_content),
        n_zeros_replaced=n_zeros,
    )
