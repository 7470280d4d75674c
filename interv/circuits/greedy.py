"""Greedy circuits: grown from the logits backwards, so that every edge reaches the logits.

>>> order = greedy_order(graph, priority)   # every edge index, in greedy order
>>> circuit = order[:50]                    # the greedy circuit of 50 edges

What greedy means here (MIB's and EAP-IG's greedy edge selection, Hanna et al. 2024): a
node is *connected* when it reaches the logits through circuit edges; at the start only the
logits are. Each step adds the edge of highest ``priority`` among the edges whose receiver
is connected, and its sender becomes connected. An edge into a key or value head of a
grouped-query model counts as connected when any query head of its group is (they read its
keys and values). Circuits of every size are prefixes of one order (nested), so a curve
needs one order; ``n`` = every edge gives the full graph (each writer reaches the logits
directly, so every edge becomes a candidate eventually).

Only backward connectivity is built: a circuit sender need not be reachable from the
embeddings through circuit edges (its inputs are then the complement's, as for any edge
outside the circuit). The top-``n`` circuit of the same priority can hold edges whose
receiver never reaches the logits; the greedy one cannot.
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence

import torch

from interv.circuits.graph import Graph, Node
from interv.errors import IntervError

__all__ = ["connected_to_logits", "greedy_order"]


def _openers(graph: Graph) -> dict[Node, list[int]]:
    """Sender node -> the receiver blocks (indices into ``graph.receivers``) its connection
    opens: a head its query block (and its key/value blocks, or its key/value head's when
    grouped), an MLP its input block."""
    out: dict[Node, list[int]] = {}
    for b, receiver in enumerate(graph.receivers):
        node = receiver.node
        if node.kind == "logits":
            continue
        if node.kind == "head" and node.kv:  # grouped: every query head of the group opens it
            first = node.head * graph.group_size
            for h in range(first, first + graph.group_size):
                out.setdefault(Node("head", node.layer, h), []).append(b)
        else:
            out.setdefault(node, []).append(b)
    return out


def greedy_order(graph: Graph, priority: torch.Tensor | Sequence[float]) -> torch.Tensor:
    """Every edge index of ``graph`` in greedy order (see the module docstring).

    Args:
        graph: the model's graph.
        priority: ``[n_edges]`` higher first (e.g. ``|score|``); ties go to the lower edge
            index.

    Returns:
        ``[n_edges]`` long tensor: its first ``n`` entries are the greedy circuit of ``n``
        edges.
    """
    values = torch.as_tensor(priority, dtype=torch.float64).flatten()
    if values.numel() != graph.n_edges:
        raise IntervError(
            f"priority must have one value per edge ({graph.n_edges}); got {values.numel()}"
        )
    if bool(torch.isnan(values).any()):
        raise IntervError("priority must not hold NaN (rank edges by a value every edge has)")
    keys = (-values).tolist()
    openers = _openers(graph)
    receivers = graph.receivers
    opened = [False] * len(receivers)

    logits = receivers[-1]
    opened[-1] = True
    heap = [(keys[i], i) for i in range(logits.start, logits.start + logits.n_senders)]
    heapq.heapify(heap)
    connected: set[Node] = set()
    order: list[int] = []
    while heap:
        _, index = heapq.heappop(heap)
        order.append(index)
        receiver = graph.receiver_of(index)
        sender = graph.senders[index - receiver.start]
        if sender in connected:
            continue
        connected.add(sender)
        for b in openers.get(sender, ()):
            if not opened[b]:
                opened[b] = True
                block = receivers[b]
                for i in range(block.start, block.start + block.n_senders):
                    heapq.heappush(heap, (keys[i], i))
    if len(order) != graph.n_edges:  # pragma: no cover - every writer reads into the logits
        raise IntervError(f"greedy growth reached {len(order)} of {graph.n_edges} edges")
    return torch.tensor(order, dtype=torch.long)


def connected_to_logits(graph: Graph, edges: Sequence[int]) -> bool:
    """Whether every edge of the circuit ``edges`` (indices) reaches the logits through
    circuit edges (its receiver is the logits, or a node with a circuit edge that does; a
    grouped key/value head through any query head of its group)."""
    chosen = sorted(set(int(i) for i in edges))
    by_receiver: dict[int, list[int]] = {}
    for i in chosen:
        receiver = graph.receiver_of(i)
        by_receiver.setdefault(receiver.start, []).append(i)
    openers = _openers(graph)
    starts = {r.start: b for b, r in enumerate(graph.receivers)}
    reached = {len(graph.receivers) - 1}
    frontier = [len(graph.receivers) - 1]
    while frontier:
        b = frontier.pop()
        for i in by_receiver.get(graph.receivers[b].start, []):
            sender = graph.senders[i - graph.receivers[b].start]
            for nb in openers.get(sender, ()):
                if nb not in reached:
                    reached.add(nb)
                    frontier.append(nb)
    return all(starts[graph.receiver_of(i).start] in reached for i in chosen)
