"""MIB's ungrouped graph of a grouped-query model, family by family, against plain Hugging Face.

``Graph.from_model(model, kv="ungrouped")`` gives every query head its own copy of its
key/value head's key and value inputs: an edge into ``L1H0.k`` changes query head 0's keys
only, not those of query head 1 with which it shares a key/value head. The reference (no interv
code in it, tests/_write_references.py): the family's Hugging Face model *written with one
key/value head per query head* (the same model: ``k_proj`` and ``v_proj`` rows repeated per
query head, ``num_key_value_heads = num_attention_heads``; its metric checked equal to the
grouped original's), where query head ``h``'s key input is simply head ``h``'s columns of
``k_proj``; the edge moves them by the projection of the sender's change (torch hooks,
autograd for d/dt).

Compared per family (every grouped-query family of tests/_families.py that interv's edge
graph accepts): exact effects of edges into keys and values of two query heads of one group
and a query (``edge_effects``), EAP of the same edges (d/dt at 0), and m(C) of faithfulness
at two fractions of a fixed ranking (every reader's input rebuilt, per query head).
Tolerance: 1e-6 logits absolute plus 1e-3 relative, as the write-path matrix.
"""

from __future__ import annotations

import json
import warnings
from types import SimpleNamespace
from typing import Any

import _write_references as ref
import pytest
import torch
from _families import Family, family, save_model
from test_families_writes import (
    _reader,
    _sender,
    check,
    prompts_of,
    ranking_of,
    task_of,
)

import interv
from interv.circuits import EdgeScores, Graph
from interv.circuits.graph import Edge, Node

pytestmark = pytest.mark.slow

# grouped-query families of the matrix (4 query heads, 2 key/value heads) with an edge graph
GQA = (
    "llama",
    "mistral",
    "mixtral",
    "qwen2",
    "qwen3",
    "gemma",
    "gemma2",
    "gemma3",
    "cohere",
    "cohere2",
    "granite",
    "stablelm",
    "starcoder2",
    "smollm3",
    "gpt_oss",
    "llama4",
)
FRACTIONS = (0.05, 0.25)
_MHA: dict[str, Family] = {}


def ungrouped_twin(fam: Family) -> Family:
    """``fam``'s Hugging Face model written with one key/value head per query head (Hugging
    Face only: config and state dict), for the reference's plumbing; cached."""
    if fam.name in _MHA:
        return _MHA[fam.name]
    from transformers import AutoModelForCausalLM

    hf = fam.hf
    config = type(hf.config).from_dict(hf.config.to_dict())
    heads, kv = config.num_attention_heads, config.num_key_value_heads
    group = heads // kv
    config.num_key_value_heads = heads
    state = {}
    for name, tensor in hf.state_dict().items():
        if name.endswith(("k_proj.weight", "v_proj.weight", "k_proj.bias", "v_proj.bias")):
            rows = tensor.reshape(kv, -1, *tensor.shape[1:])
            tensor = rows.repeat_interleave(group, dim=0).reshape(-1, *tensor.shape[1:])
        state[name] = tensor
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        twin = AutoModelForCausalLM.from_config(config, attn_implementation="eager").eval()
    missing, unexpected = twin.load_state_dict(state, strict=False)
    assert not unexpected and all("rotary" in m or "inv_freq" in m for m in missing), (
        missing,
        unexpected,
    )
    cfg = fam.bridge.cfg
    bridge = SimpleNamespace(
        cfg=SimpleNamespace(n_heads=heads, n_key_value_heads=heads, d_head=cfg.d_head)
    )
    out = Family(fam.name, bridge, twin, fam.directory, fam.tokens, fam.real)
    _MHA[fam.name] = out
    return out


def edges_of(graph: Graph) -> list[Edge]:
    """Into the last layer: the keys of query heads 0 and 1 (one key/value head's group) from
    the same sender, the value of query head 3 and of head 2, a query; from layer 0's heads,
    its MLP and the embeddings."""
    last = graph.n_layers - 1

    def head(layer: int, h: int) -> Node:
        return Node("head", layer, h)

    return [
        Edge(head(0, 2), head(last, 0), "k"),
        Edge(head(0, 2), head(last, 1), "k"),
        Edge(Node("mlp", 0), head(last, 3), "v"),
        Edge(Node("embed"), head(last, 2), "v"),
        Edge(head(0, 1), head(last, 1), "q"),
    ]


def reference(fam: Family, prompts: ref.Prompts, edges: list[Edge], exact: bool) -> list:
    """Per edge, on the twin (noise: the clean run, the sender's corrupted change): the exact
    effect or d/dt at 0, prompt means."""
    twin = ungrouped_twin(fam)
    plumb = ref.plumbing(twin)
    clean = ref.capture(plumb, prompts, prompts.clean)
    corrupted = ref.capture(plumb, prompts, prompts.corrupted)
    out = []
    for edge in edges:
        with torch.no_grad():
            delta = ref.sender_change(
                plumb, prompts, prompts.clean, clean, corrupted, _sender(edge.sender)
            )
        reader = _reader(edge)
        if exact:
            with torch.no_grad():
                moved = ref.edge_metric(plumb, prompts, prompts.clean, reader, delta, 1.0)
            out.append((moved - clean[("metric", -1)]).mean())
        else:
            t = torch.zeros((), requires_grad=True)
            moved = ref.edge_metric(plumb, prompts, prompts.clean, reader, delta, t)
            (grad,) = torch.autograd.grad(moved.sum(), [t])
            out.append(grad / moved.shape[0])
    return out


