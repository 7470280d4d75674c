"""A circuit in Markdown: scope, audit, top edges with their status, the faithfulness curve
and the mission link, rendered from the typed results.

>>> print(circuit_markdown(circuit, curve, mission_link(circuit, heads)))  # doctest: +SKIP

The circuit (:class:`~interv.circuits.CircuitResult`), its faithfulness curve
(:class:`~interv.circuits.FaithfulnessCurve`) and its mission link
(:class:`~interv.circuits.mission.MissionLink`) are shown together only when they belong
together (:func:`check_together`): the curve's ranking and the link's circuit join the
circuit's provenance (:func:`interv.provenance.join`): same model, weights, dtype, prompts,
metric and screen settings. Every text from the data is made inert.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from interv._checks import as_int
from interv._inert import markdown_text
from interv.audit import ESTIMATED, EXACT_AUDIT, EXACT_VERIFIED, Audit
from interv.circuits._stored import curve_sizes
from interv.circuits.curves import FaithfulnessCurve
from interv.circuits.discovery import CircuitResult
from interv.circuits.mission import CircuitEdge, MissionLink, RankAgreement
from interv.circuits.selection import StableCircuit
from interv.circuits.stability import CircuitStability
from interv.errors import IntervError
from interv.provenance import join
from interv.report.kit import md_table, number
from interv.stats import too_few

__all__ = ["check_together", "circuit_markdown", "edge_rows", "stability_marks"]

_STATUSES = (EXACT_VERIFIED, EXACT_AUDIT, ESTIMATED)


def check_together(
    circuit: CircuitResult, faithfulness: FaithfulnessCurve | None, link: MissionLink | None
) -> None:
    """Refuse a curve or a link that does not belong to ``circuit`` (the differing field of
    their provenance named), or an argument of another type."""
    if not isinstance(circuit, CircuitResult):
        raise IntervError(f"circuit must be a CircuitResult; got {type(circuit).__name__}")
    if faithfulness is not None:
        if not isinstance(faithfulness, FaithfulnessCurve):
            raise IntervError(
                f"faithfulness must be a FaithfulnessCurve; got {type(faithfulness).__name__}"
            )
        if faithfulness.ranking is None:
            raise IntervError(
                "the faithfulness curve was made from a given edge order, not from this "
                "circuit: pass faithfulness(model, task, circuit) to show it beside the circuit"
            )
        join(
            circuit, faithfulness.ranking, what=("the circuit", "the faithfulness curve's ranking")
        )
        join(circuit, faithfulness, what=("the circuit", "the faithfulness curve"))
        curve_sizes(  # bounded by the circuit's graph
            faithfulness.fractions,
            faithfulness.n_edges_kept,
            faithfulness.convention,
            circuit.graph.n_edges,
        )
    if link is not None:
        if not isinstance(link, MissionLink):
            raise IntervError(f"link must be a MissionLink; got {type(link).__name__}")
        join(circuit, link, what=("the circuit", "the mission link"))
        graph = circuit.graph
        if link.circuit_size > graph.n_edges or len(link.heads) != graph.n_layers * graph.n_heads:
            raise IntervError(
                f"the mission link's circuit_size is {link.circuit_size} and it holds "
                f"{len(link.heads)} heads; the circuit's graph has {graph.n_edges} edges and "
                f"{graph.n_layers * graph.n_heads} heads"
            )


def edge_rows(circuit: CircuitResult, n: int) -> list[int]:
    """Indices of the circuit's top ``n`` edges of its ranking (exact first)."""
    n = as_int(n, "n", minimum=1)
    return circuit.ranking()[: min(n, circuit.graph.n_edges)].tolist()


@dataclass(frozen=True)
class StabilityMarks:
    """How often a circuit's top edges are found again on bootstrap resamples of the
    prompts: its :attr:`~interv.circuits.CircuitResult.stability` read at one compared size.

    Attributes:
        stability: the circuit's stability.
        size: the compared circuit size (edges) whose inclusion shares are shown.
    """

    stability: CircuitStability
    size: int

    def share(self, index: int) -> float:
        """The share of the resamples whose circuit of ``size`` edges holds edge ``index``."""
        row = self.stability.sizes.index(self.size)
        return float(self.stability.inclusion[row, index])

    def stable(self, index: int) -> bool:
        """Whether the edge is held by at least ``stable_at`` of the resamples."""
        return self.share(index) >= self.stability.stable_at

    def mark(self, index: int) -> str:
        """``"0.95 (stable)"``, ``"0.40"``: the edge's inclusion share in words."""
        return f"{self.share(index):.2f}" + (" (stable)" if self.stable(index) else "")


