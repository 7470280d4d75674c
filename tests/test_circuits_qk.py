"""AtP*'s QK fix (``edge_scores(..., qk_fix=True)``) on the zoo and tiny GPT-2-shaped models.

- Saturated attention (the zoo's induction heads; a GPT-2-shaped model with its queries
  scaled up): the fixed query/key scores are closer to the exact edge effects than plain
  EAP's.
- The linear limit: for a sender change scaled by a small ``eps`` the fixed scores / eps
  equal plain EAP's (the fix only differs through the softmax's and norm's curvature).
- Value, MLP and logits edges are unchanged by the fix; grouped key heads sum over the group.
- Rotary families (Llama; Qwen3's QK norm; Gemma-2's soft cap and windows; Mistral's
  window): the recomputed pattern equals Hugging Face's own attention weights at every layer,
  and the fix equals plain EAP in the linear limit.
- Refusals: a native rotary bridge (no tables to read), a pattern the fix cannot reproduce
  (a wrong scale, a rotation left out), a non-bool ``qk_fix``.
"""

from __future__ import annotations

import dataclasses
from types import SimpleNamespace

import pytest
import torch

import interv
from interv.audit import Screen
from interv.circuits import EdgeScores, Graph, discover, edge_effects, edge_scores
from interv.circuits.patching import capture_run, sender_deltas
from interv.circuits.screens import (
    QKBase,
    QKLayer,
    _groups,
    _reader_gradients,
    qk_base,
    qk_fixed_scores,
)
from interv.engine.architecture import (
    AttentionRecipe,
    KeyRule,
    LayerAttention,
    recipe_of,
)
from interv.engine.targets import get_metric
from interv.errors import IntervError
from interv.tasks.tokenized import TokenizedPairs
from tests._families import family, reference_rows
from tests._gpt2 import tiny_gpt2


@pytest.fixture(scope="module")
def gqa():
    """A native 3-block bridge with MLPs, 4 query heads on 2 key/value heads, and 3
    right-padded random prompt pairs (lengths 7, 5, 6)."""
    from transformer_lens.config import TransformerBridgeConfig
    from transformer_lens.model_bridge import TransformerBridge

    config = TransformerBridgeConfig(
        d_model=32,
        d_head=8,
        n_layers=3,
        n_ctx=16,
        n_heads=4,
        n_key_value_heads=2,
        d_vocab=40,
        attn_only=False,
        act_fn="gelu",
        d_mlp=64,
        normalization_type="LN",
        seed=1,
    )
    model = TransformerBridge.boot_native(config).eval()
    generator = torch.Generator().manual_seed(0)
    lengths = torch.tensor([7, 5, 6])
    task = TokenizedPairs(
        clean_tokens=torch.randint(1, 40, (3, 7), generator=generator),
        corrupted_tokens=torch.randint(1, 40, (3, 7), generator=generator),
        attention_mask=torch.arange(7).unsqueeze(0) < lengths.unsqueeze(1),
        answer_positions=lengths - 1,
        target_ids=torch.randint(0, 40, (3,), generator=generator),
        foil_ids=torch.randint(0, 40, (3,), generator=generator),
        padding_side="right",
        name="random pairs",
    )
    return model, task


@pytest.fixture(scope="module")
def zoo():
    model = interv.load_model("induction-2l")
    task = interv.load_task("induction", n_pairs=8, seed=1).tokenize(model)
    return model, task


@pytest.fixture(scope="module")
def gpt2(tmp_path_factory):
    return tiny_gpt2(tmp_path_factory.mktemp("gpt2"), n_pairs=4)


@pytest.fixture(scope="module")
def saturated(tmp_path_factory):
    """The GPT-2-shaped model with its queries scaled by 1000: saturated patterns (the
    largest weight of a query row is 0.92 on average at layer 1; 0.29 unscaled)."""
    return tiny_gpt2(tmp_path_factory.mktemp("gpt2_saturated"), n_pairs=4, q_scale=1000.0)


