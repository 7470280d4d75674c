"""The family matrix: every family the bridge loads, interv's numbers against plain Hugging Face.

Columns of docs/architectures.md owned here: ``keys`` (each layer's :class:`KeyRule` equals
the mask the model's own attention modules apply, right- and left-padded) and the attention
statistics built on it. Each cell's outcome must equal the committed table (tests/_families.py).
"""

from __future__ import annotations

import pytest
import torch
from _families import (
    FAMILIES,
    Family,
    build,
    cells,
    column,
    family,
    off_row_sink_layers,
    record,
    reference_concentration,
    reference_rows,
    save_model,
)
from transformer_lens.model_bridge import TransformerBridge
from transformers import MambaConfig, MambaForCausalLM

from interv.analysis._patterns import attention_rows
from interv.analysis.attention_view import attention_view
from interv.analysis.concentration import concentration
from interv.analysis.sinks import sink_profile
from interv.analysis.token_flow import token_attention
from interv.engine.architecture import (
    Architecture,
    KeyRule,
    LayerAttention,
    architecture_of,
    check_admitted,
)
from interv.errors import IntervError

# ----------------------------------------------------------------------------- columns


@column(
    "keys",
    "each layer's KeyRule (architecture_of) equals the mask the model's own attention modules "
    "apply (their attention_mask argument, and GPT-Neo's local-attention buffer), right- and "
    "left-padded, and the zeros of the model's rows",
)
def keys_equal_the_models_own_masks(fam: Family) -> None:
    arch = architecture_of(fam.bridge)
    for tokens, real in ((fam.tokens, fam.real), fam.left_padded()):
        attentions, masks = reference_rows(fam, tokens, real)
        for layer, own in enumerate(masks):
            if own is None:
                assert arch.layers[layer] is None, f"layer {layer}: no rows in the reference"
                continue
            mine = arch.key_rule(layer).admitted(real)
            at_real_queries = real[:, :, None]
            differs = (mine != own) & at_real_queries
            assert not bool(differs.any()), (
                f"layer {layer}: {int(differs.sum())} entries differ from the model's mask"
            )
            # the reference mask is the model's: exactly the zeros of its rows
            if not arch.layers[layer].off_row_sink:
                zeros = attentions[layer] == 0
                assert bool(((zeros == ~own[:, None]) | ~real[:, None, :, None]).all())


ROW_NUMBERS = (
    "entropy",
    "normalized_entropy",
    "sink_mass",
    "content_entropy",
    "content_normalized_entropy",
)


def _assert_numbers(found: dict[str, torch.Tensor], expected: dict[str, torch.Tensor]) -> None:
    for name in (*ROW_NUMBERS, "n_available_keys"):
        torch.testing.assert_close(
            found[name].double(),
            expected[name].double(),
            atol=2e-6,
            rtol=0,
            equal_nan=True,
            msg=lambda message, name=name: f"{name}: {message}",
        )


def _concentration_check(fam: Family, off_row_sink: str | None) -> None:
    heads = concentration(
        fam.bridge, fam.tokens, attention_mask=fam.real, off_row_sink=off_row_sink
    )
    attentions, masks = reference_rows(fam)
    sinks = off_row_sink_layers(fam) if off_row_sink == "as_key" else set()
    expected = reference_concentration(attentions, masks, fam.real, deficit_as_key=sinks)
    found = {name: heads.metric(name) for name in ROW_NUMBERS}
    found["n_available_keys"] = heads.n_available_keys
    _assert_numbers(found, expected)
    assert heads.mask_rule.startswith(architecture_of(fam.bridge).mask_rule)


@column(
    "concentration",
    "interv.concentration: entropy, normalized entropy, sink mass, content entropy, content "
    "normalized entropy (every head, every query) and n_available_keys against Hugging Face's "
    "eager rows and masks (value-aware numbers not compared here)",
)
def concentration_equals_the_reference(fam: Family) -> None:
    _concentration_check(fam, None)


@column(
    "concentration as_key",
    "the same with off_row_sink='as_key' (the reference appends each row's deficit 1 - sum(a) "
    "as a sink key where the module has a learned sink)",
)
def concentration_with_the_off_row_sink_as_a_key_equals_the_reference(fam: Family) -> None:
    _concentration_check(fam, "as_key")


def _on_prompts(fam: Family, analysis):
    """``analysis`` of ``fam``'s padded batch, with the off-row sink as a key where the family
    has one."""
    off_row = "as_key" if architecture_of(fam.bridge).off_row_sink else None
    return analysis(fam.bridge, fam.tokens, attention_mask=fam.real, off_row_sink=off_row)


