"""MIB's ungrouped graph (``kv="ungrouped"``): its edge counts and names on MIB's model shapes,
MIB circuit files of a grouped-query model, and ``interv circuit --kv ungrouped``.

Counts: MIB's own (EAP-IG's ``graph.py`` at the commit MIB pins, docs/DESIGN): SmolLM2-135M
123,211, Qwen-2.5-0.5B 179,749, Gemma-2-2B 74,218, Llama-3.1-8B 1,592,881; interv's grouped
graphs of the same shapes 70,651 and 79,813 (SmolLM2, Qwen). By hand for a 2-layer model with 4
query heads and 2 key/value heads: block L's readers read ``1 + 5L`` writers; ungrouped, each
layer has 4 query, 4 key and 4 value readers and an MLP reading ``1 + 5L + 4``; the logits read
11: ``12 * 1 + 5 + 12 * 6 + 10 + 11 = 110`` (grouped: ``(4 + 2 + 2) * 1 + 5 + 8 * 6 + 10 + 11 =
82``).
"""

from __future__ import annotations

import json
import warnings

import pytest
import torch
from _families import family, save_model
from test_families_writes import prompts_of, task_of

import interv
import interv.circuits
from interv.circuits import Graph
from interv.circuits.graph import Node
from interv.circuits.mib import (
    MIBCircuit,
    mib_edge_count,
    mib_edge_name,
    prune,
    read_mib_circuit,
    write_mib_circuit,
)
from interv.cli import main
from interv.errors import IntervError

SHAPES = {  # n_layers, n_heads, n_kv_heads -> (MIB's count, interv's grouped count or None)
    "SmolLM2-135M": ((30, 9, 3), 123_211, 70_651),
    "Qwen-2.5-0.5B": ((24, 14, 2), 179_749, 79_813),
    "Gemma-2-2B": ((26, 8, 4), 74_218, None),
    "Llama-3.1-8B": ((32, 32, 8), 1_592_881, None),
}


@pytest.mark.parametrize("name", SHAPES)
def test_the_ungrouped_graph_has_mibs_edge_count(name):
    (layers, heads, kv), mib, grouped = SHAPES[name]
    graph = Graph(layers, heads, kv, kv="ungrouped")
    assert graph.n_edges == mib == mib_edge_count(graph)
    assert graph.ungrouped and not graph.grouped
    if grouped is not None:
        assert Graph(layers, heads, kv).n_edges == grouped
    assert f"the grouped graph has {Graph(layers, heads, kv).n_edges} edges" in graph.describe()


def test_counts_and_receivers_by_hand():
    graph, grouped = Graph(2, 4, 2, kv="ungrouped"), Graph(2, 4, 2)
    assert (graph.n_edges, grouped.n_edges) == (110, 82)
    assert graph.counts() == {"q": 4 * 7, "k": 4 * 7, "v": 4 * 7, "mlp": 5 + 10, "logits": 11}
    keys = [r.node for r in graph.receivers if r.input == "k" and r.node.layer == 1]
    assert keys == [Node("head", 1, h) for h in range(4)]  # query heads, no key/value head
    assert not any(node.kv for node in graph.nodes)
    # a multi-head model: ungrouped is the same graph
    assert Graph(2, 4, 4, kv="ungrouped").n_edges == Graph(2, 4, 4).n_edges


def test_mib_names_a_query_heads_own_key_input():
    graph = Graph(24, 14, 2, kv="ungrouped")
    names = {mib_edge_name(edge) for edge in graph.edges}
    assert len(names) == 179_749
    assert {"a0.h1->a3.h5<k>", "m2->a3.h13<v>", "input->a0.h0<q>", "a23.h13->logits"} <= names
    assert graph.index("L0H1->L3H5.k") >= 0


def test_an_unknown_kv_is_refused_naming_the_choices():
    with pytest.raises(
        IntervError, match=r"unknown kv 'mib'; choose one of \('grouped', 'ungrouped'\)"
    ):
        Graph(2, 4, 2, kv="mib")
    fam = family("llama")
    with pytest.raises(IntervError, match=r"unknown kv 'per-head'; choose one of"):
        Graph.from_model(fam.bridge, kv="per-head")


