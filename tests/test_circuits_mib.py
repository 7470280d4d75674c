"""MIB's circuit-track conventions (``faithfulness(..., convention="mib")``) and circuit files.

- A hand-built graph (2 layers x 2 heads with MLPs, 46 edges): MIB's sizes ``int(p N)``
  against interv's ``max(1, round(p N))``, pruned sets worked by hand (a dangling head, a
  sender without inputs, a cascade through an MLP, a grouped key/value head), the areas.
- MIB's edge counts of GPT-2 small, Qwen-2.5-0.5B (its published ``EDGE_COUNTS``) and
  SmolLM2-135M from the formula.
- MIB's JSON: a round trip, MIB's names, a hand-written MIB file read; refusals.
- On a GPT-2-shaped model: with the corrupted-run complement pruning changes no metric
  (within float error); the MIB curve's sizes and values are the pruned circuits'.
- A one-fraction curve is refused before any forward; an explicit ranking of every edge.
"""

from __future__ import annotations

import json

import pytest
import torch

from interv.circuits import Graph, faithfulness
from interv.circuits import curves as curves_module
from interv.circuits.curves import MIB_FRACTIONS, _rankings, _sizes, circuit_metrics, cmd, cpr
from interv.circuits.mib import (
    MIBCircuit,
    mib_edge_count,
    mib_edge_name,
    mib_sizes,
    prune,
    read_mib_circuit,
    write_mib_circuit,
)
from interv.circuits.patching import capture_run
from interv.engine.forward import Prompts, forward
from interv.engine.targets import get_metric
from interv.errors import IntervError
from tests._gpt2 import tiny_gpt2

HAND = Graph(n_layers=2, n_heads=2, n_kv_heads=2, has_mlp=True, model_name="hand")


def _mask(graph: Graph, labels: list[str]) -> torch.Tensor:
    mask = torch.zeros(graph.n_edges, dtype=torch.bool)
    mask[graph.indices(labels)] = True
    return mask


def _labels(graph: Graph, mask: torch.Tensor) -> set[str]:
    return {graph.edges[i].label for i in mask.nonzero().flatten().tolist()}


@pytest.fixture(scope="module")
def gpt2(tmp_path_factory):
    """A random 2-layer GPT-2-shaped Hugging Face model (MLPs) and 4 random prompt pairs."""
    return tiny_gpt2(tmp_path_factory.mktemp("gpt2"), n_pairs=4)


def test_the_hand_graph_sizes_mib_against_interv():
    # layer 0: 6 head inputs x 1 sender + MLP0 x 3; layer 1: 6 x 4 + MLP1 x 6; logits 7
    assert HAND.n_edges == 6 + 3 + 24 + 6 + 7 == 46 == mib_edge_count(HAND)
    assert mib_sizes(MIB_FRACTIONS, 46) == [0, 0, 0, 0, 0, 2, 4, 9, 23, 46]
    assert _sizes(MIB_FRACTIONS, 46, "mib") == [0, 0, 0, 0, 0, 2, 4, 9, 23, 46]
    assert _sizes(MIB_FRACTIONS, 46, "interv") == [1, 1, 1, 1, 1, 2, 5, 9, 23, 46]


def test_mib_edge_counts_of_published_models():
    assert mib_edge_count(Graph(12, 12, 12)) == 32491  # GPT-2 small (MIB's EDGE_COUNTS)
    assert mib_edge_count(Graph(24, 14, 2)) == 179749  # Qwen-2.5-0.5B, 2 key/value heads
    smollm2 = Graph(30, 9, 3)
    assert (mib_edge_count(smollm2), smollm2.n_edges) == (123211, 70651)


def test_pruning_by_hand():
    chosen = [
        "L1H0->logits",
        "L0H1->L1H0.v",
        "embed->L0H1.q",
        "L0H0->MLP1",  # L0H0 has no input in the circuit, MLP1 no output: dropped
        "embed->L1H1.k",  # L1H1 reaches nothing: dropped
    ]
    assert _labels(HAND, prune(HAND, _mask(HAND, chosen))) == {
        "L1H0->logits",
        "L0H1->L1H0.v",
        "embed->L0H1.q",
    }
    # a cascade: MLP1 reaches nothing, so L1H1 (read only by MLP1) reaches nothing either
    cascade = ["embed->L1H1.q", "L1H1->MLP1", "embed->MLP0", "MLP0->logits"]
    assert _labels(HAND, prune(HAND, _mask(HAND, cascade))) == {"embed->MLP0", "MLP0->logits"}
    # a circuit that connects everything it holds is kept whole; the empty one stays empty
    whole = ["embed->L0H0.k", "L0H0->MLP0", "MLP0->L1H1.q", "L1H1->logits"]
    assert _labels(HAND, prune(HAND, _mask(HAND, whole))) == set(whole)
    assert not prune(HAND, torch.zeros(46, dtype=torch.bool)).any()
    full = torch.ones(46, dtype=torch.bool)
    assert prune(HAND, full).all()


