"""Renderers of a :class:`~interv.report.table.Report`: Markdown, HTML, JSON, CSV.

All formats carry the same content: the scope header, the flag rules, the most
instructive rows, one row per (site, intervention) with the effect beside the head's
concentration, and the concentration/causation agreement with its caveat. HTML is the
explorable page of :mod:`interv.report.page` (self-contained: script, style and PNG
figures inlined). JSON writes NaN as null. :func:`save_report` writes every format into
one directory.
"""

from __future__ import annotations

import csv
import io
import json
import math
from pathlib import Path
from typing import TYPE_CHECKING, Any

from interv.analysis.concentration import METRICS
from interv.report.page import to_page
from interv.report.plots import standard_figures
from interv.report.views import agreement_cells, header_lines, row_cells, row_columns

if TYPE_CHECKING:
    from matplotlib.figure import Figure

    from interv.report.table import Report

__all__ = ["save_report", "to_csv", "to_html", "to_json", "to_markdown"]


def _md_table(columns: list[str], rows: list[list[str]]) -> str:
    def line(cells: list[str]) -> str:
        return "| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |"

    return "\n".join([line(columns), line(["---"] * len(columns)), *[line(r) for r in rows]])


def to_markdown(report: Report, *, images: dict[str, str] | None = None) -> str:
    """The report as Markdown; ``images`` maps a caption to an image path or URI."""
    parts = [f"# interv report: {report.header.model} on {report.header.task}", "", "## Scope", ""]
    parts += [f"- **{key}**: {value}" for key, value in header_lines(report)]
    parts += ["", "## Flags and their rules", ""]
    parts += [f"- **{flag}**: {rule}" for flag, rule in report.rules_text.items()]
    parts += [
        "",
        "## Most instructive rows",
        "",
        "Largest disagreement between concentration rank and |effect| rank:",
        "",
    ]
    parts += [f"{i}. {why}" for i, (_, why) in enumerate(report.instructive(), start=1)]
    parts += ["", "## Effects beside concentration", ""]
    parts += [_md_table(row_columns(report), [row_cells(report, r) for r in report.rows])]
    columns, rows = agreement_cells(report)
    parts += [
        "",
        "## Agreement between concentration and causation",
        "",
        report.agreement_caveat,
        "",
    ]
    parts += [_md_table(columns, rows) if rows else "No kind has 3 or more heads: no agreement."]
    for table in report.section_tables():
        parts += ["", f"## {table.title}", "", table.intro, ""]
        parts += [_md_table(list(table.columns), [list(row) for row in table.rows])]
    for note in report.notes:
        parts += ["", f"> {note}"]
    if images:
        parts += ["", "## Figures", ""]
        parts += [f"![{caption}]({uri})" for caption, uri in images.items()]
    return "\n".join(parts) + "\n"


def to_html(
    report: Report,
    *,
    figures: bool | dict[str, Figure] = True,
) -> str:
    """The report as one self-contained, explorable HTML page (:mod:`interv.report.page`).

    Args:
        report: the report.
        figures: True = the report's standard figures, embedded as PNG; a dict =
            exactly these figures (caption -> Figure); False = no static figures (the
            page itself draws its heatmaps and scatters).
    """
    if figures is True:
        figures = standard_figures(report)
    return to_page(report, figures or None)


def _json_safe(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _json_safe(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_json_safe(v) for v in value]
    return value


def to_json(report: Report) -> str:
    """The whole report as strict JSON (NaN and infinities as null)."""
    return json.dumps(_json_safe(report.to_dict()), indent=1)


def to_csv(report: Report) -> str:
    """One CSV line per row; column names carry units."""
    h = report.header
    buffer = io.StringIO()
    writer = csv.writer(buffer)
    columns = [
        "index",
        "component",
        "layer",
        "head",
        "positions",
        "kind",
        "semantics",
        "base_run",
        f"effect_mean_{h.metric_unit}",
        "effect_ci_low",
        "effect_ci_high",
        "effect_std",
        "effect_min",
        "effect_max",
        "recovery_dimensionless",
        *[f"{name}_mean ({unit})" for name, unit in h.concentration_units.items()],
        "flags",
        "model",
        "task",
        "n_prompts",
        "metric",
    ]
    writer.writerow(columns)
    for r in report.rows:
        conc = [None] * len(METRICS) if r.concentration is None else list(r.concentration.values())
        writer.writerow(
            [
                r.index,
                None if r.site is None else r.site.component,
                None if r.site is None else r.site.layer,
                None if r.site is None else r.site.head,
                ""
                if r.site is None or r.site.positions is None
                else " ".join(map(str, r.site.positions)),
                r.kind,
                r.semantics,
                r.base_run,
                r.effect_mean,
                r.effect_ci_low,
                r.effect_ci_high,
                r.effect_std,
                r.effect_min,
                r.effect_max,
                r.recovery,
                *conc,
                "; ".join(r.flags),
                h.model,
                h.task,
                h.n_prompts,
                h.metric_name,
            ]
        )
    return buffer.getvalue()


def save_report(
    report: Report, directory: str | Path, *, figures: dict[str, Figure] | None = None
) -> dict[str, Path]:
    """Write ``report.md``, ``report.html``, ``report.json``, ``report.csv`` and PNG figures.

    Args:
        report: the report.
        directory: created if missing; existing report files are overwritten.
        figures: extra figures (file stem -> Figure) beside the standard ones.

    Returns:
        Format (``"markdown"``, ``"html"``, ``"json"``, ``"csv"``, ``"figure:<stem>"``)
        -> written path.
    """
    out = Path(directory)
    out.mkdir(parents=True, exist_ok=True)
    all_figures = {**standard_figures(report), **(figures or {})}
    paths: dict[str, Path] = {}
    for stem, figure in all_figures.items():
        path = out / f"{stem}.png"
        figure.savefig(path, dpi=100)
        paths[f"figure:{stem}"] = path
    texts = {
        "markdown": ("report.md", to_markdown(report, images={s: f"{s}.png" for s in all_figures})),
        "html": ("report.html", to_html(report, figures=all_figures)),
        "json": ("report.json", to_json(report)),
        "csv": ("report.csv", to_csv(report)),
    }
    for key, (name, text) in texts.items():
        (out / name).write_text(text, encoding="utf-8")
        paths[key] = out / name
    return paths
