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

Circuit files (MIB's ``Graph.to_json`` / ``from_json`` format, or ``.pt`` from ``to_pt``):
``{"cfg": {"n_layers", "n_heads", "parallel_attn_mlp", "d_model"}, "nodes": {name:
{"in_graph"}}, "edges": {name: {"score", "in_graph"}}}``, node names ``input``, ``a{L}.h{H}``,
``m{L}``, ``logits``, edge names ``a0.h1->a1.h2<k>``, ``input->m0``, ``m1->logits``
(:func:`mib_layout` is the one place a graph's MIB names and ``parallel_attn_mlp`` come
from). MIB's scores are higher for more helpful edges (:func:`mib_scores`: ``-value`` for
noising, ``+value`` for denoising). MIB ranks a file by its scores alone, by ``|score|``
(absolute) or by score (signed), highest first (:func:`mib_order`); under
``convention="mib"`` interv ranks every ranking that way (a ``CircuitResult`` by its values,
exact where checked, not checked edges first), so interv's curve and MIB's evaluate the same
circuits, up to ties (MIB's sort is unstable; :func:`cutoff_ties`).
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
from interv.circuits.pruning import connected, edge_arrays
from interv.circuits.screens import EdgeScores
from interv.errors import IntervError

__all__ = [
    "CONVENTIONS",
    "MIBCircuit",
    "cutoff_ties",
    "mib_edge_count",
    "mib_edge_name",
    "mib_layout",
    "mib_order",
    "mib_scores",
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
    1)``, with MLPs; GPT-2 small 32,491, Qwen-2.5-0.5B 179,749, SmolLM2-135M 123,211. A
    parallel graph (``parallel_attn_mlp``: a block's MLP reads the block's input, not its
    heads) has no ``a{L}.h{H}->m{L}`` edges: ``n_layers x H`` fewer (463 for 4 x 4, not 479).
    """
    heads, per_layer = graph.n_heads, graph.n_heads + 1
    total = 1 + graph.n_layers * per_layer  # into the logits
    for layer in range(graph.n_layers):
        before = 1 + layer * per_layer
        total += 3 * heads * before + before + (0 if graph.parallel else heads)  # q/k/v, MLP
    return total


def mib_layout(graph: Graph) -> tuple[tuple[str, ...], bool]:
    """MIB's view of ``graph``: its edge names in graph order and ``parallel_attn_mlp``.

    The one place where an interv graph becomes MIB's: the readers, the writer and the
    curve ask it. Any graph whose key and value edges end at a *query* head's own input
    (receiver ``Node("head", L, H)``, input ``"k"``/``"v"``) and whose blocks have MLPs is
    MIB's shape; a grouped graph (key/value edges ending at a key/value head) is refused.
    """
    _check_mib_shape(graph, "MIB's edge names")
    return tuple(mib_edge_name(edge) for edge in graph.edges), bool(graph.parallel)


def _check_mib_shape(graph: Graph, what: str) -> None:
    if any(receiver.node.kv for receiver in graph.receivers):
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


def prune(graph: Graph, kept: torch.Tensor) -> torch.Tensor:
    """The edges of the circuit ``kept`` (``[n_edges]`` bool) that connect the input to the
    logits, as MIB's ``Graph.prune`` keeps them (see the module docstring).

    A node stays while it has an outgoing circuit edge and an incoming one (the embeddings
    always count as having one; a query head's inputs are its query and its key/value
    head's key and value); an edge stays while its sender stays and its receiver does (the
    logits always; a key/value head while any query head of its group does). The rule is
    :func:`interv.circuits.pruning.connected`'s, for one circuit.
    """
    kept = torch.as_tensor(kept, dtype=torch.bool).flatten()
    if kept.numel() != graph.n_edges:
        raise IntervError(
            f"kept must have one value per edge ({graph.n_edges}); got {kept.numel()}"
        )
    return connected(graph, kept)


def mib_scores(ranking: CircuitResult | EdgeScores | MIBCircuit) -> torch.Tensor:
    """``[n_edges]`` float64 MIB importance scores of a ranking: higher = more helpful.

    interv's values are the metric's change when the edge is patched. Noising (clean run,
    the edge moved to its corrupted value): a needed edge lowers the metric, so MIB's score
    is ``-value``. Denoising (corrupted run, the edge moved to its clean value): a needed
    edge raises the metric, so the score is ``+value``. For a
    :class:`~interv.circuits.CircuitResult` the value is the exact effect where checked and
    the estimate elsewhere: MIB ranks the file by these numbers alone (it knows nothing of
    which edges were checked), and ``faithfulness(..., convention="mib")`` ranks the same way.
    """
    if isinstance(ranking, MIBCircuit):
        if ranking.scores is None:
            raise IntervError(
                f"the MIB circuit file {ranking.source} scores no edge (a circuit, not a "
                "ranking); a ranking needs importance scores"
            )
        return ranking.scores
    if isinstance(ranking, CircuitResult):
        values, direction = ranking.value, ranking.scores.direction
    elif isinstance(ranking, EdgeScores):
        values, direction = ranking.scores, ranking.direction
    else:
        raise IntervError(
            "MIB scores come from a CircuitResult, EdgeScores or a MIBCircuit; got "
            f"{type(ranking).__name__}"
        )
    values = values.double()
    return -values if direction == "noise" else values.clone()


def mib_order(scores: torch.Tensor, absolute: bool) -> torch.Tensor:
    """Every edge index, MIB's ``apply_topn`` order: by ``|score|`` (absolute, CMD) or by
    score (signed, CPR), highest first. Ties keep graph order here; MIB breaks them with an
    unstable ``torch.argsort``, so a cutoff inside a tie is exact only up to ties
    (:func:`cutoff_ties`). MIB holds scores as float32: they are ranked so here too (two
    float64 scores that round to the same float32 tie in MIB)."""
    key = _as_mib(scores, absolute)
    return torch.sort(-key, stable=True).indices


def _as_mib(scores: torch.Tensor, absolute: bool) -> torch.Tensor:
    """The ranking key MIB sorts: the float32 score (``Graph.scores`` is float32), or its
    absolute value."""
    key = scores.to(torch.float32)
    return key.abs() if absolute else key


def cutoff_ties(scores: torch.Tensor, sizes: Sequence[int], absolute: bool) -> list[int]:
    """Per circuit size ``n``: how many edges share the score at MIB's cutoff when the cutoff
    falls inside a tie (the ``n``-th and ``(n+1)``-th edges score the same), else 0. There
    MIB's unstable sort may keep other edges of the tie than interv's graph order."""
    key = _as_mib(scores, absolute)
    ordered = key[mib_order(scores, absolute)]
    counts = []
    for n in sizes:
        if 0 < n < ordered.numel() and bool(ordered[n - 1] == ordered[n]):
            counts.append(int((key == ordered[n]).sum()))
        else:
            counts.append(0)
    return counts


def tie_note(scores: torch.Tensor, fractions: Sequence[float], sizes: Sequence[int]) -> str:
    """A clause naming the fractions whose cutoff falls inside a tie of scores ("" if none)."""
    parts = []
    for absolute, what in ((True, "|score|"), (False, "signed score")):
        ties = cutoff_ties(scores, sizes, absolute)
        parts += [
            f"{p:.3g} ({what}: {t} edges tied at the cutoff)"
            for p, t in zip(fractions, ties, strict=True)
            if t
        ]
    if not parts:
        return ""
    return (
        "; exact up to ties: MIB breaks ties with an unstable sort, so at "
        + ", ".join(parts)
        + " its circuit may hold other edges of the tie"
    )


@dataclass(frozen=True, eq=False)
class MIBCircuit:
    """A circuit file in MIB's format, read against an interv graph.

    Attributes:
        graph: the graph it scores (MIB's shape: :func:`mib_layout`).
        scores: ``[n_edges]`` float64 MIB importance scores in graph order (higher = more
            important, MIB's sign), or None when the file scores nothing (no score, or every
            score 0: a circuit, such as one of the leaderboard's per-size binary circuits).
        in_graph: ``[n_edges]`` bool: the file's circuit membership.
        d_model: the model's width (MIB's config carries it).
        source: where it came from (a file name or ``"interv"``).
        unlisted: edges of the graph the file does not list (MIB's ``from_json`` leaves
            them at score 0, not in the circuit; so does interv).
    """

    graph: Graph
    scores: torch.Tensor | None
    in_graph: torch.Tensor
    d_model: int
    source: str
    unlisted: int = 0

    def to_dict(self) -> dict[str, Any]:
        """MIB's JSON form (``Graph.to_json``): cfg, nodes (in_graph after pruning the
        membership), edges (score, in_graph)."""
        graph = self.graph
        names, parallel = mib_layout(graph)
        scores = (
            torch.zeros(graph.n_edges, dtype=torch.float64) if self.scores is None else self.scores
        )
        alive = prune(graph, self.in_graph)
        sender, _ = edge_arrays(graph)
        used = {graph.senders[int(i)] for i in sender[alive].tolist()}
        nodes = {_node_name(node): {"in_graph": node in used} for node in graph.senders}
        nodes["logits"] = {"in_graph": True}
        edges = {
            name: {"score": float(score), "in_graph": bool(member)}
            for name, score, member in zip(
                names, scores.tolist(), self.in_graph.tolist(), strict=True
            )
        }
        cfg = {
            "n_layers": graph.n_layers,
            "n_heads": graph.n_heads,
            "parallel_attn_mlp": parallel,
            "d_model": self.d_model,
        }
        return {"cfg": cfg, "nodes": nodes, "edges": edges}


def _check_cfg(cfg: Any, graph: Graph, parallel: bool, name: str) -> int:
    """The file's ``d_model`` after checking its cfg is ``graph``'s shape."""
    if not isinstance(cfg, Mapping):
        raise IntervError(f"{name}: 'cfg' must map n_layers, n_heads, ... to values; got {cfg!r}")
    for key in ("n_layers", "n_heads"):
        if cfg.get(key) != getattr(graph, key):
            raise IntervError(
                f"{name} is for another model: cfg {key} {cfg.get(key)!r}, "
                f"{graph.model_name} has {getattr(graph, key)}"
            )
    d_model = cfg.get("d_model")
    if isinstance(d_model, bool) or not isinstance(d_model, int) or d_model < 1:
        raise IntervError(f"{name}: cfg d_model must be a positive int; got {d_model!r}")
    flag = cfg.get("parallel_attn_mlp", False)
    if not isinstance(flag, bool) or flag != parallel:
        blocks = "parallel" if parallel else "sequential"
        raise IntervError(
            f"{name} is for another model: cfg parallel_attn_mlp {flag!r}, {graph.model_name}'s "
            f"blocks are {blocks} (parallel_attn_mlp {parallel})"
        )
    return d_model


def _refuse_node_level(name: str, where: str, fields: Sequence[str]) -> None:
    raise IntervError(
        f"{name}: {where} carries {', '.join(repr(f) for f in fields)}: a node- or neuron-level "
        "MIB file (ranked by node or neuron scores, MIB's --level node/neuron); interv reads "
        "edge-level files only and refuses it rather than read it as an edge circuit"
    )


def _score_of(value: Any, name: str, edge_name: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise IntervError(
            f"{name}: edges[{edge_name!r}].score must be a finite number; got {value!r}"
        )
    return float(value)


def _member_of(value: Any, name: str, edge_name: str) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, int) and value in (0, 1):
        return bool(value)
    raise IntervError(
        f"{name}: edges[{edge_name!r}].in_graph must be true/false (or 0/1); got {value!r}"
    )


def _read_json_circuit(data: Any, graph: Graph, name: str) -> MIBCircuit:
    names, parallel = mib_layout(graph)
    if not isinstance(data, Mapping) or not all(k in data for k in ("cfg", "nodes", "edges")):
        raise IntervError(f"{name} is not a MIB circuit file: it needs 'cfg', 'nodes', 'edges'")
    d_model = _check_cfg(data["cfg"], graph, parallel, name)
    nodes = data["nodes"]
    if not isinstance(nodes, Mapping):
        raise IntervError(f"{name}: 'nodes' must map node names to {{'in_graph'}}; got {nodes!r}")
    known = {_node_name(node) for node in graph.senders} | {"logits"}
    for node_name, record in nodes.items():
        if node_name not in known:
            raise IntervError(
                f"{name}: nodes[{node_name!r}] is not a node of {graph.model_name}'s graph "
                f"({graph.n_layers} layers x {graph.n_heads} heads: 'input', 'a0.h0'.."
                f"'a{graph.n_layers - 1}.h{graph.n_heads - 1}', 'm0'.., 'logits')"
            )
        if not isinstance(record, Mapping):
            raise IntervError(f"{name}: nodes[{node_name!r}] must be {{'in_graph': ...}}")
        extra = [f for f in ("score", "neurons", "neurons_scores") if f in record]
        if extra:
            _refuse_node_level(name, f"nodes[{node_name!r}]", extra)
    records = data["edges"]
    if not isinstance(records, Mapping):
        raise IntervError(f"{name}: 'edges' must map edge names to {{'score', 'in_graph'}}")
    index = {edge_name: i for i, edge_name in enumerate(names)}
    scores = torch.zeros(graph.n_edges, dtype=torch.float64)
    in_graph = torch.zeros(graph.n_edges, dtype=torch.bool)
    seen = torch.zeros(graph.n_edges, dtype=torch.bool)
    scored = unscored = None
    for edge_name, record in records.items():
        i = index.get(edge_name)
        if i is None:
            try:
                _edge_of(edge_name)  # a malformed name says so; a well-formed one is foreign
            except IntervError as error:
                raise IntervError(f"{name}: edges[{edge_name!r}]: {error}") from None
            raise IntervError(
                f"{name}: edges[{edge_name!r}] is not an edge of {graph.model_name}'s graph"
            )
        if not isinstance(record, Mapping) or "in_graph" not in record:
            raise IntervError(f"{name}: edges[{edge_name!r}] needs 'in_graph' (and 'score')")
        score = record.get("score")
        if score is None:
            unscored = unscored or edge_name
        else:
            scores[i] = _score_of(score, name, edge_name)
            scored = scored or edge_name
        in_graph[i] = _member_of(record["in_graph"], name, edge_name)
        seen[i] = True
    if scored and unscored:
        raise IntervError(
            f"{name}: edges[{scored!r}] has a score and edges[{unscored!r}] none; a MIB file "
            "scores every edge it lists (importances) or none (a binary circuit)"
        )
    unlisted = int((~seen).sum())
    has_scores = scored is not None and bool((scores != 0).any())
    return MIBCircuit(graph, scores if has_scores else None, in_graph, d_model, name, unlisted)


def _matrix_index(edge_name: str, n_heads: int, n_backward: int) -> tuple[int, int]:
    """MIB's ``(forward, backward)`` matrix position of an edge (``Graph.to_pt``'s layout:
    forward ``input``, then per layer the heads and the MLP; backward per layer the q, k, v
    inputs of every head and the MLP, the logits last)."""
    edge = _edge_of(edge_name)
    sender, receiver = edge.sender, edge.receiver
    if sender.kind == "embed":
        forward = 0
    else:
        offset = n_heads if sender.kind == "mlp" else int(sender.head or 0)
        forward = 1 + int(sender.layer or 0) * (n_heads + 1) + offset
    if receiver.kind == "logits":
        return forward, n_backward - 1
    base = int(receiver.layer or 0) * (3 * n_heads + 1)
    if receiver.kind == "mlp":
        return forward, base + 3 * n_heads
    return forward, base + "qkv".index(edge.input) * n_heads + int(receiver.head or 0)


def _read_pt_circuit(path: Path, graph: Graph) -> MIBCircuit:
    names, parallel = mib_layout(graph)
    try:
        data = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as error:  # torch raises bare pickling errors
        first = str(error).strip().splitlines()[0] if str(error).strip() else ""
        raise IntervError(
            f"{path}: not a MIB .pt circuit file that torch.load(weights_only=True) reads "
            f"({type(error).__name__}: {first[:160]}); interv never unpickles other objects"
        ) from None
    name = str(path)
    needed = ("cfg", "edges_scores", "edges_in_graph")
    if not isinstance(data, Mapping) or not all(k in data for k in needed):
        raise IntervError(f"{name} is not a MIB .pt circuit file: it needs {list(needed)}")
    extra = [k for k in ("nodes_scores", "neurons_in_graph", "neurons_scores") if k in data]
    if extra:
        _refuse_node_level(name, "the file", extra)
    d_model = _check_cfg(data["cfg"], graph, parallel, name)
    shape = (1 + graph.n_layers * (graph.n_heads + 1), graph.n_layers * (3 * graph.n_heads + 1) + 1)
    for key in ("edges_scores", "edges_in_graph"):
        value = data[key]
        if not isinstance(value, torch.Tensor) or tuple(value.shape) != shape:
            got = tuple(value.shape) if isinstance(value, torch.Tensor) else type(value).__name__
            raise IntervError(f"{name}: {key} must be a {list(shape)} tensor; got {got}")
    matrix = data["edges_scores"].double()
    if not bool(torch.isfinite(matrix).all()):
        raise IntervError(f"{name}: edges_scores holds a non-finite score (NaN or inf)")
    rows, cols = zip(*(_matrix_index(n, graph.n_heads, shape[1]) for n in names), strict=True)
    rows_t, cols_t = torch.tensor(rows), torch.tensor(cols)
    scores = matrix[rows_t, cols_t]
    in_graph = data["edges_in_graph"][rows_t, cols_t] != 0
    has_scores = bool((scores != 0).any())
    return MIBCircuit(graph, scores if has_scores else None, in_graph, d_model, name)


def read_mib_circuit(source: str | Path | Mapping[str, Any], graph: Graph) -> MIBCircuit:
    """Read a MIB circuit file against ``graph``, as MIB's ``Graph.from_json`` / ``from_pt``
    read it.

    JSON (``Graph.to_json``) or ``.pt`` (``Graph.to_pt``, loaded with
    ``torch.load(weights_only=True)`` only). Edges the file does not list score 0 and are
    out of the circuit (as MIB reads them; counted in ``unlisted``); ``in_graph`` is a bool or
    0/1. A file without scores (or all 0) is a circuit, such as one of the leaderboard's
    per-size binary circuits: ``faithfulness`` evaluates a list of them, one per fraction.
    Refused, in one line naming the field: node- and neuron-level files (nodes carrying
    ``score``, ``neurons`` or ``neurons_scores``; MIB ranks those by node or neuron, never by
    edge), a cfg of another shape (``n_layers``, ``n_heads``, ``parallel_attn_mlp``), names
    that are not the graph's, non-numeric or non-finite scores, scores on some edges only.

    Args:
        source: a path to the JSON or ``.pt`` file, or the JSON's parsed content.
        graph: the interv graph of the model it is evaluated on (MIB's shape:
            :func:`mib_layout`).
    """
    _check_mib_shape(graph, "reading a MIB circuit file")
    if isinstance(source, Mapping):
        return _read_json_circuit(source, graph, "the given MIB circuit")
    path = as_path(source, "MIB circuit file")
    if path.suffix == ".pt":
        return _read_pt_circuit(path, graph)
    return _read_json_circuit(read_json(path, "MIB circuit file"), graph, str(path))


def write_mib_circuit(
    path: str | Path,
    ranking: CircuitResult | EdgeScores | MIBCircuit,
    *,
    d_model: int | None = None,
    n_edges: int | None = None,
    overwrite: bool = False,
) -> Path:
    """Write an interv circuit as a MIB circuit file (an importance-score submission).

    Scores: :func:`mib_scores` (MIB's sign, higher = more helpful: ``-value`` when noising,
    ``+value`` when denoising; for a :class:`~interv.circuits.CircuitResult` the exact effect
    where checked, the estimate elsewhere). MIB ranks the file by these numbers only, and
    ``faithfulness(..., convention="mib")`` ranks the result the same way, so both evaluate
    the same circuit at every size (up to ties, which MIB breaks with an unstable sort).
    ``in_graph``: the top ``n_edges`` by ``|score|`` (MIB's ``apply_topn(n_edges,
    absolute=True)``), pruned to the circuit MIB evaluates (none when None; MIB's own saved
    files hold ``apply_topn``'s single prune pass, which ``evaluate_graph`` prunes further).
    ``cfg.parallel_attn_mlp``: the graph's.
    ``d_model``: the model's width (``model.cfg.d_model``; MIB's config carries it), needed
    unless ``ranking`` is a :class:`MIBCircuit`. interv's no-overwrite rule applies
    (``overwrite=True`` replaces a regular file).
    """
    if isinstance(ranking, MIBCircuit):
        circuit = ranking
    else:
        scores = mib_scores(ranking)
        graph = ranking.graph
        member = torch.zeros(graph.n_edges, dtype=torch.bool)
        if n_edges is not None:
            member[mib_order(scores, absolute=True)[:n_edges]] = True
        if isinstance(d_model, bool) or not isinstance(d_model, int) or d_model < 1:
            raise IntervError(f"d_model must be the model's width, a positive int; got {d_model!r}")
        circuit = MIBCircuit(graph, scores, prune(graph, member), d_model, "interv")
    text = json.dumps(circuit.to_dict())
    with claim_file(path, what="MIB circuit file", by="interv", overwrite=overwrite) as out:
        return out.write_text(Path(path).expanduser().name, text)