def test_pruning_a_grouped_key_value_head_by_hand():
    grouped = Graph(n_layers=2, n_heads=2, n_kv_heads=1, has_mlp=True, model_name="gqa")
    # L1H1's only input is its key/value head's key; it counts, and the key edge stays
    kept = ["embed->L1KV0.k", "L1H1->logits"]
    assert _labels(grouped, prune(grouped, _mask(grouped, kept))) == set(kept)
    # a key edge into a group none of whose query heads reaches the logits is dropped
    dangling = ["embed->L1KV0.k", "embed->L1H0.q", "MLP0->logits", "embed->MLP0"]
    assert _labels(grouped, prune(grouped, _mask(grouped, dangling))) == {
        "MLP0->logits",
        "embed->MLP0",
    }


def test_areas_by_hand():
    faith = [0.0, 0.0, 0.0, 0.0, 0.0, 0.5, 0.5, 0.8, 1.0, 1.0]
    # trapezoids over the nominal fractions: (0.05 - 0.02) 0.25 + (0.1 - 0.05) 0.5 + ...
    under = 0.03 * 0.25 + 0.05 * 0.5 + 0.1 * 0.65 + 0.3 * 0.9 + 0.5 * 1.0
    from_one = (
        0.001 * 1 + 0.003 * 1 + 0.005 * 1 + 0.01 * 1 + 0.03 * 0.75 + 0.05 * 0.5 + 0.1 * 0.35
    ) + 0.3 * 0.1
    assert cpr(MIB_FRACTIONS, faith) == pytest.approx(under)
    assert cmd(MIB_FRACTIONS, faith) == pytest.approx(from_one)


def test_a_mib_json_round_trip(tmp_path):
    scores = torch.linspace(-1, 1, HAND.n_edges, dtype=torch.float64)
    member = _mask(HAND, ["L1H0->logits", "L0H1->L1H0.v", "embed->L0H1.q", "embed->L1H1.k"])
    circuit = MIBCircuit(HAND, scores, prune(HAND, member), d_model=16, source="test")
    path = write_mib_circuit(tmp_path / "ioi_hand.json", circuit)
    data = json.loads(path.read_text())
    assert data["cfg"] == {"n_layers": 2, "n_heads": 2, "parallel_attn_mlp": False, "d_model": 16}
    assert set(data["nodes"]) == {"input", "a0.h0", "a0.h1", "m0", "a1.h0", "a1.h1", "m1", "logits"}
    assert [k for k, v in data["nodes"].items() if v["in_graph"]] == [
        "input",
        "a0.h1",
        "a1.h0",
        "logits",
    ]
    assert data["edges"]["a0.h1->a1.h0<v>"] == {
        "score": scores[HAND.index("L0H1->L1H0.v")].item(),
        "in_graph": True,
    }
    assert data["edges"]["input->a1.h1<k>"]["in_graph"] is False  # pruned
    assert {"input->m0", "a0.h1->m1", "m1->logits", "a1.h1->logits"} <= set(data["edges"])
    loaded = read_mib_circuit(path, HAND)
    assert torch.equal(loaded.scores, scores)
    assert torch.equal(loaded.in_graph, circuit.in_graph)
    assert loaded.d_model == 16
    write_mib_circuit(path, circuit)  # interv's own, unchanged file: written again
    theirs = tmp_path / "theirs.json"
    theirs.write_text("{}")
    with pytest.raises(IntervError, match=r"theirs\.json"):
        write_mib_circuit(theirs, circuit)  # never replaces a file interv did not write
    assert theirs.read_text() == "{}"


def test_a_hand_written_mib_file_is_read_in_mibs_sign():
    edges = {mib_edge_name(e): {"score": 0.0, "in_graph": False} for e in HAND.edges}
    edges["a1.h1->logits"] = {"score": 2.5, "in_graph": True}
    edges["input->a1.h1<q>"] = {"score": -3.0, "in_graph": True}
    data = {
        "cfg": {"n_layers": 2, "n_heads": 2, "parallel_attn_mlp": False, "d_model": 8},
        "nodes": {},
        "edges": edges,
    }
    circuit = read_mib_circuit(data, HAND)
    absolute, signed, what = _rankings(circuit, HAND)
    assert HAND.edges[int(absolute[0])].label == "embed->L1H1.q"  # |-3| first
    assert HAND.edges[int(signed[0])].label == "L1H1->logits"  # MIB: highest score first
    assert "MIB importance scores" in what


