"""The family matrix, continued: mask edits and head rankings against plain Hugging Face.

Columns of docs/architectures.md owned here (tests/_families.py):

- ``window edits``: ``WindowAttention`` and ``KeyKnockout`` composed with each layer's own
  mask equal the Hugging Face model run with that mask AND its own in every edited layer
  (forward pre-hooks replace each attention module's ``attention_mask`` argument), right-
  and left-padded, and ``text_loss`` under a window equals the loss of that masked model;
- ``head rankings``: the entropy, content-entropy and sink-mass orders of ``rank_heads``
  sort the heads by the numbers computed from Hugging Face's own rows and masks.

References use Hugging Face only (eager attention, hooks, plain torch): no interv code.
"""

from __future__ import annotations

import inspect
import itertools

import pytest
import torch
from _families import (
    Family,
    _attention_modules,
    _mask_kwarg,
    cells,
    column,
    family,
    record,
    reference_concentration,
    reference_rows,
)

import interv
from interv.analysis import text_loss
from interv.analysis.pruning import TextEvaluation, pruning_curves, rank_heads
from interv.engine.architecture import architecture_of
from interv.engine.masks import KeyKnockout, WindowAttention
from interv.engine.stacking import forward_under
from interv.errors import IntervError
from interv.tasks.tokenized import TokenizedPairs

# ----------------------------------------------------------------------------- references


def kept_keys(edit: WindowAttention | KeyKnockout, real: torch.Tensor) -> torch.Tensor:
    """``[batch, query, key]`` bool: the keys the edit alone keeps, from its definition
    (positions counted from each prompt's first real token)."""
    n = real.shape[1]
    first = real.long().argmax(dim=1)[:, None, None]
    query = torch.arange(n)[None, :, None]
    key = torch.arange(n)[None, None, :]
    if isinstance(edit, WindowAttention):
        recent = (key <= query) & (key > query - edit.window)
        keep = recent | ((key - first < edit.sink_tokens) & (key <= query))
    else:
        hidden = torch.zeros(real.shape[0], 1, n, dtype=torch.bool)
        for position in edit.key_positions:
            hidden |= key - first == position
        keep = ~hidden | (query == key)
    return keep & real[:, None, :]


def masked_logits(
    fam: Family, tokens: torch.Tensor, real: torch.Tensor, edit: WindowAttention | KeyKnockout
) -> torch.Tensor:
    """Hugging Face's logits with each edited layer's own mask AND the edit's kept keys."""
    keep = kept_keys(edit, real)[:, None]  # [batch, 1, query, key]
    n_layers = fam.bridge.cfg.n_layers
    layers = range(n_layers) if edit.layers is None else edit.layers
    handles = []
    for layer, module in _attention_modules(fam.hf):
        if layer not in layers:
            continue

        def narrow(module, args, kwargs):
            own = _mask_kwarg(args, kwargs)
            if own.dtype == torch.bool:
                mask = own & keep
            else:
                mask = torch.where(keep, own, torch.finfo(own.dtype).min)
            if "attention_mask" in kwargs:
                return args, {**kwargs, "attention_mask": mask}
            return (args[0], mask, *args[2:]), kwargs

        handles.append(module.register_forward_pre_hook(narrow, with_kwargs=True))
    inputs = {"input_ids": tokens, "attention_mask": real.long()}
    if "position_ids" in inspect.signature(fam.hf.forward).parameters:
        # positions counted from each prompt's first real token, as interv runs prompts
        inputs["position_ids"] = (real.long().cumsum(dim=1) - 1).clamp(min=0)
    try:
        with torch.no_grad():
            return fam.hf(**inputs).logits.float()
    finally:
        for handle in handles:
            handle.remove()


def next_token_loss(logits: torch.Tensor, tokens: torch.Tensor) -> torch.Tensor:
    losses = torch.nn.functional.cross_entropy(
        logits[:, :-1].flatten(0, 1), tokens[:, 1:].flatten(), reduction="none"
    )
    return losses.reshape(tokens.shape[0], -1).double().mean(dim=-1)


