"""The computational graph of a transformer: writers, readers and the edges between them.

Nodes: the token embeddings (``embed``: everything block 0 reads, token and positional
embeddings together), every attention head (``L3H2``), every MLP (``MLP3``) and the logits.
A node *writes* into the residual stream (embed, heads, MLPs) or *reads* from it (heads
through their query, key and value inputs, MLPs through their input, the logits through
the final norm). An edge is one writer -> one reader input:

- ``L0H3->L1H5.q``, ``.k``, ``.v``: a head of an earlier layer (or embed, or an earlier
  MLP) into a later head's query, key or value input;
- ``L0H3->MLP1``, ``embed->MLP0``: into an MLP's input (in a sequential block the MLP reads
  the heads of its own block: it runs after them; in a *parallel* block, GPT-J, GPT-NeoX,
  Phi, Cohere, the MLP reads the block's input, so a block's heads do not reach its MLP and
  the graph has no such edges);
- ``MLP2->logits``: into the final norm and unembedding (every writer).

Grouped-query attention, natively: a key or value input belongs to a *key/value head*,
shared by a group of query heads, so an edge into a key or value input ends at the
key/value head (``L0H3->L1KV2.k``, receiver ``Node("head", 1, 2, kv=True)``). The graph
has one such edge per writer, key/value head and input (``n_key_value_heads`` of them per
layer, not ``n_heads``), and patching it changes the key (or value) that every query head
of the group reads. Without grouped-query attention key/value head ``h`` is query head
``h`` and the labels say ``L1H2.k``.

MIB's graph (``Graph.from_model(model, kv="ungrouped")``) ungroups them instead: every query
head has its own key and value input, a copy of its key/value head's (``L0H3->L1H5.k`` is
query head 5's key input even where it shares a key/value head), so there are ``n_heads``
key and value receivers per layer (SmolLM2-135M: 123,211 edges against the grouped graph's
70,651; Qwen-2.5-0.5B: 179,749 against 79,813) and patching an edge into one changes that
query head's keys (values) only, the other query heads of its group keeping theirs.

A writer's output is its write into the residual stream as its block defines it
(:mod:`interv.engine.writes`): a head's is the change of its block's attention write when only
its ``z`` changes (through the post-attention norm and the residual multiplier where the
family has them; docs/circuits-writes.md).

Edges come in a fixed canonical order: by receiver in forward order (per layer: the query
inputs of heads 0.., the key inputs, the value inputs, then the MLP; the logits last),
then by writer in forward order (embed, the heads of layer 0, MLP 0, the heads of layer
1, ...). Each receiver reads a *prefix* of that writer order.
"""

from __future__ import annotations

import bisect
import dataclasses
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, Literal

from interv.circuits._kv import check_kv_copies
from interv.engine.writes import Writes
from interv.errors import IntervError

__all__ = ["EDGE_INPUTS", "KV", "NODE_KINDS", "Edge", "Graph", "Node"]

NODE_KINDS: tuple[str, ...] = ("embed", "head", "mlp", "logits")
"""What a node is: the embeddings, an attention head, an MLP, the logits."""

EDGE_INPUTS: tuple[str, ...] = ("q", "k", "v", "mlp", "logits")
"""What an edge ends in: a head's query, key or value input, an MLP's input, the logits."""

KV: tuple[str, ...] = ("grouped", "ungrouped")
"""How a grouped-query model's key and value inputs are graphed: per key/value head
(``"grouped"``, interv's default) or per query head (``"ungrouped"``, MIB's graph)."""

_HEAD = re.compile(r"^L(\d+)(H|KV)(\d+)$")
_MLP = re.compile(r"^MLP(\d+)$")


