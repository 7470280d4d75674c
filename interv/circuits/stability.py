"""Circuit stability: the circuit found again on bootstrap resamples of the prompts.

>>> stability = circuit_stability(model, task, result, n_resamples=200)  # doctest: +SKIP
>>> stability.to_pandas()     # per size: mean Jaccard with the full-sample circuit, interval
>>> stability.stable_edges(20)  # the full-sample top-20 edges held by >= 80 % of resamples

A circuit found on ``n`` prompt pairs is one draw: on other prompts of the same task the
same method may pick other edges. Méloux et al. (2025) bootstrap the prompts and compare the
circuits (Jaccard 0.67 on GPT-2-small, 0.39 on Llama-3.2-1B for IOI; they propose a bar of
Jaccard >= 0.8 over >= 100 resamples). Here, on each resample ``b`` (the prompts drawn with
replacement, seeded) the whole discovery rule of :func:`interv.circuits.discover` is redone
from per-prompt numbers, without rerunning the screen:

1. the screen's estimate of every edge is the mean of its per-prompt estimates over the
   resample (what the screen would give on those prompts: prompts are independent rows);
2. the resample's verified set is its own top ``n_verified`` by ``|estimate|`` (as many as
   the full run verified), plus the full run's audited edges; their values are the means of
   their *exact* per-prompt path-patching effects over the resample. Exact per-prompt
   effects already computed by the discovery are reused; the edges a resample verifies that
   the full run did not are patched exactly once, in stacked forwards, for every resample at
   once (most resamples cost no forward);
3. its circuit of ``size`` edges is the top ``size`` of the same ranking as
   :meth:`~interv.circuits.CircuitResult.ranking` (checked edges by ``|exact|`` first, then
   the others by ``|estimate|``).

What is not redone: the adaptive extension of the verification (``Screen.alpha``) and the
audit's random sample (both kept from the full run). Reported per size: the Jaccard
``|C_b ∩ C| / |C_b ∪ C|`` of each resample's circuit with the full-sample circuit ``C``,
its mean and percentile interval over resamples, and each edge's inclusion frequency (the
share of resamples whose circuit of that size holds it); an edge of ``C`` is *stable* when
that share is at least ``stable_at``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

import torch

from interv._checks import as_int
from interv._pandas import require_pandas
from interv._schema import parse
from interv.circuits._stored import StoredStability
from interv.circuits.executor import Kept, RayExecutor
from interv.circuits.graph import Edge, Graph
from interv.circuits.patching import edge_effects
from interv.circuits.screens import graph_dict
from interv.errors import IntervError
from interv.provenance import Provenance, join
from interv.stats import MIN_ITEMS, bootstrap_indices, percentile_interval, too_few

if TYPE_CHECKING:
    from interv.audit import Audit
    from interv.circuits.screens import EdgeScores
    from interv.tasks.tokenized import TokenizedPairs

__all__ = [
    "BAR",
    "DEFAULT_SIZES",
    "MAX_RESAMPLES",
    "CircuitStability",
    "check_resamples",
    "circuit_stability",
    "exact_first",
]


class Discovery(Protocol):
    """What :func:`circuit_stability` reads of a discovery: a
    :class:`~interv.circuits.CircuitResult` (which holds the stability it returns, so the
    result is named by what is read of it, and the two modules do not import each other)."""

    @property
    def graph(self) -> Graph: ...
    @property
    def scores(self) -> EdgeScores: ...
    @property
    def audit(self) -> Audit: ...
    @property
    def task_name(self) -> str: ...
    @property
    def provenance(self) -> Provenance: ...
    def ranking(self) -> torch.Tensor: ...


DEFAULT_SIZES: tuple[int, ...] = (20, 100, 500)
"""Circuit sizes (edges) compared by default (those within the graph)."""

BAR = 0.8
"""Méloux et al. (2025)'s proposed bar: Jaccard >= 0.8 over >= 100 resamples."""

FORMAT = "interv.circuit_stability/1"

MAX_RESAMPLES = 10_000
"""The most bootstrap resamples one stability computation takes (the bar needs 100): each
resample holds a row of prompt weights and redoes the ranking of every edge."""

_BYTES_PER_DRAW = 24
"""Memory per resample and prompt: its draw (int64), its count and its weight (float64)."""