def test_mib_files_refuse_the_grouped_graph_and_name_the_ungrouped_one():
    scores = torch.zeros(Graph(2, 4, 2).n_edges, dtype=torch.float64)
    circuit = MIBCircuit(Graph(2, 4, 2), scores, scores.bool(), 32, "test")
    with pytest.raises(IntervError, match=r"kv='ungrouped'"):
        circuit.to_dict()


@pytest.mark.slow
def test_a_phi3_model_whose_fused_attention_cannot_copy_keys_is_refused():
    fam = family("phi3")
    with pytest.raises(IntervError, match=r"kv='ungrouped'.*use kv='grouped'"):
        Graph.from_model(fam.bridge, kv="ungrouped")


def _qwen_shaped():
    """A tiny random Qwen2 model with Qwen-2.5-0.5B's head layout: 24 layers, 14 query heads,
    2 key/value heads (head width 2, d_model 28), booted offline."""
    import transformers
    from transformer_lens.model_bridge import TransformerBridge

    config = transformers.Qwen2Config(
        vocab_size=64,
        hidden_size=28,
        num_attention_heads=14,
        num_key_value_heads=2,
        num_hidden_layers=24,
        intermediate_size=16,
        max_position_embeddings=64,
        pad_token_id=1,
        bos_token_id=0,
        eos_token_id=0,
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(1)
        hf = transformers.AutoModelForCausalLM.from_config(config, attn_implementation="eager")
    directory = save_model(hf.eval(), "qwen-0.5b-shape")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return TransformerBridge.boot_transformers(str(directory), device="cpu").eval()


@pytest.mark.slow
def test_a_qwen_shaped_mib_file_round_trips_and_gives_the_same_curve(tmp_path):
    """EAP on MIB's graph of a Qwen-2.5-0.5B-shaped model, written as MIB's file (179,749
    edges), read back identically; the MIB-convention curve from the file is the one from the
    scores (MIB orders the file's -value as interv orders the values)."""
    bridge = _qwen_shaped()
    fam = family("qwen2")  # its prompts and task (same vocabulary)
    task = task_of(prompts_of(fam))
    scores = interv.edge_scores(bridge, task, method="eap", kv="ungrouped")
    assert scores.graph.n_edges == 179_749
    path = write_mib_circuit(tmp_path / "qwen.json", scores, d_model=28, n_edges=500)
    data = json.loads(path.read_text())
    assert len(data["edges"]) == 179_749
    assert data["cfg"]["n_heads"] == 14 and data["cfg"]["n_layers"] == 24
    assert data["edges"]["a0.h1->a3.h5<k>"]["score"] == -float(
        scores.scores[scores.graph.index("L0H1->L3H5.k")]
    )
    circuit = read_mib_circuit(path, Graph.from_model(bridge, kv="ungrouped"))
    torch.testing.assert_close(circuit.scores, -scores.scores, rtol=0, atol=0)
    assert int(circuit.in_graph.sum()) == sum(e["in_graph"] for e in data["edges"].values())
    fractions = (0.001, 0.01, 0.1, 1.0)
    from_file = interv.faithfulness(
        bridge, task, circuit, fractions=fractions, convention="mib", n_bootstrap=10
    )
    from_scores = interv.faithfulness(
        bridge, task, scores, fractions=fractions, convention="mib", n_bootstrap=10
    )
    assert from_file.n_edges_kept == [179, 1797, 17974, 179_749]
    assert from_file.n_edges_pruned == from_scores.n_edges_pruned
    assert from_file.mean == from_scores.mean
    assert from_file.signed_mean == from_scores.signed_mean


@pytest.mark.slow
def test_the_cli_writes_mibs_file_of_the_ungrouped_graph(tmp_path, monkeypatch, capsys):
    """``interv circuit ... --convention mib --kv ungrouped`` on a grouped-query model: the
    curve uses MIB's N (479 = mib_edge_count), and ``mib_circuit.json``, read back, gives the
    curve's signed circuits and CPR at every size (MIB's order of the file's scores). (The
    absolute, CMD, circuits agree once convention='mib' ranks a CircuitResult by |value| as
    MIB ranks the file: issue 38 item 1.)"""
    import interv.models.loading

    fam = family("llama")
    monkeypatch.setattr(interv.models.loading, "load_model", lambda spec, **_: fam.bridge)
    seen = {}
    real = interv.circuits.faithfulness

    def keep(model, task, ranking, **kwargs):
        seen["task"] = task
        return real(model, task, ranking, **kwargs)

    monkeypatch.setattr(interv.circuits, "faithfulness", keep)
    out = tmp_path / "run"
    args = ["circuit", "induction-2l", "--n-pairs", "4", "--verify-top", "5", "--audit", "5"]
    assert main([*args, "--convention", "mib", "--kv", "ungrouped", "--out", str(out)]) == 0
    graph = Graph.from_model(fam.bridge, kv="ungrouped")
    curve = json.loads((out / "faithfulness.json").read_text())
    assert curve["n_edges_kept"] == [int(p * graph.n_edges) for p in curve["fractions"]]
    assert f"of {graph.n_edges} edges" in curve["sentence"]
    circuit = read_mib_circuit(out / "mib_circuit.json", graph)
    assert len(json.loads((out / "mib_circuit.json").read_text())["edges"]) == 479
    again = real(fam.bridge, seen["task"], circuit, convention="mib", n_bootstrap=10)
    # the signed (CPR) circuits: MIB's highest -value first is interv's most negative value
    assert list(again.n_edges_pruned[1]) == curve["n_edges_pruned"][1]
    torch.testing.assert_close(torch.tensor(again.signed_mean), torch.tensor(curve["signed_mean"]))
    assert again.cpr == pytest.approx(curve["cpr"], abs=1e-9)
    assert "mib_circuit.json" not in capsys.readouterr().err


def test_an_unknown_kv_flag_is_refused_before_any_model_loads(tmp_path, monkeypatch, capsys):
    import interv.models.loading

    def refuse(*args, **kwargs):
        raise AssertionError("a model was loaded before the options were checked")

    monkeypatch.setattr(interv.models.loading, "load_model", refuse)
    code = main(["circuit", "induction-2l", "--kv", "mib", "--out", str(tmp_path / "run")])
    assert code != 0
    err = capsys.readouterr().err
    assert "unknown --kv 'mib'; choose one of ('grouped', 'ungrouped')" in err
    assert not (tmp_path / "run").exists()


@pytest.mark.slow
@pytest.mark.parametrize("name", ("SmolLM2-135M", "Qwen-2.5-0.5B", "Gemma-2-2B", "Llama-3.2-1B"))
def test_mib_files_of_ungrouped_graphs_round_trip(name):
    """A MIB file of each grouped-query leaderboard shape (Llama-3.2-1B: 16 layers, 32 query
    heads, 8 key/value heads, standing for Llama-3.1-8B's 1.6 M edges) is written and read
    back identically: every edge, its score and its membership."""
    shapes = {**{k: v[0] for k, v in SHAPES.items()}, "Llama-3.2-1B": (16, 32, 8)}
    graph = Graph(*shapes[name], kv="ungrouped")
    scores = torch.randn(graph.n_edges, generator=torch.Generator().manual_seed(0)).double()
    member = torch.zeros(graph.n_edges, dtype=torch.bool)
    member[torch.sort(-scores.abs(), stable=True).indices[:2000]] = True
    member = prune(graph, member)  # a circuit as MIB keeps it (pruning leaves it unchanged)
    assert int(member.sum()) > 0
    data = MIBCircuit(graph, scores, member, 64, "test").to_dict()
    assert len(data["edges"]) == graph.n_edges == mib_edge_count(graph)
    back = read_mib_circuit(json.loads(json.dumps(data)), graph)
    assert torch.equal(back.scores, scores) and torch.equal(back.in_graph, member)