def pairs_of(tokens: torch.Tensor, real: torch.Tensor) -> TokenizedPairs:
    """The prompts as a task (clean = corrupted; answers at each prompt's last real token);
    a failure here is the test's, never a refusal of the family."""
    last = tokens.shape[1] - 1 - real.flip(1).long().argmax(dim=1)
    try:
        return TokenizedPairs(
            clean_tokens=tokens,
            corrupted_tokens=tokens,
            attention_mask=real,
            answer_positions=last,
            target_ids=torch.zeros(tokens.shape[0], dtype=torch.int64),
            padding_side="right" if bool(real[:, 0].all()) else "left",
        )
    except IntervError as error:
        raise AssertionError(f"the test built a bad task: {error}") from error


# ----------------------------------------------------------------------------- columns

EDITS = (
    WindowAttention(8),  # longer than the models' 4-key windows: changes only full layers
    WindowAttention(3, sink_tokens=1),
    KeyKnockout((2,)),
)


@column(
    "window edits",
    "WindowAttention / KeyKnockout composed with each layer's own mask: logits equal Hugging "
    "Face run with that mask AND its own at the edited layers (right- and left-padded)",
)
def mask_edits_equal_the_model_with_that_mask(fam: Family) -> None:
    model = fam.bridge
    bound = [edit.for_model(model) for edit in EDITS]  # refuses here, before any forward
    moved = 0.0
    for tokens, real in ((fam.tokens, fam.real), fam.left_padded()):
        task = pairs_of(tokens, real)
        clean = masked_logits(fam, tokens, real, WindowAttention(64))
        for edit in bound:
            edit.check(model.cfg, tokens.shape[1])
            with torch.no_grad():
                mine = forward_under(model, task, edit).readout.float()
            expected = masked_logits(fam, tokens, real, edit)
            at_real = real[:, :, None]
            assert torch.allclose(mine * at_real, expected * at_real, atol=1e-4), (
                f"{edit.describe()}: {float(((mine - expected) * at_real).abs().max()):.3g}"
            )
            moved = max(moved, float(((expected - clean) * at_real).abs().max()))
    assert moved > 1e-3, "no edit changed the logits: the check could not fail"


_ORDERED = {"entropy": False, "content_entropy": False, "sink_mass": True}  # descending?


@column(
    "head rankings",
    "rank_heads' entropy, content-entropy and sink-mass orders sort the heads by the numbers "
    "of Hugging Face's own rows and masks",
)
def concentration_rankings_sort_the_models_own_numbers(fam: Family) -> None:
    tokens = fam.tokens
    real = torch.ones_like(fam.real)  # text chunks: every token real
    orders = rank_heads(fam.bridge, TextEvaluation(tokens=tokens), rankings=list(_ORDERED))
    attentions, masks = reference_rows(fam, tokens, real)
    numbers = reference_concentration(attentions, masks, real)
    layers = [i for i, rows in enumerate(attentions) if rows is not None]
    for name, descending in _ORDERED.items():
        per_head = numbers[name].nanmean(dim=-1).nanmean(dim=0)  # [attention layer, head]
        scores = [float(per_head[layers.index(layer), head]) for layer, head in orders[name]]
        finite = [s for s in scores if s == s]
        assert all(s != s for s in scores[len(finite) :]), f"{name}: NaN scores go last"
        steps = [b - a for a, b in itertools.pairwise(finite)]
        if descending:
            steps = [-step for step in steps]
        assert min(steps, default=0.0) > -1e-6, f"{name}: the order does not sort the scores"


@pytest.mark.parametrize(("name", "col"), cells("window edits", "head rankings"))
def test_family_matrix(name, col):
    record(name, col)


# windowed families whose logits are unembed(ln_final(x)) (text_loss reads those)
@pytest.mark.parametrize("name", ["mistral", "gemma3", "gpt_oss"])
def test_text_loss_under_a_window_equals_the_model_with_that_mask_and_its_own(name):
    fam = family(name)
    tokens = fam.tokens[:1]  # one unpadded 13-token chunk: longer than the 4-key window
    edits = [WindowAttention(8), WindowAttention(3, sink_tokens=1), KeyKnockout((2,))]
    loss = text_loss(fam.bridge, tokens, edits)
    real = fam.real[:1]
    clean = next_token_loss(masked_logits(fam, tokens, real, WindowAttention(64)), tokens)
    assert torch.allclose(loss.clean, clean, atol=1e-5)
    for edit, values, sentence in zip(edits, loss.values, loss.descriptions, strict=True):
        expected = next_token_loss(masked_logits(fam, tokens, real, edit), tokens)
        assert torch.allclose(values, expected, atol=1e-5), sentence
        assert "within the model's own sliding window 4 at layer" in sentence
    assert abs(float(loss.values[1, 0] - loss.clean[0])) > 1e-3  # the edits change the loss


