"""Renderers of a :class:`~interv.report.report.Report`: Markdown, HTML, JSON, CSV.

All formats carry the same content: the scope header, the flag rules, the most
instructive rows, one row per (site, intervention) with the effect beside the head's
concentration, and the concentration/causation agreement with its caveat. HTML is the
explorable page of :mod:`interv.report.page` (self-contained: script, style and PNG
figures inlined; every text escaped). JSON writes NaN as null. Markdown escapes HTML and
link brackets in every text that comes from a task, a model or a kind; CSV quotes a cell
that a spreadsheet would run as a formula, numbers staying numbers (:mod:`interv._inert`).
:func:`save_report` writes every format into one directory, never over a file interv did
not write unless asked to (``overwrite=True``).
"""

from __future__ import annotations

import csv
import io
import json
import math
import re
from pathlib import Path
from typing import TYPE_CHECKING

from interv._inert import csv_cell, markdown_text
from interv._outputs import OutputDir, claim_files
from interv._schema import json_ready
from interv.analysis.concentration import METRICS
from interv.errors import IntervError
from interv.report.kit import md_table
from interv.report.page import to_page
from interv.report.plots import standard_figures
from interv.report.views import agreement_cells, header_lines, row_cells, row_columns

if TYPE_CHECKING:
    from matplotlib.figure import Figure

    from interv.report.data import ReportData

__all__ = [
    "headline_lines",
    "report_files",
    "save_report",
    "to_csv",
    "to_html",
    "to_json",
    "to_markdown",
    "write_report",
]


def headline_lines(report: ReportData, n: int = 5) -> list[str]:
    """The headline as plain text lines: the baseline note, the heads with the largest
    |effect| beside their concentration ranks, the most concentrated heads beside their
    effects, and the instructive disagreements (with the rule that admits them)."""
    h = report.header
    unit = h.metric_unit
    level = f"{int(h.ci_level * 100)}% CI"
    lines = []
    note = report.baseline_note()
    if note:
        lines += [f"note: {note}"]
    kind = report.headline_kind
    if kind is not None:
        largest = report.largest_effects(n, kind)
        if largest:
            lines += [f"heads with the largest |effect| ({kind}), beside their concentration rank:"]
            lines += [
                f"  {head.head}: effect {head.effect.mean:+.4g} {unit} ({level} "
                f"{head.effect.ci_low:.4g} .. {head.effect.ci_high:.4g}), "
                f"{head.concentration_text}"
                for head in largest
            ]
            lines += [f"  semantics: {largest[0].semantics}"]
            lines += ["most concentrated heads, beside their effects:"]
            lines += [
                f"  {head.head}: normalized entropy {head.normalized_entropy:.3g}, effect "
                f"{head.effect.mean:+.4g} {unit} ({level} {head.effect.ci_low:.4g} .. "
                f"{head.effect.ci_high:.4g}), {head.effect_text}"
                for head in report.most_concentrated(n, kind)
            ]
    if kind is None:
        return lines
    floor = report.instructive_floor()
    bound = f"{floor:.4g} {unit}" if math.isfinite(floor) else "n/a: the report has no scale"
    rule = (
        f"(largest gap between concentration rank and |effect| rank, among heads with "
        f"|effect| > {report.flag_rules.near_zero_fraction:g} x effect scale = {bound})"
    )
    instructive = report.instructive(3)
    if instructive:
        lines += [f"instructive disagreements {rule}:"]
        lines += [f"  {i}. {why}" for i, (_, why) in enumerate(instructive, start=1)]
    else:
        lines += [f"instructive disagreements {rule}: none"]
    return lines


def _md_headline(report: ReportData) -> list[str]:
    md = markdown_text
    parts = ["", "## Headline", ""]
    for line in headline_lines(report):
        if line.startswith("  "):
            item = line.strip()
            numbered = re.match(r"(\d+)\. (.*)", item)
            parts.append(f"{numbered[1]}. {md(numbered[2])}" if numbered else f"- {md(item)}")
        else:
            parts += ["", md(line), ""]
    return parts


def to_markdown(report: ReportData, *, images: dict[str, str] | None = None) -> str:
    """The report as Markdown; ``images`` maps a caption to an image path or URI.

    Every text that comes from the report's data (model and task names, sentences,
    notes, table cells) goes through :func:`interv._inert.markdown_text`: it cannot open
    an HTML tag, a link or an image, nor break the document's structure.
    """
    md = markdown_text
    h = report.header
    parts = [f"# interv report: {md(h.model)} on {md(h.task)}", "", "## Scope", ""]
    parts += [f"- **{md(key)}**: {md(value)}" for key, value in header_lines(report)]
    parts += ["", "## Flags and their rules", ""]
    parts += [f"- **{md(flag)}**: {md(rule)}" for flag, rule in report.rules_text.items()]
    parts += _md_headline(report)
    parts += ["", "## Effects beside concentration", ""]
    parts += ["\n".join(md_table(row_columns(report), [row_cells(report, r) for r in report.rows]))]
    columns, rows = agreement_cells(report)
    parts += [
        "",
        "## Agreement between concentration and causation",
        "",
        md(report.agreement_caveat),
        "",
    ]
    parts += [
        "\n".join(md_table(columns, rows)) if rows else "No kind has 3 or more heads: no agreement."
    ]
    for table in report.section_tables():
        parts += ["", f"## {md(table.title)}", "", md(table.intro), ""]
        parts += ["\n".join(md_table(list(table.columns), [list(row) for row in table.rows]))]
    if report.screens:
        parts += ["", "## Screens and their audits", ""]
        parts += [f"- {md(summary.sentence)}" for summary in report.screens]
    for note in report.notes:
        parts += ["", f"> {md(note)}"]
    if images:
        parts += ["", "## Figures", ""]
        parts += [f"![{md(caption)}]({uri})" for caption, uri in images.items()]
    return "\n".join(parts) + "\n"


