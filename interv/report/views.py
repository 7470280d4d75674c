"""Pure views of a report that every renderer shares: number formatting, the scope lines,
the row cells, per-head groups and the swept layers.

A *head group* is the set of rows of one intervention kind that act on whole heads
(one query head at all positions), split further by component and base run when a kind
holds several (e.g. denoising and noising patches of ``z``): the heatmaps and scatters
draw one group each, so a cell never mixes two interventions. No stability promise;
internal to :mod:`interv.report`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from interv.analysis.concentration import METRICS
from interv.audit import UNRECORDED_ESTIMATE
from interv.report.flags import is_ablation
from interv.report.kit import number

if TYPE_CHECKING:
    from interv.report.agreement import Agreement
    from interv.report.data import ReportData, ReportRow

__all__ = [
    "SHORT",
    "HeadGroup",
    "agreement_cells",
    "effect_text",
    "head_groups",
    "header_lines",
    "headline_agreement",
    "instructive_heads",
    "row_cells",
    "row_columns",
    "swept_layers",
]

SHORT: dict[str, str] = {
    "entropy": "H",
    "normalized_entropy": "H/log n",
    "sink_mass": "sink mass",
    "content_entropy": "H(q)",
    "content_normalized_entropy": "H(q)/log(n-|S|)",
    "sink_contribution_share": "sink contrib. share",
    "contribution_norm": "contrib. norm",
}
"""Short column names of the concentration metrics (see :data:`METRICS` for units)."""


def header_lines(report: ReportData) -> list[tuple[str, str]]:
    """The scope of every number of the report, as (name, text) pairs."""
    h = report.header
    return [
        ("model", h.model),
        (
            "task",
            f"{h.task}: {h.n_prompts} prompt pairs, padded to {h.n_positions} tokens "
            f"({h.padding_side}-padded)",
        ),
        ("target metric", f"{h.metric_name} ({h.metric_unit}): {h.metric_definition}"),
        (
            "baselines",
            f"clean mean {number(h.clean_mean)} {h.metric_unit}, corrupted mean "
            f"{number(h.corrupted_mean)} {h.metric_unit}; effect scale |clean - corrupted| = "
            f"{number(h.effect_scale)} {h.metric_unit}",
        ),
        ("effect", f"{h.effect_definition}; unit {h.metric_unit}"),
        (
            "recovery",
            f"{h.recovery_definition}; {h.n_undefined_recovery} prompts with "
            "undefined per-prompt recovery",
        ),
        ("concentration query positions", h.query_positions),
        ("mask rule", h.mask_rule),
        ("sink", f"key positions {list(h.sink_positions)} ({h.sink_convention})"),
        ("aggregation", h.aggregation),
        (
            "intervals",
            f"{int(h.ci_level * 100)}% percentile bootstrap over prompts, "
            f"{h.n_bootstrap} resamples, seed {h.seed}",
        ),
        ("concentration units", "; ".join(f"{k}: {v}" for k, v in h.concentration_units.items())),
        (
            "undefined concentration entries (NaN, excluded from means)",
            "; ".join(f"{k}: {v}" for k, v in h.n_undefined_concentration.items()),
        ),
        ("interv version", h.interv_version),
    ]


def row_columns(report: ReportData) -> list[str]:
    """Column names of :func:`row_cells`, with units."""
    units = report.header.concentration_units
    return [
        "site",
        "kind",
        "semantics",
        f"effect mean [{int(report.header.ci_level * 100)}% CI]",
        "per-prompt spread",
        "recovery (dimensionless)",
        *[f"{SHORT[name]} ({units[name]}), mean ± sd over prompts" for name in METRICS],
        "flags",
    ]


def effect_text(row: ReportRow, unit: str = "") -> str:
    """The effect cell: mean [interval], or for an estimate ``estimate ≈ mean`` (no
    interval, so it never reads as a measured number) and the sentence of its estimator
    (:attr:`ReportRow.estimate`; :data:`~interv.audit.UNRECORDED_ESTIMATE` for a row of a
    report saved before rows carried it)."""
    suffix = f" {unit}" if unit else ""
    if not row.exact:
        return (
            f"estimate ≈ {number(row.effect_mean)}{suffix}; {row.estimate or UNRECORDED_ESTIMATE}"
        )
    interval = f"[{number(row.effect_ci_low)}, {number(row.effect_ci_high)}]"
    return f"{number(row.effect_mean)} {interval}{suffix}"


def row_cells(report: ReportData, row: ReportRow) -> list[str]:
    """One row of the report as text cells (effects carry the metric's unit)."""
    unit = report.header.metric_unit
    spread = (
        f"sd {number(row.effect_std)}, {number(row.effect_min)}..{number(row.effect_max)} {unit}"
    )
    cells = [
        row.label,
        row.kind,
        row.semantics,
        effect_text(row, unit),
        spread if row.exact else "n/a (estimate)",
        number(row.recovery, 3),
    ]
    for name in METRICS:
        if row.concentration is None:
            cells.append("n/a")
        else:
            cells.append(
                f"{number(row.concentration[name], 3)} ± {number(row.concentration_std[name], 2)}"
            )
    cells.append(", ".join(row.flags))
    return cells


def agreement_cells(report: ReportData) -> tuple[list[str], list[list[str]]]:
    """Columns and text rows of the agreement table."""
    columns = [
        "intervention kind",
        "concentration metric",
        "heads",
        "n heads",
        "Spearman rho (metric vs |effect|)",
        f"{int(report.header.ci_level * 100)}% CI",
    ]
    rows = [
        [
            a.kind,
            a.metric,
            "all layers" if a.layer is None else f"layer {a.layer}",
            str(a.n_heads),
            number(a.rho, 3),
            f"[{number(a.ci_low, 3)}, {number(a.ci_high, 3)}]",
        ]
        for a in report.agreement
    ]
    return columns, rows


@dataclass(frozen=True)
class HeadGroup:
    """The whole-head rows of one kind (and component and base run), by ``(layer, head)``.

    Attributes:
        key: a short stable identifier (for markup and file names).
        title: the kind, plus the component and base run where the kind has several.
        kind: the intervention class name.
        rows: ``(layer, head)`` -> the row.
    """

    key: str
    title: str
    kind: str
    rows: dict[tuple[int, int], ReportRow]


def head_groups(report: ReportData) -> tuple[HeadGroup, ...]:
    """One :class:`HeadGroup` per (kind, component, base run) with whole-head rows, in
    order of first appearance; exact rows only (a screen's estimates are never drawn or
    compared with intervention results)."""
    grouped: dict[tuple[str, str, str], dict[tuple[int, int], ReportRow]] = {}
    for row in report.rows:
        if row.head is not None and row.exact:
            grouped.setdefault((row.kind, row.site.component, row.base_run), {})[row.head] = row
    per_kind: dict[str, int] = {}
    for kind, _, _ in grouped:
        per_kind[kind] = per_kind.get(kind, 0) + 1
    components: dict[str, set[str]] = {}
    for kind, component, _ in grouped:
        components.setdefault(kind, set()).add(component)
    groups = []
    for i, ((kind, component, base_run), rows) in enumerate(grouped.items()):
        title = kind
        if per_kind[kind] > 1:
            parts = [] if len(components[kind]) == 1 else [f"on {component}"]
            parts.append(f"modifying the {base_run} run")
            title = f"{kind} ({', '.join(parts)})"
        groups.append(HeadGroup(key=f"g{i}", title=title, kind=kind, rows=rows))
    return tuple(groups)


def swept_layers(report: ReportData) -> tuple[int, ...]:
    """The layers with at least one whole-head row, ascending."""
    return tuple(sorted({row.head[0] for row in report.rows if row.head is not None}))


def instructive_heads(report: ReportData, n: int = 3) -> tuple[tuple[ReportRow, str], ...]:
    """Like :meth:`Report.instructive`, but at most one row per head: the ``n`` heads whose
    concentration rank and |effect| rank disagree most (row, explanation)."""
    chosen: dict[tuple[int, int] | str, tuple[ReportRow, str]] = {}
    for row, why in report.instructive(len(report.rows)):
        key = row.head if row.head is not None else row.label
        if key not in chosen:
            chosen[key] = (row, why)
        if len(chosen) == n:
            break
    return tuple(chosen.values())


def headline_agreement(report: ReportData, metric: str = "normalized_entropy") -> list[Agreement]:
    """The all-layer agreements of ``metric`` with |effect|, one per kind: ablation kinds
    first (the question most readers ask), then the others in report order."""
    entries = [a for a in report.agreement if a.metric == metric and a.layer is None]
    return sorted(entries, key=lambda a: not is_ablation(a.kind))
