"""Static images of an attention view from Python: PNG (matplotlib) and SVG (written here).

Internal module of :mod:`interv.report.viewer`, no stability promise. Both draw, for one
shown prompt and the chosen heads, the pattern from the *exact* float32 weights (not the
page's 8-bit codes), padding hatched, causally masked cells grey, sink keys ticked in
orange, and each query row's sink mass, normalized entropy and content entropy as bars
with their units; with a report, each head's effects and semantics sentences beneath.
The colour scale (:data:`RAMP`) is the page's. An SVG draws up to
:data:`VECTOR_CELLS_UP_TO` positions as vector cells and embeds longer patterns as one PNG
raster (1 pixel per cell), since a million vector cells would make an unusable file.

A view that keeps only some query rows (:attr:`~interv.analysis.attention_view.AttentionView.
query_positions`) is drawn as its ``rows x keys`` rectangle: each row labelled with its true
query position, the subsampling stated in the scope printed above the pictures.
"""

from __future__ import annotations

import base64
import html
import io
import math
import re
import struct
import textwrap
import zlib
from typing import TYPE_CHECKING

import numpy as np
import torch

from interv.engine.sites import HEAD_COMPONENTS
from interv.provenance import join
from interv.report.views import effect_text

if TYPE_CHECKING:
    from interv.analysis.attention_view import AttentionView
    from interv.report.data import ReportData, ReportRow

__all__ = [
    "MASKED_RGB",
    "PADDING_RGB",
    "RAMP",
    "SINK_RGB",
    "VECTOR_CELLS_UP_TO",
    "WEIGHT_FLOOR",
    "head_effects",
    "pattern_rgb",
    "png_bytes",
    "png_rgb",
    "quantize",
    "ramp_rgb",
    "svg_text",
]

RAMP: tuple[tuple[int, int, int], ...] = (
    (255, 255, 255),
    (198, 219, 239),
    (107, 174, 214),
    (33, 113, 181),
    (8, 48, 107),
)
"""Colour stops of the weight scale at 0, 0.25, 0.5, 0.75, 1 (white to dark blue), shared
with the page's script."""
MASKED_RGB = (236, 236, 236)
"""Causally masked cells (key after the query)."""
PADDING_RGB = (244, 224, 224)
"""Cells of a padding query or key (hatched on top)."""
SINK_RGB = (230, 120, 20)
"""Ticks above the sink keys."""
WEIGHT_FLOOR = 1e-5
"""Weights below this get code 0 in :func:`quantize`."""
VECTOR_CELLS_UP_TO = 64
_STRIPS = (
    ("sink_mass", "sink mass", "fraction of the row"),
    ("normalized_entropy", "normalized entropy", "fraction of log n"),
    ("content_entropy", "content entropy", "nats"),
)
_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")


def quantize(weights: torch.Tensor) -> np.ndarray:
    """8-bit log codes of attention weights: 0 below :data:`WEIGHT_FLOOR`, else
    ``1 + round(254 * (log10 w + 5) / 5)`` (255 = weight 1). Decoded by the page as
    ``10 ** ((code - 1) * 5 / 254 - 5)``: a relative step of ``10 ** (5 / 254)`` = 4.6%.
    """
    w = weights.to(torch.float64).clamp(min=0)
    codes = 1 + torch.round(254 * (torch.log10(w.clamp(min=WEIGHT_FLOOR)) + 5) / 5)
    codes = torch.where(w < WEIGHT_FLOOR, 0, codes.clamp(1, 255))
    return codes.to(torch.uint8).numpy()


def ramp_rgb(values: np.ndarray) -> np.ndarray:
    """``[..., 3]`` uint8 colours of ``values`` in [0, 1] on :data:`RAMP` (linear
    interpolation between its stops; values outside are clipped)."""
    stops = np.linspace(0.0, 1.0, len(RAMP))
    colours = np.array(RAMP, dtype=np.float64)
    v = np.clip(np.asarray(values, dtype=np.float64), 0.0, 1.0)
    channels = [np.interp(v, stops, colours[:, c]) for c in range(3)]
    return np.rint(np.stack(channels, axis=-1)).astype(np.uint8)


