"""The report as one self-contained, explorable HTML page (no CDN, no server).

>>> page = to_page(report)  # a whole document; save_report writes it as report.html
>>> report._repr_html_() == page_fragment(report)  # what a notebook shows
True

The page opens with a headline: the scope in one line; a note when the ablation baselines
disagree about how many heads matter; the heads with the largest |effect| (with intervals)
beside their concentration ranks, and the most concentrated heads beside their effects;
the rank agreement between normalized entropy and |effect| with its bootstrap interval;
and the heads whose concentration rank and |effect| rank disagree most among those with
an effect beyond the near-zero bound, each with its semantics sentence.
Then: layer x head heatmaps of concentration beside the effect of each intervention
group (hover, focus or click a cell for that head's numbers with units and the sentence
of each intervention on it), the concentration-vs-effect scatters, the layer x position
recovery grid of single-position residual patches, and the full table
(one row per site and intervention, or one row per head with the kinds as columns),
sortable by any column and filterable by kind, layer and flag; then the agreement
table, the scope, the flag rules and the static PNG figures.

Everything is rendered into the HTML itself; the inlined script (``assets/report.js``,
plain JavaScript written for interv, MIT licence) only sorts, filters, switches views,
folds sections and shows head details. Without it the page is a complete static
document, and printing (or saving as PDF) shows every row and column whatever the
filters on screen. CSS is scoped to ``.interv-report`` and the script initializes every
report on the page once, so several reports can share one notebook.
"""

from __future__ import annotations

import base64
import io
from typing import TYPE_CHECKING

from interv.analysis.concentration import METRICS
from interv.flags import FLAGS
from interv.report.kit import asset, escape, number
from interv.report.page_figures import (
    DEFAULT_METRIC,
    effect_bound,
    grid_groups,
    heatmaps,
    recovery_grids,
    scatters,
)
from interv.report.page_tables import flag_badges, hidden_column_css, long_table, wide_table
from interv.report.views import (
    agreement_cells,
    head_groups,
    header_lines,
    headline_agreement,
    instructive_heads,
    swept_layers,
)

if TYPE_CHECKING:
    from matplotlib.figure import Figure

    from interv.report.data import ReportData
    from interv.report.sections import RankedHead

__all__ = ["page_fragment", "to_page"]


def _layers_text(report: ReportData) -> str:
    layers = swept_layers(report)
    n_layers = report.header.n_layers
    if len(layers) == n_layers:
        return f"all {n_layers} layers"
    listed = ", ".join(str(layer) for layer in layers)
    return f"layer{'s' if len(layers) != 1 else ''} {listed} of {n_layers}"


def _scope_line(report: ReportData) -> str:
    """The scope in one line: model, task, prompts, heads, metric and query positions."""
    h = report.header
    heads = {row.head for row in report.rows if row.head is not None}
    where = h.query_positions.split(" (")[0]
    swept = f"{len(heads)} heads in {_layers_text(report)}" if heads else "no head rows"
    return (
        f"{h.model} on {h.task} · {h.n_prompts} prompt pairs · {swept} · effect = change of "
        f"{h.metric_name} in {h.metric_unit} · concentration at {where}"
    )


def _agreement_text(report: ReportData) -> str:
    entries = headline_agreement(report, DEFAULT_METRIC)
    level = int(report.header.ci_level * 100)
    if not entries:
        return (
            "<p class='iv-agree'>No intervention kind has 3 or more heads: no rank "
            "agreement between concentration and |effect|.</p>"
        )
    first, *others = entries
    lead = (
        f"<p class='iv-agree'>Rank agreement of normalized entropy with |effect| "
        f"({escape(first.kind)}, {first.n_heads} heads): "
        f"<b>Spearman ρ = {number(first.rho, 2)}</b> "
        f"({level}% bootstrap interval over prompts {number(first.ci_low, 2)} … "
        f"{number(first.ci_high, 2)}; dimensionless, −1 … 1)."
    )
    if others:
        lead += " Other kinds: " + "; ".join(
            f"{escape(a.kind)} ρ = {number(a.rho, 2)} "
            f"({number(a.ci_low, 2)} … {number(a.ci_high, 2)})"
            for a in others
        )
        lead += "."
    return lead + f"</p><p class='iv-caveat'>{escape(report.agreement_caveat)}</p>"


_HEADLINE_N = 5


def _others(head: RankedHead) -> str:
    if not head.other_effects:
        return ""
    listed = "; ".join(f"{escape(kind)} {number(value, 3)}" for kind, value in head.other_effects)
    return f"<div class='iv-others'>same head, other interventions (mean effect): {listed}</div>"


