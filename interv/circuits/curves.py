"""Faithfulness of circuits at MIB's edge fractions, exact, batched over prompts and circuits.

A circuit ``C`` keeps its edges; every other edge is patched: its reader reads the
*complement's* output of the sender instead of the live one. Each reader's input is rebuilt
exactly (the pre-norm residual stream is a sum of writers' outputs)::

    input(v) = R(v) + sum_{u -> v in C} (a_live(u) - a_R(u))

with ``R`` the complement: the corrupted run (``complement="corrupted"``: ``R(v)`` its
residual stream at ``v``, ``a_R(u)`` its sender outputs) or the position-wise mean over the
corrupted prompts (``"mean"``). Everything runs on the clean prompts and live downstream;
every circuit of the curve is one copy of the prompts in one stacked forward.

Faithfulness (MIB circuit track, Mueller et al. 2025)::

    f(C) = (m(C) - m(empty)) / (m(full) - m(empty))

of the prompt-mean metric ``m`` (``m(full)`` is the clean run, ``m(empty)`` every edge
patched), at edge fractions :data:`MIB_FRACTIONS` (``round(fraction * n_edges)`` edges, at
least one). A circuit is the top edges of the ranking, or (``greedy=True``) the greedy circuit
of that size (:mod:`interv.circuits.greedy`: grown from the logits, every edge reaching them);
either is evaluated the same way. The per-prompt ratios are kept too; intervals are
percentile bootstraps over prompts of the ratio of means. CPR (area under ``f`` over the
fractions, trapezoids, circuits from *signed* values: the edges whose patching lowers the
metric most first) and CMD (area between ``f`` and 1, ``|1 - f|``, circuits by absolute
value) as MIB's circuit track computes them (linear fraction axis). Higher CPR and lower
CMD are better. ``convention="mib"`` takes MIB's circuit sizes (``int(fraction * n_edges)``)
and prunes every circuit to the edges connecting the input to the logits before it is
evaluated (:mod:`interv.circuits.mib`).
"""

from __future__ import annotations

import hashlib
import itertools
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch

from interv._pandas import require_pandas
from interv._schema import parse
from interv.circuits._stored import StoredCurve
from interv.circuits.discovery import CircuitResult
from interv.circuits.executor import Kept, RayExecutor, check_executor, run_jobs
from interv.circuits.graph import Edge, Graph
from interv.circuits.greedy import greedy_order
from interv.circuits.mib import (
    CONVENTIONS,
    MIBCircuit,
    mib_edge_count,
    mib_order,
    mib_scores,
    mib_sizes,
    prune,
    tie_note,
)
from interv.circuits.patching import (
    Run,
    capture_run,
    check_task,
    copies_of,
    per_prompt_metric,
    reader_weights,
)
from interv.circuits.screens import EdgeScores
from interv.engine.forward import AUTO, PATTERN, Prompts, forward
from interv.engine.sites import Site
from interv.engine.targets import TargetMetric
from interv.engine.writes import Writes
from interv.errors import IntervError
from interv.provenance import Provenance, compares, join, run_fingerprint
from interv.stats import bootstrap_indices, percentile_interval

if TYPE_CHECKING:
    from interv.tasks.tokenized import TokenizedPairs

__all__ = ["COMPLEMENTS", "MIB_FRACTIONS", "FaithfulnessCurve", "cmd", "cpr", "faithfulness"]

MIB_FRACTIONS: tuple[float, ...] = (0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0)
"""MIB's circuit sizes: 0.1 % ... 100 % of the graph's edges."""

COMPLEMENTS: tuple[str, ...] = ("corrupted", "mean")
"""What fills the edges outside a circuit: the corrupted run, or its position-wise mean."""

FORMAT = "interv.faithfulness/1"

_RANKING_MAY_DIFFER = ("prompts", "n_prompts", "pairs", "metric", "direction", "settings")
"""A circuit may be evaluated on other prompts (found on one split, tested on another) and
with another metric than the one it was ranked by; the model must be the same."""


def _area(fractions: Sequence[float], values: Sequence[float]) -> float:
    total = 0.0
    for i in range(len(values) - 1):
        total += (fractions[i + 1] - fractions[i]) * (values[i] + values[i + 1]) / 2
    return total


def _check_curve(fractions: Sequence[float], faith: Sequence[float]) -> tuple[list, list]:
    xs = [float(x) for x in fractions]
    ys = [float(y) for y in faith]
    if len(xs) != len(ys) or len(xs) < 2:
        raise IntervError(
            f"fractions and faithfulness values must pair up, at least two of each; got "
            f"{len(xs)} and {len(ys)}"
        )
    if any(b <= a for a, b in itertools.pairwise(xs)):
        raise IntervError(f"fractions must increase; got {xs}")
    return xs, ys


def cpr(fractions: Sequence[float], faith: Sequence[float]) -> float:
    """Circuit performance ratio: the trapezoid area under the faithfulness curve over the
    (linear) fraction axis, as MIB's circuit track computes it (higher is better)."""
    xs, ys = _check_curve(fractions, faith)
    return _area(xs, ys)


def cmd(fractions: Sequence[float], faith: Sequence[float]) -> float:
    """Circuit-model difference: the trapezoid area of ``|1 - f|`` over the (linear)
    fraction axis, as MIB's circuit track computes it (lower is better)."""
    xs, ys = _check_curve(fractions, faith)
    return _area(xs, [abs(1.0 - y) for y in ys])


