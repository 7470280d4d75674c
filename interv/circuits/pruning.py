"""The edges of a circuit that connect the input to the logits, for many circuits at once.

>>> kept = connected(graph, circuits)  # [rows, n_edges] bool, the same shape  # doctest: +SKIP

A circuit's edge changes its value only if it lies on a path of circuit edges from the input
to the logits: every other edge's sender is patched, so an edge whose sender reads only
patched inputs, or whose receiver reaches the logits only through patched edges, carries
exactly the complement's value. MIB's ``Graph.prune`` drops such edges, and
:func:`connected` keeps what it keeps: repeatedly, a node stays only while it has an
outgoing circuit edge and an incoming one (the embeddings always count as having one; a
query head's inputs are its query and its key/value head's key and value), and an edge
only while its sender stays and its receiver does (the logits always; a key/value head
while any query head of its group does). :func:`interv.circuits.mib.prune` is its one-row
form; stability selection (``connected=True``) prunes every subsample's circuit with it.

The rows are pruned together: each step is a few scatter-adds over the rows' edges, so a
thousand circuits of a few hundred candidate edges cost about what one circuit costs.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from interv.circuits.graph import Graph, Node
from interv.errors import IntervError

__all__ = ["connected", "edge_arrays", "pruner"]


def edge_arrays(graph: Graph) -> tuple[torch.Tensor, torch.Tensor]:
    """Per edge: its sender's position in ``graph.senders`` and its receiver block (the
    position of its receiver in ``graph.receivers``)."""
    receivers = graph.receivers
    counts = torch.tensor([r.n_senders for r in receivers])
    block = torch.repeat_interleave(torch.arange(len(receivers)), counts)
    sender = torch.cat([torch.arange(r.n_senders) for r in receivers])
    return sender, block


def _owners(graph: Graph) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(receiver block, sender node) pairs: the sender nodes (query heads, MLPs) whose input
    each receiver block is (a key/value block: every query head of its group); and which
    blocks are the logits."""
    position = {node: i for i, node in enumerate(graph.senders)}
    blocks: list[int] = []
    nodes: list[int] = []
    is_logits = torch.zeros(len(graph.receivers), dtype=torch.bool)
    for b, receiver in enumerate(graph.receivers):
        node = receiver.node
        if node.kind == "logits":
            is_logits[b] = True
        elif node.kind == "head" and node.kv:
            first = node.head * graph.group_size
            for h in range(first, first + graph.group_size):
                blocks.append(b)
                nodes.append(position[Node("head", node.layer, h)])
        else:
            blocks.append(b)
            nodes.append(position[node])
    return torch.tensor(blocks, dtype=torch.long), torch.tensor(nodes, dtype=torch.long), is_logits


def connected(graph: Graph, kept: torch.Tensor, edges: torch.Tensor | None = None) -> torch.Tensor:
    """The edges of each circuit that connect the input to the logits (module docstring).

    Args:
        graph: the graph.
        kept: ``[rows, m]`` (or ``[m]``) bool: each row a circuit, over the edges ``edges``.
        edges: ``[m]`` int64 edge indices the columns of ``kept`` stand for (the candidate
            edges; the others are outside every circuit); None: every edge, in order.

    Returns:
        ``kept``'s shape, bool: the edges of each circuit that stay.
    """
    return pruner(graph)(kept, edges)


def pruner(graph: Graph) -> Callable[[torch.Tensor, torch.Tensor | None], torch.Tensor]:
    """:func:`connected` on ``graph``, its wiring read once (for many calls)."""
    sender_all, block_all = edge_arrays(graph)
    owner_block, owner_node, is_logits = _owners(graph)
    n_nodes, n_blocks = len(graph.senders), len(graph.receivers)

    def prune(kept: torch.Tensor, edges: torch.Tensor | None = None) -> torch.Tensor:
        edges = torch.arange(graph.n_edges) if edges is None else torch.as_tensor(edges).long()
        kept = torch.as_tensor(kept, dtype=torch.bool)
        one = kept.dim() == 1
        rows = kept.reshape(1, -1) if one else kept
        if rows.dim() != 2 or rows.shape[1] != edges.numel():
            raise IntervError(
                f"kept must have one value per edge ({edges.numel()}) in each row; got shape "
                f"{tuple(kept.shape)}"
            )
        sender, block = sender_all[edges], block_all[edges]
        n_rows = rows.shape[0]

        def spread(values: torch.Tensor, index: torch.Tensor, width: int) -> torch.Tensor:
            out = torch.zeros(n_rows, width, dtype=torch.float32)
            return out.index_add_(1, index, values.float()) > 0

        now = rows.clone()
        while True:
            has_out = spread(now, sender, n_nodes)
            has_in = spread(spread(now, block, n_blocks)[:, owner_block], owner_node, n_nodes)
            has_in[:, 0] = True  # the embeddings
            alive = has_out & has_in
            open_block = is_logits | spread(alive[:, owner_node], owner_block, n_blocks)
            after = now & alive[:, sender] & open_block[:, block]
            if torch.equal(after, now):
                return now[0] if one else now
            now = after

    return prune
