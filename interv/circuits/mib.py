"""MIB's circuit-track conventions, exactly, and its circuit files.

>>> curve = faithfulness(model, task, result, convention="mib")   # doctest: +SKIP
>>> write_mib_circuit("ioi_gpt2/importances.json", result)        # doctest: +SKIP
>>> submission = read_mib_circuit("ioi_gpt2/importances.json", Graph.from_model(model))
>>> faithfulness(model, task, submission, convention="mib")      # doctest: +SKIP

MIB's ``evaluate_area_under_curve`` (circuit track, since its May-2025 fix; Mueller et al.
2025) differs from interv's default curve in three ways, all reproduced by
``faithfulness(..., convention="mib")``:

- **sizes**: its circuit at fraction ``p`` holds ``int(p * N)`` edges (zero included),
  where interv takes ``max(1, round(p * N))`` (:func:`mib_sizes`);
- **pruning**: edges that do not connect the input to the logits are dropped before the
  circuit is evaluated (``apply_topn(n, absolute, prune=True)``, and after ``apply_greedy``):
  repeatedly, a node stays only while it has an outgoing circuit edge and an incoming one
  (the embeddings count as having one), and an edge only while both its ends stay
  (:func:`prune`). With the corrupted-run complement pruning changes nothing (a node
  without circuit inputs computes its corrupted output, one without circuit outputs reaches
  nothing); with a mean complement it can;
- **edge counting**: MIB's graph has one query, key and value input per *query* head (it
  ungroups grouped-query attention), so its ``N`` differs from interv's on grouped models
  (SmolLM2-135M: 123,211 against 70,651, :func:`mib_edge_count`), and a key edge there
  changes one query head's key. Leaderboard-comparable numbers need MIB's graph: the
  circuit file readers and writers below refuse a grouped graph and take the ungrouped one
  (``Graph.from_model(model, kv="ungrouped")``).

CPR (area under ``f``, circuits from *signed* scores, highest first in MIB's sign) and CMD
(area of ``|1 - f|``, circuits from absolute scores) are trapezoids over the nominal
fractions on a linear axis in both conventions.

Circuit files (MIB's ``Graph.to_json`` / ``from_json`` format): ``{"cfg": {"n_layers",
"n_heads", "parallel_attn_mlp", "d_model"}, "nodes": {name: {"in_graph"}}, "edges": {name:
{"score", "in_graph"}}}``, node names ``input``, ``a{L}.h{H}``, ``m{L}``, ``logits``, edge
names ``a0.h1->a1.h2<k>``, ``input->m0``, ``m1->logits``. MIB's scores are higher for more
important edges: interv writes ``-value`` (its values are the metric's change when the edge
is patched, most negative = most needed), so MIB's highest-first order is interv's signed
order and ``|score|`` its absolute one.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from interv._checks import as_path, read_json
from interv._outputs import claim_file
from interv.circuits.discovery import CircuitResult
from interv.circuits.graph import Edge, Graph, Node
from interv.circuits.screens import EdgeScores
from interv.errors import IntervError

__all__ = [
    "CONVENTIONS",
    "MIBCircuit",
    "mib_edge_count",
    "mib_edge_name",
    "mib_sizes",
    "prune",
    "read_mib_circuit",
    "write_mib_circuit",
]

CONVENTIONS: tuple[str, ...] = ("interv", "mib")
"""Faithfulness conventions: interv's (``max(1, round(p N))`` edges, no pruning) and MIB's
(``int(p N)`` edges, pruned to those connecting the input to the logits)."""

_HEAD = re.compile(r"^a(\d+)\.h(\d+)$")
_MLP = re.compile(r"^m(\d+)$")


def mib_sizes(fractions: Sequence[float], n_edges: int) -> list[int]:
    """MIB's circuit sizes: ``int(p * n_edges)`` edges at each fraction ``p`` (may be 0)."""
    return [int(p * n_edges) for p in fractions]