@dataclass(frozen=True, eq=False)
class FaithfulnessCurve:
    """Faithfulness of the circuits at each fraction (exact: every edge outside patched);
    the circuits are the top edges of the ranking, or grown greedily (``greedy``).

    Attributes:
        fractions: edge fractions evaluated.
        n_edges_kept: circuit size at each fraction.
        per_prompt: ``[n_fractions, n_prompts]`` float64 per-prompt faithfulness (NaN where
            a prompt's full and empty metrics are equal).
        mean: faithfulness of the prompt-mean metric at each fraction (circuits by |value|).
        low, high: its percentile bootstrap interval over prompts (``level``).
        signed_mean: the same for circuits by signed value (for CPR).
        m_full, m_empty: prompt-mean metric of the clean run and with every edge patched.
        cpr, cmd: MIB's areas (CPR from ``signed_mean``, CMD from ``mean``).
        cpr_interval, cmd_interval: their bootstrap intervals.
        complement: ``"corrupted"`` or ``"mean"``.
        greedy: whether the circuits were grown greedily from the logits (else top edges).
        sentence: what the numbers are, in one sentence.
        fingerprint: the curve's fingerprint (:func:`~interv.provenance.run_fingerprint` of
            the provenance and the curve's settings).
        provenance: the model (name, weights, dtype), the prompts and pairs evaluated and
            the metric (:class:`~interv.provenance.Provenance`).
        ranking: the provenance of the ranking the circuits came from (a
            :class:`CircuitResult`'s or :class:`EdgeScores`'), None for a given edge order;
            a report joins the curve with its circuit through it.
        convention: ``"interv"`` or ``"mib"`` (:mod:`interv.circuits.mib`).
        n_edges_pruned: MIB's convention: the edges left after pruning, per fraction, of
            the circuits by absolute and by signed value (None: nothing pruned).
    """

    fractions: tuple[float, ...]
    n_edges_kept: list[int]
    per_prompt: torch.Tensor
    mean: list[float]
    low: list[float]
    high: list[float]
    signed_mean: list[float]
    m_full: float
    m_empty: float
    cpr: float
    cmd: float
    cpr_interval: tuple[float, float]
    cmd_interval: tuple[float, float]
    complement: str
    sentence: str
    fingerprint: str
    provenance: Provenance
    ranking: Provenance | None
    greedy: bool = False
    convention: str = "interv"
    n_edges_pruned: tuple[list[int], list[int]] | None = None

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready data (format ``interv.faithfulness/1``)."""

        def clean(values: Sequence[float]) -> list[float | None]:
            return [None if math.isnan(v) else float(v) for v in values]

        return {
            "format": FORMAT,
            "fingerprint": self.fingerprint,
            "fractions": list(self.fractions),
            "n_edges_kept": list(self.n_edges_kept),
            "per_prompt": [clean(row) for row in self.per_prompt.tolist()],
            "mean": clean(self.mean),
            "low": clean(self.low),
            "high": clean(self.high),
            "signed_mean": clean(self.signed_mean),
            "m_full": self.m_full,
            "m_empty": self.m_empty,
            "cpr": self.cpr,
            "cmd": self.cmd,
            "cpr_interval": clean(self.cpr_interval),
            "cmd_interval": clean(self.cmd_interval),
            "complement": self.complement,
            "greedy": self.greedy,
            "convention": self.convention,
            "n_edges_pruned": None if self.n_edges_pruned is None else list(self.n_edges_pruned),
            "sentence": self.sentence,
            "provenance": self.provenance.to_dict(),
            "ranking": None if self.ranking is None else self.ranking.to_dict(),
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> FaithfulnessCurve:
        """The curve :meth:`to_dict` wrote, read through its schema
        (:class:`~interv.circuits._stored.StoredCurve`: a damaged field is named)."""
        stored = parse(StoredCurve, data, "faithfulness curve")
        return cls(
            fractions=tuple(stored.fractions),
            n_edges_kept=list(stored.n_edges_kept),
            per_prompt=torch.tensor(stored.per_prompt, dtype=torch.float64),
            mean=stored.mean,
            low=stored.low,
            high=stored.high,
            signed_mean=stored.signed_mean,
            m_full=stored.m_full,
            m_empty=stored.m_empty,
            cpr=stored.cpr,
            cmd=stored.cmd,
            cpr_interval=stored.cpr_interval,
            cmd_interval=stored.cmd_interval,
            complement=stored.complement,
            sentence=stored.sentence,
            fingerprint=stored.fingerprint,
            provenance=stored.provenance,
            ranking=stored.ranking,
            greedy=stored.greedy,
            convention=stored.convention,
            n_edges_pruned=None if stored.n_edges_pruned is None else tuple(stored.n_edges_pruned),  # type: ignore[arg-type]
        )

    def to_pandas(self) -> Any:
        """One row per fraction: fraction, n_edges_kept, faithfulness, low, high, signed."""
        pd = require_pandas()
        return pd.DataFrame(
            {
                "fraction": list(self.fractions),
                "n_edges_kept": list(self.n_edges_kept),
                "faithfulness": self.mean,
                "low": self.low,
                "high": self.high,
                "faithfulness_signed": self.signed_mean,
            }
        )

    def __repr__(self) -> str:
        return (
            f"FaithfulnessCurve({len(self.fractions)} fractions, complement {self.complement}, "
            f"CPR {self.cpr:.3g}, CMD {self.cmd:.3g})"
        )


def _rankings(
    ranking: Any, graph: Graph, convention: str = "interv", selection: bool = True
) -> tuple[torch.Tensor, torch.Tensor, str]:
    """(edge order by |value|, edge order by signed value, what the values are).

    Signed: the most helpful edges first, in MIB's sign (:func:`mib_scores`: a noising
    effect's most negative, a denoising effect's most positive). Under ``convention="mib"``
    a ranking with values is ordered exactly as MIB orders the file interv writes for it
    (:func:`mib_order` of :func:`mib_scores`): a CircuitResult by its values alone, not
    checked edges first. Otherwise a CircuitResult carrying a stability selection
    (``selection``) puts its selected edges first in both orders (by inclusion frequency,
    :attr:`~interv.circuits.StableCircuit.selected`), then the rest in the result's."""
    if isinstance(ranking, CircuitResult | EdgeScores | MIBCircuit):
        scores = mib_scores(ranking)
        signed = mib_order(scores, absolute=False)
        absolute = mib_order(scores, absolute=True)
        if isinstance(ranking, CircuitResult):
            chosen = ranking.selection if selection else None
            if convention == "mib":
                what = "the circuit result's values (exact where checked), by value alone as MIB"
                what += " ranks the file interv writes"
                if chosen is not None:
                    what += " (not the stability selection's order: MIB ranks the values)"
                return absolute, signed, what
            what = "the circuit result's values (exact where checked)"
            if chosen is None:
                return ranking.ranking(), signed, what
            first = torch.tensor(chosen.selected, dtype=torch.long)
            return (
                _first(first, ranking.ranking()),
                _first(first, signed),
                f"the stability selection's {first.numel()} edges first (by inclusion "
                f"frequency, pi {chosen.pi:g}), then {what}",
            )
        if isinstance(ranking, EdgeScores):
            return absolute, signed, f"{ranking.method} estimates"
        return absolute, signed, f"the MIB importance scores of {ranking.source}"
    if isinstance(ranking, str) or not isinstance(ranking, Sequence):
        raise IntervError(
            "ranking must be a CircuitResult, EdgeScores, a MIBCircuit or a sequence of edges "
            f"(labels, Edge objects or indices), best first; got {type(ranking).__name__}"
        )
    order = torch.tensor(graph.indices(ranking), dtype=torch.long)
    listed = torch.zeros(graph.n_edges, dtype=torch.bool)
    listed[order] = True
    if int(listed.sum()) != order.numel():
        raise IntervError("ranking must not repeat an edge")
    full = torch.cat([order, (~listed).nonzero().flatten()])  # the rest in canonical order
    return full, full, "the given edge order"