def check_resamples(
    n_resamples: Any, n_prompts: int, what: str = "n_resamples", kind: str = "bootstrap resamples"
) -> int:
    """``n_resamples`` as an int, checked with the prompts before any work: 2 to
    :data:`MAX_RESAMPLES` resamples of at least :data:`~interv.stats.MIN_ITEMS` prompt pairs
    (no interval from fewer). ``what`` names the argument in the message, ``kind`` the
    resamples (``"half subsamples"`` for stability selection).

    Raises:
        IntervError: a count out of range (naming the memory it would need) or too few prompts.
    """
    n_resamples = as_int(n_resamples, f"{what} ({kind})", minimum=2)
    if n_resamples > MAX_RESAMPLES:
        need = _BYTES_PER_DRAW * n_resamples * max(n_prompts, 1)
        raise IntervError(
            f"{what} {n_resamples} exceeds the maximum of {MAX_RESAMPLES} {kind}: "
            f"{n_resamples} resamples of {n_prompts} prompt pairs would need at least "
            f"{_size_text(need)} of memory for their tables ({_BYTES_PER_DRAW} bytes per "
            f"resample and prompt), and each resample ranks every edge again; choose "
            f"2..{MAX_RESAMPLES} (the bar of Méloux et al. 2025 asks >= 100)"
        )
    if n_prompts < MIN_ITEMS:
        raise IntervError(
            f"{what}: circuit stability resamples the prompts and gives no interval from fewer "
            f"than {MIN_ITEMS} prompt pairs; the task has {n_prompts}: use at least {MIN_ITEMS} "
            f"pairs, or no {what}"
        )
    return n_resamples


def _size_text(n_bytes: float) -> str:
    """``n_bytes`` in words, decimal units: ``"64.0 TB"``."""
    units = ("bytes", "kB", "MB", "GB", "TB", "PB", "EB")
    power = 0
    while n_bytes >= 1000 and power < len(units) - 1:
        n_bytes /= 1000
        power += 1
    return f"{n_bytes:.0f} bytes" if power == 0 else f"{n_bytes:.1f} {units[power]}"


def exact_first(
    checked: torch.Tensor, exact: torch.Tensor, estimates: torch.Tensor
) -> torch.Tensor:
    """Every index, checked ones by descending ``|exact|`` first, then the others by
    descending ``|estimate|`` (ties by index): the ranking rule of a circuit result."""
    key = torch.where(checked, exact.abs(), estimates.abs())
    order = torch.sort(-key, stable=True).indices
    return torch.cat([order[checked[order]], order[~checked[order]]])


