"""The report: one row per (site, intervention), effect beside concentration.

:func:`build_report` joins the engine's :class:`~interv.engine.results.InterventionResult`
(what happened to the target metric under each intervention) with a
:class:`~interv.analysis.concentration.HeadConcentration` of the same prompts (how
each head spreads its attention at the report's query positions). It never touches a
model. Each row keeps the two questions apart, side by side:

- causation: the intervention's semantics sentence; the *effect* per prompt,
  ``metric under the intervention - metric of the run it modified`` (the clean run for
  ablations and value edits, the corrupted run for denoising patches), in the metric's
  unit, summarized by its mean, a bootstrap interval over prompts and its spread
  (standard deviation, min, max); for patches, the normalized recovery of the
  prompt-mean metric ``(mean m - mean m_corrupt) / (mean m_clean - mean m_corrupt)``;
- concentration of the same head on the same prompts: entropy, normalized entropy,
  sink mass, content entropy, content normalized entropy and the value-aware
  contribution (norm and sink share), each a mean over prompts (each prompt weighs
  the same) with its standard deviation over prompts, in the units of
  :data:`interv.analysis.concentration.METRICS`.

This module defines the report's data: it imports no renderer. A :class:`Report` shows
itself (``_repr_html_``, ``_repr_markdown_``, :meth:`Report.save`) by handing itself to
the renderers (:mod:`interv.report.page`, :mod:`interv.report.render`), imported when
called: the renderers are typed with the data, never the other way round.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from interv import __version__
from interv._checks import as_int, check_index
from interv._pandas import positions_text, require_pandas
from interv._schema import parse
from interv.analysis.concentration import METRICS, HeadConcentration
from interv.analysis.pairwise import COMPENSATION, head_interactions
from interv.audit import ESTIMATED
from interv.engine.registry import kind_of
from interv.engine.results import EXACT, InterventionResult
from interv.engine.sites import Site
from interv.errors import IntervError
from interv.flags import ESTIMATED_FLAG, FlagRules
from interv.provenance import Provenance, join
from interv.report.agreement import AGREEMENT_CAVEAT, Agreement, agreement
from interv.report.flags import assign_flags, is_ablation, reports_recovery
from interv.report.screens import ScreenSummary, estimate_note, summarize
from interv.report.sections import (
    CONCENTRATED_INDIRECT,
    DIRECT_OPPOSED,
    BaselineCount,
    DecompositionRow,
    InteractionRow,
    PathRow,
    RankedHead,
    SectionTable,
    baseline_counts,
    baseline_note,
    decompositions,
    interaction_rows,
    ordinal,
    path_rows,
    ranked_heads,
    section_tables,
)
from interv.stats import MIN_ITEMS, TOO_FEW, bootstrap_indices, bootstrap_mean_ci
from interv.tasks.tokenized import answer_offsets

if TYPE_CHECKING:
    import pandas
    from matplotlib.figure import Figure

    from interv.engine.interventions import Intervention
    from interv.engine.results import Scope

__all__ = ["Report", "ReportHeader", "ReportRow", "build_report"]


EFFECT_DEFINITION = (
    "effect = metric under the intervention minus the metric of the run it modified "
    "(clean run for ablations and value edits, corrupted run for denoising patches, "
    "clean run for noising patches), per prompt"
)
RECOVERY_DEFINITION = (
    "normalized recovery = (mean m - mean m_corrupted) / (mean m_clean - mean m_corrupted) "
    "over prompts; 1 = clean behaviour, 0 = corrupted behaviour (dimensionless)"
)
AGGREGATION_RULE = (
    "effect: mean over prompts, percentile bootstrap interval over prompts, standard "
    "deviation / min / max over prompts; concentration: mean over the query positions of "
    "each prompt, then mean (and standard deviation) over prompts, each prompt weighing "
    "the same"
)


@dataclass(frozen=True)
class ReportHeader:
    """The scope every number of a report is about (model, task, positions, units)."""

    model: str
    task: str
    n_prompts: int
    n_positions: int
    padding_side: str
    n_layers: int
    n_heads: int
    query_positions: str
    mask_rule: str
    sink_positions: tuple[int, ...]
    sink_convention: str
    aggregation: str
    metric_name: str
    metric_unit: str
    metric_definition: str
    effect_definition: str
    recovery_definition: str
    clean_mean: float
    corrupted_mean: float
    effect_scale: float
    n_undefined_recovery: int
    n_bootstrap: int
    ci_level: float
    seed: int
    concentration_units: dict[str, str]
    n_undefined_concentration: dict[str, int]
    interv_version: str


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
            ``"exact (audit)"`` (intervened on) or ``"estimated"`` (a screen's first-order
            estimate, not intervened: flagged, never ranked).
    """

    index: int
    kind: str
    semantics: str
    base_run: str
    site: Site | None
    effect_mean: float
    effect_ci_low: float
    effect_ci_high: float
    effect_std: float
    effect_min: float
    effect_max: float
    recovery: float | None
    concentration: dict[str, float] | None
    concentration_std: dict[str, float] | None
    flags: tuple[str, ...]
    per_prompt_effect: tuple[float, ...]
    status: str = EXACT

    @property
    def exact(self) -> bool:
        """False for a screen's first-order estimate (not an intervention result)."""
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
class Report:
    """A typed report: scope header, rows, flag rules, agreement, and the sections that join
    rows (direct/indirect decomposition, path patches, pairwise interactions, see
    :mod:`interv.report.sections`). Renders itself.

    ``provenance`` is the join (:func:`interv.provenance.join`) of the effects' and the
    concentration's: the model, its weights and dtype, the prompts, the pairs and the metric
    every number is about.

    ``_repr_html_`` / ``_repr_markdown_`` give rich display in notebooks; see
    :mod:`interv.report.render` for Markdown, HTML, JSON and CSV.
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
        first-order estimates) are never ranked. Returns (row, explanation) pairs; none
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
    def from_dict(cls, data: dict[str, Any]) -> Report:
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

    def save(
        self,
        directory: str | Path,
        *,
        figures: dict[str, Figure] | None = None,
        overwrite: bool = False,
    ) -> dict[str, Path]:
        """Write the report's files into ``directory``: :func:`interv.report.render.save_report`
        (each file new or interv's own unchanged one; ``overwrite=True`` replaces them)."""
        from interv.report.render import save_report  # the renderer, on use

        return save_report(self, directory, figures=figures, overwrite=overwrite)

    def _repr_markdown_(self) -> str:
        from interv.report.render import to_markdown  # the renderer, on use

        return to_markdown(self)

    def _repr_html_(self) -> str:
        from interv.report.page import page_fragment  # the renderer, on use

        return page_fragment(self)

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


def _refuse_duplicates(partial: Sequence[tuple[InterventionResult, int, float, Any]]) -> None:
    """Refuse an intervention that appears twice among the rows: it would be one head counted
    twice in the agreement and the rankings (9 heads of an 8-head model)."""
    seen: dict[str, int] = {}
    for row, (result, j, _, _) in enumerate(partial):
        identity = [result.kinds[j], result.base_runs[j], result.descriptions[j], result.params[j]]
        key = json.dumps(identity, sort_keys=True, default=repr)
        if key in seen:
            raise IntervError(
                f"rows {seen[key]} and {row} are the same intervention ({result.descriptions[j]}); "
                "each intervention may appear once in a report, or it would count twice in the "
                "agreement and the rankings: drop the duplicate"
            )
        seen[key] = row


def _combine(
    effects: InterventionResult | Sequence[InterventionResult],
) -> tuple[InterventionResult, ...]:
    if isinstance(effects, InterventionResult):
        results: tuple[Any, ...] = (effects,)
    elif isinstance(effects, Sequence) and not isinstance(effects, str | bytes):
        results = tuple(effects)
    else:
        raise IntervError(
            "build_report's effects must be an InterventionResult (from interv.run or "
            f"interv.load_sweep) or a list of them; got {type(effects).__name__}"
        )
    if not results:
        raise IntervError("build_report needs at least one InterventionResult; got none")
    wrong = [i for i, r in enumerate(results) if not isinstance(r, InterventionResult)]
    if wrong:
        raise IntervError(
            f"build_report's effects must all be InterventionResults; item {wrong[0]} is a "
            f"{type(results[wrong[0]]).__name__}"
        )
    first = results[0]
    for i, other in enumerate(results[1:], start=1):
        join(first, other, what=("result 0", f"result {i}"))
        if (other.scope, other.metric) != (first.scope, first.metric):
            raise IntervError(
                "every InterventionResult of one report must share scope and metric; got "
                f"{first.scope} / {first.metric.name} and {other.scope} / {other.metric.name}"
            )
    return results


def _query_description(concentration: HeadConcentration, scope: Scope) -> str:
    queries = concentration.query_positions
    offsets = answer_offsets(
        scope.answer_positions, concentration.prompt_lengths, scope.n_positions, scope.padding_side
    )
    at_answer = len(queries) == 1 and concentration.query_index[:, 0].tolist() == list(offsets)
    if at_answer:
        counted = "last real token, -1 = last" if queries[0] < 0 else "first real token"
        return (
            f"the answer position of each prompt (the query whose output is scored; "
            f"query position {queries[0]} counted from the {counted})"
        )
    return (
        f"query positions {list(queries)} counted from each prompt's first real token "
        "(negative: from its last real token); NOT the answer positions"
    )


def build_report(
    effects: InterventionResult | Sequence[InterventionResult],
    concentration: HeadConcentration,
    *,
    interventions: Sequence[Intervention] | None = None,
    flag_rules: FlagRules | None = None,
    n_bootstrap: int = 1000,
    level: float = 0.95,
    seed: int = 0,
) -> Report:
    """Join effects with concentration of the same prompts into a :class:`Report`.

    Args:
        effects: one result of :func:`interv.run`, or several sharing scope and metric
            (rows follow in order).
        concentration: :func:`interv.concentration` on the same model and the same
            prompts (the task's clean prompts), at the query positions the report
            should show (default choice: the answer positions,
            ``task.answer_query_positions()``: ``(-1,)`` for tasks scored at each prompt's
            last real token, either padding side).
        interventions: the intervention values, in the order of the rows, to read each
            row's site from instead of the results' own ``sites`` (for results saved
            without sites).
        flag_rules: thresholds of the flags (default :class:`FlagRules`).
        n_bootstrap: number of bootstrap resamples of prompts (>= 1).
        level: confidence level of every interval, in (0, 1).
        seed: seed of the bootstrap draws.

    Raises:
        IntervError: results of different scopes or metrics, concentration of another
            model or another number of prompts, or a wrong number of interventions.
    """
    results = _combine(effects)
    if not isinstance(concentration, HeadConcentration):
        raise IntervError(
            "build_report's concentration must be a HeadConcentration (from "
            f"interv.concentration on the same model and prompts); got "
            f"{type(concentration).__name__}"
        )
    if flag_rules is not None and not isinstance(flag_rules, FlagRules):
        raise IntervError(
            f"flag_rules must be an interv.flags.FlagRules; got {type(flag_rules).__name__}"
        )
    rules = FlagRules() if flag_rules is None else flag_rules
    scope = results[0].scope
    metric = results[0].metric
    provenance = join(results[0], concentration, what=("the effects", "the concentration"))
    sites = [site for result in results for site in result.sites]
    if interventions is not None:
        if len(interventions) != len(sites):
            raise IntervError(
                f"interventions must match the results one to one; got {len(interventions)} "
                f"interventions for {len(sites)} result rows"
            )
        sites = [iv.site for iv in interventions]
    clean = results[0].clean.to(torch.float64)
    corrupted = results[0].corrupted.to(torch.float64)
    indices = bootstrap_indices(scope.n_prompts, n_bootstrap, seed)
    per_prompt = {name: concentration.per_prompt(name) for name in METRICS}
    spread = {name: concentration.per_head_spread(name) for name in METRICS}
    n_layers, n_heads = per_prompt["entropy"].shape[1:]

    partial = []
    for result in results:
        mean_recovery, effects = result.mean_recovery(), result.effect
        for j in range(result.n_interventions):
            partial.append((result, j, float(mean_recovery[j]), effects[j]))
    _refuse_duplicates(partial)
    statuses = [result.status[j] for result, j, _, _ in partial]
    drafts = []
    effect_rows = []
    for (result, j, recovery, effect), site in zip(partial, sites, strict=True):
        effect_rows.append(effect)
        is_head = site is not None and site.head is not None
        low, high = bootstrap_mean_ci(effect, indices, level)
        drafts.append(
            {
                "kind": result.kinds[j],
                "semantics": result.sentence(j),
                "status": result.status[j],
                "base_run": result.base_runs[j],
                "site": site,
                "effect_mean": float(effect.mean()),
                "effect_ci_low": low,
                "effect_ci_high": high,
                "effect_std": float(effect.std()) if effect.numel() > 1 else float("nan"),
                "effect_min": float(effect.min()),
                "effect_max": float(effect.max()),
                "recovery": recovery if reports_recovery(result.kinds[j]) else None,
                "concentration": (
                    {
                        name: float(per_prompt[name][:, site.layer, site.head].nanmean())
                        for name in METRICS
                    }
                    if is_head
                    else None
                ),
                "concentration_std": (
                    {name: float(spread[name][site.layer, site.head]) for name in METRICS}
                    if is_head
                    else None
                ),
                "per_prompt_effect": tuple(float(x) for x in effect),
            }
        )
    effect_scale = results[0].effect_scale
    flags = assign_flags(
        kinds=[d["kind"] for d in drafts],
        heads=[
            None if d["concentration"] is None else (d["site"].layer, d["site"].head)
            for d in drafts
        ],
        effect_means=[d["effect_mean"] for d in drafts],
        normalized_entropy=[
            None if d["concentration"] is None else d["concentration"]["normalized_entropy"]
            for d in drafts
        ],
        sink_mass=[
            None if d["concentration"] is None else d["concentration"]["sink_mass"] for d in drafts
        ],
        effect_scale=effect_scale,
        rules=rules,
    )
    flags = [
        (*row_flags, ESTIMATED_FLAG) if status == ESTIMATED else row_flags
        for row_flags, status in zip(flags, statuses, strict=True)
    ]
    rows = tuple(
        ReportRow(index=i, flags=row_flags, **draft)
        for i, (draft, row_flags) in enumerate(zip(drafts, flags, strict=True))
    )

    agreements: list[Agreement] = []
    for kind in dict.fromkeys(row.kind for row in rows):
        members = [
            i
            for i, row in enumerate(rows)
            if row.kind == kind
            and row.exact
            and row.concentration is not None
            and row.head is not None
        ]
        if len(members) < 3:
            continue
        layers = [rows[i].site.layer for i in members]
        heads = [rows[i].site.head for i in members]
        effect_matrix = torch.stack([effect_rows[i] for i in members])
        for name in METRICS:
            per_head = per_prompt[name][:, layers, heads]  # [n_prompts, n_members]
            agreements.extend(
                agreement(
                    kind=kind,
                    metric=name,
                    layers=layers,
                    per_prompt_effect=effect_matrix,
                    per_prompt_concentration=per_head,
                    indices=indices,
                    level=level,
                )
            )

    head_means = {
        (layer, head): {name: float(per_prompt[name][:, layer, head].nanmean()) for name in METRICS}
        for layer in range(int(n_layers))
        for head in range(int(n_heads))
    }
    params = [p for result in results for p in result.params]
    descriptions = [d for result in results for d in result.descriptions]
    decomposition = decompositions(
        params, effect_rows, descriptions, head_means, indices, level, rules, effect_scale
    )
    paths = path_rows(
        params,
        effect_rows,
        [float(r) for result in results for r in result.mean_recovery()],
        descriptions,
        head_means,
        indices,
        level,
    )
    rules_text = rules.rules(effect_scale, metric.unit)
    interactions: tuple[InteractionRow, ...] = ()
    interaction_semantics = ""
    if any(p.get("kind") == "PairAblation" for p in params):
        found = head_interactions(
            _merged(results), rules=rules, n_bootstrap=n_bootstrap, level=level, seed=seed
        )
        interactions = interaction_rows(found, head_means)
        interaction_semantics = found.semantics
        rules_text[COMPENSATION] = found.rule.split(": ", 1)[1]
    if decomposition:
        rules_text.update(_decomposition_rules(rules, effect_scale, metric.unit))
    n_estimated = statuses.count(ESTIMATED)
    if not n_estimated:
        rules_text.pop(ESTIMATED_FLAG, None)
    notes = (estimate_note(n_estimated, len(rows)),) if n_estimated else ()
    if scope.n_prompts < MIN_ITEMS:
        notes += (f"{scope.n_prompts} prompt(s): every interval is {TOO_FEW}.",)

    header = ReportHeader(
        model=scope.model_name,
        task=scope.task_name,
        n_prompts=scope.n_prompts,
        n_positions=scope.n_positions,
        padding_side=scope.padding_side,
        n_layers=int(n_layers),
        n_heads=int(n_heads),
        query_positions=_query_description(concentration, scope),
        mask_rule=concentration.mask_rule,
        sink_positions=tuple(concentration.sink_positions),
        sink_convention=concentration.sink_convention,
        aggregation=AGGREGATION_RULE,
        metric_name=metric.name,
        metric_unit=metric.unit,
        metric_definition=metric.definition,
        effect_definition=EFFECT_DEFINITION,
        recovery_definition=RECOVERY_DEFINITION,
        clean_mean=float(clean.mean()),
        corrupted_mean=float(corrupted.mean()),
        effect_scale=effect_scale,
        n_undefined_recovery=results[0].n_undefined_recovery,
        n_bootstrap=n_bootstrap,
        ci_level=level,
        seed=seed,
        concentration_units=dict(METRICS),
        n_undefined_concentration=concentration.n_undefined,
        interv_version=__version__,
    )
    return Report(
        header=header,
        rows=rows,
        flag_rules=rules,
        rules_text=rules_text,
        agreement=tuple(agreements),
        provenance=provenance,
        decomposition=decomposition,
        paths=paths,
        interactions=interactions,
        interaction_semantics=interaction_semantics,
        notes=notes,
        screens=tuple(summarize(outcome) for result in results for outcome in result.screens),
    )


def _decomposition_rules(rules: FlagRules, effect_scale: float, unit: str) -> dict[str, str]:
    large = rules.large_fraction * effect_scale
    near = rules.near_zero_fraction * effect_scale
    return {
        CONCENTRATED_INDIRECT: (
            f"normalized entropy <= {rules.concentrated_at_most:g} and |indirect effect| >= "
            f"{rules.large_fraction:g} x effect scale = {large:.4g} {unit}"
        ),
        DIRECT_OPPOSED: (
            f"direct and indirect effects of opposite sign, both above "
            f"{rules.near_zero_fraction:g} x effect scale = {near:.4g} {unit} (later parts "
            "of the model compensate for the head's direct contribution)"
        ),
    }


def _merged(results: Sequence[InterventionResult]) -> InterventionResult:
    """One result holding the rows of several of the same scope and metric, in order."""
    if len(results) == 1:
        return results[0]
    first = results[0]
    return InterventionResult.build(
        torch.cat([result.values for result in results]),
        first.clean,
        first.corrupted,
        kinds=[k for result in results for k in result.kinds],
        descriptions=[d for result in results for d in result.descriptions],
        base_runs=[b for result in results for b in result.base_runs],
        sites=[s for result in results for s in result.sites],
        params=[p for result in results for p in result.params],
        metric=first.metric,
        scope=first.scope,
        provenance=first.provenance,
        recovery_atol=first.recovery_atol,
    )
