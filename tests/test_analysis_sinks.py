"""A whole model's sink rate and first-token norms, and the special inputs, on the zoo:
hand computations from captured activations, the inputs' construction, bad input."""

from __future__ import annotations

import pytest
import torch

import interv
from interv.analysis import random_tokens, repeated_tokens, sink_profile
from interv.engine.forward import Prompts, forward
from interv.engine.sites import Site
from interv.errors import IntervError


@pytest.fixture(scope="module")
def model():
    return interv.load_model("sink-lm-3l")


def captured(model, tokens, components):
    sites = [Site(c, layer) for layer in range(model.cfg.n_layers) for c in components]
    return forward(model, Prompts.of(tokens), capture=sites, readout=None).captured


def test_sink_profile_equals_a_hand_computation_from_captured_patterns_and_norms(model):
    tokens = interv.zoo.held_out_batch("sink-lm-3l", n_sequences=4).tokens[:, :32]
    profile = sink_profile(model, tokens, key=1, eps=0.25, inputs="held-out sequences")
    acts = captured(model, tokens, ("pattern", "k", "v"))
    n = tokens.shape[1]
    for layer in range(model.cfg.n_layers):
        pattern = acts[Site("pattern", layer)].double()  # [batch, head, query, key]
        by_hand = pattern[:, :, 1:, 1].sum(dim=-1) / (n - 1)  # queries 1..n-1 see key 1
        assert torch.allclose(profile.scores[:, layer], by_hand, atol=1e-6)
        for component, ratios in (("k", profile.key_norms), ("v", profile.value_norms)):
            norms = acts[Site(component, layer)].double().norm(dim=-1)  # [batch, pos, kv]
            others = torch.cat([norms[:, :1], norms[:, 2:]], dim=1).mean(dim=1)
            assert torch.allclose(ratios[:, layer], norms[:, 1] / others, atol=1e-9)
    above = (profile.scores > 0.25).double()
    assert profile.rate == pytest.approx(float(above.mean()))
    assert torch.allclose(profile.per_prompt, above.flatten(1).mean(dim=1))
    assert torch.allclose(profile.per_layer, above.mean(dim=(0, 2)))
    assert "key position 1" in profile.scope and "eps = 0.25" in profile.scope
    low, high = profile.rate_interval(n_bootstrap=200)
    assert low <= profile.rate <= high
    ratio_low, ratio_high = profile.norm_ratio_interval("key", n_bootstrap=200)
    assert bool((ratio_low <= profile.norm_ratio("key") + 1e-12).all())
    assert bool((profile.norm_ratio("key") <= ratio_high + 1e-12).all())


def test_left_and_right_padding_give_each_prompt_its_own_numbers(model):
    tokens = interv.zoo.held_out_batch("sink-lm-3l", n_sequences=2).tokens[:, :16]
    alone = [sink_profile(model, tokens[b : b + 1, : 12 + 4 * b]) for b in range(2)]
    padded = torch.zeros(2, 16, dtype=torch.int64)
    mask = torch.zeros(2, 16, dtype=torch.bool)
    padded[0, 4:] = tokens[0, :12]  # left padding
    mask[0, 4:] = True
    padded[1] = tokens[1]
    mask[1] = True
    together = sink_profile(model, padded, attention_mask=mask)
    for b in range(2):
        assert torch.allclose(together.scores[b], alone[b].scores[0], atol=1e-5)
        assert torch.allclose(together.value_norms[b], alone[b].value_norms[0], atol=1e-5)


def test_random_and_repeated_inputs_are_seeded_ordinary_tokens(model):
    special = set(model.tokenizer.all_special_ids)
    first = random_tokens(model, 8, 20, seed=3)
    assert first.shape == (8, 20) and first.dtype == torch.int64
    assert torch.equal(first, random_tokens(model, 8, 20, seed=3))
    assert not torch.equal(first, random_tokens(model, 8, 20, seed=4))
    assert bool((first[:, 0] == model.tokenizer.bos_token_id).all())
    assert not special & set(first[:, 1:].flatten().tolist())
    plain = random_tokens(model, 8, 20, seed=3, bos=False)
    assert not special & set(plain.flatten().tolist())
    same = repeated_tokens(model, 8, 20, seed=1)
    assert bool((same == same[:, :1]).all())  # one token per prompt, no BOS
    assert len(set(same[:, 0].tolist())) == 8  # different tokens for different prompts
    assert not special & set(same.flatten().tolist())
    with_bos = repeated_tokens(model, 8, 20, seed=1, bos=True)
    assert bool((with_bos[:, 0] == model.tokenizer.bos_token_id).all())
    assert torch.equal(with_bos[:, 1:], same[:, 1:])


def test_with_learned_positions_a_repeated_token_still_gives_positions_different_keys(model):
    tokens = repeated_tokens(model, 2, 12, seed=0)
    profile = sink_profile(model, tokens)
    assert not torch.allclose(profile.key_norms, torch.ones_like(profile.key_norms), atol=1e-3)


@pytest.mark.real_model
def test_with_rotary_positions_a_repeated_token_gives_every_position_the_same_state(
    smollm2_bridge,
):
    # Gu et al.'s proposition: identical tokens and relative (rotary) positions give every
    # position the same hidden state, so the same key and value norms (how little mass the
    # first token then gets is measured, not pinned: benchmarks/claims.py, part sinks_*)
    profile = sink_profile(smollm2_bridge, repeated_tokens(smollm2_bridge, 2, 16, seed=0))
    for ratios in (profile.key_norms, profile.value_norms):
        assert torch.allclose(ratios, torch.ones_like(ratios), atol=1e-3)


@pytest.mark.parametrize(
    ("call", "match"),
    [
        (lambda m, t: sink_profile(m, t, eps=1.0), r"eps must lie in \(0, 1\)"),
        (lambda m, t: sink_profile(m, t, eps=0), r"eps must lie in \(0, 1\)"),
        (lambda m, t: sink_profile(m, t, key=7), r"key position 7 is beyond the prompt.*0\.\.6"),
        (lambda m, t: sink_profile(m, t, key=-1), "key must be >= 0"),
        (lambda m, t: random_tokens(m, 0, 8), "n_prompts must be >= 1"),
        (lambda m, t: random_tokens(m, 2, 1), "length must be >= 2"),
        (lambda m, t: repeated_tokens(m, 2, 8, bos="yes"), "bos must be True or False"),
        (lambda m, t: sink_profile(m, t.float()), "tokens must be an int tensor"),
    ],
)
def test_bad_input_is_refused_with_what_is_allowed(model, call, match):
    tokens = interv.zoo.held_out_batch("sink-lm-3l", n_sequences=2).tokens[:, :8]
    with pytest.raises(IntervError, match=match):
        call(model, tokens)