def _effect_html(head: RankedHead, report: ReportData) -> str:
    h = report.header
    return (
        f"effect <b>{number(head.effect.mean, 3)} {escape(h.metric_unit)}</b> "
        f"({int(h.ci_level * 100)}% CI {number(head.effect.ci_low, 3)} … "
        f"{number(head.effect.ci_high, 3)})"
    )


def _largest_list(report: ReportData, kind: str) -> str:
    heads = report.largest_effects(_HEADLINE_N, kind)
    if not heads:
        return ""
    items = "".join(
        f"<li data-h='{escape(head.head)}'><b>{escape(head.head)}</b>: "
        f"{_effect_html(head, report)} · "
        f"<b>{escape(head.concentration_text)}</b> · sink mass {number(head.sink_mass, 3)} "
        f"{flag_badges(head.flags)}{_others(head)}"
        f"<div class='iv-sem'>{escape(head.semantics)}</div></li>"
        for head in heads
    )
    return (
        f"<h2>The heads with the largest |effect| ({escape(kind)})</h2>"
        f"<p class='iv-hint'>Each with its interval over prompts and its rank by "
        f"concentration among the {heads[0].n_heads} heads (1st = lowest normalized entropy, "
        "fraction of log n): what matters, and how concentrated it is.</p>"
        f"<ol class='iv-largest'>{items}</ol>"
    )


def _concentrated_list(report: ReportData, kind: str) -> str:
    heads = report.most_concentrated(_HEADLINE_N, kind)
    if not heads:
        return ""
    items = "".join(
        f"<li data-h='{escape(head.head)}'><b>{escape(head.head)}</b>: normalized entropy "
        f"<b>{number(head.normalized_entropy, 3)}</b>, sink mass {number(head.sink_mass, 3)} · "
        f"{_effect_html(head, report)} · <b>{escape(head.effect_text)}</b> "
        f"{flag_badges(head.flags)}</li>"
        for head in heads
    )
    return (
        "<h2>The most concentrated heads, beside their effects</h2>"
        f"<p class='iv-hint'>Lowest normalized entropy first; effect under {escape(kind)} (the "
        "sentence as above).</p>"
        f"<ol class='iv-concentrated'>{items}</ol>"
    )


def _instructive_list(report: ReportData) -> str:
    floor = report.instructive_floor()
    unit = escape(report.header.metric_unit)
    rule = (
        f"Only heads whose |effect| exceeds {report.flag_rules.near_zero_fraction:g} × effect "
        f"scale = {number(floor, 3)} {unit} are candidates: a tiny effect ranks low whatever "
        "the head does."
    )
    items = []
    for row, why in instructive_heads(report, 3):
        flags = flag_badges(row.flags)
        head = f' data-h="{row.label}"' if row.head is not None else ""
        items.append(
            f"<li{head}><b>{escape(row.label)}</b> · {escape(row.kind)}: effect "
            f"<b>{number(row.effect_mean, 3)} {unit}</b> "
            f"({int(report.header.ci_level * 100)}% CI {number(row.effect_ci_low, 3)} … "
            f"{number(row.effect_ci_high, 3)}), normalized entropy "
            f"<b>{number(row.concentration[DEFAULT_METRIC], 3)}</b> "
            f"({escape(report.header.concentration_units[DEFAULT_METRIC])}) {flags}"
            f"<div class='iv-sem'>{escape(row.semantics)}</div>"
            f"<div class='iv-why'>{escape(why)}</div></li>"
        )
    if not items:
        return (
            "<h2>Instructive disagreements</h2><p class='iv-hint iv-none-instructive'>None: no "
            f"head's effect is large enough to rank. {rule}</p>"
        )
    return (
        "<h2>Instructive disagreements</h2><p class='iv-hint'>Where the concentration rank "
        f"and the |effect| rank disagree most. {rule}</p><ol class='iv-instructive'>"
        + "".join(items)
        + "</ol>"
    )


def _headline(report: ReportData) -> str:
    h = report.header
    note = report.baseline_note()
    kind = report.headline_kind
    parts = [
        "<header class='iv-headline' data-part='headline'>",
        f"<h1>interv report: {escape(h.model)} on {escape(h.task)}</h1>",
        f"<p class='iv-scope'>{escape(_scope_line(report))}</p>",
        f"<p class='iv-caveat iv-baseline-note'>{escape(note)}</p>" if note else "",
    ]
    if kind is not None:
        parts += [_largest_list(report, kind), _concentrated_list(report, kind)]
    parts.append(_agreement_text(report))
    if kind is not None:
        parts.append(_instructive_list(report))
    parts.append("</header>")
    return "".join(parts)


