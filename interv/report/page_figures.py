"""The page's figures as HTML and inline SVG: layer x head heatmaps and scatters.

- Heatmaps: one grid per concentration metric (one shown at a time) beside one grid
  per head group (:func:`interv.report.views.head_groups`) of the mean effect. Rows are
  the swept layers only, columns the heads; each cell prints its value and is coloured
  by it: viridis for concentration (over [0, 1] for metrics that are fractions, else
  over the shown range), ``RdBu_r`` for effects on one scale shared by every group,
  symmetric around 0, so a group that does little looks pale.
- Recovery grids: per residual component and base run, a layer x position table of the
  normalized recovery of single-position patches (one cell per patch; hover a cell for its
  semantics sentence and its effect with the interval).
- Scatters: per head group, each head's mean normalized entropy (x) against its mean
  effect (y), flagged heads ringed in their flag's colour; labels go to the largest
  |effect| first, are placed without overlap (:func:`interv.report.labels.place_labels`)
  and thinned where they do not fit.

Every cell and point carries ``data-h`` (``L3H2``): the page's script shows that head's
numbers on hover, focus or click. No stability promise; internal to :mod:`interv.report`.
"""

from __future__ import annotations

import html
import math
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from interv.analysis.concentration import METRICS
from interv.flags import FLAGS
from interv.report.colors import css_gradient, diverging, sequential, text_color
from interv.report.labels import Box, place_labels
from interv.report.views import SHORT, HeadGroup, head_groups, swept_layers

if TYPE_CHECKING:
    from interv.report.data import ReportData

__all__ = [
    "DEFAULT_METRIC",
    "effect_bound",
    "grid_groups",
    "heatmaps",
    "recovery_grids",
    "scatters",
]

DEFAULT_METRIC = "normalized_entropy"

# scatter geometry (pixels)
_WIDTH, _HEIGHT = 400, 290
_LEFT, _RIGHT, _TOP, _BOTTOM = 58, _WIDTH - 10, 10, _HEIGHT - 42
_MARKER = 3.5
_LABEL_FONT = 10  # px, monospace: every character is 0.6 em wide
_CHAR_WIDTH = 0.62 * _LABEL_FONT
_MAX_LABELS = 60


def _decimals(bound: float) -> int:
    """Decimals that show values up to ``bound`` with about three significant digits."""
    if not math.isfinite(bound) or bound <= 0:
        return 2
    return min(3, max(0, 2 - math.floor(math.log10(bound))))


def _finite(values: list[float]) -> list[float]:
    return [v for v in values if v is not None and math.isfinite(v)]


def _grid(
    *,
    caption: str,
    attrs: str,
    values: dict[tuple[int, int], float],
    layers: tuple[int, ...],
    n_heads: int,
    color: Callable[[float], str],
    decimals: int,
    legend: tuple[str, str, str],
    hidden: bool = False,
) -> str:
    head_row = "".join(f"<th>H{h}</th>" for h in range(n_heads))
    lines = []
    for layer in layers:
        cells = []
        for head in range(n_heads):
            value = values.get((layer, head))
            if value is None or not math.isfinite(value):
                cells.append('<td class="iv-na">·</td>')
                continue
            background = color(value)
            cells.append(
                f'<td data-h="L{layer}H{head}" tabindex="0" '
                f'style="background:{background};color:{text_color(background)}">'
                f"{value:.{decimals}f}</td>"
            )
        lines.append(f"<tr><th>L{layer}</th>{''.join(cells)}</tr>")
    low, high, gradient = legend
    return (
        f'<figure class="iv-heat{" iv-hide" if hidden else ""}"{attrs}>'
        f"<figcaption>{html.escape(caption)}</figcaption>"
        f'<table class="iv-grid"><thead><tr><th></th>{head_row}</tr></thead>'
        f"<tbody>{''.join(lines)}</tbody></table>"
        f'<div class="iv-legend"><span>{html.escape(low)}</span>'
        f'<span class="iv-bar" style="background:{gradient}"></span>'
        f"<span>{html.escape(high)}</span></div></figure>"
    )


def effect_bound(report: ReportData) -> float:
    """The largest |mean effect| of any whole-head row (metric unit); 1 when there is none."""
    values = _finite([row.effect_mean for row in report.rows if row.head is not None])
    return max((abs(v) for v in values), default=0.0) or 1.0


