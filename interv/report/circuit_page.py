"""A circuit as one self-contained HTML page (no CDN, no server): the drawing and the curve.

>>> html = circuit_page(circuit.to_dict(), curve.to_dict(), link)  # doctest: +SKIP

- **The layered node-link drawing** (SVG, drawn here in Python): layers left to right
  (the embedding, each layer's attention heads and MLP, the logits), the strongest
  ``n_draw`` edges by the best value available (exact first), widths by ``|value|`` on
  one scale, blue positive and red negative; exact edges solid, estimated edges dashed
  and paler. Every edge holds its numbers and status in a ``<title>`` (a tooltip, no
  script needed) and in ``data-info``, which the inlined script shows in a detail box on
  hover, focus or click. Heads of the circuit are shaded.
- **The faithfulness curve** over the edge fractions (log scale) with its bootstrap
  interval band, the line ``f = 1``, and CPR and CMD.
- **The mission link** (:func:`interv.report.circuit.mission_link`): the circuit's heads
  with their concentration beside their edges, the rank agreements with intervals, the
  concentrated, sink-parked heads outside the circuit.

Every text from the data is HTML-escaped. Reads only serialized forms; no model.
"""

from __future__ import annotations

import html
import math
import re
from collections.abc import Mapping, Sequence
from functools import cache
from importlib import resources
from typing import Any

from interv._checks import as_int
from interv.errors import IntervError
from interv.report.circuit import (
    LINK_METRICS,
    CircuitHead,
    MissionLink,
    RankAgreement,
    StabilityMarks,
    check_circuit,
    check_faithfulness,
    circuit_edges,
    stability_marks,
)

__all__ = ["circuit_fragment", "circuit_page", "curve_svg", "graph_svg"]

_COL_W = 150
_ROW_H = 30
_NODE_W = 56
_NODE_H = 16
_TOP = 30


@cache
def _asset(name: str) -> str:
    return resources.files("interv.report").joinpath("assets", name).read_text(encoding="utf-8")


def _e(text: Any) -> str:
    return html.escape(str(text), quote=True)


def _num(value: float | None, digits: int = 3) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "n/a"
    return f"{value:.{digits}g}"


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def _split(label: str) -> tuple[str, str, str]:
    sender, rest = label.split("->", 1)
    receiver, _, part = rest.partition(".")
    return sender, receiver, part


_NODE = re.compile(r"^L(\d+)(H|KV)(\d+)$")


def _column(node: str, n_layers: int) -> tuple[int, int]:
    """(column, order in the column) of a node: embed 0, layer l's heads 1 + 2l (key/value
    heads below the query heads), MLP l 2 + 2l, logits last."""
    if node == "embed":
        return 0, 0
    if node == "logits":
        return 2 * n_layers + 1, 0
    if node.startswith("MLP"):
        return 2 + 2 * int(node[3:]), 0
    found = _NODE.match(node)
    if found is None:
        raise IntervError(f"cannot place node {node!r} in the drawing")
    return 1 + 2 * int(found[1]), int(found[3]) + (1000 if found[2] == "KV" else 0)


def _layer(node: str) -> int:
    found = _NODE.match(node)
    if found is not None:
        return int(found[1])
    return int(node[3:]) if node.startswith("MLP") else -1


def _column_name(column: int, n_layers: int) -> str:
    if column == 0:
        return "embed"
    if column == 2 * n_layers + 1:
        return "logits"
    layer = (column - 1) // 2
    return f"layer {layer}" if column % 2 else f"MLP {layer}"


