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
from interv.circuits.screens import graph_dict
from interv.circuits.stability import (
    Discovery,
    check_resamples,
    resample_circuits,
    resampled_exact,
)
from interv.errors import IntervError
from interv.stats import bootstrap_indices, percentile_interval

if TYPE_CHECKING:
    from interv.tasks.tokenized import TokenizedPairs

__all__ = [
    "SELECTIONS",
    "StableCircuit",
    "check_groups",
    "check_pi",
    "check_q",
    "check_select",
    "false_edge_bound",
    "half_subsamples",
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
        return (
            f"StableCircuit({len(self.selected)} edges with inclusion >= {self.pi:g} in the top "
            f"{self.q} of {self.n_resamples} half subsamples of {self.n_prompts} prompts; "
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

    Raises:
        IntervError: before any forward, for an argument out of range, too few prompts or
            scores without per-prompt values.
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
    depth = q + result.audit.n_verified + int(result.audit.audited.numel())
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
    chosen = resample_circuits(result, tops, exact, weights, q)  # [runs * B, q]
    rank = torch.empty(graph.n_edges, dtype=torch.long)
    rank[result.ranking()] = torch.arange(graph.n_edges)

    def select(run: int) -> tuple[torch.Tensor, tuple[int, ...]]:
        rows = chosen[run * n_resamples : (run + 1) * n_resamples].flatten()
        counts = torch.zeros(graph.n_edges, dtype=torch.float64)
        counts.index_add_(0, rows, torch.ones(rows.numel(), dtype=torch.float64))
        share = counts / n_resamples
        kept = (share >= pi).nonzero().flatten()
        kept = kept[torch.sort(rank[kept], stable=True).indices]  # ties: the full ranking
        return share, tuple(kept[torch.sort(-share[kept], stable=True).indices].tolist())

    inclusion, selected = select(0)
    jaccards = []
    for run in range(1, len(runs)):
        _, other = select(run)
        union = set(other) | set(selected)
        jaccards.append(len(set(other) & set(selected)) / len(union) if union else math.nan)
    boot = torch.tensor(jaccards[n_groups:], dtype=torch.float64)
    low, high = percentile_interval(boot, 0.95, n_items=n) if boot.numel() else (math.nan,) * 2
    bound = false_edge_bound(q, pi, graph.n_edges)
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
            result, pi, q, n_resamples, runs[0][1], seed, n, bound, names, bootstrap
        ),
    )


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
) -> str:
    """What a stability selection resampled and selected, and its bound's assumptions."""
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
    return (
        f"stability selection (Meinshausen & Bühlmann 2010) over {n_resamples} subsamples of "
        f"{subsample} of the {n} prompt pairs of {result.task_name} drawn without replacement "
        f"(seed {seed}): on each, the top {q} edges ranked as the full result's (the {method} "
        f"screen's per-prompt estimates re-averaged, its own top {result.audit.n_verified} and "
        f"the full run's audited edges valued by their exact per-prompt path-patching effects "
        f"re-averaged, exact first); selected: the edges in at least {pi:.0%} of them; expected "
        f"falsely selected edges E[V] <= q^2 / ((2 pi - 1) p) = {q}^2 / ({2 * pi - 1:.2g} * {p}) "
        f"= {bound:.3g}, assuming the edges outside the true circuit are included "
        f"exchangeably and the ranking does no worse than random guessing on them (not "
        f"checked), with frequencies estimated from {n_resamples} random half subsamples, not "
        f"all{boot}{loto}"
    )