def _qk_indices(graph: Graph) -> tuple[list[int], list[int]]:
    qk = [i for i, e in enumerate(graph.edges) if e.input in ("q", "k")]
    rest = [i for i, e in enumerate(graph.edges) if e.input not in ("q", "k")]
    return qk, rest


@pytest.mark.parametrize("case", ["zoo", "saturated"])
def test_the_fix_brings_query_key_scores_closer_to_the_exact_effects(case, request):
    model, task = request.getfixturevalue(case)
    graph = Graph.from_model(model)
    qk, _ = _qk_indices(graph)
    exact = edge_effects(model, task, graph, qk)
    plain = edge_scores(model, task).scores[qk]
    fixed = edge_scores(model, task, qk_fix=True).scores[qk]
    plain_error = (plain - exact).abs().mean()
    fixed_error = (fixed - exact).abs().mean()
    assert fixed_error < 0.8 * plain_error, (case, plain_error, fixed_error)


@pytest.mark.parametrize("case", ["gpt2", "gqa"])
def test_in_the_linear_limit_the_fix_equals_plain_eap(case, request):
    _check_linear_limit(*request.getfixturevalue(case))


def _check_linear_limit(model, task) -> None:
    graph = Graph.from_model(model)
    metric = get_metric("logit_diff")
    base = capture_run(model, task, "clean")
    other = capture_run(model, task, "corrupted")
    with torch.no_grad():
        delta = sender_deltas(model, graph, other, base)
    qk = qk_base(model, graph, task, "clean")
    patterns: dict[int, torch.Tensor] = {}
    grads = list(
        _reader_gradients(model, graph, task, "clean", metric, base.logits, None, patterns)
    )
    heads, kv = graph.n_heads, graph.n_kv_heads  # readers: query heads, key heads, values
    eps = 1e-3
    for layer in range(graph.n_layers):
        (receiver,) = {
            r.n_senders for r in graph.receivers if r.input == "q" and r.node.layer == layer
        }
        part = delta[:, :, :receiver]
        linear = torch.einsum("bpud,bprd->bru", part, grads[layer]).double()
        for component, readers in (("q", slice(0, heads)), ("k", slice(heads, heads + kv))):
            fixed = (
                qk_fixed_scores(
                    model,
                    graph,
                    qk,
                    base.resid_pre[layer],
                    layer,
                    component,
                    eps * part,
                    patterns[layer],
                )
                / eps
            )
            plain = linear[:, readers]
            # the linear limit's own error (2e-3 of the largest term at eps 1e-3), plus a floor
            # for float32 rounding in the difference quotient: with terms near 1e-4 the
            # relative bound alone is ~4e-7, the size of one rounding step there (it failed by
            # 1e-8 on a busy machine, where threads sum in another order)
            atol = 2e-3 * plain.abs().max().item() + 1e-6
            torch.testing.assert_close(fixed, plain, rtol=0, atol=atol)


@pytest.mark.parametrize("case", ["zoo", "gpt2", "gqa"])
def test_value_mlp_and_logits_edges_are_unchanged_by_the_fix(case, request):
    model, task = request.getfixturevalue(case)
    graph = Graph.from_model(model)
    qk, rest = _qk_indices(graph)
    for method, steps in (("eap", 1), ("eap-ig", 3)):
        plain = edge_scores(model, task, method=method, steps=steps)
        fixed = edge_scores(model, task, method=method, steps=steps, qk_fix=True)
        # the same numbers, not the same bits: under the fix the gradient runs pull back the
        # value readers alone (float32 sums in another grouping)
        scale = plain.scores[rest].abs().max().item()
        torch.testing.assert_close(
            fixed.scores[rest], plain.scores[rest], rtol=0, atol=1e-6 * scale
        )
        assert not torch.allclose(plain.scores[qk], fixed.scores[qk])
        assert fixed.qk_fix and not plain.qk_fix
        assert "QK fix" in fixed.sentence and fixed.fingerprint != plain.fingerprint
        again = EdgeScores.from_dict(fixed.to_dict())
        assert again.qk_fix and torch.equal(again.scores, fixed.scores)
    denoise = edge_scores(model, task, qk_fix=True, direction="denoise")
    assert torch.isfinite(denoise.scores).all()