def _heatmap_section(report: ReportData) -> str:
    grids = heatmaps(report)
    if not grids:
        return ""
    options = "".join(
        f"<option value='{name}'{' selected' if name == DEFAULT_METRIC else ''}>"
        f"{escape(name.replace('_', ' '))} ({escape(unit)})</option>"
        for name, unit in METRICS.items()
    )
    bound = effect_bound(report)
    return (
        "<section class='iv-section' data-part='heatmaps'>"
        "<h2>Concentration beside effect, layer × head</h2>"
        "<p class='iv-hint'>Hover, focus or click a cell for that head's numbers and the "
        "sentence of every intervention on it (click pins, Esc unpins). Only the swept layers "
        f"are drawn. Effect colours share one scale, ±{number(bound, 3)} "
        f"{escape(report.header.metric_unit)}, so a kind that does little looks pale.</p>"
        "<div class='iv-controls'><label>concentration metric "
        f"<select data-control='metric'>{options}</select></label></div>"
        f"<div class='iv-fig iv-heatmaps'>{grids}</div></section>"
    )


def _scatter_section(report: ReportData) -> str:
    figures = scatters(report)
    if not figures:
        return ""
    return (
        "<section class='iv-section' data-part='scatter'>"
        "<h2>Concentration against effect</h2><p class='iv-hint'>One panel per intervention; "
        "rings mark flags. Labels that would overlap are left out; hover any point.</p>"
        f"<div class='iv-fig iv-scatters'>{figures}</div></section>"
    )


def _grid_section(report: ReportData) -> str:
    """The layer x position recovery grid of the single-position residual patches."""
    grids = recovery_grids(report)
    if not grids:
        return ""
    groups = grid_groups(report)
    example = next(iter(next(iter(groups.values())).values()))
    return (
        "<section class='iv-section' data-part='grid'>"
        "<h2>Recovery by layer and position</h2><p class='iv-hint'>Each cell is one exact "
        "intervention: the residual stream at one layer and one position (an absolute token "
        "index of the padded prompts) patched from the other run, everything else left as it "
        "was; the number is the normalized recovery of the prompt-mean metric "
        f"({escape(report.header.recovery_definition)}). Hover a cell for its sentence and its "
        f"effect with the interval. For example: <i>{escape(example.semantics)}</i>.</p>"
        f"<div class='iv-fig iv-heatmaps'>{grids}</div></section>"
    )


def _options(values: list[tuple[str, str]]) -> str:
    return "".join(f"<option value='{escape(v)}'>{escape(text)}</option>" for v, text in values)


def _table_section(report: ReportData) -> str:
    layers = sorted({row.site.layer for row in report.rows if row.site is not None})
    kinds = _options([("", "every kind"), *[(k, k) for k in report.kinds]])
    layer_options = _options([("", "every layer"), *[(str(x), f"layer {x}") for x in layers]])
    flags = _options([("", "any flags"), ("-", "no flag"), *[(f, f) for f in FLAGS]])
    wide = wide_table(report) if head_groups(report) else ""
    views = (
        "<label>view <select data-control='view'>"
        + _options(
            [("long", "one row per intervention"), ("wide", "one row per head, kinds as columns")]
        )
        + "</select></label>"
        if wide
        else ""
    )
    return (
        "<section class='iv-section' data-part='table'>"
        f"<h2>Every number: {len(report.rows)} rows</h2>"
        "<p class='iv-hint'>Click a column header to sort (again to reverse). Effects are "
        f"in {escape(report.header.metric_unit)}: {escape(report.header.effect_definition)}. "
        "Concentration: mean ± sd over prompts. Printing shows every row and column.</p>"
        "<div class='iv-controls'>"
        f"{views}"
        f"<label>kind <select data-control='kind'>{kinds}</select></label>"
        f"<label>layer <select data-control='layer'>{layer_options}</select></label>"
        f"<label>flag <select data-control='flag'>{flags}</select></label>"
        "<label><input type='checkbox' data-control='all'> all columns</label>"
        "<span class='iv-count' aria-live='polite'></span></div>"
        f"<div class='iv-scroll'>{long_table(report)}{wide}</div></section>"
    )


def _agreement_section(report: ReportData) -> str:
    columns, rows = agreement_cells(report)
    if rows:
        numeric = {"n heads", "Spearman rho (metric vs |effect|)"}
        head = "".join(
            f"<th{' data-type=num' if c in numeric else ''}>{escape(c)}</th>" for c in columns
        )
        body = "".join("<tr>" + "".join(f"<td>{escape(c)}</td>" for c in r) + "</tr>" for r in rows)
        table = (
            f"<table class='iv-table'><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"
        )
    else:
        table = "<p>No kind has 3 or more heads: no agreement.</p>"
    return (
        "<section class='iv-section iv-fold' data-part='agreement' data-folded='1'>"
        f"<h2>Agreement of every concentration metric with |effect| ({len(rows)} rows)</h2>"
        f"<div class='iv-body'><p>{escape(report.agreement_caveat)}</p>"
        "<p class='iv-hint'>Spearman ρ is dimensionless (−1 … 1); intervals are percentile "
        "bootstrap intervals over prompts.</p>"
        f"<div class='iv-scroll'>{table}</div></div></section>"
    )


