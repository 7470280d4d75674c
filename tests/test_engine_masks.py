"""Window and key-knockout attention masks as interventions: equal to the native model run
with the same mask before the softmax (plain torch, no hooks), on both zoo models, with
padding, with and without prefix reuse; sentences, registry and bad input."""

from __future__ import annotations

import pytest
import torch

import interv
from interv.engine.masks import KeyKnockout, WindowAttention
from interv.engine.registry import get_kind
from interv.errors import IntervError
from interv.zoo._load import load_weights, native_model
from interv.zoo._registry import FINAL_WEIGHTS_FILE, card, data_dir

ZOO = ("induction-2l", "sink-lm-3l")


@pytest.fixture(scope="module", params=ZOO)
def pair(request):
    """(bridge, the same weights in a plain native model) of one zoo model."""
    name = request.param
    reference = native_model(card(name).recipe.config)
    load_weights(reference, data_dir(name) / FINAL_WEIGHTS_FILE)
    return interv.load_model(name), reference.eval()


def allowed_keys(intervention, n: int) -> torch.Tensor:
    """``[query, key]`` bool: the keys a query keeps, written out from the definitions."""
    query = torch.arange(n)[:, None]
    key = torch.arange(n)[None, :]
    if isinstance(intervention, WindowAttention):
        recent = (key <= query) & (key > query - intervention.window)
        return recent | ((key < intervention.sink_tokens) & (key <= query))
    hidden = torch.zeros(n, dtype=torch.bool)
    hidden[list(intervention.key_positions)] = True
    return (~hidden)[None, :] | (query == key)


def masked_reference(reference, tokens, masks_by_layer):
    """Logits of the native model with ``masks_by_layer[layer]`` (``[query, key]`` bool, True =
    attend; None = the model's own mask) applied before the softmax of each layer."""
    n_batch, n = tokens.shape
    with torch.no_grad():
        hidden = reference.tok_embed(tokens) + reference.pos(torch.arange(n))[None]
        for layer, block in enumerate(reference.layers):
            allowed = masks_by_layer[layer]
            mask = None if allowed is None else (~allowed)[None, None].expand(n_batch, 1, n, n)
            (hidden,) = block(hidden, attention_mask=mask)
        return reference.head(reference.ln_out(hidden))


def loss_per_row(logits, tokens):
    losses = torch.nn.functional.cross_entropy(
        logits[:, :-1].flatten(0, 1), tokens[:, 1:].flatten(), reduction="none"
    )
    return losses.reshape(tokens.shape[0], -1).double().mean(dim=-1)


INTERVENTIONS = [
    WindowAttention(1),
    WindowAttention(6),
    WindowAttention(6, sink_tokens=2),
    WindowAttention(4, sink_tokens=1, layers=(1,)),
    KeyKnockout((0,)),
    KeyKnockout((2, 5), layers=(0,)),
]


def test_mask_edits_equal_the_native_model_with_that_mask(pair):
    model, reference = pair
    tokens = interv.zoo.held_out_batch(model.cfg.model_name.split("/")[-1], n_sequences=3).tokens
    tokens = tokens[:, :24]
    n = tokens.shape[1]
    result = interv.analysis.text_loss(model, tokens, INTERVENTIONS)
    assert torch.allclose(result.clean, loss_per_row(reference(tokens), tokens), atol=1e-5)
    for intervention, values in zip(INTERVENTIONS, result.values, strict=True):
        layers = range(model.cfg.n_layers) if intervention.layers is None else intervention.layers
        masks = [
            allowed_keys(intervention, n) if layer in layers else None
            for layer in range(model.cfg.n_layers)
        ]
        expected = loss_per_row(masked_reference(reference, tokens, masks), tokens)
        assert torch.allclose(values, expected, atol=1e-5), intervention.describe()
        assert not torch.allclose(values, result.clean, atol=1e-4), intervention.describe()


