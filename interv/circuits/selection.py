"""Stable circuits: the edges chosen by stability selection over subsamples of the prompts.

>>> result = discover(model, task, select="stability", pi=0.8, resamples=200)  # doctest: +SKIP
>>> result.selection.edges()        # the selected edges, most often included first
>>> result.selection.bound          # E[V] <= q^2 / ((2 pi - 1) p)
>>> faithfulness(model, task, result.selection.ranking(result))

Stability selection (Meinshausen & Bühlmann 2010) keeps the variables that a selection rule
picks on most subsamples of the data. Here the variables are the ``p`` edges of the graph,
the data are the ``n`` prompt pairs and the rule is the discovery's own: on each of ``B``
subsamples of ``floor(n / 2)`` pairs drawn *without* replacement (the paper's setting; seeded),
the circuit of ``q`` edges is ranked as :func:`interv.circuits.circuit_stability` ranks a
resample's (the screen's per-prompt estimates re-averaged, the subsample's own top
``n_verified`` and the full run's audited edges valued by their exact per-prompt effects
re-averaged, checked edges first: :meth:`~interv.circuits.CircuitResult.ranking`), so ``B``
subsamples cost no screen and patch only the edges some subsample verifies that the full run
did not. An edge's *inclusion frequency* is the share of subsamples whose top ``q`` holds it;
the selected circuit is the edges with frequency ``>= pi`` (``pi`` in (0.5, 1]).

The bound (Meinshausen & Bühlmann 2010, Theorem 1): the expected number of falsely selected
edges ``E[V] <= q**2 / ((2 pi - 1) p)``, *assuming* that the inclusion of the edges outside
the true circuit is exchangeable and that the ranking does no worse than random guessing on
them. Neither is checked here, and the theorem's frequency is over all subsamples of half
size, estimated here from ``B`` random ones.

Connected (``connected=True``). An edge changes a circuit's value only if it lies on a path
of circuit edges from the input to the logits (:mod:`interv.circuits.pruning`, MIB's
pruning), and edges ranked one at a time need not: the most stable edges can compute exactly
the empty circuit. With ``connected=True`` each subsample's circuit is the connected part of
the smallest top ``n`` of its ranking whose connected part holds at least ``q`` edges (so
at least ``q`` edges, all connected; its ranking is grown past the depth first tried where
needed, patching nothing more: the verified set is the top's first ``n_verified`` at any
depth); the inclusion frequencies count those circuits, and the edges at or above ``pi`` are
pruned again (:attr:`StableCircuit.n_pruned` counts the dropped ones), so the selection is a
circuit. The theorem's ``q`` is the expected size of a subsample's selection: here the mean
size of the connected circuits over the ``B`` subsamples (:attr:`StableCircuit.mean_size`),
and its exchangeability assumption is harder to believe (a connected circuit takes edges in
paths, not one at a time).

Where the pairs carry groups (IOI's templates: :func:`interv.tasks.builtin.ioi_templates`),
the selection is redone without each group's pairs (same ``B``, seed and ``q``, half of the
remaining pairs per subsample) and its Jaccard with the full selection reported beside it:
circuits can differ across rephrased templates more than across resamples.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch

from interv._checks import as_int
from interv._schema import parse
from interv.circuits._stored import StoredSelection
from interv.circuits.executor import Kept, RayExecutor
from interv.circuits.graph import Edge, Graph
from interv.circuits.pruning import connected as connected_edges
from interv.circuits.pruning import pruner
from interv.circuits.screens import graph_dict
from interv.circuits.stability import (
    Discovery,
    check_resamples,
    resample_circuits,
    resampled_exact,
    resampled_tops,
)
from interv.errors import IntervError
from interv.stats import bootstrap_indices, percentile_interval

if TYPE_CHECKING:
    from interv.tasks.tokenized import TokenizedPairs

__all__ = [
    "SELECTIONS",
    "StableCircuit",
    "check_connected",
    "check_groups",
    "check_pi",
    "check_q",
    "check_select",
    "connected_circuits",
    "false_edge_bound",
    "half_subsamples",
    "smallest_connected",
    "stability_selection",
]

SELECTIONS: tuple[str, ...] = ("top", "stability")
"""How :func:`interv.circuits.discover` chooses its circuit: ``"top"`` (the top edges of the
ranking, the default) or ``"stability"`` (stability selection, this module)."""

FORMAT = "interv.stable_circuit/1"


def check_select(select: Any, what: str = "select") -> str:
    """``select`` checked: one of :data:`SELECTIONS`."""
    if not isinstance(select, str) or select not in SELECTIONS:
        raise IntervError(f"unknown {what} {select!r}; choose one of {SELECTIONS}")
    return select


def check_pi(pi: Any, what: str = "pi") -> float:
    """``pi`` checked: a number in (0.5, 1] (the bound needs ``pi > 1/2``)."""
    if isinstance(pi, bool) or not isinstance(pi, int | float) or not 0.5 < float(pi) <= 1:
        raise IntervError(
            f"{what} must be a number in (0.5, 1] (the selection threshold on inclusion "
            f"frequency; Meinshausen & Bühlmann's bound needs pi > 0.5); got {pi!r}"
        )
    return float(pi)


def false_edge_bound(q: int, pi: float, p: int) -> float:
    """Meinshausen & Bühlmann (2010)'s bound on the expected number of falsely selected
    edges, ``q**2 / ((2 pi - 1) p)``."""
    return q * q / ((2 * pi - 1) * p)


@dataclass(frozen=True, eq=False)
class StableCircuit:
    """A circuit chosen by stability selection (module docstring).

    Attributes:
        graph: the graph.
        selected: the selected edge indices, by descending inclusion frequency (ties by
            the full-sample ranking).
        inclusion: ``[n_edges]`` float64: the share of subsamples whose top ``q`` holds each
            edge.
        pi: the selection threshold on inclusion frequency.
        q: the circuit size on each subsample (edges).
        n_resamples: subsamples ``B``.
        subsample: pairs per subsample (``floor(n / 2)``).
        seed: the subsampling seed.
        n_prompts: prompt pairs subsampled.
        bound: ``q**2 / ((2 pi - 1) p)`` with ``p`` the graph's edges.
        n_verified: edges each subsample verifies (the full run's verified count).
        n_exact_computed: exact per-prompt effects this selection patched.
        groups: the groups left out in turn (e.g. IOI templates), empty when none.
        group_pairs: per group, its pairs.
        group_jaccard: per group, the Jaccard of the selection without its pairs with the
            full selection (NaN when both are empty).
        jaccard: per bootstrap resample of the prompts (``bootstrap``, drawn with
            replacement), the Jaccard of the selection redone on it (``n_resamples`` half
            subsamples of its draws) with the full selection; empty when not asked.
        jaccard_mean, jaccard_low, jaccard_high: their mean and 95% percentile interval
            (NaN when not asked).
        sentence: what was resampled, what was selected and the bound's assumptions.
        connected: whether each subsample's circuit, and the selection, are connected
            (``stability_selection(..., connected=True)``: the edges on paths from the input
            to the logits through circuit edges, :mod:`interv.circuits.pruning`).
        mean_size: with ``connected``, the mean size of the subsamples' circuits (each holds
            at least ``q`` edges): the bound's ``q``; None when each holds exactly ``q``.
        n_pruned: with ``connected``, the edges at or above ``pi`` that the final pruning
            dropped (not connected to the input or the logits through selected edges).
    """

    graph: Graph
    selected: tuple[int, ...]
    inclusion: torch.Tensor
    pi: float
    q: int
    n_resamples: int
    subsample: int
    seed: int
    n_prompts: int
    bound: float
    n_verified: int
    n_exact_computed: int
    groups: tuple[str, ...]
    group_pairs: tuple[int, ...]
    group_jaccard: tuple[float, ...]
    jaccard: tuple[float, ...]
    jaccard_mean: float
    jaccard_low: float
    jaccard_high: float
    sentence: str
    connected: bool = False
    mean_size: float | None = None
    n_pruned: int = 0

    def edges(self) -> list[Edge]:
        """The selected edges, most often included first."""
        return [self.graph.edges[i] for i in self.selected]

    def ranking(self, result: Discovery) -> list[int]:
        """Every edge index: the selected ones first (as :attr:`selected`), then the rest in
        ``result``'s ranking (for :func:`interv.circuits.faithfulness`)."""
        chosen = set(self.selected)
        return [*self.selected, *(i for i in result.ranking().tolist() if i not in chosen)]

    def to_pandas(self) -> Any:
        """One row per selected edge: edge, inclusion frequency."""
        from interv._pandas import require_pandas

        pd = require_pandas()
        return pd.DataFrame(
            {
                "edge": [self.graph.edges[i].label for i in self.selected],
                "inclusion": [float(self.inclusion[i]) for i in self.selected],
            }
        )

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready data (format ``interv.stable_circuit/1``); :meth:`from_dict` inverts it.
        Inclusion frequencies are kept for the edges some subsample's circuit held."""
        held = self.inclusion.nonzero().flatten()
        return {
            "format": FORMAT,
            "graph": graph_dict(self.graph),
            "selected": list(self.selected),
            "inclusion_edges": held.tolist(),
            "inclusion_share": self.inclusion[held].tolist(),
            "pi": self.pi,
            "q": self.q,
            "n_resamples": self.n_resamples,
            "subsample": self.subsample,
            "seed": self.seed,
            "n_prompts": self.n_prompts,
            "bound": self.bound,
            "n_verified": self.n_verified,
            "n_exact_computed": self.n_exact_computed,
            "groups": list(self.groups),
            "group_pairs": list(self.group_pairs),
            "group_jaccard": _clean(self.group_jaccard),
            "jaccard": _clean(self.jaccard),
            "jaccard_mean": _clean([self.jaccard_mean])[0],
            "jaccard_low": _clean([self.jaccard_low])[0],
            "jaccard_high": _clean([self.jaccard_high])[0],
            "sentence": self.sentence,
            **(
                {"connected": True, "mean_size": self.mean_size, "n_pruned": self.n_pruned}
                if self.connected
                else {}
            ),
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> StableCircuit:
        """The selection :meth:`to_dict` wrote, read through its schema
        (:class:`~interv.circuits._stored.StoredSelection`: a damaged field is named)."""
        stored = parse(StoredSelection, data, "stable circuit")
        graph = stored.graph
        inclusion = torch.zeros(graph.n_edges, dtype=torch.float64)
        inclusion[torch.tensor(stored.inclusion_edges, dtype=torch.long)] = torch.tensor(
            stored.inclusion_share, dtype=torch.float64
        )
        return cls(
            graph=graph,
            selected=tuple(stored.selected),
            inclusion=inclusion,
            pi=stored.pi,
            q=stored.q,
            n_resamples=stored.n_resamples,
            subsample=stored.subsample,
            seed=stored.seed,
            n_prompts=stored.n_prompts,
            bound=stored.bound,
            n_verified=stored.n_verified,
            n_exact_computed=stored.n_exact_computed,
            groups=tuple(stored.groups),
            group_pairs=tuple(stored.group_pairs),
            group_jaccard=tuple(stored.group_jaccard),
            jaccard=tuple(stored.jaccard),
            jaccard_mean=stored.jaccard_mean,
            jaccard_low=stored.jaccard_low,
            jaccard_high=stored.jaccard_high,
            sentence=stored.sentence,
            connected=stored.connected,
            mean_size=stored.mean_size,
            n_pruned=stored.n_pruned,
        )

    def __repr__(self) -> str:
        boot = ""
        if self.jaccard:
            boot = (
                f", bootstrap Jaccard {self.jaccard_mean:.2f} [{self.jaccard_low:.2f}, "
                f"{self.jaccard_high:.2f}] over {len(self.jaccard)} resamples"
            )
        loto = ""
        if self.groups:
            finite = [j for j in self.group_jaccard if not math.isnan(j)]
            low = f"{min(finite):.2f}" if finite else "n/a"
            loto = f", leave-one-group-out Jaccard >= {low} over {len(self.groups)} groups"
        circuits = (
            f"the connected circuits (>= {self.q} edges, mean {self.mean_size:.3g}) of "
            f"{self.n_resamples} half subsamples of {self.n_prompts} prompts, pruned "
            f"({self.n_pruned} dropped)"
            if self.connected
            else f"the top {self.q} of {self.n_resamples} half subsamples of {self.n_prompts} "
            "prompts"
        )
        return (
            f"StableCircuit({len(self.selected)} edges with inclusion >= {self.pi:g} in "
            f"{circuits}; "
            f"E[false edges] <= {self.bound:.3g}{boot}{loto})"
        )


def _clean(values: Sequence[float]) -> list[float | None]:
    return [None if math.isnan(v) else float(v) for v in values]


def half_subsamples(m: int, n_resamples: int, seed: int) -> torch.Tensor:
    """``[n_resamples, m // 2]`` int64: each subsample's positions among ``m`` items, drawn
    without replacement (seeded): the subsamples of :func:`stability_selection`."""
    generator = torch.Generator().manual_seed(seed)
    return torch.stack(
        [torch.randperm(m, generator=generator)[: m // 2] for _ in range(n_resamples)]
    )


def _half_weights(
    members: torch.Tensor, n: int, n_resamples: int, seed: int
) -> tuple[torch.Tensor, int]:
    """``[n_resamples, n]`` prompt weights of the :func:`half_subsamples` of the prompts
    ``members`` (repeats allowed: a bootstrap resample's draws), and their size."""
    size = members.numel() // 2
    weights = torch.zeros(n_resamples, n, dtype=torch.float64)
    drawn = members[half_subsamples(members.numel(), n_resamples, seed)]  # [B, size]
    weights.scatter_add_(1, drawn, torch.full(drawn.shape, 1.0 / size, dtype=torch.float64))
    return weights, size


def check_q(q: Any, default: int, n_edges: int) -> int:
    """``q`` (edges per subsample) checked against the graph; None is ``default``."""
    q = default if q is None else as_int(q, "q (edges per subsample)", minimum=1)
    if q > n_edges:
        raise IntervError(f"q {q} exceeds the graph's {n_edges} edges; choose 1..{n_edges}")
    return q


def check_groups(groups: Sequence[Hashable] | None, n: int) -> list[str] | None:
    """``groups`` (one label per prompt pair) checked: at least two labels, and each left
    out leaves at least two pairs to subsample. None stays None."""
    if groups is None:
        return None
    if isinstance(groups, str) or not isinstance(groups, Sequence) or len(groups) != n:
        length = f" of length {len(groups)}" if isinstance(groups, Sequence) else ""
        raise IntervError(
            f"groups must give one label per prompt pair ({n}); got {type(groups).__name__}{length}"
        )
    labels = [str(g) for g in groups]
    names = list(dict.fromkeys(labels))
    if len(names) < 2:
        raise IntervError(f"groups must hold at least two labels to leave one out; got {names}")
    for name in names:
        left = n - labels.count(name)
        if left < 2:
            raise IntervError(
                f"leaving out group {name!r} leaves {left} prompt pair; each group left out "
                "must leave at least 2"
            )
    return labels


def stability_selection(
    model: Any,
    task: TokenizedPairs,
    result: Discovery,
    *,
    pi: float = 0.8,
    n_resamples: int = 200,
    q: int | None = None,
    seed: int = 0,
    groups: Sequence[Hashable] | None = None,
    bootstrap: int | None = None,
    exact_per_prompt: Mapping[int, torch.Tensor] | None = None,
    batch_size: int | None = None,
    progress: Callable[[str], None] | None = None,
    executor: RayExecutor | None = None,
    kept: Kept | None = None,
    connected: bool = False,
) -> StableCircuit:
    """The circuit of the edges whose inclusion frequency is at least ``pi`` (module docstring).

    Args:
        model: the bridge the discovery ran on (used only to patch edges a subsample
            verifies whose exact per-prompt effects are not in ``exact_per_prompt``).
        task: the discovery's prompt pairs.
        result: the :class:`~interv.circuits.CircuitResult`, with per-prompt estimates.
        pi: the threshold in (0.5, 1].
        n_resamples: subsamples (2..:data:`~interv.circuits.stability.MAX_RESAMPLES`).
        q: the circuit size on each subsample; None: the screen's ``top_k``.
        seed: the subsampling seed.
        groups: one label per prompt pair (e.g. IOI's template), or None: the selection is
            redone without each group's pairs, its Jaccard with the full one reported.
        bootstrap: bootstrap resamples of the prompts (with replacement) on each of which
            the selection is redone (``n_resamples`` half subsamples of its draws; seeded
            by ``seed``), its Jaccard with the full selection reported (Méloux et al.'s bar
            0.8); None: not computed. Costs ``bootstrap * n_resamples`` rankings.
        exact_per_prompt: edge index -> ``[n_prompts]`` exact per-prompt effects already
            computed (e.g. by :func:`~interv.circuits.discover`); the rest are patched.
        batch_size: edges per stacked exact forward.
        progress: called with short messages.
        executor: where the edges are patched (:mod:`interv.circuits.executor`; None: here).
        kept: a resumable run's store of the edges patched here
            (:func:`~interv.circuits.stability.resampled_exact`).
        connected: False: each subsample's circuit is its top ``q``. True: it is the
            connected part (:func:`interv.circuits.pruning.connected`) of the smallest top
            ``n`` of its ranking whose connected part holds at least ``q`` edges; the
            frequencies count those circuits, the edges at or above ``pi`` are pruned again
            (:attr:`StableCircuit.n_pruned`), and the bound's ``q`` is the circuits' mean size
            (module docstring, "Connected").

    Raises:
        IntervError: before any forward, for an argument out of range, too few prompts,
            scores without per-prompt values, or a ``connected`` that is not a bool.
    """
    pi = check_pi(pi)
    seed = as_int(seed, "seed")
    per_prompt = result.scores.per_prompt
    if per_prompt is None:
        raise IntervError(
            "stability selection needs the screen's per-prompt estimates, and these scores carry "
            "none (EdgeScores.to_dict(per_prompt=False) drops them); recompute the scores or "
            "load them with their per-prompt values"
        )
    n = int(per_prompt.shape[1])
    if n != task.n_pairs:
        raise IntervError(
            f"the circuit's scores hold {n} prompts but the task has {task.n_pairs} pairs; pass "
            "the discovery's own task"
        )
    n_resamples = check_resamples(n_resamples, n, "resamples", "half subsamples")
    graph = result.graph
    q = check_q(q, result.audit.screen.top_k, graph.n_edges)
    labels = check_groups(groups, n)
    if bootstrap is not None:
        bootstrap = check_resamples(bootstrap, n, "bootstrap")
    connected = check_connected(connected)

    everyone = torch.arange(n)
    runs = [_half_weights(everyone, n, n_resamples, seed)]
    names: list[str] = []
    sizes: list[int] = []
    if labels is not None:
        names = list(dict.fromkeys(labels))
        for name in names:
            rest = torch.tensor([i for i, g in enumerate(labels) if g != name], dtype=torch.long)
            runs.append(_half_weights(rest, n, n_resamples, seed))
            sizes.append(n - rest.numel())
    n_groups = len(names)
    if bootstrap is not None:
        for draw in bootstrap_indices(n, bootstrap, seed):
            runs.append(_half_weights(draw, n, n_resamples, seed))
    weights = torch.cat([w for w, _ in runs])
    checked = result.audit.n_verified + int(result.audit.audited.numel())
    size = min(4 * q, graph.n_edges) if connected else q  # connected: the first depth tried
    depth = size + checked
    tops, exact, n_patched = resampled_exact(
        model,
        task,
        result,
        weights,
        exact_per_prompt,
        batch_size,
        progress,
        depth=depth,
        executor=executor,
        kept=kept,
    )
    if connected:
        row_of, edge_of, circuit_sizes = connected_circuits(
            result, exact, weights, tops, q, size, progress
        )
        mean_size: float | None = circuit_sizes[:n_resamples].double().mean().item()
    else:
        chosen = resample_circuits(result, tops, exact, weights, q)  # [runs * B, q]
        row_of = torch.arange(chosen.shape[0]).repeat_interleave(q)
        edge_of = chosen.flatten()
        mean_size = None
    run_of = row_of // n_resamples
    rank = torch.empty(graph.n_edges, dtype=torch.long)
    rank[result.ranking()] = torch.arange(graph.n_edges)

    def select(run: int) -> tuple[torch.Tensor, tuple[int, ...], int]:
        rows = edge_of[run_of == run]
        counts = torch.zeros(graph.n_edges, dtype=torch.float64)
        counts.index_add_(0, rows, torch.ones(rows.numel(), dtype=torch.float64))
        share = counts / n_resamples
        held = (share >= pi).nonzero().flatten()
        dropped = 0
        if connected and held.numel():
            stays = connected_edges(graph, torch.ones(held.numel(), dtype=torch.bool), held)
            dropped = int((~stays).sum())
            held = held[stays]
        held = held[torch.sort(rank[held], stable=True).indices]  # ties: the full ranking
        order = held[torch.sort(-share[held], stable=True).indices]
        return share, tuple(order.tolist()), dropped

    inclusion, selected, n_pruned = select(0)
    jaccards = []
    for run in range(1, len(runs)):
        _, other, _ = select(run)
        union = set(other) | set(selected)
        jaccards.append(len(set(other) & set(selected)) / len(union) if union else math.nan)
    boot = torch.tensor(jaccards[n_groups:], dtype=torch.float64)
    low, high = percentile_interval(boot, 0.95, n_items=n) if boot.numel() else (math.nan,) * 2
    bound = false_edge_bound(q if mean_size is None else mean_size, pi, graph.n_edges)
    return StableCircuit(
        graph=graph,
        selected=selected,
        inclusion=inclusion,
        pi=pi,
        q=q,
        n_resamples=n_resamples,
        subsample=runs[0][1],
        seed=seed,
        n_prompts=n,
        bound=bound,
        n_verified=result.audit.n_verified,
        n_exact_computed=n_patched,
        groups=tuple(names),
        group_pairs=tuple(sizes),
        group_jaccard=tuple(jaccards[:n_groups]),
        jaccard=tuple(boot.tolist()),
        jaccard_mean=boot.nanmean().item() if boot.numel() else math.nan,
        jaccard_low=low,
        jaccard_high=high,
        sentence=_sentence(
            result,
            pi,
            q,
            n_resamples,
            runs[0][1],
            seed,
            n,
            bound,
            names,
            bootstrap,
            None if mean_size is None else (mean_size, circuit_sizes[:n_resamples], n_pruned),
        ),
        connected=connected,
        mean_size=mean_size,
        n_pruned=n_pruned,
    )


def check_connected(connected: Any) -> bool:
    """``connected`` checked: True or False. (Any ``q`` that :func:`check_q` admits is
    reachable: every edge of a whole graph connects the input to the logits.)"""
    if not isinstance(connected, bool):
        raise IntervError(f"connected must be True or False; got {connected!r}")
    return connected


def smallest_connected(
    graph: Graph,
    order: torch.Tensor,
    q: int,
    prune: Callable[[torch.Tensor, torch.Tensor | None], torch.Tensor] | None = None,
) -> torch.Tensor:
    """``[rows, depth]`` bool: for each row of ``order`` (``[rows, depth]`` edge indices, a
    ranking's first ``depth``, distinct in a row), the positions of the connected part
    (:func:`~interv.circuits.pruning.connected`) of its smallest prefix whose connected part
    holds at least ``q`` edges; all False where even the whole row's holds fewer. The size
    of a prefix's connected part never falls as the prefix grows (pruning keeps the largest
    connected subcircuit), so the prefix is found by bisection, every row at once (``prune``:
    :func:`~interv.circuits.pruning.pruner` of ``graph``, read once by the caller)."""
    prune = pruner(graph) if prune is None else prune
    n_rows, depth = order.shape
    out = torch.zeros(n_rows, depth, dtype=torch.bool)
    if n_rows == 0 or depth == 0:
        return out
    candidates, column = torch.unique(order, return_inverse=True)  # column: [rows, depth]
    position = torch.full((n_rows, candidates.numel()), depth, dtype=torch.long)
    position.scatter_(1, column, torch.arange(depth).expand(n_rows, -1))

    def part(n: torch.Tensor) -> torch.Tensor:  # [rows, candidates]: connected part of top n
        return prune(position < n[:, None], candidates)

    high = torch.full((n_rows,), depth, dtype=torch.long)
    enough = part(high).sum(-1) >= q
    low = torch.full((n_rows,), q - 1, dtype=torch.long)  # q - 1 edges hold fewer than q
    while ((high - low > 1) & enough).any():
        middle = (low + high) // 2
        holds = part(middle).sum(-1) >= q
        high = torch.where(holds, middle, high)
        low = torch.where(holds, low, middle)
    kept = part(high) & enough[:, None]
    return kept.gather(1, column)


_ROWS = 128
"""Resamples pruned together: their candidate edges (the union of their rankings' tops)
grow more slowly than their count, so small groups prune fewer (row, edge) cells."""


def connected_circuits(
    result: Discovery,
    exact: torch.Tensor,
    weights: torch.Tensor,
    tops: torch.Tensor,
    q: int,
    size: int,
    progress: Callable[[str], None] | None = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Each resample's connected circuit: the connected part of the smallest top ``n`` of
    its ranking (:func:`~interv.circuits.stability.resample_circuits`) whose connected part
    holds at least ``q`` edges (:func:`smallest_connected`).

    ``tops`` is each resample's screen top to depth ``size`` plus the checked edges; a
    resample whose ranking's first ``size`` edges do not reach ``q`` connected ones is ranked
    again twice as deep (:func:`~interv.circuits.stability.resampled_tops`; its verified set,
    the first ``n_verified`` of its top, is the same at any depth, so nothing more is
    patched), until its whole ranking.

    Returns:
        (row, edge) of every circuit's edges (int64, by row) and ``[rows]`` each circuit's size.
    """
    graph, audit = result.graph, result.audit
    per_prompt = result.scores.per_prompt
    checked = audit.n_verified + int(audit.audited.numel())
    n_rows = weights.shape[0]
    prune = pruner(graph)
    rows: list[torch.Tensor] = []
    edges: list[torch.Tensor] = []
    pending = torch.arange(n_rows)
    verified = torch.sort(tops[:, : audit.n_verified], dim=-1).values  # [rows, n_verified]
    while True:
        for first in range(0, pending.numel(), _ROWS):
            chunk = pending[first : first + _ROWS]
            order = resample_circuits(
                result, tops[first : first + _ROWS], exact, weights[chunk], size
            )
            kept = smallest_connected(graph, order, q, prune)
            found = kept.any(-1)
            where = kept[found].nonzero()
            rows.append(chunk[found][where[:, 0]])
            edges.append(order[found][where[:, 0], where[:, 1]])
        done = torch.zeros(n_rows, dtype=torch.bool)
        done[torch.cat(rows)] = True
        pending = (~done).nonzero().flatten()
        if not pending.numel():
            break
        if size >= graph.n_edges:  # the whole graph is connected, and check_q has q <= p
            raise IntervError(f"no ranking's {graph.n_edges} edges hold {q} connected ones")
        size = min(2 * size, graph.n_edges)
        if progress is not None:
            progress(
                f"stability selection: {pending.numel()} of {n_rows} resamples ranked again to "
                f"depth {size} to reach {q} connected edges"
            )
        tops = resampled_tops(per_prompt, weights[pending], min(size + checked, graph.n_edges))
        again = torch.sort(tops[:, : audit.n_verified], dim=-1).values
        if not torch.equal(again, verified[pending]):  # only their exact values are at hand
            raise IntervError(
                "stability selection: a resample's verified edges changed when it was ranked "
                f"again to depth {size} (a tie at its {audit.n_verified}th estimate broken the "
                "other way); its exact values would be missing. Report this with the command"
            )
    row = torch.cat(rows)
    order = torch.sort(row, stable=True).indices
    sizes = torch.bincount(row, minlength=n_rows)
    return row[order], torch.cat(edges)[order], sizes


def _sentence(
    result: Discovery,
    pi: float,
    q: int,
    n_resamples: int,
    subsample: int,
    seed: int,
    n: int,
    bound: float,
    groups: list[str],
    bootstrap: int | None,
    connected: tuple[float, torch.Tensor, int] | None = None,
) -> str:
    """What a stability selection resampled and selected, and its bound's assumptions
    (``connected``: the circuits' mean size, their sizes, the edges the final pruning dropped).
    """
    scores = result.scores
    method = "EAP" if scores.method == "eap" else f"EAP-IG ({scores.steps} steps)"
    p = result.graph.n_edges
    loto = (
        f"; redone without each of {len(groups)} groups' pairs (half of the rest per "
        "subsample), its Jaccard with the full selection beside it"
        if groups
        else ""
    )
    boot = (
        f"; redone on {bootstrap} bootstrap resamples of the prompts (with replacement, "
        f"{n_resamples} half subsamples of each), its Jaccard with the full selection beside "
        f"it (bar of Méloux et al. 2025: >= 0.8)"
        if bootstrap
        else ""
    )
    ranked = (
        f"ranked as the full result's (the {method} screen's per-prompt estimates re-averaged, "
        f"its own top {result.audit.n_verified} and the full run's audited edges valued by their "
        f"exact per-prompt path-patching effects re-averaged, exact first)"
    )
    if connected is None:
        circuit = f"the top {q} edges {ranked}"
        selected = f"the edges in at least {pi:.0%} of them"
        size = f"{q}"
        assumes = "the ranking does no worse than random guessing on them"
    else:
        mean, sizes, dropped = connected
        circuit = (
            f"a connected circuit: the edges that connect the input to the logits through "
            f"circuit edges (MIB's pruning) in the smallest top n of the edges {ranked} whose "
            f"connected part holds at least {q} edges ({mean:.3g} edges on average, "
            f"{int(sizes.min())}-{int(sizes.max())})"
        )
        selected = (
            f"the edges in at least {pi:.0%} of them, pruned again ({dropped} of those dropped: "
            "not connected through selected edges)"
        )
        size = f"{mean:.3g}"
        assumes = (
            "this rule does no worse than random guessing on them, with q the mean size of "
            "the subsamples' circuits standing for the theorem's expected selection size (a "
            "connected circuit takes edges in paths, so exchangeability is less plausible than "
            "for edges ranked one at a time)"
        )
    return (
        f"stability selection (Meinshausen & Bühlmann 2010) over {n_resamples} subsamples of "
        f"{subsample} of the {n} prompt pairs of {result.task_name} drawn without replacement "
        f"(seed {seed}): on each, {circuit}; selected: {selected}; expected falsely selected "
        f"edges E[V] <= q^2 / ((2 pi - 1) p) = {size}^2 / ({2 * pi - 1:.2g} * {p}) "
        f"= {bound:.3g}, assuming the edges outside the true circuit are included "
        f"exchangeably and {assumes} (not checked), with frequencies estimated from "
        f"{n_resamples} random half subsamples, not all{boot}{loto}"
    )