@column(
    "attention_rows",
    "attention_rows: per-layer key masks and rows equal the model's (the deficit column where "
    "the family has an off-row sink), and the included query rows",
)
def attention_rows_hold_the_models_rows_and_masks(fam: Family) -> None:
    rows = _on_prompts(fam, attention_rows)
    off_row = rows.off_row_sink
    attentions, masks = reference_rows(fam)
    real_queries = fam.real[:, :, None]
    for index, layer in enumerate(rows.layers):
        own = masks[layer] & real_queries
        n_keys = own.shape[-1]
        assert torch.equal(rows.key_mask[:, index, :, :n_keys], own)
        torch.testing.assert_close(
            rows.pattern[:, index, ..., :n_keys] * own[:, None], attentions[layer] * own[:, None]
        )
        if off_row:  # the deficit is the last key, in the sink set
            deficit = 1 - (attentions[layer] * own[:, None]).sum(-1)
            at_real = real_queries[:, None, :, 0]
            torch.testing.assert_close(
                rows.pattern[:, index, ..., -1] * at_real, deficit.clamp(min=0) * at_real
            )
    n_content = torch.stack([(masks[i] & real_queries)[..., 1:].sum(-1) for i in rows.layers])
    assert torch.equal(rows.included, fam.real & (n_content >= 2).all(dim=0))


@column(
    "sink_profile",
    "sink_profile: the sink score of key 0 is the mean weight on it over the queries whose "
    "layer admits it",
)
def sink_scores_average_over_the_queries_whose_layer_admits_the_key(fam: Family) -> None:
    profile = _on_prompts(fam, sink_profile)
    attentions, masks = reference_rows(fam)
    for layer, (a, own) in enumerate(zip(attentions, masks, strict=True)):
        sees = own[:, :, 0] & fam.real  # [batch, query]: queries whose layer admits key 0
        expected = (a[..., 0] * sees[:, None]).sum(-1) / sees.sum(-1)[:, None]
        torch.testing.assert_close(profile.scores[:, layer].float(), expected)
    assert profile.mask_rule == architecture_of(fam.bridge).mask_rule


@column(
    "viewer rows",
    "attention_view (what view_attention draws): every row's numbers and n of every head equal "
    "the reference",
)
def viewer_row_numbers_equal_the_reference(fam: Family) -> None:
    arch = architecture_of(fam.bridge)
    view = _on_prompts(fam, attention_view)
    attentions, masks = reference_rows(fam)
    sinks = off_row_sink_layers(fam) if view.off_row_sink else set()
    expected = reference_concentration(attentions, masks, fam.real, deficit_as_key=sinks)
    n_layers, n_heads = arch.n_layers, fam.bridge.cfg.n_heads
    found = {name: view.metric(name).reshape(2, n_layers, n_heads, -1) for name in ROW_NUMBERS}
    found["n_available_keys"] = view.n_available.reshape(2, n_layers, n_heads, -1)[:, :, 0]
    _assert_numbers(found, expected)
    assert view.mask_rule.startswith(arch.mask_rule)


@column(
    "token_attention",
    "token_attention: per-layer key masks and head-averaged weights equal the model's (norms "
    "not compared here)",
)
def token_attention_weights_and_masks_equal_the_reference(fam: Family) -> None:
    flow = _on_prompts(fam, token_attention)
    attentions, masks = reference_rows(fam)
    real_queries = fam.real[:, :, None]
    for layer, (a, own) in enumerate(zip(attentions, masks, strict=True)):
        own = own & real_queries
        assert torch.equal(flow.key_mask[:, layer], own)
        expected = (a.double().mean(dim=1)) * own
        torch.testing.assert_close(flow.weights[:, layer], expected, atol=1e-6, rtol=0)


MATRIX = (
    "keys",
    "concentration",
    "concentration as_key",
    "attention_rows",
    "sink_profile",
    "viewer rows",
    "token_attention",
)


@pytest.mark.parametrize(("name", "col"), cells(*MATRIX))
def test_family_matrix(name, col):
    record(name, col)


def _uniform_queries(hf) -> None:
    """Zero every query projection: logits 0, each row uniform over the keys it admits."""
    for name, parameter in hf.named_parameters():
        if "q_proj" in name:
            parameter.zero_()


