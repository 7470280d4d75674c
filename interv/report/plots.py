"""Plots that keep concentration and causation side by side (matplotlib).

Every function returns a ``matplotlib.figure.Figure`` and accepts the axes to draw
into (``ax`` / ``axes``); without them it makes a new figure with
``matplotlib.figure.Figure`` (no pyplot state, nothing shown or saved implicitly).
matplotlib is imported inside the functions, so importing interv does not import it.
Axis labels carry units; titles carry the scope.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import torch

from interv.errors import IntervError
from interv.report.flags import FLAGS, is_ablation

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

    from interv.analysis.pruning.curves import PruningCurves
    from interv.report.table import Report

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
_FLAG_COLORS = dict(zip(FLAGS, ("tab:blue", "tab:red", "tab:purple", "tab:orange"), strict=True))


def _new_axes(n: int, width: float, height: float) -> list[Axes]:
    from matplotlib.figure import Figure

    figure = Figure(figsize=(width, height), layout="constrained")
    axes = figure.subplots(1, n, squeeze=False)[0]
    return list(axes)


def _primary_kind(report: Report, kind: str | None) -> str:
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
    report: Report, *, kind: str | None = None, axes: Sequence[Axes] | None = None
) -> Figure:
    """Layer x head heatmaps side by side: normalized entropy, sink mass, content entropy, effect.

    Args:
        report: the report.
        kind: intervention kind for the effect panel (default: the first ablation kind).
        axes: four axes to draw into; None = a new figure.
    """
    kind = _primary_kind(report, kind)
    axes = _new_axes(4, 14, 3.4) if axes is None else list(axes)
    if len(axes) != 4:
        raise IntervError(f"head_heatmaps needs 4 axes; got {len(axes)}")
    units = report.header.concentration_units
    panels = [
        (m, report.concentration_grid(m), f"{m} ({units[m]})", "viridis") for m in _HEATMAP_METRICS
    ]
    effect = report.effect_grid(kind)
    panels.append(("effect", effect, f"{kind} effect ({report.header.metric_unit})", "RdBu_r"))
    for ax, (name, grid, label, cmap) in zip(axes, panels, strict=True):
        kwargs: dict[str, Any] = {"cmap": cmap, "aspect": "auto"}
        if name == "effect":
            bound = float(grid.nan_to_num(0).abs().max()) or 1.0
            kwargs.update(vmin=-bound, vmax=bound)
        image = ax.imshow(grid.numpy(), **kwargs)
        ax.figure.colorbar(image, ax=ax, label=label)
        ax.set_xticks(range(grid.shape[1]))
        ax.set_yticks(range(grid.shape[0]))
        ax.set_xlabel("head")
        ax.set_ylabel("layer")
        ax.set_title(label, fontsize=9)
    figure = axes[0].figure
    figure.suptitle(
        f"{report.header.model} on {report.header.task}, {report.header.n_prompts} prompts: "
        "concentration (mean over prompts) beside effect",
        fontsize=10,
    )
    return figure


def concentration_vs_effect(
    report: Report,
    *,
    metric: str = "normalized_entropy",
    kind: str | None = None,
    ax: Axes | None = None,
) -> Figure:
    """Scatter of a head's concentration against its mean effect, flagged rows highlighted."""
    kind = _primary_kind(report, kind)
    ax = _new_axes(1, 6, 4.5)[0] if ax is None else ax
    rows = [r for r in report.rows if r.kind == kind and r.concentration is not None]
    if metric not in report.header.concentration_units:
        raise IntervError(
            f"unknown metric {metric!r}; choose one of {tuple(report.header.concentration_units)}"
        )
    x = [r.concentration[metric] for r in rows]
    y = [r.effect_mean for r in rows]
    ax.scatter(x, y, color="0.6", s=20, label="no flag")
    for flag, color in _FLAG_COLORS.items():
        flagged = [(xi, yi) for xi, yi, r in zip(x, y, rows, strict=True) if flag in r.flags]
        if flagged:
            fx, fy = zip(*flagged, strict=True)
            ax.scatter(fx, fy, s=60, facecolors="none", edgecolors=color, label=flag)
    for xi, yi, r in zip(x, y, rows, strict=True):
        ax.annotate(r.label, (xi, yi), fontsize=6, xytext=(2, 2), textcoords="offset points")
    ax.axhline(0, color="0.8", linewidth=0.8)
    ax.set_xlabel(f"{metric} ({report.header.concentration_units[metric]}), mean over prompts")
    ax.set_ylabel(f"{kind} effect ({report.header.metric_unit}), mean over prompts")
    ax.set_title(f"concentration vs effect, {report.header.model}", fontsize=9)
    ax.legend(fontsize=7)
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
    ax.set_xticks(ticks, labels, fontsize=6)
    ax.set_xlabel("key position (sink first, then content)")
    ax.set_ylabel("attention weight (fraction of the row)")
    ax.set_title(f"{title}; sink mass {float(row[is_sink].sum()):.3f}", fontsize=9)
    ax.legend(fontsize=7)
    return ax.figure


