"""The schemas of the files a circuit directory holds, read by interv's one typed reader
(internal: the file format, not the public face).

>>> stored = read(path / "scores.json", StoredScores, "edge scores")  # doctest: +SKIP

One dataclass per stored file (:mod:`interv._schema`): ``scores.json``
(:class:`StoredScores`, ``EdgeScores.to_dict()``), ``circuit.json`` (:class:`StoredCircuit`,
``CircuitResult.to_dict()``), ``faithfulness.json`` (:class:`StoredCurve`), each line of
``exact.jsonl`` (:class:`ExactRecord`) and of ``curves.jsonl`` (:class:`CurveRecord`) and
``manifest.json`` (:class:`CircuitManifest`);
``mission.json`` is read as :class:`~interv.circuits.mission.MissionLink` itself. Each
field's type and range is its annotation; what spans fields (equal lengths, the edges in the
graph's canonical order, statuses that agree with the audit) is checked by the dataclass.
A damaged field is named by its path in one line.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Annotated, Any, Literal

from interv._journal import STATUSES
from interv._schema import AtLeast, Finite, Within
from interv.audit import StoredAudit
from interv.circuits.graph import Graph
from interv.errors import IntervError
from interv.provenance import Provenance

__all__ = [
    "CircuitManifest",
    "CurveKey",
    "CurveRecord",
    "ExactRecord",
    "StoredCircuit",
    "StoredCurve",
    "StoredScores",
    "StoredSelection",
    "StoredStability",
    "curve_sizes",
    "trapezoids",
]

Count = Annotated[int, AtLeast(0)]
Finites = Annotated[list[float], Finite()]
Interval = tuple[float, float]
Share = Annotated[float, Finite(), Within(0.0, 1.0)]
"""A share (of resamples, of edges): a finite number in [0, 1]."""
METHODS = Literal["eap", "eap-ig"]


MAX_HEADS = 10**6
"""The most attention heads (layers x heads) a stored graph may have: 60 times the largest
model's (126 x 128); a graph beyond it is damage, refused before its edges are counted."""


def _shaped(graph: Graph, n_edges: int | None = None) -> None:
    """Refuse a graph beyond any model (or, given the stored edges' count, beyond it: each
    head receives at least one edge) before its edges are enumerated."""
    heads = graph.n_layers * graph.n_heads
    if heads > MAX_HEADS or (n_edges is not None and heads > n_edges):
        raise IntervError(
            f"graph.n_layers x graph.n_heads is {graph.n_layers} x {graph.n_heads}: beyond "
            f"{'any model' if heads > MAX_HEADS else f'the {n_edges} stored edges'}"
        )


def _same_length(owner: Any, names: tuple[str, ...], n: int, of: str) -> None:
    for name in names:
        found = len(getattr(owner, name))
        if found != n:
            raise IntervError(f"'{name}' holds {found} entries for {n} {of}")


@dataclass(frozen=True)
class StoredScores:
    """``scores.json``: a screen's estimate of every edge (``EdgeScores.to_dict()``)."""

    format: Literal["interv.edge_scores/1"]
    graph: Graph
    scores: Finites
    per_prompt: list[Finites] | None
    method: METHODS
    steps: Annotated[int, AtLeast(1)]
    metric: str
    fingerprint: str
    sentence: str
    direction: Literal["noise", "denoise"]
    qk_fix: bool
    provenance: Provenance
    unit: str
    hvp: Annotated[int, AtLeast(0)] = 0
    reliability: list[float] | None = None  # null: not computed (or a zero first-order term)

    def __post_init__(self) -> None:
        _shaped(self.graph, len(self.scores))
        n = self.graph.n_edges
        _same_length(self, ("scores",), n, "edges of the graph")
        if self.reliability is not None:
            _same_length(self, ("reliability",), n, "edges of the graph")
        if self.per_prompt is not None:
            _same_length(self, ("per_prompt",), n, "edges of the graph")
            widths = {len(row) for row in self.per_prompt}
            if len(widths) > 1:
                raise IntervError(f"'per_prompt' rows hold different numbers of prompts {widths}")