@pytest.mark.parametrize("name", ["mistral", "gemma2", "llama4"])
def test_a_head_uniform_over_its_window_reads_normalized_entropy_one(name):
    fam = build(name, _uniform_queries, tag="-uniform")
    heads = concentration(fam.bridge, fam.tokens, attention_mask=fam.real)
    defined = heads.normalized_entropy[~heads.normalized_entropy.isnan()]
    assert defined.numel() > 0
    torch.testing.assert_close(defined, torch.ones_like(defined), atol=1e-6, rtol=0)
    arch = architecture_of(fam.bridge)
    for layer in range(arch.n_layers):
        rule = arch.key_rule(layer)
        t = torch.arange(13)
        n = t + 1
        if rule.window is not None:
            n = n.clamp(max=rule.window)
        if rule.chunk is not None:
            n = t % rule.chunk + 1
        assert heads.n_available_keys[0, layer].tolist() == n.tolist()


# ----------------------------------------------------------------------------- profiles

# What each family computes, read off transformers 5.24's modeling files: the fields not
# already pinned by a reference check above.
FACTS: dict[str, dict[str, object]] = {
    "gpt2": {"positional": "learned"},
    "gpt_neo": {"positional": "learned", "scale": 1.0},
    "gpt_neox": {"parallel_residual": True},
    "gptj": {"parallel_residual": True, "pre_mlp_norm": False},
    "opt": {"positional": "learned"},
    "bloom": {"positional": "alibi"},
    "mixtral": {"moe_layers": (0, 1, 2, 3)},
    "qwen3": {"qk_norm": True},
    "qwen3_next": {
        "attention_layers": (1,),
        "output_gate": True,
        "qk_norm": True,
        "moe_layers": (0, 1),
    },
    "gemma2": {
        "softcap": 50.0,
        "final_logit_softcap": 30.0,
        "post_attention_norm": True,
        "post_mlp_norm": True,
        "scale": 0.0625,
    },
    "gemma3": {
        "qk_norm": True,
        "post_attention_norm": True,
        "post_mlp_norm": True,
        "scale": 0.0625,
    },
    "olmo2": {
        "qk_norm": True,
        "pre_attention_norm": False,
        "pre_mlp_norm": False,
        "post_attention_norm": True,
        "post_mlp_norm": True,
    },
    "olmo3": {
        "qk_norm": True,
        "pre_attention_norm": False,
        "pre_mlp_norm": False,
        "post_attention_norm": True,
        "post_mlp_norm": True,
    },
    "phi": {"parallel_residual": True, "pre_mlp_norm": False},
    "cohere": {"parallel_residual": True, "logit_scale": 0.0625},
    "cohere2": {
        "parallel_residual": True,
        "logit_scale": 0.0625,
        "positional_by_layer": ("rotary", "rotary", "rotary", "none"),
    },
    "granite": {"scale": 0.25, "residual_multiplier": 0.5, "logit_scale": 0.25},
    "smollm3": {"positional_by_layer": ("rotary", "rotary", "rotary", "none")},
    "exaone4": {
        "positional_by_layer": ("rotary", "rotary", "rotary", "none"),
        "qk_norm": True,
        "pre_attention_norm": False,
        "pre_mlp_norm": False,
        "post_attention_norm": True,
        "post_mlp_norm": True,
    },
    "gpt_oss": {"off_row_sink": True, "moe_layers": (0, 1, 2, 3)},
    "llama4": {
        "positional_by_layer": ("rotary", "rotary", "rotary", "none"),
        "moe_layers": (0, 1, 2, 3),
        "qk_norm_by_layer": (True, True, True, False),
        "scale_by_layer": (8**-0.5, 8**-0.5, 8**-0.5, None),
    },
    "bert": {"encoder": True, "positional": "learned"},
    "roberta": {"encoder": True, "positional": "learned"},
}
_DEFAULTS: dict[str, object] = {
    "encoder": False,
    "positional": "rotary",
    "parallel_residual": False,
    "pre_attention_norm": True,
    "post_attention_norm": False,
    "post_mlp_norm": False,
    "moe_layers": (),
    "final_logit_softcap": None,
    "logit_scale": None,
    "residual_multiplier": None,
    "softcap": None,
    "qk_norm": False,
    "off_row_sink": False,
    "output_gate": False,
}


