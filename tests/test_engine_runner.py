"""The runner on small random native models: hand recomputations, identities, hygiene."""

from __future__ import annotations

import pytest
import torch
from transformer_lens import patching
from transformer_lens.config import TransformerBridgeConfig
from transformer_lens.model_bridge import TransformerBridge

from interv.engine import interventions as engine_interventions
from interv.engine.interventions import (
    PATCH_COMPONENTS,
    ActivationPatch,
    AttentionKnockout,
    Combined,
    MeanAblation,
    PatternPatch,
    ReferenceSet,
    ResampleAblation,
    ValuePatch,
    ValueReplace,
    ValueScale,
    ZeroAblation,
)
from interv.engine.runner import run
from interv.engine.sites import Site, hook_name
from interv.engine.stacking import forward_under
from interv.errors import IntervError
from interv.tasks.tokenized import TokenizedPairs

N_PROMPTS, N_POS, D_VOCAB = 4, 8, 50


def native(n_key_value_heads: int | None = None) -> TransformerBridge:
    extra = {} if n_key_value_heads is None else {"n_key_value_heads": n_key_value_heads}
    config = TransformerBridgeConfig(
        d_model=64,
        d_head=16,
        n_layers=2,
        n_ctx=32,
        n_heads=4,
        d_vocab=D_VOCAB,
        attn_only=False,
        act_fn="gelu",
        d_mlp=128,
        normalization_type="LN",
        seed=0,
        **extra,
    )
    return TransformerBridge.boot_native(config).eval()


@pytest.fixture(scope="module")
def model() -> TransformerBridge:
    return native()


@pytest.fixture(scope="module")
def gqa_model() -> TransformerBridge:
    """4 query heads on 2 key/value heads: query heads 0 and 1 read value head 0."""
    return native(n_key_value_heads=2)


def make_task(
    seed: int = 0, lengths: tuple[int, ...] | None = None, same: bool = False
) -> TokenizedPairs:
    """Random pairs; ``lengths`` gives right-padded real lengths; ``same``: corrupted = clean."""
    generator = torch.Generator().manual_seed(seed)
    clean = torch.randint(0, D_VOCAB, (N_PROMPTS, N_POS), generator=generator)
    corrupted = (
        clean if same else torch.randint(0, D_VOCAB, (N_PROMPTS, N_POS), generator=generator)
    )
    lengths = lengths or (N_POS,) * N_PROMPTS
    mask = torch.arange(N_POS).unsqueeze(0) < torch.tensor(lengths).unsqueeze(1)
    return TokenizedPairs(
        clean_tokens=clean,
        corrupted_tokens=corrupted,
        attention_mask=mask,
        answer_positions=torch.tensor(lengths) - 1,
        target_ids=torch.randint(0, D_VOCAB, (N_PROMPTS,), generator=generator),
        foil_ids=torch.randint(0, D_VOCAB, (N_PROMPTS,), generator=generator),
        name="toy",
    )


def answer_metric(logits: torch.Tensor, task: TokenizedPairs) -> torch.Tensor:
    """Target logit at each prompt's answer position, ``[n_prompts]``."""
    rows = torch.arange(task.n_pairs)
    return logits[rows, task.answer_positions, task.target_ids]


def logits_under(model, task, intervention) -> torch.Tensor:
    """Full logits ``[n_prompts, pos, d_vocab]`` of the base run under ``intervention``."""
    return forward_under(model, task, intervention).readout


def test_zero_ablation_equals_hand_recomputation_through_the_output_projection(model):
    task = make_task()
    layer, head = 1, 2
    with torch.no_grad():
        _, cache = model.run_with_cache(task.clean_tokens)
        z = cache[hook_name("z", layer)][:, :, head]  # [batch, pos, d_head]
        w_o = model.blocks[layer].attn.W_O[head]  # [d_head, d_model]
        without_head = cache[hook_name("attn_out", layer)] - z @ w_o

        def replace_attn_out(activation, hook):
            return without_head

        expected = model.run_with_hooks(
            task.clean_tokens, fwd_hooks=[(hook_name("attn_out", layer), replace_attn_out)]
        )
    result = run(model, task, ZeroAblation(layer, head), "target_logit")
    torch.testing.assert_close(result.values[0], answer_metric(expected, task), atol=1e-5, rtol=0)
    assert not torch.allclose(result.values[0], result.clean, atol=1e-3)


