"""MIB's circuit-track conventions (``faithfulness(..., convention="mib")``) and circuit files.

- A hand-built graph (2 layers x 2 heads with MLPs, 46 edges): MIB's sizes ``int(p N)``
  against interv's ``max(1, round(p N))``, pruned sets worked by hand (a dangling head, a
  sender without inputs, a cascade through an MLP, a grouped key/value head), the areas.
- MIB's edge counts of GPT-2 small, Qwen-2.5-0.5B (its published ``EDGE_COUNTS``) and
  SmolLM2-135M from the formula.
- MIB's JSON: a round trip, MIB's names, a hand-written MIB file read; refusals.
- Issue 38, each case worked by hand from MIB's rules (EAP-IG 7af394a ``graph.py``, MIB
  b759df3 ``evaluation.py``): a CircuitResult whose checked-first ranking and MIB's
  ``|score|`` ranking differ (sizes, pruned sets, the written ``in_graph``); both directions'
  signs; a parallel graph's 463 edges; node- and neuron-level files refused; per-size binary
  circuits, partial edge dicts, 0/1 ``in_graph``, ``.pt`` files, ties; a table of malformed
  files, each refused in one line naming the field.
- On a GPT-2-shaped model: with the corrupted-run complement pruning changes no metric
  (within float error); the MIB curve's sizes and values are the pruned circuits'.
- A one-fraction curve is refused before any forward; an explicit ranking of every edge.
"""

from __future__ import annotations

import json

import pytest
import torch

from interv.audit import Screen, verify_screen
from interv.circuits import CircuitResult, EdgeScores, Graph, faithfulness
from interv.circuits import curves as curves_module
from interv.circuits.curves import (
    MIB_FRACTIONS,
    _curve_masks,
    _rankings,
    _sizes,
    circuit_metrics,
    cmd,
    cpr,
)
from interv.circuits.mib import (
    MIBCircuit,
    cutoff_ties,
    mib_edge_count,
    mib_edge_name,
    mib_layout,
    mib_order,
    mib_scores,
    mib_sizes,
    prune,
    read_mib_circuit,
    tie_note,
    write_mib_circuit,
)
from interv.circuits.patching import capture_run
from interv.engine.forward import Prompts, forward
from interv.engine.targets import get_metric
from interv.errors import IntervError
from interv.provenance import Provenance
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
    foreign = {**edges, "a5.h0->logits": {"score": 1.0, "in_graph": False}}
    with pytest.raises(IntervError, match=r"'a5\.h0->logits'\] is not an edge"):
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


# ---- issue 38: the file, the curve and MIB agree --------------------------------------------

SCREEN = Provenance(
    "hand", revision="0" * 16, dtype="float32", prompts="p", n_prompts=4, pairs="q"
).replace(metric="logit_diff", settings="method='eap'")


def _scores(values: dict[str, float], direction: str = "noise") -> EdgeScores:
    scores = torch.zeros(HAND.n_edges, dtype=torch.float64)
    for label, value in values.items():
        scores[HAND.index(label)] = value
    return EdgeScores(
        graph=HAND,
        scores=scores,
        per_prompt=None,
        method="eap",
        steps=1,
        metric="logit_diff",
        fingerprint="0123456789abcdef",
        sentence="hand estimates",
        provenance=SCREEN.replace(direction=direction),
        unit="logits",
        direction=direction,
    )


# B and A are checked (the top 2 by |estimate|); A's exact effect is small
ESTIMATES = {
    "L1H1->logits": -5.0,  # A: checked, exact -0.3
    "L1H0->logits": -4.0,  # B: checked, exact -2.0
    "embed->L1H0.q": -1.0,  # C: estimated
    "embed->L1H1.v": -0.5,  # D: estimated
}
EXACT = {"L1H1->logits": -0.3, "L1H0->logits": -2.0}


def _hand_result() -> CircuitResult:
    scores = _scores(ESTIMATES)
    exact = scores.scores.clone()
    for label, value in EXACT.items():
        exact[HAND.index(label)] = value
    audit = verify_screen(
        Screen(top_k=2, audit=0, alpha=None), scores.scores, lambda i: exact[i], method="EAP"
    )
    return CircuitResult(HAND, scores, audit, "0123456789abcdef", "hand", "toy", "hand")