def test_run_composes_the_window_with_the_models_own_and_says_so():
    fam = family("gemma2")  # sliding window 4 at layers 0, 2; full attention at 1, 3
    task = pairs_of(fam.tokens, fam.real)
    edits = [WindowAttention(8), WindowAttention(8, layers=(0, 2)), KeyKnockout((2,))]
    result = interv.run(fam.bridge, task, edits, metric="log_prob")
    assert result.descriptions[0].startswith(
        "every head of every layer attends to its 8 most recent tokens (itself included) "
        "only, within the model's own sliding window 4 at layers 0, 2, each query row "
        "renormalized over those keys"
    )
    assert "within the model's own sliding window 4 at layers 0, 2," in result.descriptions[2]
    # a window wider than the model's own re-admits nothing: on its windowed layers alone
    # the edit is the identity
    assert torch.allclose(result.values[1], result.clean, atol=1e-5)
    assert not torch.allclose(result.values[0], result.clean, atol=1e-3)
    # the value the user passed is unchanged: its sentence knows no model
    assert "within" not in edits[0].describe()
    both = interv.Combined((WindowAttention(8, layers=(0,)), KeyKnockout((2,), layers=(1,))))
    sentence = both.for_model(fam.bridge).describe()
    assert "within the model's own sliding window 4 at layer 0," in sentence


def test_the_sentence_names_chunks_and_a_learned_sink():
    from interv.engine.masks import _own_masks_phrase

    chunked = architecture_of(family("llama4").bridge)  # chunks of 4 at layers 0-2
    assert _own_masks_phrase(chunked, (0, 1, 2, 3)) == (
        ", within the model's own chunks of 4 at layers 0, 1, 2",
        "",
    )
    sink = WindowAttention(3, layers=(1,)).for_model(family("gpt_oss").bridge).describe()
    assert "over those keys and the model's learned sink logit (layer 1)" in sink


def test_a_hybrids_gated_layer_is_edited_exactly_and_its_linear_layer_refused():
    fam = family("qwen3_next")  # layer 0 linear attention, layer 1 gated heads
    model = fam.bridge
    for edit in (WindowAttention(3, sink_tokens=1, layers=(1,)), KeyKnockout((2,), layers=(1,))):
        bound = edit.for_model(model)
        bound.check(model.cfg, fam.tokens.shape[1])
        with torch.no_grad():
            mine = forward_under(model, pairs_of(fam.tokens, fam.real), bound).readout
        expected = masked_logits(fam, fam.tokens, fam.real, edit)
        at_real = fam.real[:, :, None]
        assert torch.allclose(mine * at_real, expected * at_real, atol=1e-4), bound.describe()
        clean = masked_logits(fam, fam.tokens, fam.real, WindowAttention(64))
        assert not torch.allclose(expected * at_real, clean * at_real, atol=1e-4)
    with pytest.raises(
        IntervError, match=r"^qwen3_next: layer 0 is linear_attention.*can edit layer 1$"
    ):
        KeyKnockout((1,), layers=(0,)).for_model(model)
    with pytest.raises(IntervError, match=r"layer 7 is out of range"):
        WindowAttention(4, layers=(7,)).for_model(model)
    with pytest.raises(IntervError, match=r"apply WindowAttention.for_model\(model\) first"):
        unbound = WindowAttention(3, layers=(1,))
        forward_under(model, pairs_of(fam.tokens, fam.real), unbound)


def test_concentration_rankings_name_the_mask_rule_in_the_curves():
    fam = family("mistral")
    curves = pruning_curves(
        fam.bridge, TextEvaluation(tokens=fam.tokens), orders=["entropy", "random"], max_heads=2
    )
    assert curves.rules["entropy"].endswith(
        "over the keys each layer admits: causal AND padding AND sliding window 4"
    )
    assert curves.rules["random"] == "uniformly random order (seeded)"