@pytest.mark.parametrize("component", PATCH_COMPONENTS)
def test_patching_clean_into_clean_leaves_logits_unchanged(model, component):
    task = make_task(same=True)
    head = 1 if component == "z" else None
    with torch.no_grad():
        clean_logits = model(task.clean_tokens)
    for direction in ("denoise", "noise"):
        patched = logits_under(model, task, ActivationPatch(component, 1, head, direction))
        torch.testing.assert_close(patched, clean_logits, atol=1e-6, rtol=0)


@pytest.mark.parametrize(
    "identity",
    [ValueScale(1, 2, key_positions=(0, 3), factor=1.0), AttentionKnockout(1, 2, key_positions=())],
    ids=["value scale 1", "knock out no keys"],
)
def test_identity_edits_leave_logits_unchanged(model, identity):
    task = make_task()
    with torch.no_grad():
        clean_logits = model(task.clean_tokens)
    torch.testing.assert_close(logits_under(model, task, identity), clean_logits, atol=1e-6, rtol=0)


def test_pattern_only_then_value_only_equals_full_head_patch(model):
    task = make_task()
    both = Combined((PatternPatch(1, 2), ValuePatch(1, 2)))
    full = ActivationPatch("z", 1, 2)
    torch.testing.assert_close(
        logits_under(model, task, both), logits_under(model, task, full), atol=1e-5, rtol=0
    )
    # each half alone is a different intervention
    pattern_only = logits_under(model, task, PatternPatch(1, 2))
    assert (pattern_only - logits_under(model, task, full)).abs().max() > 1e-3


def test_pattern_times_values_reproduces_z_under_gqa(gqa_model):
    task = make_task()
    with torch.no_grad():
        _, cache = gqa_model.run_with_cache(task.clean_tokens)
    pattern = cache["blocks.1.attn.hook_pattern"]  # [batch, head_index, query_pos, key_pos]
    values = cache["blocks.1.attn.hook_v"].repeat_interleave(2, dim=2)  # query head h -> h // 2
    z = torch.einsum("bhqk,bkhd->bqhd", pattern, values)
    torch.testing.assert_close(z, cache["blocks.1.attn.hook_z"], atol=1e-6, rtol=0)


@pytest.mark.parametrize(
    "edit",
    [
        ValueScale(1, 0, key_positions=(0,), factor=0.0),
        ValueReplace(1, 0, key_positions=(0, 2)),
        AttentionKnockout(1, 0, key_positions=(0,)),
        ValuePatch(1, 0, direction="noise"),
    ],
    ids=["value zero", "value replace", "knockout", "value patch"],
)
def test_value_edit_on_one_query_head_leaves_heads_sharing_its_value_head_untouched(
    gqa_model, edit
):
    task = make_task()
    names = ["blocks.1.attn.hook_z", "blocks.1.attn.hook_v"]
    with torch.no_grad():
        _, clean_cache = gqa_model.run_with_cache(task.clean_tokens, names_filter=names)
    seen = forward_under(gqa_model, task, edit, capture=[Site("z", 1), Site("v", 1)]).captured
    z, clean_z = seen[Site("z", 1)], clean_cache["blocks.1.attn.hook_z"]
    torch.testing.assert_close(z[:, :, 1:], clean_z[:, :, 1:], atol=0, rtol=0)
    torch.testing.assert_close(seen[Site("v", 1)], clean_cache["blocks.1.attn.hook_v"])
    assert (z[:, :, 0] - clean_z[:, :, 0]).abs().max() > 1e-4


def test_knockout_renormalizes_the_remaining_keys_by_hand(model):
    task = make_task()
    layer, head, keys = 1, 3, [0, 2]
    with torch.no_grad():
        _, cache = model.run_with_cache(task.clean_tokens)
    pattern = cache[f"blocks.{layer}.attn.hook_pattern"][:, head].clone()
    values = cache[f"blocks.{layer}.attn.hook_v"][:, :, head]
    pattern[:, :, keys] = 0
    rows = pattern.sum(-1, keepdim=True)
    expected_z = torch.where(rows > 0, pattern / rows, 0.0) @ values
    knockout = AttentionKnockout(layer, head, tuple(keys))
    z = forward_under(model, task, knockout, capture=[Site("z", layer)]).captured[Site("z", layer)]
    torch.testing.assert_close(z[:, :, head], expected_z, atol=1e-6, rtol=0)
    # query 0 only sees key 0: with it knocked out it reads nothing
    assert z[:, 0, head].abs().max() == 0