def to_html(
    report: ReportData,
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


def to_json(report: ReportData) -> str:
    """The whole report as strict JSON (NaN and infinities as null)."""
    return json.dumps(json_ready(report.to_dict()), indent=1)


def to_csv(report: ReportData) -> str:
    """One CSV line per row; column names carry units. A text cell that a spreadsheet
    would read as a formula is prefixed with ``'``; numbers are written as numbers
    (:func:`interv._inert.csv_cell`)."""
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
        "status",
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
    writer.writerow([csv_cell(c) for c in columns])
    for r in report.rows:
        conc = [None] * len(METRICS) if r.concentration is None else list(r.concentration.values())
        cells = [
            r.index,
            None if r.site is None else r.site.component,
            None if r.site is None else r.site.layer,
            None if r.site is None else r.site.head,
            ""
            if r.site is None or r.site.positions is None
            else " ".join(map(str, r.site.positions)),
            r.kind,
            r.semantics,
            r.status,
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
        writer.writerow([csv_cell(c) for c in cells])
    return buffer.getvalue()


_REPORT_FILES = {
    "markdown": "report.md",
    "html": "report.html",
    "json": "report.json",
    "csv": "report.csv",
}
_FIGURE_STEM = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,99}$")


def _extra_figures(figures: dict[str, Figure] | None) -> dict[str, Figure]:
    extra = dict(figures or {})
    for stem in extra:
        if not isinstance(stem, str) or not _FIGURE_STEM.match(stem) or stem.startswith("report"):
            raise IntervError(
                f"figure name {stem!r} must be a plain file stem (letters, digits, '_', '.', "
                "'-'; not a path, not starting with 'report')"
            )
    return extra


def report_files(
    report: ReportData, figures: dict[str, Figure] | None = None
) -> dict[str, tuple[str, bytes]]:
    """Every file of a saved report, rendered in memory: format (``"markdown"``,
    ``"html"``, ``"json"``, ``"csv"``, ``"figure:<stem>"``) -> (file name, bytes).

    ``figures``: extra figures (file stem -> Figure) beside the standard ones; a stem is
    a plain name (letters, digits, ``_``, ``.``, ``-``), never a path.
    """
    extra = _extra_figures(figures)
    all_figures = {**standard_figures(report), **extra}
    files: dict[str, tuple[str, bytes]] = {}
    for stem, figure in all_figures.items():
        buffer = io.BytesIO()
        figure.savefig(buffer, format="png", dpi=100)
        files[f"figure:{stem}"] = (f"{stem}.png", buffer.getvalue())
    texts = {
        "markdown": to_markdown(report, images={s: f"{s}.png" for s in all_figures}),
        "html": to_html(report, figures=all_figures),
        "json": to_json(report),
        "csv": to_csv(report),
    }
    for key, text in texts.items():
        files[key] = (_REPORT_FILES[key], text.encode("utf-8"))
    return files


def write_report(
    report: ReportData, output: OutputDir, *, figures: dict[str, Figure] | None = None
) -> dict[str, Path]:
    """Render every file of the report (:func:`report_files`), then write each into the
    claimed directory ``output`` (:meth:`interv._outputs.OutputDir.write_bytes`: atomic,
    recorded as interv's). Returns format -> written path."""
    files = report_files(report, figures)
    return {key: output.write_bytes(name, data) for key, (name, data) in files.items()}


def save_report(
    report: ReportData,
    directory: str | Path,
    *,
    figures: dict[str, Figure] | None = None,
    overwrite: bool = False,
) -> dict[str, Path]:
    """Write ``report.md``, ``report.html``, ``report.json``, ``report.csv`` and PNG figures.

    interv's no-overwrite rule holds here as on the command line: each file must be new,
    or one interv wrote there and nobody changed since (listed with its hash in the
    directory's ``.interv-files.json``); anything else is refused (the report's own names
    before anything is rendered), and a refused or failed save removes the files it had
    written. Other files in the directory are left alone. Every file is written through
    :func:`interv._outputs.write_file` (never through a link).

    Args:
        report: the report.
        directory: created if missing.
        figures: extra figures (file stem -> Figure) beside the standard ones.
        overwrite: True replaces the report's files whoever wrote them (still never a
            link or a directory at those names).

    Returns:
        Format (``"markdown"``, ``"html"``, ``"json"``, ``"csv"``, ``"figure:<stem>"``)
        -> written path.

    Raises:
        IntervError: a file of someone else's at one of the report's names, a directory
            that cannot be created or written, or a full disk (nothing half-written kept).
    """
    names = [*_REPORT_FILES.values(), *[f"{stem}.png" for stem in _extra_figures(figures)]]
    output = claim_files(
        directory, names, what="report file", by="interv save_report", overwrite=overwrite
    )
    with output:  # the standard figures' names are checked as they are written
        files = report_files(report, figures)
        return {key: output.write_bytes(name, data) for key, (name, data) in files.items()}
