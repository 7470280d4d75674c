"""A circuit beside the concentration of its heads: the mission link, and the Markdown section.

>>> link = mission_link(circuit.to_dict(), concentration(model, task, query_positions=[-1]))
>>> print(link.to_markdown())  # doctest: +SKIP

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
  prompts, are held fixed); n/a, with the reason, below :data:`MIN_HEADS` heads or
  :data:`MIN_PROMPTS` prompts;
- the concentrated, sink-parked heads outside the circuit (normalized entropy at most
  ``FlagRules.concentrated_at_most`` and sink mass above ``FlagRules.sink_mass_above``):
  heads whose attention looks decisive that the circuit does not use.

Under grouped-query attention an edge into a key or value input names a key/value head
(``L1KV0.k``); every query head that reads that key/value head counts as its receiver.
Only exact effects enter the strength (an estimated circuit edge is listed, never
summed). Everything here reads the serialized forms (``CircuitResult.to_dict()``,
``FaithfulnessCurve.to_dict()``) and a :class:`~interv.analysis.concentration.HeadConcentration`
(or its :func:`concentration_table`); no model.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

import torch

from interv._checks import as_int
from interv._inert import markdown_text
from interv.errors import IntervError
from interv.flags import FlagRules
from interv.stats import bootstrap_indices, percentile_interval, spearman

if TYPE_CHECKING:
    from interv.analysis.concentration import HeadConcentration

__all__ = [
    "CIRCUIT_FORMAT",
    "FAITHFULNESS_FORMAT",
    "LINK_METRICS",
    "MIN_HEADS",
    "MIN_PROMPTS",
    "CircuitHead",
    "MissionLink",
    "RankAgreement",
    "check_circuit",
    "check_faithfulness",
    "circuit_edges",
    "circuit_markdown",
    "concentration_table",
    "edge_heads",
    "mission_link",
    "stability_marks",
]

CIRCUIT_FORMAT = "interv.circuit/1"
FAITHFULNESS_FORMAT = "interv.faithfulness/1"
LINK_METRICS: dict[str, str] = {
    "normalized_entropy": "fraction of log(n)",
    "sink_mass": "fraction of the row's mass",
    "contribution_norm": "residual-stream norm",
}
"""The concentration numbers shown beside a circuit's heads, and their units."""

MIN_HEADS = 5
"""Fewer heads than this: no rank correlation (n/a, with the reason)."""
MIN_PROMPTS = 5
"""Fewer prompts than this: a rank correlation without an interval (n/a, with the reason)."""

_STATUSES = ("exact (verified)", "exact (audit)", "estimated")
_NODE = r"embed|logits|MLP(\d+)|L(\d+)H(\d+)|L(\d+)KV(\d+)"
_EDGE = re.compile(rf"^(?P<s>{_NODE})->(?P<r>{_NODE})(?:\.(?P<i>q|k|v))?$")
_HEAD_NODE = re.compile(r"^L(\d+)(H|KV)(\d+)$")


# ---- the serialized forms ----


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def check_circuit(data: Any) -> Mapping[str, Any]:
    """``data`` as a ``CircuitResult.to_dict()`` mapping, or an IntervError naming the field."""
    if hasattr(data, "to_dict") and not isinstance(data, Mapping):
        data = data.to_dict()
    if not isinstance(data, Mapping):
        raise IntervError(
            f"a circuit must be a CircuitResult or its to_dict() mapping; got {type(data).__name__}"
        )
    if data.get("format") != CIRCUIT_FORMAT:
        raise IntervError(
            f"a circuit's 'format' must be {CIRCUIT_FORMAT!r}; got {data.get('format')!r}"
        )
    for key in ("model", "task", "fingerprint", "method", "metric", "sentence"):
        if not isinstance(data.get(key), str):
            raise IntervError(f"the circuit's {key!r} must be a string; got {data.get(key)!r}")
    edges = data.get("edges")
    if not isinstance(edges, list) or not edges or not all(isinstance(e, str) for e in edges):
        raise IntervError("the circuit's 'edges' must be a non-empty list of edge labels")
    n = len(edges)
    for key in ("scores", "exact", "status"):
        if not isinstance(data.get(key), list) or len(data[key]) != n:
            raise IntervError(f"the circuit's {key!r} must be a list of {n} entries (one per edge)")
    if not all(_is_number(v) and math.isfinite(v) for v in data["scores"]):
        raise IntervError("the circuit's 'scores' must be finite numbers")
    if not all(v is None or (_is_number(v) and math.isfinite(v)) for v in data["exact"]):
        raise IntervError("the circuit's 'exact' values must be finite numbers or null")
    for label, status, exact in zip(edges, data["status"], data["exact"], strict=True):
        if status not in _STATUSES:
            raise IntervError(f"edge {label!r} has status {status!r}; expected one of {_STATUSES}")
        if (status == "estimated") != (exact is None):
            raise IntervError(
                f"edge {label!r} has status {status!r} but exact value {exact!r}: an exact "
                "status needs a value and an estimate has none"
            )
    for label in edges:
        edge_heads(label)
    return data