def _observed(arch: Architecture, expected: dict[str, object]) -> dict[str, object]:
    layers = [arch.layers[i] for i in arch.attention_layers]
    per_layer = {
        "positional_by_layer": tuple(layer.positional for layer in layers),
        "qk_norm_by_layer": tuple(layer.qk_norm for layer in layers),
        "scale_by_layer": tuple(layer.scale for layer in layers),
    }
    seen: dict[str, object] = {}
    for key in expected:
        if key in per_layer:
            seen[key] = per_layer[key]
        elif key == "attention_layers":
            seen[key] = arch.attention_layers
        elif hasattr(arch, key):
            seen[key] = getattr(arch, key)
        else:  # a layer field: the same on every attention layer
            values = {getattr(layer, key) for layer in layers}
            seen[key] = values.pop() if len(values) == 1 else values
    return seen


@pytest.mark.parametrize("name", FAMILIES)
def test_profile_names_what_the_family_computes(name):
    arch = architecture_of(family(name).bridge)
    facts = FACTS.get(name, {})
    expected = {key: value for key, value in _DEFAULTS.items() if not _per_layer_set(key, facts)}
    expected.update(facts)
    if "scale" not in expected and "scale_by_layer" not in expected:
        expected["scale"] = 8**-0.5  # d_head 8
    seen = _observed(arch, expected)
    for key, value in expected.items():
        if isinstance(value, float):
            assert seen[key] == pytest.approx(value), key
        else:
            assert seen[key] == value, key


def _per_layer_set(key: str, facts: dict[str, object]) -> bool:
    return f"{key}_by_layer" in facts


def test_profile_is_cached_per_model_and_leaves_the_model_alone():
    fam = family("gemma2")
    state = {name: value.clone() for name, value in fam.bridge.state_dict().items()}
    first = architecture_of(fam.bridge)
    assert architecture_of(fam.bridge) is first
    after = fam.bridge.state_dict()
    assert all(torch.equal(state[name], after[name]) for name in state)
    assert not fam.bridge._forward_hooks and not fam.bridge._forward_pre_hooks


def test_scope_line_names_each_rule_with_its_layers():
    assert architecture_of(family("gemma2").bridge).mask_rule == (
        "causal AND padding AND sliding window 4 (layers 0, 2); causal AND padding (layers 1, 3)"
    )
    assert architecture_of(family("llama4").bridge).mask_rule == (
        "causal AND padding AND chunks of 4 (layers 0, 1, 2); causal AND padding (layer 3)"
    )
    assert architecture_of(family("bert").bridge).mask_rule == "bidirectional: padding"
    assert architecture_of(family("mistral").bridge).mask_rule == (
        "causal AND padding AND sliding window 4"
    )


def test_require_refuses_in_one_line_naming_the_family_and_what_it_lacks():
    arch = architecture_of(family("gpt_oss").bridge)
    with pytest.raises(IntervError, match=r"^gpt_oss: attention rows sum to less than 1") as info:
        arch.require("normalized_rows", hint="pass off_row_sink='as_key'")
    assert "\n" not in str(info.value) and str(info.value).endswith("off_row_sink='as_key'")
    arch.require("attention_rows")  # every gpt-oss layer has rows
    with pytest.raises(IntervError, match=r"^qwen3_next: layer 0 is linear_attention"):
        architecture_of(family("qwen3_next").bridge).require("attention_rows")
    with pytest.raises(IntervError, match="unknown feature 'rows'"):
        arch.require("rows")


def test_a_family_without_attention_rows_is_refused_before_any_work():
    torch.manual_seed(0)
    config = MambaConfig(vocab_size=64, hidden_size=16, num_hidden_layers=1, state_size=4)
    directory = save_model(MambaForCausalLM(config), "mamba")
    bridge = TransformerBridge.boot_transformers(str(directory), device="cpu")
    with pytest.raises(IntervError, match=r"^mamba: a state-space model \(no attention\)"):
        architecture_of(bridge)


def test_zoo_models_are_causal_with_no_window():
    from interv.zoo import load

    arch = architecture_of(load("induction-2l"))
    assert arch.family == "native" and not arch.encoder and not arch.windowed
    assert arch.mask_rule == "causal AND padding"
    assert all(layer.positional == "learned" for layer in arch.layers)


@pytest.mark.real_model
def test_smollm2_and_minilm_profiles(smollm2_bridge, minilm_bridge):
    smol = architecture_of(smollm2_bridge)
    assert (smol.family, smol.mask_rule, smol.n_layers) == ("llama", "causal AND padding", 30)
    assert all(layer.positional == "rotary" and layer.scale == 64**-0.5 for layer in smol.layers)
    mini = architecture_of(minilm_bridge)
    assert (mini.family, mini.encoder, mini.mask_rule) == ("bert", True, "bidirectional: padding")