def pattern_rgb(view: AttentionView, prompt: int, k: int) -> np.ndarray:
    """``[R, N, 3]`` uint8 picture of shown head ``k`` on shown prompt ``prompt`` (its kept
    query rows by every key): the exact weight on :data:`RAMP` at available cells,
    :data:`MASKED_RGB` at cells the head's layer masks (after the query, outside a sliding
    window or chunk), :data:`PADDING_RGB` in the rows and columns of padding."""
    real = view.real[prompt].numpy()
    weights = view.pattern[prompt, k].numpy()
    available = view.key_mask[prompt, k].numpy()
    rgb = ramp_rgb(np.where(available, weights, 0.0))
    rgb[~available] = MASKED_RGB
    padding = ~(real[list(view.query_positions), None] & real[None, :])
    rgb[padding] = PADDING_RGB
    return rgb


def png_rgb(rgb: np.ndarray) -> bytes:
    """A PNG file (8-bit RGB, no interlace) of an ``[height, width, 3]`` uint8 image."""
    height, width, _ = rgb.shape
    rows = np.concatenate(
        [np.zeros((height, 1), dtype=np.uint8), rgb.reshape(height, width * 3)], axis=1
    )

    def chunk(tag: bytes, data: bytes) -> bytes:
        crc = zlib.crc32(tag + data) & 0xFFFFFFFF
        return struct.pack(">I", len(data)) + tag + data + struct.pack(">I", crc)

    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", header)
        + chunk(b"IDAT", zlib.compress(rows.tobytes(), 6))
        + chunk(b"IEND", b"")
    )


def head_effects(report: ReportData, layer: int, head: int) -> tuple[ReportRow, ...]:
    """The report's rows about query head (``layer``, ``head``) (any head component, any
    positions), largest |effect| first."""
    rows = [
        row
        for row in report.rows
        if row.site is not None
        and row.site.component in HEAD_COMPONENTS
        and (row.site.layer, row.site.head) == (layer, head)
    ]
    return tuple(sorted(rows, key=lambda row: -abs(row.effect_mean)))


def _effect_lines(report: ReportData | None, view: AttentionView, k: int, limit: int) -> list[str]:
    """Each effect of shown head ``k`` as a line, then its semantics sentence."""
    if report is None:
        return []
    h = report.header
    level = round(h.ci_level * 100)
    rows = head_effects(report, *view.heads[k])
    if not rows:
        return ["no intervention on this head in the result"]
    lines = []
    for row in rows[:limit]:
        flags = f" [{', '.join(row.flags)}]" if row.flags else ""
        effect = (
            f"effect {row.effect_mean:.4g} {h.metric_unit} "
            f"({level}% CI {row.effect_ci_low:.4g} … {row.effect_ci_high:.4g})"
            if row.exact
            else effect_text(row, h.metric_unit)  # an estimate says so, and by what
        )
        lines.append(f"{row.label} {row.kind}: {effect}{flags}")
        lines.append(f"    {row.semantics}")
    if len(rows) > limit:
        lines.append(f"… and {len(rows) - limit} more in the viewer page")
    return lines


def _padding_bands(real: np.ndarray) -> list[tuple[int, int]]:
    """The ``[start, stop)`` runs of padding entries of ``real`` (positions, or kept rows)."""
    edges = np.flatnonzero(np.diff(np.concatenate([[1], real.astype(np.int8), [1]])))
    return [(int(a), int(b)) for a, b in zip(edges[::2], edges[1::2], strict=True)]


def _row_ticks(view: AttentionView, limit: int = 9) -> list[int]:
    """Up to ``limit`` evenly spaced row indices (first and last included) to label with
    their query positions."""
    n_rows = view.n_rows
    return sorted({round(i * (n_rows - 1) / max(limit - 1, 1)) for i in range(limit)})


