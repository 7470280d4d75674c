"""The page's tables as HTML: every row of the report, and one row per head.

- The *long* table has one row per (site, intervention), the report's own rows: site,
  kind, effect mean with its interval, per-prompt spread, recovery, the seven
  concentration numbers (mean ± sd over prompts), flags and the semantics sentence.
- The *wide* table has one row per head: its concentration, then one effect column
  (and a recovery column, for patches) per head group (see
  :func:`interv.report.views.head_groups`).

Every header names its unit. Rows carry ``data-k`` (kind), ``data-l`` (layer), ``data-f``
(flags, ``|``-separated; in the wide table ``kind:flag`` pairs) and ``data-h`` (the
head label, for whole-head rows), which the page's script filters and links on; a cell
whose text does not start with its sort value carries it in ``data-v``. Columns marked
*extra* are hidden on screen until "all columns" is ticked, and always printed. No
stability promise; internal to :mod:`interv.report`.
"""

from __future__ import annotations

import html
from dataclasses import dataclass
from typing import TYPE_CHECKING

from interv.analysis.concentration import METRICS
from interv.engine.sites import COMPONENTS
from interv.flags import FLAGS
from interv.report.flags import reports_recovery
from interv.report.kit import number
from interv.report.views import SHORT, effect_text, head_groups

if TYPE_CHECKING:
    from interv.report.data import ReportData, ReportRow

__all__ = [
    "Column",
    "flag_badges",
    "hidden_column_css",
    "long_columns",
    "long_table",
    "wide_columns",
    "wide_table",
]

_DEFAULT_METRICS = ("normalized_entropy", "sink_mass")


@dataclass(frozen=True)
class Column:
    """One column of a page table.

    Attributes:
        key: identifier (``data-c``), e.g. ``"effect"`` or ``"conc:sink_mass"``.
        title: the header text, with the unit.
        name: the quantity in words (for the head details), without the unit.
        unit: the unit ("" for text columns).
        numeric: sorted as numbers (else as text).
        extra: hidden on screen until "all columns" is ticked.
        kind: the intervention kind of a per-kind column (wide table), else "".
    """

    key: str
    title: str
    name: str
    unit: str = ""
    numeric: bool = False
    extra: bool = False
    kind: str = ""


def _attr(value: str) -> str:
    return html.escape(value, quote=True)


def _header(columns: list[Column]) -> str:
    cells = []
    for c in columns:
        attrs = f' data-c="{_attr(c.key)}" data-name="{_attr(c.name)}"'
        if c.unit:
            attrs += f' data-unit="{_attr(c.unit)}"'
        attrs += ' data-type="num"' if c.numeric else ""
        attrs += f' data-kc="{_attr(c.kind)}"' if c.kind else ""
        cells.append(f"<th{attrs}>{html.escape(c.title)}</th>")
    return "<thead><tr>" + "".join(cells) + "</tr></thead>"


def flag_badges(flags: tuple[str, ...], prefix: str = "") -> str:
    """Each flag as a coloured badge (its text printed, so it survives print)."""
    return " ".join(
        f'<span class="iv-f iv-f{FLAGS.index(f) if f in FLAGS else 9}">'
        f"{html.escape(prefix + f)}</span>"
        for f in flags
    )


def _concentration_columns() -> list[Column]:
    return [
        Column(
            f"conc:{name}",
            f"{SHORT[name]} ({unit})",
            name.replace("_", " "),
            unit,
            numeric=True,
            extra=name not in _DEFAULT_METRICS,
        )
        for name, unit in METRICS.items()
    ]


def _concentration_cells(row: ReportRow) -> list[str]:
    if row.concentration is None:
        return ["<td>n/a</td>"] * len(METRICS)
    return [
        f"<td>{number(row.concentration[name], 3)} ± {number(row.concentration_std[name], 2)}</td>"
        for name in METRICS
    ]


def _effect_text(row: ReportRow) -> str:
    # an estimate's text starts with a word, so the page sorts it as n/a: after every
    # exact row, never ranked among them
    return effect_text(row)


def _site_order(report: ReportData) -> dict[int, int]:
    """Row index -> rank by (layer, head, component, positions); rows without a site last."""

    def key(row: ReportRow) -> tuple:
        site = row.site
        if site is None:
            return (1, 0, 0, 0, (), row.index)
        return (
            0,
            site.layer,
            -1 if site.head is None else site.head,
            COMPONENTS.index(site.component),
            site.positions or (),
            row.index,
        )

    ordered = sorted(report.rows, key=key)
    return {row.index: rank for rank, row in enumerate(ordered)}


def long_columns(report: ReportData) -> list[Column]:
    """The columns of the long table."""
    unit = report.header.metric_unit
    level = int(report.header.ci_level * 100)
    return [
        Column("site", "site", "site", numeric=True),
        Column("kind", "kind", "intervention kind"),
        Column(
            "effect",
            f"effect ({unit}), mean [{level}% CI]",
            f"effect, mean over prompts [{level}% bootstrap CI]",
            unit,
            numeric=True,
        ),
        Column(
            "spread",
            f"per-prompt sd (min … max) ({unit})",
            "effect, standard deviation over prompts (min … max)",
            unit,
            numeric=True,
            extra=True,
        ),
        Column(
            "recovery",
            "recovery (dimensionless)",
            "normalized recovery (1 = clean, 0 = corrupted)",
            "dimensionless",
            numeric=True,
        ),
        *_concentration_columns(),
        Column("flags", "flags", "flags"),
        Column("semantics", "semantics", "semantics"),
    ]