# ----------------------------------------------------------------------------- key rules


def _brute_force(rule: KeyRule, real: torch.Tensor) -> torch.Tensor:
    batch, n = real.shape
    out = torch.zeros(batch, n, n, dtype=torch.bool)
    for b in range(batch):
        first = int(real[b].nonzero()[0])
        for t in range(n):
            for j in range(n):
                ok = bool(real[b, j]) and (not rule.causal or j <= t)
                if rule.window is not None:
                    ok = ok and t - j < rule.window
                if rule.chunk is not None:
                    ok = ok and (j - first) // rule.chunk == (t - first) // rule.chunk
                out[b, t, j] = ok
    return out


@pytest.mark.parametrize(
    "rule",
    [KeyRule(), KeyRule(causal=False), KeyRule(window=1), KeyRule(window=3), KeyRule(chunk=3)],
    ids=lambda rule: rule.describe(),
)
def test_key_rule_matches_its_definition_for_any_query_subset(rule):
    real = torch.ones(3, 9, dtype=torch.bool)
    real[1, :3] = False  # left padding
    real[2, 6:] = False  # right padding
    full = _brute_force(rule, real)
    assert torch.equal(rule.admitted(real), full)
    assert torch.equal(rule.admitted(real, slice(4, 7)), full[:, 4:7])
    picked = torch.tensor([[0, 8], [3, 5], [2, 2]])
    assert torch.equal(
        rule.admitted(real, picked), full.gather(1, picked[..., None].expand(-1, -1, 9))
    )


def test_key_rule_of_a_chunk_of_long_queries_builds_only_that_chunk():
    real = torch.ones(1, 32768, dtype=torch.bool)
    rows = KeyRule(window=4096).admitted(real, slice(30000, 30008))
    assert rows.shape == (1, 8, 32768)
    assert rows.sum(-1).tolist() == [[4096] * 8]


def test_bad_key_rules_are_refused():
    with pytest.raises(IntervError, match="window must be a positive int"):
        KeyRule(window=0)
    with pytest.raises(IntervError, match="bidirectional rule with a window"):
        KeyRule(causal=False, window=4)
    with pytest.raises(IntervError, match=r"real must be a \[batch, key\] bool"):
        KeyRule().admitted(torch.ones(4))


def test_check_admitted_names_layer_head_query_and_key():
    rule = KeyRule(window=2)
    real = torch.ones(1, 4, dtype=torch.bool)
    pattern = torch.tril(torch.ones(4, 4)) / torch.arange(1, 5)[:, None]  # causal uniform
    pattern = pattern.expand(1, 3, 4, 4)
    with pytest.raises(IntervError, match=r"layer 5 head 0 \(prompt 0, query position 2\)"):
        check_admitted(pattern, rule.admitted(real), layer=5)
    check_admitted(pattern, KeyRule().admitted(real), layer=5)


def test_layer_attention_is_a_frozen_value():
    layer = LayerAttention(keys=KeyRule(), positional="rotary", scale=0.125)
    with pytest.raises(AttributeError):
        layer.scale = 1.0  # type: ignore[misc]


def test_gpt_oss_off_row_sink_as_a_key_keeps_the_grouping_identity():
    fam = family("gpt_oss")
    heads = concentration(fam.bridge, fam.tokens, attention_mask=fam.real, off_row_sink="as_key")
    attentions, masks = reference_rows(fam)
    a = torch.stack(attentions, dim=1).double()  # [b, layer, head, q, k]
    own = torch.stack(masks, dim=1)[:, :, None]
    a = torch.where(own, a, 0.0)
    deficit = 1 - a.sum(-1)
    assert float(deficit[fam.real[:, None, None, :].expand_as(deficit)].min()) > 0.01
    s = heads.sink_mass
    in_sink = torch.stack([a[..., 0] * own[..., 0], deficit], dim=-1)  # key 0 and the sink
    p = in_sink / s[..., None]
    inside = -torch.where(p > 0, p * p.log(), 0.0).sum(-1)
    binary = -(torch.special.xlogy(s, s) + torch.special.xlogy(1 - s, 1 - s))
    content = torch.where(heads.content_entropy.isnan(), 0.0, (1 - s) * heads.content_entropy)
    rebuilt = binary + s * inside + content
    real = fam.real[:, None, None, :].expand_as(s)
    torch.testing.assert_close(heads.entropy[real], rebuilt[real], atol=1e-6, rtol=0)