def heatmaps(report: ReportData) -> str:
    """Concentration grids (one per metric, the default one shown) and effect grids."""
    layers = swept_layers(report)
    if not layers:
        return ""
    n_heads = report.header.n_heads
    unit = report.header.metric_unit
    heads = {
        row.head: row.concentration
        for row in report.rows
        if row.head is not None and row.concentration is not None
    }
    parts = []
    for name, metric_unit in METRICS.items():
        values = {head: conc[name] for head, conc in heads.items()}
        finite = _finite(list(values.values()))
        if metric_unit.startswith("fraction"):
            low, high = 0.0, 1.0
        else:
            low, high = (min(finite), max(finite)) if finite else (0.0, 1.0)
        span = high - low or 1.0
        parts.append(
            _grid(
                caption=f"{name.replace('_', ' ')} ({metric_unit}), mean over prompts",
                attrs=f' data-metric="{name}" data-kind="concentration"',
                values=values,
                layers=layers,
                n_heads=n_heads,
                color=lambda v, low=low, span=span: sequential((v - low) / span),
                decimals=_decimals(max(abs(low), abs(high))),
                legend=(f"{low:.3g}", f"{high:.3g} {metric_unit}", css_gradient("sequential")),
                hidden=name != DEFAULT_METRIC,
            )
        )
    bound = effect_bound(report)
    for group in head_groups(report):
        parts.append(
            _grid(
                caption=f"{group.title} effect ({unit}), mean over prompts",
                attrs=f' data-group="{group.key}" data-kind="effect"',
                values={head: row.effect_mean for head, row in group.rows.items()},
                layers=layers,
                n_heads=n_heads,
                color=lambda v: diverging(0.5 + v / (2 * bound)),
                decimals=_decimals(bound),
                legend=(f"{-bound:.3g}", f"+{bound:.3g} {unit}", css_gradient("diverging")),
            )
        )
    return "".join(parts)


def _nice_step(span: float, n: int) -> float:
    raw = span / max(n, 1)
    power = 10 ** math.floor(math.log10(raw))
    for mantissa in (1, 2, 2.5, 5, 10):
        if mantissa * power >= raw:
            return mantissa * power
    return 10 * power


def _ticks(low: float, high: float, n: int = 5) -> tuple[list[float], int]:
    """Round tick values inside ``[low, high]`` and the decimals to print them with."""
    step = _nice_step(high - low, n)
    first = math.ceil(low / step - 1e-9) * step
    ticks = []
    value = first
    while value <= high + 1e-9 * step:
        ticks.append(0.0 if abs(value) < 1e-12 * step else value)
        value += step
    decimals = max(0, -math.floor(math.log10(step) + 1e-9))
    if round(step / 10**-decimals, 6) % 1:
        decimals += 1
    return ticks, decimals


def _domain(values: list[float], include_zero: bool) -> tuple[float, float]:
    low, high = min(values), max(values)
    if include_zero:
        low, high = min(low, 0.0), max(high, 0.0)
    span = high - low or max(abs(high), 1.0)
    return low - 0.06 * span, high + 0.06 * span


def _flag_key(flags_present: list[str]) -> str:
    keys = "".join(
        f'<span class="iv-key iv-k{FLAGS.index(flag)}">{html.escape(flag)}</span>'
        for flag in FLAGS
        if flag in flags_present
    )
    return f'<div class="iv-keys">{keys}</div>' if keys else ""


