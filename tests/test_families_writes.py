"""The family matrix, write-path columns: what interv's causal numbers read and write, family by
family, against plain Hugging Face references (tests/_write_references.py: eager attention,
torch hooks on the model's own modules, autograd; no interv code in them).

Columns of docs/architectures.md owned here (each cell: "exact" when interv's numbers equal the
reference, or interv's one-line refusal, raised before any forward):

- ``ablation``: a head's zero ablation, and the clean and corrupted metric (the model's own
  logits: Gemma-2's soft cap, Cohere's and Granite's logit scales);
- ``patch``: a head's denoising activation patch;
- ``direct``: ``DirectEffect`` (the head's write change, through the post-attention norm and
  the residual multiplier, into the final norm with its scale frozen);
- ``eap``: EAP scores of seven edges (into queries, keys, values, MLPs and the logits, from
  the embeddings, heads and MLPs) = d/dt at 0 of the metric with only the reader's input
  moved by t times the sender's change;
- ``edges``: exact effects of three edges (head -> key, head -> MLP, MLP -> logits);
- ``faithfulness``: faithfulness at two edge fractions of a fixed ranking, every reader's
  input rebuilt from the corrupted run plus its kept edges (compared as ``m(C)``, in logits:
  ``f`` divides by ``m(full) - m(empty)``, small on random models).

Tolerance: 1e-6 logits absolute plus 1e-3 relative (float32 models whose effects are 1e-5 to
1e-1 logits).

The layer and head: the last layer with attention, head 1 (sender heads in layer 0).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import _write_references as ref
import pytest
import torch
from _families import Family, _configs, cells, column, family, record, save_model
from transformer_lens.model_bridge import TransformerBridge
from transformers import AutoModelForCausalLM

import interv
from interv.circuits.graph import Edge, Graph, Node
from interv.engine.architecture import architecture_of
from interv.errors import IntervError
from interv.tasks.tokenized import TokenizedPairs

# the write-path matrix (circuits, EAP and faithfulness on 30 families, ~15 s): out of the quick
# loop, in the README's test command
pytestmark = pytest.mark.slow

TARGET, FOIL = 7, 11
FRACTIONS = (0.05, 0.25)
ATOL = 1e-6


# ----------------------------------------------------------------------------- the task


def prompts_of(fam: Family) -> ref.Prompts:
    """Clean prompts of the family (BOS + 12 tokens, the second right-padded to 9 real), their
    corrupted versions (positions 2-4 replaced), answers at the last real token."""
    generator = torch.Generator().manual_seed(7)
    corrupted = fam.tokens.clone()
    corrupted[:, 2:5] = torch.randint(2, 64, (2, 3), generator=generator)
    answer = fam.real.sum(1) - 1
    n = fam.tokens.shape[0]
    return ref.Prompts(
        clean=fam.tokens,
        corrupted=corrupted,
        real=fam.real,
        answer=answer,
        target=torch.full((n,), TARGET),
        foil=torch.full((n,), FOIL),
    )


def task_of(prompts: ref.Prompts) -> TokenizedPairs:
    return TokenizedPairs(
        clean_tokens=prompts.clean,
        corrupted_tokens=prompts.corrupted,
        attention_mask=prompts.real,
        answer_positions=prompts.answer,
        target_ids=prompts.target,
        foil_ids=prompts.foil,
        name="families",
    )


def head_of(fam: Family) -> tuple[int, int]:
    """The head the single-head columns use: head 1 of the last layer with attention."""
    return architecture_of(fam.bridge).attention_layers[-1], 1


@contextmanager
def no_forward_before_refusal(fam: Family) -> Iterator[None]:
    """Fail when interv refuses (IntervError) after running any block of the model."""
    calls: list[int] = []
    handles = [
        block.register_forward_pre_hook(lambda *_: calls.append(1)) for block in fam.bridge.blocks
    ]
    try:
        yield
    except IntervError as error:
        if calls:
            raise AssertionError(
                f"refused after {len(calls)} block calls (a refusal comes before any work): {error}"
            ) from error
        raise
    finally:
        for handle in handles:
            handle.remove()


Comparison = list[tuple[str, torch.Tensor, torch.Tensor]]
"""``(what, interv's value, the reference's)`` triples."""


def check(pairs: Comparison) -> None:
    for what, mine, expected in pairs:
        torch.testing.assert_close(
            mine.double().cpu(), expected.double().cpu(), atol=ATOL, rtol=1e-3, msg=what
        )


# ----------------------------------------------------------------------------- single heads


def _baselines(plumb: ref.Plumbing, prompts: ref.Prompts, result: Any) -> Comparison:
    with torch.no_grad():
        clean = ref.metric(plumb, prompts, prompts.clean)
        corrupted = ref.metric(plumb, prompts, prompts.corrupted)
    return [
        ("clean metric", result.clean, clean),
        ("corrupted metric", result.corrupted, corrupted),
    ]


def compare_ablation(fam: Family) -> Comparison:
    prompts, (layer, head) = prompts_of(fam), head_of(fam)
    with no_forward_before_refusal(fam):
        result = interv.run(fam.bridge, task_of(prompts), [interv.ZeroAblation(layer, head)])
    plumb = ref.plumbing(fam)
    hook = ref.replace_head(plumb.layers[layer], plumb, head, None)
    with torch.no_grad():
        ablated = ref.metric(plumb, prompts, prompts.clean, [hook])
    return [*_baselines(plumb, prompts, result), ("zero ablation", result.values[0], ablated)]


def compare_patch(fam: Family) -> Comparison:
    prompts, (layer, head) = prompts_of(fam), head_of(fam)
    patch = interv.ActivationPatch("z", layer, head, direction="denoise")
    with no_forward_before_refusal(fam):
        result = interv.run(fam.bridge, task_of(prompts), [patch])
    plumb = ref.plumbing(fam)
    clean = ref.capture(plumb, prompts, prompts.clean)
    hook = ref.replace_head(plumb.layers[layer], plumb, head, ref.head_z(clean, plumb, layer, head))
    with torch.no_grad():
        patched = ref.metric(plumb, prompts, prompts.corrupted, [hook])
    return [*_baselines(plumb, prompts, result), ("denoising patch", result.values[0], patched)]


def compare_direct(fam: Family) -> Comparison:
    prompts, (layer, head) = prompts_of(fam), head_of(fam)
    with no_forward_before_refusal(fam):
        result = interv.run(fam.bridge, task_of(prompts), [interv.DirectEffect(layer, head)])
    plumb = ref.plumbing(fam)
    with torch.no_grad():
        clean = ref.capture(plumb, prompts, prompts.clean)
        change = ref.head_write_change(plumb, prompts, prompts.clean, layer, head, None)
        final = clean[("final", -1)]
        normed = ref.frozen_norm(plumb.final_norm, final + change, final)

        def frozen(module, args, kwargs, out):
            return normed

        direct = ref.metric(plumb, prompts, prompts.clean, [(plumb.final_norm, "post", frozen)])
    return [*_baselines(plumb, prompts, result), ("direct effect", result.values[0], direct)]


# ----------------------------------------------------------------------------- edges


def _head(graph: Graph, layer: int, h: int, key_value: bool = False) -> Node:
    return Node("head", layer, h, kv=key_value and graph.grouped)


def exact_edges(graph: Graph) -> list[Edge]:
    """Three edges: a layer-0 head into a key of the last layer, into the last MLP, and the
    last MLP into the logits."""
    last = graph.n_layers - 1
    return [
        Edge(_head(graph, 0, 2), _head(graph, last, 1, True), "k"),
        Edge(_head(graph, 0, 1), Node("mlp", last), "mlp"),
        Edge(Node("mlp", last), Node("logits"), "logits"),
    ]


def sample_edges(graph: Graph) -> list[Edge]:
    """Edges of every kind: into a query, a key and a value of the last layer, into MLPs,
    into the logits; from the embeddings, layer 0's heads and MLP, the last layer's heads
    (into their own layer's MLP in a sequential block) and MLP."""
    last = graph.n_layers - 1
    edges = [
        Edge(Node("embed"), Node("mlp", 0), "mlp"),
        Edge(_head(graph, 0, 3), _head(graph, last, 1), "q"),
        Edge(Node("mlp", 0), _head(graph, last, 0, True), "v"),
        Edge(_head(graph, 0, 0), _head(graph, last, 0, True), "v"),
        Edge(_head(graph, last, 3), Node("logits"), "logits"),
        *exact_edges(graph),
    ]
    if not getattr(graph, "parallel", False):
        edges.append(Edge(_head(graph, last, 0), Node("mlp", last), "mlp"))
    return edges


def _sender(node: Node) -> Any:
    if node.kind == "embed":
        return "embed"
    return ("head", node.layer, node.head) if node.kind == "head" else ("mlp", node.layer)


def _reader(edge: Edge) -> ref.Reader:
    if edge.input == "logits":
        return ref.Reader("logits")
    if edge.input == "mlp":
        return ref.Reader("mlp", edge.receiver.layer)
    return ref.Reader(edge.input, edge.receiver.layer, edge.receiver.head)


def _edge_reference(fam: Family, prompts: ref.Prompts, edges: list[Edge], exact: bool) -> list:
    """Per edge (noise direction: the clean run, the sender's corrupted change): the exact
    effect (``exact``) or d/dt at 0 (the EAP score), prompt means."""
    plumb = ref.plumbing(fam)
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


def compare_eap(fam: Family) -> Comparison:
    prompts = prompts_of(fam)
    with no_forward_before_refusal(fam):
        scores = interv.edge_scores(fam.bridge, task_of(prompts), method="eap")
    edges = sample_edges(scores.graph)
    expected = _edge_reference(fam, prompts, edges, exact=False)
    return [
        (f"EAP {edge.label}", scores.scores[scores.graph.index(edge)], value)
        for edge, value in zip(edges, expected, strict=True)
    ]


def compare_edges(fam: Family) -> Comparison:
    prompts = prompts_of(fam)
    with no_forward_before_refusal(fam):
        graph = Graph.from_model(fam.bridge)
        edges = exact_edges(graph)
        effects = interv.edge_effects(fam.bridge, task_of(prompts), graph, edges)
    expected = _edge_reference(fam, prompts, edges, exact=True)
    return [
        (f"exact effect {edge.label}", effect, value)
        for edge, effect, value in zip(edges, effects, expected, strict=True)
    ]


def ranking_of(graph: Graph) -> list[Edge]:
    """Every edge of ``graph`` in a fixed random order (the circuits: its first edges)."""
    order = torch.randperm(graph.n_edges, generator=torch.Generator().manual_seed(3))
    return [graph.edges[i] for i in order.tolist()]


def compare_faithfulness(fam: Family) -> Comparison:
    prompts = prompts_of(fam)
    with no_forward_before_refusal(fam):
        graph = Graph.from_model(fam.bridge)
        ranking = ranking_of(graph)
        curve = interv.faithfulness(
            fam.bridge, task_of(prompts), ranking, fractions=FRACTIONS, n_bootstrap=10
        )
    plumb = ref.plumbing(fam)
    clean = ref.capture(plumb, prompts, prompts.clean)
    corrupted = ref.capture(plumb, prompts, prompts.corrupted)
    full, empty = clean[("metric", -1)].mean(), corrupted[("metric", -1)].mean()
    pairs: Comparison = [
        ("m(full)", torch.tensor(curve.m_full), full),
        ("m(empty)", torch.tensor(curve.m_empty), empty),
    ]
    for size, fraction, faith in zip(curve.n_edges_kept, FRACTIONS, curve.mean, strict=True):
        kept: dict[ref.Reader, set[Any]] = {}
        for edge in ranking[:size]:
            kept.setdefault(_reader(edge), set()).add(_sender(edge.sender))
        value = ref.circuit_metric(plumb, prompts, clean, corrupted, kept).mean()
        # compared in the metric's unit: f divides by m(full) - m(empty), often tiny here
        mine = curve.m_empty + faith * (curve.m_full - curve.m_empty)
        pairs.append((f"m(C) at {fraction:g} ({size} edges)", torch.tensor(mine), value))
    return pairs


COMPARISONS: dict[str, Callable[[Family], Comparison]] = {
    "ablation": compare_ablation,
    "patch": compare_patch,
    "direct": compare_direct,
    "eap": compare_eap,
    "edges": compare_edges,
    "faithfulness": compare_faithfulness,
}


WHAT = {
    "ablation": "ZeroAblation of L(last)H1, and the clean and corrupted metric (logit difference "
    "at the answer: the model's own logits, soft cap and logit scale included)",
    "patch": "ActivationPatch of L(last)H1's z, denoising",
    "direct": "DirectEffect of L(last)H1 (its write change through the post-attention norm and "
    "the residual multiplier, into the final norm with its scale frozen)",
    "eap": "edge_scores EAP of 8 edges into queries, keys, values, MLPs and the logits (d/dt of "
    "the metric with one reader's input moved by t times the sender's write change, autograd)",
    "edges": "edge_effects of 3 edges (head -> key, head -> MLP, MLP -> logits)",
    "faithfulness": "faithfulness at 5 % and 25 % of a fixed ranking (every reader's input "
    "rebuilt from the corrupted run plus its kept edges), as m(C) in logits",
}


def _register(name: str, compare: Callable[[Family], Comparison]) -> None:
    column(name, WHAT[name])(lambda fam: check(compare(fam)))


for _name, _compare in COMPARISONS.items():
    _register(_name, _compare)


@pytest.mark.parametrize(("name", "col"), cells(*COMPARISONS))
def test_family_matrix_writes(name, col):
    record(name, col)


# ----------------------------------------------------------------------------- the references


def test_the_circuit_reference_gives_the_clean_and_corrupted_runs_at_its_ends():
    """A reference that cannot fail is a defect: with every edge kept the rebuilt clean run is
    the clean run; with none, every reader reads the corrupted run (its metric)."""
    for name in ("gemma2", "gpt_neox"):
        fam = family(name)
        prompts = prompts_of(fam)
        plumb = ref.plumbing(fam)
        clean = ref.capture(plumb, prompts, prompts.clean)
        corrupted = ref.capture(plumb, prompts, prompts.corrupted)
        senders = {"embed"}
        readers = [ref.Reader("logits")]
        for L in range(len(plumb.layers)):
            senders |= {("head", L, h) for h in range(plumb.n_heads)} | {("mlp", L)}
            readers += [ref.Reader("mlp", L)] + [
                ref.Reader(kind, L, h)
                for kind, count in (("q", plumb.n_heads), ("k", plumb.n_kv), ("v", plumb.n_kv))
                for h in range(count)
            ]
        everything = dict.fromkeys(readers, senders)  # each reader sees the senders before it
        full = ref.circuit_metric(plumb, prompts, clean, corrupted, everything)
        empty = ref.circuit_metric(plumb, prompts, clean, corrupted, {})
        torch.testing.assert_close(full, clean[("metric", -1)], atol=1e-5, rtol=0)
        torch.testing.assert_close(empty, corrupted[("metric", -1)], atol=1e-5, rtol=0)


def test_a_head_write_passes_the_post_norm_so_head_writes_do_not_add_up():
    """On Gemma-2 the heads' write changes do not sum to the layer's (the norm is not linear):
    the reason a head's write is defined alone, the other heads at the base run."""
    fam = family("gemma2")
    prompts = prompts_of(fam)
    plumb = ref.plumbing(fam)
    clean = ref.capture(plumb, prompts, prompts.clean)
    corrupted = ref.capture(plumb, prompts, prompts.corrupted)
    layer = plumb.layers[1]
    with torch.no_grad():
        heads = sum(
            ref.sender_change(plumb, prompts, prompts.clean, clean, corrupted, ("head", 1, h))
            for h in range(plumb.n_heads)
        )
        every = [
            ref.replace_head(layer, plumb, h, ref.head_z(corrupted, plumb, 1, h))
            for h in range(plumb.n_heads)
        ]
        whole = ref.capture(plumb, prompts, prompts.clean, every)[("attn", 1)] - clean[("attn", 1)]
    assert (heads - whole).abs().max() > 1e-3 * whole.abs().max()


# ----------------------------------------------------------------------------- facts and graphs


def test_the_final_soft_cap_is_read_where_it_bites():
    """The matrix's Gemma-2 logits are too small for its cap of 30 to show; with a cap of
    0.05 the capped logit difference is a fraction of the uncapped one, and interv's metric
    is the model's own (capped)."""
    config = _configs()["gemma2"]()
    config.final_logit_softcapping = 0.05
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        hf = AutoModelForCausalLM.from_config(config, attn_implementation="eager").eval()
    directory = save_model(hf, "gemma2-cap")
    bridge = TransformerBridge.boot_transformers(str(directory), device="cpu").eval()
    base = family("gemma2")
    fam = Family("gemma2", bridge, hf, directory, base.tokens, base.real)
    prompts = prompts_of(fam)
    result = interv.run(bridge, task_of(prompts), [interv.ZeroAblation(1, 1)])
    with torch.no_grad():
        own = ref.metric(ref.plumbing(fam), prompts, prompts.clean)
        out = hf(
            input_ids=prompts.clean, attention_mask=prompts.real.long(), output_hidden_states=True
        )
        rows = torch.arange(2)
        uncapped = hf.lm_head(out.hidden_states[-1])[rows, prompts.answer]
        uncapped = uncapped[rows, prompts.target] - uncapped[rows, prompts.foil]
    assert ((own - uncapped).abs() > 0.3 * uncapped.abs()).all()
    torch.testing.assert_close(result.clean, own, atol=1e-6, rtol=1e-4)


def test_post_ln_families_are_named_and_refused_in_one_line():
    arch = architecture_of(family("bert").bridge)
    assert arch.residual_norm and arch.head_transform
    assert not architecture_of(family("gemma2").bridge).residual_norm
    fam = family("bert")
    refusal = r"^bert: the model's logits apply a dense layer"
    with pytest.raises(IntervError, match=refusal) as info, no_forward_before_refusal(fam):
        interv.run(fam.bridge, task_of(prompts_of(fam)), [interv.ZeroAblation(1, 1)])
    assert "\n" not in str(info.value)
    with pytest.raises(IntervError, match=r"^bert: the residual stream is normalized after"):
        Graph.from_model(fam.bridge)


def test_a_parallel_block_has_no_edges_from_its_heads_into_its_own_mlp():
    for name, parallel in (("gptj", True), ("cohere", True), ("llama", False)):
        graph = Graph.from_model(family(name).bridge)
        assert graph.parallel is parallel
        own = [e for e in graph.edges if e.input == "mlp" and e.sender.layer == e.receiver.layer]
        assert bool(own) is not parallel, name
    gptj = Graph.from_model(family("gptj").bridge)  # 2 layers x 4 heads, no GQA
    # q, k, v: 3 x 4 x (1 + 0 and 1 + 5 senders); MLPs: 1 and 6 senders; logits: 11
    assert gptj.counts() == {"q": 4 * 7, "k": 4 * 7, "v": 4 * 7, "mlp": 1 + 6, "logits": 11}


def test_a_write_path_interv_does_not_reproduce_is_refused_at_the_first_capture(monkeypatch):
    """The safety net under the facts: the first circuit capture of a model recomputes each
    write and refuses, naming the block, when it differs from the model's own."""
    from interv.circuits import patching
    from interv.engine.writes import Writes

    fam = family("llama")
    monkeypatch.delitem(patching._CHECKED, fam.bridge, raising=False)
    monkeypatch.setattr(Writes, "multiplier", property(lambda self: 2.0))
    with pytest.raises(IntervError, match=r"^llama: block 0's attention write as interv"):
        patching.capture_run(fam.bridge, task_of(prompts_of(fam)), "clean")
