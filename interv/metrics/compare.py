"""Compare attention rows under two conventions: with the sink, and without it.

Two heads (or one head in two conditions) that both park most mass on the sink look
alike on raw rows even when they read completely different content keys; two heads
with the same content preference look different when their sink masses differ.
Any similarity verdict is therefore computed under both conventions:

- ``"keep_sink"``: the raw rows over all available keys;
- ``"drop_sink"``: the content distributions ``q = a_{not S} / (1 - s)`` over the
  available non-sink keys (rows with no content mass give NaN).

Measures (per row, over the keys of the convention):

- ``"cosine"``: cosine similarity ``<x, y> / (|x| |y|)``, a *similarity* in [0, 1]
  (1 = proportional rows), unitless;
- ``"js"``: Jensen-Shannon divergence ``(KL(x||m) + KL(y||m)) / 2`` with
  ``m = (x + y) / 2``, a *distance-like* divergence in ``[0, log 2]`` in ``unit``
  (nats: [0, 0.693]; bits: [0, 1]);
- ``"aitchison"``: Aitchison distance (see :mod:`interv.metrics.compositional`), a
  *distance* in ``[0, inf)`` in nats of log-ratio; under ``"drop_sink"`` it equals the
  ``content_term`` of :func:`interv.metrics.aitchison_split`.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from interv.metrics._rows import check_unit, choose, prepare_rows, resolve_sink
from interv.metrics.compositional import centred_log_ratio, replace_zeros

__all__ = ["CONVENTIONS", "MEASURES", "compare_rows"]

MEASURES = ("cosine", "js", "aitchison")
CONVENTIONS = ("keep_sink", "drop_sink")


def _convention_rows(
    rows: torch.Tensor,
    key_mask: torch.Tensor | None,
    convention: str,
    sink: int | Sequence[int] | torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor]:
    """``[..., key]`` float64 rows and mask under ``convention`` (NaN rows if undefined)."""
    prepared = prepare_rows(rows, key_mask)
    if convention == "keep_sink":
        undefined = prepared.empty.unsqueeze(-1)
        return torch.where(undefined, torch.nan, prepared.weights), prepared.mask
    content_mask = prepared.mask & ~resolve_sink(sink, prepared)
    content = torch.where(content_mask, prepared.weights, 0.0)
    mass = content.sum(dim=-1, keepdim=True)
    return torch.where(mass > 0, content / mass, torch.nan), content_mask


def _cosine(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return (x * y).sum(dim=-1) / (x.norm(dim=-1) * y.norm(dim=-1))


def _jensen_shannon(x: torch.Tensor, y: torch.Tensor, divisor: float) -> torch.Tensor:
    middle = (x + y) / 2
    safe_middle = torch.where(middle > 0, middle, 1.0)
    divergence = torch.special.xlogy(x, x / safe_middle) + torch.special.xlogy(y, y / safe_middle)
    return divergence.sum(dim=-1) / 2 / divisor


def compare_rows(
    x: torch.Tensor,
    y: torch.Tensor,
    *,
    measure: str,
    convention: str,
    sink: int | Sequence[int] | torch.Tensor = 0,
    key_mask: torch.Tensor | None = None,
    unit: str = "nats",
    zero_replacement: float | None = None,
) -> torch.Tensor:
    """Compare corresponding rows of ``x`` and ``y`` with one measure under one convention.

    Args:
        x, y: ``[..., key]`` attention weights with broadcastable shapes.
        measure: ``"cosine"`` (similarity, unitless, [0, 1]), ``"js"`` (Jensen-Shannon
            divergence in ``unit``, [0, log 2]) or ``"aitchison"`` (distance in nats of
            log-ratio, [0, inf)).
        convention: ``"keep_sink"`` (raw rows) or ``"drop_sink"`` (content rows,
            renormalized over available non-sink keys).
        sink: the sink set for ``"drop_sink"``, as in :func:`interv.metrics.sink_split`.
        key_mask: optional bool broadcastable to both; True = available key.
        unit: ``"nats"`` or ``"bits"``; used by ``"js"`` only.
        zero_replacement: value in (0, 1) for exact zeros under ``"aitchison"`` (see
            :func:`interv.metrics.clr`); without it such zeros raise :class:`IntervError`.

    Returns:
        Broadcast ``[...]`` float64, one value per row pair; NaN where a row has no
        available key or, under ``"drop_sink"``, no content mass.
    """
    choose(measure, MEASURES, "measure")
    choose(convention, CONVENTIONS, "convention")
    divisor = check_unit(unit)
    first, mask = _convention_rows(x, key_mask, convention, sink)
    second, second_mask = _convention_rows(y, key_mask, convention, sink)
    first, second = torch.broadcast_tensors(first, second)
    mask = mask & second_mask
    if measure == "cosine":
        return _cosine(first, second)
    if measure == "js":
        return _jensen_shannon(first, second, divisor)
    defined = ~(first.isnan() | second.isnan()).any(dim=-1, keepdim=True)
    parts = mask & defined
    first, _ = replace_zeros(torch.where(defined, first, 1.0), parts, zero_replacement)
    second, _ = replace_zeros(torch.where(defined, second, 1.0), parts, zero_replacement)
    difference = centred_log_ratio(first, parts) - centred_log_ratio(second, parts)
    distance = difference.square().sum(dim=-1).sqrt()
    return torch.where(defined[..., 0], distance, torch.nan)
