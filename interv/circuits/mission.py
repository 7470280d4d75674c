"""The mission link: a circuit's heads beside their concentration, and how the two rank.

>>> link = mission_link(circuit, concentration(model, task, query_positions=[-1]))
>>> link.circuit_heads[0].label, link.parked_outside

A circuit (:func:`interv.circuits.discover`) says which *edges* carry a behaviour; a
concentration analysis (:func:`interv.concentration`) says how each head spreads its
attention. :func:`mission_link` puts the two side by side for every attention head:

- each head of the circuit with its mean normalized entropy, sink mass and contribution
  norm (clean run, at the concentration's query positions) beside the circuit edges it
  sends or receives, each edge with its screen score, its exact effect and its status;
- Spearman's rho across heads of each of those three numbers with circuit *membership*
  (1 if the head sends or receives a circuit edge, else 0; every head of the model) and
  with edge *strength* (the summed ``|exact effect|`` of the circuit edges the head sends
  or receives; the circuit's heads only), each with a percentile bootstrap interval over
  prompts of the concentration means (the circuit's exact effects, means over the same
  prompts, are held fixed); n/a, with the reason, below the statistics' own minimum
  (:data:`interv.stats.MIN_ITEMS` heads for a rank correlation, prompts for an interval);
- the concentrated, sink-parked heads outside the circuit (normalized entropy at most
  ``FlagRules.concentrated_at_most`` and sink mass above ``FlagRules.sink_mass_above``):
  heads whose attention looks decisive that the circuit does not use.

Under grouped-query attention an edge into a key or value input ends at a key/value head
(``L1KV0.k``); every query head that reads that key/value head counts as its receiver.
Only exact effects enter the strength (an estimated circuit edge is listed, never summed).
The circuit and the concentration must come from the same model and prompts: their
provenances are joined (:func:`interv.provenance.join`), and the link carries the join.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Annotated, Any, Literal

import torch

from interv._checks import as_int
from interv._schema import AtLeast, Finite, Keys, NonEmpty, Within, json_ready, parse
from interv.analysis.concentration import HeadConcentration
from interv.circuits.discovery import CircuitResult
from interv.circuits.graph import Edge, Graph
from interv.errors import IntervError
from interv.flags import FlagRules
from interv.provenance import Provenance, join
from interv.stats import MIN_ITEMS, bootstrap_indices, percentile_interval, spearman, too_few

__all__ = [
    "LINK_METRICS",
    "CircuitEdge",
    "CircuitHead",
    "MissionLink",
    "RankAgreement",
    "mission_link",
]

LINK_METRICS: dict[str, str] = {
    "normalized_entropy": "fraction of log(n)",
    "sink_mass": "fraction of the row's mass",
    "contribution_norm": "residual-stream norm",
}
"""The concentration numbers shown beside a circuit's heads, and their units."""

SENTENCES = ("circuit", "concentration", "agreement", "parked")
"""The semantics a link carries, one sentence each."""

Count = Annotated[int, AtLeast(0)]
Share = Annotated[float, Within(0.0, 1.0)]
Metrics = Annotated[dict[str, float], Keys(tuple(LINK_METRICS))]


@dataclass(frozen=True)
class CircuitEdge:
    """One circuit edge as the link shows it (score = screen estimate, exact = the exact
    path-patching effect or None; both in the metric's unit)."""

    label: str
    score: Annotated[float, Finite()]
    exact: Annotated[float, Finite()] | None
    status: Literal["exact (verified)", "exact (audit)", "estimated"]

    def __post_init__(self) -> None:
        if (self.exact is None) != (self.status == "estimated"):
            raise IntervError(f"edge {self.label!r} is {self.status!r} with exact {self.exact}")


@dataclass(frozen=True)
class CircuitHead:
    """One attention head beside the circuit.

    Attributes:
        label: ``L1H2``.
        layer, head: the query head.
        in_circuit: it sends or receives a circuit edge.
        strength: summed ``|exact|`` of those edges (metric unit; estimated ones left out).
        edges: those edges, strongest first.
        concentration: metric -> mean over prompts (see :data:`LINK_METRICS` for units).
        spread: metric -> standard deviation over prompts.
        parked: concentrated and sink-parked (the link's rule).
    """

    label: str
    layer: Count
    head: Count
    in_circuit: bool
    strength: Annotated[float, Finite(), AtLeast(0)]
    edges: tuple[CircuitEdge, ...]
    concentration: Metrics
    spread: Metrics
    parked: bool

    def __post_init__(self) -> None:
        if self.label != f"L{self.layer}H{self.head}":
            raise IntervError(
                f"head {self.label!r} is stored as layer {self.layer}, head {self.head}"
            )
        for name, value in self.concentration.items():
            high = None if name == "contribution_norm" else 1.0 + 1e-6  # a share of the row
            Within(-1e-6 if high else 0.0, high).check(value, f"{self.label}.concentration.{name}")
        for name, value in self.spread.items():
            Within(0.0).check(value, f"{self.label}.spread.{name}")
        if self.in_circuit != bool(self.edges):
            raise IntervError(
                f"head {self.label}: in_circuit is {self.in_circuit} with {len(self.edges)} "
                "circuit edges"
            )