def test_a_grouped_key_head_sums_the_pattern_changes_of_its_query_heads():
    """Two key/value heads shared by four query heads, an identity norm: against a loop."""
    torch.manual_seed(3)
    n, n_pos, d_model, d_head, heads, kv = 2, 5, 8, 4, 4, 2
    w_k = torch.randn(kv, d_model, d_head)
    block = SimpleNamespace(ln1=lambda x: x, attn=SimpleNamespace(W_K=w_k, W_Q=None, W_V=None))
    model = SimpleNamespace(blocks=[block])
    graph = SimpleNamespace(n_heads=heads, ungrouped=False)
    q = torch.randn(n, n_pos, heads, d_head).double()
    k = torch.randn(n, n_pos, kv, d_head).double()
    allowed = torch.ones(n_pos, n_pos, dtype=torch.bool).tril()[None, None].expand(n, 1, -1, -1)
    recipe = AttentionRecipe(
        layer=0,
        family="test",
        attention=LayerAttention(keys=KeyRule(), positional="learned", scale=0.5),
        handover="handoff",
        pattern_feeds_output=True,
    )
    profile = QKLayer(recipe, allowed)
    pattern = profile.pattern(q, _groups(k, heads))
    base = QKBase(q=[q], k=[k], pattern=[pattern], layers=[profile])
    x = torch.randn(n, n_pos, d_model).double()
    delta = torch.randn(n, n_pos, 3, d_model).double()
    g_pattern = torch.randn(n, heads, n_pos, n_pos).double()
    got = qk_fixed_scores(model, graph, base, x, 0, "k", delta, g_pattern)
    assert got.shape == (n, kv, 3)
    for s in range(3):
        for g in range(kv):
            moved = k.clone()
            moved[:, :, g] += delta[:, :, s] @ w_k[g].double()
            new = profile.pattern(q, _groups(moved, heads))
            want = ((new - pattern) * g_pattern).sum((-1, -2))[:, g * 2 : g * 2 + 2].sum(-1)
            torch.testing.assert_close(got[:, g, s], want)


def test_refusals(zoo, monkeypatch):
    model, task = zoo
    with pytest.raises(IntervError, match=r"qk_fix must be True or False; got 'yes'"):
        edge_scores(model, task, qk_fix="yes")

    def wrong(model, layer):  # the layer's recipe with a scale of 1
        recipe = recipe_of(model, layer)
        attention = dataclasses.replace(recipe.attention, scale=1.0)
        return dataclasses.replace(recipe, attention=attention)

    with monkeypatch.context() as patch:
        patch.setattr("interv.circuits.screens.recipe_of", wrong)
        with pytest.raises(IntervError, match=r"pattern of layer 0 recomputed .* differs"):
            edge_scores(model, task, qk_fix=True)
        edge_scores(model, task)  # plain EAP stays available


def test_discover_passes_the_fix_to_its_screen(zoo):
    model, task = zoo
    result = discover(model, task, qk_fix=True, screen=Screen(top_k=8, audit=8, alpha=None))
    assert result.scores.qk_fix and "EAP with AtP*'s QK fix edge screen" in result.sentence
    data = result.to_dict()
    assert data["fingerprint"] == result.fingerprint
    plain = discover(model, task, screen=Screen(top_k=8, audit=8, alpha=None))
    assert plain.fingerprint != result.fingerprint