def mib_edge_count(graph: Graph) -> int:
    """The number of edges MIB's graph of this model shape has (key and value inputs per
    query head): ``sum_L (3 H + 1)(1 + L (H + 1)) + H`` and the logits' ``1 + n_layers (H +
    1)``, with MLPs; GPT-2 small 32,491, Qwen-2.5-0.5B 179,749, SmolLM2-135M 123,211."""
    heads, per_layer = graph.n_heads, graph.n_heads + 1
    total = 1 + graph.n_layers * per_layer  # into the logits
    for layer in range(graph.n_layers):
        before = 1 + layer * per_layer
        total += 3 * heads * before + before + heads  # q/k/v of each head, the MLP
    return total


def _check_mib_shape(graph: Graph, what: str) -> None:
    if graph.grouped:
        raise IntervError(
            f"{what}: MIB's graph has a key and a value input per query head, and "
            f"{graph.model_name}'s graph groups them per key/value head ({graph.n_kv_heads} "
            f"per layer for {graph.n_heads} query heads): its {graph.n_edges} edges are not "
            f"MIB's {mib_edge_count(graph)}; use MIB's graph, "
            "Graph.from_model(model, kv='ungrouped')"
        )
    if not graph.has_mlp:
        raise IntervError(
            f"{what}: MIB's graph has an MLP in every block and {graph.model_name} is "
            "attention-only; MIB's circuit files cannot describe it"
        )


def _node_name(node: Node) -> str:
    if node.kind == "embed":
        return "input"
    if node.kind == "mlp":
        return f"m{node.layer}"
    if node.kind == "logits":
        return "logits"
    return f"a{node.layer}.h{node.head}"


def _node_of(name: str) -> Node:
    if name == "input":
        return Node("embed")
    if name == "logits":
        return Node("logits")
    match = _HEAD.match(name)
    if match:
        return Node("head", int(match[1]), int(match[2]))
    match = _MLP.match(name)
    if match:
        return Node("mlp", int(match[1]))
    raise IntervError(
        f"unknown MIB node name {name!r}; MIB names nodes 'input', 'a3.h2', 'm3' and 'logits'"
    )


def mib_edge_name(edge: Edge) -> str:
    """MIB's name of an edge of an ungrouped graph: ``a0.h1->a1.h2<k>``, ``input->m0``."""
    name = f"{_node_name(edge.sender)}->{_node_name(edge.receiver)}"
    return f"{name}<{edge.input}>" if edge.input in ("q", "k", "v") else name


def _edge_of(name: str) -> Edge:
    text = str(name)
    left, arrow, right = text.partition("->")
    if not arrow:
        raise IntervError(f"unknown MIB edge name {name!r}; MIB names edges like 'a0.h1->m1'")
    component = None
    if right.endswith(">") and "<" in right:
        right, _, component = right[:-1].partition("<")
    sender, receiver = _node_of(left), _node_of(right)
    if receiver.kind == "head":
        if component not in ("q", "k", "v"):
            raise IntervError(
                f"MIB edge {name!r} ends at a head and needs its input ('<q>', '<k>', '<v>')"
            )
        return Edge(sender, receiver, component)  # type: ignore[arg-type]
    if component is not None:
        raise IntervError(f"MIB edge {name!r}: only an edge into a head names an input")
    return Edge(sender, receiver, "logits" if receiver.kind == "logits" else "mlp")


def _edge_arrays(graph: Graph) -> tuple[torch.Tensor, torch.Tensor]:
    """Per edge: its sender's position in ``graph.senders`` and its receiver block."""
    receivers = graph.receivers
    counts = torch.tensor([r.n_senders for r in receivers])
    block = torch.repeat_interleave(torch.arange(len(receivers)), counts)
    sender = torch.cat([torch.arange(r.n_senders) for r in receivers])
    return sender, block


