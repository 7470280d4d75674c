"""The engine against transformer-lens's own patching helper on real models.

The zoo induction model (shipped with interv) and SmolLM2-135M (a real pretrained
model with grouped-query attention: 9 query heads on 3 key/value heads).
"""

from __future__ import annotations

import pytest
import torch
from transformer_lens import patching

from interv.engine.interventions import ActivationPatch, ValueScale
from interv.engine.runner import run
from interv.engine.sites import Site, hook_name
from interv.engine.stacking import forward_under
from interv.errors import IntervError
from interv.tasks.tokenized import TokenizedPairs


def tokens_task(clean: torch.Tensor, corrupted: torch.Tensor, target, foil, name: str):
    """Unpadded pairs scored at the last position."""
    batch, pos = clean.shape
    return TokenizedPairs(
        clean_tokens=clean,
        corrupted_tokens=corrupted,
        attention_mask=torch.ones(batch, pos, dtype=torch.bool),
        answer_positions=torch.full((batch,), pos - 1),
        target_ids=torch.as_tensor(target),
        foil_ids=torch.as_tensor(foil),
        name=name,
    )


def transformer_lens_head_patches(model, task: TokenizedPairs, layers: list[int]) -> torch.Tensor:
    """``get_act_patch_attn_head_out_all_pos`` cells of ``layers``, ``[len(layers), n_heads]``.

    The metric is the prompt-mean logit difference. The helper runs one forward per
    cell, so on large models only the cells of ``layers`` are asked for (its
    ``index_df`` argument).
    """
    import pandas as pd  # a dependency of transformer-lens

    rows = torch.arange(task.n_pairs)

    def mean_logit_diff(logits):
        at_answer = logits[rows, task.answer_positions]
        return (at_answer[rows, task.target_ids] - at_answer[rows, task.foil_ids]).mean()

    n_heads = model.cfg.n_heads
    cells = pd.DataFrame(
        [(layer, head) for layer in layers for head in range(n_heads)], columns=["layer", "head"]
    )
    with torch.no_grad():
        _, clean_cache = model.run_with_cache(task.clean_tokens)
        flat = patching.get_act_patch_attn_head_out_all_pos(
            model,
            task.corrupted_tokens,
            clean_cache,
            mean_logit_diff,
            index_axis_names=None,
            index_df=cells,
        )
    return flat.reshape(len(layers), n_heads)


def engine_head_patches(model, task: TokenizedPairs, layers: list[int]) -> torch.Tensor:
    """The same cells through :func:`interv.engine.runner.run`, ``[len(layers), n_heads]``."""
    n_heads = model.cfg.n_heads
    grid = [ActivationPatch("z", layer, head) for layer in layers for head in range(n_heads)]
    result = run(model, task, grid, "logit_diff", max_batch_size=64)
    return result.mean().reshape(len(layers), n_heads)


def max_difference_to_transformer_lens(model, task: TokenizedPairs, layers: list[int]) -> float:
    ours = engine_head_patches(model, task, layers)
    theirs = transformer_lens_head_patches(model, task, layers)
    return float((ours - theirs).abs().max())


def test_head_denoising_matches_transformer_lens_on_the_zoo_induction_model():
    from interv import zoo

    try:
        zoo.card("induction-2l")
    except IntervError as error:  # the zoo model is trained and shipped separately
        pytest.skip(f"zoo model not shipped yet: {error}")
    model = zoo.load("induction-2l").eval()
    generator = torch.Generator().manual_seed(0)
    d_vocab = model.cfg.d_vocab
    half = torch.randint(1, d_vocab, (6, 7), generator=generator)
    clean = torch.cat([half, half], dim=1)[:, :-1]  # repeated: next token is half[:, 6]
    corrupted = clean.clone()
    corrupted[:, :7] = torch.randint(1, d_vocab, (6, 7), generator=generator)
    task = tokens_task(clean, corrupted, half[:, 6], half[:, 5], "repeated random tokens")
    layers = list(range(model.cfg.n_layers))
    assert max_difference_to_transformer_lens(model, task, layers) <= 1e-4


# (clean prompt, corrupted prompt with the subject swapped, target, foil)
IOI = [
    (
        "When Mary and John went to the store, John gave a drink to",
        "When Mary and John went to the store, Mary gave a drink to",
        " Mary",
        " John",
    ),
    (
        "When Tom and Anna went to the park, Anna gave a ball to",
        "When Tom and Anna went to the park, Tom gave a ball to",
        " Tom",
        " Anna",
    ),
]


def ioi_task(model) -> TokenizedPairs:
    clean, corrupted, target, foil = zip(*IOI, strict=True)
    return tokens_task(
        model.to_tokens(list(clean)),
        model.to_tokens(list(corrupted)),
        [model.to_single_token(t) for t in target],
        [model.to_single_token(f) for f in foil],
        "ioi (2 prompts)",
    )


@pytest.mark.real_model
@pytest.mark.slow
def test_head_denoising_matches_transformer_lens_on_smollm2(smollm2_bridge):
    task = ioi_task(smollm2_bridge)
    assert task.clean_tokens.shape == task.corrupted_tokens.shape
    layers = [0, 9, 19, 29]  # first, middle and last blocks (the helper is one forward per cell)
    assert max_difference_to_transformer_lens(smollm2_bridge, task, layers) <= 1e-4


@pytest.mark.real_model
def test_sink_value_edit_on_smollm2_leaves_the_other_heads_of_its_group_untouched(
    smollm2_bridge,
):
    model = smollm2_bridge
    task = ioi_task(model)
    layer, head = 5, 4  # query heads 3, 4, 5 share key/value head 1
    name = hook_name("z", layer)
    edit = ValueScale(layer, head, key_positions=(0,), factor=0.0)
    with torch.no_grad():
        _, cache = model.run_with_cache(
            task.clean_tokens, attention_mask=task.attention_mask, names_filter=[name]
        )
    z = forward_under(model, task, edit, capture=[Site("z", layer)]).captured[Site("z", layer)]
    others = [h for h in range(model.cfg.n_heads) if h != head]
    torch.testing.assert_close(z[:, :, others], cache[name][:, :, others], atol=0, rtol=0)
    assert (z[:, :, head] - cache[name][:, :, head]).abs().max() > 1e-4