def test_a_native_rotary_bridge_is_refused_and_keeps_plain_eap():
    """A native bridge applies its rotary embedding without passing the tables to its blocks:
    the fix cannot read them and says so."""
    from transformer_lens.config import TransformerBridgeConfig
    from transformer_lens.model_bridge import TransformerBridge

    config = TransformerBridgeConfig(
        d_model=32, d_head=8, n_layers=2, n_ctx=16, n_heads=4, n_key_value_heads=2,
        d_vocab=20, normalization_type="LN", positional_embedding_type="rotary", seed=1,
    )  # fmt: skip
    model = TransformerBridge.boot_native(config).eval()
    generator = torch.Generator().manual_seed(0)
    task = TokenizedPairs(
        torch.randint(0, 20, (2, 5), generator=generator),
        torch.randint(0, 20, (2, 5), generator=generator),
        torch.ones(2, 5, dtype=torch.bool),
        torch.full((2,), 4),
        torch.randint(0, 20, (2,), generator=generator),
        torch.randint(0, 20, (2,), generator=generator),
        name="random pairs",
    )
    with pytest.raises(IntervError, match=r"receives no rotary tables.*qk_fix=False"):
        edge_scores(model, task, qk_fix=True)
    assert torch.isfinite(edge_scores(model, task).scores).all()


ROTARY = ["llama", "qwen3", "gemma2", "mistral", "exaone4"]
"""Rotary families: plain; with per-head QK norm; with an attention soft cap and sliding
windows on every other layer; with a sliding window (4 keys) everywhere; with per-head QK norm,
sliding rotary layers and a global layer without rotation (EXAONE-4's NoPE)."""


def _family_task(name: str) -> tuple:
    fam = family(name)
    generator = torch.Generator().manual_seed(4)
    corrupted = fam.tokens.clone()
    corrupted[:, 1:] = torch.randint(2, 60, corrupted[:, 1:].shape, generator=generator)
    corrupted[~fam.real] = fam.tokens[~fam.real]  # the same padding
    task = TokenizedPairs(
        fam.tokens,
        corrupted,
        fam.real,
        fam.real.sum(1) - 1,
        torch.tensor([5, 9]),
        torch.tensor([7, 3]),
        name="random pairs",
    )
    return fam, task


@pytest.mark.parametrize("name", ROTARY)
def test_the_fix_recomputes_hugging_faces_own_pattern_on_rotary_families(name):
    """Queries and keys through QK norm and the rotary tables, the layer's scale, soft cap
    and admitted keys give Hugging Face's eager attention weights at every layer (right
    padding included)."""
    fam, task = _family_task(name)
    graph = Graph.from_model(fam.bridge)
    qk = qk_base(fam.bridge, graph, task, "clean")
    attentions, _ = reference_rows(fam)
    rows = fam.real[:, None, :, None]
    for layer, reference in enumerate(attentions):
        gap = ((qk.pattern[layer] - reference.double()) * rows).abs().max()
        assert gap < 1e-5, (name, layer, float(gap))
    with pytest.MonkeyPatch.context() as patch:  # without the rotation the check refuses
        patch.setattr("interv.engine.architecture.rotate_half", lambda x, cos, sin: x)
        with pytest.raises(IntervError, match=r"rotary embedding.*differs from the model's"):
            qk_base(fam.bridge, graph, task, "clean")


@pytest.mark.parametrize("name", ["llama", "gemma2"])
def test_in_the_linear_limit_the_rotary_fix_equals_plain_eap(name):
    fam, task = _family_task(name)
    _check_linear_limit(fam.bridge, task)


@pytest.mark.parametrize("name", ["gpt_neo", "gptj"])
def test_a_pattern_hooked_after_the_outputs_is_refused_before_any_forward(name):
    """GPT-Neo's and GPT-J's bridges hook the pattern Hugging Face's module returns, after the
    heads' outputs: the metric has no gradient there, refused in one line before a forward."""
    fam, task = _family_task(name)
    ran = []
    handle = fam.bridge.blocks[0].register_forward_pre_hook(lambda *args: ran.append(1))
    try:
        with pytest.raises(IntervError, match=r"hooked only after the heads' outputs") as error:
            edge_scores(fam.bridge, task, qk_fix=True)
    finally:
        handle.remove()
    assert not ran and "\n" not in str(error.value)
    assert str(error.value).startswith(f"{name}: qk_fix=True")
