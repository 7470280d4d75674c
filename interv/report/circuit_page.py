"""A circuit as one self-contained HTML page (no CDN, no server): the drawing and the curve.

>>> html = circuit_page(circuit, curve, mission_link(circuit, heads))  # doctest: +SKIP

- **The layered node-link drawing** (SVG, drawn here in Python): layers left to right
  (the embedding, each layer's attention heads and MLP, the logits), the strongest
  ``n_draw`` edges by the best value available (exact first), widths by ``|value|`` on
  one scale, blue positive and red negative; exact edges solid, estimated edges dashed
  and paler. Every edge holds its numbers and status in a ``<title>`` (a tooltip, no
  script needed) and in ``data-info``, which the inlined script shows in a detail box on
  hover, focus or click. Heads of the circuit are shaded.
- **The faithfulness curve** over the edge fractions (log scale) with its bootstrap
  interval band, the line ``f = 1``, and CPR and CMD.
- **The mission link** (:func:`interv.circuits.mission.mission_link`): the circuit's heads
  with their concentration beside their edges, the rank agreements with intervals, the
  concentrated, sink-parked heads outside the circuit.

Reads the typed results (the curve and the link must belong to the circuit:
:func:`interv.report.circuit.check_together`); every text from the data is HTML-escaped.
No model.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from interv._checks import as_int
from interv.audit import EXACT_VERIFIED
from interv.circuits.curves import FaithfulnessCurve
from interv.circuits.discovery import CircuitResult
from interv.circuits.graph import Edge, Node
from interv.circuits.mission import LINK_METRICS, CircuitHead, MissionLink, RankAgreement
from interv.circuits.selection import StableCircuit
from interv.report.circuit import (
    StabilityMarks,
    audit_lines,
    bounds_text,
    check_together,
    edge_rows,
    interval_text,
    reliability_text,
    selection_columns,
    selection_lines,
    stability_columns,
    stability_marks,
)
from interv.report.kit import asset, escape, html_table, number

__all__ = ["circuit_fragment", "circuit_page", "curve_svg", "graph_svg"]

_COL_W = 150
_ROW_H = 30
_NODE_W = 56
_NODE_H = 16
_TOP = 30


def _column(node: Node, n_layers: int) -> tuple[int, int]:
    """(column, order in the column) of a node: embed 0, layer l's heads 1 + 2l (key/value
    heads below the query heads), MLP l 2 + 2l, logits last."""
    if node.kind == "embed":
        return 0, 0
    if node.kind == "logits":
        return 2 * n_layers + 1, 0
    if node.kind == "mlp":
        return 2 + 2 * node.layer, 0
    return 1 + 2 * node.layer, node.head + (1000 if node.kv else 0)


def _column_name(column: int, n_layers: int) -> str:
    if column == 0:
        return "embed"
    if column == 2 * n_layers + 1:
        return "logits"
    layer = (column - 1) // 2
    return f"layer {layer}" if column % 2 else f"MLP {layer}"


def _layout(edges: Sequence[Edge]) -> tuple[dict[Node, tuple[float, float]], int, int, str]:
    """Node positions, the drawing's size and its column labels. Columns: only those that
    hold a drawn node, in forward order (layers left to right). Rows: query head ``h`` in
    row ``h`` of every layer, key/value heads below them, MLPs at the bottom, the embedding
    and the logits in the middle, so that a path across layers keeps its rows."""
    nodes = {n for edge in edges for n in (edge.sender, edge.receiver)}
    n_layers = max((n.layer for n in nodes if n.layer is not None), default=-1) + 1
    heads = [n for n in nodes if n.kind == "head"]
    n_q = max((n.head + 1 for n in heads if not n.kv), default=0)
    n_kv = max((n.head + 1 for n in heads if n.kv), default=0)
    has_mlp = any(n.kind == "mlp" for n in nodes)
    n_rows = max(1, n_q + n_kv + int(has_mlp))

    def row(node: Node) -> float:
        if node.kind == "head":
            return node.head + (n_q if node.kv else 0)
        return n_rows - 1 if node.kind == "mlp" else (n_rows - 1) / 2

    used = sorted({_column(n, n_layers)[0] for n in nodes})
    col_w = max(90, min(150, 1160 // len(used)))
    x_of = {col: 20 + rank * col_w for rank, col in enumerate(used)}
    positions = {n: (x_of[_column(n, n_layers)[0]], _TOP + row(n) * _ROW_H) for n in nodes}
    names = "".join(
        f"<text class='ivc-col' x='{x:.1f}' y='{_TOP - 10}'>"
        f"{escape(_column_name(c, n_layers))}</text>"
        for c, x in x_of.items()
    )
    width = 40 + len(used) * col_w
    height = _TOP + n_rows * _ROW_H + 10
    return positions, width, height, names


def _edge_info(circuit: CircuitResult, i: int, rank: int, marks: StabilityMarks | None) -> str:
    exact = float(circuit.exact[i])
    unit = circuit.unit
    exact_text = (
        "exact effect: not computed (estimate only)"
        if math.isnan(exact)
        else f"exact effect: {exact:+.4g} {unit} (path patching)"
    )
    return (
        f"{circuit.graph.edges[i].label} (rank {rank} by best value)\n"
        f"score (screen estimate, {circuit.scores.method}): "
        f"{float(circuit.scores.scores[i]):+.4g} {unit}\n"
        + (
            ""
            if circuit.scores.reliability is None
            else f"reliability (|2nd-order| / |1st-order|): "
            f"{reliability_text(float(circuit.scores.reliability[i]))}\n"
        )
        + f"{exact_text}\nstatus: {circuit.status[i]}"
        + (
            ""
            if marks is None
            else f"\nheld by the resamples' top-{marks.size} circuits: {marks.mark(i)}"
        )
    )


def graph_svg(circuit: CircuitResult, *, n_draw: int = 40, circuit_size: int | None = None) -> str:
    """The layered node-link drawing of the strongest ``n_draw`` edges (module docstring);
    the first ``circuit_size`` of them (default: the verified top-k) mark the circuit's
    nodes."""
    check_together(circuit, None, None)
    n_draw = as_int(n_draw, "n_draw", minimum=1)
    graph = circuit.graph
    chosen = edge_rows(circuit, n_draw)
    members = (
        [graph.index(edge) for edge in circuit.circuit(circuit_size)] if circuit_size != 0 else []
    )
    unit = circuit.unit
    edges = [graph.edges[i] for i in chosen]
    positions, width, height, column_names = _layout(edges)
    values = [float(v) for v in circuit.value[chosen]]
    scale = max((abs(v) for v in values), default=1.0) or 1.0
    in_circuit = {n for i in members for n in (graph.edges[i].sender, graph.edges[i].receiver)}
    checked = circuit.audit.checked
    marks = stability_marks(circuit, len(members) or len(chosen))
    paths = []
    for rank, (i, edge, value) in enumerate(zip(chosen, edges, values, strict=True), start=1):
        x1, y1 = positions[edge.sender]
        x2, y2 = positions[edge.receiver]
        x1 += _NODE_W
        y1 += _NODE_H / 2
        y2 += _NODE_H / 2
        bend = max((x2 - x1) / 2, 20)
        classes = f"ivc-edge {'ivc-pos' if value >= 0 else 'ivc-neg'} " + (
            "ivc-exact" if bool(checked[i]) else "ivc-est"
        )
        if marks is not None and marks.stable(i):
            classes += " ivc-stable"
        info = _edge_info(circuit, i, rank, marks)
        stroke = 0.8 + 5.2 * abs(value) / scale
        paths.append(
            f"<path class='{classes}' d='M{x1:.1f},{y1:.1f} C{x1 + bend:.1f},{y1:.1f} "
            f"{x2 - bend:.1f},{y2:.1f} {x2:.1f},{y2:.1f}' stroke-width='{stroke:.2f}' "
            f"tabindex='0' data-edge='{escape(edge.label)}' "
            f"data-status='{escape(circuit.status[i])}' "
            f"data-info='{escape(info)}'><title>{escape(info)}</title></path>"
        )
    nodes = []
    for node, (x, y) in sorted(positions.items(), key=lambda item: item[0].label):
        cls = "ivc-node ivc-in" if node in in_circuit else "ivc-node"
        label = escape(node.label)
        nodes.append(
            f"<g class='{cls}' data-node='{label}'><rect x='{x:.1f}' y='{y:.1f}' "
            f"width='{_NODE_W}' height='{_NODE_H}' rx='3'/><text x='{x + 4:.1f}' "
            f"y='{y + 12:.1f}'>{label}</text><title>{label}</title></g>"
        )
    title = (
        f"the strongest {len(chosen)} of {graph.n_edges} edges, layers left to right; width by "
        f"|value| (largest {scale:.3g} {unit}); solid = exact, dashed = estimated"
    )
    return (
        f"<figure class='ivc-figure'><figcaption class='ivc-hint'>{escape(title)}</figcaption>"
        f"<svg class='ivc-graph' role='img' width='{width}' height='{height}' "
        f"viewBox='0 0 {width} {height}' aria-label='{escape(title)}'>"
        f"{column_names}{''.join(paths)}{''.join(nodes)}</svg></figure>"
    )


def _finite(value: float) -> bool:
    return not math.isnan(value)


def curve_svg(curve: FaithfulnessCurve) -> str:
    """The faithfulness curve with its interval band over the edge fractions (log scale)."""
    width, height, left, right, top, bottom = 460, 280, 52, 16, 22, 44
    fractions = list(curve.fractions)
    n_prompts = int(curve.per_prompt.shape[1])
    points = [
        (f, m, lo, hi, k)
        for f, m, lo, hi, k in zip(
            fractions, curve.mean, curve.low, curve.high, curve.n_edges_kept, strict=True
        )
        if _finite(m)
    ]
    if not points:
        return "<p>The faithfulness curve is undefined at every fraction (m(full) = m(empty)).</p>"
    ys = [v for p in points for v in p[1:4] if _finite(v)] + [0.0, 1.0]
    ys += [v for v in curve.signed_mean if _finite(v)]
    y_low, y_high = min(ys), max(ys)
    x_low, x_high = math.log10(min(fractions)), math.log10(max(fractions))
    span_x = (x_high - x_low) or 1.0
    span_y = (y_high - y_low) or 1.0

    def px(f: float) -> float:
        return left + (math.log10(f) - x_low) / span_x * (width - left - right)

    def py(v: float) -> float:
        return top + (y_high - v) / span_y * (height - top - bottom)

    banded = [p for p in points if _finite(p[2]) and _finite(p[3])]
    band = (
        " ".join(f"{px(f):.1f},{py(hi):.1f}" for f, _, _, hi, _ in banded)
        + " "
        + " ".join(f"{px(f):.1f},{py(lo):.1f}" for f, _, lo, _, _ in reversed(banded))
    )
    line = " ".join(f"{px(f):.1f},{py(m):.1f}" for f, m, _, _, _ in points)
    signed_points = " ".join(
        f"{px(f):.1f},{py(v):.1f}"
        for f, v in zip(fractions, curve.signed_mean, strict=True)
        if _finite(v)
    )
    signed_line = (
        f"<polyline class='ivc-signed' points='{signed_points}'><title>circuits by signed "
        "value (CPR's curve)</title></polyline>"
    )
    dots = []
    for f, m, lo, hi, k in points:
        info = (
            f"edge fraction {f:.3g} ({k} edges kept): faithfulness {m:.3g} "
            f"({bounds_text((lo, hi), n_prompts)})"
        )
        dots.append(
            f"<circle class='ivc-pt' cx='{px(f):.1f}' cy='{py(m):.1f}' r='4' tabindex='0' "
            f"data-info='{escape(info)}'><title>{escape(info)}</title></circle>"
        )
    ticks = "".join(
        f"<text class='ivc-tick' x='{px(f):.1f}' y='{height - bottom + 14}' "
        f"text-anchor='middle'>{f * 100:g}%</text>"
        for f in sorted({*fractions[:: max(1, len(fractions) // 5)], fractions[-1]})
    )
    yticks = "".join(
        f"<text class='ivc-tick' x='{left - 6}' y='{py(v) + 3:.1f}' text-anchor='end'>{v:g}</text>"
        for v in (0.0, 0.5, 1.0)
    )
    return (
        f"<svg class='ivc-curve' role='img' width='{width}' height='{height}' "
        f"viewBox='0 0 {width} {height}' aria-label='faithfulness against the edge fraction'>"
        f"<line class='ivc-axis' x1='{left}' y1='{height - bottom}' x2='{width - right}' "
        f"y2='{height - bottom}'/><line class='ivc-axis' x1='{left}' y1='{top}' x2='{left}' "
        f"y2='{height - bottom}'/><line class='ivc-one' x1='{left}' y1='{py(1):.1f}' "
        f"x2='{width - right}' y2='{py(1):.1f}'/>"
        + (f"<polygon class='ivc-band' points='{band}'/>" if banded else "")
        + f"{signed_line}<polyline class='ivc-line' points='{line}'/>{''.join(dots)}{ticks}{yticks}"
        f"<text class='ivc-tick' x='{(left + width) / 2:.0f}' y='{height - 8}' "
        "text-anchor='middle'>edges kept (fraction of the graph, log scale)</text>"
        f"<text class='ivc-tick' x='12' y='{top - 8}'>faithfulness</text></svg>"
    )


def _agreement_text(a: RankAgreement) -> str:
    if math.isnan(a.rho):
        return a.reason
    if math.isnan(a.low):
        return f"ρ = {number(a.rho, 2)} ({a.reason})"
    return (
        f"ρ = {number(a.rho, 2)} ({a.level:.0%} interval {number(a.low, 2)} … {number(a.high, 2)})"
    )


def _with_spread(head: CircuitHead, name: str) -> str:
    return f"{number(head.concentration[name], 3)} ± {number(head.spread[name], 2)}"


def _link_section(link: MissionLink) -> str:
    rows = [
        [
            h.label,
            *(_with_spread(h, name) for name in LINK_METRICS),
            number(h.strength, 3),
            "; ".join(
                f"{e.label}: score {e.score:+.3g}, "
                + ("not intervened" if e.exact is None else f"exact {e.exact:+.3g}")
                + f" ({e.status})"
                for e in h.edges
            ),
        ]
        for h in link.circuit_heads
    ]
    heads = html_table(
        [
            "head",
            "normalized entropy (fraction of log n)",
            "sink mass (fraction of the row)",
            "contribution norm (residual-stream norm)",
            "strength (Σ|exact|)",
            "circuit edges",
        ],
        rows,
        cls="ivc-scroll",
    )
    agreements = html_table(
        ["concentration metric", "against", "heads", "Spearman ρ"],
        [[a.metric, a.against, str(a.n_heads), _agreement_text(a)] for a in link.agreements],
        cls="ivc-scroll",
    )
    parked = [h for h in link.heads if h.label in link.parked_outside]
    parked_html = (
        "<ul>"
        + "".join(
            f"<li><b>{escape(h.label)}</b>: normalized entropy "
            f"{number(h.concentration['normalized_entropy'], 3)}, sink mass "
            f"{number(h.concentration['sink_mass'], 3)}, contribution norm "
            f"{number(h.concentration['contribution_norm'], 3)}</li>"
            for h in parked
        )
        + "</ul>"
        if parked
        else "<p>None.</p>"
    )
    return (
        "<section class='ivc-section' data-part='mission'>"
        f"<h2>Circuit heads beside their concentration ({len(link.circuit_heads)} heads)</h2>"
        f"<p class='ivc-sem'>{escape(link.sentences['circuit'])}</p>"
        f"<p class='ivc-sem'>{escape(link.sentences['concentration'])}</p>{heads}"
        "<h2>Rank agreement of concentration with the circuit</h2>"
        f"<p class='ivc-sem'>{escape(link.sentences['agreement'])}</p>{agreements}"
        f"<h2>Concentrated, sink-parked heads outside the circuit ({len(parked)})</h2>"
        f"<p class='ivc-sem'>{escape(link.sentences['parked'])}</p>{parked_html}</section>"
    )


def _curve_section(curve: FaithfulnessCurve) -> str:
    n_prompts = int(curve.per_prompt.shape[1])
    cpr = interval_text(curve.cpr_interval, n_prompts, dots="…")
    cmd = interval_text(curve.cmd_interval, n_prompts, dots="…")
    return (
        "<section class='ivc-section' data-part='faithfulness'><h2>Faithfulness</h2>"
        f"<p class='ivc-sem'>{escape(curve.sentence)}</p>"
        f"<div class='ivc-fig'>{curve_svg(curve)}</div><p class='ivc-hint'>Solid line and "
        "band: circuits of the top edges by |value| (CMD's curve) with its 95% interval; "
        "dotted line: circuits by signed value, the most negative noising effect first "
        "(CPR's curve).</p>"
        f"<p><b>CPR</b> (area under the curve, circuits from signed scores; higher is "
        f"better) = {number(curve.cpr, 4)}{cpr} · "
        f"<b>CMD</b> (area between the curve and 1, circuits from absolute scores; lower is "
        f"better) = {number(curve.cmd, 4)}{cmd}"
        f" · complement: {escape(curve.complement)}</p></section>"
    )


def _stability_section(marks: StabilityMarks) -> str:
    stability = marks.stability
    header, rows = stability_columns(stability, dots="…")
    return (
        "<section class='ivc-section' data-part='stability'><h2>Stability</h2>"
        f"<p class='ivc-sem'>{escape(stability.sentence)}</p>"
        + html_table(header, rows)
        + f"<p class='ivc-hint'>In the drawing, a stable edge (held by ≥ "
        f"{stability.stable_at:.0%} of the resamples' top-{marks.size} circuits) is drawn with a "
        "halo; hover an edge for its share.</p></section>"
    )


def _selection_section(selection: StableCircuit) -> str:
    items = "".join(f"<li>{escape(line)}</li>" for line in selection_lines(selection, dots="…"))
    table = html_table(*selection_columns(selection)) if selection.selected else ""
    return (
        "<section class='ivc-section' data-part='selection'><h2>Stable circuit (stability "
        f"selection)</h2><p class='ivc-sem'>{escape(selection.sentence)}</p><ul>{items}</ul>"
        f"{table}</section>"
    )


def circuit_fragment(
    circuit: CircuitResult,
    faithfulness: FaithfulnessCurve | None = None,
    link: MissionLink | None = None,
    *,
    n_draw: int = 40,
) -> str:
    """The circuit view as one ``<div class="interv-circuit">`` with its style and script
    inlined (a notebook can display it; :func:`circuit_page` wraps it in a document). The
    curve and the link must belong to the circuit
    (:func:`interv.report.circuit.check_together`)."""
    check_together(circuit, faithfulness, link)
    size = None if link is None else link.circuit_size
    parts = [
        "<div class='interv-circuit'>",
        f"<style>{asset('circuit.css')}</style>",
        "<header class='ivc-head' data-part='headline'>"
        f"<h1>Circuit: {escape(circuit.model_name)} on {escape(circuit.task_name)}</h1>"
        f"<p class='ivc-sem'>{escape(circuit.sentence)}</p>"
        f"<p>{escape('. '.join(audit_lines(circuit)).capitalize())}.</p>"
        f"<p class='ivc-hint'>{escape(circuit.provenance.describe())}</p></header>",
        "<section class='ivc-section' data-part='graph'><h2>The edges, layer by layer</h2>"
        "<p class='ivc-hint'>Hover, focus or click an edge for its score, exact effect and "
        "status (click pins, Esc unpins). Solid = exact (path patching), dashed = estimated "
        "(the screen's score, not intervened); blue = positive, red = negative.</p>"
        "<div class='ivc-keys'><span>— exact</span><span>- - estimated</span>"
        "<span>shaded node: in the circuit</span></div>"
        f"<div class='ivc-fig'>{graph_svg(circuit, n_draw=n_draw, circuit_size=size)}"
        "<div class='ivc-detail' aria-live='polite' data-empty='Hover an edge.'>Hover an edge."
        "</div></div></section>",
    ]
    marks = stability_marks(circuit, size or max(1, circuit.status.count(EXACT_VERIFIED)))
    if marks is not None:
        parts.append(_stability_section(marks))
    if circuit.selection is not None:
        parts.append(_selection_section(circuit.selection))
    if faithfulness is not None:
        parts.append(_curve_section(faithfulness))
    if link is not None:
        parts.append(_link_section(link))
    parts.append(f"<script>{asset('circuit.js')}</script></div>")
    return "".join(parts)


def circuit_page(
    circuit: CircuitResult,
    faithfulness: FaithfulnessCurve | None = None,
    link: MissionLink | None = None,
    *,
    n_draw: int = 40,
) -> str:
    """The whole HTML document: :func:`circuit_fragment` in a page with a title."""
    check_together(circuit, faithfulness, link)
    title = f"interv circuit: {circuit.model_name} on {circuit.task_name}"
    return (
        "<!DOCTYPE html>\n<html lang='en'><head><meta charset='utf-8'>"
        "<meta name='viewport' content='width=device-width, initial-scale=1'>"
        f"<title>{escape(title)}</title></head><body>"
        f"{circuit_fragment(circuit, faithfulness, link, n_draw=n_draw)}</body></html>\n"
    )