def prune(graph: Graph, kept: torch.Tensor) -> torch.Tensor:
    """The edges of the circuit ``kept`` (``[n_edges]`` bool) that connect the input to the
    logits, as MIB's ``Graph.prune`` keeps them (see the module docstring).

    A node stays while it has an outgoing circuit edge and an incoming one (the embeddings
    always count as having one; a query head's inputs are its query and its key/value
    head's key and value); an edge stays while its sender stays and its receiver does (the
    logits always; a key/value head while any query head of its group does).
    """
    kept = torch.as_tensor(kept, dtype=torch.bool).flatten().clone()
    if kept.numel() != graph.n_edges:
        raise IntervError(
            f"kept must have one value per edge ({graph.n_edges}); got {kept.numel()}"
        )
    senders = graph.senders
    position = {node: i for i, node in enumerate(senders)}
    sender, block = _edge_arrays(graph)
    # each receiver block -> the sender nodes (query heads, MLP) whose input it is
    owner = torch.zeros(len(graph.receivers), len(senders), dtype=torch.bool)
    is_logits = torch.zeros(len(graph.receivers), dtype=torch.bool)
    for b, receiver in enumerate(graph.receivers):
        node = receiver.node
        if node.kind == "logits":
            is_logits[b] = True
        elif node.kind == "head" and node.kv:
            first = node.head * graph.group_size
            for h in range(first, first + graph.group_size):
                owner[b, position[Node("head", node.layer, h)]] = True
        else:
            owner[b, position[node]] = True
    owner_f = owner.float()
    while True:
        has_out = torch.zeros(len(senders), dtype=torch.bool)
        has_out[sender[kept]] = True
        fed = torch.zeros(len(graph.receivers), dtype=torch.bool)
        fed[block[kept]] = True
        has_in = (fed.float() @ owner_f) > 0
        has_in[0] = True  # the embeddings
        alive = has_out & has_in
        open_block = is_logits | ((owner_f @ alive.float()) > 0)
        now = kept & alive[sender] & open_block[block]
        if torch.equal(now, kept):
            return now
        kept = now


@dataclass(frozen=True, eq=False)
class MIBCircuit:
    """A circuit file in MIB's format, read against an interv graph.

    Attributes:
        graph: the (ungrouped) graph it scores.
        scores: ``[n_edges]`` float64 MIB importance scores in graph order (higher = more
            important, MIB's sign), or None when the file scores nothing (all zero).
        in_graph: ``[n_edges]`` bool: the file's circuit membership.
        d_model: the model's width (MIB's config carries it).
        source: where it came from (a file name or ``"interv"``).
    """

    graph: Graph
    scores: torch.Tensor | None
    in_graph: torch.Tensor
    d_model: int
    source: str

    def to_dict(self) -> dict[str, Any]:
        """MIB's JSON form (``Graph.to_json``): cfg, nodes (in_graph after pruning the
        membership), edges (score, in_graph)."""
        graph = self.graph
        _check_mib_shape(graph, "writing a MIB circuit file")
        scores = (
            torch.zeros(graph.n_edges, dtype=torch.float64) if self.scores is None else self.scores
        )
        alive = prune(graph, self.in_graph)
        sender, _ = _edge_arrays(graph)
        used = {graph.senders[int(i)] for i in sender[alive].tolist()}
        nodes = {_node_name(node): {"in_graph": node in used} for node in graph.senders}
        nodes["logits"] = {"in_graph": True}
        edges = {
            mib_edge_name(edge): {"score": float(score), "in_graph": bool(member)}
            for edge, score, member in zip(
                graph.edges, scores.tolist(), self.in_graph.tolist(), strict=True
            )
        }
        cfg = {
            "n_layers": graph.n_layers,
            "n_heads": graph.n_heads,
            "parallel_attn_mlp": False,
            "d_model": self.d_model,
        }
        return {"cfg": cfg, "nodes": nodes, "edges": edges}