def _first(first: torch.Tensor, order: torch.Tensor) -> torch.Tensor:
    """``order`` (every edge index) with the edges ``first`` moved to its front, in their
    given order; the rest keep theirs."""
    rest = torch.ones(order.numel(), dtype=torch.bool)
    rest[first] = False
    return torch.cat([first, order[rest[order]]])


def _check_mib_width(ranking: Any, d_model: int) -> None:
    """A MIB circuit file's ``cfg.d_model`` must be the model's width."""
    files = ranking if isinstance(ranking, Sequence) and not isinstance(ranking, str) else [ranking]
    for circuit in files:
        if isinstance(circuit, MIBCircuit) and circuit.d_model != d_model:
            raise IntervError(
                f"{circuit.source} is for another model: cfg d_model {circuit.d_model}, the "
                f"model's is {d_model}"
            )


def _curve_masks(
    ranking: Any,
    graph: Graph,
    fractions: Sequence[float],
    sizes: list[int],
    convention: str,
    greedy: bool,
    selection: bool = True,
) -> tuple[list[torch.Tensor], list[int], str, str, bool]:
    """The circuits a curve evaluates: ``2 x len(fractions)`` ``[n_edges]`` masks (by
    absolute value, then by signed value), pruned under ``convention="mib"``; the sizes;
    what ranked them; the ties clause (MIB's convention); whether they were given."""
    given = _given_circuits(ranking, graph, fractions, sizes, greedy)
    masks = []
    if given is not None:  # one circuit per fraction (MIB's binary-circuit submission)
        for _ in range(2):  # no sign: the same circuits for CMD and for CPR
            masks += [prune(graph, c) if convention == "mib" else c for c in given]
        what = "the given circuits (one per fraction, no ranking)"
        return masks, [int(c.sum()) for c in given], what, "", True
    if isinstance(ranking, MIBCircuit) and ranking.graph.n_edges != graph.n_edges:
        raise IntervError(
            f"{ranking.source} is read against a graph of {ranking.graph.n_edges} edges; the "
            f"model's has {graph.n_edges}"
        )
    absolute, signed, what = _rankings(ranking, graph, convention, selection)
    ties = ""
    if convention == "mib" and isinstance(ranking, CircuitResult | EdgeScores | MIBCircuit):
        ties = tie_note(mib_scores(ranking), fractions, sizes)
    if greedy:
        absolute, signed = _greedy(graph, absolute), _greedy(graph, signed)
    for order in (absolute, signed):
        for size in sizes:
            mask = torch.zeros(graph.n_edges, dtype=torch.bool)
            mask[order[:size]] = True
            masks.append(prune(graph, mask) if convention == "mib" else mask)
    return masks, sizes, what, ties, False