@dataclass(frozen=True)
class StabilityMarks:
    """How often the circuit's edges are found again on bootstrap resamples of the prompts
    (read from a circuit's stored ``stability``; :func:`interv.circuits.circuit_stability`).

    Attributes:
        size: the circuit size (edges) whose inclusion shares are shown.
        share: edge index -> share of the resamples whose circuit of ``size`` edges holds it.
        stable_at: the share from which an edge counts as stable.
        rows: per compared size ``(size, mean Jaccard, low, high, stable edges)``.
        n_resamples: bootstrap resamples.
        sentence: what was resampled and what the numbers are.
    """

    size: int
    share: dict[int, float]
    stable_at: float
    rows: tuple[tuple[int, float, float | None, float | None, int], ...]
    n_resamples: int
    sentence: str

    def mark(self, index: int) -> str:
        """``"0.95 (stable)"``, ``"0.40"``: the edge's inclusion share in words."""
        share = self.share.get(index, 0.0)
        return f"{share:.2f}" + (" (stable)" if share >= self.stable_at else "")


def stability_marks(circuit: Mapping[str, Any], n: int) -> StabilityMarks | None:
    """The stability marks of a checked circuit's top ``n`` edges: inclusion shares at the
    smallest compared size holding ``n`` edges (the largest otherwise); None when the
    circuit carries no stability. A damaged record is refused naming the field."""
    data = circuit.get("stability")
    if data is None:
        return None
    where = "the circuit's 'stability'"
    if not isinstance(data, Mapping):
        raise IntervError(f"{where} must be a mapping (CircuitStability.to_dict())")
    sizes, inclusion = data.get("sizes"), data.get("inclusion")
    if (
        not isinstance(sizes, list)
        or not sizes
        or not all(isinstance(v, int) and not isinstance(v, bool) for v in sizes)
        or not isinstance(inclusion, list)
        or len(inclusion) != len(sizes)
    ):
        raise IntervError(f"{where}: 'sizes' and 'inclusion' must be lists of one entry per size")
    for key in ("mean", "low", "high", "circuits"):
        if not isinstance(data.get(key), list) or len(data[key]) != len(sizes):
            raise IntervError(f"{where}: {key!r} must be a list of one entry per size")
    stable_at = data.get("stable_at")
    if not _is_number(stable_at):
        raise IntervError(f"{where}: 'stable_at' must be a number; got {stable_at!r}")
    row = next((r for r, size in enumerate(sizes) if size >= n), len(sizes) - 1)
    held = inclusion[row]
    if not isinstance(held, Mapping) or len(held.get("edges", ())) != len(held.get("share", ())):
        raise IntervError(f"{where}: inclusion {row} must pair 'edges' with 'share'")
    share = {int(i): float(v) for i, v in zip(held["edges"], held["share"], strict=True)}
    rows = []
    for r, size in enumerate(sizes):
        shares = {
            int(i): float(v)
            for i, v in zip(inclusion[r]["edges"], inclusion[r]["share"], strict=True)
        }
        stable = sum(1 for i in data["circuits"][r] if shares.get(int(i), 0.0) >= stable_at)
        rows.append((size, float(data["mean"][r]), data["low"][r], data["high"][r], stable))
    return StabilityMarks(
        size=sizes[row],
        share=share,
        stable_at=float(stable_at),
        rows=tuple(rows),
        n_resamples=int(data.get("n_resamples", 0)),
        sentence=str(data.get("sentence", "")),
    )


