"""What a report says about the screens behind its rows: one summary per screen.

A screened run (:mod:`interv.engine.screening`) intervenes exactly only on the screen's
verified top and its audit sample; every other row is an estimate by the screen's estimator
(:meth:`interv.audit.Screen.estimate_sentence`). The report keeps each screen's audit as a
:class:`ScreenSummary` (sites checked, misses, the one-sided bound, the rank agreement of
estimate and exact with its interval, what stopped the verification) and prints it beside
the rows. No model; internal to :mod:`interv.report` except :class:`ScreenSummary`, which a
saved report holds.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Sequence

    from interv.engine.results import ScreenOutcome

__all__ = ["ScreenSummary", "estimate_note", "summarize"]


@dataclass(frozen=True)
class ScreenSummary:
    """One screen's audit, as plain numbers (see :class:`interv.audit.Audit`).

    Attributes:
        label: the candidates, e.g. ``"270 zero_ablation interventions"``.
        method: the screen's estimator, e.g. ``"attribution (first-order)"``
            (:attr:`interv.audit.Audit.method`).
        n_candidates, n_verified, n_audited, n_checked: candidates, verified in estimate
            order, audited uniformly at random, intervened on in all.
        top_k: the size of the reported exact top.
        threshold: the ``top_k``-th largest verified ``|effect|``, metric unit.
        misses: audited candidates above the threshold; miss_rate: misses / audited.
        miss_bound: one-sided Clopper-Pearson upper bound of the miss rate at ``level``;
            miss_bound_corrected: the same, Bonferroni-corrected over ``looks``.
        level: confidence level; alpha: the target the bound had to fall below (None:
            one look).
        looks: how often the bound was computed; stopped_by: what ended verification.
        rank_agreement, rank_low, rank_high: Spearman's rho of estimate and exact over
            the checked candidates, with its bootstrap interval (NaN below 5 checked).
        sentence: all of it in one sentence.
    """

    label: str
    method: str
    n_candidates: int
    n_verified: int
    n_audited: int
    n_checked: int
    top_k: int
    threshold: float
    misses: int
    miss_rate: float
    miss_bound: float
    miss_bound_corrected: float
    level: float
    alpha: float | None
    looks: int
    stopped_by: str
    rank_agreement: float
    rank_low: float
    rank_high: float
    sentence: str


def summarize(outcome: ScreenOutcome) -> ScreenSummary:
    """The :class:`ScreenSummary` of a result's screen."""
    audit = outcome.audit
    low, high = audit.rank_interval
    return ScreenSummary(
        label=outcome.label,
        method=audit.method,
        n_candidates=audit.n_candidates,
        n_verified=audit.n_verified,
        n_audited=int(audit.audited.numel()),
        n_checked=audit.n_checked,
        top_k=audit.screen.top_k,
        threshold=audit.threshold,
        misses=audit.misses,
        miss_rate=audit.miss_rate,
        miss_bound=audit.miss_bound,
        miss_bound_corrected=audit.miss_bound_corrected,
        level=audit.screen.level,
        alpha=audit.screen.alpha,
        looks=audit.looks,
        stopped_by=audit.stopped_by,
        rank_agreement=audit.rank_agreement,
        rank_low=low,
        rank_high=high,
        sentence=outcome.describe(),
    )


def estimate_note(n_estimated: int, n_rows: int, sentences: Sequence[str]) -> str:
    """The report's note on its estimated rows; ``sentences``: how they were estimated (the
    distinct :attr:`~interv.report.data.ReportRow.estimate` of the rows)."""
    return (
        f"{n_estimated} of {n_rows} rows are estimates, not intervention results: "
        f"{'; '.join(sentences)} (flag 'estimated, not intervened'); they are listed in the full "
        "table only and never ranked: the agreement, the most instructive rows, the heatmaps, "
        "the scatters and the wide table use the exact rows, and sorting the table by effect "
        "puts estimates last. The screens' audits say what the estimates could have missed."
    )