def test_bad_mib_files_are_refused_with_their_reason():
    edges = {mib_edge_name(e): {"score": 0.0, "in_graph": False} for e in HAND.edges}
    cfg = {"n_layers": 2, "n_heads": 2, "parallel_attn_mlp": False, "d_model": 8}
    with pytest.raises(IntervError, match="a key and a value input per query head"):
        read_mib_circuit({"cfg": cfg, "nodes": {}, "edges": edges}, Graph(2, 2, 1))
    with pytest.raises(IntervError, match="another model: cfg n_layers 3"):
        read_mib_circuit({"cfg": {**cfg, "n_layers": 3}, "nodes": {}, "edges": edges}, HAND)
    missing = dict(list(edges.items())[1:])
    with pytest.raises(IntervError, match="45 of the graph's 46 edges"):
        read_mib_circuit({"cfg": cfg, "nodes": {}, "edges": missing}, HAND)
    foreign = {**edges, "a5.h0->logits": {"score": 1.0, "in_graph": False}}
    with pytest.raises(IntervError, match=r"'a5\.h0->logits' is not in the graph"):
        read_mib_circuit({"cfg": cfg, "nodes": {}, "edges": foreign}, HAND)
    with pytest.raises(IntervError, match="not a MIB circuit file"):
        read_mib_circuit({"edges": edges}, HAND)
    attention_only = Graph(2, 2, 2, has_mlp=False)
    with pytest.raises(IntervError, match="attention-only"):
        read_mib_circuit({"cfg": cfg, "nodes": {}, "edges": edges}, attention_only)


def test_an_explicit_ranking_of_every_edge_is_taken_in_its_order():
    graph = Graph(30, 9, 3)  # SmolLM2-135M's 70,651 edges
    order = list(range(graph.n_edges))[::-1]
    absolute, signed, _ = _rankings([graph.edges[i] for i in order], graph)
    assert absolute.tolist() == order and torch.equal(absolute, signed)
    partial, _, _ = _rankings([5, 2], HAND)
    assert partial.tolist() == [5, 2, 0, 1, 3, 4, *range(6, 46)]
    with pytest.raises(IntervError, match="must not repeat"):
        _rankings([5, 5], HAND)


def test_a_one_fraction_curve_is_refused_before_any_forward(gpt2, monkeypatch):
    def no_forward(*args, **kwargs):
        raise AssertionError("a forward ran before the fractions were checked")

    monkeypatch.setattr(curves_module, "forward", no_forward)
    monkeypatch.setattr(curves_module, "capture_run", no_forward)
    model, task = gpt2
    for convention in ("interv", "mib"):
        with pytest.raises(IntervError, match="at least two fractions"):
            faithfulness(model, task, [0], fractions=[0.5], convention=convention)
    with pytest.raises(IntervError, match="unknown convention 'leaderboard'"):
        faithfulness(model, task, [0], convention="leaderboard")


def test_pruning_changes_nothing_with_the_corrupted_complement_and_the_mib_curve(gpt2):
    model, task = gpt2
    graph = Graph.from_model(model)
    assert graph.n_edges == mib_edge_count(graph) == 110
    generator = torch.Generator().manual_seed(2)
    scores = torch.randn(graph.n_edges, generator=generator, dtype=torch.float64)
    order = torch.sort(-scores.abs(), stable=True).indices
    fractions = (0.05, 0.2, 0.5, 1.0)
    sizes = [int(f * 110) for f in fractions]
    masks = []
    for size in sizes:
        mask = torch.zeros(110, dtype=torch.bool)
        mask[order[:size]] = True
        masks.append(mask)
    pruned = [prune(graph, m) for m in masks]
    assert any(int(p.sum()) < int(m.sum()) for p, m in zip(pruned, masks, strict=True))
    metric = get_metric("logit_diff")
    clean = forward(
        model,
        Prompts.of(task.clean_tokens),
        readout="position_logits",
        positions=task.answer_positions,
    ).readout
    corrupted = capture_run(model, task, "corrupted")
    empty = torch.zeros(1, 110, dtype=torch.bool)
    both = torch.cat([torch.stack(masks), torch.stack(pruned), empty])
    values = circuit_metrics(model, task, graph, both, corrupted, metric, clean)
    assert torch.allclose(values[:4], values[4:8], atol=1e-5)

    curve = faithfulness(model, task, list(order.tolist()), fractions=fractions, convention="mib")
    assert curve.n_edges_kept == sizes and curve.convention == "mib"
    assert curve.n_edges_pruned[0] == [int(p.sum()) for p in pruned]
    full = metric(clean, task.target_ids, task.foil_ids, clean).double()
    expected = (values[4:8].mean(-1) - values[8].mean()) / (full.mean() - values[8].mean())
    assert curve.mean == pytest.approx(expected.tolist(), abs=1e-6)
    assert "MIB's convention: int(fraction x 110) edges, then pruned" in curve.sentence
    loaded = type(curve).from_dict(json.loads(json.dumps(curve.to_dict())))
    assert loaded.n_edges_pruned == curve.n_edges_pruned and loaded.convention == "mib"