@dataclass(frozen=True)
class StoredInclusion:
    """Per circuit size, the edges some resample's circuit held and the share that did."""

    edges: list[Count]
    share: list[Share]

    def __post_init__(self) -> None:
        _same_length(self, ("share",), len(self.edges), "edges")


@dataclass(frozen=True)
class StoredStability:
    """A circuit's stability over bootstrap resamples (``CircuitStability.to_dict()``)."""

    format: Literal["interv.circuit_stability/1"]
    graph: Graph
    sizes: list[Annotated[int, AtLeast(1)]]
    circuits: list[list[Count]]
    jaccard: list[list[Share]]
    mean: list[Share]
    low: list[Annotated[float, Within(0.0, 1.0)]]
    high: list[Annotated[float, Within(0.0, 1.0)]]
    inclusion: list[StoredInclusion]
    n_resamples: Annotated[int, AtLeast(1)]
    seed: int
    level: Annotated[float, Finite(), Within(0.0, 1.0)]
    stable_at: Annotated[float, Finite(), Within(0.0, 1.0)]
    n_prompts: Count
    n_verified: Count
    n_exact_computed: Count
    sentence: str

    def __post_init__(self) -> None:
        names = ("circuits", "jaccard", "mean", "low", "high", "inclusion")
        _same_length(self, names, len(self.sizes), "circuit sizes")
        _shaped(self.graph)
        n_edges = self.graph.n_edges
        outside = [
            i
            for group in (*self.circuits, *(row.edges for row in self.inclusion))
            for i in group
            if i >= n_edges
        ]
        if outside:
            raise IntervError(f"edge index {outside[0]} is outside the graph's {n_edges} edges")
        for i, (size, circuit) in enumerate(zip(self.sizes, self.circuits, strict=True)):
            if size > n_edges or len(circuit) != size:
                raise IntervError(
                    f"sizes[{i}] is {size}; circuits[{i}] holds {len(circuit)} edges of the "
                    f"graph's {n_edges}"
                )
        for i, row in enumerate(self.jaccard):
            if len(row) != self.n_resamples:
                raise IntervError(
                    f"jaccard[{i}] holds {len(row)} values for n_resamples {self.n_resamples}"
                )
        for i, (low, high) in enumerate(zip(self.low, self.high, strict=True)):
            _interval(f"low[{i}], high[{i}]", (low, high))


@dataclass(frozen=True)
class StoredSelection:
    """A circuit chosen by stability selection (``StableCircuit.to_dict()``)."""

    format: Literal["interv.stable_circuit/1"]
    graph: Graph
    selected: list[Count]
    inclusion_edges: list[Count]
    inclusion_share: list[float]
    pi: float
    q: Annotated[int, AtLeast(1)]
    n_resamples: Annotated[int, AtLeast(2)]
    subsample: Annotated[int, AtLeast(1)]
    seed: int
    n_prompts: Count
    bound: float
    n_verified: Count
    n_exact_computed: Count
    groups: list[str]
    group_pairs: list[Count]
    group_jaccard: list[float]
    jaccard: list[float]
    jaccard_mean: float
    jaccard_low: float
    jaccard_high: float
    sentence: str
    connected: bool = False
    mean_size: float | None = None
    n_pruned: Count = 0

    def __post_init__(self) -> None:
        _same_length(self, ("inclusion_share",), len(self.inclusion_edges), "inclusion edges")
        _same_length(self, ("group_pairs", "group_jaccard"), len(self.groups), "groups")
        if not 0.5 < self.pi <= 1:
            raise IntervError(f"'pi' is {self.pi!r}; a stability selection's pi lies in (0.5, 1]")
        if not self.connected and self.n_pruned:
            raise IntervError(
                f"'n_pruned' is {self.n_pruned!r} in a plain selection; only a connected one "
                "prunes its selected edges"
            )
        if self.connected != (self.mean_size is not None) or not (
            self.mean_size is None or self.q <= self.mean_size < math.inf
        ):
            raise IntervError(
                f"'mean_size' is {self.mean_size!r} with connected {self.connected!r}; a connected "
                f"selection's circuits hold q ({self.q}) edges or more on average (a finite "
                "number), a plain one's none is given"
            )
        _shaped(self.graph)  # before its edges are counted
        n_edges = self.graph.n_edges
        for name in ("selected", "inclusion_edges"):
            outside = [i for i in getattr(self, name) if i >= n_edges]
            if outside:
                raise IntervError(
                    f"'{name}' holds edge index {outside[0]}, outside the graph's {n_edges} edges"
                )


