"""Token attention by weight and by norm, rollout of a model, and text loss under
interventions, on the zoo: hand loops over captured activations, bad input."""

from __future__ import annotations

import math

import pytest
import torch

import interv
from interv.analysis import TextEvaluation, text_loss, token_attention
from interv.engine.forward import Prompts, forward
from interv.engine.interventions import ZeroAblation
from interv.engine.masks import WindowAttention
from interv.engine.sites import Site
from interv.errors import IntervError
from interv.metrics import attention_rollout


@pytest.fixture(scope="module")
def model():
    return interv.load_model("sink-lm-3l")


def test_weights_and_norms_equal_a_hand_loop_over_heads(model):
    tokens = interv.zoo.held_out_batch("sink-lm-3l", n_sequences=2).tokens[:, :10]
    flow = token_attention(model, tokens)
    sites = [Site(c, layer) for layer in range(model.cfg.n_layers) for c in ("pattern", "v")]
    acts = forward(model, Prompts.of(tokens), capture=sites, readout=None).captured
    for layer in range(model.cfg.n_layers):
        pattern = acts[Site("pattern", layer)].double()  # [batch, head, query, key]
        values = acts[Site("v", layer)].double()  # [batch, key, head, d_head]
        w_out = model.blocks[layer].attn.W_O.detach().double()  # [head, d_head, d_model]
        assert torch.allclose(flow.weights[:, layer], pattern.mean(dim=1), atol=1e-7)
        for b, t, j in ((0, 9, 0), (1, 5, 3), (1, 9, 9)):
            vector = sum(
                pattern[b, h, t, j] * values[b, j, h] @ w_out[h] for h in range(model.cfg.n_heads)
            )
            assert flow.norms[b, layer, t, j].item() == pytest.approx(
                vector.norm().item(), rel=1e-5
            )
        assert float(flow.norms[:, layer].triu(1).abs().max()) == 0.0  # causal
    shares = flow.norm_shares()
    assert torch.allclose(shares.sum(dim=-1), torch.ones(2, 3, 10, dtype=torch.float64))
    assert torch.allclose(flow.rollout(), attention_rollout(flow.weights, key_mask=flow.key_mask))
    first = torch.zeros(2, 10, dtype=torch.bool)
    first[:, 0] = True
    weight_share, norm_share = flow.shares_on(first)
    assert torch.allclose(weight_share, flow.weights[..., 0].mean(dim=-1))
    assert torch.allclose(norm_share, shares[..., 0].mean(dim=-1))
    with pytest.raises(IntervError, match=r"keys must be a bool tensor of shape \(2, 10\)"):
        flow.shares_on(first[:, :5])


def test_text_loss_equals_the_cross_entropy_of_each_chunk_and_compares_pairs(model):
    tokens = interv.zoo.held_out_batch("sink-lm-3l", n_sequences=6).tokens[:, :24]
    edits = [WindowAttention(4), ZeroAblation(2, 1)]
    loss = text_loss(model, tokens, edits, first_position=5, max_batch_size=6)
    logits = forward(model, Prompts.of(tokens)).readout
    by_hand = torch.nn.functional.cross_entropy(
        logits[:, 5:-1].flatten(0, 1), tokens[:, 6:].flatten(), reduction="none"
    )
    assert torch.allclose(loss.clean, by_hand.reshape(6, -1).double().mean(dim=-1), atol=1e-6)
    assert loss.values.shape == (2, 6)
    assert loss.descriptions[1] == "L2H1 output (z) set to zero at all positions"
    assert loss.perplexity() == pytest.approx(math.exp(loss.mean()))
    mean, low, high = loss.difference(0, n_bootstrap=200)
    assert mean == pytest.approx(float((loss.values[0] - loss.clean).mean()))
    assert low <= mean <= high
    assert loss.interval(1, n_bootstrap=200)[0] <= loss.mean(1)
    assert "query positions 5..22 (18 per chunk, 108 in all)" in loss.scope
    text = TextEvaluation(tokens=tokens, source="six held-out sequences")
    assert text_loss(model, text, []).source == "six held-out sequences"


@pytest.mark.parametrize(
    ("call", "match"),
    [
        (
            lambda m, t: text_loss(m, t, [], first_position=23),
            "first_position 23 is beyond the prompt",
        ),
        (lambda m, t: text_loss(m, t.float(), []), r"\[n_chunks, chunk_len\] int token tensor"),
        (lambda m, t: text_loss(m, t, [interv.ActivationPatch("z", 0, 0)]), "a text has one run"),
        (
            lambda m, t: text_loss(m, t, [WindowAttention(2, layers=(5,))]),
            "layer 5 is out of range",
        ),
        (lambda m, t: text_loss(m, t, [], max_batch_size=0), "max_batch_size must be >= 1"),
        (lambda m, t: text_loss(m, t, [WindowAttention(4)]).mean(3), "index must be None"),
    ],
)
def test_text_loss_bad_input(model, call, match):
    tokens = interv.zoo.held_out_batch("sink-lm-3l", n_sequences=2).tokens[:, :24]
    with pytest.raises(IntervError, match=match):
        call(model, tokens)