@dataclass(frozen=True)
class Node:
    """A writer or reader of the residual stream.

    Attributes:
        kind: ``"embed"``, ``"head"``, ``"mlp"`` or ``"logits"``.
        layer: the block (heads and MLPs); None for embed and logits.
        head: the head index (heads only): a query head, or a key/value head when ``kv``.
        kv: True for the key/value head a grouped-query key or value edge ends at.
    """

    kind: Literal["embed", "head", "mlp", "logits"]
    layer: int | None = None
    head: int | None = None
    kv: bool = False

    def __post_init__(self) -> None:
        if self.kind not in NODE_KINDS:
            raise IntervError(f"unknown node kind {self.kind!r}; choose one of {NODE_KINDS}")
        needs_layer = self.kind in ("head", "mlp")
        if needs_layer != (self.layer is not None):
            raise IntervError(
                f"a {self.kind} node {'needs' if needs_layer else 'takes no'} layer; "
                f"got layer={self.layer!r}"
            )
        if (self.kind == "head") != (self.head is not None):
            raise IntervError(
                f"a {self.kind} node {'needs' if self.kind == 'head' else 'takes no'} head; "
                f"got head={self.head!r}"
            )
        if self.kv and self.kind != "head":
            raise IntervError(f"only a head node can be a key/value head; got kind {self.kind!r}")

    @property
    def label(self) -> str:
        """``"embed"``, ``"L3H2"`` (``"L3KV1"`` for a key/value head), ``"MLP3"``, ``"logits"``."""
        if self.kind == "head":
            return f"L{self.layer}{'KV' if self.kv else 'H'}{self.head}"
        if self.kind == "mlp":
            return f"MLP{self.layer}"
        return self.kind

    @classmethod
    def parse(cls, label: str) -> Node:
        """The node of a :attr:`label`."""
        text = str(label).strip()
        if text in ("embed", "logits"):
            return cls(text)  # type: ignore[arg-type]
        match = _HEAD.match(text)
        if match:
            return cls("head", int(match[1]), int(match[3]), kv=match[2] == "KV")
        match = _MLP.match(text)
        if match:
            return cls("mlp", int(match[1]))
        raise IntervError(
            f"unknown node label {label!r}; labels look like 'embed', 'L3H2', 'L3KV1', "
            "'MLP3' or 'logits'"
        )

    def __str__(self) -> str:
        return self.label


@dataclass(frozen=True)
class Edge:
    """One writer -> one reader input.

    Attributes:
        sender: the writer (embed, a head, an MLP).
        receiver: the reader (a head, a key/value head, an MLP, the logits).
        input: ``"q"``, ``"k"``, ``"v"`` (a head's input), ``"mlp"`` or ``"logits"``.
    """

    sender: Node
    receiver: Node
    input: Literal["q", "k", "v", "mlp", "logits"]

    def __post_init__(self) -> None:
        if self.input not in EDGE_INPUTS:
            raise IntervError(f"unknown edge input {self.input!r}; choose one of {EDGE_INPUTS}")
        if self.sender.kind == "logits" or self.sender.kv:
            raise IntervError(f"{self.sender.label} writes nothing; it cannot send an edge")
        expected = {"q": "head", "k": "head", "v": "head", "mlp": "mlp", "logits": "logits"}
        if self.receiver.kind != expected[self.input]:
            raise IntervError(
                f"an edge into input {self.input!r} ends at a {expected[self.input]} node; "
                f"got {self.receiver.label}"
            )
        if self.input == "q" and self.receiver.kv:
            raise IntervError(f"a query input belongs to a query head, not {self.receiver.label}")

    @property
    def label(self) -> str:
        """``"L0H3->L1H5.k"``, ``"embed->MLP0"``, ``"L5H1->logits"``, ``"L0H3->L1KV2.k"``."""
        suffix = f".{self.input}" if self.input in ("q", "k", "v") else ""
        return f"{self.sender.label}->{self.receiver.label}{suffix}"

    @classmethod
    def parse(cls, label: str) -> Edge:
        """The edge of a :attr:`label`."""
        text = str(label).strip()
        if "->" not in text:
            raise IntervError(
                f"unknown edge label {label!r}; labels look like 'L0H3->L1H5.k', "
                "'embed->MLP0' or 'L5H1->logits'"
            )
        left, right = text.split("->", 1)
        sender = Node.parse(left)
        if right == "logits":
            return cls(sender, Node("logits"), "logits")
        name, _, component = right.partition(".")
        receiver = Node.parse(name)
        if receiver.kind == "mlp" and not component:
            return cls(sender, receiver, "mlp")
        if receiver.kind == "head" and component in ("q", "k", "v"):
            return cls(sender, receiver, component)  # type: ignore[arg-type]
        raise IntervError(
            f"unknown edge label {label!r}; a head receiver needs its input ('.q', '.k' or "
            "'.v'), an MLP or the logits none"
        )

    def __str__(self) -> str:
        return self.label