def test_a_circuit_result_is_ranked_as_mib_ranks_the_file_interv_writes(tmp_path):
    result = _hand_result()
    a, b, c, d = (HAND.index(x) for x in ESTIMATES)
    # interv's own ranking: checked first (B 2.0, A 0.3), then C 1.0, D 0.5
    assert result.ranking()[:4].tolist() == [b, a, c, d]
    # MIB ranks the file's scores (-value: B 2.0, C 1.0, D 0.5, A 0.3) by |score|
    absolute, signed, what = _rankings(result, HAND, "mib")
    assert absolute[:4].tolist() == [b, c, d, a] and signed[:4].tolist() == [b, c, d, a]
    assert "by value alone as MIB ranks the file" in what
    sizes = mib_sizes(MIB_FRACTIONS, HAND.n_edges)
    assert sizes == [0, 0, 0, 0, 0, 2, 4, 9, 23, 46]  # int(p * 46)
    # at 5 % (2 edges) MIB keeps B, C: C feeds L1H0, which B reads out; both stay
    top2 = prune(HAND, _mask(HAND, ["L1H0->logits", "embed->L1H0.q"]))
    assert _labels(HAND, top2) == {"L1H0->logits", "embed->L1H0.q"}
    mask = torch.zeros(46, dtype=torch.bool)
    mask[absolute[:2]] = True
    assert torch.equal(prune(HAND, mask), top2)
    # checked first would keep B, A: neither head has an input, so pruning empties it
    mask = torch.zeros(46, dtype=torch.bool)
    mask[result.ranking()[:2]] = True
    assert not prune(HAND, mask).any()
    # at 10 % (4 edges) B, C, D, A: all connected
    mask = torch.zeros(46, dtype=torch.bool)
    mask[absolute[:4]] = True
    assert _labels(HAND, prune(HAND, mask)) == {
        e.label for e in (HAND.edges[i] for i in [a, b, c, d])
    }
    # the interv convention keeps checked first
    assert torch.equal(_rankings(result, HAND)[0], result.ranking())
    # the circuits faithfulness(..., convention="mib") evaluates: 5 % and 10 % as worked above
    masks, kept_sizes, _, ties, _ = _curve_masks(result, HAND, MIB_FRACTIONS, sizes, "mib", False)
    assert kept_sizes == sizes and len(masks) == 20
    assert _labels(HAND, masks[5]) == {"L1H0->logits", "embed->L1H0.q"}  # absolute, 5 %
    assert _labels(HAND, masks[10 + 6]) == {HAND.edges[i].label for i in (a, b, c, d)}  # signed
    assert "0.2 (|score|: 42 edges tied at the cutoff)" in ties
    interv_masks, *_ = _curve_masks(result, HAND, MIB_FRACTIONS, sizes, "interv", False)
    assert _labels(HAND, interv_masks[5]) == {"L1H0->logits", "L1H1->logits"}  # checked first
    # the file: score = -value (exact where checked); in_graph = MIB's top-2 by |score|, pruned
    path = write_mib_circuit(tmp_path / "r.json", result, d_model=16, n_edges=2)
    data = json.loads(path.read_text())
    assert data["edges"]["a1.h1->logits"]["score"] == 0.3  # A's exact, not its estimate 5.0
    assert data["edges"]["a1.h0->logits"]["score"] == 2.0
    assert data["edges"]["input->a1.h0<q>"]["score"] == 1.0
    assert {k for k, v in data["edges"].items() if v["in_graph"]} == {
        "a1.h0->logits",
        "input->a1.h0<q>",
    }
    # MIB's order of the file read back is interv's mib-convention order
    loaded = read_mib_circuit(path, HAND)
    assert torch.equal(mib_order(loaded.scores, True), absolute)
    assert torch.equal(mib_order(loaded.scores, False), signed)
    # 9 edges: the cutoff falls inside the tie of the 42 zero-score edges
    assert cutoff_ties(loaded.scores, sizes, absolute=True) == [0] * 7 + [42, 42, 0]
    note = tie_note(loaded.scores, MIB_FRACTIONS, sizes)
    assert "exact up to ties" in note and "0.2 (|score|: 42 edges tied at the cutoff)" in note


