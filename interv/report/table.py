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

The report's data (:class:`~interv.report.data.ReportData`, its header and rows) lives in
:mod:`interv.report.data`; the :class:`~interv.report.report.Report` built here is its
subclass that displays itself.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import torch

from interv._version import __version__
from interv.analysis.concentration import METRICS, HeadConcentration
from interv.analysis.pairwise import COMPENSATION, head_interactions
from interv.audit import ESTIMATED
from interv.engine.results import InterventionResult
from interv.engine.sites import Site
from interv.errors import IntervError
from interv.flags import ESTIMATED_FLAG, FlagRules
from interv.provenance import join
from interv.report.agreement import Agreement, agreement
from interv.report.data import ReportHeader, ReportRow
from interv.report.flags import assign_flags, reports_recovery
from interv.report.report import Report
from interv.report.screens import estimate_note, summarize
from interv.report.sections import (
    CONCENTRATED_INDIRECT,
    DIRECT_OPPOSED,
    InteractionRow,
    decompositions,
    interaction_rows,
    path_rows,
)
from interv.stats import MIN_ITEMS, TOO_FEW, bootstrap_indices, bootstrap_mean_ci
from interv.tasks.tokenized import answer_offsets

if TYPE_CHECKING:
    from interv.engine.interventions import Intervention
    from interv.engine.results import Scope

__all__ = ["build_report"]


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
    effect_scale = results[0].effect_scale
    rows, effect_rows = _rows(
        partial, sites, per_prompt, spread, indices, level, rules, effect_scale
    )
    agreements = _agreements(rows, effect_rows, per_prompt, indices, level)

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
    estimators = tuple(dict.fromkeys(row.estimate for row in rows if not row.exact))
    notes = (estimate_note(n_estimated, len(rows), estimators),) if n_estimated else ()
    if scope.n_prompts < MIN_ITEMS:
        notes += (f"{scope.n_prompts} prompt(s): every interval is {TOO_FEW}.",)

    header = _header(scope, concentration, metric, results, effect_scale, n_bootstrap, level, seed)
    return Report(
        header=header,
        rows=rows,
        flag_rules=rules,
        rules_text=rules_text,
        agreement=agreements,
        provenance=provenance,
        decomposition=decomposition,
        paths=paths,
        interactions=interactions,
        interaction_semantics=interaction_semantics,
        notes=notes,
        screens=tuple(summarize(outcome) for result in results for outcome in result.screens),
    )


def _rows(
    partial: list[tuple[InterventionResult, int, float, torch.Tensor]],
    sites: list[Site | None],
    per_prompt: dict[str, torch.Tensor],
    spread: dict[str, torch.Tensor],
    indices: torch.Tensor,
    level: float,
    rules: FlagRules,
    effect_scale: float,
) -> tuple[tuple[ReportRow, ...], list[torch.Tensor]]:
    """The report's rows (effect beside the head's concentration, flags assigned) and the
    per-prompt effect of each."""
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
                "estimate": result.estimate_sentence(j),
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
    return rows, effect_rows


def _agreements(
    rows: tuple[ReportRow, ...],
    effect_rows: list[torch.Tensor],
    per_prompt: dict[str, torch.Tensor],
    indices: torch.Tensor,
    level: float,
) -> tuple[Agreement, ...]:
    """Per kind with at least three exact whole-head rows: how each concentration metric
    agrees with the effect across heads."""
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
    return tuple(agreements)


def _header(
    scope: Any,
    concentration: HeadConcentration,
    metric: Any,
    results: Sequence[InterventionResult],
    effect_scale: float,
    n_bootstrap: int,
    level: float,
    seed: int,
) -> ReportHeader:
    """The scope every number of the report is about."""
    n_layers, n_heads = concentration.metric("entropy").shape[1:3]
    clean = results[0].clean.to(torch.float64)
    corrupted = results[0].corrupted.to(torch.float64)
    return ReportHeader(
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