def _strip_limit(view: AttentionView, name: str) -> float:
    if name != "content_entropy":
        return 1.0
    n_content = int(view.n_available.max()) - len(view.sink_positions)
    return max(math.log(max(n_content, 2)), 1e-9)


# ---------------------------------------------------------------- PNG (matplotlib)


def _check_joined(view: AttentionView, report: ReportData | None) -> None:
    """Refuse effects of other prompts or another model than the view's."""
    if report is not None:
        join(view, report, what=("the view's prompts", "the report"))


def png_bytes(
    view: AttentionView, report: ReportData | None, prompt: int, heads: tuple[int, ...]
) -> bytes:
    """A PNG of ``heads`` (indices into the shown heads) on shown prompt ``prompt``."""
    _check_joined(view, report)
    # matplotlib is imported on use: importing interv must stay cheap
    from matplotlib.figure import Figure
    from matplotlib.patches import Rectangle

    n, n_rows = view.n_positions, view.n_rows
    lines = [_effect_lines(report, view, k, 4) for k in heads]
    # inches: the pattern, its tick labels, then the effect lines beneath
    tick_room = 1.1 if n <= 40 else 0.5
    blocks = [0.5 + 4.2 + tick_room + 0.14 * len(text) for text in lines]
    header = 0.8
    figure = Figure(figsize=(11, header + sum(blocks)), dpi=100)
    parts = figure.subfigures(len(heads) + 1, 1, height_ratios=[header, *blocks], squeeze=False)[
        :, 0
    ]
    real = view.real[prompt].numpy()
    row_real = real[list(view.query_positions)]
    scope = "\n".join(textwrap.wrap(view.scope, 150))
    parts[0].text(
        0.02,
        0.9,
        f"interv attention · prompt {view.prompt_indices[prompt]} · drawn from the exact "
        f"weights\n{scope}",
        fontsize=8,
        va="top",
    )
    for slot, k in enumerate(heads):
        block = blocks[slot]
        grid = parts[slot + 1].add_gridspec(
            1, 4, width_ratios=[6, 1, 1, 1], left=0.1, right=0.98, wspace=0.08,
            top=1 - 0.5 / block, bottom=(tick_room + 0.14 * len(lines[slot])) / block,
        )  # fmt: skip
        axis = parts[slot + 1].add_subplot(grid[0, 0])
        axis.imshow(pattern_rgb(view, prompt, k), interpolation="nearest", aspect="auto")
        bands = [(start - 0.5, -0.5, stop - start, n_rows) for start, stop in _padding_bands(real)]
        bands += [(-0.5, start - 0.5, n, stop - start) for start, stop in _padding_bands(row_real)]
        for rect in bands:
            axis.add_patch(
                Rectangle(rect[:2], rect[2], rect[3], fill=False, hatch="///", lw=0,
                          edgecolor=(0.7, 0.5, 0.5))
            )  # fmt: skip
        for position in view.sink_mask[prompt].nonzero()[:, 0].tolist():
            axis.plot([position], [-0.5], marker="v", color=np.array(SINK_RGB) / 255,
                      markersize=5, clip_on=False)  # fmt: skip
        axis.set_title(f"{view.head_labels[k]} · {view.kv_label(k)}", fontsize=9, loc="left")
        axis.set_xlabel("key position", fontsize=7)
        axis.set_ylabel(
            "query position" if not view.subsampled else "query position (kept rows only)",
            fontsize=7,
        )
        if n <= 40:
            labels = [_clean(t) for t in view.tokens[prompt]]
            axis.set_xticks(np.arange(n), labels, rotation=90, fontsize=6)
            rows = [
                f"{t} {labels[t]}" if view.subsampled else labels[t] for t in view.query_positions
            ]
            axis.set_yticks(np.arange(n_rows), rows, fontsize=6)
        else:
            axis.tick_params(labelsize=6)
            if view.subsampled:  # rows are labelled by their query positions
                ticks = _row_ticks(view)
                axis.set_yticks(ticks, [str(view.query_positions[r]) for r in ticks])
        if lines[slot]:
            parts[slot + 1].text(
                0.02, 0.02 + 0.14 * len(lines[slot]) / block,
                "\n".join(textwrap.shorten(x, 150) for x in lines[slot]),
                va="top", fontsize=6.5,
            )  # fmt: skip
        for column, (name, title, unit) in enumerate(_STRIPS, start=1):
            strip = parts[slot + 1].add_subplot(grid[0, column], sharey=axis)
            values = view.metric(name)[prompt, k].numpy()
            # one step polygon, not N bar patches (a 1024-token prompt draws in milliseconds)
            edges = np.repeat(np.arange(n_rows + 1) - 0.5, 2)[1:-1]
            strip.fill_betweenx(
                edges, 0, np.repeat(np.nan_to_num(values, nan=0.0), 2), color=(0.2, 0.44, 0.7), lw=0
            )
            strip.set_xlim(0, _strip_limit(view, name))
            strip.set_title(f"{title}\n({unit})", fontsize=7)
            strip.tick_params(labelleft=False, labelsize=6)
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=100)
    return buffer.getvalue()