@pytest.mark.parametrize("direction", ["noise", "denoise"])
def test_the_most_helpful_edge_comes_first_in_mibs_signed_order_both_directions(
    direction, tmp_path
):
    # noise: patching L1H0->logits to corrupted lowers the metric by 2 (helpful), patching
    # L1H1->logits raises it by 1 (harmful). denoise: restoring L1H0->logits to clean raises
    # the corrupted run's metric by 2 (helpful), restoring L1H1->logits lowers it by 1.
    sign = 1.0 if direction == "noise" else -1.0
    scores = _scores({"L1H0->logits": -2.0 * sign, "L1H1->logits": 1.0 * sign}, direction)
    # MIB's score: higher = more helpful, in both directions
    expected = {"a1.h0->logits": 2.0, "a1.h1->logits": -1.0}
    path = write_mib_circuit(tmp_path / f"{direction}.json", scores, d_model=16)
    edges = json.loads(path.read_text())["edges"]
    assert {k: edges[k]["score"] for k in expected} == expected
    helpful, harmful = HAND.index("L1H0->logits"), HAND.index("L1H1->logits")
    for convention in ("interv", "mib"):
        absolute, signed, _ = _rankings(scores, HAND, convention)
        assert signed[0] == helpful and signed[-1] == harmful  # CPR: most helpful first
        assert absolute[:2].tolist() == [helpful, harmful]
    assert mib_scores(scores)[helpful] == 2.0


def test_a_parallel_graph_is_counted_written_and_read_as_mib_does(tmp_path):
    sequential = Graph(4, 4, 4, has_mlp=True, model_name="seq")
    parallel = Graph(4, 4, 4, has_mlp=True, parallel=True, model_name="par")
    # logits 1 + 4 x 5 = 21; layer L: 3 x 4 x (1 + 5L) + (1 + 5L) + 4 (the block's heads)
    assert mib_edge_count(sequential) == 21 + 17 + 82 + 147 + 212 == 479 == sequential.n_edges
    # parallel: the MLP reads the block's input, not its 4 heads: 4 x 4 edges fewer
    assert mib_edge_count(parallel) == 479 - 16 == 463 == parallel.n_edges
    names, flag = mib_layout(parallel)
    assert flag is True and "a0.h0->m0" not in names and "a0.h0->m1" in names
    scores = torch.linspace(-1, 1, 463, dtype=torch.float64)
    circuit = MIBCircuit(parallel, scores, torch.zeros(463, dtype=torch.bool), 32, "test")
    path = write_mib_circuit(tmp_path / "par.json", circuit)
    data = json.loads(path.read_text())
    assert data["cfg"]["parallel_attn_mlp"] is True and len(data["edges"]) == 463
    assert torch.equal(read_mib_circuit(path, parallel).scores, scores)
    with pytest.raises(IntervError, match="cfg parallel_attn_mlp True, seq's blocks are seq"):
        read_mib_circuit(path, sequential)


@pytest.mark.parametrize(
    "fields", [{"score": 0.5}, {"neurons": [True] * 8}, {"neurons_scores": [0.1] * 8}]
)
def test_node_and_neuron_level_files_are_refused_not_read_as_edge_circuits(fields):
    data = _valid_file()
    data["nodes"]["a0.h1"] = {"in_graph": True, **fields}
    field = next(iter(fields))
    with pytest.raises(
        IntervError, match=rf"nodes\['a0\.h1'\] carries '{field}'.*node- or neuron-level"
    ):
        read_mib_circuit(data, HAND)


def _valid_file() -> dict:
    edges = {mib_edge_name(e): {"score": 0.0, "in_graph": False} for e in HAND.edges}
    edges["a1.h1->logits"] = {"score": 2.5, "in_graph": True}
    nodes = {name: {"in_graph": False} for name in ("input", "a0.h0", "a0.h1", "m0", "logits")}
    cfg = {"n_layers": 2, "n_heads": 2, "parallel_attn_mlp": False, "d_model": 8}
    return {"cfg": cfg, "nodes": nodes, "edges": edges}


def test_partial_edge_dicts_and_01_membership_are_read_as_mib_reads_them():
    data = _valid_file()
    data["edges"] = {
        "a1.h1->logits": {"score": 2.5, "in_graph": 1},
        "input->a1.h1<q>": {"score": -3.0, "in_graph": 0},
    }
    circuit = read_mib_circuit(data, HAND)
    # the 44 unlisted edges score 0 and are out of the circuit (MIB's from_json leaves them so)
    assert circuit.unlisted == 44 and int((circuit.scores != 0).sum()) == 2
    assert _labels(HAND, circuit.in_graph) == {"L1H1->logits"}
    assert HAND.edges[int(mib_order(circuit.scores, True)[0])].label == "embed->L1H1.q"