@dataclass(frozen=True)
class RankAgreement:
    """Spearman's rho of one concentration number with the circuit, across heads.

    ``against`` is ``"membership"`` or ``"strength"``; ``rho``, ``low``, ``high`` are NaN
    where ``reason`` says why there is no value or no interval.
    """

    metric: Literal[tuple(LINK_METRICS)]  # type: ignore[valid-type]
    against: Literal["membership", "strength"]
    n_heads: Count
    rho: Annotated[float, Within(-1.0, 1.0)]
    low: Annotated[float, Within(-1.0, 1.0)]
    high: Annotated[float, Within(-1.0, 1.0)]
    level: Annotated[float, Finite(), Within(0.0, 1.0)]
    reason: str
    sentence: str

    def __post_init__(self) -> None:
        if self.low > self.high:  # NaN (no interval) compares False
            raise IntervError(f"low {self.low} is above high {self.high}")


@dataclass(frozen=True)
class MissionLink:
    """Every head's concentration beside the circuit's edges, their rank agreement, and
    the concentrated, sink-parked heads outside the circuit (module docstring).

    Attributes:
        model, task: scope.
        n_prompts: prompts behind the concentration means.
        circuit_size: edges in the circuit; n_exact: how many of them are exact.
        heads: every attention head, circuit heads first (by strength).
        agreements: rho per metric of :data:`LINK_METRICS`, against membership and strength.
        parked_outside: labels of the concentrated, sink-parked heads outside the circuit.
        sentences: the semantics of each number ("circuit", "concentration",
            "agreement", "parked").
        provenance: the join of the circuit's and the concentration's provenance.
    """

    model: str
    task: str
    n_prompts: Annotated[int, AtLeast(1)]
    circuit_size: Count
    n_exact: Count
    heads: Annotated[tuple[CircuitHead, ...], NonEmpty()]
    agreements: tuple[RankAgreement, ...]
    parked_outside: tuple[str, ...]
    sentences: Annotated[dict[str, str], Keys(SENTENCES)]
    provenance: Provenance

    def __post_init__(self) -> None:
        if self.n_exact > self.circuit_size:
            raise IntervError(
                f"n_exact {self.n_exact} exceeds the circuit's {self.circuit_size} edges"
            )
        labels = [head.label for head in self.heads]
        if len(set(labels)) != len(labels):
            raise IntervError(f"heads list a head twice: {labels}")
        unknown = sorted(set(self.parked_outside) - set(labels))
        if unknown:
            raise IntervError(f"parked_outside names heads the link does not hold: {unknown}")
        edges = {edge.label for head in self.heads for edge in head.edges}
        if len(edges) > self.circuit_size:
            raise IntervError(
                f"the heads touch {len(edges)} circuit edges; circuit_size is {self.circuit_size}"
            )
        for i, agreement in enumerate(self.agreements):
            if agreement.n_heads > len(self.heads):
                raise IntervError(
                    f"agreements[{i}].n_heads is {agreement.n_heads}; the link holds "
                    f"{len(self.heads)} heads"
                )

    @property
    def circuit_heads(self) -> tuple[CircuitHead, ...]:
        """The heads that send or receive a circuit edge."""
        return tuple(h for h in self.heads if h.in_circuit)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready data (NaN as None); :meth:`from_dict` inverts it."""
        return json_ready(asdict(self))

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> MissionLink:
        """The link :meth:`to_dict` wrote (each field checked, a damaged one named)."""
        return parse(cls, data, "mission link")


def mission_link(
    circuit: CircuitResult,
    concentration: HeadConcentration,
    *,
    n: int | None = None,
    rules: FlagRules | None = None,
    n_bootstrap: int = 1000,
    level: float = 0.95,
    seed: int = 0,
) -> MissionLink:
    """The circuit's heads beside their concentration (module docstring).

    Args:
        circuit: a :class:`~interv.circuits.CircuitResult`.
        concentration: a :class:`~interv.analysis.concentration.HeadConcentration` of the
            same model and prompts (clean run).
        n: circuit size in edges (default: the screen's verified top-k, all exact).
        rules: thresholds of "concentrated" and "sink-parked" (default :class:`FlagRules`).
        n_bootstrap, level, seed: the percentile bootstrap over prompts.

    Raises:
        IntervError: another model or other prompts (the differing field named), a bad
            ``n``, ``level`` or ``n_bootstrap``.
    """
    if not isinstance(circuit, CircuitResult):
        raise IntervError(f"circuit must be a CircuitResult; got {type(circuit).__name__}")
    if not isinstance(concentration, HeadConcentration):
        raise IntervError(
            f"concentration must be a HeadConcentration; got {type(concentration).__name__}"
        )
    provenance = join(circuit, concentration, what=("the circuit", "the concentration"))
    rules = FlagRules() if rules is None else rules
    n_bootstrap = as_int(n_bootstrap, "n_bootstrap", minimum=1)
    if not 0 < level < 1:
        raise IntervError(f"level must lie in (0, 1); got {level}")
    per_prompt = {name: concentration.per_prompt(name) for name in LINK_METRICS}
    n_prompts, n_layers, n_heads = next(iter(per_prompt.values())).shape
    graph = circuit.graph
    if (graph.n_layers, graph.n_heads) != (n_layers, n_heads):
        raise IntervError(
            f"the circuit's graph has {graph.n_layers} layers x {graph.n_heads} heads, the "
            f"concentration {n_layers} x {n_heads}: not the same model"
        )
    chosen = [graph.index(edge) for edge in circuit.circuit(n)]
    scores, exact, status = circuit.scores.scores, circuit.exact, circuit.status
    touching: dict[tuple[int, int], list[int]] = {}
    for index in chosen:
        for head in _query_heads(graph.edges[index], graph):
            touching.setdefault(head, []).append(index)

    means = {name: t.nanmean(dim=0) for name, t in per_prompt.items()}
    spreads = {name: concentration.per_head_spread(name) for name in LINK_METRICS}
    heads = []
    for layer in range(n_layers):
        for h in range(n_heads):
            edges = tuple(
                sorted(
                    (
                        CircuitEdge(
                            graph.edges[i].label,
                            float(scores[i]),
                            None if math.isnan(float(exact[i])) else float(exact[i]),
                            status[i],
                        )
                        for i in touching.get((layer, h), [])
                    ),
                    key=lambda e: -abs(e.score if e.exact is None else e.exact),
                )
            )
            conc = {name: float(means[name][layer, h]) for name in LINK_METRICS}
            heads.append(
                CircuitHead(
                    label=f"L{layer}H{h}",
                    layer=layer,
                    head=h,
                    in_circuit=bool(edges),
                    strength=float(sum(abs(e.exact) for e in edges if e.exact is not None)),
                    edges=edges,
                    concentration=conc,
                    spread={name: float(spreads[name][layer, h]) for name in LINK_METRICS},
                    parked=conc["normalized_entropy"] <= rules.concentrated_at_most
                    and conc["sink_mass"] > rules.sink_mass_above,
                )
            )
    heads.sort(key=lambda x: (not x.in_circuit, -x.strength, x.layer, x.head))
    n_exact = sum(not math.isnan(float(exact[i])) for i in chosen)
    sentences = _sentences(circuit, concentration, len(chosen), n_exact, rules, level, n_bootstrap)
    agreements = _agreements(
        per_prompt, heads, n_bootstrap=n_bootstrap, level=level, seed=seed, sentences=sentences
    )
    return MissionLink(
        model=graph.model_name,
        task=circuit.task_name,
        n_prompts=int(n_prompts),
        circuit_size=len(chosen),
        n_exact=int(n_exact),
        heads=tuple(heads),
        agreements=agreements,
        parked_outside=tuple(x.label for x in heads if x.parked and not x.in_circuit),
        sentences=sentences,
        provenance=provenance,
    )


def _query_heads(edge: Edge, graph: Graph) -> list[tuple[int, int]]:
    """The query heads an edge touches: its sender if a head, its receiver if a head (every
    query head of the group for a key/value head)."""
    found = []
    for node in (edge.sender, edge.receiver):
        if node.kind != "head":
            continue
        group = graph.group_size if node.kv else 1
        found += [(node.layer, h) for h in range(node.head * group, (node.head + 1) * group)]
    return found


def _agreements(
    per_prompt: Mapping[str, torch.Tensor],
    heads: Sequence[CircuitHead],
    *,
    n_bootstrap: int,
    level: float,
    seed: int,
    sentences: Mapping[str, str],
) -> tuple[RankAgreement, ...]:
    n_prompts = next(iter(per_prompt.values())).shape[0]
    indices = bootstrap_indices(n_prompts, n_bootstrap, seed)
    members = [h for h in heads if h.in_circuit]
    results = []
    for metric in LINK_METRICS:
        values = per_prompt[metric]
        for against, chosen in (("membership", list(heads)), ("strength", members)):
            target = torch.tensor(
                [float(h.in_circuit) if against == "membership" else h.strength for h in chosen],
                dtype=torch.float64,
            )
            per = (
                torch.stack([values[:, h.layer, h.head] for h in chosen], dim=-1)
                if chosen
                else (torch.empty(n_prompts, 0, dtype=torch.float64))
            )
            results.append(
                _agreement(metric, against, per, target, indices, level, sentences["agreement"])
            )
    return tuple(results)


def _agreement(
    metric: str,
    against: str,
    per: torch.Tensor,
    target: torch.Tensor,
    indices: torch.Tensor,
    level: float,
    sentence: str,
) -> RankAgreement:
    defined = ~per.isnan().all(dim=0)
    per, target = per[:, defined], target[defined]
    n_heads, n_prompts = int(defined.sum()), per.shape[0]
    nan = math.nan
    scope = "the circuit's heads" if against == "strength" else "every head"
    what = f"{metric} vs {against} over {scope}"
    if n_heads < MIN_ITEMS:
        reason = too_few(n_heads, "head with a defined value", "rank correlation")
        return RankAgreement(metric, against, n_heads, nan, nan, nan, level, reason, what)
    if bool((target == target[0]).all()):
        reason = f"n/a: every head has the same {against}"
        return RankAgreement(metric, against, n_heads, nan, nan, nan, level, reason, what)
    rho = float(spearman(per.nanmean(dim=0), target))
    boot = per[indices].nanmean(dim=1)  # [n_bootstrap, n_heads]
    complete = ~boot.isnan().any(dim=-1)
    low, high = percentile_interval(
        spearman(boot[complete], target.expand_as(boot)[complete]), level, n_items=n_prompts
    )
    if math.isnan(low):
        reason = too_few(n_prompts) or "n/a: no resample defined every head"
        return RankAgreement(metric, against, n_heads, rho, nan, nan, level, reason, what)
    return RankAgreement(metric, against, n_heads, rho, low, high, level, "", what)


def _sentences(
    circuit: CircuitResult,
    concentration: HeadConcentration,
    size: int,
    n_exact: int,
    rules: FlagRules,
    level: float,
    n_bootstrap: int,
) -> dict[str, str]:
    return {
        "circuit": (
            f"circuit: the top {size} of {circuit.graph.n_edges} edges by |exact effect| "
            f"({n_exact} exact, {size - n_exact} estimated); {circuit.sentence}"
        ),
        "concentration": (
            f"concentration: clean run, mean over {concentration.n_prompts} prompts of each "
            f"prompt's mean over query positions {list(concentration.query_positions)} "
            f"(negative = from the last real token); normalized entropy in fraction of log(n), "
            f"sink mass in fraction of the row's mass at sink positions "
            f"{list(concentration.sink_positions)}, contribution norm sum_i a_i ||v_i W_O|| in "
            f"residual-stream units; {concentration.scope}"
        ),
        "agreement": (
            "Spearman's rho across heads (dimensionless, -1 ... 1) of the head's mean "
            "concentration with circuit membership (1 = the head sends or receives a circuit "
            "edge; a key/value head's edge counts for every query head reading it; every "
            "head) or with its strength (summed |exact effect| of its circuit edges, in the "
            f"metric's unit; the circuit's heads only); interval: {level:.0%} percentile "
            f"bootstrap over prompts ({n_bootstrap} resamples) of the concentration means, the "
            "circuit's exact effects (means over the same prompts) held fixed. A rank "
            "agreement says whether ordering heads by concentration orders them like the "
            "circuit does here, not that concentration causes membership"
        ),
        "parked": (
            f"concentrated, sink-parked: mean normalized entropy <= "
            f"{rules.concentrated_at_most:g} and mean sink mass > {rules.sink_mass_above:g}; "
            "listed when the head sends and receives no circuit edge"
        ),
    }