def stability_marks(circuit: CircuitResult, n: int) -> StabilityMarks | None:
    """The stability marks for a circuit's top ``n`` edges: the inclusion shares at the
    smallest compared size holding ``n`` edges (the largest otherwise); None when the
    circuit carries no stability."""
    stability = circuit.stability
    if stability is None:
        return None
    size = next((size for size in stability.sizes if size >= n), stability.sizes[-1])
    return StabilityMarks(stability, size)


def stability_columns(
    stability: CircuitStability, dots: str = "..."
) -> tuple[list[str], list[list[str]]]:
    """The stability table's header and rows (one per compared size)."""
    header = [
        "circuit size",
        "Jaccard with the full-sample circuit (mean)",
        "95% interval",
        f"stable edges (held by >= {stability.stable_at:.0%})",
    ]
    rows = [
        [
            str(size),
            number(mean, 3),
            interval_cell((low, high), stability.n_prompts, dots),
            f"{int(stability.stable(size).sum())} of {size}",
        ]
        for size, mean, low, high in zip(
            stability.sizes, stability.mean, stability.low, stability.high, strict=True
        )
    ]
    return header, rows


def selection_lines(selection: StableCircuit, dots: str = "...") -> list[str]:
    """The stable circuit (stability selection) in short lines: its size and rule, its
    bound, its bootstrap and leave-one-group-out Jaccards (each when computed)."""
    circuits = (
        f"connected circuits (in each, the edges connecting the input to the logits in the "
        f"smallest top of its ranking holding at least {selection.q} of them; "
        f"{number(selection.mean_size, 3)} edges on average) of {selection.n_resamples} half "
        f"subsamples ({selection.subsample} of {selection.n_prompts} prompt pairs each), then "
        f"pruned to its connected edges ({selection.n_pruned} dropped)"
        if selection.connected
        else f"top {selection.q} of {selection.n_resamples} half subsamples "
        f"({selection.subsample} of {selection.n_prompts} prompt pairs each)"
    )
    lines = [
        f"{len(selection.selected)} edges with inclusion frequency >= {selection.pi:g} in the "
        f"{circuits}",
        f"expected falsely selected edges E[V] <= {number(selection.bound, 3)} "
        "(Meinshausen & Bühlmann 2010; its assumptions are not checked: see the sentence)",
    ]
    if selection.jaccard:
        interval = interval_cell(
            (selection.jaccard_low, selection.jaccard_high), selection.n_prompts, dots
        )
        meets = (
            "below the bar of 0.8"
            if not selection.jaccard_mean >= 0.8
            else "its 95% interval above the bar of 0.8"
            if selection.jaccard_low >= 0.8
            else "the mean meets the bar of 0.8, the 95% interval's lower end does not"
        )
        lines.append(
            f"bootstrap Jaccard with the selection redone on each of {len(selection.jaccard)} "
            f"resamples of the prompts: {number(selection.jaccard_mean, 3)} {interval} "
            f"({meets})"
        )
    if selection.groups:
        each = ", ".join(
            f"{name} ({pairs} pairs) {number(j, 3)}"
            for name, pairs, j in zip(
                selection.groups, selection.group_pairs, selection.group_jaccard, strict=True
            )
        )
        lines.append(f"Jaccard with the selection redone without each group: {each}")
    return lines


def selection_columns(selection: StableCircuit) -> tuple[list[str], list[list[str]]]:
    """The stable circuit's table: one row per selected edge, most often included first."""
    rows = [
        [str(rank), selection.graph.edges[i].label, number(float(selection.inclusion[i]), 3)]
        for rank, i in enumerate(selection.selected, start=1)
    ]
    share = "connected circuits" if selection.connected else f"top-{selection.q}s"
    return ["rank", "edge", f"inclusion (share of the {share})"], rows


def _exact_text(value: float, digits: int = 4) -> str:
    return "not intervened" if math.isnan(value) else f"{value:+.{digits}g}"


def _edge_text(edge: CircuitEdge) -> str:
    exact = "not intervened" if edge.exact is None else f"exact {edge.exact:+.3g}"
    return f"{edge.label} (score {edge.score:+.3g}, {exact}, {edge.status})"