def _scatter(report: ReportData, group: HeadGroup) -> str:
    unit = report.header.metric_unit
    points = [
        (head, row)
        for head, row in group.rows.items()
        if row.concentration is not None
        and math.isfinite(row.concentration[DEFAULT_METRIC])
        and math.isfinite(row.effect_mean)
    ]
    if not points:
        return ""
    xs = [row.concentration[DEFAULT_METRIC] for _, row in points]
    ys = [row.effect_mean for _, row in points]
    x_low, x_high = _domain(xs, include_zero=False)
    y_low, y_high = _domain(ys, include_zero=True)

    def px(x: float) -> float:
        return _LEFT + (x - x_low) / (x_high - x_low) * (_RIGHT - _LEFT)

    def py(y: float) -> float:
        return _BOTTOM - (y - y_low) / (y_high - y_low) * (_BOTTOM - _TOP)

    svg = [
        f'<svg class="iv-scatter" viewBox="0 0 {_WIDTH} {_HEIGHT}" width="{_WIDTH}" '
        f'height="{_HEIGHT}" role="img" aria-label="{html.escape(group.title, quote=True)}: '
        f'{SHORT[DEFAULT_METRIC]} against effect">',
        f'<rect class="iv-plot" x="{_LEFT}" y="{_TOP}" width="{_RIGHT - _LEFT}" '
        f'height="{_BOTTOM - _TOP}"/>',
    ]
    x_ticks, x_dec = _ticks(x_low, x_high)
    for value in x_ticks:
        x = px(value)
        svg.append(
            f'<line class="iv-grid-line" x1="{x:.1f}" x2="{x:.1f}" y1="{_TOP}" y2="{_BOTTOM}"/>'
            f'<text class="iv-tick" x="{x:.1f}" y="{_BOTTOM + 13}" text-anchor="middle">'
            f"{value:.{x_dec}f}</text>"
        )
    y_ticks, y_dec = _ticks(y_low, y_high)
    for value in y_ticks:
        y = py(value)
        svg.append(
            f'<line class="iv-grid-line" x1="{_LEFT}" x2="{_RIGHT}" y1="{y:.1f}" y2="{y:.1f}"/>'
            f'<text class="iv-tick" x="{_LEFT - 4}" y="{y + 3.5:.1f}" text-anchor="end">'
            f"{value:.{y_dec}f}</text>"
        )
    svg.append(
        f'<line class="iv-zero" x1="{_LEFT}" x2="{_RIGHT}" y1="{py(0.0):.1f}" '
        f'y2="{py(0.0):.1f}"/>'
        f'<text class="iv-axis" x="{(_LEFT + _RIGHT) / 2}" y="{_HEIGHT - 8}" '
        f'text-anchor="middle">{SHORT[DEFAULT_METRIC]} ({METRICS[DEFAULT_METRIC]}), '
        "mean over prompts</text>"
        f'<text class="iv-axis" transform="rotate(-90)" x="{-(_TOP + _BOTTOM) / 2}" y="14" '
        f'text-anchor="middle">effect ({html.escape(unit)}), mean over prompts</text>'
    )
    flags_present: list[str] = []
    for (layer, head), row in points:
        x, y = px(row.concentration[DEFAULT_METRIC]), py(row.effect_mean)
        for i, flag in enumerate(row.flags):
            flags_present.append(flag)
            svg.append(
                f'<circle class="iv-ring iv-k{FLAGS.index(flag) if flag in FLAGS else 9}" '
                f'cx="{x:.1f}" cy="{y:.1f}" r="{_MARKER + 2.5 + 2 * i}"/>'
            )
        svg.append(
            f'<circle class="iv-pt" data-h="L{layer}H{head}" tabindex="0" cx="{x:.1f}" '
            f'cy="{y:.1f}" r="{_MARKER}"/>'
        )
    # the heads that carry the effect first: a flag never outranks a larger |effect|
    ranked = sorted(
        points, key=lambda item: (-abs(item[1].effect_mean), -len(item[1].flags), item[0])
    )[:_MAX_LABELS]
    anchors = [(px(r.concentration[DEFAULT_METRIC]), py(r.effect_mean)) for _, r in ranked]
    sizes = [(len(r.label) * _CHAR_WIDTH + 2, _LABEL_FONT + 2) for _, r in ranked]
    boxes = place_labels(
        anchors,
        sizes,
        Box(_LEFT + 1, _TOP + 1, _RIGHT - 1, _BOTTOM - 1),
        marker_radius=_MARKER + 1,
        markers=[(px(x), py(y)) for x, y in zip(xs, ys, strict=True)],
        radii=(2.0, 10.0, 20.0, 32.0),
    )
    for (_, row), (ax, ay), box in zip(ranked, anchors, boxes, strict=True):
        if box is None:
            continue
        near_x = min(max(ax, box.x0), box.x1)
        near_y = min(max(ay, box.y0), box.y1)
        if math.hypot(near_x - ax, near_y - ay) > _MARKER + 4:
            svg.append(
                f'<line class="iv-lead" x1="{ax:.1f}" y1="{ay:.1f}" x2="{near_x:.1f}" '
                f'y2="{near_y:.1f}"/>'
            )
        svg.append(
            f'<text class="iv-lab" data-h="{row.label}" x="{box.x0 + 1:.1f}" '
            f'y="{box.y1 - 2.5:.1f}">{row.label}</text>'
        )
    svg.append("</svg>")
    n_labelled = sum(box is not None for box in boxes)
    note = (
        f"{n_labelled} of {len(points)} heads labelled (largest |effect| first)"
        if n_labelled < len(points)
        else f"{len(points)} heads"
    )
    return (
        f'<figure class="iv-sc" data-group="{group.key}"><figcaption>'
        f"{html.escape(group.title)}: effect against {SHORT[DEFAULT_METRIC]} · {note}"
        f"</figcaption>{''.join(svg)}{_flag_key(flags_present)}</figure>"
    )


