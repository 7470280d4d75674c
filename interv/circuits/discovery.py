"""Circuit discovery: screen every edge, verify the top exactly, audit the rest.

>>> result = discover(model, task, method="eap-ig", screen=Screen(top_k=200, audit=200))
>>> result.status[:3]        # "exact (verified)", "exact (audit)" or "estimated"
>>> result.circuit(50)       # the 50 strongest edges, exact values first
>>> discover(model, task, stability=200).stability   # the circuit on resampled prompts
>>> discover(model, task, select="stability", pi=0.8, resamples=200).selection  # stable edges

The screen (:func:`interv.circuits.edge_scores`) estimates every edge; the shared
:func:`interv.audit.verify_screen` patches the top ``top_k`` by ``|estimate|`` exactly
(:func:`interv.circuits.edge_effects`), audits a uniform random sample of the rest, bounds
the miss rate (Clopper-Pearson) and gives the rank agreement of screen and exact (Spearman
with a bootstrap interval). Each edge keeps its status; estimates and exact values are
never mixed silently.

Resume: ``known`` (edge index -> exact prompt-mean effect already computed, e.g. by an
interrupted run's ``on_exact``) is reused, never recomputed; pass the interrupted run's
``scores`` too so the ranking and the audit sample are the same.
"""

from __future__ import annotations

import dataclasses
import html
import math
from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch

from interv._pandas import require_pandas
from interv._schema import parse
from interv.audit import ESTIMATED, Audit, Screen, verify_screen
from interv.circuits._stored import StoredCircuit
from interv.circuits.executor import Kept, RayExecutor, check_executor
from interv.circuits.graph import Edge, Graph
from interv.circuits.greedy import greedy_order
from interv.circuits.patching import check_task, edge_effects
from interv.circuits.screens import EdgeScores, edge_scores
from interv.circuits.selection import (
    StableCircuit,
    check_connected,
    check_groups,
    check_pi,
    check_q,
    check_select,
    stability_selection,
)
from interv.circuits.stability import (
    CircuitStability,
    check_resamples,
    circuit_stability,
    exact_first,
)
from interv.engine.targets import TargetMetric
from interv.errors import IntervError
from interv.provenance import Provenance, join

if TYPE_CHECKING:
    from interv.tasks.tokenized import TokenizedPairs

__all__ = ["CircuitResult", "discover"]

FORMAT = "interv.circuit/1"