def read_mib_circuit(source: str | Path | Mapping[str, Any], graph: Graph) -> MIBCircuit:
    """Read a MIB circuit file (JSON, MIB's ``Graph.to_json`` format) against ``graph``.

    Every edge of ``graph`` must be in the file, and nothing else (node-level and
    neuron-level files are refused); its config must be ``graph``'s shape.

    Args:
        source: a path to the JSON file, or its parsed content.
        graph: the interv graph of the model it is evaluated on (ungrouped, with MLPs).
    """
    _check_mib_shape(graph, "reading a MIB circuit file")
    if isinstance(source, Mapping):
        data, name = source, "the given MIB circuit"
    else:
        path = as_path(source, "MIB circuit file")
        data, name = read_json(path, "MIB circuit file"), str(path)
    if not isinstance(data, Mapping) or not all(k in data for k in ("cfg", "nodes", "edges")):
        raise IntervError(f"{name} is not a MIB circuit file: it needs 'cfg', 'nodes', 'edges'")
    cfg = data["cfg"] if isinstance(data["cfg"], Mapping) else {}
    for key in ("n_layers", "n_heads"):
        if cfg.get(key) != getattr(graph, key):
            raise IntervError(
                f"{name} is for another model: cfg {key} {cfg.get(key)!r}, "
                f"{graph.model_name} has {getattr(graph, key)}"
            )
    d_model = cfg.get("d_model")
    if isinstance(d_model, bool) or not isinstance(d_model, int) or d_model < 1:
        raise IntervError(f"{name}: cfg d_model must be a positive int; got {d_model!r}")
    if cfg.get("parallel_attn_mlp"):
        raise IntervError(f"{name} describes parallel attention and MLP; interv refuses those")
    records = data["edges"]
    if not isinstance(records, Mapping):
        raise IntervError(f"{name}: 'edges' must map edge names to {{'score', 'in_graph'}}")
    index = {mib_edge_name(edge): i for i, edge in enumerate(graph.edges)}
    scores = torch.zeros(graph.n_edges, dtype=torch.float64)
    in_graph = torch.zeros(graph.n_edges, dtype=torch.bool)
    seen = torch.zeros(graph.n_edges, dtype=torch.bool)
    any_score = False
    for edge_name, record in records.items():
        i = index.get(edge_name)
        if i is None:
            _edge_of(edge_name)  # a malformed name says so; a well-formed one is foreign
            raise IntervError(
                f"{name}: edge {edge_name!r} is not in the graph of {graph.model_name}"
            )
        if not isinstance(record, Mapping) or not isinstance(record.get("in_graph"), bool):
            raise IntervError(f"{name}: edge {edge_name!r} needs a bool 'in_graph'")
        score = record.get("score")
        if score is not None:
            if (
                isinstance(score, bool)
                or not isinstance(score, int | float)
                or not math.isfinite(score)
            ):
                raise IntervError(f"{name}: edge {edge_name!r} has a non-number score {score!r}")
            scores[i] = float(score)
            any_score = True
        in_graph[i] = record["in_graph"]
        seen[i] = True
    if not bool(seen.all()):
        missing = [mib_edge_name(graph.edges[i]) for i in (~seen).nonzero().flatten()[:3].tolist()]
        raise IntervError(
            f"{name} holds {int(seen.sum())} of the graph's {graph.n_edges} edges (missing "
            f"e.g. {missing}); a MIB edge file lists every edge"
        )
    return MIBCircuit(graph, scores if any_score else None, in_graph, d_model, name)


def write_mib_circuit(
    path: str | Path,
    ranking: CircuitResult | EdgeScores | MIBCircuit,
    *,
    d_model: int | None = None,
    n_edges: int | None = None,
    overwrite: bool = False,
) -> Path:
    """Write an interv circuit as a MIB circuit file (an importance-score submission).

    Scores: ``-value`` of a :class:`~interv.circuits.CircuitResult` (exact where checked,
    the estimate elsewhere) or of :class:`~interv.circuits.EdgeScores` (MIB's sign: higher
    = more important). ``in_graph``: the top ``n_edges`` by ``|value|``, pruned (none when
    None). ``d_model``: the model's width (``model.cfg.d_model``; MIB's config carries it),
    needed unless ``ranking`` is a :class:`MIBCircuit`. interv's no-overwrite rule applies
    (``overwrite=True`` replaces a regular file).
    """
    if isinstance(ranking, MIBCircuit):
        circuit = ranking
    else:
        if isinstance(ranking, CircuitResult):
            values, order = ranking.value, ranking.ranking()
        else:
            values = ranking.scores
            order = torch.sort(-values.abs(), stable=True).indices
        graph = ranking.graph
        member = torch.zeros(graph.n_edges, dtype=torch.bool)
        if n_edges is not None:
            member[order[:n_edges]] = True
        if isinstance(d_model, bool) or not isinstance(d_model, int) or d_model < 1:
            raise IntervError(f"d_model must be the model's width, a positive int; got {d_model!r}")
        circuit = MIBCircuit(graph, -values.double(), prune(graph, member), d_model, "interv")
    text = json.dumps(circuit.to_dict())
    with claim_file(path, what="MIB circuit file", by="interv", overwrite=overwrite) as out:
        return out.write_text(Path(path).expanduser().name, text)