def check_faithfulness(data: Any) -> Mapping[str, Any]:
    """``data`` as a ``FaithfulnessCurve.to_dict()`` mapping, or an IntervError naming the field."""
    if hasattr(data, "to_dict") and not isinstance(data, Mapping):
        data = data.to_dict()
    if not isinstance(data, Mapping) or data.get("format") != FAITHFULNESS_FORMAT:
        found = data.get("format") if isinstance(data, Mapping) else type(data).__name__
        raise IntervError(
            f"a faithfulness curve must be a FaithfulnessCurve or its to_dict() mapping with "
            f"format {FAITHFULNESS_FORMAT!r}; got {found!r}"
        )
    fractions = data.get("fractions")
    if not isinstance(fractions, list) or not fractions:
        raise IntervError("the curve's 'fractions' must be a non-empty list")
    n = len(fractions)
    for key in ("fractions", "mean", "low", "high"):
        values = data.get(key)
        if not isinstance(values, list) or len(values) != n:
            raise IntervError(
                f"the curve's {key!r} must be a list of {n} numbers (one per fraction)"
            )
        if not all(v is None or _is_number(v) for v in values):
            raise IntervError(f"the curve's {key!r} must hold numbers (or null where undefined)")
    if not all(_is_number(f) and 0 < f <= 1 for f in fractions):
        raise IntervError(f"the curve's fractions must lie in (0, 1]; got {fractions}")
    for key in ("cpr", "cmd"):
        if not (data.get(key) is None or _is_number(data.get(key))):
            raise IntervError(f"the curve's {key!r} must be a number; got {data.get(key)!r}")
    if not isinstance(data.get("sentence"), str):
        raise IntervError("the curve's 'sentence' must be a string")
    return data


def edge_heads(label: str) -> tuple[tuple[int, int, str] | None, tuple[int, int, str] | None]:
    """The attention heads an edge label joins: ``(sender, receiver)``, each
    ``(layer, index, "H"|"KV")`` or None (embed, MLP, logits).

    >>> edge_heads("L0H3->L1KV2.k")
    ((0, 3, 'H'), (1, 2, 'KV'))
    """
    match = _EDGE.match(label) if isinstance(label, str) else None
    if match is None:
        raise IntervError(
            f"edge label {label!r} is not written like 'L0H3->L1H5.k', 'embed->MLP0', "
            "'L5H1->logits' or 'L0H3->L1KV2.k'"
        )

    def head(node: str) -> tuple[int, int, str] | None:
        found = _HEAD_NODE.match(node)
        return None if found is None else (int(found[1]), int(found[3]), found[2])

    return head(match["s"]), head(match["r"])


def circuit_edges(circuit: Mapping[str, Any], n: int | None = None) -> list[int]:
    """Indices of the circuit's top-``n`` edges by the best value available: exact edges
    by ``|exact|`` first, then estimated edges by ``|score|``. Default ``n``: the screen's
    verified top-k (``audit.screen.top_k``), so every edge of the circuit is exact."""
    circuit = check_circuit(circuit)
    n_edges = len(circuit["edges"])
    if n is None:
        n = _verified_top(circuit)
    n = as_int(n, "circuit size n", minimum=1)
    if n > n_edges:
        raise IntervError(f"circuit size n must be at most the graph's {n_edges} edges; got {n}")
    exact = [i for i, v in enumerate(circuit["exact"]) if v is not None]
    estimated = [i for i, v in enumerate(circuit["exact"]) if v is None]
    exact.sort(key=lambda i: (-abs(circuit["exact"][i]), i))
    estimated.sort(key=lambda i: (-abs(circuit["scores"][i]), i))
    return (exact + estimated)[:n]


def _verified_top(circuit: Mapping[str, Any]) -> int:
    screen = (circuit.get("audit") or {}).get("screen") or {}
    top_k = screen.get("top_k")
    if isinstance(top_k, int) and not isinstance(top_k, bool) and top_k >= 1:
        return min(top_k, len(circuit["edges"]))
    return max(1, sum(s == "exact (verified)" for s in circuit["status"]))


# ---- the concentration side ----