def _given_circuits(
    ranking: Any,
    graph: Graph,
    fractions: Sequence[float],
    sizes: Sequence[int],
    greedy: bool,
) -> list[torch.Tensor] | None:
    """The circuits of a list of score-less :class:`MIBCircuit` (MIB's binary-circuit
    submission: one circuit per fraction, the last, 100 %, may be left out: the full graph),
    checked against the fractions; None for a ranking."""
    if not (
        isinstance(ranking, Sequence)
        and not isinstance(ranking, str)
        and len(ranking) > 0
        and all(isinstance(c, MIBCircuit) for c in ranking)
    ):
        return None
    if greedy:
        raise IntervError("greedy=True grows circuits from a ranking; given circuits are fixed")
    circuits = [c.in_graph for c in ranking]
    if len(circuits) == len(fractions) - 1 and fractions[-1] == 1.0:
        circuits.append(torch.ones(graph.n_edges, dtype=torch.bool))
    if len(circuits) != len(fractions):
        raise IntervError(
            f"{len(ranking)} circuits for {len(fractions)} fractions {list(fractions)}: give "
            "one circuit per fraction (the 100 % one may be left out)"
        )
    for circuit, fraction, size in zip(ranking, fractions, sizes, strict=False):
        if circuit.graph.n_edges != graph.n_edges:
            raise IntervError(
                f"{circuit.source} is read against a graph of {circuit.graph.n_edges} edges; "
                f"the model's has {graph.n_edges}"
            )
        if int(circuit.in_graph.sum()) > size:
            raise IntervError(
                f"{circuit.source} holds {int(circuit.in_graph.sum())} edges, more than the "
                f"{size} of fraction {fraction} ({graph.n_edges} edges); give the circuits in "
                "fraction order, each within its size"
            )
    return circuits


def _greedy(graph: Graph, order: torch.Tensor) -> torch.Tensor:
    """The greedy order of a ranking (best first): its rank is the priority."""
    priority = torch.empty(graph.n_edges, dtype=torch.float64)
    priority[order] = -torch.arange(graph.n_edges, dtype=torch.float64)
    return greedy_order(graph, priority)


def _sizes(fractions: Sequence[float], n_edges: int, convention: str) -> list[int]:
    """Circuit sizes at ``fractions`` (checked: at least two, increasing, in (0, 1]):
    ``max(1, round(p N))`` (interv) or ``int(p N)`` (MIB)."""
    if len(fractions) < 2:
        raise IntervError(
            f"a faithfulness curve needs at least two fractions (CPR and CMD are areas under "
            f"it); got {list(fractions)}"
        )
    for fraction in fractions:
        if isinstance(fraction, bool) or not isinstance(fraction, int | float):
            raise IntervError(f"fractions must be numbers in (0, 1]; got {fraction!r}")
        if not 0 < fraction <= 1:
            raise IntervError(
                f"fraction {fraction} is beyond the graph: fractions must lie in (0, 1] "
                f"(1 = all {n_edges} edges)"
            )
    if any(b <= a for a, b in itertools.pairwise(fractions)):
        raise IntervError(f"fractions must increase; got {list(fractions)}")
    if convention == "mib":
        return mib_sizes(fractions, n_edges)
    return [max(1, round(fraction * n_edges)) for fraction in fractions]


