"""Plots that keep concentration and causation side by side (matplotlib).

Every function returns a ``matplotlib.figure.Figure`` and accepts the axes to draw
into (``ax`` / ``axes``); without them it makes a new figure with
``matplotlib.figure.Figure`` (no pyplot state, nothing shown or saved implicitly).
matplotlib is imported inside the functions, so importing interv does not import it.
Axis labels carry units; titles carry the scope.

Figures are sized for the page they are embedded in (at most 10 inches wide at 100 dpi,
text at 7 points or more): grids draw only the swept layers, with integer layer ticks;
point labels never overlap (:func:`interv.report.labels.place_labels`: the ones that
do not fit are left out, and the title says how many are shown); tick labels are
thinned where they would collide; colour-bar labels stay inside the figure.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import torch

from interv.errors import IntervError
from interv.flags import FLAGS
from interv.report.flags import is_ablation
from interv.report.labels import Box, place_labels

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

    from interv.analysis.pruning.curves import PruningCurves
    from interv.report.data import ReportData

__all__ = [
    "attention_row",
    "baseline_comparison",
    "concentration_vs_effect",
    "head_heatmaps",
    "plot_pruning_curves",
    "recovery_by_layer_position",
    "standard_figures",
]

_HEATMAP_METRICS = ("normalized_entropy", "sink_mass", "content_entropy")
_FLAG_COLORS = dict(
    zip(FLAGS, ("tab:blue", "tab:red", "tab:purple", "tab:orange", "tab:gray"), strict=True)
)
_FONT = 7  # points: the smallest text of any figure
_MAX_BARS_HEADS = 40  # heads drawn by baseline_comparison
_MAX_LABELS = 40  # labels tried by concentration_vs_effect


def _grid_layers(report: ReportData) -> list[int]:
    """Layers with a head row carrying concentration (the swept layers), ascending."""
    return sorted({r.site.layer for r in report.rows if r.concentration is not None})


def _thinned_ticks(n: int, span_inches: float, label_chars: int, vertical: bool) -> list[int]:
    """Indices 0..n-1 to label so that labels of ``label_chars`` characters at the figure
    font do not collide along an axis ``span_inches`` long."""
    extent = _FONT * (1.4 if vertical else 0.62 * label_chars + 1.0)  # points per label
    fit = max(1, int(span_inches * 72 / extent))
    step = max(1, math.ceil(n / fit))
    return list(range(0, n, step))


def _label_points(
    ax: Axes,
    xs: list[float],
    ys: list[float],
    labels: list[str],
    markers: list[tuple[float, float]],
) -> int:
    """Annotate points (most important first) where a label fits without overlap.

    Draws the figure once (without rendering) to fix its layout, measures each label,
    places them with :func:`interv.report.labels.place_labels` in display pixels and
    writes them as offsets in points (so they survive saving at another dpi). Returns
    the number of labels drawn. Labels keep clear of every point in ``markers`` (data
    coordinates), labelled or not.
    """
    figure = ax.figure
    figure.draw_without_rendering()
    sizes = []
    for label in labels:
        probe = ax.text(0, 0, label, fontsize=_FONT)
        extent = probe.get_window_extent()
        sizes.append((extent.width, extent.height))
        probe.remove()
    anchors = [tuple(p) for p in ax.transData.transform(list(zip(xs, ys, strict=True)))]
    bbox = ax.bbox
    boxes = place_labels(
        anchors,
        sizes,
        Box(bbox.x0 + 1, bbox.y0 + 1, bbox.x1 - 1, bbox.y1 - 1),
        marker_radius=5.0 * figure.dpi / 72,
        markers=[tuple(p) for p in ax.transData.transform(markers)],
        radii=(1.0, 8.0, 16.0, 26.0),
    )
    to_points = 72 / figure.dpi
    drawn = 0
    for label, (x, y), (ax_x, ax_y), box in zip(
        labels, zip(xs, ys, strict=True), anchors, boxes, strict=True
    ):
        if box is None:
            continue
        near = (min(max(ax_x, box.x0), box.x1), min(max(ax_y, box.y0), box.y1))
        far = math.hypot(near[0] - ax_x, near[1] - ax_y) > 8 * figure.dpi / 72
        annotation = ax.annotate(
            label,
            (x, y),
            xytext=((box.x0 - ax_x) * to_points, (box.y0 - ax_y) * to_points),
            textcoords="offset points",
            fontsize=_FONT,
            ha="left",
            va="bottom",
            annotation_clip=False,
            zorder=5,
            arrowprops=(
                {"arrowstyle": "-", "color": "0.6", "lw": 0.6, "shrinkA": 0, "shrinkB": 3}
                if far
                else None
            ),
        )
        annotation.set_in_layout(False)
        drawn += 1
    return drawn


def _new_axes(n: int, width: float, height: float) -> list[Axes]:
    from matplotlib.figure import Figure  # matplotlib on use

    figure = Figure(figsize=(width, height), layout="constrained")
    axes = figure.subplots(1, n, squeeze=False)[0]
    return list(axes)


def _primary_kind(report: ReportData, kind: str | None) -> str:
    head_kinds = [
        k for k in report.kinds if any(r.kind == k and r.concentration for r in report.rows)
    ]
    if kind is not None:
        if kind not in head_kinds:
            raise IntervError(f"no head rows of kind {kind!r}; kinds with head rows: {head_kinds}")
        return kind
    if not head_kinds:
        raise IntervError("the report has no head rows to plot")
    preferred = [k for k in head_kinds if is_ablation(k)]
    return (preferred or head_kinds)[0]


def head_heatmaps(
    report: ReportData, *, kind: str | None = None, axes: Sequence[Axes] | None = None
) -> Figure:
    """Layer x head heatmaps side by side: normalized entropy, sink mass, content entropy, effect.

    Only the swept layers (those with head rows) are drawn, one row each, labelled with
    their layer number.

    Args:
        report: the report.
        kind: intervention kind for the effect panel (default: the first ablation kind).
        axes: four axes to draw into; None = a new figure, taller with more layers.
    """
    kind = _primary_kind(report, kind)
    layers = _grid_layers(report)
    height = 1.6 + 0.22 * len(layers)
    axes = _new_axes(4, 10, max(2.6, height)) if axes is None else list(axes)
    if len(axes) != 4:
        raise IntervError(f"head_heatmaps needs 4 axes; got {len(axes)}")
    units = report.header.concentration_units
    panels = [
        (m, report.concentration_grid(m), m.replace("_", " "), units[m], "viridis")
        for m in _HEATMAP_METRICS
    ]
    effect = report.effect_grid(kind)
    unit = report.header.metric_unit
    panels.append(("effect", effect, f"{kind} effect", unit, "RdBu_r"))
    for ax, (name, grid, title, unit_label, cmap) in zip(axes, panels, strict=True):
        shown = grid[layers]
        kwargs: dict[str, Any] = {"cmap": cmap, "aspect": "auto", "interpolation": "nearest"}
        if name == "effect":
            bound = float(shown.nan_to_num(0).abs().max()) or 1.0
            kwargs.update(vmin=-bound, vmax=bound)
        image = ax.imshow(shown.numpy(), **kwargs)
        bar = ax.figure.colorbar(image, ax=ax, fraction=0.08, pad=0.03)
        bar.set_label(unit_label, fontsize=_FONT)
        bar.ax.tick_params(labelsize=_FONT)
        box = ax.get_position()
        rows = _thinned_ticks(len(layers), box.height * ax.figure.get_figheight(), 2, True)
        columns = _thinned_ticks(shown.shape[1], box.width * ax.figure.get_figwidth(), 2, False)
        ax.set_yticks(rows, [str(layers[i]) for i in rows], fontsize=_FONT)
        ax.set_xticks(columns, [str(c) for c in columns], fontsize=_FONT)
        ax.set_xlabel("head", fontsize=_FONT + 1)
        ax.set_ylabel("layer", fontsize=_FONT + 1)
        ax.set_title(title, fontsize=_FONT + 1)
    figure = axes[0].figure
    figure.suptitle(
        f"{report.header.model} on {report.header.task}, {report.header.n_prompts} prompts: "
        "concentration (mean over prompts) beside effect",
        fontsize=_FONT + 2,
    )
    return figure


def concentration_vs_effect(
    report: ReportData,
    *,
    metric: str = "normalized_entropy",
    kind: str | None = None,
    ax: Axes | None = None,
) -> Figure:
    """Scatter of a head's concentration against its mean effect, flagged rows highlighted.

    Labels are placed without overlap, the largest |effect| first (then flagged heads);
    labels that do not fit are left out and the title says how many are shown.
    """
    kind = _primary_kind(report, kind)
    if metric not in report.header.concentration_units:
        raise IntervError(
            f"unknown metric {metric!r}; choose one of {tuple(report.header.concentration_units)}"
        )
    ax = _new_axes(1, 7, 4.6)[0] if ax is None else ax
    rows = [r for r in report.rows if r.kind == kind and r.concentration is not None]
    x = [r.concentration[metric] for r in rows]
    y = [r.effect_mean for r in rows]
    ax.scatter(x, y, color="0.55", s=20, label="no flag", zorder=3)
    for flag, color in _FLAG_COLORS.items():
        flagged = [(xi, yi) for xi, yi, r in zip(x, y, rows, strict=True) if flag in r.flags]
        if flagged:
            fx, fy = zip(*flagged, strict=True)
            ax.scatter(fx, fy, s=60, facecolors="none", edgecolors=color, label=flag, zorder=4)
    ax.axhline(0, color="0.8", linewidth=0.8)
    ax.set_xlabel(
        f"{metric} ({report.header.concentration_units[metric]}), mean over prompts",
        fontsize=_FONT + 1,
    )
    ax.set_ylabel(
        f"{kind} effect ({report.header.metric_unit}), mean over prompts", fontsize=_FONT + 1
    )
    ax.tick_params(labelsize=_FONT)
    ax.legend(fontsize=_FONT, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0)
    title = f"concentration vs effect, {report.header.model}"
    ax.set_title(f"{title} ({len(rows)} heads)", fontsize=_FONT + 1)  # in the layout placed on
    order = sorted(
        (i for i in range(len(rows)) if math.isfinite(x[i]) and math.isfinite(y[i])),
        key=lambda i: (-abs(y[i]), -len(rows[i].flags), i),
    )[:_MAX_LABELS]
    finite = [(xi, yi) for xi, yi in zip(x, y, strict=True) if math.isfinite(xi + yi)]
    drawn = _label_points(
        ax,
        [x[i] for i in order],
        [y[i] for i in order],
        [rows[i].label for i in order],
        finite,
    )
    shown = f"{drawn} of {len(rows)} heads labelled" if drawn < len(rows) else f"{len(rows)} heads"
    ax.set_title(f"{title} ({shown})", fontsize=_FONT + 1)
    return ax.figure


def attention_row(
    weights: Sequence[float] | torch.Tensor,
    *,
    sink: Sequence[int] = (0,),
    title: str = "attention row",
    ax: Axes | None = None,
) -> Figure:
    """One head's attention row as bars, sink keys drawn apart from the content keys.

    Args:
        weights: ``[key_pos]`` attention weights of one query (fractions of the row).
        sink: key positions forming the sink.
        title: the title, which should name the head, prompt and query position.
        ax: axes to draw into; None = a new figure.
    """
    row = torch.as_tensor(weights, dtype=torch.float64).flatten()
    bad = [p for p in sink if not 0 <= p < row.numel()]
    if bad:
        raise IntervError(f"sink positions {bad} lie outside the row of {row.numel()} keys")
    ax = _new_axes(1, 7, 3)[0] if ax is None else ax
    is_sink = torch.zeros(row.numel(), dtype=torch.bool)
    is_sink[list(sink)] = True
    positions = torch.arange(row.numel())
    content_x = positions[~is_sink] + 1  # leave a gap after the sink bars
    ax.bar(range(len(sink)), row[is_sink].numpy(), color="tab:purple", label="sink keys")
    ax.bar(
        (content_x + len(sink) - 1).numpy(),
        row[~is_sink].numpy(),
        color="tab:green",
        label="content keys",
    )
    labels = [str(p) for p in positions[is_sink].tolist()] + [
        str(p) for p in positions[~is_sink].tolist()
    ]
    ticks = list(range(len(sink))) + (content_x + len(sink) - 1).tolist()
    ax.set_xticks(ticks, labels, fontsize=_FONT)
    ax.set_xlabel("key position (sink first, then content)")
    ax.set_ylabel("attention weight (fraction of the row)")
    ax.set_title(f"{title}; sink mass {float(row[is_sink].sum()):.3f}", fontsize=9)
    ax.legend(fontsize=7)
    return ax.figure


def baseline_comparison(report: ReportData, *, ax: Axes | None = None) -> Figure:
    """Zero vs mean vs resample ablation effect per head, with bootstrap intervals.

    With more than 40 heads, the 40 with the largest |effect| under any ablation
    baseline are drawn (in layer, head order) and the title says so.
    """
    rows = [r for r in report.rows if is_ablation(r.kind) and r.concentration is not None]
    if not rows:
        raise IntervError("the report has no head ablation rows (zero, mean or resample)")
    heads = list(dict.fromkeys((r.site.layer, r.site.head) for r in rows))
    selection = ""
    if len(heads) > _MAX_BARS_HEADS:
        largest: dict[tuple[int, int], float] = {}
        for r in rows:
            head = (r.site.layer, r.site.head)
            largest[head] = max(largest.get(head, 0.0), abs(r.effect_mean))
        top = sorted(heads, key=lambda head: -largest[head])[:_MAX_BARS_HEADS]
        selection = f"; the {len(top)} of {len(heads)} heads with the largest |effect|"
        heads = sorted(top)
    ax = _new_axes(1, min(10.0, max(6.0, 2 + 0.2 * len(heads))), 3.6)[0] if ax is None else ax
    kinds = list(dict.fromkeys(r.kind for r in rows))
    width = 0.8 / len(kinds)
    for k, kind in enumerate(kinds):
        by_head = {(r.site.layer, r.site.head): r for r in rows if r.kind == kind}
        xs, means, errors = [], [], [[], []]
        for h, head in enumerate(heads):
            if head in by_head:
                row = by_head[head]
                xs.append(h + (k - (len(kinds) - 1) / 2) * width)
                means.append(row.effect_mean)
                # a percentile interval need not contain the mean (few resamples)
                errors[0].append(max(0.0, row.effect_mean - row.effect_ci_low))
                errors[1].append(max(0.0, row.effect_ci_high - row.effect_mean))
        ax.bar(xs, means, width, yerr=errors, label=kind, capsize=1.5)
    ax.set_xticks(
        range(len(heads)),
        [f"L{layer}H{head}" for layer, head in heads],
        rotation=90,
        fontsize=_FONT,
    )
    ax.set_xlim(-0.6, len(heads) - 0.4)
    ax.tick_params(axis="y", labelsize=_FONT)
    ax.axhline(0, color="0.5", linewidth=0.8)
    ax.set_ylabel(f"effect ({report.header.metric_unit}), mean over prompts", fontsize=_FONT + 1)
    ax.set_title(
        f"ablation baselines per head ({int(report.header.ci_level * 100)}% bootstrap "
        f"intervals{selection})",
        fontsize=_FONT + 1,
    )
    ax.legend(fontsize=_FONT)
    return ax.figure


def recovery_by_layer_position(report: ReportData, *, ax: Axes | None = None) -> Figure:
    """Normalized recovery of single-position, layer-level patches as a layer x position grid.

    Only the patched layers are drawn, one row each, labelled with their layer number.
    """
    rows = [
        r
        for r in report.rows
        if r.recovery is not None
        and r.site is not None
        and r.site.head is None
        and r.site.positions is not None
        and len(r.site.positions) == 1
    ]
    if not rows:
        raise IntervError(
            "the report has no single-position patches of a layer-level component "
            "(e.g. ActivationPatch('resid_pre', layer, positions=(p,)))"
        )
    layers = sorted({r.site.layer for r in rows})
    ax = _new_axes(1, 8, max(2.6, 1.4 + 0.22 * len(layers)))[0] if ax is None else ax
    n_positions = max(r.site.positions[0] for r in rows) + 1
    grid = torch.full((len(layers), n_positions), torch.nan)
    for r in rows:
        grid[layers.index(r.site.layer), r.site.positions[0]] = r.recovery
    image = ax.imshow(
        grid.numpy(), cmap="RdBu_r", vmin=-1, vmax=1, aspect="auto", interpolation="nearest"
    )
    bar = ax.figure.colorbar(image, ax=ax, fraction=0.06, pad=0.02)
    bar.set_label("normalized recovery\n(1 = clean, 0 = corrupted)", fontsize=_FONT)
    bar.ax.tick_params(labelsize=_FONT)
    box = ax.get_position()
    shown = _thinned_ticks(len(layers), box.height * ax.figure.get_figheight(), 2, True)
    ax.set_yticks(shown, [str(layers[i]) for i in shown], fontsize=_FONT)
    positions = _thinned_ticks(n_positions, box.width * ax.figure.get_figwidth(), 3, False)
    ax.set_xticks(positions, [str(p) for p in positions], fontsize=_FONT)
    ax.set_xlabel("patched position (absolute token index)", fontsize=_FONT + 1)
    ax.set_ylabel("layer", fontsize=_FONT + 1)
    ax.set_title(
        f"patching recovery by layer and position, {report.header.model}", fontsize=_FONT + 1
    )
    return ax.figure


def standard_figures(report: ReportData) -> dict[str, Figure]:
    """Every plot the report's rows allow, by file stem (attention rows need weights)."""
    figures: dict[str, Figure] = {}
    if any(r.concentration is not None for r in report.rows):
        figures["heatmaps"] = head_heatmaps(report)
        figures["concentration_vs_effect"] = concentration_vs_effect(report)
    if any(is_ablation(r.kind) and r.concentration is not None for r in report.rows):
        figures["baseline_comparison"] = baseline_comparison(report)
    if any(
        r.recovery is not None and r.site is not None and r.site.head is None and r.site.positions
        for r in report.rows
    ):
        figures["recovery_by_layer_position"] = recovery_by_layer_position(report)
    return figures


def plot_pruning_curves(curves: PruningCurves, ax: Axes | None = None) -> Figure:
    """One line per order: the evaluation against the number of heads removed.

    Draws into ``ax`` when given (and returns its figure); otherwise makes a new
    ``matplotlib.figure.Figure``. Shows and saves nothing.
    """
    if ax is None:
        from matplotlib.figure import Figure  # matplotlib on use

        figure = Figure(figsize=(6.4, 4.2))
        ax = figure.add_subplot()
    for name, values in curves.values.items():
        ax.plot(list(curves.ks), values.tolist(), marker="o", markersize=3, label=name)
    ax.set_xlabel("heads mean-ablated (count, least important first)")
    ax.set_ylabel(f"{curves.evaluation} ({curves.unit})")
    ax.set_title(curves.scope, fontsize=8)
    ax.legend(fontsize=7)
    return ax.figure