def test_a_pt_circuit_file_is_read_with_weights_only(tmp_path):
    # MIB's to_pt layout for 2 layers x 2 heads: forward input, a0.h0, a0.h1, m0, a1.h0, a1.h1,
    # m1 (7); backward per layer q(2) k(2) v(2) m, then logits (15)
    scores, member = torch.zeros(7, 15), torch.zeros(7, 15, dtype=torch.bool)
    scores[5, 14], member[5, 14] = 2.5, True  # a1.h1 -> logits
    scores[0, 8] = -3.0  # input -> a1.h1<q>: layer 1 starts at 7, q of head 1 is 7 + 1
    scores[3, 13] = 0.5  # m0 -> m1: 7 + 3 x 2
    cfg = {"n_layers": 2, "n_heads": 2, "parallel_attn_mlp": False, "d_model": 8}
    data = {"cfg": cfg, "src_nodes": [], "dst_nodes": [], "edges_scores": scores}
    torch.save(
        {**data, "edges_in_graph": member, "nodes_in_graph": torch.zeros(7)}, tmp_path / "c.pt"
    )
    circuit = read_mib_circuit(tmp_path / "c.pt", HAND)
    assert circuit.scores[HAND.index("L1H1->logits")] == 2.5
    assert circuit.scores[HAND.index("embed->L1H1.q")] == -3.0
    assert circuit.scores[HAND.index("MLP0->MLP1")] == 0.5
    assert int((circuit.scores != 0).sum()) == 3
    assert _labels(HAND, circuit.in_graph) == {"L1H1->logits"}
    torch.save(
        {**data, "edges_in_graph": member, "nodes_scores": torch.zeros(7)}, tmp_path / "n.pt"
    )
    with pytest.raises(IntervError, match="carries 'nodes_scores'"):
        read_mib_circuit(tmp_path / "n.pt", HAND)
    torch.save({"cfg": cfg, "edges_scores": Provenance("x")}, tmp_path / "obj.pt")
    with pytest.raises(IntervError, match=r"torch\.load\(weights_only=True\)") as caught:
        read_mib_circuit(tmp_path / "obj.pt", HAND)
    assert "\n" not in str(caught.value)


def test_cutoff_ties_by_hand():
    scores = torch.tensor([3.0, 2.0, -2.0, 2.0, 1.0], dtype=torch.float64)
    # |score| 3, 2, 2, 2, 1: a cutoff after 2 edges splits the three 2s; after 4 it does not
    assert cutoff_ties(scores, [1, 2, 4, 5], absolute=True) == [0, 3, 0, 0]
    # signed 3, 2, 2, 1, -2: after 2 edges the two +2s are split
    assert cutoff_ties(scores, [2, 3], absolute=False) == [2, 0]


def _bad(change) -> dict:
    data = _valid_file()
    change(data)
    return data


def _set(path: list, value):
    def change(data):
        target = data
        for key in path[:-1]:
            target = target[key]
        target[path[-1]] = value

    return change


BAD_FILES = [
    (lambda d: d.pop("nodes"), "needs 'cfg', 'nodes', 'edges'"),
    (
        _set(["edges", "a7.h0->logits"], {"score": 1.0, "in_graph": False}),
        r"edges\['a7\.h0->logits'\] is not an edge",
    ),
    (
        _set(["edges", "a1.h1-logits"], {"score": 1.0, "in_graph": False}),
        "unknown MIB edge name 'a1.h1-logits'",
    ),
    (_set(["edges", "input->a1.h1"], {"score": 1.0, "in_graph": False}), "needs its input"),
    (_set(["nodes", "a9.h9"], {"in_graph": True}), r"nodes\['a9\.h9'\] is not a node"),
    (_set(["nodes", "a0.h0"], True), r"nodes\['a0\.h0'\] must be"),
    (_set(["nodes"], ["input"]), "'nodes' must map"),
    (_set(["edges"], []), "'edges' must map"),
    (
        _set(["edges", "a1.h1->logits", "score"], "2.5"),
        r"edges\['a1\.h1->logits'\]\.score must be a finite number; got '2\.5'",
    ),
    (
        _set(["edges", "a1.h1->logits", "score"], float("nan")),
        r"\.score must be a finite number; got nan",
    ),
    (
        _set(["edges", "a1.h1->logits", "score"], float("inf")),
        r"\.score must be a finite number; got inf",
    ),
    (_set(["edges", "a1.h1->logits", "score"], True), r"\.score must be a finite number; got True"),
    (
        _set(["edges", "a1.h1->logits", "in_graph"], "yes"),
        r"\.in_graph must be true/false \(or 0/1\); got 'yes'",
    ),
    (
        _set(["edges", "a1.h1->logits", "in_graph"], 2),
        r"\.in_graph must be true/false \(or 0/1\); got 2",
    ),
    (
        _set(["edges", "a1.h1->logits"], {"score": 1.0}),
        r"edges\['a1\.h1->logits'\] needs 'in_graph'",
    ),
    (_set(["edges", "a1.h1->logits"], {"in_graph": True}), "has a score and .* none"),
    (_set(["cfg", "n_heads"], 3), "another model: cfg n_heads 3"),
    (_set(["cfg", "n_layers"], "2"), "another model: cfg n_layers '2'"),
    (_set(["cfg", "d_model"], "8"), "cfg d_model must be a positive int; got '8'"),
    (_set(["cfg", "parallel_attn_mlp"], "no"), "cfg parallel_attn_mlp 'no'"),
    (_set(["cfg"], [2, 2]), "'cfg' must map"),
]


