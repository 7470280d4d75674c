"""Attention without the pattern (interv.engine.rows): rows, row numbers, the forward's choice
of path, refusals, and a model left exactly as it was.

References: each family's own pattern and outputs (``attention="pattern"``, the bridge's eager
attention) and :meth:`KeyRule.admitted`; hand sums in float64 for the row numbers.
"""

from __future__ import annotations

import pytest
import torch
from _families import build, family
from hypothesis import given
from hypothesis import strategies as st

import interv.engine.forward as forward_module
import interv.engine.rows as rows_module
from interv.engine.architecture import KeyRule, architecture_of
from interv.engine.forward import AttentionPath, Gradient, Prompts, forward
from interv.engine.rows import (
    RowRequest,
    admits_keys,
    admitted_counts,
    pattern_free,
    rows_refusal,
    verify,
)
from interv.engine.sites import Site
from interv.errors import IntervError

# ----------------------------------------------------------------------------- key rules


@st.composite
def rules_and_masks(draw):
    causal = draw(st.booleans())
    window = draw(st.none() | st.integers(1, 6)) if causal else None
    chunk = draw(st.none() | st.integers(1, 5)) if causal else None
    n_pos = draw(st.integers(1, 12))
    real = torch.zeros(3, n_pos, dtype=torch.bool)
    for row in range(3):
        length = draw(st.integers(1, n_pos))
        first = draw(st.integers(0, n_pos - length))
        real[row, first : first + length] = True
    return KeyRule(causal=causal, window=window, chunk=chunk), real


@given(rules_and_masks(), st.lists(st.integers(-2, 14), min_size=0, max_size=3))
def test_admitted_counts_and_key_columns_equal_the_rules_mask(rule_and_real, keys):
    rule, real = rule_and_real
    mask = rule.admitted(real)  # [batch, query, key]
    assert torch.equal(admitted_counts(rule, real), mask.sum(dim=-1))
    at = torch.tensor([keys] * 3, dtype=torch.int64).reshape(3, len(keys))
    expected = torch.zeros(3, real.shape[1], len(keys), dtype=torch.bool)
    for i, key in enumerate(keys):
        if 0 <= key < real.shape[1]:
            expected[:, :, i] = mask[:, :, key]
    assert torch.equal(admits_keys(rule, real, at), expected)


# ----------------------------------------------------------------------------- rows


def _pattern(fam, tokens, real):
    layers = [i for i, layer in enumerate(architecture_of(fam.bridge).layers) if layer]
    sites = [Site("pattern", layer) for layer in layers]
    out = forward(fam.bridge, Prompts(tokens, real), capture=sites, readout=None)
    return {site.layer: out.captured[site] for site in sites}


@pytest.mark.parametrize("name", ["mistral", "llama4", "bert", "gemma2", "bloom"])
def test_rows_in_small_chunks_equal_the_models_own_pattern(name):
    fam = family(name)
    tokens, real = fam.left_padded()
    own = _pattern(fam, tokens, real)
    rebuilt = {layer: torch.zeros_like(pattern) for layer, pattern in own.items()}

    def keep(chunk):
        (start, stop), (low, high) = chunk.queries, chunk.keys
        rebuilt[chunk.layer][:, :, start:stop, low:high] = chunk.weights
        assert bool((chunk.weights * ~chunk.admitted[:, None]).eq(0).all())

    request = RowRequest(on_chunk=keep, chunk=3)
    forward(
        fam.bridge,
        Prompts(tokens, real),
        readout=None,
        attention=AttentionPath("rows", rows=request),
    )
    at_real = real[:, None, :, None]
    for layer, pattern in own.items():
        torch.testing.assert_close(
            rebuilt[layer] * at_real, pattern.float() * at_real, atol=1e-6, rtol=0
        )


def _hand_sums(weights, keys, columns):
    """Row numbers from float64 rows ``[b, h, q, k]`` by hand."""
    w = weights.double()
    plogp = torch.special.xlogy(w, w)
    requested = torch.zeros(w.shape[0], w.shape[-1], dtype=torch.bool)
    for b in range(w.shape[0]):
        for key in keys[b]:
            if key >= 0:
                requested[b, key] = True
    rest = ~requested[:, None, None, :]
    return {
        "entropy": -plogp.sum(-1),
        "rest": (w * rest).sum(-1),
        "rest_entropy": -(plogp * rest).sum(-1),
        "at_keys": torch.stack([w[b][..., keys[b].clamp(min=0)] for b in range(w.shape[0])])
        * (keys >= 0)[:, None, None, :],
        "weighted": torch.einsum("bhqk,bhkm->bhqm", w, columns.double()),
    }