@compares(*_RANKING_MAY_DIFFER)
def faithfulness(
    model: Any,
    task: TokenizedPairs,
    ranking: CircuitResult
    | EdgeScores
    | MIBCircuit
    | Sequence[MIBCircuit]
    | Sequence[Edge | str | int],
    *,
    fractions: Sequence[float] = MIB_FRACTIONS,
    complement: str = "corrupted",
    greedy: bool = False,
    convention: str = "interv",
    metric: str | TargetMetric = "logit_diff",
    n_bootstrap: int = 1000,
    level: float = 0.95,
    seed: int = 0,
    batch_size: int | None = None,
    kv: str | None = None,
    executor: RayExecutor | None = None,
    selection: bool = True,
    resume: Callable[[dict[str, Any]], Kept] | None = None,
) -> FaithfulnessCurve:
    """The faithfulness curve of the top edges of ``ranking`` (see the module docstring).

    Args:
        model: a transformer-lens bridge in eval mode.
        task: clean/corrupted prompt pairs of equal token lengths.
        ranking: a :class:`CircuitResult` (exact values where checked), :class:`EdgeScores`,
            a scored :class:`MIBCircuit`, edges best first, or score-less MIBCircuits, one
            per fraction (MIB's binary-circuit submission; the 100 % one may be left out),
            each evaluated as given (pruned under ``convention="mib"``) for CMD and CPR.
        fractions: increasing edge fractions in (0, 1].
        complement: ``"corrupted"`` or ``"mean"``.
        greedy: False (default): each circuit is the top ``n`` edges of the ranking; True:
            the greedy circuit of ``n`` edges (:func:`interv.circuits.greedy.greedy_order`:
            grown from the logits, each step the best-ranked edge whose receiver already
            reaches the logits). Evaluated the same way either way.
        convention: ``"interv"`` (default: ``max(1, round(p N))`` edges, no pruning) or
            ``"mib"`` (MIB's ``evaluate_area_under_curve``: ``int(p N)`` edges, pruned to
            those connecting the input to the logits; :mod:`interv.circuits.mib`). ``N`` is
            the graph's edge count either way: on a grouped-query model interv's graph
            groups key/value edges and MIB's does not, so its numbers are not MIB's there.
        metric: a metric name or TargetMetric.
        n_bootstrap, level, seed: the bootstrap over prompts.
        batch_size: circuits (copies of the prompts) per stacked forward; None: about
            2 MiB of sender changes per forward (at least one circuit).
        executor: None (this process) or a :class:`~interv.circuits.RayExecutor`: the
            circuits' stacked forwards spread over its workers, each ``min(batch_size,
            ceil(circuits / n_workers))`` circuits (:mod:`interv.circuits.executor`).
        kv: the graph's key/value edges, ``"grouped"`` or ``"ungrouped"`` (MIB's graph:
            ``N`` is then MIB's); None (default): the ranking's own graph's, grouped for a
            list of edges.
        selection: with a :class:`CircuitResult` of a stability selection
            (``discover(select="stability")``, :attr:`CircuitResult.selection`): True
            (default) ranks its selected edges first (by inclusion frequency; in the signed
            order for CPR too), then the result's ranking, so the curve is the reported
            circuit's; False: the result's ranking alone. Under ``convention="mib"`` the
            result's values alone either way (MIB ranks the file interv writes by its values).
        resume: a resumable run's store of the curve's circuits (e.g. a circuit
            directory's ``CircuitStore.curve_resume``, :mod:`interv.circuits.store`): called
            once with the curve's key (its fingerprint and settings, and the SHA-256 of its
            circuits' edges: :class:`~interv.circuits._stored.CurveKey`), it returns the
            per-prompt metric of the circuits an interrupted run of this curve evaluated
            (reused, not evaluated again) and where each job's go as it returns. The others
            are evaluated in jobs of ``batch_size`` circuits in order: a kill stores whole
            jobs, so with the same ``batch_size`` (and executor) they are the uninterrupted
            run's own jobs, and the curve equals it.

    Returns:
        :class:`FaithfulnessCurve`.
    """
    target = check_task(model, task, metric)
    if complement not in COMPLEMENTS:
        raise IntervError(f"unknown complement {complement!r}; choose one of {COMPLEMENTS}")
    writes = Writes.of(model)
    if complement == "mean" and not writes.linear_heads:
        writes.arch.refuse(
            "the heads' writes pass the post-attention norm, so a mean complement (the norm of "
            "mean head outputs is not the mean of the writes) is not defined",
            hint="use complement='corrupted'",
        )
    if not isinstance(greedy, bool):
        raise IntervError(f"greedy must be True or False; got {greedy!r}")
    if not isinstance(selection, bool):
        raise IntervError(f"selection must be True or False; got {selection!r}")
    if convention not in CONVENTIONS:
        raise IntervError(f"unknown convention {convention!r}; choose one of {CONVENTIONS}")
    fractions = tuple(fractions)
    first = ranking[0] if isinstance(ranking, list | tuple) and ranking else None
    own = getattr(getattr(ranking, "graph", getattr(first, "graph", None)), "kv", None)
    executor = check_executor(executor)
    kv = (own or "grouped") if kv is None else kv  # the ranking's own graph says
    graph = Graph.from_model(model, kv=kv)
    if own is not None and own != kv:
        raise IntervError(
            f"kv={kv!r}, but the ranking scores the graph with kv={own!r}; pass kv={own!r} or None"
        )
    _check_mib_width(ranking, int(model.cfg.d_model))
    sizes = _sizes(fractions, graph.n_edges, convention)
    provenance = Provenance.of(model, task, metric=target.name)
    ranked_from = None
    if isinstance(ranking, CircuitResult | EdgeScores):
        ranked_from = ranking.provenance
        join(
            provenance,
            ranked_from,
            what=("the model", "the ranking"),
            across=_RANKING_MAY_DIFFER,
        )
    selected = (
        selection
        and convention == "interv"
        and isinstance(ranking, CircuitResult)
        and ranking.selection is not None
    )
    masks, sizes, what, ties, given = _curve_masks(
        ranking, graph, fractions, sizes, convention, greedy, selection
    )
    masks.append(torch.zeros(graph.n_edges, dtype=torch.bool))  # the empty circuit
    kept = torch.stack(masks)
    n_frac = len(fractions)
    counts = kept.sum(-1).tolist()
    pruned = (counts[:n_frac], counts[n_frac:-1]) if convention == "mib" else None
    clean_logits = _clean_answer_logits(model, task)
    fingerprint = run_fingerprint(
        provenance,
        {
            "kind": "faithfulness",
            "complement": complement,
            "fractions": [float(f) for f in fractions],
            "greedy": greedy,
            "convention": convention,
            **({"selection": "stability"} if selected else {}),
        },
    )
    stored: Kept | None = None
    if resume is not None:
        key = {
            "fingerprint": fingerprint,
            "order": hashlib.sha256(kept.numpy().tobytes()).hexdigest(),
            "n_circuits": int(kept.shape[0]),
            "n_prompts": task.n_pairs,
            "fractions": [float(f) for f in fractions],
            "complement": complement,
            "convention": convention,
            "greedy": greedy,
            "selection": selected,
        }
        stored = resume(key)
    values = _curve_values(
        model, task, graph, target, complement, kept, batch_size, executor, stored, clean_logits
    )
    full = per_prompt_metric(target, task, clean_logits, clean_logits)[0].double().cpu()
    absolute_values, signed_values, empty = values[:n_frac], values[n_frac:-1], values[-1]
    gap = full - empty
    with torch.no_grad():
        per_prompt = (absolute_values - empty) / gap
    per_prompt = torch.where(gap.abs() > 0, per_prompt, torch.nan)

    def ratio(rows: torch.Tensor) -> torch.Tensor:
        return (rows.mean(-1) - empty.mean()) / (full.mean() - empty.mean())

    if float(gap.mean().abs()) == 0.0:
        raise IntervError(
            "the clean run and the empty circuit give the same prompt-mean metric, so "
            "faithfulness is undefined; choose prompt pairs the metric separates"
        )
    mean = ratio(absolute_values).tolist()
    signed_mean = ratio(signed_values).tolist()
    draws = bootstrap_indices(task.n_pairs, n_bootstrap, seed)  # [B, n]
    boot_abs = _boot_ratio(absolute_values, empty, full, draws)  # [B, n_frac]
    boot_signed = _boot_ratio(signed_values, empty, full, draws)
    low, high = [], []
    for j in range(n_frac):
        a, b = percentile_interval(boot_abs[:, j], level, n_items=task.n_pairs)
        low.append(a)
        high.append(b)
    boot_cpr = torch.tensor([cpr(fractions, row.tolist()) for row in boot_signed])
    boot_cmd = torch.tensor([cmd(fractions, row.tolist()) for row in boot_abs])
    source = (
        "the corrupted run"
        if complement == "corrupted"
        else "the mean of the corrupted runs (per position)"
    )
    construction = (
        "greedy circuits (grown from the logits: each step the best-ranked edge whose "
        "receiver already reaches the logits) of"
        if greedy
        else "circuits of"
        if given
        else "circuits of the top"
    )
    sentence = (
        f"faithfulness (m(C) - m(empty)) / (m(full) - m(empty)) of the prompt-mean "
        f"{target.definition}, over {task.n_pairs} prompt pairs of {task.name}: "
        f"{construction} {sizes[0]}..{sizes[-1]} of {graph.n_edges} edges by {what}, every "
        f"other edge's sender patched from {source} (exact), the rest of the clean run "
        f"live; intervals: {level:.0%} percentile bootstrap over prompts ({n_bootstrap} "
        f"resamples, seed {seed}); "
        "CPR from circuits by signed value, CMD by absolute value"
    )
    if convention == "mib":
        chosen = "the given circuits" if given else f"int(fraction x {graph.n_edges}) edges"
        sentence += (
            f"; MIB's convention: {chosen}"
            ", then pruned to those connecting the input to the logits (as MIB's "
            "evaluate_area_under_curve)"
        )
        sentence += ties
        if any(receiver.node.kv for receiver in graph.receivers):  # not MIB's shape
            sentence += (
                f"; edges counted on interv's grouped graph (key/value edges per key/value "
                f"head), MIB counts {mib_edge_count(graph)}: not leaderboard-comparable"
            )
    return FaithfulnessCurve(
        fractions=fractions,
        n_edges_kept=sizes,
        per_prompt=per_prompt,
        mean=mean,
        low=low,
        high=high,
        signed_mean=signed_mean,
        m_full=float(full.mean()),
        m_empty=float(empty.mean()),
        cpr=cpr(fractions, signed_mean),
        cmd=cmd(fractions, mean),
        cpr_interval=percentile_interval(boot_cpr, level, n_items=task.n_pairs),
        cmd_interval=percentile_interval(boot_cmd, level, n_items=task.n_pairs),
        complement=complement,
        sentence=sentence,
        fingerprint=fingerprint,
        provenance=provenance,
        ranking=ranked_from,
        greedy=greedy,
        convention=convention,
        n_edges_pruned=pruned,
    )