def _layout(labels: Sequence[str]) -> tuple[dict[str, tuple[float, float]], int, int, str]:
    """Node positions, the drawing's size and its column labels. Columns: only those that
    hold a drawn node, in forward order (layers left to right). Rows: query head ``h`` in
    row ``h`` of every layer, key/value heads below them, MLPs at the bottom, the embedding
    and the logits in the middle, so that a path across layers keeps its rows."""
    nodes = {n for label in labels for n in _split(label)[:2]}
    n_layers = max(_layer(n) for n in nodes) + 1
    heads = [_NODE.match(n) for n in nodes]
    n_q = max((int(m[3]) + 1 for m in heads if m is not None and m[2] == "H"), default=0)
    n_kv = max((int(m[3]) + 1 for m in heads if m is not None and m[2] == "KV"), default=0)
    has_mlp = any(n.startswith("MLP") for n in nodes)
    n_rows = max(1, n_q + n_kv + int(has_mlp))

    def row(node: str) -> float:
        found = _NODE.match(node)
        if found is not None:
            return int(found[3]) + (n_q if found[2] == "KV" else 0)
        return n_rows - 1 if node.startswith("MLP") else (n_rows - 1) / 2

    used = sorted({_column(n, n_layers)[0] for n in nodes})
    col_w = max(90, min(150, 1160 // len(used)))
    x_of = {col: 20 + rank * col_w for rank, col in enumerate(used)}
    positions = {n: (x_of[_column(n, n_layers)[0]], _TOP + row(n) * _ROW_H) for n in nodes}
    names = "".join(
        f"<text class='ivc-col' x='{x:.1f}' y='{_TOP - 10}'>{_e(_column_name(c, n_layers))}</text>"
        for c, x in x_of.items()
    )
    width = 40 + len(used) * col_w
    height = _TOP + n_rows * _ROW_H + 10
    return positions, width, height, names


def _edge_info(
    circuit: Mapping[str, Any], i: int, unit: str, rank: int, marks: StabilityMarks | None
) -> str:
    exact = circuit["exact"][i]
    exact_text = (
        "exact effect: not computed (estimate only)"
        if exact is None
        else f"exact effect: {exact:+.4g} {unit} (path patching)"
    )
    return (
        f"{circuit['edges'][i]} (rank {rank} by best value)\n"
        f"score (screen estimate, {circuit['method']}): {circuit['scores'][i]:+.4g} {unit}\n"
        f"{exact_text}\nstatus: {circuit['status'][i]}"
        + (
            ""
            if marks is None
            else f"\nheld by the resamples' top-{marks.size} circuits: {marks.mark(i)}"
        )
    )


def graph_svg(circuit: Any, *, n_draw: int = 40, circuit_size: int | None = None) -> str:
    """The layered node-link drawing of the strongest ``n_draw`` edges (module docstring);
    the first ``circuit_size`` of them (default: the verified top-k) mark the circuit's
    nodes."""
    circuit = check_circuit(circuit)
    n_draw = as_int(n_draw, "n_draw", minimum=1)
    n_edges = len(circuit["edges"])
    chosen = circuit_edges(circuit, min(n_draw, n_edges))
    members = set(circuit_edges(circuit, circuit_size)) if circuit_size != 0 else set()
    unit = circuit.get("unit", circuit["metric"])
    labels = [circuit["edges"][i] for i in chosen]
    positions, width, height, column_names = _layout(labels)
    values = [
        circuit["scores"][i] if circuit["exact"][i] is None else circuit["exact"][i] for i in chosen
    ]
    scale = max((abs(v) for v in values), default=1.0) or 1.0
    in_circuit = {n for i in members for n in _split(circuit["edges"][i])[:2]}
    marks = stability_marks(circuit, len(members) or len(chosen))
    paths = []
    for rank, (i, value) in enumerate(zip(chosen, values, strict=True), start=1):
        sender, receiver, _ = _split(circuit["edges"][i])
        x1, y1 = positions[sender]
        x2, y2 = positions[receiver]
        x1 += _NODE_W
        y1 += _NODE_H / 2
        y2 += _NODE_H / 2
        bend = max((x2 - x1) / 2, 20)
        exact = circuit["exact"][i] is not None
        classes = f"ivc-edge {'ivc-pos' if value >= 0 else 'ivc-neg'} " + (
            "ivc-exact" if exact else "ivc-est"
        )
        if marks is not None and marks.share.get(i, 0.0) >= marks.stable_at:
            classes += " ivc-stable"
        info = _edge_info(circuit, i, unit, rank, marks)
        stroke = 0.8 + 5.2 * abs(value) / scale
        paths.append(
            f"<path class='{classes}' d='M{x1:.1f},{y1:.1f} C{x1 + bend:.1f},{y1:.1f} "
            f"{x2 - bend:.1f},{y2:.1f} {x2:.1f},{y2:.1f}' stroke-width='{stroke:.2f}' "
            f"tabindex='0' data-edge='{_e(circuit['edges'][i])}' "
            f"data-status='{_e(circuit['status'][i])}' "
            f"data-info='{_e(info)}'><title>{_e(info)}</title></path>"
        )
    nodes = []
    for node, (x, y) in sorted(positions.items()):
        cls = "ivc-node ivc-in" if node in in_circuit else "ivc-node"
        nodes.append(
            f"<g class='{cls}' data-node='{_e(node)}'><rect x='{x:.1f}' y='{y:.1f}' "
            f"width='{_NODE_W}' height='{_NODE_H}' rx='3'/><text x='{x + 4:.1f}' "
            f"y='{y + 12:.1f}'>{_e(node)}</text><title>{_e(node)}</title></g>"
        )
    title = (
        f"the strongest {len(chosen)} of {n_edges} edges, layers left to right; width by "
        f"|value| (largest {scale:.3g} {unit}); solid = exact, dashed = estimated"
    )
    return (
        f"<figure class='ivc-figure'><figcaption class='ivc-hint'>{_e(title)}</figcaption>"
        f"<svg class='ivc-graph' role='img' width='{width}' height='{height}' "
        f"viewBox='0 0 {width} {height}' aria-label='{_e(title)}'>"
        f"{column_names}{''.join(paths)}{''.join(nodes)}</svg></figure>"
    )


def curve_svg(curve: Any) -> str:
    """The faithfulness curve with its interval band over the edge fractions (log scale)."""
    curve = check_faithfulness(curve)
    width, height, left, right, top, bottom = 460, 280, 52, 16, 22, 44
    fractions = curve["fractions"]
    points = [
        (f, m, lo, hi)
        for f, m, lo, hi in zip(fractions, curve["mean"], curve["low"], curve["high"], strict=True)
        if m is not None
    ]
    if not points:
        return "<p>The faithfulness curve is undefined at every fraction (m(full) = m(empty)).</p>"
    ys = [v for p in points for v in p[1:] if v is not None] + [0.0, 1.0]
    ys += [v for v in curve.get("signed_mean") or [] if _is_number(v)]
    y_low, y_high = min(ys), max(ys)
    x_low, x_high = math.log10(min(fractions)), math.log10(max(fractions))
    span_x = (x_high - x_low) or 1.0
    span_y = (y_high - y_low) or 1.0

    def px(f: float) -> float:
        return left + (math.log10(f) - x_low) / span_x * (width - left - right)

    def py(v: float) -> float:
        return top + (y_high - v) / span_y * (height - top - bottom)

    banded = [p for p in points if p[2] is not None and p[3] is not None]
    band = (
        " ".join(f"{px(f):.1f},{py(hi):.1f}" for f, _, _, hi in banded)
        + " "
        + " ".join(f"{px(f):.1f},{py(lo):.1f}" for f, _, lo, _ in reversed(banded))
    )
    line = " ".join(f"{px(f):.1f},{py(m):.1f}" for f, m, _, _ in points)
    signed = curve.get("signed_mean")
    signed_line = (
        "<polyline class='ivc-signed' points='"
        + " ".join(
            f"{px(f):.1f},{py(v):.1f}"
            for f, v in zip(fractions, signed, strict=True)
            if v is not None
        )
        + "'><title>circuits by signed value (CPR's curve)</title></polyline>"
        if isinstance(signed, list) and len(signed) == len(fractions)
        else ""
    )
    kept = curve.get("n_edges_kept") or [None] * len(fractions)
    dots = []
    for (f, m, lo, hi), k in zip(
        points, [kept[fractions.index(p[0])] for p in points], strict=True
    ):
        info = (
            f"edge fraction {f:.3g} ({'?' if k is None else k} edges kept): faithfulness "
            f"{m:.3g} (95% interval {_num(lo)} ... {_num(hi)})"
        )
        dots.append(
            f"<circle class='ivc-pt' cx='{px(f):.1f}' cy='{py(m):.1f}' r='4' tabindex='0' "
            f"data-info='{_e(info)}'><title>{_e(info)}</title></circle>"
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


def _table(columns: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    head = "".join(f"<th>{_e(c)}</th>" for c in columns)
    body = "".join("<tr>" + "".join(f"<td>{_e(c)}</td>" for c in row) + "</tr>" for row in rows)
    return (
        f"<div class='ivc-scroll'><table><thead><tr>{head}</tr></thead>"
        f"<tbody>{body}</tbody></table></div>"
    )


def _agreement_text(a: RankAgreement) -> str:
    if math.isnan(a.rho):
        return a.reason
    if math.isnan(a.low):
        return f"ρ = {_num(a.rho, 2)} ({a.reason})"
    return f"ρ = {_num(a.rho, 2)} ({a.level:.0%} interval {_num(a.low, 2)} … {_num(a.high, 2)})"


def _with_spread(head: CircuitHead, name: str) -> str:
    return f"{_num(head.concentration[name])} ± {_num(head.spread[name], 2)}"


def _link_section(link: MissionLink) -> str:
    rows = [
        [
            h.label,
            *(_with_spread(h, name) for name in LINK_METRICS),
            _num(h.strength),
            "; ".join(
                f"{e.label}: score {e.score:+.3g}, "
                + ("not intervened" if e.exact is None else f"exact {e.exact:+.3g}")
                + f" ({e.status})"
                for e in h.edges
            ),
        ]
        for h in link.circuit_heads
    ]
    heads = _table(
        [
            "head",
            "normalized entropy (fraction of log n)",
            "sink mass (fraction of the row)",
            "contribution norm (residual-stream norm)",
            "strength (Σ|exact|)",
            "circuit edges",
        ],
        rows,
    )
    agreements = _table(
        ["concentration metric", "against", "heads", "Spearman ρ"],
        [[a.metric, a.against, str(a.n_heads), _agreement_text(a)] for a in link.agreements],
    )
    parked = [h for h in link.heads if h.label in link.parked_outside]
    parked_html = (
        "<ul>"
        + "".join(
            f"<li><b>{_e(h.label)}</b>: normalized entropy "
            f"{_num(h.concentration['normalized_entropy'])}, sink mass "
            f"{_num(h.concentration['sink_mass'])}, contribution norm "
            f"{_num(h.concentration['contribution_norm'])}</li>"
            for h in parked
        )
        + "</ul>"
        if parked
        else "<p>None.</p>"
    )
    return (
        "<section class='ivc-section' data-part='mission'>"
        f"<h2>Circuit heads beside their concentration ({len(link.circuit_heads)} heads)</h2>"
        f"<p class='ivc-sem'>{_e(link.sentences['circuit'])}</p>"
        f"<p class='ivc-sem'>{_e(link.sentences['concentration'])}</p>{heads}"
        "<h2>Rank agreement of concentration with the circuit</h2>"
        f"<p class='ivc-sem'>{_e(link.sentences['agreement'])}</p>{agreements}"
        f"<h2>Concentrated, sink-parked heads outside the circuit ({len(parked)})</h2>"
        f"<p class='ivc-sem'>{_e(link.sentences['parked'])}</p>{parked_html}</section>"
    )


def _interval(curve: Mapping[str, Any], key: str) -> str:
    interval = curve.get(f"{key}_interval")
    if not isinstance(interval, list) or len(interval) != 2 or None in interval:
        return ""
    return f" (95% interval {_num(interval[0], 3)} … {_num(interval[1], 3)})"


def _audit_line(circuit: Mapping[str, Any]) -> str:
    status = circuit["status"]
    counts = [status.count(s) for s in ("exact (verified)", "exact (audit)", "estimated")]
    audit = circuit.get("audit") or {}
    line = (
        f"{len(status)} edges: {counts[0]} exact (verified), {counts[1]} exact (audit), "
        f"{counts[2]} estimated (screen scores, not intervened)."
    )
    if isinstance(audit.get("audited"), list) and "miss_bound" in audit:
        line += (
            f" Audit: {audit.get('misses')} of {len(audit['audited'])} audited edges above the "
            f"top-k threshold {_num(audit.get('threshold'))}; miss rate ≤ "
            f"{_num(audit.get('miss_bound'))} (one-sided Clopper-Pearson upper bound)."
        )
    return line


def _verified_count(circuit: Mapping[str, Any]) -> int:
    return max(1, circuit["status"].count("exact (verified)"))


def _stability_section(marks: StabilityMarks) -> str:
    rows = [
        [str(size), _num(mean), f"{_num(low)} … {_num(high)}", f"{stable} of {size}"]
        for size, mean, low, high, stable in marks.rows
    ]
    return (
        "<section class='ivc-section' data-part='stability'><h2>Stability</h2>"
        f"<p class='ivc-sem'>{_e(marks.sentence)}</p>"
        + _table(
            [
                "circuit size",
                "Jaccard with the full-sample circuit (mean)",
                "95% interval",
                f"stable edges (held by ≥ {marks.stable_at:.0%})",
            ],
            rows,
        )
        + f"<p class='ivc-hint'>In the drawing, a stable edge (held by ≥ {marks.stable_at:.0%} "
        f"of the resamples' top-{marks.size} circuits) is drawn with a halo; hover an edge for "
        "its share.</p></section>"
    )


def circuit_fragment(
    circuit: Any,
    faithfulness: Any = None,
    link: MissionLink | None = None,
    *,
    n_draw: int = 40,
) -> str:
    """The circuit view as one ``<div class="interv-circuit">`` with its style and script
    inlined (a notebook can display it; :func:`circuit_page` wraps it in a document)."""
    circuit = check_circuit(circuit)
    if link is not None and not isinstance(link, MissionLink):
        raise IntervError(f"link must be a MissionLink; got {type(link).__name__}")
    size = None if link is None else link.circuit_size
    parts = [
        "<div class='interv-circuit'>",
        f"<style>{_asset('circuit.css')}</style>",
        "<header class='ivc-head' data-part='headline'>"
        f"<h1>Circuit: {_e(circuit['model'])} on {_e(circuit['task'])}</h1>"
        f"<p class='ivc-sem'>{_e(circuit['sentence'])}</p><p>{_e(_audit_line(circuit))}</p>"
        "</header>",
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
    marks = stability_marks(circuit, size or _verified_count(circuit))
    if marks is not None:
        parts.append(_stability_section(marks))
    if faithfulness is not None:
        curve = check_faithfulness(faithfulness)
        parts.append(
            "<section class='ivc-section' data-part='faithfulness'><h2>Faithfulness</h2>"
            f"<p class='ivc-sem'>{_e(curve['sentence'])}</p>"
            f"<div class='ivc-fig'>{curve_svg(curve)}</div><p class='ivc-hint'>Solid line and "
            "band: circuits of the top edges by |value| (CMD's curve) with its 95% interval; "
            "dotted line: circuits by signed value, the most negative noising effect first "
            "(CPR's curve).</p>"
            f"<p><b>CPR</b> (area under the curve, circuits from signed scores; higher is "
            f"better) = {_num(curve.get('cpr'), 4)}{_interval(curve, 'cpr')} · <b>CMD</b> (area "
            f"between the curve and 1, circuits from absolute scores; lower is better) = "
            f"{_num(curve.get('cmd'), 4)}{_interval(curve, 'cmd')}"
            f" · complement: {_e(curve.get('complement', 'n/a'))}</p></section>"
        )
    if link is not None:
        parts.append(_link_section(link))
    parts.append(f"<script>{_asset('circuit.js')}</script></div>")
    return "".join(parts)


def circuit_page(
    circuit: Any, faithfulness: Any = None, link: MissionLink | None = None, *, n_draw: int = 40
) -> str:
    """The whole HTML document: :func:`circuit_fragment` in a page with a title."""
    data = check_circuit(circuit)
    title = f"interv circuit: {data['model']} on {data['task']}"
    return (
        "<!DOCTYPE html>\n<html lang='en'><head><meta charset='utf-8'>"
        "<meta name='viewport' content='width=device-width, initial-scale=1'>"
        f"<title>{_e(title)}</title></head><body>"
        f"{circuit_fragment(data, faithfulness, link, n_draw=n_draw)}</body></html>\n"
    )