@dataclass(frozen=True, eq=False)
class CircuitResult:
    """A screened, verified and audited edge ranking.

    Attributes:
        graph: the model's graph.
        scores: the screen's :class:`~interv.circuits.EdgeScores` (estimates).
        audit: the verification and audit (:class:`interv.audit.Audit`), per edge in graph
            order: exact prompt-mean effects where checked (NaN elsewhere), statuses.
        fingerprint: the screen's fingerprint (model, prompts, settings).
        model_name, task_name: what was run.
        sentence: what the numbers are, in one sentence.
        stability: the circuit on bootstrap resamples of the prompts
            (:class:`~interv.circuits.CircuitStability`), when asked for.
        selection: the circuit chosen by stability selection
            (:class:`~interv.circuits.StableCircuit`), when asked for
            (``discover(..., select="stability")``).
    """

    graph: Graph
    scores: EdgeScores
    audit: Audit
    fingerprint: str
    model_name: str
    task_name: str
    sentence: str
    stability: CircuitStability | None = None
    selection: StableCircuit | None = None

    @property
    def provenance(self) -> Provenance:
        """The screen's provenance (model, prompts and pairs, metric, direction, settings):
        the exact effects were computed on the same model and prompts (:func:`discover`
        joins them)."""
        return self.scores.provenance

    @property
    def unit(self) -> str:
        """The metric's unit (of the scores and the exact effects)."""
        return self.scores.unit

    @property
    def status(self) -> tuple[str, ...]:
        """Per edge: ``"exact (verified)"``, ``"exact (audit)"`` or ``"estimated"``."""
        return self.audit.status

    @property
    def exact(self) -> torch.Tensor:
        """``[n_edges]`` exact prompt-mean effects where checked, NaN elsewhere."""
        return self.audit.exact

    @property
    def value(self) -> torch.Tensor:
        """``[n_edges]`` the exact effect where checked, the estimate elsewhere (read
        :attr:`status` beside it)."""
        return self.audit.value

    def ranking(self) -> torch.Tensor:
        """Every edge index: checked edges by descending ``|exact|``, then the estimated
        ones by descending ``|estimate|``."""
        return exact_first(self.audit.checked, self.exact, self.scores.scores)

    def circuit(self, n: int | None = None, *, greedy: bool = False) -> list[Edge]:
        """The top ``n`` edges (default ``top_k``) of :meth:`ranking` (exact first); with
        ``greedy`` the greedy circuit of ``n`` edges instead (grown from the logits, each
        step the best-ranked edge whose receiver already reaches the logits:
        :func:`interv.circuits.greedy.greedy_order`), in the order it grew."""
        n = self.audit.screen.top_k if n is None else n
        if isinstance(n, bool) or not isinstance(n, int) or not 1 <= n <= self.graph.n_edges:
            raise IntervError(
                f"n must be an int in 1..{self.graph.n_edges} (the graph's edges); got {n!r}"
            )
        if not isinstance(greedy, bool):
            raise IntervError(f"greedy must be True or False; got {greedy!r}")
        order = self.ranking()
        if greedy:
            priority = torch.empty(self.graph.n_edges, dtype=torch.float64)
            priority[order] = -torch.arange(self.graph.n_edges, dtype=torch.float64)
            order = greedy_order(self.graph, priority)
        return [self.graph.edges[i] for i in order[:n].tolist()]

    def heads(self, n: int | None = None) -> dict[str, float]:
        """Nodes of :meth:`circuit` (``n`` edges) -> the summed ``|value|`` of their edges
        (as sender or receiver), largest first."""
        totals: dict[str, float] = {}
        index = {edge: i for i, edge in enumerate(self.graph.edges)}
        values = self.value
        for edge in self.circuit(n):
            amount = abs(float(values[index[edge]]))
            for node in (edge.sender, edge.receiver):
                totals[node.label] = totals.get(node.label, 0.0) + amount
        return dict(sorted(totals.items(), key=lambda item: -item[1]))

    def to_pandas(self) -> Any:
        """One row per edge: edge, sender, receiver, input, score, exact, status, rank."""
        pd = require_pandas()
        rank = torch.empty(self.graph.n_edges, dtype=torch.long)
        rank[self.ranking()] = torch.arange(1, self.graph.n_edges + 1)
        edges = self.graph.edges
        exact = [None if math.isnan(v) else v for v in self.exact.tolist()]
        return pd.DataFrame(
            {
                "edge": [e.label for e in edges],
                "sender": [e.sender.label for e in edges],
                "receiver": [e.receiver.label for e in edges],
                "input": [e.input for e in edges],
                "score": self.scores.scores.tolist(),
                "exact": pd.array(exact, dtype="Float64"),
                "status": list(self.status),
                "rank": rank.tolist(),
            }
        )

    def to_dict(self, *, per_prompt: bool = False) -> dict[str, Any]:
        """JSON-ready data (format ``interv.circuit/1``); :meth:`from_dict` inverts it.

        The screen's per-prompt estimates are left out unless ``per_prompt`` (the prompt
        means, the exact values and the audit are always kept).
        """
        return {
            "format": FORMAT,
            "model": self.model_name,
            "task": self.task_name,
            "fingerprint": self.fingerprint,
            "method": self.scores.method,
            "steps": self.scores.steps,
            "qk_fix": self.scores.qk_fix,
            "metric": self.scores.metric,
            "edges": [e.label for e in self.graph.edges],
            "scores": self.scores.scores.tolist(),
            "exact": [None if math.isnan(v) else v for v in self.exact.tolist()],
            "status": list(self.status),
            "audit": self.audit.to_dict(),
            "sentence": self.sentence,
            "edge_scores": self.scores.to_dict(per_prompt=per_prompt),
            **({"stability": self.stability.to_dict()} if self.stability is not None else {}),
            **({"selection": self.selection.to_dict()} if self.selection is not None else {}),
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> CircuitResult:
        """The result :meth:`to_dict` wrote, read through its schema
        (:class:`~interv.circuits._stored.StoredCircuit`: a damaged field is named)."""
        stored = parse(StoredCircuit, data, "circuit")
        scores = EdgeScores.from_dict(data["edge_scores"])
        return cls(
            graph=scores.graph,
            scores=scores,
            audit=Audit.from_dict(data["audit"]),
            fingerprint=stored.fingerprint,
            model_name=stored.model,
            task_name=stored.task,
            sentence=stored.sentence,
            stability=None
            if stored.stability is None
            else CircuitStability.from_dict(data["stability"]),
            selection=None
            if stored.selection is None
            else StableCircuit.from_dict(data["selection"]),
        )

    def __repr__(self) -> str:
        audit = self.audit
        return (
            f"CircuitResult({self.model_name}, {self.task_name}, {self.scores.method}: "
            f"{self.graph.n_edges} edges, {audit.n_verified} verified, "
            f"{int(audit.audited.numel())} audited, miss rate <= {audit.miss_bound:.3g})"
        )

    def _repr_html_(self) -> str:
        rows = []
        values = self.value
        for i in self.ranking()[:10].tolist():
            rows.append(
                f"<tr><td>{html.escape(self.graph.edges[i].label)}</td>"
                f"<td>{float(self.scores.scores[i]):.4g}</td><td>{float(values[i]):.4g}</td>"
                f"<td>{html.escape(self.status[i])}</td></tr>"
            )
        return (
            f"<p>{html.escape(self.sentence)}</p><table><tr><th>edge</th><th>estimate</th>"
            f"<th>value</th><th>status</th></tr>{''.join(rows)}</table>"
        )


def _known_tensor(known: Mapping[int, float] | None, graph: Graph) -> torch.Tensor | None:
    if known is None:
        return None
    out = torch.full((graph.n_edges,), torch.nan, dtype=torch.float64)
    for key, value in dict(known).items():
        out[graph.index(key)] = float(value)
    return out


DEFAULT_TOP_K = 200
""":func:`discover`'s default verified top, clamped to the graph's edges."""


def default_screen(n_edges: int) -> Screen:
    """:func:`discover`'s screen when none is given: the top :data:`DEFAULT_TOP_K` edges by
    |estimate| verified (at most the graph's ``n_edges``), 200 audited, ``alpha=0.05``."""
    return Screen(top_k=min(DEFAULT_TOP_K, n_edges), audit=200, alpha=0.05)


def discover(
    model: Any,
    task: TokenizedPairs,
    *,
    method: str = "eap",
    steps: int = 5,
    qk_fix: bool = False,
    screen: Screen | None = None,
    metric: str | TargetMetric = "logit_diff",
    known: Mapping[int, float] | None = None,
    scores: EdgeScores | None = None,
    batch_size: int | None = None,
    on_exact: Callable[[list[int], torch.Tensor], None] | None = None,
    progress: Callable[[str], None] | None = None,
    stability: int | None = None,
    kv: str = "grouped",
    select: str = "top",
    pi: float | None = None,
    resamples: int | None = None,
    q: int | None = None,
    groups: Sequence[Hashable] | None = None,
    connected: bool = False,
    gim: Any = False,
    hvp: bool = False,
    hvp_steps: int = 1,
    hvp_top: int | None = None,
    exact_per_prompt: dict[int, torch.Tensor] | None = None,
    executor: RayExecutor | None = None,
    kept: Kept | None = None,
) -> CircuitResult:
    """Screen every edge, verify the top ``screen.top_k`` exactly and audit the rest.

    Args:
        model: a transformer-lens bridge in eval mode.
        task: clean/corrupted prompt pairs of equal token lengths.
        method, steps, qk_fix, metric: the screen (:func:`interv.circuits.edge_scores`).
        screen: the checking rule (:class:`interv.Screen`); its ``top_k`` must not exceed
            the graph's edges. None (default): ``Screen(top_k=200, audit=200, alpha=0.05)``
            with ``top_k`` clamped to the graph's edges (an 81-edge graph verifies all 81).
        known: edge index (or label) -> exact prompt-mean effect already computed; reused.
        scores: the screen's scores from an earlier (interrupted) call; None computes them.
        batch_size: edges per stacked exact forward (:func:`interv.circuits.edge_effects`).
        on_exact: called with ``(edge indices, [k] exact effects)`` after each stacked
            forward (store them to resume after a kill).
        progress: called with short messages.
        stability: a number of bootstrap resamples of the prompts: the circuit is found
            again on each (:func:`interv.circuits.circuit_stability`, default sizes 20, 100
            and 500 edges; the exact per-prompt effects computed here are reused) and
            attached as :attr:`CircuitResult.stability`; with ``select="stability"`` the
            selection is also redone on as many bootstrap resamples (its Jaccard with the
            full selection: :attr:`StableCircuit.jaccard`). None: not computed.
        select: ``"top"`` (default: the circuit is the top of :meth:`CircuitResult.ranking`)
            or ``"stability"``: also choose it by stability selection
            (:func:`interv.circuits.stability_selection`, reusing the exact per-prompt
            effects computed here), attached as :attr:`CircuitResult.selection`.
        pi: with ``select="stability"``, the inclusion-frequency threshold in (0.5, 1]
            (default 0.8).
        resamples: with ``select="stability"``, the half subsamples ``B`` (default 200).
        q: with ``select="stability"``, the circuit size on each subsample (default
            ``screen.top_k``).
        groups: with ``select="stability"``, one label per prompt pair (e.g.
            :func:`interv.tasks.builtin.ioi_templates`): the selection is also redone
            leaving out each group's pairs.
        connected: with ``select="stability"``, True: each subsample's circuit is connected
            from the input to the logits (at least ``q`` edges), and so is the selection
            (:func:`~interv.circuits.stability_selection`'s ``connected``).
        kv: ``"grouped"`` (default) or ``"ungrouped"`` (MIB's graph: key and value edges
            into each query head's own copy, :class:`~interv.circuits.Graph`).
        gim: GIM's backward for the screen (:func:`interv.circuits.edge_scores`).
        hvp, hvp_steps, hvp_top: Zhang & Wang's HVP correction of the EAP screen, its
            multi-step variant and the edges it corrects (:func:`interv.circuits.edge_scores`).
        exact_per_prompt: a dict of edge index -> ``[n_prompts]`` exact per-prompt effects
            computed earlier on these prompts (reused by the stability figures), filled with
            those computed here (the verified, audited and resample-verified edges): pass
            it to :func:`~interv.circuits.stability_selection` afterwards to redo the
            selection with other settings without patching any edge again. None: a fresh one.
        executor: where the exact edges (verified, audited, and those the stability
            resamples verify) are patched: None here, or a
            :class:`~interv.circuits.RayExecutor` (:mod:`interv.circuits.executor`).
        kept: a resumable run's store of the edges the stability resamples and the selection
            patch (:func:`~interv.circuits.stability.resampled_exact`; the verified and audited
            edges go to ``on_exact``): :func:`interv.circuits.store.discover_resumable`.

    Returns:
        :class:`CircuitResult`.
    """
    target = check_task(model, task, metric)
    executor = check_executor(executor)
    if stability is not None:
        stability = check_resamples(stability, task.n_pairs, "stability")
        if isinstance(scores, EdgeScores) and scores.per_prompt is None:
            raise IntervError(
                "stability needs the screen's per-prompt estimates, and the scores passed carry "
                "none (EdgeScores.to_dict(per_prompt=False) drops them); pass scores with their "
                "per-prompt values, or scores=None to compute them"
            )
    select = check_select(select)
    if select == "stability":
        pi = check_pi(0.8 if pi is None else pi)
        resamples = check_resamples(
            200 if resamples is None else resamples, task.n_pairs, "resamples", "half subsamples"
        )
        if isinstance(scores, EdgeScores) and scores.per_prompt is None:
            raise IntervError(
                "select='stability' needs the screen's per-prompt estimates, and the scores passed "
                "carry none (EdgeScores.to_dict(per_prompt=False) drops them); pass scores with "
                "their per-prompt values, or scores=None to compute them"
            )
    else:
        given = [
            k
            for k, v in (("pi", pi), ("resamples", resamples), ("q", q), ("groups", groups))
            if v is not None
        ]
        if connected is not False:
            given.append("connected")
        if given:
            raise IntervError(
                f"{', '.join(given)} {'applies' if len(given) == 1 else 'apply'} to "
                f"select='stability' only; got select={select!r}"
            )
    graph = Graph.from_model(model, kv=kv)
    if screen is None:  # the default fits the graph it runs on
        screen = default_screen(graph.n_edges)
    if not isinstance(screen, Screen):
        raise IntervError(
            f"screen must be an interv.Screen (e.g. Screen(top_k=200, audit=200)); got {screen!r}"
        )
    if screen.estimator != "attribution":
        raise IntervError(
            f"Screen(estimator={screen.estimator!r}) is for node screens (interv.run); an edge "
            "screen's estimator is chosen by discover's own options: method= and steps= "
            "(method='eap-ig', steps=5), qk_fix=True, gim=True, hvp=True (hvp_steps=, hvp_top=)"
        )
    if screen.top_k > graph.n_edges:
        raise IntervError(
            f"Screen top_k ({screen.top_k}) must be at most the graph's {graph.n_edges} edges"
        )
    if select == "stability":
        q = check_q(q, screen.top_k, graph.n_edges)
        check_groups(groups, task.n_pairs)
        check_connected(connected)
    if scores is None:
        scores = edge_scores(
            model,
            task,
            method=method,
            steps=steps,
            qk_fix=qk_fix,
            metric=target,
            progress=progress,
            kv=kv,
            gim=gim,
            hvp=hvp,
            hvp_steps=hvp_steps,
            hvp_top=hvp_top,
        )
    elif not isinstance(scores, EdgeScores):
        raise IntervError(
            f"scores must be the EdgeScores of an earlier call; got {type(scores).__name__}"
        )
    else:
        ours = Provenance.of(model, task, metric=target.name, direction=scores.direction)
        join(ours, scores, what=("the model and prompts", "the given scores"))
        if scores.graph.n_edges != graph.n_edges or scores.graph.kv != graph.kv:
            raise IntervError(
                f"scores are for a graph of {scores.graph.n_edges} edges (kv "
                f"{scores.graph.kv!r}); this model's graph with kv={kv!r} has {graph.n_edges}"
            )

    if exact_per_prompt is not None and not isinstance(exact_per_prompt, dict):
        raise IntervError(
            "exact_per_prompt must be a dict of edge index -> per-prompt exact effects; got "
            f"{type(exact_per_prompt).__name__}"
        )
    # edge -> exact per-prompt effects (stability)
    per_prompt: dict[int, torch.Tensor] = {} if exact_per_prompt is None else exact_per_prompt

    def evaluate(indices: torch.Tensor) -> torch.Tensor:
        todo = indices.tolist()
        if progress is not None:
            progress(f"exact path patching of {len(todo)} edges")

        def done(local: list[int], values: torch.Tensor) -> None:
            for i, row in zip(local, values, strict=True):
                per_prompt[todo[i]] = row.double().cpu()
            if on_exact is not None:
                on_exact([todo[i] for i in local], values.mean(-1))

        return edge_effects(
            model,
            task,
            graph,
            todo,
            metric=target,
            batch_size=batch_size,
            on_batch=done,
            executor=executor,
        )

    name = "EAP" if scores.method == "eap" else f"EAP-IG ({scores.steps} steps)"
    name += " with AtP*'s QK fix" if scores.qk_fix else ""
    name += " with GIM's backward" if gim not in (None, False) else ""
    name += " with the HVP correction" if scores.hvp == 1 else ""
    name += f" with the {scores.hvp}-step HVP estimate" if scores.hvp > 1 else ""
    audit = verify_screen(
        screen,
        scores.scores,
        evaluate,
        method=f"{name} edge screen",
        known=_known_tensor(known, graph),
    )
    n_estimated = sum(s == ESTIMATED for s in audit.status)
    sentence = (
        f"{graph.n_edges} edges of {graph.model_name} on {task.name} ({task.n_pairs} prompt "
        f"pairs), metric: prompt-mean {target.definition}; exact = path patching of the edge "
        f"alone (the sender's corrupted output into the receiver's input, the clean run "
        f"elsewhere); {audit.describe()}; {n_estimated} edges carry estimates only"
    )
    result = CircuitResult(
        graph=graph,
        scores=scores,
        audit=audit,
        fingerprint=scores.fingerprint,
        model_name=graph.model_name,
        task_name=task.name,
        sentence=sentence,
    )
    if stability is not None:
        resampled = circuit_stability(
            model,
            task,
            result,
            n_resamples=stability,
            exact_per_prompt=per_prompt,
            batch_size=batch_size,
            progress=progress,
            executor=executor,
            kept=kept,
        )
        result = dataclasses.replace(result, stability=resampled)
    if select == "stability":
        selection = stability_selection(
            model,
            task,
            result,
            pi=pi,
            n_resamples=resamples,
            q=q,
            groups=groups,
            connected=connected,
            bootstrap=stability,
            exact_per_prompt=per_prompt,
            batch_size=batch_size,
            progress=progress,
            executor=executor,
            kept=kept,
        )
        result = dataclasses.replace(result, selection=selection)
    return result
