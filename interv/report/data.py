"""A report's data: its scope header, its rows (effect beside concentration) and the
queries the renderers read (:class:`ReportData`); :func:`interv.report.table.build_report`
builds it, :class:`~interv.report.report.Report` (its subclass) displays it.

The renderers (:mod:`interv.report.render`, :mod:`interv.report.page`, ...) are typed with
:class:`ReportData` and imported by :class:`~interv.report.report.Report` only: the data
imports no renderer, so no import runs in a circle, not even one read by a type checker.
A saved ``report.json`` is read back by :meth:`ReportData.from_dict` through its fields'
annotations (:mod:`interv._schema`).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Annotated, Any, Self

import torch

from interv._checks import as_int, check_index
from interv._pandas import positions_text, require_pandas
from interv._schema import AtLeast, Finite, Within, parse
from interv.audit import ESTIMATED
from interv.engine.registry import kind_of
from interv.engine.results import EXACT
from interv.engine.sites import Site
from interv.errors import IntervError
from interv.flags import FlagRules
from interv.provenance import Provenance
from interv.report.agreement import AGREEMENT_CAVEAT, Agreement
from interv.report.flags import is_ablation
from interv.report.screens import ScreenSummary
from interv.report.sections import (
    BaselineCount,
    DecompositionRow,
    InteractionRow,
    PathRow,
    RankedHead,
    SectionTable,
    baseline_counts,
    baseline_note,
    ordinal,
    ranked_heads,
    section_tables,
)

if TYPE_CHECKING:
    import pandas


__all__ = ["ReportData", "ReportHeader", "ReportRow"]


Count = Annotated[int, AtLeast(0)]
Positive = Annotated[int, AtLeast(1)]
Number = Annotated[float, Finite()]
"""A number a report always has (its rows' NaN fields are plain ``float``: no value)."""


def _close(a: float, b: float) -> bool:
    return math.isclose(a, b, rel_tol=1e-4, abs_tol=1e-6 * max(1.0, abs(a), abs(b)))


@dataclass(frozen=True)
class ReportHeader:
    """The scope every number of a report is about (model, task, positions, units)."""

    model: str
    task: str
    n_prompts: Positive
    n_positions: Positive
    padding_side: str
    n_layers: Positive
    n_heads: Positive
    query_positions: str
    mask_rule: str
    sink_positions: tuple[Count, ...]
    sink_convention: str
    aggregation: str
    metric_name: str
    metric_unit: str
    metric_definition: str
    effect_definition: str
    recovery_definition: str
    clean_mean: float
    corrupted_mean: float
    effect_scale: Annotated[float, Within(0.0)]
    n_undefined_recovery: Count
    n_bootstrap: Positive
    ci_level: Annotated[float, Finite(), Within(0.0, 1.0)]
    seed: int
    concentration_units: dict[str, str]
    n_undefined_concentration: dict[str, Count]
    interv_version: str

    def __post_init__(self) -> None:
        if not 0 < self.ci_level < 1:
            raise IntervError(f"ci_level must lie in (0, 1); got {self.ci_level}")
        if any(p >= self.n_positions for p in self.sink_positions):
            raise IntervError(
                f"sink_positions {list(self.sink_positions)} reach beyond the "
                f"{self.n_positions} positions"
            )


@dataclass(frozen=True)
class ReportRow:
    """One (site, intervention): its effect beside the head's concentration.

    Attributes:
        index: the intervention's index in the engine's result(s), in order.
        kind: intervention class name; semantics: its one-sentence semantics.
        base_run: the run it modified; site: component, layer, head, positions (None:
            the intervention is not filed under one site, e.g. several heads at once).
        effect_mean, effect_ci_low, effect_ci_high, effect_std, effect_min,
            effect_max: the effect over prompts, in the metric's unit.
        recovery: normalized recovery of the prompt-mean metric (patches only).
        concentration: metric name -> head mean over prompts (None: not one head).
        concentration_std: metric name -> standard deviation over prompts.
        flags: the flags this row raises.
        per_prompt_effect: the effect on each prompt, metric unit.
        status: how the effect was obtained: ``"exact"``, ``"exact (verified)"``,
            ``"exact (audit)"`` (intervened on) or ``"estimated"`` (a screen's estimate,
            not intervened: flagged, never ranked).
        estimate: for an estimated row, the sentence of its screen's estimator (e.g.
            ``"estimated by attribution (first-order), not intervened"``,
            :meth:`~interv.engine.results.InterventionResult.estimate_sentence`); ``""`` for
            an exact row and in reports saved before rows carried it.
    """

    index: Count
    kind: str
    semantics: str
    base_run: str
    site: Site | None
    effect_mean: float
    effect_ci_low: float
    effect_ci_high: float
    effect_std: Annotated[float, Within(0.0)]
    effect_min: float
    effect_max: float
    recovery: float | None
    concentration: dict[str, float] | None
    concentration_std: dict[str, Annotated[float, Within(0.0)]] | None
    flags: tuple[str, ...]
    per_prompt_effect: tuple[float, ...]
    status: str = EXACT
    estimate: str = ""

    def __post_init__(self) -> None:
        if self.estimate and self.status != ESTIMATED:
            raise IntervError(
                f"row {self.index}: estimate {self.estimate!r} is given for a value of status "
                f"{self.status!r}; only {ESTIMATED!r} rows are estimated"
            )
        effect = [x for x in self.per_prompt_effect if not math.isnan(x)]
        if not effect:
            return
        low, high, mean = min(effect), max(effect), sum(effect) / len(effect)
        for name, value, expected in (
            ("effect_min", self.effect_min, low),
            ("effect_max", self.effect_max, high),
            ("effect_mean", self.effect_mean, mean),
        ):
            if not _close(value, expected):
                raise IntervError(
                    f"row {self.index}: {name} is {value!r} but its per_prompt_effect gives "
                    f"{expected!r}"
                )
        if self.effect_ci_low > self.effect_ci_high:  # NaN (no interval) compares False
            raise IntervError(
                f"row {self.index}: effect_ci_low {self.effect_ci_low} is above effect_ci_high "
                f"{self.effect_ci_high}"
            )

    @property
    def exact(self) -> bool:
        """False for a screen's estimate (not an intervention result)."""
        return self.status != ESTIMATED

    @property
    def label(self) -> str:
        """The site's label (``L1H3``, ``L1 resid_pre@4``), ``-`` without a site."""
        return "-" if self.site is None else self.site.label

    @property
    def head(self) -> tuple[int, int] | None:
        """``(layer, head)`` of a row about one head at all positions, else None."""
        site = self.site
        if site is None or site.head is None or site.positions is not None:
            return None
        return (site.layer, site.head)


@dataclass(frozen=True)
class ReportData:
    """A report's data: scope header, rows, flag rules, agreement, and the sections that join
    rows (direct/indirect decomposition, path patches, pairwise interactions, see
    :mod:`interv.report.sections`), with the queries the renderers read. The report users
    hold is its subclass :class:`~interv.report.report.Report`, which displays itself.

    ``provenance`` is the join (:func:`interv.provenance.join`) of the effects' and the
    concentration's: the model, its weights and dtype, the prompts, the pairs and the metric
    every number is about.
    """

    header: ReportHeader
    rows: tuple[ReportRow, ...]
    flag_rules: FlagRules
    rules_text: dict[str, str]
    agreement: tuple[Agreement, ...]
    provenance: Provenance
    agreement_caveat: str = AGREEMENT_CAVEAT
    notes: tuple[str, ...] = field(default=())
    decomposition: tuple[DecompositionRow, ...] = field(default=())
    paths: tuple[PathRow, ...] = field(default=())
    interactions: tuple[InteractionRow, ...] = field(default=())
    interaction_semantics: str = ""
    screens: tuple[ScreenSummary, ...] = field(default=())

    def __post_init__(self) -> None:
        h = self.header
        for i, row in enumerate(self.rows):
            if len(row.per_prompt_effect) != h.n_prompts:
                raise IntervError(
                    f"rows[{i}].per_prompt_effect holds {len(row.per_prompt_effect)} values for "
                    f"the header's n_prompts {h.n_prompts}"
                )
            site = row.site
            if site is not None and (
                (site.layer is not None and site.layer >= h.n_layers)
                or (site.head is not None and site.head >= h.n_heads)
            ):
                raise IntervError(
                    f"rows[{i}].site {site.label} is outside the header's {h.n_layers} layers x "
                    f"{h.n_heads} heads"
                )

    def head_grid(self, values: dict[tuple[int, int], float]) -> torch.Tensor:
        """``[layer, head_index]`` float64 grid of per-head values (NaN where missing).

        Raises:
            IntervError: a head outside the report's model (its layer or index named with
                the valid range).
        """
        h = self.header
        grid = torch.full((h.n_layers, h.n_heads), torch.nan)
        for (layer, head), value in values.items():
            check_index(layer, h.n_layers, "layer", f"the report's model has {h.n_layers} layers")
            check_index(head, h.n_heads, "head", f"the report's layers have {h.n_heads} heads")
            grid[layer, head] = value
        return grid.to(torch.float64)

    def concentration_grid(self, metric: str) -> torch.Tensor:
        """``[layer, head_index]`` mean concentration ``metric`` over prompts."""
        if metric not in self.header.concentration_units:
            raise IntervError(
                f"unknown concentration metric {metric!r}; choose one of "
                f"{tuple(self.header.concentration_units)}"
            )
        return self.head_grid(
            {
                (row.site.layer, row.site.head): row.concentration[metric]
                for row in self.rows
                if row.concentration is not None and row.site is not None
            }
        )

    def effect_grid(self, kind: str) -> torch.Tensor:
        """``[layer, head_index]`` mean effect of the head rows of ``kind`` (metric unit);
        NaN where a screen left only an estimate."""
        if kind not in self.kinds:
            raise IntervError(f"the report has no rows of kind {kind!r}; kinds: {self.kinds}")
        return self.head_grid(
            {
                row.head: row.effect_mean
                for row in self.rows
                if row.kind == kind and row.head is not None and row.exact
            }
        )

    @property
    def kinds(self) -> tuple[str, ...]:
        """Intervention kinds present, in order of first appearance."""
        return tuple(dict.fromkeys(row.kind for row in self.rows))

    def instructive_floor(self) -> float:
        """The smallest |effect| (metric unit) a row needs to be called instructive:
        ``near_zero_fraction x effect scale`` of the flag rules; NaN without a scale."""
        scale = self.header.effect_scale
        if not (math.isfinite(scale) and scale > 0):
            return math.nan
        return self.flag_rules.near_zero_fraction * scale

    def instructive(self, n: int = 3) -> tuple[tuple[ReportRow, str], ...]:
        """The ``n`` rows where concentration and effect disagree most, with why.

        Within the head rows of each kind, heads are ranked by normalized entropy
        (rank 1 = most concentrated) and by |effect| (rank 1 = largest). Only rows whose
        |effect| is beyond the flag rules' near-zero bound (:meth:`instructive_floor`,
        ``near_zero_fraction x effect scale``) can be instructive: a tiny effect ranks low
        whatever the head does, so its rank gap says nothing (a pure sink head with a 1e-7
        logit effect is never instructive). A row's disagreement is ``|concentration rank
        - effect rank| / n_heads`` (0..1); ties are broken by the number of flags. Each
        site appears once (its most disagreeing row). Estimated rows (a screen's
        estimates) are never ranked. Returns (row, explanation) pairs; none
        when the report has no effect scale.
        """
        floor = self.instructive_floor()
        if math.isnan(floor):
            return ()
        unit = self.header.metric_unit
        scored = []
        for kind in self.kinds:
            rows = [
                row
                for row in self.rows
                if row.kind == kind
                and row.exact
                and row.concentration is not None
                and not math.isnan(row.concentration["normalized_entropy"])
                and math.isfinite(row.effect_mean)
            ]
            if len(rows) < 2:
                continue
            by_conc = sorted(rows, key=lambda r: r.concentration["normalized_entropy"])
            by_effect = sorted(rows, key=lambda r: -abs(r.effect_mean))
            rank_c = {row.index: rank for rank, row in enumerate(by_conc, start=1)}
            rank_e = {row.index: rank for rank, row in enumerate(by_effect, start=1)}
            for row in rows:
                if abs(row.effect_mean) <= floor:
                    continue
                c, e = rank_c[row.index], rank_e[row.index]
                why = (
                    f"{row.label} {kind}: effect {row.effect_mean:+.4g} {unit} "
                    f"[{row.effect_ci_low:.4g}, {row.effect_ci_high:.4g}], "
                    f"{ordinal(e)} of {len(rows)} by |effect|, but {ordinal(c)} of {len(rows)} "
                    f"by concentration (normalized entropy "
                    f"{row.concentration['normalized_entropy']:.3f}); flags: "
                    f"{', '.join(row.flags) or 'none'}"
                )
                scored.append((abs(c - e) / len(rows), len(row.flags), row, why))
        scored.sort(key=lambda item: (-item[0], -item[1], item[2].index))
        chosen: dict[Any, tuple[ReportRow, str]] = {}
        for _, _, row, why in scored:
            if len(chosen) == n:
                break
            chosen.setdefault(row.site, (row, why))
        return tuple(chosen.values())

    @property
    def headline_kind(self) -> str | None:
        """The kind the headline ranks heads by: mean ablation where present (it keeps the
        head's output on the task's distribution), else resample, else zero ablation, else
        another ablation, else the first kind with exact whole-head rows; None without."""
        with_heads = {r.kind for r in self.rows if r.head is not None and r.exact}
        kinds = [k for k in self.kinds if k in with_heads]
        for preferred in ("MeanAblation", "ResampleAblation", "ZeroAblation"):
            if preferred in kinds:
                return preferred
        ablations = [k for k in kinds if is_ablation(k)]
        return (ablations or kinds or [None])[0]

    def ranked_heads(self, kind: str | None = None) -> tuple[RankedHead, ...]:
        """Every whole-head row of ``kind`` (default :attr:`headline_kind`) with its effect
        interval, its |effect| rank and its concentration rank, largest |effect| first."""
        kind = self.headline_kind if kind is None else kind
        if kind is None:
            return ()
        if kind not in self.kinds:
            raise IntervError(f"the report has no rows of kind {kind!r}; kinds: {self.kinds}")
        return ranked_heads(self.rows, kind)

    def largest_effects(self, n: int = 5, kind: str | None = None) -> tuple[RankedHead, ...]:
        """The ``n`` heads with the largest |effect| under ``kind`` (default
        :attr:`headline_kind`), each beside its concentration rank."""
        as_int(n, "n", minimum=0)
        return self.ranked_heads(kind)[:n]

    def most_concentrated(self, n: int = 5, kind: str | None = None) -> tuple[RankedHead, ...]:
        """The ``n`` most concentrated heads (lowest normalized entropy), each beside its
        effect under ``kind`` (default :attr:`headline_kind`) and its |effect| rank."""
        as_int(n, "n", minimum=0)
        heads = sorted(self.ranked_heads(kind), key=lambda h: h.concentration_rank)
        return tuple(heads[:n])

    def baseline_counts(self) -> tuple[BaselineCount, ...]:
        """Per ablation kind with whole-head rows: how many heads pass (|mean effect|
        beyond :meth:`instructive_floor` and an interval excluding 0)."""
        floor = self.instructive_floor()
        if math.isnan(floor):
            return ()
        return baseline_counts(self.rows, [k for k in self.kinds if is_ablation(k)], floor)

    def baseline_note(self) -> str | None:
        """The headline's sentence when the ablation baselines disagree about how many
        heads matter (see :func:`interv.report.sections.baseline_note`), else None."""
        return baseline_note(
            self.baseline_counts(), self.instructive_floor(), self.header.metric_unit
        )

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict of the whole report (round-trips with :meth:`from_dict`)."""
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Self:
        """Rebuild a report from :meth:`to_dict` output (e.g. a saved ``report.json``).

        Raises:
            IntervError: ``data`` is not a saved report (a missing or malformed field is
                named).
        """
        if not isinstance(data, dict):
            raise IntervError(
                f"not a saved interv report: expected a JSON object with header, rows, ...; "
                f"got {type(data).__name__}"
            )
        try:
            return parse(cls, data, "report")
        except IntervError as error:
            raise IntervError(f"not a saved interv report: {error}") from None

    def section_tables(self) -> tuple[SectionTable, ...]:
        """The joined sections (decomposition, paths, interactions) as renderable tables."""
        return section_tables(
            self.decomposition,
            self.paths,
            self.interactions,
            self.interaction_semantics,
            self.header.metric_unit,
            self.header.ci_level,
        )

    def to_pandas(self) -> pandas.DataFrame:
        """One row per report row: the site, the intervention and its semantics sentence, the
        effect statistics (``effect_unit``), the recovery and flags, and the head's
        concentration: ``<metric>`` (mean over prompts) and ``<metric>_sd`` for every metric
        of :data:`~interv.analysis.concentration.METRICS` (NaN for rows that are not one head).
        ``frame.attrs["units"]`` maps every numeric column to its unit (needs pandas).
        """
        pd = require_pandas()
        h = self.header
        units = h.concentration_units
        records = []
        for row in self.rows:
            site = row.site
            kind = kind_of(row.kind)
            record: dict[str, Any] = {
                "index": row.index,
                "label": row.label,
                "component": None if site is None else site.component,
                "layer": None if site is None else site.layer,
                "head": None if site is None else site.head,
                "positions": positions_text(None if site is None else site.positions),
                "kind": row.kind,
                "family": None if kind is None else kind.cls.family,
                "semantics": row.semantics,
                "status": row.status,
                "exact": row.exact,
                "base_run": row.base_run,
                "effect_mean": row.effect_mean,
                "effect_ci_low": row.effect_ci_low,
                "effect_ci_high": row.effect_ci_high,
                "effect_std": row.effect_std,
                "effect_min": row.effect_min,
                "effect_max": row.effect_max,
                "effect_unit": h.metric_unit,
                "ci_level": h.ci_level,
                "recovery": row.recovery,
                "flags": "; ".join(row.flags),
            }
            for name in units:
                record[name] = None if row.concentration is None else row.concentration[name]
                record[f"{name}_sd"] = (
                    None if row.concentration_std is None else row.concentration_std[name]
                )
            record.update(model=h.model, task=h.task, n_prompts=h.n_prompts, metric=h.metric_name)
            records.append(record)
        frame = pd.DataFrame.from_records(records)
        for name in units:
            frame[[name, f"{name}_sd"]] = frame[[name, f"{name}_sd"]].astype(float)
        frame["recovery"] = frame["recovery"].astype(float)
        frame[["layer", "head"]] = frame[["layer", "head"]].astype("Int64")
        frame.attrs["units"] = {
            **dict.fromkeys(
                ("effect_mean", "effect_ci_low", "effect_ci_high", "effect_std", "effect_min"),
                h.metric_unit,
            ),
            "effect_max": h.metric_unit,
            "recovery": "dimensionless (1 = clean, 0 = corrupted)",
            **{name: unit for name, unit in units.items()},
            **{f"{name}_sd": unit for name, unit in units.items()},
        }
        return frame