# ---------------------------------------------------------------- SVG


def _clean(text: str) -> str:
    """Token text fit for a label: control characters as U+FFFD, newlines as ↵."""
    return _CONTROL.sub("\ufffd", text.replace("\n", "↵").replace("\r", "␍").replace("\t", "⇥"))


def _x(text: str) -> str:
    return html.escape(_clean(text), quote=True)


def _hex(rgb: tuple[int, int, int] | np.ndarray) -> str:
    return "#{:02x}{:02x}{:02x}".format(*tuple(int(c) for c in rgb))


def _svg_pattern(view: AttentionView, prompt: int, k: int, x: float, y: float, size: float) -> str:
    n, n_rows = view.n_positions, view.n_rows
    rgb = pattern_rgb(view, prompt, k)
    if n > VECTOR_CELLS_UP_TO:
        uri = "data:image/png;base64," + base64.b64encode(png_rgb(rgb)).decode("ascii")
        return (
            f"<image x='{x}' y='{y}' width='{size}' height='{size}' preserveAspectRatio='none' "
            f"style='image-rendering:pixelated' href='{uri}'/>"
        )
    cell, height = size / n, size / n_rows
    parts = [f"<rect x='{x}' y='{y}' width='{size}' height='{size}' fill='#ffffff'/>"]
    for t in range(n_rows):
        for j in range(n):
            colour = _hex(rgb[t, j])
            if colour != "#ffffff":
                parts.append(
                    f"<rect x='{x + j * cell:.2f}' y='{y + t * height:.2f}' width='{cell:.2f}' "
                    f"height='{height:.2f}' fill='{colour}'/>"
                )
    return "".join(parts)