def test_on_a_padded_task_with_and_without_prefix_reuse_the_logits_agree():
    model = interv.load_model("induction-2l")
    task = interv.load_task("induction", n_pairs=6, seed=1).tokenize(model)
    edits = [WindowAttention(3, sink_tokens=1), KeyKnockout((1,)), WindowAttention(64)]
    fast = interv.run(model, task, edits, metric="logit_diff")
    slow = interv.run(model, task, edits, metric="logit_diff", reuse_prefix=False)
    assert torch.allclose(fast.values, slow.values, atol=1e-4)
    # a window longer than every prompt changes nothing
    assert torch.allclose(fast.values[2], fast.clean, atol=1e-4)
    assert fast.sites == (None, None, None)


def test_the_sentences_state_the_mask_and_the_renormalization():
    assert WindowAttention(32).describe() == (
        "every head of every layer attends to its 32 most recent tokens (itself included) "
        "only, each query row renormalized over those keys (the attention mask changed "
        "before the softmax; position ids unchanged)"
    )
    assert "and to the first 4 tokens" in WindowAttention(32, sink_tokens=4).describe()
    assert "its 1 most recent token (itself included) and to the first token" in (
        WindowAttention(1, sink_tokens=1).describe()
    )
    assert WindowAttention(8, layers=[3, 1]).describe().startswith("every head of layers [1, 3]")
    assert (
        KeyKnockout([0])
        .describe()
        .startswith(
            "key position 0 hidden from every query but its own in every head of every layer"
        )
    )
    assert get_kind("window_attention").cls is WindowAttention
    assert get_kind("key_knockout").cls is KeyKnockout
    assert interv.WindowAttention is WindowAttention and interv.KeyKnockout is KeyKnockout


@pytest.mark.parametrize(
    ("build", "match"),
    [
        (lambda: WindowAttention(0), "window must be >= 1; got 0"),
        (lambda: WindowAttention(-3), "window must be >= 1"),
        (lambda: WindowAttention(2.5), "window must be an integer"),
        (lambda: WindowAttention(4, sink_tokens=-1), "sink_tokens must be >= 0"),
        (lambda: WindowAttention(4, layers=()), "layers must name at least one position"),
        (lambda: WindowAttention(4, layers=(0, 0)), "must not repeat"),
        (lambda: KeyKnockout(()), "key_positions must name at least one position"),
        (lambda: KeyKnockout((-1,)), "key_positions must be >= 0"),
    ],
)
def test_bad_values_are_refused_when_built(build, match):
    with pytest.raises(IntervError, match=match):
        build()


def test_values_that_do_not_fit_the_model_or_prompts_are_refused_before_any_forward():
    model = interv.load_model("induction-2l")
    task = interv.load_task("induction", n_pairs=4, seed=0).tokenize(model)
    with pytest.raises(IntervError, match="layer 2 is out of range; the model has 2 layers"):
        interv.run(model, task, [WindowAttention(4, layers=(2,))])
    with pytest.raises(IntervError, match=r"key position \d+ is beyond the prompt"):
        interv.run(model, task, [KeyKnockout((task.n_positions,))])
    with pytest.raises(IntervError, match="needs the model's number of layers"):
        WindowAttention(4).edits()


@pytest.mark.real_model
def test_on_smollm2_the_window_equals_hugging_face_s_4d_mask(smollm2_bridge):
    model = smollm2_bridge
    tokens = model.to_tokens(
        "The river bends twice before it reaches the old stone bridge by the mill."
    )
    n = tokens.shape[1]
    edit = WindowAttention(5, sink_tokens=1)
    allowed = allowed_keys(edit, n)
    additive = torch.zeros(1, 1, n, n).masked_fill(~allowed, float("-inf"))
    with torch.no_grad():
        expected = model.original_model(tokens, attention_mask=additive).logits
    got = interv.analysis.text_loss(model, tokens, [edit]).values[0]
    assert got.item() == pytest.approx(loss_per_row(expected, tokens).item(), abs=1e-4)