@dataclass(frozen=True)
class _Receiver:
    """One reader input and the contiguous block of edges into it (internal)."""

    node: Node
    input: str
    n_senders: int  # it reads senders[:n_senders]
    start: int  # index of its first edge


@dataclass(frozen=True, eq=False)
class Graph:
    """Every edge of a model's residual-stream graph, in canonical order.

    Build it with :meth:`from_model` (or :meth:`from_config`). Attributes:

    Attributes:
        n_layers, n_heads, n_kv_heads: the model's shape.
        has_mlp: whether the blocks have MLPs (False for attention-only models).
        model_name: the model's name, for sentences.
        parallel: whether attention and MLP read the same block input (parallel blocks:
            a block's MLP reads the writers before the block, not its heads).
        kv: ``"grouped"`` (default: key and value edges end at the key/value heads) or
            ``"ungrouped"`` (MIB's graph: at each query head's own copy; :data:`KV`).
    """

    n_layers: int
    n_heads: int
    n_kv_heads: int
    has_mlp: bool = True
    model_name: str = "model"
    parallel: bool = False
    kv: str = "grouped"
    _cache: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    def __post_init__(self) -> None:
        for name in ("n_layers", "n_heads", "n_kv_heads"):
            value = getattr(self, name)
            if not isinstance(value, int) or value < 1:
                raise IntervError(f"Graph {name} must be a positive int; got {value!r}")
        if self.kv not in KV:
            raise IntervError(f"unknown kv {self.kv!r}; choose one of {KV}")
        if self.n_heads % self.n_kv_heads:
            raise IntervError(
                f"n_heads ({self.n_heads}) must be a multiple of n_kv_heads ({self.n_kv_heads})"
            )

    @classmethod
    def from_config(cls, cfg: Any, *, model_name: str | None = None, kv: str = "grouped") -> Graph:
        """The graph of a transformer-lens config (``model.cfg``; its ``parallel_attn_mlp``
        says whether the blocks are parallel); ``kv``: one of :data:`KV`."""
        n_kv = getattr(cfg, "n_key_value_heads", None)
        return cls(
            n_layers=int(cfg.n_layers),
            n_heads=int(cfg.n_heads),
            n_kv_heads=int(cfg.n_heads if n_kv is None else n_kv),
            has_mlp=not bool(getattr(cfg, "attn_only", False)),
            model_name=str(model_name or getattr(cfg, "model_name", "model")),
            parallel=bool(getattr(cfg, "parallel_attn_mlp", False)),
            kv=kv,
        )

    @classmethod
    def from_model(cls, model: Any, kv: str = "grouped") -> Graph:
        """The graph of a transformer-lens bridge; refuses, in one line naming the family, a
        model whose residual stream is not a sum of the writes of embeddings, heads and MLPs
        (post-LN blocks, layers without attention heads).

        ``kv="ungrouped"``: MIB's graph, each query head with its own key and value inputs
        (module docstring); refused where the model's attention cannot run with
        per-query-head copies of its keys and values (checked once per model)."""
        if kv not in KV:
            raise IntervError(f"unknown kv {kv!r}; choose one of {KV}")
        writes = Writes.of(model)
        writes.require_graph()
        graph = cls.from_config(model.cfg, kv=kv)
        if graph.ungrouped:
            check_kv_copies(model, graph.n_heads, graph.n_kv_heads)
        if graph.parallel != writes.parallel:
            graph = dataclasses.replace(graph, parallel=writes.parallel)
        return graph

    @property
    def grouped(self) -> bool:
        """Whether key/value inputs belong to key/value heads shared by several query heads
        (a grouped-query model's grouped graph)."""
        return self.kv == "grouped" and self.n_kv_heads != self.n_heads

    @property
    def ungrouped(self) -> bool:
        """Whether each query head has its own copy of its key/value head's key and value
        inputs (a grouped-query model's ungrouped graph, MIB's)."""
        return self.kv == "ungrouped" and self.n_kv_heads != self.n_heads

    @property
    def group_size(self) -> int:
        """Query heads per key/value head."""
        return self.n_heads // self.n_kv_heads

    @cached_property
    def senders(self) -> tuple[Node, ...]:
        """Every writer in forward order: embed, the heads of layer 0, MLP 0, ..."""
        nodes = [Node("embed")]
        for layer in range(self.n_layers):
            nodes += [Node("head", layer, h) for h in range(self.n_heads)]
            if self.has_mlp:
                nodes.append(Node("mlp", layer))
        return tuple(nodes)

    def n_senders_before(self, layer: int) -> int:
        """How many writers precede block ``layer``'s attention (embed and earlier blocks)."""
        return 1 + layer * (self.n_heads + int(self.has_mlp))

    @cached_property
    def receivers(self) -> tuple[_Receiver, ...]:
        """Every reader input in canonical order, with its edge block."""
        out: list[_Receiver] = []
        start = 0

        def add(node: Node, component: str, n_senders: int) -> None:
            nonlocal start
            out.append(_Receiver(node, component, n_senders, start))
            start += n_senders

        kv = self.grouped
        for layer in range(self.n_layers):
            before = self.n_senders_before(layer)
            for h in range(self.n_heads):
                add(Node("head", layer, h), "q", before)
            for component in ("k", "v"):
                for r in range(self.n_kv_heads if kv else self.n_heads):
                    add(Node("head", layer, r, kv=kv), component, before)
            if self.has_mlp:
                add(Node("mlp", layer), "mlp", before + (0 if self.parallel else self.n_heads))
        add(Node("logits"), "logits", len(self.senders))
        return tuple(out)

    @cached_property
    def edges(self) -> tuple[Edge, ...]:
        """Every edge, in canonical order (see the module docstring)."""
        senders = self.senders
        return tuple(
            Edge(senders[u], receiver.node, receiver.input)  # type: ignore[arg-type]
            for receiver in self.receivers
            for u in range(receiver.n_senders)
        )

    @cached_property
    def nodes(self) -> tuple[Node, ...]:
        """Every node: the writers in forward order, the key/value heads (grouped-query
        models only), then the logits."""
        extra = []
        if self.grouped:
            extra = [
                Node("head", layer, r, kv=True)
                for layer in range(self.n_layers)
                for r in range(self.n_kv_heads)
            ]
        return (*self.senders, *extra, Node("logits"))

    @property
    def n_edges(self) -> int:
        """Number of edges."""
        last = self.receivers[-1]
        return last.start + last.n_senders

    @cached_property
    def _index(self) -> dict[Edge, int]:
        return {edge: i for i, edge in enumerate(self.edges)}

    @cached_property
    def _sender_index(self) -> dict[Node, int]:
        return {node: i for i, node in enumerate(self.senders)}

    def sender_index(self, node: Node) -> int:
        """Position of a writer in :attr:`senders`."""
        return self._sender_index[node]

    def receiver_of(self, index: int) -> _Receiver:
        """The receiver block holding edge ``index``."""
        starts = self._cache.get("starts")
        if starts is None:
            starts = self._cache["starts"] = [r.start for r in self.receivers]
        return self.receivers[bisect.bisect_right(starts, index) - 1]

    def index(self, edge: Edge | str | int) -> int:
        """The position of ``edge`` (an :class:`Edge`, its label or an index) in :attr:`edges`.

        Raises:
            IntervError: the edge is not in this graph (the message names it and a few valid
                edges near it).
        """
        if isinstance(edge, bool):
            raise IntervError(f"an edge is an Edge, a label or an int index; got {edge!r}")
        if isinstance(edge, int):
            if not 0 <= edge < self.n_edges:
                raise IntervError(
                    f"edge index {edge} is outside the graph; {self.model_name} has "
                    f"{self.n_edges} edges (valid indices 0..{self.n_edges - 1})"
                )
            return edge
        if isinstance(edge, str):
            edge = Edge.parse(edge)
        if not isinstance(edge, Edge):
            raise IntervError(f"an edge is an Edge, a label or an int index; got {edge!r}")
        found = self._index.get(edge)
        if found is None:
            raise IntervError(
                f"edge {edge.label!r} is not in the graph of {self.model_name} "
                f"({self._shape()}); edges into {edge.receiver.label!r} include "
                f"{self._neighbours(edge)}"
            )
        return found

    def indices(self, edges: Iterable[Edge | str | int]) -> list[int]:
        """:meth:`index` of each edge."""
        return [self.index(edge) for edge in edges]

    def _shape(self) -> str:
        kv = f", {self.n_kv_heads} key/value heads" if self.grouped else ""
        if self.ungrouped:
            kv = f", {self.n_kv_heads} key/value heads ungrouped"
        mlp = "" if self.has_mlp else ", attention only"
        parallel = ", parallel blocks" if self.parallel and self.has_mlp else ""
        return f"{self.n_layers} layers x {self.n_heads} heads{kv}{mlp}{parallel}"

    def _neighbours(self, edge: Edge) -> list[str]:
        same = [e.label for e in self.edges if e.receiver == edge.receiver][:3]
        if same:
            return same
        return [e.label for e in self.edges if e.sender == edge.sender][:3] or [
            e.label for e in self.edges[:3]
        ]

    def counts(self) -> dict[str, int]:
        """Number of edges per input kind (``q``, ``k``, ``v``, ``mlp``, ``logits``)."""
        out = dict.fromkeys(EDGE_INPUTS, 0)
        for receiver in self.receivers:
            out[receiver.input] += receiver.n_senders
        return out

    def _grouped_edges(self) -> int:
        """Edges of the grouped graph of the same shape."""
        kv_receivers = 2 * (self.n_heads - self.n_kv_heads) if self.ungrouped else 0
        return self.n_edges - sum(
            kv_receivers * self.n_senders_before(layer) for layer in range(self.n_layers)
        )

    def describe(self) -> str:
        """The graph in one sentence."""
        counts = ", ".join(f"{n} into {k}" for k, n in self.counts().items() if n)
        kv = (
            f"; key and value edges end at the {self.n_kv_heads} key/value heads of each "
            f"layer (grouped-query attention, {self.group_size} query heads per key/value head)"
            if self.grouped
            else ""
        )
        if self.ungrouped:
            kv = (
                f"; key and value edges end at each query head's own copy of its key/value "
                f"head's input (MIB's ungrouped graph; the grouped graph has "
                f"{self._grouped_edges()} edges, its key and value "
                f"edges ending at the {self.n_kv_heads} key/value heads shared by "
                f"{self.group_size} query heads each): patching one changes that query head's "
                f"keys or values only"
            )
        return (
            f"the residual-stream graph of {self.model_name} ({self._shape()}): "
            f"{len(self.nodes)} nodes, {self.n_edges} edges ({counts}){kv}"
        )