def svg_text(
    view: AttentionView, report: ReportData | None, prompt: int, heads: tuple[int, ...]
) -> str:
    """An SVG document of ``heads`` (indices into the shown heads) on shown prompt ``prompt``."""
    _check_joined(view, report)
    n = view.n_positions
    size = 480.0
    cell, row = size / n, size / view.n_rows
    strip_w, gap = 90.0, 12.0
    left = 20.0 if not view.subsampled else 48.0  # room for the rows' query positions
    effect_lines = [_effect_lines(report, view, k, 4) for k in heads]
    block = [70 + size + 16 + 13 * len(lines) for lines in effect_lines]
    width = left + size + 3 * (strip_w + gap) + 20
    height = 70 + sum(block)
    title = f"interv attention · {view.model_name} · prompt {view.prompt_indices[prompt]}"
    real = view.real[prompt].numpy()
    row_real = real[list(view.query_positions)]
    sinks = view.sink_mask[prompt].nonzero()[:, 0].tolist()
    out = [
        f"<svg xmlns='http://www.w3.org/2000/svg' width='{width:.0f}' height='{height:.0f}' "
        f"viewBox='0 0 {width:.0f} {height:.0f}' font-family='sans-serif' font-size='11'>",
        f"<title>{_x(title)}</title>",
        f"<desc>{_x(view.scope)}. Drawn from the exact weights; cells beyond "
        f"{VECTOR_CELLS_UP_TO} positions are one embedded raster.</desc>",
        "<defs><pattern id='iv-hatch' width='6' height='6' patternUnits='userSpaceOnUse'>"
        "<path d='M0,6 L6,0' stroke='#b08080' stroke-width='1'/></pattern></defs>",
        "<rect width='100%' height='100%' fill='#ffffff'/>",
        f"<text x='{left}' y='20' font-size='13' font-weight='bold'>{_x(title)}</text>",
    ]
    for i, line in enumerate(textwrap.wrap(view.scope, 150)[:3]):
        out.append(f"<text x='{left}' y='{36 + 12 * i}' font-size='9'>{_x(line)}</text>")
    y0 = 70.0
    for slot, k in enumerate(heads):
        top = y0 + 30
        out.append(
            f"<text x='{left}' y='{y0 + 14}' font-size='12' font-weight='bold'>"
            f"{_x(view.head_labels[k])} · {_x(view.kv_label(k))}</text>"
        )
        out.append(_svg_pattern(view, prompt, k, left, top, size))
        for start, stop in _padding_bands(real):
            out.append(
                f"<rect x='{left + start * cell:.2f}' y='{top}' width='{(stop - start) * cell:.2f}'"
                f" height='{size}' fill='url(#iv-hatch)'/>"
            )
        for start, stop in _padding_bands(row_real):
            out.append(
                f"<rect x='{left}' y='{top + start * row:.2f}' width='{size}' "
                f"height='{(stop - start) * row:.2f}' fill='url(#iv-hatch)'/>"
            )
        if view.subsampled:  # each labelled row at its true query position
            for r in _row_ticks(view):
                out.append(
                    f"<text x='{left - 3}' y='{top + (r + 0.5) * row + 3:.2f}' font-size='8' "
                    f"text-anchor='end'>{view.query_positions[r]}</text>"
                )
        for position in sinks:
            out.append(
                f"<rect x='{left + position * cell:.2f}' y='{top - 6}' width='{max(cell, 2):.2f}' "
                f"height='5' fill='{_hex(SINK_RGB)}'><title>sink key {position}</title></rect>"
            )
        for column, (name, heading, unit) in enumerate(_STRIPS):
            x = left + size + gap + column * (strip_w + gap)
            limit = _strip_limit(view, name)
            out.append(
                f"<text x='{x}' y='{top - 16}' font-size='9'>{_x(heading)}</text>"
                f"<text x='{x}' y='{top - 6}' font-size='8'>({_x(unit)}, 0..{limit:.3g})</text>"
                f"<rect x='{x}' y='{top}' width='{strip_w}' height='{size}' fill='#f7f7f7'/>"
            )
            values = view.metric(name)[prompt, k].tolist()
            bars = []
            for t, value in enumerate(values):
                if value == value and value > 0:  # not NaN
                    bars.append(
                        f"M{x:.1f},{top + t * row:.2f}h{strip_w * min(value / limit, 1):.2f}"
                        f"v{max(row, 0.5):.2f}h{-strip_w * min(value / limit, 1):.2f}z"
                    )
            out.append(f"<path d='{''.join(bars)}' fill='#3370b3'/>")
        for i, line in enumerate(effect_lines[slot]):
            out.append(
                f"<text x='{left}' y='{top + size + 16 + 13 * i}' font-size='10'>{_x(line)}</text>"
            )
        y0 += block[slot]
    out.append("</svg>\n")
    return "".join(out)