@pytest.mark.parametrize(("change", "message"), BAD_FILES)
def test_every_malformed_mib_file_is_refused_in_one_line_naming_the_field(
    change, message, tmp_path
):
    data = _bad(change)
    with pytest.raises(IntervError, match=message) as caught:
        read_mib_circuit(data, HAND)
    assert "\n" not in str(caught.value)
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(data))  # the same from a file: its path named too
    with pytest.raises(IntervError, match=message) as caught:
        read_mib_circuit(path, HAND)
    assert "bad.json" in str(caught.value) and "\n" not in str(caught.value)


def test_binary_circuits_one_per_size_are_evaluated_as_given(gpt2):
    model, task = gpt2
    graph = Graph.from_model(model)
    sizes = mib_sizes(MIB_FRACTIONS, 110)
    assert sizes == [0, 0, 0, 1, 2, 5, 11, 22, 55, 110]
    order = torch.randperm(110, generator=torch.Generator().manual_seed(3))
    circuits = []
    for size in sizes[:-1]:  # the leaderboard's submission: no 100 % circuit
        member = torch.zeros(110, dtype=torch.bool)
        member[order[:size]] = True
        names, _ = mib_layout(graph)
        edges = {n: {"in_graph": bool(m)} for n, m in zip(names, member.tolist(), strict=True)}
        cfg = {"n_layers": 2, "n_heads": 4, "parallel_attn_mlp": False, "d_model": 32}
        circuits.append(read_mib_circuit({"cfg": cfg, "nodes": {}, "edges": edges}, graph))
    assert all(c.scores is None for c in circuits)
    curve = faithfulness(model, task, circuits, convention="mib", n_bootstrap=10)
    pruned = [int(prune(graph, c.in_graph).sum()) for c in circuits] + [110]
    assert curve.n_edges_pruned == (pruned, pruned)
    assert curve.mean == curve.signed_mean and curve.mean[-1] == pytest.approx(1.0)
    assert "the given circuits" in curve.sentence
    with pytest.raises(IntervError, match=r"more than the 1 of fraction 0\.01"):
        faithfulness(
            model, task, [circuits[0]] * 3 + [circuits[5]] + circuits[4:], convention="mib"
        )
    with pytest.raises(IntervError, match="one circuit per fraction"):
        faithfulness(model, task, circuits[:3], convention="mib")


def test_scores_are_ranked_as_the_float32_mib_holds_them():
    # 1 + 2**-30 and 1 differ in float64 and are the same float32: a tie in MIB
    scores = torch.tensor([1.0, 1.0 + 2**-30, 0.5], dtype=torch.float64)
    assert mib_order(scores, True).tolist() == [0, 1, 2]  # graph order within the tie
    assert cutoff_ties(scores, [1], absolute=True) == [2]


def test_a_mib_file_for_another_width_is_refused_before_any_forward(gpt2, monkeypatch):
    def no_forward(*args, **kwargs):
        raise AssertionError("a forward ran before the file was checked")

    monkeypatch.setattr(curves_module, "forward", no_forward)
    model, task = gpt2
    graph = Graph.from_model(model)
    names, _ = mib_layout(graph)
    edges = {n: {"score": float(i + 1), "in_graph": False} for i, n in enumerate(names)}
    cfg = {"n_layers": 2, "n_heads": 4, "parallel_attn_mlp": False, "d_model": 64}
    circuit = read_mib_circuit({"cfg": cfg, "nodes": {}, "edges": edges}, graph)
    with pytest.raises(IntervError, match="another model: cfg d_model 64, the model's is 32"):
        faithfulness(model, task, circuit, convention="mib")