def scatters(report: ReportData) -> str:
    """One scatter per head group (groups without concentration are skipped)."""
    return "".join(_scatter(report, group) for group in head_groups(report))


def grid_groups(report: ReportData) -> dict[tuple[str, str], dict[tuple[int, int], Any]]:
    """The report's single-position patches of a layer-level component (the residual
    stream), exact rows only: ``(component, base run) -> (layer, position) -> row``."""
    groups: dict[tuple[str, str], dict[tuple[int, int], Any]] = {}
    for row in report.rows:
        site = row.site
        if (
            row.recovery is None
            or not row.exact
            or site is None
            or site.head is not None
            or site.positions is None
            or len(site.positions) != 1
        ):
            continue
        key = (site.component, row.base_run)
        groups.setdefault(key, {})[(site.layer, site.positions[0])] = row
    return groups


def recovery_grids(report: ReportData) -> str:
    """One layer x position table per :func:`grid_groups` entry: each cell the normalized
    recovery of one patch (dimensionless, coloured on -1 .. 1), its sentence in the cell's
    title; empty when the report has no such patches."""
    unit = report.header.metric_unit
    level = int(report.header.ci_level * 100)
    parts = []
    for (component, base_run), cells in grid_groups(report).items():
        layers = sorted({layer for layer, _ in cells})
        n_positions = max(position for _, position in cells) + 1
        head_row = "".join(f"<th>{p}</th>" for p in range(n_positions))
        lines = []
        for layer in layers:
            tds = []
            for position in range(n_positions):
                row = cells.get((layer, position))
                value = None if row is None else row.recovery
                if value is None or not math.isfinite(value):
                    tds.append('<td class="iv-na">·</td>')
                    continue
                background = diverging(0.5 + max(-1.0, min(1.0, value)) / 2)
                title = (
                    f"{row.semantics}: normalized recovery {value:.3f} (dimensionless, "
                    f"1 = clean, 0 = corrupted); effect {row.effect_mean:+.4g} {unit} "
                    f"({level}% CI {row.effect_ci_low:.4g} .. {row.effect_ci_high:.4g})"
                )
                tds.append(
                    f'<td tabindex="0" title="{html.escape(title, quote=True)}" '
                    f'data-layer="{layer}" data-pos="{position}" '
                    f'style="background:{background};color:{text_color(background)}">'
                    f"{value:.2f}</td>"
                )
            lines.append(f"<tr><th>L{layer}</th>{''.join(tds)}</tr>")
        caption = (
            f"{component} patched into the {base_run} run: normalized recovery "
            "(dimensionless), layer × position"
        )
        parts.append(
            f'<figure class="iv-heat iv-recovery" data-component="{html.escape(component)}">'
            f"<figcaption>{html.escape(caption)}</figcaption>"
            f'<table class="iv-grid"><thead><tr><th></th>{head_row}</tr></thead>'
            f"<tbody>{''.join(lines)}</tbody></table>"
            f'<div class="iv-legend"><span>-1</span><span class="iv-bar" '
            f'style="background:{css_gradient("diverging")}"></span><span>+1 (1 = clean '
            "behaviour)</span></div></figure>"
        )
    return "".join(parts)