def concentration_table(concentration: HeadConcentration | Mapping[str, Any]) -> dict[str, Any]:
    """The per-prompt concentration numbers the mission link reads, as plain data.

    Keys: ``model``, ``n_prompts``, ``query_positions``, ``sink_positions``, ``scope`` (one
    line), and ``per_prompt``: metric -> ``[n_prompts][layer][head]`` (mean over each
    prompt's query positions; None where undefined), for every metric of :data:`LINK_METRICS`.
    A mapping already in this form is checked and returned.
    """
    if isinstance(concentration, Mapping):
        return _check_table(concentration)
    per_prompt = {}
    for name in LINK_METRICS:
        values = concentration.per_prompt(name).tolist()
        per_prompt[name] = [
            [[None if math.isnan(v) else v for v in row] for row in layer] for layer in values
        ]
    return _check_table(
        {
            "model": concentration.model_name,
            "n_prompts": concentration.n_prompts,
            "query_positions": list(concentration.query_positions),
            "sink_positions": list(concentration.sink_positions),
            "scope": concentration.scope,
            "per_prompt": per_prompt,
        }
    )


def _check_table(table: Mapping[str, Any]) -> dict[str, Any]:
    per_prompt = table.get("per_prompt")
    if not isinstance(per_prompt, Mapping) or set(LINK_METRICS) - set(per_prompt):
        raise IntervError(
            f"a concentration table needs 'per_prompt' values of {tuple(LINK_METRICS)}"
        )
    shapes = set()
    for name in LINK_METRICS:
        try:
            tensor = _tensor(per_prompt[name])
        except (TypeError, ValueError):
            raise IntervError(
                f"concentration {name!r} must be a [n_prompts][layer][head] list of numbers"
            ) from None
        if tensor.dim() != 3:
            raise IntervError(
                f"concentration {name!r} must be [n_prompts][layer][head]; got shape "
                f"{tuple(tensor.shape)}"
            )
        shapes.add(tuple(tensor.shape))
    if len(shapes) != 1:
        raise IntervError(f"the concentration metrics have different shapes: {sorted(shapes)}")
    for key in ("model", "scope"):
        if not isinstance(table.get(key), str):
            raise IntervError(f"the concentration table's {key!r} must be a string")
    return dict(table)


def _tensor(values: Any) -> torch.Tensor:
    def number(v: Any) -> Any:
        if isinstance(v, list):
            return [number(x) for x in v]
        if v is None:
            return math.nan
        if not _is_number(v):
            raise TypeError(v)
        return float(v)

    return torch.tensor(number(values), dtype=torch.float64)


# ---- the link ----


@dataclass(frozen=True)
class CircuitEdge:
    """One circuit edge as the link shows it (score = screen estimate, exact = the exact
    path-patching effect or None; both in the metric's unit)."""

    label: str
    score: float
    exact: float | None
    status: str


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
    layer: int
    head: int
    in_circuit: bool
    strength: float
    edges: tuple[CircuitEdge, ...]
    concentration: dict[str, float]
    spread: dict[str, float]
    parked: bool


@dataclass(frozen=True)
class RankAgreement:
    """Spearman's rho of one concentration number with the circuit, across heads.

    ``against`` is ``"membership"`` or ``"strength"``; ``rho``, ``low``, ``high`` are NaN
    where ``reason`` says why there is no value or no interval.
    """

    metric: str
    against: str
    n_heads: int
    rho: float
    low: float
    high: float
    level: float
    reason: str
    sentence: str


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
    """

    model: str
    task: str
    n_prompts: int
    circuit_size: int
    n_exact: int
    heads: tuple[CircuitHead, ...]
    agreements: tuple[RankAgreement, ...]
    parked_outside: tuple[str, ...]
    sentences: dict[str, str]

    @property
    def circuit_heads(self) -> tuple[CircuitHead, ...]:
        """The heads that send or receive a circuit edge."""
        return tuple(h for h in self.heads if h.in_circuit)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready data (NaN as None); :meth:`from_dict` inverts it."""
        return _nan_to_none(asdict(self))

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> MissionLink:
        """The link :meth:`to_dict` wrote."""
        try:
            heads = tuple(
                CircuitHead(
                    **{
                        **h,
                        "edges": tuple(CircuitEdge(**e) for e in h["edges"]),
                        "concentration": _none_to_nan(h["concentration"]),
                        "spread": _none_to_nan(h["spread"]),
                    }
                )
                for h in data["heads"]
            )
            agreements = tuple(RankAgreement(**_none_to_nan(a)) for a in data["agreements"])
            return cls(
                **{
                    **data,
                    "heads": heads,
                    "agreements": agreements,
                    "parked_outside": tuple(data["parked_outside"]),
                }
            )
        except (KeyError, TypeError) as error:
            raise IntervError(f"a saved mission link is damaged: {error}") from None

    def to_markdown(self) -> str:
        """The link as a Markdown section (every text inert)."""
        return "\n".join(_link_markdown(self))


