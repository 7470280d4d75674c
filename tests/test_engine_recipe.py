"""The attention recipe (interv.engine.architecture.AttentionRecipe): what each layer's recipe
reads off the bridge and Hugging Face's module, and its logits and rows against a plain-torch
softmax with the sink column and the bias written out."""

from __future__ import annotations

import math

import pytest
import torch
from _families import family

from interv.engine.architecture import (
    AttentionRecipe,
    KeyRule,
    LayerAttention,
    recipe_of,
)
from interv.errors import IntervError


@pytest.mark.parametrize(
    ("name", "handover", "feeds", "alibi", "sink", "rotation"),
    [
        ("bloom", "reconstruct", True, True, False, None),
        ("gpt_oss", "handoff", True, False, True, "half"),
        ("gpt_neo", "interface", False, False, False, None),
    ],
)
def test_the_recipe_reads_what_the_layer_computes(name, handover, feeds, alibi, sink, rotation):
    model = family(name).bridge
    recipe = recipe_of(model, 0)
    assert (recipe.handover, recipe.pattern_feeds_output) == (handover, feeds)
    assert (recipe.alibi, recipe.sinks is not None, recipe.rotation) == (alibi, sink, rotation)
    if sink:  # the module's own parameter, so a weight edit reaches the recipe
        assert recipe.sinks is model.blocks[0].attn.original_component.sinks
        assert recipe.scores_hooked
    reason = {"bloom": "alibi position scheme", "gpt_oss": "off-row sink", "gpt_neo": "hooked only"}
    assert reason[name] in recipe.qk_fix_refusal()
    with pytest.raises(IntervError, match=r"layer must be in 0\.\.\d+; got 5"):
        recipe_of(model, 5)


def test_logits_and_rows_equal_the_softmax_with_the_sink_and_bias_written_out():
    torch.manual_seed(0)
    attention = LayerAttention(keys=KeyRule(window=3), positional="rotary", scale=0.5, softcap=4.0)
    sinks = torch.tensor([0.5, -1.0])
    recipe = AttentionRecipe(0, "test", attention, "handoff", True, sinks=sinks)
    q, k = torch.randn(1, 2, 5, 4).double(), torch.randn(1, 2, 5, 4).double()
    bias = torch.randn(1, 2, 1, 5).double()
    real = torch.tensor([[True, True, True, True, False]])
    admitted = recipe.admitted(real, kept=torch.ones(1, 5, 5, dtype=torch.bool))[:, None]
    rows = recipe.rows(recipe.logits(q, k, admitted, bias))
    for h in range(2):
        for t in range(5):
            keys = [j for j in range(5) if real[0, j] and t - 3 < j <= t]
            raw = [float(q[0, h, t] @ k[0, h, j]) * 0.5 + float(bias[0, h, 0, j]) for j in keys]
            capped = [4.0 * math.tanh(s / 4.0) for s in raw]
            total = sum(math.exp(s) for s in capped) + math.exp(float(sinks[h]))
            expected = torch.zeros(5, dtype=torch.float64)
            for j, s in zip(keys, capped, strict=True):
                expected[j] = math.exp(s) / total
            torch.testing.assert_close(rows[0, h, t], expected)


@pytest.mark.parametrize("softcap", [None, 4.0])
def test_the_change_of_logits_is_the_difference_of_finished_logits(softcap):
    """``change_of_logits(p, c)`` equals ``finish(p + c) - finish(p)`` (float64), and for tiny
    changes keeps its precision in float32 where the difference itself cancels: ``c (1 - T^2)``
    to first order under a soft cap."""
    attention = LayerAttention(keys=KeyRule(), positional="none", scale=1.0, softcap=softcap)
    recipe = AttentionRecipe(0, "test", attention, "handoff", True)
    torch.manual_seed(1)
    products = torch.randn(2, 3, 5, 5, dtype=torch.float64) * 6
    change = torch.randn(2, 3, 5, 5, dtype=torch.float64)
    want = recipe.finish(products + change) - recipe.finish(products)
    torch.testing.assert_close(recipe.change_of_logits(products, change), want)
    tiny = change * 1e-6
    slope = 1.0 if softcap is None else 1 - torch.tanh(products / softcap) ** 2
    got = recipe.change_of_logits(products, tiny.float()).double()
    torch.testing.assert_close(got, tiny * slope, rtol=1e-5, atol=0)
