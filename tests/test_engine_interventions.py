"""Intervention values: semantics sentences, immutability and input validation (no model)."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from interv.engine.interventions import (
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
from interv.engine.sites import check_head, check_layer, check_positions, hook_name, kv_head_of
from interv.errors import IntervError
from interv.tasks.tokenized import TokenizedPairs


def toy_task(n: int = 16, name: str = "ioi") -> TokenizedPairs:
    tokens = torch.arange(n)[:, None].repeat(1, 5)  # n distinct prompts
    return TokenizedPairs(
        tokens,
        tokens,
        torch.ones(n, 5, dtype=torch.bool),
        torch.full((n,), 4),
        torch.zeros(n, dtype=torch.long),
        name=name,
    )


class Cfg:
    n_layers = 2
    n_heads = 9
    n_key_value_heads = 3
    attn_only = False


def test_head_ablations_state_their_baseline_and_reference_set():
    task = toy_task()
    assert ZeroAblation(1, 2).describe() == "L1H2 output (z) set to zero at all positions"
    assert MeanAblation(1, 2).describe(task) == (
        "L1H2 output (z) replaced by its mean over the 16 clean prompts of 'ioi' at the "
        "same position, at all positions"
    )
    assert "pooled over all real positions" in MeanAblation(1, 2, pooled=True).describe(task)
    assert (
        ResampleAblation(1, 2, seed=7)
        .describe(task)
        .startswith("L1H2 output (z) resampled from the 16 corrupted prompts of 'ioi' (seed 7)")
    )
    reference = ReferenceSet(torch.zeros(32, 5, dtype=torch.long), "wiki")
    assert "the 32 prompts of reference set 'wiki'" in MeanAblation(1, 2, reference).describe()


def test_patches_state_direction_and_question():
    assert ActivationPatch("z", 1, 2).describe() == (
        "denoising: L1H2 output (z) from the clean run patched into the corrupted run at "
        "all positions (is it sufficient?)"
    )
    noise = ActivationPatch("resid_post", 3, direction="noise", positions=[4, 5])
    assert noise.describe() == (
        "noising: residual stream after block 3 (resid_post) from the corrupted run patched "
        "into the clean run at positions [4, 5] (is it necessary?)"
    )
    assert (noise.source_run, noise.base_run) == ("corrupted", "clean")


def test_value_and_routing_edits_state_the_keys_and_the_untouched_heads():
    sink = ValueScale(5, 3, key_positions=(0,), factor=0.0).describe()
    assert sink.startswith("L5H3 value vectors at key position 0 set to zero")
    assert "other query heads sharing its key/value head untouched" in sink
    assert "scaled by 0.5" in ValueScale(5, 3, (0,), 0.5).describe()
    assert "key positions [0, 1] knocked out" in AttentionKnockout(0, 1, (0, 1)).describe()
    assert "z = A_clean V_corrupted" in PatternPatch(0, 1).describe()
    assert "z = A_clean V_corrupted" in ValuePatch(0, 1, direction="noise").describe()
    assert "corrupted run of the same pair" in ValueReplace(0, 1, (0,)).describe()


def test_combined_joins_the_sentences_of_its_parts():
    both = Combined((PatternPatch(0, 1), ValuePatch(0, 1)))
    assert both.describe() == f"{PatternPatch(0, 1).describe()}; and {ValuePatch(0, 1).describe()}"
    assert both.base_run == "corrupted"


def test_interventions_are_frozen_comparable_values():
    ablation = ZeroAblation(1, 2, positions=[3])
    assert ablation == ZeroAblation(1, 2, positions=(3,))
    assert len({ablation, ZeroAblation(1, 2, positions=(3,))}) == 1
    with pytest.raises(dataclasses.FrozenInstanceError):
        ablation.layer = 0  # type: ignore[misc]


@pytest.mark.parametrize(
    ("build", "message"),
    [
        (lambda: ActivationPatch("attn", 0), r"unknown component 'attn'.*'resid_pre'"),
        (lambda: ActivationPatch("z", 0), r"'z' needs a head"),
        (lambda: ActivationPatch("resid_pre", 0, head=1), r"no head axis; got head=1"),
        (lambda: ActivationPatch("z", 0, 1, direction="both"), r"'both'.*'denoise', 'noise'"),
        (lambda: ZeroAblation(0, 1, positions=(-1,)), r"positions must be >= 0.*\(-1,\)"),
        (lambda: ValueScale(0, 1, (2, 2)), r"key_positions must not repeat"),
        (lambda: MeanAblation(0, 1, reference="train"), r"'train'.*'clean', 'corrupted'"),
        (lambda: Combined((ZeroAblation(0, 1), PatternPatch(0, 1))), r"same base run"),
        (lambda: Combined(()), r"at least one part"),
        (
            lambda: ReferenceSet(torch.zeros(4, dtype=torch.long), "flat"),
            r"'flat'.*\[n_ref, pos\].*\(4,\)",
        ),
    ],
)
def test_bad_intervention_values_raise_with_the_allowed_choices(build, message):
    with pytest.raises(IntervError, match=message):
        build()


def test_sites_give_transformer_lens_hook_names_and_gqa_value_heads():
    assert hook_name("z", 3) == "blocks.3.attn.hook_z"
    assert hook_name("mlp_out", 0) == "blocks.0.hook_mlp_out"
    assert [kv_head_of(Cfg, h) for h in range(9)] == [0, 0, 0, 1, 1, 1, 2, 2, 2]


def test_sites_reject_out_of_range_layers_heads_and_positions_with_the_range():
    with pytest.raises(IntervError, match=r"layer 2 .*valid layers 0\.\.1"):
        check_layer(Cfg, 2)
    with pytest.raises(IntervError, match=r"head 9 .*valid heads 0\.\.8"):
        check_head(Cfg, 0, 9)
    with pytest.raises(IntervError, match=r"position 5 is beyond.*valid positions 0\.\.4"):
        check_positions((0, 5), 5, "position")
