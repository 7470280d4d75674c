"""Which rows of a report raise which flags (the rules and thresholds: :mod:`interv.flags`)."""

from __future__ import annotations

import math
from collections.abc import Sequence

from interv.engine.registry import kind_of
from interv.errors import IntervError
from interv.flags import (
    BASELINE_SENSITIVE,
    CONCENTRATED_LITTLE_EFFECT,
    DIFFUSE_LARGE_EFFECT,
    SINK_DOMINATED,
    FlagRules,
)

__all__ = ["assign_flags", "is_ablation", "reports_recovery"]


def reports_recovery(kind: str) -> bool:
    """Whether rows of intervention class ``kind`` carry a normalized recovery (patches
    between the two runs of a task, as the kind's class declares)."""
    registered = kind_of(kind)
    return registered is not None and registered.cls.reports_recovery


def is_ablation(kind: str) -> bool:
    """Whether intervention class ``kind`` is a registered ablation baseline (family
    ``"ablation"``)."""
    registered = kind_of(kind)
    return registered is not None and registered.cls.family == "ablation"


def assign_flags(
    *,
    kinds: Sequence[str],
    heads: Sequence[tuple[int, int] | None],
    effect_means: Sequence[float],
    normalized_entropy: Sequence[float | None],
    sink_mass: Sequence[float | None],
    effect_scale: float,
    rules: FlagRules,
) -> tuple[tuple[str, ...], ...]:
    """The flags of each row, in the order of :data:`FLAGS`.

    Args:
        kinds: intervention class name of each row.
        heads: ``(layer, head)`` of each row, None for rows that are not one head.
        effect_means: mean effect of each row, in the metric's unit.
        normalized_entropy: the head's mean normalized entropy (None: no head).
        sink_mass: the head's mean sink mass (None: no head).
        effect_scale: ``|mean clean - mean corrupted|`` in the metric's unit; effect
            flags are never raised when it is 0 or NaN (no scale to judge "near zero").
        rules: the thresholds.
    """
    lengths = {len(kinds), len(heads), len(effect_means), len(normalized_entropy), len(sink_mass)}
    if len(lengths) != 1:
        raise IntervError(f"assign_flags needs one entry per row in every argument; got {lengths}")
    has_scale = math.isfinite(effect_scale) and effect_scale > 0
    ablation_means: dict[tuple[int, int], dict[str, float]] = {}
    ablations = {kind: is_ablation(kind) for kind in set(kinds)}
    for kind, head, effect in zip(kinds, heads, effect_means, strict=True):
        if head is not None and ablations[kind]:
            ablation_means.setdefault(head, {})[kind] = effect
    sensitive = {
        head
        for head, by_kind in ablation_means.items()
        if has_scale
        and len(by_kind) >= 2
        and max(by_kind.values()) - min(by_kind.values())
        > rules.baseline_margin_fraction * effect_scale
    }
    flags = []
    for kind, head, effect, entropy, sink in zip(
        kinds, heads, effect_means, normalized_entropy, sink_mass, strict=True
    ):
        row: list[str] = []
        size = abs(effect)
        if has_scale and entropy is not None and math.isfinite(entropy):
            if (
                entropy <= rules.concentrated_at_most
                and size <= rules.near_zero_fraction * effect_scale
            ):
                row.append(CONCENTRATED_LITTLE_EFFECT)
            if entropy >= rules.diffuse_at_least and size >= rules.large_fraction * effect_scale:
                row.append(DIFFUSE_LARGE_EFFECT)
        if sink is not None and math.isfinite(sink) and sink > rules.sink_mass_above:
            row.append(SINK_DOMINATED)
        if head in sensitive and ablations[kind]:
            row.append(BASELINE_SENSITIVE)
        flags.append(tuple(row))
    return tuple(flags)