def test_two_query_heads_of_one_group_have_their_own_key_edges():
    """Query heads 0 and 1 share key/value head 0: their own key edges from one sender have
    different exact effects, and the grouped graph's edge into the shared key is neither."""
    fam = family("llama")
    task = task_of(prompts_of(fam))
    graph = Graph.from_model(fam.bridge, kv="ungrouped")
    own = interv.edge_effects(fam.bridge, task, graph, edges_of(graph)[:2])
    grouped = Graph.from_model(fam.bridge)
    shared = interv.edge_effects(fam.bridge, task, grouped, ["L0H2->L3KV0.k"])[0]
    assert (own[0] - own[1]).abs() > 1e-3 * own.abs().max() > 0
    assert ((own - shared).abs() > 1e-3 * own.abs().max()).all()


def test_the_twin_is_the_same_model():
    """The reference's premise: the model written with a key/value head per query head
    computes the grouped model's metric (else the reference could not fail honestly)."""
    for name in ("llama", "gemma3"):
        fam = family(name)
        prompts = prompts_of(fam)
        with torch.no_grad():
            own = ref.metric(ref.plumbing(fam), prompts, prompts.clean)
            twin = ref.metric(ref.plumbing(ungrouped_twin(fam)), prompts, prompts.clean)
        torch.testing.assert_close(twin, own, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("name", GQA)
def test_ungrouped_exact_edges_equal_hugging_face(name):
    fam = family(name)
    prompts = prompts_of(fam)
    graph = Graph.from_model(fam.bridge, kv="ungrouped")
    assert graph.ungrouped and not graph.grouped
    edges = edges_of(graph)
    effects = interv.edge_effects(fam.bridge, task_of(prompts), graph, edges)
    expected = reference(fam, prompts, edges, exact=True)
    check(
        [
            (f"{name}: exact effect {edge.label}", effect, value)
            for edge, effect, value in zip(edges, effects, expected, strict=True)
        ]
    )


@pytest.mark.parametrize("name", GQA)
def test_ungrouped_eap_equals_hugging_face(name):
    fam = family(name)
    prompts = prompts_of(fam)
    scores = interv.edge_scores(fam.bridge, task_of(prompts), method="eap", kv="ungrouped")
    assert scores.graph.kv == "ungrouped"
    stored = EdgeScores.from_dict(json.loads(json.dumps(scores.to_dict(per_prompt=False))))
    assert stored.graph.ungrouped and stored.graph.n_edges == scores.graph.n_edges
    edges = edges_of(scores.graph)
    expected = reference(fam, prompts, edges, exact=False)
    check(
        [
            (f"{name}: EAP {edge.label}", scores.scores[scores.graph.index(edge)], value)
            for edge, value in zip(edges, expected, strict=True)
        ]
    )


@pytest.mark.parametrize("name", ("llama", "qwen2", "gemma2", "gemma3"))
def test_ungrouped_faithfulness_equals_hugging_face(name):
    """m(C) with every reader's input rebuilt (each query head's key and value copies their
    own readers), against the twin's rebuilt run."""
    fam = family(name)
    prompts = prompts_of(fam)
    graph = Graph.from_model(fam.bridge, kv="ungrouped")
    ranking = ranking_of(graph)
    curve = interv.faithfulness(
        fam.bridge,
        task_of(prompts),
        ranking,
        fractions=FRACTIONS,
        n_bootstrap=10,
        kv="ungrouped",
    )
    plumb = ref.plumbing(ungrouped_twin(fam))
    clean = ref.capture(plumb, prompts, prompts.clean)
    corrupted = ref.capture(plumb, prompts, prompts.corrupted)
    pairs = []
    for size, fraction, faith in zip(curve.n_edges_kept, FRACTIONS, curve.mean, strict=True):
        kept: dict[ref.Reader, set[Any]] = {}
        for edge in ranking[:size]:
            kept.setdefault(_reader(edge), set()).add(_sender(edge.sender))
        value = ref.circuit_metric(plumb, prompts, clean, corrupted, kept).mean()
        mine = curve.m_empty + faith * (curve.m_full - curve.m_empty)
        pairs.append((f"{name}: m(C) at {fraction:g} ({size} edges)", torch.tensor(mine), value))
    check(pairs)


def _twin_bridge(fam: Family) -> Any:
    """The twin (:func:`ungrouped_twin`) saved and booted through transformer-lens's bridge."""
    from transformer_lens.model_bridge import TransformerBridge

    directory = save_model(ungrouped_twin(fam).hf, fam.name + "-twin")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return TransformerBridge.boot_transformers(str(directory), device="cpu").eval()


@pytest.mark.parametrize("name", ("llama", "qwen3", "gemma2"))
def test_ungrouped_screens_equal_the_multi_head_twins(name):
    """EAP-IG with the QK fix on MIB's graph of the grouped model scores every edge as on the
    graph of its twin written with a key/value head per query head (a multi-head model, whose
    screens the write-path matrix checks against Hugging Face): the same edges, in the same
    order, the same numbers (QK norm: Qwen3; soft caps: Gemma-2)."""
    fam = family(name)
    task = task_of(prompts_of(fam))
    twin = _twin_bridge(fam)
    options = {"method": "eap-ig", "steps": 3, "qk_fix": True}
    mine = interv.edge_scores(fam.bridge, task, kv="ungrouped", **options)
    theirs = interv.edge_scores(twin, task, **options)
    assert [e.label for e in mine.graph.edges] == [e.label for e in theirs.graph.edges]
    torch.testing.assert_close(mine.scores, theirs.scores, atol=1e-6, rtol=1e-4)
    # and plain EAP differs from the QK-fixed scores on some key edge (the fix is in force)
    plain = interv.edge_scores(fam.bridge, task, kv="ungrouped", method="eap-ig", steps=3)
    keys = [i for i, e in enumerate(mine.graph.edges) if e.input == "k"]
    assert (mine.scores[keys] - plain.scores[keys]).abs().max() > 0