@dataclass(frozen=True)
class StoredCircuit:
    """``circuit.json``: a screened, verified and audited ranking (``CircuitResult.to_dict()``):
    the edges' labels, scores, exact values and statuses beside the audit and the scores
    they repeat, which must agree."""

    format: Literal["interv.circuit/1"]
    model: str
    task: str
    fingerprint: str
    method: METHODS
    steps: Annotated[int, AtLeast(1)]
    qk_fix: bool
    metric: str
    edges: list[str]
    scores: Finites
    exact: list[float]
    status: list[Literal["exact (verified)", "exact (audit)", "estimated"]]
    audit: StoredAudit
    sentence: str
    edge_scores: StoredScores
    stability: StoredStability | None = None
    selection: StoredSelection | None = None

    def __post_init__(self) -> None:
        graph = self.edge_scores.graph
        _same_length(self, ("edges", "scores", "exact", "status"), graph.n_edges, "edges")
        for i, (label, edge) in enumerate(zip(self.edges, graph.edges, strict=True)):
            if label != edge.label:
                raise IntervError(
                    f"edges[{i}] is {label!r}; the graph's canonical order has {edge.label!r}"
                )
        _same_length(self.audit, ("estimates",), graph.n_edges, "edges")
        for name, mine, audits in (
            ("status", self.status, self.audit.status),
            ("scores", self.scores, self.edge_scores.scores),
            ("exact", self.exact, self.audit.exact),
        ):
            for i, (a, b) in enumerate(zip(mine, audits, strict=True)):
                if a != b and not (isinstance(a, float) and math.isnan(a) and math.isnan(b)):
                    raise IntervError(
                        f"{name}[{i}] (edge {self.edges[i]!r}) is {a!r} but the stored audit "
                        f"or scores say {b!r}"
                    )