@dataclass(frozen=True, eq=False)
class CircuitStability:
    """How often the circuit is found again on bootstrap resamples of the prompts.

    Attributes:
        graph: the graph.
        sizes: circuit sizes compared (edges).
        circuits: per size, the full-sample circuit (edge indices, best first).
        jaccard: ``[n_sizes, n_resamples]`` float64 Jaccard of each resample's circuit with
            the full-sample one.
        mean, low, high: per size, the mean Jaccard and its percentile interval over
            resamples (``level``).
        inclusion: ``[n_sizes, n_edges]`` float64: the share of resamples whose circuit of
            that size holds each edge.
        n_resamples, seed, level, stable_at: the bootstrap and the stability threshold.
        n_prompts: prompt pairs resampled.
        n_verified: edges each resample verifies (the full run's verified count).
        n_exact_computed: exact per-prompt effects this computation patched (edges a
            resample verified whose per-prompt effects were not given).
        sentence: what was resampled and what the numbers are, in one sentence.
    """

    graph: Graph
    sizes: tuple[int, ...]
    circuits: tuple[tuple[int, ...], ...]
    jaccard: torch.Tensor
    mean: list[float]
    low: list[float]
    high: list[float]
    inclusion: torch.Tensor
    n_resamples: int
    seed: int
    level: float
    stable_at: float
    n_prompts: int
    n_verified: int
    n_exact_computed: int
    sentence: str

    def _row(self, size: int) -> int:
        if size not in self.sizes:
            raise IntervError(f"size {size!r} was not compared; sizes: {list(self.sizes)}")
        return self.sizes.index(size)

    def stable(self, size: int) -> torch.Tensor:
        """``[size]`` bool: which edges of the full-sample circuit of ``size`` edges (in its
        order) are stable (held by at least ``stable_at`` of the resamples)."""
        row = self._row(size)
        circuit = torch.tensor(self.circuits[row], dtype=torch.long)
        return self.inclusion[row, circuit] >= self.stable_at

    def stable_edges(self, size: int) -> list[Edge]:
        """The stable edges of the full-sample circuit of ``size`` edges, best first."""
        row = self._row(size)
        keep = self.stable(size).tolist()
        return [self.graph.edges[i] for i, k in zip(self.circuits[row], keep, strict=True) if k]

    def to_pandas(self) -> Any:
        """One row per size: size, Jaccard mean, low, high, stable edges, meets the bar."""
        pd = require_pandas()
        return pd.DataFrame(
            {
                "size": list(self.sizes),
                "jaccard": self.mean,
                "low": self.low,
                "high": self.high,
                "stable_edges": [int(self.stable(s).sum()) for s in self.sizes],
                f"mean >= {BAR}": [m >= BAR for m in self.mean],
            }
        )

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready data (format ``interv.circuit_stability/1``); :meth:`from_dict` inverts
        it. Inclusion frequencies are kept for the edges some resample's circuit held."""
        inclusion = []
        for row in self.inclusion:
            held = row.nonzero().flatten()
            inclusion.append({"edges": held.tolist(), "share": row[held].tolist()})
        return {
            "format": FORMAT,
            "graph": graph_dict(self.graph),
            "sizes": list(self.sizes),
            "circuits": [list(c) for c in self.circuits],
            "jaccard": self.jaccard.tolist(),
            "mean": self.mean,
            "low": _clean(self.low),
            "high": _clean(self.high),
            "inclusion": inclusion,
            "n_resamples": self.n_resamples,
            "seed": self.seed,
            "level": self.level,
            "stable_at": self.stable_at,
            "n_prompts": self.n_prompts,
            "n_verified": self.n_verified,
            "n_exact_computed": self.n_exact_computed,
            "sentence": self.sentence,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> CircuitStability:
        """The stability :meth:`to_dict` wrote, read through its schema
        (:class:`~interv.circuits._stored.StoredStability`: a damaged field is named)."""
        stored = parse(StoredStability, data, "circuit stability")
        graph = stored.graph
        inclusion = torch.zeros(len(stored.sizes), graph.n_edges, dtype=torch.float64)
        for row, held in enumerate(stored.inclusion):
            inclusion[row, torch.tensor(held.edges, dtype=torch.long)] = torch.tensor(
                held.share, dtype=torch.float64
            )
        return cls(
            graph=graph,
            sizes=tuple(stored.sizes),
            circuits=tuple(tuple(c) for c in stored.circuits),
            jaccard=torch.tensor(stored.jaccard, dtype=torch.float64),
            mean=stored.mean,
            low=stored.low,
            high=stored.high,
            inclusion=inclusion,
            n_resamples=stored.n_resamples,
            seed=stored.seed,
            level=stored.level,
            stable_at=stored.stable_at,
            n_prompts=stored.n_prompts,
            n_verified=stored.n_verified,
            n_exact_computed=stored.n_exact_computed,
            sentence=stored.sentence,
        )

    def __repr__(self) -> str:
        parts = ", ".join(
            f"top-{s} {m:.2f} "
            + (
                f"[{lo:.2f}, {hi:.2f}]"
                if not (math.isnan(lo) or math.isnan(hi))
                else f"({too_few(self.n_prompts) or 'n/a: undefined in every resample'})"
            )
            for s, m, lo, hi in zip(self.sizes, self.mean, self.low, self.high, strict=True)
        )
        return (
            f"CircuitStability({self.n_resamples} resamples of {self.n_prompts} prompts: {parts})"
        )


def _clean(values: Sequence[float]) -> list[float | None]:
    return [None if math.isnan(v) else float(v) for v in values]


def _floats(values: Sequence[float | None]) -> list[float]:
    return [math.nan if v is None else float(v) for v in values]


def _sizes(sizes: Sequence[int] | None, n_edges: int) -> tuple[int, ...]:
    if sizes is None:
        chosen = [s for s in DEFAULT_SIZES if s < n_edges] or [max(1, n_edges // 10)]
        return tuple(chosen)
    if isinstance(sizes, str | int) or not isinstance(sizes, Sequence) or not sizes:
        raise IntervError(f"sizes must be a non-empty sequence of ints; got {sizes!r}")
    out = []
    for size in sizes:
        size = as_int(size, "stability size", minimum=1)
        if size > n_edges:
            raise IntervError(
                f"stability size {size} exceeds the graph's {n_edges} edges; choose sizes in "
                f"1..{n_edges}"
            )
        out.append(size)
    if len(set(out)) != len(out):
        raise IntervError(f"stability sizes must not repeat; got {out}")
    return tuple(sorted(out))


def circuit_stability(
    model: Any,
    task: TokenizedPairs,
    result: Discovery,
    *,
    n_resamples: int = 200,
    sizes: Sequence[int] | None = None,
    stable_at: float = BAR,
    level: float = 0.95,
    seed: int = 0,
    exact_per_prompt: Mapping[int, torch.Tensor] | None = None,
    batch_size: int | None = None,
    progress: Callable[[str], None] | None = None,
    executor: RayExecutor | None = None,
    kept: Kept | None = None,
) -> CircuitStability:
    """Bootstrap the prompts of a discovery and compare the circuits (module docstring).

    Args:
        model: the bridge the discovery ran on (used only to patch the edges a resample
            verifies whose exact per-prompt effects are not in ``exact_per_prompt``).
        task: the discovery's prompt pairs (checked against its fingerprint).
        result: the :class:`~interv.circuits.CircuitResult`; its scores must carry
            per-prompt estimates.
        n_resamples: bootstrap resamples (2..:data:`MAX_RESAMPLES`; >= 100 for Méloux et
            al.'s bar), of at least :data:`~interv.stats.MIN_ITEMS` prompt pairs.
        sizes: circuit sizes in edges; None: 20, 100 and 500 (those below the graph's size).
        stable_at: the inclusion share from which an edge counts as stable.
        level: the Jaccard interval's level.
        seed: the bootstrap's seed.
        exact_per_prompt: edge index -> ``[n_prompts]`` exact per-prompt effects already
            computed (e.g. by :func:`~interv.circuits.discover`); the rest are patched.
        batch_size: edges per stacked exact forward.
        progress: called with short messages.
        executor: where the edges are patched (:mod:`interv.circuits.executor`; None: here).
        kept: a resumable run's store of the edges patched here (:func:`resampled_exact`).

    Returns:
        :class:`CircuitStability`.

    Raises:
        IntervError: before any forward, for an argument out of range, too few prompts,
            another model or prompts than the circuit's, or scores without per-prompt values.
    """
    seed = as_int(seed, "seed")
    if not 0 < float(stable_at) <= 1:
        raise IntervError(f"stable_at must lie in (0, 1]; got {stable_at!r}")
    if not 0 < float(level) < 1:
        raise IntervError(f"level must lie in (0, 1); got {level!r}")
    scores = result.scores
    ours = Provenance.of(model, task, metric=scores.metric, direction=scores.direction)
    join(ours, result, what=("the model and prompts", "the circuit"))
    per_prompt = scores.per_prompt
    if per_prompt is None:
        raise IntervError(
            "circuit stability needs the screen's per-prompt estimates, and these scores carry "
            "none (EdgeScores.to_dict(per_prompt=False) drops them); recompute the scores or "
            "load them with their per-prompt values"
        )
    n = int(per_prompt.shape[1])
    n_resamples = check_resamples(n_resamples, n)
    graph = result.graph
    sizes = _sizes(sizes, graph.n_edges)
    audit = result.audit
    audited = torch.zeros(graph.n_edges, dtype=torch.bool)
    audited[audit.audited] = True
    draws = bootstrap_indices(n, n_resamples, seed)  # [B, n]
    weights = torch.zeros(n_resamples, n, dtype=torch.float64)
    weights.scatter_add_(1, draws, torch.ones_like(draws, dtype=torch.float64))
    weights /= n  # [B, n]: each resample's mean is per_prompt @ weights[b]

    # 1. every resample's screen top (its verified set first), the exact effects it needs
    depth = max(sizes) + audit.n_verified + int(audited.sum())
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
    # 2. each resample's circuit of the largest size (its smaller ones are its prefixes)
    chosen = resample_circuits(result, tops, exact, weights, max(sizes))  # [B, max size]

    # 3. the full-sample circuits; inclusion counts and Jaccards, every resample at once
    full_order = result.ranking()
    circuits = tuple(tuple(full_order[:size].tolist()) for size in sizes)
    counts = torch.zeros(len(sizes), graph.n_edges, dtype=torch.float64)
    jaccard = torch.empty(len(sizes), n_resamples, dtype=torch.float64)
    for row, size in enumerate(sizes):
        mask = torch.zeros(graph.n_edges, dtype=torch.bool)
        mask[full_order[:size]] = True
        prefix = chosen[:, :size]
        counts[row].index_add_(0, prefix.flatten(), torch.ones(prefix.numel(), dtype=torch.float64))
        shared = mask[prefix].sum(-1).double()
        jaccard[row] = shared / (2 * size - shared)
    intervals = [percentile_interval(row, level, n_items=n) for row in jaccard]
    return CircuitStability(
        graph=graph,
        sizes=sizes,
        circuits=circuits,
        jaccard=jaccard,
        mean=jaccard.mean(-1).tolist(),
        low=[low for low, _ in intervals],
        high=[high for _, high in intervals],
        inclusion=counts / n_resamples,
        n_resamples=n_resamples,
        seed=seed,
        level=float(level),
        stable_at=float(stable_at),
        n_prompts=n,
        n_verified=audit.n_verified,
        n_exact_computed=n_patched,
        sentence=_sentence(
            result, n_resamples, seed, n, int(audited.sum()), n_patched, level, stable_at
        ),
    )


_CHUNK = 32
"""Resamples whose screen estimates are averaged in one product (``[n_edges, 32]``)."""


def stable_top(keys: torch.Tensor, k: int) -> torch.Tensor:
    """``[rows, k]`` int64: each row's indices of its ``k`` largest ``keys``, descending,
    ties by index, NaN last: ``torch.sort(-keys, stable=True).indices[:, :k]`` without
    sorting every column (a top-k, then a sort of the candidates at or above its k-th value).
    """
    rows, width = keys.shape
    k = min(k, width)
    if keys.isnan().any():
        keys = torch.where(keys.isnan(), -math.inf, keys)
    out = torch.empty(rows, k, dtype=torch.long)
    if k == 0 or rows == 0:
        return out
    values, index = keys.topk(k, dim=1)
    simple = (keys >= values[:, -1:]).sum(-1) == k  # no tie straddles the k-th value
    if simple.any():
        index = torch.sort(index[simple], dim=1).values  # ascending: ties by index below
        order = torch.sort(-keys[simple].gather(1, index), dim=1, stable=True).indices
        out[simple] = index.gather(1, order)
    for row in (~simple).nonzero().flatten().tolist():
        above = (keys[row] >= values[row, -1]).nonzero().flatten()
        order = torch.sort(-keys[row, above], stable=True).indices[:k]
        out[row] = above[order]
    return out


def reachable(per_prompt: torch.Tensor, weights: torch.Tensor, depth: int) -> torch.Tensor:
    """The edges (ascending indices) that can be in some resample's top ``depth`` by
    ``|per_prompt @ weights[b]|``: a resample's estimate of an edge is at most its largest
    per-prompt ``|estimate|`` times the resample's weight sum (weights are not negative), so
    an edge whose bound is below every resample's ``depth``-th largest ``|estimate|`` over a
    probe of likely edges (the ``4 depth`` largest by ``|prompt mean|``) cannot be in any
    resample's top. Every edge when the probe would not prune (or an estimate is NaN)."""
    n_edges = per_prompt.shape[0]
    everything = torch.arange(n_edges)
    if 8 * depth >= n_edges or per_prompt.isnan().any() or (weights < 0).any():
        return everything
    probe = per_prompt.mean(-1).abs().topk(4 * depth).indices
    low = (per_prompt[probe] @ weights.T).abs().topk(depth, dim=0).values[-1]  # [B]
    floor = (low / weights.sum(-1)).min() * (1 - 1e-9)  # slack: the products' rounding
    return (per_prompt.abs().amax(-1) >= floor).nonzero().flatten()


def resampled_tops(per_prompt: torch.Tensor, weights: torch.Tensor, depth: int) -> torch.Tensor:
    """``[n_resamples, depth]`` int64: each resample's top ``depth`` edges by
    ``|per_prompt @ weights[b]|``, ties by index (:func:`stable_top`), computed on the
    :func:`reachable` edges only, 32 resamples per product."""
    columns = reachable(per_prompt, weights, depth)
    rows = per_prompt[columns]
    return torch.cat(
        [
            columns[stable_top((rows @ weights[first : first + _CHUNK].T).T.abs(), depth)]
            for first in range(0, weights.shape[0], _CHUNK)
        ]
    )


def resampled_exact(
    model: Any,
    task: TokenizedPairs,
    result: Discovery,
    weights: torch.Tensor,
    exact_per_prompt: Mapping[int, torch.Tensor] | None,
    batch_size: int | None,
    progress: Callable[[str], None] | None,
    *,
    depth: int,
    executor: RayExecutor | None = None,
    kept: Kept | None = None,
) -> tuple[torch.Tensor, torch.Tensor, int]:
    """Each resample's screen top and the exact per-prompt effects its ranking needs.

    ``weights`` is ``[n_resamples, n_prompts]``, each row the resample's prompt weights
    (summing to 1): a resample's estimate of an edge is ``per_prompt @ weights[b]`` (computed
    for 32 resamples in one product). Its verified set is the first ``n_verified`` of its top.
    The exact per-prompt effects of the edges some resample verifies or the full run audited
    are taken from ``exact_per_prompt`` where given, else patched once (stacked forwards, on
    the ``executor``'s workers where given); when ``exact_per_prompt`` is a dict the
    patched ones are added to it (a later computation on the same result reuses them).
    ``kept`` (a resumable run's, :class:`~interv.circuits.executor.Kept`): the edges an
    interrupted run patched here are taken from ``kept.stored`` (and counted as patched
    here, as the uninterrupted run counts them), the others patched and handed to
    ``kept.keep`` as each stacked forward returns.

    Returns:
        (``[n_resamples, depth]`` int64: each resample's top ``depth`` edges by
        ``|estimate|``, ties by index; ``[n_edges, n_prompts]`` float64 exact per-prompt
        effects, 0 where not needed; the number of edges patched here).
    """
    scores, graph, audit = result.scores, result.graph, result.audit
    per_prompt = scores.per_prompt
    n = int(per_prompt.shape[1])
    tops = resampled_tops(per_prompt, weights, depth)
    needed = torch.zeros(graph.n_edges, dtype=torch.bool)
    needed[audit.audited] = True
    needed[tops[:, : audit.n_verified].flatten()] = True
    exact = _given_exact(graph, exact_per_prompt, n)
    missing = (needed & exact.isnan().any(-1)).nonzero().flatten()
    if missing.numel():
        todo = missing.tolist()
        earlier = {} if kept is None else {i: kept.stored[i] for i in todo if i in kept.stored}
        fresh = [i for i in todo if i not in earlier]
        if progress is not None:
            again = f" ({len(earlier)} stored by an interrupted run)" if earlier else ""
            progress(f"stability: exact per-prompt path patching of {len(fresh)} edges{again}")

        def keep(positions: list[int], rows: torch.Tensor) -> None:
            if kept is not None:  # as each stacked forward returns
                kept.keep([fresh[p] for p in positions], rows)

        patched = edge_effects(
            model,
            task,
            graph,
            fresh,
            metric=scores.metric,
            batch_size=batch_size,
            per_prompt=True,
            on_batch=None if kept is None else keep,
            executor=executor,
        )
        found = dict(zip(fresh, patched, strict=True)) | earlier
        values = torch.stack([torch.as_tensor(found[i], dtype=torch.float64) for i in todo])
        exact[missing] = values
        if isinstance(exact_per_prompt, dict):
            for index, row in zip(missing.tolist(), values, strict=True):
                exact_per_prompt[index] = row.double()
    return tops, exact.nan_to_num(0.0), int(missing.numel())


def resample_circuits(
    result: Discovery,
    tops: torch.Tensor,
    exact: torch.Tensor,
    weights: torch.Tensor,
    size: int,
) -> torch.Tensor:
    """``[n_resamples, size]`` int64: each resample's top ``size`` of its ranking
    (:func:`exact_first`): its verified edges (the first ``n_verified`` of ``tops``) and the
    full run's audited ones by ``|exact|`` re-averaged with its ``weights``, then the rest by
    ``|estimate|`` re-averaged (the order of ``tops``, which must reach ``size`` plus the
    checked edges)."""
    return torch.cat(
        [
            _circuits(
                result, tops[first : first + 1024], exact, weights[first : first + 1024], size
            )
            for first in range(0, weights.shape[0], 1024)
        ]
    )


def _circuits(
    result: Discovery, tops: torch.Tensor, exact: torch.Tensor, weights: torch.Tensor, size: int
) -> torch.Tensor:
    """:func:`resample_circuits` on one chunk of resamples."""
    graph, audit = result.graph, result.audit
    n_rows = weights.shape[0]
    needed = torch.zeros(graph.n_edges, dtype=torch.bool)
    needed[audit.audited] = True
    needed[tops[:, : audit.n_verified].flatten()] = True
    columns = needed.nonzero().flatten()  # ascending: ties by index
    column_of = torch.full((graph.n_edges,), -1, dtype=torch.long)
    column_of[columns] = torch.arange(columns.numel())
    checked = torch.zeros(n_rows, columns.numel(), dtype=torch.bool)
    checked[:, column_of[audit.audited]] = True
    checked.scatter_(1, column_of[tops[:, : audit.n_verified]], True)
    means = (exact[columns] @ weights.T).T.abs()  # [B, needed]
    key = torch.where(checked, means, -math.inf)
    by_exact = columns[torch.sort(-key, dim=1, stable=True).indices]
    first = torch.arange(columns.numel()).expand(n_rows, -1) < checked.sum(-1, keepdim=True)
    where = column_of[tops]
    in_checked = (where >= 0) & checked.gather(1, where.clamp(min=0))
    merged = torch.cat([by_exact, tops], 1)
    keep = torch.cat([first, ~in_checked], 1)
    order = torch.sort((~keep).to(torch.int8), dim=1, stable=True).indices[:, :size]
    return merged.gather(1, order)


def _given_exact(
    graph: Graph, exact_per_prompt: Mapping[int, torch.Tensor] | None, n: int
) -> torch.Tensor:
    """``[n_edges, n]`` float64: the given exact per-prompt effects, NaN where none given."""
    exact = torch.full((graph.n_edges, n), torch.nan, dtype=torch.float64)
    for index, values in dict(exact_per_prompt or {}).items():
        row = torch.as_tensor(values, dtype=torch.float64).flatten()
        if row.numel() != n:
            raise IntervError(
                f"exact_per_prompt[{index}] holds {row.numel()} values for {n} prompts"
            )
        exact[graph.index(index)] = row
    return exact


def _sentence(
    result: Discovery,
    n_resamples: int,
    seed: int,
    n: int,
    n_audited: int,
    n_patched: int,
    level: float,
    stable_at: float,
) -> str:
    """What a stability computation resampled and what its numbers are, in one sentence."""
    scores = result.scores
    method = "EAP" if scores.method == "eap" else f"EAP-IG ({scores.steps} steps)"
    return (
        f"circuit stability over {n_resamples} bootstrap resamples (seed {seed}) of the "
        f"{n} prompt pairs of {result.task_name}: on each, the {method} screen's per-prompt "
        f"estimates re-averaged, its own top {result.audit.n_verified} by |estimate| and the "
        f"full run's {n_audited} audited edges valued by their exact per-prompt path-patching "
        f"effects re-averaged ({n_patched} edges patched for this, the rest reused), "
        f"the circuit of each size ranked as the full result's (exact first); Jaccard with "
        f"the full-sample circuit of the same size, {level:.0%} percentile interval over "
        f"resamples; an edge is stable when at least {stable_at:.0%} of the resamples' "
        f"circuits hold it; not redone: the screen's adaptive extension and its audit sample "
        f"(the full run's); bar (Méloux et al. 2025): Jaccard >= {BAR} over >= 100 resamples"
    )