@pytest.mark.parametrize("name", ["llama", "mistral", "gpt2"])
@pytest.mark.parametrize("exact", [False, True])
def test_row_numbers_equal_hand_sums_of_the_models_pattern(name, exact, monkeypatch):
    monkeypatch.setattr(rows_module, "_KEY_TILE", 4)  # the fused kernel in tiles of 4 keys
    fam = family(name)
    tokens, real = fam.left_padded()
    own = _pattern(fam, tokens, real)
    first = real.to(torch.int64).argmax(dim=1)
    keys = torch.stack([first, first + 2, torch.full_like(first, -1)], dim=1)
    n_heads = fam.bridge.cfg.n_heads
    found = {}

    def columns(layer, values):  # [b, t, kv, d] -> [b, h, t, 2]
        per_key = values.double().norm(dim=-1).mean(dim=-1)  # [b, t]
        position = torch.arange(values.shape[1]).double().expand_as(per_key)
        grid = torch.stack([per_key, position], dim=-1)
        return grid[:, None].expand(-1, n_heads, -1, -1).float()

    request = RowRequest(
        keys=keys,
        columns=columns,
        on_layer=lambda layer, stats: found.__setitem__(layer, stats),
        chunk=4,
        exact=exact,
    )
    sites = [Site("v", layer) for layer in own]
    captured = forward(
        fam.bridge,
        Prompts(tokens, real),
        capture=sites,
        readout=None,
        attention=AttentionPath("rows", rows=request),
    ).captured
    at_real = real[:, None, :]
    for layer, pattern in own.items():
        stats = found[layer]
        assert stats.path == ("chunks" if exact else "fused")
        v = captured[Site("v", layer)]
        expected = _hand_sums(pattern.float(), keys, columns(layer, v))
        for name_, value in expected.items():
            got = getattr(stats, name_)
            mask = at_real if got.ndim == 3 else at_real[..., None]
            torch.testing.assert_close(
                torch.where(mask, got, 0.0),
                torch.where(mask, value, 0.0),
                atol=2e-6,
                rtol=1e-6,
                msg=lambda m, n=name_: f"{n}: {m}",
            )
        torch.testing.assert_close(stats.mass, stats.rest + stats.at_keys.sum(-1))
        rule = architecture_of(fam.bridge).key_rule(layer)
        assert torch.equal(stats.n, rule.admitted(real).sum(-1))


# ----------------------------------------------------------------------------- the forward


def test_auto_runs_without_the_pattern_from_long_context_and_as_the_model_below(monkeypatch):
    fam = family("llama")
    prompts = Prompts(fam.tokens, fam.real)
    assert forward(fam.bridge, prompts, readout=None).attention == "pattern"
    monkeypatch.setattr(forward_module, "LONG_CONTEXT", 8)
    long = forward(fam.bridge, prompts)
    assert long.attention == "rows"
    own = forward(fam.bridge, prompts, attention=AttentionPath("pattern"))
    torch.testing.assert_close(long.readout[fam.real], own.readout[fam.real], atol=1e-5, rtol=0)
    # a hooked pattern needs the model's own attention: auto keeps it
    kept = forward(fam.bridge, prompts, capture=[Site("pattern", 0)], readout=None)
    assert kept.attention == "pattern"
    with pytest.raises(IntervError, match=r"pattern.*hooked or captured"):
        forward(
            fam.bridge,
            prompts,
            capture=[Site("pattern", 0)],
            readout=None,
            attention=AttentionPath("rows"),
        )


def test_auto_falls_back_to_the_pattern_for_a_refused_family(monkeypatch):
    fam = family("gpt_neo")
    monkeypatch.setattr(forward_module, "LONG_CONTEXT", 8)
    out = forward(fam.bridge, Prompts(fam.tokens, fam.real), readout=None)
    assert out.attention == "pattern"
    with pytest.raises(IntervError, match=r"^gpt_neo: layer 0's attention ran without") as error:
        forward(
            fam.bridge, Prompts(fam.tokens, fam.real), readout=None, attention=AttentionPath("rows")
        )
    assert "\n" not in str(error.value)


def test_a_pattern_above_the_limit_is_refused_naming_its_size(monkeypatch):
    fam = family("gpt_neo")
    monkeypatch.setattr(forward_module, "MAX_PATTERN_BYTES", 1000)
    with pytest.raises(IntervError, match=r"would hold .* GiB \(2 rows x 4 heads x 13\^2"):
        forward(fam.bridge, Prompts(fam.tokens, fam.real), readout=None)


def test_the_first_rows_are_checked_against_the_models_own(monkeypatch):
    fam = build("llama", tag="-verify")
    original = rows_module._Engine.attend

    def wrong_scale(self, call):
        recipe = call.recipe
        call.recipe = recipe.called_with(call.scale * 1.5, recipe.softcap, recipe.sinks)
        return original(self, call)

    monkeypatch.setattr(rows_module._Engine, "attend", wrong_scale)
    with pytest.raises(IntervError, match=r"^llama: layer 0's attention rows recomputed") as error:
        forward(
            fam.bridge, Prompts(fam.tokens, fam.real), readout=None, attention=AttentionPath("rows")
        )
    assert "\n" not in str(error.value)