def test_mean_ablation_averages_only_real_tokens(model):
    task = make_task(lengths=(8, 5, 3, 8))
    layer, head = 0, 1
    with torch.no_grad():
        _, cache = model.run_with_cache(task.clean_tokens, attention_mask=task.attention_mask)
    z = cache[hook_name("z", layer)][:, :, head]
    per_position = torch.stack(
        [z[task.attention_mask[:, p], p].mean(0) for p in range(N_POS)]
    )  # every position has at least one real prompt here
    pooled = z[task.attention_mask].mean(0)
    for intervention, mean in (
        (MeanAblation(layer, head), per_position),
        (MeanAblation(layer, head, pooled=True), pooled.expand(N_POS, -1)),
    ):

        def replace(activation, hook, mean=mean):
            activation = activation.clone()
            activation[:, :, head] = mean
            return activation

        with torch.no_grad():
            expected = model.run_with_hooks(
                task.clean_tokens,
                fwd_hooks=[(hook_name("z", layer), replace)],
                attention_mask=task.attention_mask,
            )
        result = run(model, task, intervention, "target_logit")
        torch.testing.assert_close(
            result.values[0], answer_metric(expected, task), atol=1e-5, rtol=0
        )


def test_resample_from_a_single_source_prompt_copies_its_z(model):
    task = make_task()
    source = ReferenceSet(task.corrupted_tokens[:1], "first corrupted prompt")
    patched_by_hand = make_task()  # same seed: same prompts
    with torch.no_grad():
        _, cache = model.run_with_cache(source.tokens)
    z = cache[hook_name("z", 1)][0, :, 2]

    def replace(activation, hook):
        activation = activation.clone()
        activation[:, :, 2] = z
        return activation

    with torch.no_grad():
        expected = model.run_with_hooks(
            patched_by_hand.clean_tokens, fwd_hooks=[(hook_name("z", 1), replace)]
        )
    result = run(model, task, ResampleAblation(1, 2, source=source, seed=5), "target_logit")
    torch.testing.assert_close(result.values[0], answer_metric(expected, task), atol=1e-5, rtol=0)


def test_resample_is_reproducible_for_a_seed(model):
    task = make_task()
    first = run(model, task, [ResampleAblation(0, 1, seed=s) for s in (0, 0, 1)], "target_logit")
    torch.testing.assert_close(first.values[0], first.values[1], atol=1e-6, rtol=0)
    assert (first.values[0] - first.values[2]).abs().max() > 1e-4


def test_denoising_head_patches_match_transformer_lens_all_pos(model):
    task = make_task()
    with torch.no_grad():
        _, clean_cache = model.run_with_cache(task.clean_tokens)

        def mean_logit_diff(logits):
            return (
                answer_metric(logits, task)
                - logits[torch.arange(task.n_pairs), task.answer_positions, task.foil_ids]
            ).mean()

        reference = patching.get_act_patch_attn_head_out_all_pos(
            model, task.corrupted_tokens, clean_cache, mean_logit_diff
        )  # [n_layers, n_heads]
    grid = [ActivationPatch("z", layer, head) for layer in range(2) for head in range(4)]
    ours = run(model, task, grid, "logit_diff").mean().reshape(2, 4)
    assert (ours - reference).abs().max() <= 1e-4


def test_stacking_interventions_in_one_forward_gives_the_same_values(model):
    task = make_task(lengths=(8, 6, 8, 7))
    mixed = [
        ZeroAblation(0, 1),
        MeanAblation(1, 0, reference="corrupted"),
        ActivationPatch("resid_mid", 1, direction="noise", positions=(2, 5)),
        ActivationPatch("z", 1, 3),
        ValueScale(1, 2, (0,), 0.5),
        Combined((PatternPatch(0, 2, direction="noise"), AttentionKnockout(0, 2, (1,)))),
    ]
    one_by_one = run(model, task, mixed, "log_prob", max_batch_size=N_PROMPTS)
    stacked = run(model, task, mixed, "log_prob", max_batch_size=64)
    torch.testing.assert_close(stacked.values, one_by_one.values, atol=1e-5, rtol=0)


def test_baselines_are_the_plain_forward_metrics(model):
    task = make_task()
    result = run(model, task, [], "target_logit")
    with torch.no_grad():
        clean = answer_metric(model(task.clean_tokens), task)
        corrupted = answer_metric(model(task.corrupted_tokens), task)
    torch.testing.assert_close(result.clean, clean, atol=1e-6, rtol=0)
    torch.testing.assert_close(result.corrupted, corrupted, atol=1e-6, rtol=0)
    assert result.values.shape == (0, N_PROMPTS)


