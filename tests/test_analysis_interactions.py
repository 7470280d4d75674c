"""Pairwise interactions: f(AB) - f(A) - f(B) + f(none), intervals, compensation flags."""

from __future__ import annotations

import pytest
import torch

import interv
from interv.analysis.pairwise import head_interactions, interactions, pair_design
from interv.engine.results import InterventionResult, MetricInfo, Scope, intervention_fields
from interv.errors import IntervError
from interv.provenance import Provenance

N = 6
HEADS = [(0, 1), (1, 0), (1, 2)]


def synthetic(single: dict, pair: dict, clean: float = 10.0, corrupted: float = 0.0):
    """A result of the pair design on HEADS with per-prompt effects (relative to clean)."""
    design = pair_design(HEADS, "mean")
    rows = []
    for intervention in design:
        if isinstance(intervention, interv.PairAblation):
            key = (
                (intervention.layer, intervention.head),
                (intervention.other_layer, intervention.other_head),
            )
            rows.append(pair[key])
        else:
            rows.append(single[(intervention.layer, intervention.head)])
    clean_values = torch.full((N,), clean)
    values = torch.stack([clean_values + torch.as_tensor(row, dtype=torch.float32) for row in rows])
    return InterventionResult.build(
        values,
        clean_values,
        torch.full((N,), corrupted),
        **intervention_fields(design, None),
        metric=MetricInfo("logit_diff", "logits", "target minus foil"),
        scope=Scope("toy", "toy", N, 5, (4,) * N, "right"),
        provenance=Provenance("toy", n_prompts=N),
        recovery_atol=1e-6,
    )


def test_interaction_is_the_pair_effect_minus_both_single_effects_per_prompt():
    generator = torch.Generator().manual_seed(0)
    single = {head: torch.randn(N, generator=generator) for head in HEADS}
    pair = {
        (a, b): torch.randn(N, generator=generator)
        for i, a in enumerate(HEADS)
        for b in HEADS[i + 1 :]
    }
    found = head_interactions(synthetic(single, pair), n_bootstrap=200)
    assert found.heads == tuple(HEADS)
    for (a, b), both in pair.items():
        i, j = HEADS.index(a), HEADS.index(b)
        expected = both.double() - single[a].double() - single[b].double()
        torch.testing.assert_close(found.interaction[i, j], expected, atol=1e-5, rtol=0)
        torch.testing.assert_close(found.interaction[j, i], expected, atol=1e-5, rtol=0)
        assert float(found.ci_low[i, j]) <= float(found.mean[i, j]) <= float(found.ci_high[i, j])
    assert bool(found.mean.diagonal().isnan().all())


def test_heads_that_only_matter_together_are_flagged_as_compensating():
    quiet = torch.full((N,), -0.2)
    single = {(0, 1): quiet, (1, 0): quiet, (1, 2): torch.full((N,), -6.0)}
    pair = {
        ((0, 1), (1, 0)): torch.linspace(-5.5, -4.5, N),  # alone harmless, together not
        ((0, 1), (1, 2)): torch.full((N,), -6.2),  # additive: no interaction
        ((1, 0), (1, 2)): torch.full((N,), -9.0),  # interacts, but L1H2 alone is not quiet
    }
    found = head_interactions(synthetic(single, pair), n_bootstrap=200)
    assert found.compensation == (((0, 1), (1, 0)),)
    assert "[compensation]" in found.describe_pair((0, 1), (1, 0))
    assert "[compensation]" not in found.describe_pair((1, 0), (1, 2))
    assert "1 logits" in found.rule  # 0.1 x the effect scale of 10 logits
    assert found.to_records()[0]["compensation"] is True


def test_results_without_the_whole_design_are_refused():
    design = pair_design(HEADS, "zero")
    partial = [iv for iv in design if not isinstance(iv, interv.ZeroAblation) or iv.head != 1]
    values = torch.zeros(len(partial), N)
    result = InterventionResult.build(
        values,
        torch.zeros(N),
        torch.ones(N),
        **intervention_fields(partial, None),
        metric=MetricInfo("logit_diff", "logits", "d"),
        scope=Scope("toy", "toy", N, 5, (4,) * N, "right"),
        provenance=Provenance("toy", n_prompts=N),
        recovery_atol=1e-6,
    )
    with pytest.raises(IntervError, match=r"but not its single ablation 'L0H1 output \(z\) set"):
        head_interactions(result)
    with pytest.raises(IntervError, match="holds no PairAblation"):
        head_interactions(
            InterventionResult.build(
                values[:1],
                torch.zeros(N),
                torch.ones(N),
                **intervention_fields(partial[:1], None),
                metric=MetricInfo("logit_diff", "logits", "d"),
                scope=Scope("toy", "toy", N, 5, (4,) * N, "right"),
                provenance=Provenance("toy", n_prompts=N),
                recovery_atol=1e-6,
            )
        )
    with pytest.raises(IntervError, match="at least two distinct"):
        pair_design([(0, 1)])


def test_interactions_on_the_zoo_model_equal_four_separate_runs():
    model = interv.load_model("induction-2l")
    task = interv.load_task("induction", n_pairs=8, seed=4).tokenize(model)
    found = interactions(model, task, [(1, 1), (1, 3)], baseline="zero", n_bootstrap=100)
    f_a = interv.run(model, task, [interv.ZeroAblation(1, 1)]).values[0]
    f_b = interv.run(model, task, [interv.ZeroAblation(1, 3)]).values[0]
    f_ab = interv.run(model, task, [interv.PairAblation(1, 1, 1, 3, "zero")]).values[0]
    f_none = interv.run(model, task, [interv.ZeroAblation(1, 1)]).clean
    expected = (f_ab - f_a - f_b + f_none).double()
    torch.testing.assert_close(found.interaction[0, 1], expected, atol=1e-5, rtol=0)
    assert "set to zero" in found.semantics and "8 prompts of 'induction'" in found.semantics
