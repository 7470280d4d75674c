"""Flags: rules that mark rows where concentration and causation could be confused.

Each flag has a rule written with its thresholds, and the rule is printed in every
report next to the rows it marks. Effects are judged relative to the task's
*effect scale*, ``|mean clean metric - mean corrupted metric|`` (the metric's unit):
the size of the behaviour the prompt pairs separate.

- **concentrated, little effect**: normalized entropy at most
  ``concentrated_at_most`` and ``|effect| <= near_zero_fraction * scale``.
- **diffuse, large effect**: normalized entropy at least ``diffuse_at_least`` and
  ``|effect| >= large_fraction * scale``.
- **sink-dominated**: sink mass above ``sink_mass_above``: the head's entropy then
  mostly measures how much it parks on the sink, not how it spreads over content.
- **baseline-sensitive**: the head has rows of two or more ablation baselines (kinds of
  family ``"ablation"``: zero, mean, resample, or a registered one) and their mean effects
  span more than ``baseline_margin_fraction * scale`` (max - min).
- **estimated, not intervened**: a screened run left the row as its screen's estimate
  (the row's semantics names the estimator), not an intervention result; such rows are
  never ranked with exact ones.

Concentration flags use the head's mean over prompts at the report's query positions.
"""

from __future__ import annotations

from dataclasses import dataclass

from interv.errors import IntervError

__all__ = [
    "BASELINE_SENSITIVE",
    "CONCENTRATED_LITTLE_EFFECT",
    "DIFFUSE_LARGE_EFFECT",
    "ESTIMATED_FLAG",
    "FLAGS",
    "SINK_DOMINATED",
    "FlagRules",
]

CONCENTRATED_LITTLE_EFFECT = "concentrated, little effect"
DIFFUSE_LARGE_EFFECT = "diffuse, large effect"
SINK_DOMINATED = "sink-dominated"
BASELINE_SENSITIVE = "baseline-sensitive"
ESTIMATED_FLAG = "estimated, not intervened"
FLAGS: tuple[str, ...] = (
    CONCENTRATED_LITTLE_EFFECT,
    DIFFUSE_LARGE_EFFECT,
    SINK_DOMINATED,
    BASELINE_SENSITIVE,
    ESTIMATED_FLAG,
)
"""Every flag a report can raise."""


@dataclass(frozen=True)
class FlagRules:
    """Thresholds of the flags (see the module docstring for the rules).

    Attributes:
        concentrated_at_most: normalized entropy (fraction of log n, in [0, 1]) at or
            below which a head counts as concentrated.
        diffuse_at_least: normalized entropy at or above which a head counts as diffuse.
        near_zero_fraction: ``|effect|`` at most this fraction of the effect scale is
            "near zero".
        large_fraction: ``|effect|`` at least this fraction of the effect scale is "large".
        sink_mass_above: sink mass (fraction of the row) above which a head is
            sink-dominated.
        baseline_margin_fraction: spread of the zero/mean/resample mean effects, as a
            fraction of the effect scale, above which a head is baseline-sensitive.
    """

    concentrated_at_most: float = 0.3
    diffuse_at_least: float = 0.7
    near_zero_fraction: float = 0.1
    large_fraction: float = 0.5
    sink_mass_above: float = 0.5
    baseline_margin_fraction: float = 0.25

    def __post_init__(self) -> None:
        for name in ("concentrated_at_most", "diffuse_at_least", "sink_mass_above"):
            value = getattr(self, name)
            if not 0 <= value <= 1:
                raise IntervError(f"FlagRules.{name} must lie in [0, 1]; got {value}")
        for name in ("near_zero_fraction", "large_fraction", "baseline_margin_fraction"):
            value = getattr(self, name)
            if not value >= 0:
                raise IntervError(f"FlagRules.{name} must be >= 0; got {value}")
        if self.concentrated_at_most >= self.diffuse_at_least:
            raise IntervError(
                "FlagRules.concentrated_at_most must be below diffuse_at_least; got "
                f"{self.concentrated_at_most} >= {self.diffuse_at_least}"
            )
        if self.near_zero_fraction >= self.large_fraction:
            raise IntervError(
                "FlagRules.near_zero_fraction must be below large_fraction; got "
                f"{self.near_zero_fraction} >= {self.large_fraction}"
            )

    def rules(self, effect_scale: float, unit: str) -> dict[str, str]:
        """Flag -> its rule as one sentence with the thresholds in ``unit``."""
        near = self.near_zero_fraction * effect_scale
        large = self.large_fraction * effect_scale
        margin = self.baseline_margin_fraction * effect_scale
        return {
            CONCENTRATED_LITTLE_EFFECT: (
                f"normalized entropy <= {self.concentrated_at_most:g} and |effect| <= "
                f"{self.near_zero_fraction:g} x effect scale = {near:.4g} {unit}"
            ),
            DIFFUSE_LARGE_EFFECT: (
                f"normalized entropy >= {self.diffuse_at_least:g} and |effect| >= "
                f"{self.large_fraction:g} x effect scale = {large:.4g} {unit}"
            ),
            SINK_DOMINATED: (
                f"sink mass > {self.sink_mass_above:g} of the row: the entropy mostly "
                "measures the mass parked on the sink"
            ),
            BASELINE_SENSITIVE: (
                "two or more ablation baselines of the head (zero, mean, resample) differ in "
                f"mean effect by more than {self.baseline_margin_fraction:g} x effect scale = "
                f"{margin:.4g} {unit} (max - min)"
            ),
            ESTIMATED_FLAG: (
                "a screen left the value as its estimate (the row's semantics names the "
                "estimator), not an intervention result; estimated rows are listed but never "
                "ranked: the agreement, the most instructive rows, the heatmaps, scatters and "
                "the wide table use exact rows only, and the table sorts them after the exact "
                "ones"
            ),
        }