def agreement_text(a: RankAgreement, dots: str = "...") -> str:
    """A rank agreement in words: rho with its interval, or why there is none."""
    if math.isnan(a.rho):
        return a.reason
    interval = (
        a.reason
        if math.isnan(a.low)
        else f"{a.level:.0%} interval {number(a.low, 2)} {dots} {number(a.high, 2)}"
    )
    return f"rho = {number(a.rho, 2)} ({interval})"


def _link_markdown(link: MissionLink) -> list[str]:
    md = markdown_text
    lines = ["## Circuit heads beside their concentration", ""]
    lines += [f"- {md(link.sentences[key])}" for key in ("circuit", "concentration")]
    lines += [""]
    columns = ["head", "H/log n", "sink mass", "contrib. norm", "strength", "edges"]
    rows = [
        [
            h.label,
            number(h.concentration["normalized_entropy"], 3),
            number(h.concentration["sink_mass"], 3),
            number(h.concentration["contribution_norm"], 3),
            number(h.strength, 3),
            "; ".join(_edge_text(e) for e in h.edges),
        ]
        for h in link.circuit_heads
    ]
    lines += (
        md_table(columns, rows) if rows else ["No attention head sends or receives a circuit edge."]
    )
    lines += ["", "### Rank agreement of concentration with the circuit", ""]
    lines += [md(link.sentences["agreement"]), ""]
    lines += md_table(
        ["metric", "against", "heads", "Spearman rho"],
        [[a.metric, a.against, str(a.n_heads), agreement_text(a)] for a in link.agreements],
    )
    lines += ["", "### Concentrated, sink-parked heads outside the circuit", ""]
    lines += [md(link.sentences["parked"]), ""]
    parked = [h for h in link.heads if h.label in link.parked_outside]
    lines += (
        [
            f"- {md(h.label)}: normalized entropy "
            f"{number(h.concentration['normalized_entropy'], 3)}, sink mass "
            f"{number(h.concentration['sink_mass'], 3)}, contribution norm "
            f"{number(h.concentration['contribution_norm'], 3)}"
            for h in parked
        ]
        if parked
        else ["None."]
    )
    return lines


def interval_text(
    interval: tuple[float, float], n_prompts: int, level: str = "95%", dots: str = "..."
) -> str:
    """`` (95% interval a ... b)``, or why there is none (too few prompts: the statistics'
    own minimum, :func:`interv.stats.too_few`)."""
    return f" ({bounds_text(interval, n_prompts, level, dots)})"


def bounds_text(
    interval: tuple[float, float], n_prompts: int, level: str = "95%", dots: str = "..."
) -> str:
    """``95% interval a ... b``, or why it is n/a."""
    return f"{level} interval {interval_cell(interval, n_prompts, dots)}"


def interval_cell(interval: tuple[float, float], n_prompts: int, dots: str = "...") -> str:
    """``a ... b``, or ``n/a: <why>`` (too few prompts, :func:`interv.stats.too_few`)."""
    low, high = interval
    if math.isnan(low) or math.isnan(high):
        return too_few(n_prompts) or "n/a: undefined in every resample"
    return f"{number(low, 3)} {dots} {number(high, 3)}"


def _faithfulness_markdown(curve: FaithfulnessCurve) -> list[str]:
    lines = ["## Faithfulness", "", markdown_text(curve.sentence), ""]
    n_prompts = int(curve.per_prompt.shape[1])
    columns = ["edge fraction", "edges kept", "faithfulness, circuits by |value| (mean)"]
    columns += ["95% interval", "circuits by signed value (CPR's)"]
    rows = [
        [f"{f:.3g}", str(k), number(m, 3), bounds_text((lo, hi), n_prompts, ""), number(s, 3)]
        for f, k, m, lo, hi, s in zip(
            curve.fractions,
            curve.n_edges_kept,
            curve.mean,
            curve.low,
            curve.high,
            curve.signed_mean,
            strict=True,
        )
    ]
    lines += md_table(columns, rows)
    lines += [
        "",
        f"- CPR (area under the faithfulness curve over the edge fractions, circuits from "
        f"signed scores; higher is better): {number(curve.cpr, 4)}"
        f"{interval_text(curve.cpr_interval, n_prompts)}",
        f"- CMD (area between the curve and 1, circuits from absolute scores; lower is "
        f"better): {number(curve.cmd, 4)}{interval_text(curve.cmd_interval, n_prompts)}",
    ]
    return lines


