"""Attribution patching: the first-order estimate of head-output denoising.

Oracle: the score of head ``h`` is the directional derivative ``f'(0)`` of
``f(t) = mean metric of the corrupted run with z_h <- z_corr + t (z_clean - z_corr)``,
checked by a central finite difference in float64.
"""

from __future__ import annotations

import pytest
import torch
from transformer_lens.config import TransformerBridgeConfig
from transformer_lens.model_bridge import TransformerBridge

from interv.engine.attribution_patching import approximate_head_patching_scores
from interv.engine.interventions import ActivationPatch
from interv.engine.runner import run
from interv.engine.sites import hook_name
from interv.errors import IntervError
from interv.tasks.tokenized import TokenizedPairs

N_PROMPTS, N_POS, D_VOCAB = 3, 6, 30


@pytest.fixture(scope="module")
def model() -> TransformerBridge:
    config = TransformerBridgeConfig(
        d_model=32,
        d_head=8,
        n_layers=2,
        n_ctx=16,
        n_heads=4,
        d_vocab=D_VOCAB,
        attn_only=False,
        act_fn="gelu",
        d_mlp=64,
        normalization_type="LN",
        seed=2,
        n_key_value_heads=2,
    )
    return TransformerBridge.boot_native(config).eval().to(torch.float64)


def make_task(same: bool = False) -> TokenizedPairs:
    generator = torch.Generator().manual_seed(0)
    clean = torch.randint(0, D_VOCAB, (N_PROMPTS, N_POS), generator=generator)
    corrupted = (
        clean if same else torch.randint(0, D_VOCAB, (N_PROMPTS, N_POS), generator=generator)
    )
    lengths = torch.tensor([6, 4, 5])
    return TokenizedPairs(
        clean_tokens=clean,
        corrupted_tokens=corrupted,
        attention_mask=torch.arange(N_POS).unsqueeze(0) < lengths.unsqueeze(1),
        answer_positions=lengths - 1,
        target_ids=torch.randint(0, D_VOCAB, (N_PROMPTS,), generator=generator),
        foil_ids=torch.randint(0, D_VOCAB, (N_PROMPTS,), generator=generator),
        name="random pairs",
    )


def interpolated_metric(model, task: TokenizedPairs, layer: int, head: int, t: float) -> float:
    """Mean logit diff of the corrupted run with ``z_h <- z_corr + t (z_clean - z_corr)``."""
    name = hook_name("z", layer)
    with torch.no_grad():
        _, cache = model.run_with_cache(
            task.clean_tokens, names_filter=[name], attention_mask=task.attention_mask
        )

    def blend(z, hook):
        z = z.clone()
        z[:, :, head] = z[:, :, head] + t * (cache[name][:, :, head] - z[:, :, head])
        return z

    with torch.no_grad(), model.hooks(fwd_hooks=[(name, blend)]):
        logits = model(task.corrupted_tokens, attention_mask=task.attention_mask)
    rows = torch.arange(N_PROMPTS)
    at_answer = logits[rows, task.answer_positions]
    return float((at_answer[rows, task.target_ids] - at_answer[rows, task.foil_ids]).mean())


def test_scores_are_the_directional_derivative_towards_the_clean_head_output(model):
    task = make_task()
    scores = approximate_head_patching_scores(model, task, "logit_diff")
    assert scores.shape == (2, 4)
    step = 1e-4
    for layer in range(2):
        for head in range(4):
            plus = interpolated_metric(model, task, layer, head, step)
            minus = interpolated_metric(model, task, layer, head, -step)
            derivative = (plus - minus) / (2 * step)
            assert float(scores[layer, head]) == pytest.approx(derivative, rel=1e-5, abs=1e-7)


def test_scores_approximate_but_differ_from_the_exact_patch_effect(model):
    """It is a linearization: close to exact denoising in rank, not equal in value."""
    task = make_task()
    scores = approximate_head_patching_scores(model, task, "logit_diff").flatten()
    grid = [ActivationPatch("z", layer, head) for layer in range(2) for head in range(4)]
    result = run(model, task, grid, "logit_diff")
    exact = result.mean() - result.corrupted.mean()
    assert not torch.allclose(scores, exact.to(scores), atol=1e-6)
    assert torch.corrcoef(torch.stack([scores, exact.to(scores)]))[0, 1] > 0.5


def test_identical_runs_score_zero_for_every_head(model):
    scores = approximate_head_patching_scores(model, make_task(same=True), "log_prob")
    assert torch.equal(scores, torch.zeros_like(scores))


def test_parameters_receive_no_gradient(model):
    approximate_head_patching_scores(model, make_task(), "kl_from_clean")
    assert all(parameter.grad is None for parameter in model.parameters())


def test_unknown_metric_names_the_choices(model):
    with pytest.raises(IntervError, match="unknown metric 'accuracy'; choose one of"):
        approximate_head_patching_scores(model, make_task(), "accuracy")