@dataclass(frozen=True)
class StoredCurve:
    """``faithfulness.json``: a faithfulness curve (``FaithfulnessCurve.to_dict()``)."""

    format: Literal["interv.faithfulness/1"]
    fingerprint: str
    fractions: Finites
    n_edges_kept: list[Annotated[int, AtLeast(1)]]
    per_prompt: list[list[float]]
    mean: Finites
    low: list[float]
    high: list[float]
    signed_mean: Finites
    m_full: Annotated[float, Finite()]
    m_empty: Annotated[float, Finite()]
    cpr: Annotated[float, Finite()]
    cmd: Annotated[float, Finite(), AtLeast(0)]
    cpr_interval: Interval
    cmd_interval: Interval
    complement: Literal["corrupted", "mean"]
    sentence: str
    provenance: Provenance
    ranking: Provenance | None
    greedy: bool = False
    convention: Literal["interv", "mib"] = "interv"
    n_edges_pruned: tuple[list[Count], list[Count]] | None = None

    def __post_init__(self) -> None:
        n = len(self.fractions)
        for pruned in self.n_edges_pruned or ():
            if len(pruned) != n:
                raise IntervError(f"'n_edges_pruned' holds {len(pruned)} entries for {n} fractions")
        names = ("n_edges_kept", "per_prompt", "mean", "low", "high", "signed_mean")
        _same_length(self, names, n, "fractions")
        widths = {len(row) for row in self.per_prompt}
        if len(widths) > 1:
            raise IntervError(f"'per_prompt' rows hold different numbers of prompts {widths}")
        bad = [f for f in self.fractions if not 0 < f <= 1]
        if bad:
            raise IntervError(f"fractions must lie in (0, 1]; got {bad[0]!r}")
        if any(b <= a for a, b in itertools.pairwise(self.fractions)):
            raise IntervError(f"fractions must increase; got {self.fractions}")
        if self.m_full == self.m_empty:
            raise IntervError(
                f"m_full and m_empty are both {self.m_full}: faithfulness is undefined there"
            )
        curve_sizes(self.fractions, self.n_edges_kept, self.convention)
        for pruned in self.n_edges_pruned or ():
            kept = zip(pruned, self.n_edges_kept, strict=True)
            over = [i for i, (a, b) in enumerate(kept) if a > b]
            if over:
                i = over[0]
                raise IntervError(
                    f"n_edges_pruned keeps {pruned[i]} edges of a circuit of "
                    f"{self.n_edges_kept[i]} at fraction {self.fractions[i]}"
                )
        for i, (low, high) in enumerate(zip(self.low, self.high, strict=True)):
            _interval(f"low[{i}], high[{i}]", (low, high))
        _interval("cpr_interval", self.cpr_interval)
        _interval("cmd_interval", self.cmd_interval)
        for name, stored, curve in (
            ("cpr", self.cpr, self.signed_mean),
            ("cmd", self.cmd, [abs(1.0 - f) for f in self.mean]),
        ):
            area = trapezoids(self.fractions, curve)
            if not math.isclose(stored, area, rel_tol=1e-9, abs_tol=1e-12):
                source = "signed_mean" if name == "cpr" else "mean"
                raise IntervError(
                    f"{name} is {stored!r} but the stored curve ({source} over fractions) "
                    f"gives {area!r}"
                )


def trapezoids(fractions: Sequence[float], values: Sequence[float]) -> float:
    """The trapezoid area under ``values`` over ``fractions``: what CPR (of the signed
    curve) and CMD (of ``|1 - f|``) are (:func:`interv.circuits.curves.cpr`, ``cmd``)."""
    return sum(
        (b - a) * (y + z) / 2
        for (a, y), (b, z) in itertools.pairwise(zip(fractions, values, strict=True))
    )


def _interval(name: str, interval: tuple[float, float]) -> None:
    low, high = interval
    if low > high:  # NaN (no interval: too few prompts) compares False
        raise IntervError(f"{name} runs from {low!r} down to {high!r}")


def curve_sizes(
    fractions: Sequence[float], kept: Sequence[int], convention: str, n_edges: int | None = None
) -> None:
    """Refuse circuit sizes that do not follow one edge count ``N`` as the convention says
    (``max(1, round(p N))``; MIB ``int(p N)``): the graph's ``n_edges`` where given, else any
    count that gives the largest fraction's size."""
    if any(b < a for a, b in itertools.pairwise(kept)):
        raise IntervError(f"n_edges_kept must not shrink as the fractions grow; got {kept}")

    def size(p: float, n: int) -> int:
        return int(p * n) if convention == "mib" else max(1, round(p * n))

    last_p, last = fractions[-1], kept[-1]
    if n_edges is not None:
        counts = [n_edges]
    elif last_p == 1:
        counts = [last]
    else:
        start = max(1, math.floor((last - 0.5) / last_p))
        counts = range(start, start + min(int(2 / last_p) + 2, 10_000))
        counts = [n for n in counts if size(last_p, n) == last] or [start]
    for n in counts:
        if [size(p, n) for p in fractions] == kept:
            return
    expected = [size(p, counts[0]) for p in fractions]
    i = next(i for i, (a, b) in enumerate(zip(expected, kept, strict=True)) if a != b)
    source = "the circuit's graph" if n_edges is not None else f"the size {last} at {last_p}"
    raise IntervError(
        f"n_edges_kept[{i}] is {kept[i]} at fraction {fractions[i]}, but a graph of "
        f"{counts[0]} edges ({source}) gives {expected[i]}"
    )