def test_result_carries_semantics_metric_scope_and_records(model):
    task = make_task()
    interventions = [ZeroAblation(0, 1), ActivationPatch("z", 1, 2)]
    result = run(model, task, interventions, "logit_diff")
    assert result.descriptions == tuple(iv.describe(task) for iv in interventions)
    assert result.metric.unit == "logits"
    assert result.scope.n_prompts == N_PROMPTS
    assert result.scope.answer_positions == (N_POS - 1,) * N_PROMPTS
    records = result.to_records()
    assert len(records) == 2 * N_PROMPTS
    assert records[N_PROMPTS]["semantics"] == interventions[1].describe(task)
    assert records[N_PROMPTS]["value"] == pytest.approx(float(result.values[1, 0]))
    torch.testing.assert_close(
        result.recovery,
        (result.values - result.corrupted) / (result.clean - result.corrupted),
    )


def test_kl_from_clean_is_zero_without_effect_and_positive_under_ablation(model):
    task = make_task()
    result = run(model, task, [ValueScale(1, 0, (0,), 1.0), ZeroAblation(1, 0)], "kl_from_clean")
    torch.testing.assert_close(result.clean, torch.zeros(N_PROMPTS), atol=1e-6, rtol=0)
    torch.testing.assert_close(result.values[0], torch.zeros(N_PROMPTS), atol=1e-6, rtol=0)
    assert bool((result.values[1] > 1e-6).all())


def test_exception_inside_a_hook_leaves_the_model_as_fresh(model, monkeypatch):
    task = make_task()
    with torch.no_grad():
        fresh = model(task.clean_tokens)

    def explode(*args, **kwargs):
        raise RuntimeError("hook failed")

    monkeypatch.setattr(engine_interventions.ValueScale, "edit_pattern_values", explode)
    with pytest.raises(RuntimeError, match="hook failed"):
        run(model, task, [ZeroAblation(0, 0), ValueScale(1, 1, (0,), 0.0)], "target_logit")
    with torch.no_grad():
        after = model(task.clean_tokens)
    torch.testing.assert_close(after, fresh, atol=0, rtol=0)


def test_run_never_removes_hooks_the_user_attached(model):
    task = make_task()
    calls = []

    def count(activation, hook):
        calls.append(hook.name)

    model.add_hook("blocks.0.hook_resid_post", count)
    try:
        run(model, task, ZeroAblation(0, 0), "target_logit")
        calls.clear()
        with torch.no_grad():
            model(task.clean_tokens)
        assert len(calls) == 1  # the user hook still fires, once per forward
    finally:
        model.reset_hooks()


@pytest.mark.parametrize(
    ("intervention", "message"),
    [
        (ZeroAblation(2, 0), r"layer 2 is out of range.*valid layers 0\.\.1"),
        (ZeroAblation(0, 4), r"head 4 is out of range.*valid heads 0\.\.3"),
        (ActivationPatch("mlp_out", 5), r"layer 5 .*valid layers 0\.\.1"),
        (ZeroAblation(0, 1, positions=(8,)), r"position 8 is beyond.*valid positions 0\.\.7"),
        (ValueScale(0, 1, (9,), 0.0), r"key position 9 is beyond.*valid positions 0\.\.7"),
        (
            MeanAblation(0, 1, ReferenceSet(torch.zeros(3, 6, dtype=torch.long), "short")),
            r"'short'.*8 positions.*\[n_ref, 8\].*\(3, 6\)",
        ),
    ],
)
def test_run_rejects_interventions_that_do_not_fit_model_or_task(model, intervention, message):
    with pytest.raises(IntervError, match=message):
        run(model, make_task(), intervention, "target_logit")


def test_pooled_mean_accepts_a_reference_set_of_another_length(model):
    reference = ReferenceSet(torch.zeros(3, 6, dtype=torch.long), "short")
    result = run(model, make_task(), MeanAblation(0, 1, reference, pooled=True), "target_logit")
    assert result.values.isfinite().all()


def test_run_refuses_a_foil_metric_on_a_task_without_foils(model):
    task = make_task()
    no_foil = TokenizedPairs(
        task.clean_tokens,
        task.corrupted_tokens,
        task.attention_mask,
        task.answer_positions,
        task.target_ids,
    )
    with pytest.raises(IntervError, match=r"'logit_diff' needs foil ids"):
        run(model, no_foil, ZeroAblation(0, 0), "logit_diff")
