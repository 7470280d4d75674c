"""Circuits on SmolLM2-135M (grouped-query attention: 9 query heads on 3 key/value heads).

transformer-lens 4.3's edge tools refuse grouped-query models, so here the exact edge
effects are checked against the faithfulness forward (a separate implementation of the
same patching: every edge but one kept), on query, key/value-head, MLP and logits edges.
"""

from __future__ import annotations

import pytest
import torch

import interv
from interv.audit import EXACT_VERIFIED, Screen
from interv.circuits import Graph, discover, edge_effects, edge_scores
from interv.circuits.curves import circuit_metrics
from interv.circuits.patching import capture_run
from interv.engine.targets import get_metric


@pytest.fixture(scope="module")
def smol(smollm2_bridge):
    task = interv.load_task("ioi", n_pairs=4).tokenize(smollm2_bridge)
    return smollm2_bridge, task


@pytest.mark.real_model
def test_graph_of_smollm2_counts_key_value_heads(smol):
    model, _ = smol
    graph = Graph.from_model(model)
    assert graph.n_edges == 70651
    assert graph.grouped and graph.n_kv_heads == 3
    assert graph.edges[graph.index("L0H3->L1KV2.k")].receiver.kv


@pytest.mark.real_model
@pytest.mark.slow
def test_exact_edge_effects_on_smollm2_equal_the_one_edge_removed_circuit(smol):
    model, task = smol
    graph = Graph.from_model(model)
    labels = [
        "L10H4->L14H1.q",
        "L10H4->L14KV0.k",
        "L3H7->L20KV2.v",
        "MLP0->L5KV1.v",
        "embed->MLP0",
        "L12H2->MLP20",
        "L22H1->logits",
        "MLP29->logits",
    ]
    edges = graph.indices(labels)
    exact = edge_effects(model, task, graph, edges, per_prompt=True)
    kept = torch.ones(len(edges), graph.n_edges, dtype=torch.bool)
    kept[torch.arange(len(edges)), torch.tensor(edges)] = False
    clean = capture_run(model, task, "clean")
    corrupted = capture_run(model, task, "corrupted")
    metric = get_metric("logit_diff")
    values = circuit_metrics(model, task, graph, kept, corrupted, metric, clean.logits, 2)
    base = metric(clean.logits, task.target_ids, task.foil_ids, clean.logits).double()
    torch.testing.assert_close(values - base, exact, atol=2e-3, rtol=1e-3)


@pytest.mark.real_model
@pytest.mark.slow
def test_discover_on_smollm2_verifies_and_audits(smol):
    model, task = smol
    scores = edge_scores(model, task, method="eap")
    assert scores.scores.isfinite().all() and scores.scores.abs().max() > 0
    result = discover(model, task, scores=scores, screen=Screen(top_k=10, audit=20, alpha=None))
    assert result.status.count(EXACT_VERIFIED) == 10
    assert int(result.audit.audited.numel()) == 20
    assert 0 <= result.audit.miss_bound <= 1