@dataclass(frozen=True)
class ExactRecord:
    """One line of ``exact.jsonl``: a batch of exact edge effects, their prompt means
    (``values``) and each edge's per-prompt effects (``per_prompt``, one row per edge; a line
    written before interv stored them has none, and the stability figures patch its edges
    again). Each row must average to its edge's value (within float64 rounding). ``stage``
    ``"resamples"``: edges only the stability resamples or the selection's subsamples
    verified (absent: the discovery's verified and audited edges)."""

    indices: list[Count]
    values: Finites
    per_prompt: list[Finites] | None = None
    stage: Literal["resamples"] | None = None

    def __post_init__(self) -> None:
        _same_length(self, ("values",), len(self.indices), "indices")
        if self.per_prompt is None:
            if self.stage is not None:
                raise IntervError("'stage' is 'resamples' but the line holds no 'per_prompt'")
            return
        _same_length(self, ("per_prompt",), len(self.indices), "indices")
        _same_width(self.per_prompt)
        rows = zip(self.indices, self.values, self.per_prompt, strict=True)
        for i, (index, value, row) in enumerate(rows):
            mean = math.fsum(row) / len(row)
            scale = max(abs(x) for x in row)
            if not math.isclose(mean, value, rel_tol=1e-9, abs_tol=1e-9 * scale):
                raise IntervError(
                    f"'per_prompt'[{i}] (edge {index}) averages {mean!r}, not 'values'[{i}] "
                    f"{value!r}"
                )


def _same_width(rows: list[list[float]]) -> None:
    widths = {len(row) for row in rows}
    if len(widths) > 1 or 0 in widths:
        raise IntervError(f"'per_prompt' rows hold different numbers of prompts {widths}")


@dataclass(frozen=True)
class CurveKey:
    """Which faithfulness curve a line of ``curves.jsonl`` belongs to: its settings (the
    ``fingerprint`` of :attr:`~interv.circuits.FaithfulnessCurve.fingerprint`: the model,
    prompts and metric, the complement, fractions, greedy, convention and selection, also
    spelled out here) and its circuits (``order``: the SHA-256 of their edge masks, in
    order; ``n_circuits`` of them, the empty one last), each evaluated on ``n_prompts``
    prompt pairs. A line of another key is another curve's, never read for this one."""

    fingerprint: str
    order: str
    n_circuits: Annotated[int, AtLeast(1)]
    n_prompts: Annotated[int, AtLeast(1)]
    fractions: Finites
    complement: Literal["corrupted", "mean"]
    convention: Literal["interv", "mib"]
    greedy: bool
    selection: bool


@dataclass(frozen=True)
class CurveRecord:
    """One line of ``curves.jsonl``: the per-prompt metric of some circuits of one curve
    (``circuits``: their positions among the curve's, one ``per_prompt`` row each), stored
    as the job that evaluated them returned."""

    curve: CurveKey
    circuits: list[Count]
    per_prompt: list[Finites]

    def __post_init__(self) -> None:
        _same_length(self, ("per_prompt",), len(self.circuits), "circuits")
        widths = {len(row) for row in self.per_prompt} - {self.curve.n_prompts}
        if widths:
            raise IntervError(
                f"'per_prompt' holds rows of {min(widths)} prompts for the curve's "
                f"{self.curve.n_prompts}"
            )
        outside = [i for i in self.circuits if i >= self.curve.n_circuits]
        if outside:
            raise IntervError(
                f"circuit {outside[0]} is outside the curve's {self.curve.n_circuits} circuits"
            )


@dataclass(frozen=True)
class CircuitManifest:
    """``manifest.json`` of a circuit directory (:mod:`interv._journal`)."""

    format: Literal["interv-circuit-run/1"]
    identity: dict[str, Any]
    versions: dict[str, str]
    started: str
    status: Literal[STATUSES]  # type: ignore[valid-type]
    resumed: list[str] = field(default_factory=list)
    finished: str | None = None
    error: str | None = None
    stopped: str | None = None
    computed_in_last_run: Count | None = None
    stored_before: Count | None = None
    circuits_in_last_run: Count | None = None
    circuits_stored_before: Count | None = None