def _nan_to_none(value: Any) -> Any:
    if isinstance(value, float) and math.isnan(value):
        return None
    if isinstance(value, dict):
        return {k: _nan_to_none(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_nan_to_none(v) for v in value]
    return value


def _none_to_nan(data: Mapping[str, Any]) -> dict[str, Any]:
    return {k: math.nan if v is None and k not in ("reason",) else v for k, v in data.items()}


def mission_link(
    circuit: Any,
    concentration: HeadConcentration | Mapping[str, Any],
    *,
    n: int | None = None,
    rules: FlagRules | None = None,
    n_bootstrap: int = 1000,
    level: float = 0.95,
    seed: int = 0,
) -> MissionLink:
    """The circuit's heads beside their concentration (module docstring).

    Args:
        circuit: a ``CircuitResult`` or its ``to_dict()``.
        concentration: a :class:`~interv.analysis.concentration.HeadConcentration` of the
            same model and prompts (clean run), or its :func:`concentration_table`.
        n: circuit size in edges (default: the screen's verified top-k, all exact).
        rules: thresholds of "concentrated" and "sink-parked" (default :class:`FlagRules`).
        n_bootstrap, level, seed: the percentile bootstrap over prompts.

    Raises:
        IntervError: mismatched models or prompt counts, a malformed input, a bad ``n``.
    """
    circuit = check_circuit(circuit)
    table = concentration_table(concentration)
    rules = FlagRules() if rules is None else rules
    n_bootstrap = as_int(n_bootstrap, "n_bootstrap", minimum=1)
    if not 0 < level < 1:
        raise IntervError(f"level must lie in (0, 1); got {level}")
    if table["model"] != circuit["model"]:
        raise IntervError(
            f"the concentration is of model {table['model']!r} but the circuit of "
            f"{circuit['model']!r}: join numbers of the same model and prompts only"
        )
    per_prompt = {name: _tensor(table["per_prompt"][name]) for name in LINK_METRICS}
    n_prompts, n_layers, n_heads = next(iter(per_prompt.values())).shape
    if "n_prompts" in circuit and circuit["n_prompts"] != n_prompts:
        raise IntervError(
            f"the circuit was found on {circuit['n_prompts']} prompts but the concentration "
            f"holds {n_prompts}: join numbers of the same prompts only"
        )
    chosen = circuit_edges(circuit, n)
    group = _kv_group(circuit["edges"], n_heads)
    touching: dict[tuple[int, int], list[int]] = {}
    for index in chosen:
        for layer, h in _query_heads(circuit["edges"][index], group, n_layers, n_heads):
            touching.setdefault((layer, h), []).append(index)

    means = {name: t.nanmean(dim=0) for name, t in per_prompt.items()}
    spreads = {name: _sd(t) for name, t in per_prompt.items()}
    heads = []
    for layer in range(n_layers):
        for h in range(n_heads):
            indices = touching.get((layer, h), [])
            edges = tuple(
                sorted(
                    (
                        CircuitEdge(
                            circuit["edges"][i],
                            float(circuit["scores"][i]),
                            None if circuit["exact"][i] is None else float(circuit["exact"][i]),
                            circuit["status"][i],
                        )
                        for i in indices
                    ),
                    key=lambda e: -abs(e.score if e.exact is None else e.exact),
                )
            )
            conc = {name: float(means[name][layer, h]) for name in LINK_METRICS}
            parked = (
                conc["normalized_entropy"] <= rules.concentrated_at_most
                and conc["sink_mass"] > rules.sink_mass_above
            )
            heads.append(
                CircuitHead(
                    label=f"L{layer}H{h}",
                    layer=layer,
                    head=h,
                    in_circuit=bool(indices),
                    strength=float(sum(abs(e.exact) for e in edges if e.exact is not None)),
                    edges=edges,
                    concentration=conc,
                    spread={name: float(spreads[name][layer, h]) for name in LINK_METRICS},
                    parked=parked,
                )
            )
    heads.sort(key=lambda x: (not x.in_circuit, -x.strength, x.layer, x.head))
    n_exact = sum(circuit["exact"][i] is not None for i in chosen)
    sentences = _sentences(circuit, table, len(chosen), n_exact, rules, level, n_bootstrap)
    agreements = _agreements(
        per_prompt, heads, n_bootstrap=n_bootstrap, level=level, seed=seed, sentences=sentences
    )
    return MissionLink(
        model=circuit["model"],
        task=circuit["task"],
        n_prompts=int(n_prompts),
        circuit_size=len(chosen),
        n_exact=int(n_exact),
        heads=tuple(heads),
        agreements=agreements,
        parked_outside=tuple(x.label for x in heads if x.parked and not x.in_circuit),
        sentences=sentences,
    )


def _sd(t: torch.Tensor) -> torch.Tensor:
    defined = (~t.isnan()).sum(dim=0)
    centered = t - t.nanmean(dim=0)
    variance = centered.square().nansum(dim=0) / (defined - 1).clamp(min=1)
    return torch.where(defined > 1, variance.sqrt(), torch.nan)


def _kv_group(labels: Sequence[str], n_heads: int) -> int:
    """Query heads per key/value head, from the graph's KV labels (1 without any)."""
    kv = [
        r[1] for label in labels for r in [edge_heads(label)[1]] if r is not None and r[2] == "KV"
    ]
    if not kv:
        return 1
    n_kv = max(kv) + 1
    if n_heads % n_kv:
        raise IntervError(
            f"the circuit names {n_kv} key/value heads, which do not divide the "
            f"concentration's {n_heads} query heads: not the same model"
        )
    return n_heads // n_kv


def _query_heads(label: str, group: int, n_layers: int, n_heads: int) -> list[tuple[int, int]]:
    found = []
    for node in edge_heads(label):
        if node is None:
            continue
        layer, index, kind = node
        members = range(index * group, (index + 1) * group) if kind == "KV" else [index]
        for h in members:
            if not (0 <= layer < n_layers and 0 <= h < n_heads):
                raise IntervError(
                    f"edge {label!r} names head L{layer}H{h}, outside the concentration's "
                    f"{n_layers} layers x {n_heads} heads: not the same model"
                )
            found.append((layer, h))
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
    if n_heads < MIN_HEADS:
        reason = f"n/a: {n_heads} heads with a defined value, fewer than {MIN_HEADS}"
        return RankAgreement(metric, against, n_heads, nan, nan, nan, level, reason, what)
    if bool((target == target[0]).all()):
        reason = f"n/a: every head has the same {against}"
        return RankAgreement(metric, against, n_heads, nan, nan, nan, level, reason, what)
    rho = float(spearman(per.nanmean(dim=0), target))
    if n_prompts < MIN_PROMPTS:
        reason = f"no interval: {n_prompts} prompts, fewer than {MIN_PROMPTS}"
        return RankAgreement(metric, against, n_heads, rho, nan, nan, level, reason, what)
    boot = per[indices].nanmean(dim=1)  # [n_bootstrap, n_heads]
    complete = ~boot.isnan().any(dim=-1)
    low, high = percentile_interval(
        spearman(boot[complete], target.expand_as(boot)[complete]), level
    )
    return RankAgreement(metric, against, n_heads, rho, low, high, level, "", what)


def _sentences(
    circuit: Mapping[str, Any],
    table: Mapping[str, Any],
    size: int,
    n_exact: int,
    rules: FlagRules,
    level: float,
    n_bootstrap: int,
) -> dict[str, str]:
    queries = table.get("query_positions")
    return {
        "circuit": (
            f"circuit: the top {size} of {len(circuit['edges'])} edges by |exact effect| "
            f"({n_exact} exact, {size - n_exact} estimated); {circuit['sentence']}"
        ),
        "concentration": (
            f"concentration: clean run, mean over {table.get('n_prompts')} prompts of each "
            f"prompt's mean over query positions {queries} (negative = from the last real "
            f"token); normalized entropy in fraction of log(n), sink mass in fraction of the "
            f"row's mass at sink positions {table.get('sink_positions')}, contribution norm "
            f"sum_i a_i ||v_i W_O|| in residual-stream units; {table['scope']}"
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


# ---- Markdown ----


def _num(value: float | None, digits: int = 3) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "n/a"
    return f"{value:.{digits}g}"


def _md_table(columns: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    md = markdown_text
    lines = ["| " + " | ".join(md(c) for c in columns) + " |"]
    lines.append("|" + "|".join(" --- " for _ in columns) + "|")
    lines += ["| " + " | ".join(md(c) for c in row) + " |" for row in rows]
    return lines


def _edge_text(edge: CircuitEdge) -> str:
    exact = "not intervened" if edge.exact is None else f"exact {edge.exact:+.3g}"
    return f"{edge.label} (score {edge.score:+.3g}, {exact}, {edge.status})"


def _agreement_text(a: RankAgreement) -> str:
    if math.isnan(a.rho):
        return a.reason
    interval = (
        a.reason
        if math.isnan(a.low)
        else f"{a.level:.0%} interval {_num(a.low, 2)} ... {_num(a.high, 2)}"
    )
    return f"rho = {_num(a.rho, 2)} ({interval})"


def _link_markdown(link: MissionLink) -> list[str]:
    md = markdown_text
    lines = ["## Circuit heads beside their concentration", ""]
    lines += [f"- {md(link.sentences[key])}" for key in ("circuit", "concentration")]
    lines += [""]
    columns = ["head", "H/log n", "sink mass", "contrib. norm", "strength", "edges"]
    rows = [
        [
            h.label,
            _num(h.concentration["normalized_entropy"]),
            _num(h.concentration["sink_mass"]),
            _num(h.concentration["contribution_norm"]),
            _num(h.strength),
            "; ".join(_edge_text(e) for e in h.edges),
        ]
        for h in link.circuit_heads
    ]
    lines += (
        _md_table(columns, rows)
        if rows
        else ["No attention head sends or receives a circuit edge."]
    )
    lines += [
        "",
        "### Rank agreement of concentration with the circuit",
        "",
        md(link.sentences["agreement"]),
        "",
    ]
    lines += _md_table(
        ["metric", "against", "heads", "Spearman rho"],
        [[a.metric, a.against, str(a.n_heads), _agreement_text(a)] for a in link.agreements],
    )
    lines += [
        "",
        "### Concentrated, sink-parked heads outside the circuit",
        "",
        md(link.sentences["parked"]),
        "",
    ]
    parked = [h for h in link.heads if h.label in link.parked_outside]
    lines += (
        [
            f"- {md(h.label)}: normalized entropy {_num(h.concentration['normalized_entropy'])}, "
            f"sink mass {_num(h.concentration['sink_mass'])}, contribution norm "
            f"{_num(h.concentration['contribution_norm'])}"
            for h in parked
        ]
        if parked
        else ["None."]
    )
    return lines


def _interval(curve: Mapping[str, Any], key: str) -> str:
    interval = curve.get(f"{key}_interval")
    if not isinstance(interval, list) or len(interval) != 2 or None in interval:
        return ""
    return f" (95% interval {_num(interval[0])} ... {_num(interval[1])})"


def _faithfulness_markdown(curve: Mapping[str, Any]) -> list[str]:
    md = markdown_text
    lines = ["## Faithfulness", "", md(curve["sentence"]), ""]
    n = len(curve["fractions"])
    kept = curve.get("n_edges_kept") or [None] * n
    signed = curve.get("signed_mean")
    signed = signed if isinstance(signed, list) and len(signed) == n else None
    columns = ["edge fraction", "edges kept", "faithfulness, circuits by |value| (mean)"]
    columns += ["95% interval"] + (["circuits by signed value (CPR's)"] if signed else [])
    rows = []
    for i, (f, k, m, lo, hi) in enumerate(
        zip(curve["fractions"], kept, curve["mean"], curve["low"], curve["high"], strict=True)
    ):
        row = [f"{f:.3g}", "n/a" if k is None else str(k), _num(m), f"{_num(lo)} ... {_num(hi)}"]
        rows.append(row + ([_num(signed[i])] if signed else []))
    lines += _md_table(columns, rows)
    lines += [
        "",
        f"- CPR (area under the faithfulness curve over the edge fractions, circuits from "
        f"signed scores; higher is better): {_num(curve.get('cpr'), 4)}{_interval(curve, 'cpr')}",
        f"- CMD (area between the curve and 1, circuits from absolute scores; lower is "
        f"better): {_num(curve.get('cmd'), 4)}{_interval(curve, 'cmd')}",
    ]
    return lines


def _audit_markdown(circuit: Mapping[str, Any]) -> list[str]:
    audit = circuit.get("audit") or {}
    status = circuit["status"]
    counts = {s: status.count(s) for s in _STATUSES}
    lines = [
        f"- edges: {len(status)}; {counts['exact (verified)']} exact (verified), "
        f"{counts['exact (audit)']} exact (audit), {counts['estimated']} estimated "
        "(screen scores, not intervened)",
    ]
    if isinstance(audit.get("misses"), int) and isinstance(audit.get("audited"), list):
        n_audited = len(audit["audited"])
        lines.append(
            f"- audit: {audit['misses']} of {n_audited} audited edges above the top-k threshold "
            f"{_num(audit.get('threshold'))}; miss rate <= {_num(audit.get('miss_bound'))} "
            "(one-sided Clopper-Pearson upper bound); Spearman of screen vs exact over the "
            f"checked edges {_num(audit.get('rank_agreement'), 2)}"
        )
    return lines


def _stability_markdown(marks: StabilityMarks) -> list[str]:
    lines = ["## Stability", "", markdown_text(marks.sentence), ""]
    lines += _md_table(
        [
            "circuit size",
            "Jaccard with the full-sample circuit (mean)",
            "95% interval",
            f"stable edges (held by >= {marks.stable_at:.0%})",
        ],
        [
            [str(size), _num(mean), f"{_num(low)} ... {_num(high)}", f"{stable} of {size}"]
            for size, mean, low, high, stable in marks.rows
        ],
    )
    return lines


def circuit_markdown(
    circuit: Any, faithfulness: Any = None, link: MissionLink | None = None, *, top: int = 20
) -> str:
    """The circuit section in Markdown: scope, the audit, the top edges with their status,
    the faithfulness curve with CPR and CMD, and the mission link (each when given)."""
    circuit = check_circuit(circuit)
    md = markdown_text
    lines = [
        f"# Circuit: {md(circuit['model'])} on {md(circuit['task'])}",
        "",
        f"- {md(circuit['sentence'])}",
        f"- screen: {md(circuit['method'])}, metric {md(circuit['metric'])}, fingerprint "
        f"{md(circuit['fingerprint'])}",
    ]
    lines += [md(line) for line in _audit_markdown(circuit)]
    top = as_int(top, "top", minimum=1)
    chosen = circuit_edges(circuit, min(top, len(circuit["edges"])))
    marks = stability_marks(circuit, len(chosen))
    lines += ["", f"## The top {len(chosen)} edges (exact first, then estimates)", ""]
    columns = ["rank", "edge", "score (estimate)", "exact effect", "status"]
    if marks is not None:
        columns.append(f"held by resamples' top-{marks.size}")
    lines += _md_table(
        columns,
        [
            [
                str(rank),
                circuit["edges"][i],
                f"{circuit['scores'][i]:+.4g}",
                "not intervened" if circuit["exact"][i] is None else f"{circuit['exact'][i]:+.4g}",
                circuit["status"][i],
                *([marks.mark(i)] if marks is not None else []),
            ]
            for rank, i in enumerate(chosen, start=1)
        ],
    )
    if marks is not None:
        lines += ["", *_stability_markdown(marks)]
    if faithfulness is not None:
        lines += ["", *_faithfulness_markdown(check_faithfulness(faithfulness))]
    if link is not None:
        lines += ["", *_link_markdown(link)]
    return "\n".join(lines) + "\n"
