"""Attention sinks: separate the mass parked on sink keys from how the rest is spread.

Many heads park most of their mass on a *sink* (position 0, often BOS, or a set ``S``
of positions) and spread the rest over the content keys. The entropy of such a row
mixes two things; the grouping identity separates them exactly. With sink mass
``s = sum_{i in S} a_i`` and content distribution ``q = a_{not S} / (1 - s)``::

    H(a) = h(s) + s * H(a_S / s) + (1 - s) * H(q)

with ``h`` the binary entropy (``sink_term``); the middle term (``sink_internal_term``)
vanishes for a single sink position and the last is the ``content_term``.

Changes between two conditions (checkpoints, context lengths, models) split exactly
too. Writing ``d`` for after minus before and ``mean`` for the average of the two::

    dH = d h(s) + d[s H(a_S/s)] - ds * mean(H(q)) + (1 - mean(s)) * dH(q)
         \\________________ sink part _________________/  \\__ content part __/

This is exact (a product rule with symmetric weights: ``d(xy) = dx mean(y) + mean(x) dy``).
:func:`entropy_change` applies it per row (same row shapes), :func:`mean_entropy_change`
to the means over rows of two conditions whose rows may differ in length.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from interv.errors import IntervError
from interv.metrics._rows import (
    check_paired_rows,
    check_unit,
    divide_by_log_n,
    prepare_rows,
    resolve_sink,
)

__all__ = ["EntropyChange", "SinkSplit", "entropy_change", "mean_entropy_change", "sink_split"]


@dataclass(frozen=True, eq=False)
class SinkSplit:
    """The grouping split of each row; per-row fields have shape ``rows.shape[:-1]``, float64.

    Attributes:
        unit: ``"nats"`` or ``"bits"``, the unit of every entropy field.
        entropy: ``H(a)`` in ``unit``; NaN in rows with no available key.
        normalized_entropy: ``H(a) / log n`` in [0, 1], the same number as
            :func:`~interv.metrics.concentration.normalized_entropy`; NaN where ``n <= 1``.
        sink_mass: ``s`` in [0, 1], share of the row's mass on the sink keys.
        content: ``[..., key]`` the content distribution ``q``: sums to 1 over available
            non-sink keys, 0 at sink and masked keys; all NaN in rows whose content mass
            is 0 (undefined).
        sink_term: ``h(s)`` in ``unit``, in ``[0, log 2]``.
        sink_internal_term: ``s * H(a_S / s)`` in ``unit``; 0 for a single sink position.
        content_term: ``(1 - s) * H(q)`` in ``unit``; 0 where the content mass is 0.
        content_entropy: ``H(q)`` in ``unit``, in ``[0, log(n - |S|)]``; NaN where the
            content mass is 0.
        content_normalized_entropy: ``H(q) / log(n - |S|)`` in [0, 1]; NaN where the
            content mass is 0 or fewer than 2 content keys are available.
        n_content: int64 number of available non-sink keys ``n - |S|``.

    Identity (exact to float64 rounding):
    ``entropy == sink_term + sink_internal_term + content_term``.
    """

    unit: str
    entropy: torch.Tensor
    normalized_entropy: torch.Tensor
    sink_mass: torch.Tensor
    content: torch.Tensor
    sink_term: torch.Tensor
    sink_internal_term: torch.Tensor
    content_term: torch.Tensor
    content_entropy: torch.Tensor
    content_normalized_entropy: torch.Tensor
    n_content: torch.Tensor

    @property
    def n_undefined_content(self) -> int:
        """Number of rows whose content entropy is NaN (content mass 0)."""
        return int(self.content_entropy.isnan().sum())


def sink_split(
    rows: torch.Tensor,
    *,
    sink: int | Sequence[int] | torch.Tensor = 0,
    key_mask: torch.Tensor | None = None,
    unit: str = "nats",
    allow_deficit: bool = False,
) -> SinkSplit:
    """Split each row's entropy into a sink part and a content part (grouping identity).

    Args:
        rows: ``[..., key]`` attention weights (e.g. ``[batch, head_index, query_pos,
            key_pos]``), summing to 1 over available keys.
        sink: the sink set ``S``: a key position, a sequence of positions, or a bool
            tensor over keys (``[key]`` or broadcastable to ``rows``, for per-row sinks
            such as the BOS position under left padding). Sink keys must be available.
        key_mask: optional bool, broadcastable to ``rows``; True = available key.
        unit: ``"nats"`` or ``"bits"``.
        allow_deficit: accept rows summing to less than 1; the deficit is the mass of an
            off-row learned sink and always counts as sink mass (``content`` keeps the
            input's key dim).

    Returns:
        A :class:`SinkSplit` whose fields satisfy
        ``entropy == sink_term + sink_internal_term + content_term``.
    """
    divisor = check_unit(unit)
    prepared = prepare_rows(rows, key_mask, allow_deficit=allow_deficit)
    in_sink = resolve_sink(sink, prepared)
    weights = prepared.weights
    in_content = prepared.mask & ~in_sink
    sink_weights = torch.where(in_sink, weights, 0.0)
    content_weights = torch.where(in_content, weights, 0.0)
    sink_mass = sink_weights.sum(dim=-1)
    content_mass = content_weights.sum(dim=-1)
    has_content = content_mass > 0
    safe_sink_mass = torch.where(sink_mass > 0, sink_mass, 1.0).unsqueeze(-1)
    safe_content_mass = torch.where(has_content, content_mass, 1.0).unsqueeze(-1)

    entropy_nats = torch.special.entr(weights).sum(dim=-1)
    sink_term = torch.special.entr(sink_mass) + torch.special.entr(content_mass)
    # -sum a log(a / total) written as sum a log(total / a): exact zeros give 0, not -0
    sink_internal = torch.special.xlogy(sink_weights, safe_sink_mass / sink_weights).sum(dim=-1)
    content_term = torch.special.xlogy(content_weights, safe_content_mass / content_weights).sum(
        dim=-1
    )
    content_entropy = torch.where(has_content, content_term / safe_content_mass[..., 0], torch.nan)
    n_content = in_content.sum(dim=-1)
    content_normalized = divide_by_log_n(content_entropy, n_content)
    content = torch.where(has_content.unsqueeze(-1), content_weights / safe_content_mass, torch.nan)
    empty = prepared.empty
    return SinkSplit(
        unit=unit,
        entropy=torch.where(empty, torch.nan, entropy_nats / divisor),
        normalized_entropy=divide_by_log_n(entropy_nats, prepared.n),
        sink_mass=torch.where(empty, torch.nan, sink_mass),
        content=prepared.real_keys(content),
        sink_term=torch.where(empty, torch.nan, sink_term / divisor),
        sink_internal_term=torch.where(empty, torch.nan, sink_internal / divisor),
        content_term=torch.where(empty, torch.nan, content_term / divisor),
        content_entropy=content_entropy / divisor,
        content_normalized_entropy=content_normalized,
        n_content=n_content,
    )


@dataclass(frozen=True, eq=False)
class EntropyChange:
    """Exact split of ``dH = H(after) - H(before)`` into a sink part and a content part.

    All fields are float64 in ``unit``, of the broadcast row shape (per-row split) or
    0-d (split of means). With ``mean(x) = (x_before + x_after) / 2``:

    Attributes:
        unit: ``"nats"`` or ``"bits"``.
        total: ``H(after) - H(before)``.
        sink_term_change: ``d h(s)``, change of the binary entropy of the sink mass.
        sink_internal_change: ``d[s H(a_S/s)]``; 0 for a single sink position.
        sink_growth: ``-ds * mean(H(q))``: entropy lost (or gained) because mass moved
            onto (or off) the sink, at the average content entropy.
        content_part: ``(1 - mean(s)) * dH(q)``: change of how the content mass is spread
            (negative = the content sharpened), weighted by the average content share.
        sink_part: ``sink_term_change + sink_internal_change + sink_growth``.

    Identity (exact to float64 rounding): ``total == sink_part + content_part``.
    Where the content entropy is undefined in one condition (content mass 0), the
    other condition's content entropy stands in for it, so ``dH(q) = 0`` and the whole
    change is attributed to the sink (the identity holds for any stand-in because its
    coefficient is 0 there).
    """

    unit: str
    total: torch.Tensor
    sink_term_change: torch.Tensor
    sink_internal_change: torch.Tensor
    sink_growth: torch.Tensor
    content_part: torch.Tensor

    @property
    def sink_part(self) -> torch.Tensor:
        """``sink_term_change + sink_internal_change + sink_growth``, in ``unit``."""
        return self.sink_term_change + self.sink_internal_change + self.sink_growth


def _symmetric_split(
    unit: str,
    entropy: tuple[torch.Tensor, torch.Tensor],
    sink_term: tuple[torch.Tensor, torch.Tensor],
    sink_internal: tuple[torch.Tensor, torch.Tensor],
    sink_mass: tuple[torch.Tensor, torch.Tensor],
    content_entropy: tuple[torch.Tensor, torch.Tensor],
) -> EntropyChange:
    """Apply the symmetric product-rule split to (before, after) pairs of quantities."""
    content_before, content_after = content_entropy
    content_before, content_after = (
        torch.where(content_before.isnan(), content_after, content_before),
        torch.where(content_after.isnan(), content_before, content_after),
    )
    both_undefined = content_before.isnan()
    content_before = torch.where(both_undefined, 0.0, content_before)
    content_after = torch.where(both_undefined, 0.0, content_after)
    mass_change = sink_mass[1] - sink_mass[0]
    mean_mass = (sink_mass[0] + sink_mass[1]) / 2
    return EntropyChange(
        unit=unit,
        total=entropy[1] - entropy[0],
        sink_term_change=sink_term[1] - sink_term[0],
        sink_internal_change=sink_internal[1] - sink_internal[0],
        sink_growth=-mass_change * (content_before + content_after) / 2,
        content_part=(1 - mean_mass) * (content_after - content_before),
    )


def entropy_change(
    before: torch.Tensor,
    after: torch.Tensor,
    *,
    sink: int | Sequence[int] | torch.Tensor = 0,
    key_mask: torch.Tensor | None = None,
    unit: str = "nats",
    allow_deficit: bool = False,
) -> EntropyChange:
    """Per-row exact split of ``H(after) - H(before)`` into sink and content parts.

    Args:
        before, after: ``[..., key]`` attention weights of the two conditions for the
            same rows (same key positions); their shapes broadcast (else IntervError).
        sink: the sink set, as in :func:`sink_split`.
        key_mask: optional bool broadcastable to both; True = available key.
        unit: ``"nats"`` or ``"bits"``.
        allow_deficit: accept rows summing to less than 1 (off-row sink mass).

    Returns:
        An :class:`EntropyChange` with per-row fields (shape: the broadcast rows shape
        without the key dim) and ``total == sink_part + content_part``. For rows of
        different lengths, compare condition means with :func:`mean_entropy_change`.
    """
    check_paired_rows(before, after)
    options = {"sink": sink, "key_mask": key_mask, "unit": unit, "allow_deficit": allow_deficit}
    first, second = sink_split(before, **options), sink_split(after, **options)
    return _symmetric_split(
        unit,
        (first.entropy, second.entropy),
        (first.sink_term, second.sink_term),
        (first.sink_internal_term, second.sink_internal_term),
        (first.sink_mass, second.sink_mass),
        (first.content_entropy, second.content_entropy),
    )


def mean_entropy_change(before: SinkSplit, after: SinkSplit) -> EntropyChange:
    """Exact split of the change of the *mean* row entropy between two conditions.

    The conditions may have any shapes (two context lengths, two models, different
    numbers of prompts): each is summarised by the mean over all its rows with at least
    one available key. Means of products are not products of means, so the split is
    applied to quantities that are themselves means::

        mean H = mean h(s) + mean[s H(a_S/s)] + mean[(1-s) H(q)]
        mean[(1-s) H(q)] = (1 - mean s) * Hq_w,   Hq_w = mean[(1-s) H(q)] / (1 - mean s)

    ``Hq_w`` is the content entropy weighted by content mass (rows with no content mass
    weigh nothing). The symmetric product rule on ``(1 - mean s) * Hq_w`` then splits
    ``d mean H`` exactly: ``sink_growth = -d(mean s) * avg(Hq_w)``,
    ``content_part = (1 - avg(mean s)) * d Hq_w``, with ``avg`` over the two conditions.

    Args:
        before, after: :class:`SinkSplit` of each condition, in the same unit.

    Returns:
        An :class:`EntropyChange` with 0-d fields and ``total == sink_part + content_part``
        exactly (to float64 rounding), ``total`` being the change of the mean entropy.
    """
    if before.unit != after.unit:
        raise IntervError(
            f"both splits must use the same unit; got {before.unit!r} before and "
            f"{after.unit!r} after (choose one of 'nats', 'bits')"
        )
    means = []
    for split in (before, after):
        defined = ~split.entropy.isnan()
        if not bool(defined.any()):
            raise IntervError(
                "a condition has no row with an available key; expected at least one row "
                "with key_mask True somewhere"
            )
        sink_mass = split.sink_mass[defined].mean()
        content_term = split.content_term[defined].mean()
        content_mass = 1 - sink_mass
        weighted = torch.where(content_mass > 0, content_term / content_mass, torch.nan)
        means.append(
            (
                split.entropy[defined].mean(),
                split.sink_term[defined].mean(),
                split.sink_internal_term[defined].mean(),
                sink_mass,
                weighted,
            )
        )
    return _symmetric_split(before.unit, *zip(*means, strict=True))
