"""Renderers of a :class:`~interv.report.table.Report`: Markdown, HTML, JSON, CSV.

All formats carry the same content: the scope header, the flag rules, the most
instructive rows, one row per (site, intervention) with the effect beside the head's
concentration, and the concentration/causation agreement with its caveat. HTML is
self-contained (figures embedded as base64 PNG data URIs). JSON writes NaN as null.
:func:`save_report` writes every format into one directory.
"""

from __future__ import annotations

import base64
import csv
import html
import io
import json
import math
from pathlib import Path
from typing import TYPE_CHECKING, Any

from interv.analysis.concentration import METRICS

if TYPE_CHECKING:
    from matplotlib.figure import Figure

    from interv.report.table import Report, ReportRow

__all__ = ["save_report", "to_csv", "to_html", "to_json", "to_markdown"]

_SHORT = {
    "entropy": "H",
    "normalized_entropy": "H/log n",
    "sink_mass": "sink mass",
    "content_entropy": "H(q)",
    "content_normalized_entropy": "H(q)/log(n-|S|)",
    "sink_contribution_share": "sink contrib. share",
    "contribution_norm": "contrib. norm",
}


def _fmt(value: float | None, digits: int = 4) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "n/a"
    return f"{value:.{digits}g}"


def _header_lines(report: Report) -> list[tuple[str, str]]:
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
            f"clean mean {_fmt(h.clean_mean)} {h.metric_unit}, corrupted mean "
            f"{_fmt(h.corrupted_mean)} {h.metric_unit}; effect scale |clean - corrupted| = "
            f"{_fmt(h.effect_scale)} {h.metric_unit}",
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


def _row_cells(report: Report, row: ReportRow) -> list[str]:
    unit = report.header.metric_unit
    cells = [
        row.label,
        row.kind,
        row.semantics,
        f"{_fmt(row.effect_mean)} [{_fmt(row.effect_ci_low)}, {_fmt(row.effect_ci_high)}] {unit}",
        f"sd {_fmt(row.effect_std)}, {_fmt(row.effect_min)}..{_fmt(row.effect_max)} {unit}",
        _fmt(row.recovery, 3),
    ]
    for name in METRICS:
        if row.concentration is None:
            cells.append("n/a")
        else:
            cells.append(
                f"{_fmt(row.concentration[name], 3)} ± {_fmt(row.concentration_std[name], 2)}"
            )
    cells.append(", ".join(row.flags))
    return cells


def _row_columns(report: Report) -> list[str]:
    units = report.header.concentration_units
    return [
        "site",
        "kind",
        "semantics",
        f"effect mean [{int(report.header.ci_level * 100)}% CI]",
        "per-prompt spread",
        "recovery (dimensionless)",
        *[f"{_SHORT[name]} ({units[name]}), mean ± sd over prompts" for name in METRICS],
        "flags",
    ]


def _agreement_cells(report: Report) -> tuple[list[str], list[list[str]]]:
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
            _fmt(a.rho, 3),
            f"[{_fmt(a.ci_low, 3)}, {_fmt(a.ci_high, 3)}]",
        ]
        for a in report.agreement
    ]
    return columns, rows


def _md_table(columns: list[str], rows: list[list[str]]) -> str:
    def line(cells: list[str]) -> str:
        return "| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |"

    return "\n".join([line(columns), line(["---"] * len(columns)), *[line(r) for r in rows]])


def to_markdown(report: Report, *, images: dict[str, str] | None = None) -> str:
    """The report as Markdown; ``images`` maps a caption to an image path or URI."""
    parts = [f"# interv report: {report.header.model} on {report.header.task}", "", "## Scope", ""]
    parts += [f"- **{key}**: {value}" for key, value in _header_lines(report)]
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
    parts += [_md_table(_row_columns(report), [_row_cells(report, r) for r in report.rows])]
    columns, rows = _agreement_cells(report)
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


def _png_data_uri(figure: Figure) -> str:
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=100)
    return "data:image/png;base64," + base64.b64encode(buffer.getvalue()).decode("ascii")


def _html_table(columns: list[str], rows: list[list[str]]) -> str:
    head = "".join(f"<th>{html.escape(c)}</th>" for c in columns)
    body = "".join(
        "<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in row) + "</tr>" for row in rows
    )
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def to_html(
    report: Report,
    *,
    figures: bool | dict[str, Figure] = True,
) -> str:
    """A self-contained HTML page (figures embedded as base64 PNG data URIs).

    Args:
        report: the report.
        figures: True = the report's standard figures; a dict = exactly these figures
            (caption -> Figure); False = no figures (notebook display).
    """
    title = f"interv report: {report.header.model} on {report.header.task}"
    parts = [
        "<!DOCTYPE html>",
        f"<html><head><meta charset='utf-8'><title>{html.escape(title)}</title>",
        "<style>table{border-collapse:collapse;font-size:12px}td,th{border:1px solid #ccc;"
        "padding:2px 4px;vertical-align:top}img{max-width:100%}</style></head><body>",
        f"<h1>{html.escape(title)}</h1><h2>Scope</h2><ul>",
        *[f"<li><b>{html.escape(k)}</b>: {html.escape(v)}</li>" for k, v in _header_lines(report)],
        "</ul><h2>Flags and their rules</h2><ul>",
        *[
            f"<li><b>{html.escape(f)}</b>: {html.escape(r)}</li>"
            for f, r in report.rules_text.items()
        ],
        "</ul><h2>Most instructive rows</h2><ol>",
        *[f"<li>{html.escape(why)}</li>" for _, why in report.instructive()],
        "</ol><h2>Effects beside concentration</h2>",
        _html_table(_row_columns(report), [_row_cells(report, r) for r in report.rows]),
        "<h2>Agreement between concentration and causation</h2>",
        f"<p>{html.escape(report.agreement_caveat)}</p>",
        _html_table(*_agreement_cells(report)),
        *[
            f"<h2>{html.escape(table.title)}</h2><p>{html.escape(table.intro)}</p>"
            + _html_table(list(table.columns), [list(row) for row in table.rows])
            for table in report.section_tables()
        ],
        *[f"<blockquote>{html.escape(note)}</blockquote>" for note in report.notes],
    ]
    if figures is not False:
        from interv.report.plots import standard_figures

        all_figures = figures if isinstance(figures, dict) else standard_figures(report)
        parts.append("<h2>Figures</h2>")
        for caption, figure in all_figures.items():
            uri = _png_data_uri(figure)
            parts.append(
                f"<figure><img src='{uri}' alt='{html.escape(caption)}'>"
                f"<figcaption>{html.escape(caption)}</figcaption></figure>"
            )
    parts.append("</body></html>")
    return "\n".join(parts)


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
    from interv.report.plots import standard_figures

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