@pytest.mark.parametrize("name", ["llama", "gpt2", "bert", "bloom"])
def test_a_pattern_free_forward_leaves_the_model_as_it_was(name):
    fam = family(name)
    model = fam.bridge
    config = model.original_model.config
    before = config._attn_implementation

    def modules():
        return [block.attn for block in model.blocks]

    def state():
        return [
            (
                sorted(key for key in vars(attn) if key in ("forward", "_reconstruct_attention")),
                sum(len(m._forward_hooks) for m in attn.modules()),
            )
            for attn in modules()
        ]

    forward(
        model, Prompts(fam.tokens, fam.real), attention=AttentionPath("pattern")
    )  # Hugging Face installs
    clean = state()  # its output-capturing hooks on a model's first forward

    def boom(activation, hook):
        raise RuntimeError("boom")

    prompts = Prompts(fam.tokens, fam.real)
    forward(model, prompts, attention=AttentionPath("rows"))
    with pytest.raises(RuntimeError, match="boom"):
        forward(model, prompts, hooks=[(Site("z", 0), boom)], attention=AttentionPath("rows"))
    assert state() == clean
    assert config._attn_implementation == before
    assert not rows_module._MODULE_LAYERS
    assert not rows_module._ENGINES


def test_head_ablation_and_value_edits_without_the_pattern_equal_the_pattern_path():
    fam = family("qwen2")  # grouped-query attention, a window on some layers
    prompts = Prompts(fam.tokens, fam.real)

    def zero_head(activation, hook):
        activation[:, :, 1] = 0
        return activation

    def scale_values(activation, hook):
        return activation * 0.5

    hooks = [(Site("z", 1), zero_head), (Site("v", 2), scale_values)]
    rows = forward(fam.bridge, prompts, hooks=hooks, attention=AttentionPath("rows"))
    own = forward(fam.bridge, prompts, hooks=hooks, attention=AttentionPath("pattern"))
    plain = forward(fam.bridge, prompts, attention=AttentionPath("pattern"))
    real = fam.real
    torch.testing.assert_close(rows.readout[real], own.readout[real], atol=1e-5, rtol=0)
    assert not torch.allclose(own.readout[real], plain.readout[real], atol=1e-3)


def test_refusals_name_the_family_in_one_line():
    assert rows_refusal(family("llama").bridge) is None
    reason = rows_refusal(family("qwen3_next").bridge)
    assert reason.startswith("qwen3_next: layer 0 is linear_attention")
    fam = family("qwen3_next")
    with (
        pytest.raises(IntervError, match=r"^qwen3_next: .*not available$"),
        pattern_free(fam.bridge, fam.real, RowRequest()),
    ):
        pass
    with pytest.raises(IntervError, match=r"^qwen3_next: "):
        verify(fam.bridge, fam.tokens, fam.real, run=lambda *a, **k: None)


def test_request_values_are_checked():
    with pytest.raises(IntervError, match="chunk must be a positive int"):
        RowRequest(chunk=0)
    with pytest.raises(IntervError, match=r"keys must be a \[batch, n_keys\] int tensor"):
        RowRequest(keys=torch.zeros(3))
    with pytest.raises(IntervError, match="attention must be one of"):
        forward(
            family("llama").bridge,
            Prompts.of(family("llama").tokens),
            attention=AttentionPath("flash"),
        )


@pytest.mark.parametrize("name", ["llama", "gemma2"])  # the fused path, the chunked path
def test_gradients_through_attention_without_the_pattern_equal_the_pattern_path(name):
    fam = family(name)
    prompts = Prompts(fam.tokens, fam.real)
    sites = [Site("z", 0), Site("resid_pre", 1)]

    def last_logit(logits):
        return logits[:, 8, 5]

    found = {
        attention: forward(
            fam.bridge,
            prompts,
            gradient=Gradient(sites, last_logit),
            attention=AttentionPath(attention),
        ).gradients
        for attention in ("rows", "pattern")
    }
    for site in sites:
        torch.testing.assert_close(
            found["rows"][site], found["pattern"][site], atol=1e-5, rtol=1e-4
        )


def test_a_head_sweep_at_long_context_runs_without_the_pattern(monkeypatch):
    import interv

    fam = family("mistral")  # grouped-query attention and a window
    task = interv.load_task("induction", n_pairs=4, seed=0).tokenize(fam.bridge)
    interventions = [
        interv.ZeroAblation(1, 0),
        interv.MeanAblation(3, 2, reference="clean"),
        interv.ActivationPatch("z", 2, 1, direction="denoise"),
    ]
    own = interv.run(fam.bridge, task, interventions)
    seen = []
    original = forward_module.forward

    def spy(*args, **kwargs):
        out = original(*args, **kwargs)
        seen.append(out.attention)
        return out

    monkeypatch.setattr(forward_module, "LONG_CONTEXT", 8)
    # the one-time check of the rows (it runs the model's own attention) before the spy
    forward(
        fam.bridge, Prompts(task.clean_tokens, task.attention_mask), attention=AttentionPath("rows")
    )
    monkeypatch.setattr(forward_module, "forward", spy)
    import interv.engine.stacking as stacking

    monkeypatch.setattr(stacking, "forward", spy)
    long = interv.run(fam.bridge, task, interventions)
    assert seen and set(seen) == {"rows"}
    torch.testing.assert_close(long.effect, own.effect, atol=1e-5, rtol=0)