def baseline_comparison(report: Report, *, ax: Axes | None = None) -> Figure:
    """Zero vs mean vs resample ablation effect per head, with bootstrap intervals."""
    rows = [r for r in report.rows if is_ablation(r.kind) and r.concentration is not None]
    if not rows:
        raise IntervError("the report has no head ablation rows (zero, mean or resample)")
    ax = _new_axes(1, 10, 3.5)[0] if ax is None else ax
    heads = list(dict.fromkeys((r.site.layer, r.site.head) for r in rows))
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
                errors[0].append(row.effect_mean - row.effect_ci_low)
                errors[1].append(row.effect_ci_high - row.effect_mean)
        ax.bar(xs, means, width, yerr=errors, label=kind, capsize=1.5)
    ax.set_xticks(
        range(len(heads)), [f"L{layer}H{head}" for layer, head in heads], rotation=90, fontsize=6
    )
    ax.axhline(0, color="0.5", linewidth=0.8)
    ax.set_ylabel(f"effect ({report.header.metric_unit}), mean over prompts")
    ax.set_title(
        f"ablation baselines per head ({int(report.header.ci_level * 100)}% bootstrap intervals)",
        fontsize=9,
    )
    ax.legend(fontsize=7)
    return ax.figure


def recovery_by_layer_position(report: Report, *, ax: Axes | None = None) -> Figure:
    """Normalized recovery of single-position, layer-level patches as a layer x position grid."""
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
    ax = _new_axes(1, 8, 3)[0] if ax is None else ax
    n_layers = max(r.site.layer for r in rows) + 1
    n_positions = max(r.site.positions[0] for r in rows) + 1
    grid = torch.full((n_layers, n_positions), torch.nan)
    for r in rows:
        grid[r.site.layer, r.site.positions[0]] = r.recovery
    image = ax.imshow(grid.numpy(), cmap="RdBu_r", vmin=-1, vmax=1, aspect="auto")
    ax.figure.colorbar(image, ax=ax, label="normalized recovery (1 = clean, 0 = corrupted)")
    ax.set_xlabel("patched position (absolute token index)")
    ax.set_ylabel("layer")
    ax.set_title(f"patching recovery by layer and position, {report.header.model}", fontsize=9)
    return ax.figure


def standard_figures(report: Report) -> dict[str, Figure]:
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
        from matplotlib.figure import Figure

        figure = Figure(figsize=(6.4, 4.2))
        ax = figure.add_subplot()
    for name, values in curves.values.items():
        ax.plot(range(len(values)), values.tolist(), marker="o", markersize=3, label=name)
    ax.set_xlabel("heads mean-ablated (count, least important first)")
    ax.set_ylabel(f"{curves.evaluation} ({curves.unit})")
    ax.set_title(curves.scope, fontsize=8)
    ax.legend(fontsize=7)
    return ax.figure