def long_table(report: ReportData) -> str:
    """The long table: one ``<tr>`` per report row, in report order."""
    columns = long_columns(report)
    order = _site_order(report)
    body = []
    for row in report.rows:
        attrs = f' data-k="{_attr(row.kind)}"'
        attrs += f' data-l="{"" if row.site is None else row.site.layer}"'
        attrs += f' data-f="{_attr("|".join(row.flags))}"'
        if row.head is not None:
            attrs += f' data-h="{row.label}"'
        spread = (
            f"{number(row.effect_std, 3)} "
            f"({number(row.effect_min, 3)} … {number(row.effect_max, 3)})"
            if row.exact
            else "n/a (estimate)"
        )
        cells = [
            f'<td data-v="{order[row.index]}">{html.escape(row.label)}</td>',
            f"<td>{html.escape(row.kind)}</td>",
            f"<td>{_effect_text(row)}</td>",
            f"<td>{spread}</td>",
            f"<td>{number(row.recovery, 3)}</td>",
            *_concentration_cells(row),
            f"<td>{flag_badges(row.flags)}</td>",
            f'<td class="iv-sem">{html.escape(row.semantics)}</td>',
        ]
        body.append(f"<tr{attrs}>" + "".join(cells) + "</tr>")
    return (
        '<table class="iv-table" data-view="long">'
        + _header(columns)
        + "<tbody>"
        + "".join(body)
        + "</tbody></table>"
    )


def wide_columns(report: ReportData) -> list[Column]:
    """The columns of the wide table (one effect column per head group)."""
    unit = report.header.metric_unit
    level = int(report.header.ci_level * 100)
    columns = [Column("site", "head", "head", numeric=True), *_concentration_columns()]
    for group in head_groups(report):
        columns.append(
            Column(
                f"effect:{group.key}",
                f"{group.title} effect ({unit}), mean [{level}% CI]",
                f"{group.title} effect",
                unit,
                numeric=True,
                kind=group.kind,
            )
        )
        if reports_recovery(group.kind):
            columns.append(
                Column(
                    f"recovery:{group.key}",
                    f"{group.title} recovery (dimensionless)",
                    f"{group.title} normalized recovery",
                    "dimensionless",
                    numeric=True,
                    kind=group.kind,
                )
            )
    columns.append(Column("flags", "flags (kind: flag)", "flags"))
    return columns


def wide_table(report: ReportData) -> str:
    """The wide table: one ``<tr>`` per head with whole-head rows, by layer then head."""
    columns = wide_columns(report)
    groups = head_groups(report)
    heads = sorted({head for group in groups for head in group.rows})
    body = []
    for layer, head in heads:
        rows = [(group, group.rows.get((layer, head))) for group in groups]
        present = [row for _, row in rows if row is not None]
        label = present[0].label
        flag_pairs = [(row.kind, flag) for row in present for flag in row.flags]
        pairs = "|".join(f"{kind}:{flag}" for kind, flag in dict.fromkeys(flag_pairs))
        cells = [
            f'<td data-v="{layer * 10_000 + head}">{html.escape(label)}</td>',
            *_concentration_cells(present[0]),
        ]
        for group, row in rows:
            kind = f' data-kc="{_attr(group.kind)}"'
            cells.append(f"<td{kind}>{'n/a' if row is None else _effect_text(row)}</td>")
            if reports_recovery(group.kind):
                value = None if row is None else row.recovery
                cells.append(f"<td{kind}>{number(value, 3)}</td>")
        flag_text = " ".join(
            flag_badges((flag,), prefix=f"{kind}: ") for kind, flag in dict.fromkeys(flag_pairs)
        )
        cells.append(f"<td>{flag_text}</td>")
        body.append(
            f'<tr data-l="{layer}" data-f="{_attr(pairs)}" data-h="{label}">'
            + "".join(cells)
            + "</tr>"
        )
    return (
        '<table class="iv-table" data-view="wide">'
        + _header(columns)
        + "<tbody>"
        + "".join(body)
        + "</tbody></table>"
    )


def hidden_column_css(report: ReportData) -> str:
    """Screen-only CSS that hides the extra columns until "all columns" is ticked."""
    selectors = []
    for view, columns in (("long", long_columns(report)), ("wide", wide_columns(report))):
        for i, column in enumerate(columns, start=1):
            if column.extra:
                selectors.append(
                    f".interv-report.iv-js:not(.iv-all) table[data-view={view}] "
                    f"tr > :nth-child({i})"
                )
    if not selectors:
        return ""
    return "@media screen{" + ",".join(selectors) + "{display:none}}"