def audit_lines(circuit: CircuitResult) -> list[str]:
    """The edges' statuses and the audit's outcome, in words (plain text)."""
    audit = circuit.audit
    counts = {s: circuit.status.count(s) for s in _STATUSES}
    return [
        f"edges: {circuit.graph.n_edges}; {counts[EXACT_VERIFIED]} exact (verified), "
        f"{counts[EXACT_AUDIT]} exact (audit), {counts[ESTIMATED]} estimated (screen scores, "
        "not intervened)",
        f"audit: {audit.misses} of {int(audit.audited.numel())} audited edges above the top-k "
        f"threshold {number(audit.threshold, 3)}; miss rate <= {number(audit.miss_bound, 3)} "
        "(one-sided Clopper-Pearson upper bound); Spearman of screen vs exact over the "
        f"{audit.n_checked} checked edges {_rank_text(audit)}",
    ]


def _rank_text(audit: Audit) -> str:
    """The audit's rank agreement with its interval, or why it is n/a."""
    if math.isnan(audit.rank_agreement):
        reason = too_few(audit.n_checked, "checked edge", "rank correlation")
        return reason or "n/a: constant values"
    level = f"{audit.screen.level:.0%}"
    return (
        f"{number(audit.rank_agreement, 2)} "
        f"({bounds_text(audit.rank_interval, audit.n_checked, level)}, bootstrap over them)"
    )


def reliability_text(value: float) -> str:
    """An HVP-corrected estimate's reliability score as the report prints it."""
    return "not computed" if math.isnan(value) else f"{value:.3g}"


def circuit_markdown(
    circuit: CircuitResult,
    faithfulness: FaithfulnessCurve | None = None,
    link: MissionLink | None = None,
    *,
    top: int = 20,
) -> str:
    """The circuit section in Markdown: scope, the audit, the top edges with their status,
    the faithfulness curve with CPR and CMD, and the mission link (each when given; each
    must belong to the circuit: :func:`check_together`)."""
    check_together(circuit, faithfulness, link)
    md = markdown_text
    scores = circuit.scores
    lines = [
        f"# Circuit: {md(circuit.model_name)} on {md(circuit.task_name)}",
        "",
        f"- {md(circuit.sentence)}",
        f"- screen: {md(scores.method)}, metric {md(scores.metric)} ({md(circuit.unit)}); "
        f"{md(circuit.provenance.describe())}",
    ]
    lines += [f"- {md(line)}" for line in audit_lines(circuit)]
    chosen = edge_rows(circuit, top)
    exact = circuit.exact
    marks = stability_marks(circuit, len(chosen))
    columns = ["rank", "edge", "score (estimate)", "exact effect", "status"]
    reliable = scores.reliability  # Zhang & Wang's score, beside an HVP-corrected estimate
    if reliable is not None:
        columns.insert(3, "reliability |2nd| / |1st|")
    if marks is not None:
        columns.append(f"held by resamples' top-{marks.size}")
    lines += ["", f"## The top {len(chosen)} edges (exact first, then estimates)", ""]
    lines += md_table(
        columns,
        [
            [
                str(rank),
                circuit.graph.edges[i].label,
                f"{float(scores.scores[i]):+.4g}",
                *([] if reliable is None else [reliability_text(float(reliable[i]))]),
                _exact_text(float(exact[i])),
                circuit.status[i],
                *([marks.mark(i)] if marks is not None else []),
            ]
            for rank, i in enumerate(chosen, start=1)
        ],
    )
    if marks is not None:
        header, rows = stability_columns(marks.stability)
        lines += ["", "## Stability", "", md(marks.stability.sentence), ""]
        lines += md_table(header, rows)
    selection = circuit.selection
    if selection is not None:
        lines += ["", "## Stable circuit (stability selection)", "", md(selection.sentence), ""]
        lines += [f"- {md(line)}" for line in selection_lines(selection)]
        if selection.selected:
            lines += ["", *md_table(*selection_columns(selection))]
    if faithfulness is not None:
        lines += ["", *_faithfulness_markdown(faithfulness)]
    if link is not None:
        lines += ["", *_link_markdown(link)]
    return "\n".join(lines) + "\n"