def _curve_values(
    model: Any,
    task: TokenizedPairs,
    graph: Graph,
    target: TargetMetric,
    complement: str,
    kept: torch.Tensor,
    batch_size: int | None,
    executor: RayExecutor | None,
    stored: Kept | None,
    clean_logits: torch.Tensor,
) -> torch.Tensor:
    """``[n_circuits, n_prompts]`` metric of the circuits ``kept``: those ``stored`` by an
    interrupted run as they are, the others in jobs of ``batch_size`` circuits in order (on
    the executor: ``min(batch_size, ceil(n_circuits / n_workers))``), each one stacked
    forward, handed to ``stored.keep`` as it returns."""
    n_circuits = kept.shape[0]
    values = torch.empty(n_circuits, task.n_pairs, dtype=torch.float64)
    done = {} if stored is None else dict(stored.stored)
    for circuit, row in done.items():
        row = torch.as_tensor(row, dtype=torch.float64).flatten()
        if not 0 <= circuit < n_circuits or row.numel() != task.n_pairs:
            raise IntervError(
                f"stored values of circuit {circuit} ({row.numel()} prompts) do not fit this "
                f"curve's {n_circuits} circuits of {task.n_pairs} prompt pairs"
            )
        values[circuit] = row
    if batch_size is None:
        batch_size = _default_circuits(model, task, graph)
    if executor is not None:  # the circuits spread over the workers, each one job
        batch_size = min(batch_size, -(-n_circuits // executor.n_workers))
    todo = [circuit for circuit in range(n_circuits) if circuit not in done]
    chunks = [todo[first : first + batch_size] for first in range(0, len(todo), batch_size)]
    jobs = [kept[chunk] for chunk in chunks]
    here = clean_logits if executor is None else None  # the workers compute their own
    shared = (task, graph, target, complement, batch_size, here)
    for position, rows in run_jobs(executor, model, _curve_job, shared, jobs):
        values[chunks[position]] = rows
        if stored is not None:
            stored.keep(chunks[position], rows)
    return values


def _boot_ratio(
    rows: torch.Tensor, empty: torch.Tensor, full: torch.Tensor, draws: torch.Tensor
) -> torch.Tensor:
    """``[B, n_rows]`` faithfulness of the prompt means of each bootstrap resample."""
    r = rows[:, draws].mean(-1)  # [n_rows, B]
    e = empty[draws].mean(-1)  # [B]
    f = full[draws].mean(-1)
    return ((r - e) / (f - e)).T


def _mean_run(run: Run, task: TokenizedPairs) -> Run:
    """The position-wise mean over prompts of every captured activation, broadcast back."""

    def mean(t: torch.Tensor) -> torch.Tensor:
        return t.mean(0, keepdim=True).expand_as(t).contiguous()

    return Run(
        resid_pre=[mean(t) for t in run.resid_pre],
        mlp_in=[mean(t) for t in run.mlp_in],
        z=[mean(t) for t in run.z],
        mlp_out=[mean(t) for t in run.mlp_out],
        final=mean(run.final),
        logits=run.logits,
        prefix=None,
    )


def _clean_answer_logits(model: Any, task: TokenizedPairs) -> torch.Tensor:
    """The clean run's logits at the answer positions (no activations kept)."""
    return forward(
        model,
        Prompts.of(task.clean_tokens, task.attention_mask),
        readout="position_logits",
        positions=task.answer_positions,
    ).readout


def _curve_job(model: Any, shared: tuple, kept: torch.Tensor, cache: dict) -> torch.Tensor:
    """``[n_circuits, n_prompts]``: :func:`circuit_metrics` of the circuits ``kept`` (one
    executor job, or the whole local run); the clean logits and the complement's replacement
    run computed on a process's first job and kept in ``cache``."""
    task, graph, target, complement, batch_size, clean_logits = shared
    if "runs" not in cache:
        if clean_logits is None:
            clean_logits = _clean_answer_logits(model, task)
        corrupted = capture_run(model, task, "corrupted")
        replacement = corrupted if complement == "corrupted" else _mean_run(corrupted, task)
        del corrupted
        cache["runs"] = (clean_logits, replacement)
    clean_logits, replacement = cache["runs"]
    return circuit_metrics(model, task, graph, kept, replacement, target, clean_logits, batch_size)


def _default_circuits(model: Any, task: TokenizedPairs, graph: Graph) -> int:
    """Circuits per stacked forward by default: about 2 MiB of inputs per block."""
    per_copy = task.n_pairs * task.n_positions * len(graph.senders) * model.cfg.d_model * 4
    return max(1, (2 << 20) // max(per_copy, 1))


def circuit_metrics(
    model: Any,
    task: TokenizedPairs,
    graph: Graph,
    kept: torch.Tensor,
    replacement: Run,
    metric: TargetMetric,
    clean_logits: torch.Tensor,
    batch_size: int | None = None,
) -> torch.Tensor:
    """``[n_circuits, n_prompts]`` float64 metric of the clean prompts with every edge outside
    each circuit (``kept``: ``[n_circuits, n_edges]`` bool) patched from ``replacement``."""
    n = task.n_pairs
    if batch_size is None:
        batch_size = _default_circuits(model, task, graph)
    out = torch.empty(kept.shape[0], n, dtype=torch.float64)
    with torch.no_grad():
        for first in range(0, kept.shape[0], batch_size):
            chunk = kept[first : first + batch_size]
            logits = _circuit_forward(model, task, graph, chunk, replacement)
            out[first : first + chunk.shape[0]] = (
                per_prompt_metric(metric, task, logits, clean_logits).double().cpu()
            )
    return out


def _circuit_forward(
    model: Any, task: TokenizedPairs, graph: Graph, kept: torch.Tensor, repl: Run
) -> torch.Tensor:
    """One stacked forward, one copy of the clean prompts per circuit (see the module).

    A head's write passes its block's post-attention norm in some families (Gemma-2/3,
    OLMo-2/3): there a reader's input gets, per earlier block, the change of that block's
    attention write with the reader's kept heads live and the others from the complement
    (:meth:`~interv.engine.writes.Writes.mixed_attention_writes`), not a sum of per-head
    changes; with every edge kept the input is the live one, with none the complement's."""
    writes = Writes.of(model)
    linear = writes.linear_heads
    copies = kept.shape[0]
    n = task.n_pairs
    rows = copies * n
    device = repl.final.device
    dtype = repl.final.dtype
    n_senders = len(graph.senders)

    def rep(t: torch.Tensor) -> torch.Tensor:
        return t.repeat(copies, *([1] * (t.ndim - 1)))

    clean_tokens = Prompts.of(task.clean_tokens, task.attention_mask).repeat(copies)
    positions = task.answer_positions.repeat(copies)
    deltas = torch.zeros(
        rows, task.n_positions, n_senders, model.cfg.d_model, dtype=dtype, device=device
    )
    kept = kept.cpu()
    live_inputs: dict[Site, torch.Tensor] = {}
    live_z: dict[int, torch.Tensor] = {}
    inside: list[bool] = []
    receivers = graph.receivers
    by_layer: dict[int, list[Any]] = {}
    for receiver in receivers:
        key = -1 if receiver.input == "logits" else receiver.node.layer
        by_layer.setdefault(key, []).append(receiver)

    def inputs_of(
        group: list[Any], n_used: int, replaced: torch.Tensor, live: torch.Tensor, head_layers: int
    ) -> torch.Tensor:
        """``[rows, pos, readers, d_model]``: each reader's rebuilt input. The readers of a
        group read the same senders and their edges are contiguous; per copy the sum runs
        over the kept senders (``replaced + sum kept deltas``) or, when most are kept, over
        the others (``live - sum patched deltas``). Few (reader, sender) pairs: gathered and
        index-added; more: one ``[readers, senders] @ deltas`` matmul per copy (no gathered
        copies of the deltas). Heads behind a post-attention norm (their ``deltas`` stay 0):
        per copy, the mixed attention writes of blocks ``0..head_layers - 1`` are added."""
        readers = len(group)
        first = group[0].start
        block = kept[:, first : first + readers * n_used].view(copies, readers, n_used)
        out = torch.empty(
            rows, replaced.shape[1], readers, replaced.shape[2], dtype=dtype, device=device
        )
        for copy in range(copies):
            part = slice(copy * n, (copy + 1) * n)
            chosen = block[copy]
            target = out[part]
            if not linear:
                target.copy_(_mixed_heads(chosen, head_layers, part).to(dtype))
                target.add_(replaced[part].unsqueeze(2))
                start, sign = None, 1.0
            elif int(chosen.sum()) * 2 > chosen.numel():
                start, sign, chosen = live[part], -1.0, ~chosen
            else:
                start, sign = replaced[part], 1.0
            if start is not None:
                target.copy_(start.unsqueeze(2).expand_as(target))
            count = int(chosen.sum())
            if count * 16 > chosen.numel():
                weights = chosen.to(device=device, dtype=dtype)
                # [readers, senders] @ [n, pos, senders, d_model] -> [n, pos, readers, d_model]
                target.add_(torch.matmul(weights, deltas[part, :, :n_used]), alpha=sign)
                continue
            reader_index, sender_index = chosen.nonzero(as_tuple=True)
            reader_index, sender_index = reader_index.to(device), sender_index.to(device)
            # gathered in pieces of about 16 MiB: (reader, sender) pairs can be many
            step = max(1, (16 << 20) // (n * replaced.shape[1] * replaced.shape[2] * 4))
            for low in range(0, reader_index.numel(), step):
                senders = sender_index[low : low + step]
                picked = deltas[part][:, :, senders]
                target.index_add_(2, reader_index[low : low + step], picked, alpha=sign)
        return out

    def _mixed_heads(chosen: torch.Tensor, head_layers: int, part: slice) -> torch.Tensor:
        """``[n, pos, readers, d_model]``: the sum over blocks ``0..head_layers - 1`` of the
        change of each block's attention write with the reader's kept heads live."""
        total = torch.zeros(n, task.n_positions, chosen.shape[0], model.cfg.d_model, device=device)
        for layer in range(head_layers):
            first_head = graph.n_senders_before(layer)
            keep = chosen[:, first_head : first_head + graph.n_heads].to(device)
            if bool(keep.any()):
                total += writes.mixed_attention_writes(
                    layer, repl.z[layer], live_z[layer][part], keep
                ).to(total)
        return total

    def embed_hook(activation: torch.Tensor, hook: Any) -> None:
        deltas[:, :, 0] = activation - rep(repl.resid_pre[0])

    def component_inputs(component: str, layer: int) -> torch.Tensor:
        """The query, key or value of every head of ``layer`` from its rebuilt inputs, one
        component at a time (a third of the readers' inputs and norm temporaries alive)."""
        group = [r for r in by_layer[layer] if r.input == component]
        used = graph.n_senders_before(layer)
        inputs = inputs_of(
            group,
            used,
            rep(repl.resid_pre[layer]),
            live_inputs[Site("resid_pre", layer)],
            layer,
        )
        normed = writes.attention_input(layer, inputs)
        del inputs
        weight = reader_weights(model, graph, layer, component).to(normed)
        value = torch.einsum("bprd,rdk->bprk", normed, weight)
        bias = getattr(model.blocks[layer].attn, f"b_{component.upper()}", None)
        if bias is not None and bias.shape[0] != value.shape[2]:  # ungrouped: per query head
            bias = bias.repeat_interleave(value.shape[2] // bias.shape[0], dim=0)
        if bias is not None:
            value = value + bias.to(value)
        return value

    def qkv_hook(component: str, layer: int) -> Any:
        def hook(activation: torch.Tensor, hook: Any) -> torch.Tensor:
            return component_inputs(component, layer).to(activation)

        return hook

    def z_hook(layer: int) -> Any:
        def hook(activation: torch.Tensor, hook: Any) -> None:
            live_z[layer] = activation
            if linear:  # post-norm heads enter the readers' inputs per reader (inputs_of)
                start = graph.n_senders_before(layer)
                deltas[:, :, start : start + graph.n_heads] = writes.head_write_changes(
                    layer, rep(repl.z[layer]), activation
                )

        return hook

    def mlp_hook(layer: int) -> Any:
        def hook(activation: torch.Tensor, hook: Any) -> torch.Tensor | None:
            if inside:  # the MLP's own projections may carry this hook (OPT, BLOOM): skip
                return None
            group = [r for r in by_layer[layer] if r.input == "mlp"]
            heads = 0 if graph.parallel else graph.n_heads
            inputs = inputs_of(
                group,
                graph.n_senders_before(layer) + heads,
                rep(repl.mlp_in[layer]),
                live_inputs[Site(writes.mlp_reads, layer)],
                layer + (0 if graph.parallel else 1),
            )[:, :, 0]
            inside.append(True)
            try:
                new = writes.mlp_write(layer, inputs)  # the MLP's whole write
            finally:
                inside.pop()
            deltas[:, :, graph.n_senders_before(layer) + graph.n_heads] = new - rep(
                repl.mlp_out[layer]
            )
            return new.to(activation)

        return hook

    def final_hook(activation: torch.Tensor, hook: Any) -> torch.Tensor:
        group = by_layer[-1]
        rebuilt = inputs_of(group, n_senders, rep(repl.final), activation, graph.n_layers)
        rebuilt = rebuilt[:, :, 0]
        return rebuilt.to(activation)

    def looker(site: Site) -> Any:
        def look(activation: torch.Tensor, hook: Any) -> None:
            live_inputs[site] = activation

        return look

    hooks: list[tuple[Site, Any]] = [(Site("resid_pre", 0), embed_hook)]
    for layer in range(graph.n_layers):
        hooks.append((Site("resid_pre", layer), looker(Site("resid_pre", layer))))
        if graph.has_mlp and writes.mlp_reads != "resid_pre":
            hooks.append((Site(writes.mlp_reads, layer), looker(Site(writes.mlp_reads, layer))))
        hooks += [
            (Site("q", layer), qkv_hook("q", layer)),
            (Site("k", layer), qkv_hook("k", layer)),
            (Site("v", layer), qkv_hook("v", layer)),
            (Site("z", layer), z_hook(layer)),
        ]
        if graph.has_mlp:
            hooks.append((Site("mlp_out", layer), mlp_hook(layer)))
    hooks.append((Site("final_resid"), final_hook))
    with copies_of(model, graph) as kv_hooks:  # ungrouped: per-query-head keys and values
        out = forward(
            model,
            clean_tokens,
            hooks=[*kv_hooks, *hooks],
            readout="position_logits",
            positions=positions,
            attention=PATTERN if graph.ungrouped else AUTO,
        )
    return out.readout