def _joined_sections(report: ReportData) -> str:
    """Direct vs indirect, path patches and interactions, each as its own table."""
    parts = []
    for table in report.section_tables():
        head = "".join(f"<th>{escape(c)}</th>" for c in table.columns)
        body = "".join(
            "<tr>" + "".join(f"<td>{escape(c)}</td>" for c in row) + "</tr>" for row in table.rows
        )
        parts.append(
            f"<section class='iv-section' data-part='{escape(table.title.lower())}'>"
            f"<h2>{escape(table.title)} ({len(table.rows)} rows)</h2><p>{escape(table.intro)}</p>"
            f"<div class='iv-scroll'><table class='iv-table'><thead><tr>{head}</tr></thead>"
            f"<tbody>{body}</tbody></table></div></section>"
        )
    return "".join(parts)


def _screen_section(report: ReportData) -> str:
    """The screens behind the rows: what was intervened on, the audit, and the estimates."""
    if not report.screens:
        return ""
    items = "".join(f"<li>{escape(summary.sentence)}</li>" for summary in report.screens)
    notes = "".join(f"<p class='iv-caveat'>{escape(note)}</p>" for note in report.notes)
    return (
        "<section class='iv-section' data-part='screens'>"
        f"<h2>Screens and their audits ({len(report.screens)})</h2><ul>{items}</ul>{notes}"
        "</section>"
    )


def _scope_section(report: ReportData) -> str:
    scope = "".join(f"<dt>{escape(k)}</dt><dd>{escape(v)}</dd>" for k, v in header_lines(report))
    rules = "".join(
        f"<dt>{escape(f)}</dt><dd>{escape(r)}</dd>" for f, r in report.rules_text.items()
    )
    notes = "".join(f"<blockquote>{escape(note)}</blockquote>" for note in report.notes)
    return (
        "<section class='iv-section iv-fold' data-part='scope' data-folded='1'>"
        "<h2>Scope, definitions and flag rules</h2><div class='iv-body'>"
        f"<dl class='iv-dl'>{scope}</dl><h3>Flags and their rules</h3>"
        f"<dl class='iv-dl'>{rules}</dl>{notes}</div></section>"
    )


def _png(figure: Figure) -> tuple[str, int, int]:
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=100)
    width, height = (round(v * 100) for v in figure.get_size_inches())
    uri = "data:image/png;base64," + base64.b64encode(buffer.getvalue()).decode("ascii")
    return uri, width, height


def _static_section(figures: dict[str, Figure]) -> str:
    items = []
    for caption, figure in figures.items():
        uri, width, height = _png(figure)
        items.append(
            f"<figure class='iv-static'><img src='{uri}' width='{width}' height='{height}' "
            f"alt='{escape(caption)}'><figcaption>{escape(caption)}.png</figcaption></figure>"
        )
    return (
        "<section class='iv-section iv-fold' data-part='figures' data-folded='1'>"
        f"<h2>Static figures ({len(items)} PNG, as saved beside this page)</h2>"
        f"<div class='iv-body'>{''.join(items)}</div></section>"
    )


def page_fragment(report: ReportData, figures: dict[str, Figure] | None = None) -> str:
    """The page as one ``<div class="interv-report">`` with its style and script inlined.

    Args:
        report: the report.
        figures: static figures (caption -> Figure) to embed as PNG at their natural
            size; None = none (notebook display).
    """
    parts = [
        "<div class='interv-report'>",
        f"<style>{asset('report.css')}{hidden_column_css(report)}</style>",
        _headline(report),
        _screen_section(report),
        _heatmap_section(report),
        _scatter_section(report),
        _grid_section(report),
        _table_section(report),
        _joined_sections(report),
        _agreement_section(report),
        _scope_section(report),
    ]
    if figures:
        parts.append(_static_section(figures))
    parts.append(f"<script>{asset('report.js')}</script></div>")
    return "".join(parts)


def to_page(report: ReportData, figures: dict[str, Figure] | None = None) -> str:
    """The whole HTML document: :func:`page_fragment` in a page with a title."""
    title = f"interv report: {report.header.model} on {report.header.task}"
    return (
        "<!DOCTYPE html>\n<html lang='en'><head><meta charset='utf-8'>"
        "<meta name='viewport' content='width=device-width, initial-scale=1'>"
        f"<title>{escape(title)}</title><style>@page{{size:A4 landscape;margin:8mm}}</style>"
        "</head><body>"
        f"{page_fragment(report, figures)}</body></html>\n"
    )
