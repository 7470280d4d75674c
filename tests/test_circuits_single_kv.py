"""Circuits on a model with a single key/value head (Gemma-3-270M's shape: 4 query heads sharing
one key/value head, QK norm, norms before and after attention and the MLP, sliding windows),
against plain Hugging Face.

The model: tests/_families.py's tiny random Gemma-3 with ``num_key_value_heads = 1``. The grouped
graph (interv's default) has one key/value node per layer, ``L3KV0``: an edge into its key or
value moves the keys or values all four query heads read. The reference (no interv code in it,
tests/_write_references.py) moves the layer's single ``k_proj``/``v_proj`` input by the sender's
change, as tests/test_families_writes.py does for two key/value heads. Compared: exact effects
and EAP of edges into the shared key and value, a query and the logits, ``m(C)`` of
faithfulness at two fractions of a fixed ranking, and on MIB's ungrouped graph exact effects
against the model written with a key/value head per query head (1e-6 logits plus 1e-3
relative).
"""

from __future__ import annotations

import pytest
import torch
from _families import build
from test_families_writes import (
    FRACTIONS,
    _edge_reference,
    _reader,
    _sender,
    check,
    prompts_of,
    ranking_of,
    task_of,
)

import interv
from interv.circuits import Graph
from interv.circuits.graph import Edge, Node

pytestmark = pytest.mark.slow

_MODEL: list = []


def gemma3_single_kv():
    """The tiny random Gemma-3 with one key/value head (built and booted once)."""
    if not _MODEL:
        _MODEL.append(
            build(
                "gemma3",
                configure=lambda config: setattr(config, "num_key_value_heads", 1),
                tag="single-kv",
            )
        )
    return _MODEL[0]


def _edges(graph: Graph) -> list[Edge]:
    last = graph.n_layers - 1
    shared = Node("head", last, 0, kv=True)
    return [
        Edge(Node("embed"), shared, "k"),
        Edge(Node("head", 0, 2), shared, "k"),
        Edge(Node("mlp", 0), shared, "v"),
        Edge(Node("head", 1, 3), Node("head", last, 1), "q"),
        Edge(Node("head", last, 3), Node("logits"), "logits"),
    ]


def test_the_graph_has_one_key_value_node_per_layer():
    fam = gemma3_single_kv()
    assert fam.hf.config.num_key_value_heads == 1
    graph = Graph.from_model(fam.bridge)
    assert (graph.n_heads, graph.n_kv_heads, graph.grouped) == (4, 1, True)
    receivers = {e.receiver.label for e in graph.edges if e.input in ("k", "v")}
    assert receivers == {f"L{layer}KV0" for layer in range(graph.n_layers)}
    assert graph.n_edges == Graph(graph.n_layers, 4, 1).n_edges


def test_single_kv_exact_edges_and_eap_equal_hugging_face():
    fam = gemma3_single_kv()
    prompts = prompts_of(fam)
    task = task_of(prompts)
    graph = Graph.from_model(fam.bridge)
    edges = _edges(graph)
    effects = interv.edge_effects(fam.bridge, task, graph, edges)
    scores = interv.edge_scores(fam.bridge, task, method="eap")
    exact = _edge_reference(fam, prompts, edges, exact=True)
    eap = _edge_reference(fam, prompts, edges, exact=False)
    assert max(abs(float(v)) for v in exact[:3]) > 1e-4  # the shared key/value edges move it
    check(
        [
            (f"exact {e.label}", mine, value)
            for e, mine, value in zip(edges, effects, exact, strict=True)
        ]
        + [
            (f"EAP {e.label}", scores.scores[scores.graph.index(e)], value)
            for e, value in zip(edges, eap, strict=True)
        ]
    )


def test_single_kv_faithfulness_equals_hugging_face():
    import _write_references as ref

    fam = gemma3_single_kv()
    prompts = prompts_of(fam)
    ranking = ranking_of(Graph.from_model(fam.bridge))
    curve = interv.faithfulness(
        fam.bridge, task_of(prompts), ranking, fractions=FRACTIONS, n_bootstrap=10
    )
    plumb = ref.plumbing(fam)
    clean = ref.capture(plumb, prompts, prompts.clean)
    corrupted = ref.capture(plumb, prompts, prompts.corrupted)
    pairs = []
    for size, fraction, faith in zip(curve.n_edges_kept, FRACTIONS, curve.mean, strict=True):
        kept: dict = {}
        for edge in ranking[:size]:
            kept.setdefault(_reader(edge), set()).add(_sender(edge.sender))
        value = ref.circuit_metric(plumb, prompts, clean, corrupted, kept).mean()
        mine = curve.m_empty + faith * (curve.m_full - curve.m_empty)
        pairs.append((f"m(C) at {fraction:g} ({size} edges)", torch.tensor(mine), value))
    check(pairs)


def test_single_kv_ungrouped_exact_edges_equal_the_multi_head_twin():
    """MIB's graph (``kv="ungrouped"``) gives each of the 4 query heads its own copy of the one
    key/value head's inputs: exact effects equal those of the model written with a key/value
    head per query head (tests/test_families_ungrouped.py's reference), and two query heads'
    key edges from one sender differ."""
    import test_families_ungrouped as ungrouped

    fam = gemma3_single_kv()
    prompts = prompts_of(fam)
    graph = Graph.from_model(fam.bridge, kv="ungrouped")
    assert graph.ungrouped and graph.n_edges == Graph(graph.n_layers, 4, 1, kv="ungrouped").n_edges
    edges = ungrouped.edges_of(graph)
    effects = interv.edge_effects(fam.bridge, task_of(prompts), graph, edges)
    saved = ungrouped._MHA.pop(fam.name, None)  # its twin cache is keyed by family name
    try:
        expected = ungrouped.reference(fam, prompts, edges, exact=True)
    finally:
        ungrouped._MHA.pop(fam.name, None)
        if saved is not None:
            ungrouped._MHA[fam.name] = saved
    assert (effects[0] - effects[1]).abs() > 1e-3 * effects.abs().max() > 0
    check(
        [
            (f"ungrouped exact {e.label}", mine, value)
            for e, mine, value in zip(edges, effects, expected, strict=True)
        ]
    )
