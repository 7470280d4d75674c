"""Screened runs: first-order estimates against hand computation, exact values kept apart.

Oracle for the estimates: the estimate of an intervention that writes ``a'`` over the
activation ``a`` of one head is the directional derivative ``f_i'(0)`` of
``f_i(t) = metric of prompt i with z_h <- z_h + t (a' - z_h)`` in its base run, computed
here by a central finite difference in float64 with plain torch hooks, and ``a'`` computed
by hand for each kind (zero; the masked mean over the clean prompts at each position; the
corrupted prompts' ``z`` drawn by the seeded resample rule; the other run's ``z``).
"""

from __future__ import annotations

import pytest
import torch

import interv
from interv.audit import ESTIMATED, EXACT_AUDIT, EXACT_VERIFIED, Screen
from interv.engine.attribution_patching import approximate_head_patching_scores
from interv.engine.interventions import (
    ActivationPatch,
    Combined,
    MeanAblation,
    ResampleAblation,
    ValueScale,
    ZeroAblation,
    resample_index,
)
from interv.engine.runner import _base_runs
from interv.engine.screening import (
    SCREENABLE_KINDS,
    ExactScoring,
    Resume,
    first_order_estimates,
    screened_values,
)
from interv.engine.sites import hook_name
from interv.engine.targets import get_metric
from interv.errors import IntervError
from tests._plain_hooks import forward_with_hooks, head_columns

EPS = 1e-4


@pytest.fixture(scope="module")
def model():
    return interv.load_model("induction-2l").to(torch.float64)


@pytest.fixture(scope="module")
def task(model):
    return interv.load_task("induction", n_pairs=16).tokenize(model)


def head_z(model, task, run: str, layer: int, head: int) -> torch.Tensor:
    """``[n, pos, d_head]`` head output of ``run`` by a plain hook."""
    name = hook_name("z", layer)
    tokens = task.clean_tokens if run == "clean" else task.corrupted_tokens
    _, kept = forward_with_hooks(model, tokens, task, keep=[name])
    return kept[name][:, :, head_columns(model, head)]


def replacement(model, task, intervention) -> torch.Tensor:
    """What ``intervention`` writes into its head, computed by hand: ``[n, pos, d_head]``."""
    layer, head = intervention.layer, intervention.head
    if isinstance(intervention, ZeroAblation):
        return torch.zeros_like(head_z(model, task, "clean", layer, head))
    if isinstance(intervention, MeanAblation):
        z = head_z(model, task, "clean", layer, head)
        weights = task.attention_mask.to(z).unsqueeze(-1)
        return ((z * weights).sum(0) / weights.sum(0).clamp(min=1)).expand_as(z)
    if isinstance(intervention, ResampleAblation):
        # the seeded draw itself is the engine's rule (tested with the interventions)
        mask = task.attention_mask
        index = resample_index(intervention.seed, mask, mask, "corrupted")
        return head_z(model, task, "corrupted", layer, head)[index]
    return head_z(model, task, intervention.source_run, layer, head)


def derivative(model, task, intervention) -> torch.Tensor:
    """``[n_prompts]`` central difference of ``f_i(t)`` at ``t = 0``."""
    layer, head = intervention.layer, intervention.head
    name, columns = hook_name("z", layer), head_columns(model, head)
    tokens = task.clean_tokens if intervention.base_run == "clean" else task.corrupted_tokens
    base = head_z(model, task, intervention.base_run, layer, head)
    direction = replacement(model, task, intervention) - base
    if intervention.positions is not None:
        keep = torch.zeros(task.n_positions, dtype=torch.bool)
        keep[list(intervention.positions)] = True
        direction = direction * keep.to(direction).view(1, -1, 1)

    def f(t: float) -> torch.Tensor:
        def move(out: torch.Tensor) -> torch.Tensor:
            out = out.clone()
            out[:, :, columns] = out[:, :, columns] + t * direction
            return out

        return forward_with_hooks(model, tokens, task, hooks={name: move})[0]

    return (f(EPS) - f(-EPS)) / (2 * EPS)


def estimates_of(model, task, interventions, metric="logit_diff", steps=1) -> torch.Tensor:
    target = get_metric(metric)
    base = _base_runs(model, task, interventions, True, None)
    return first_order_estimates(model, task, interventions, target, base, steps=steps)


CASES = [
    ZeroAblation(0, 2),
    ZeroAblation(1, 3, positions=(22,)),
    MeanAblation(1, 1),
    MeanAblation(0, 2, positions=(7, 13)),
    ResampleAblation(0, 1, seed=3),
    ActivationPatch("z", 1, 3, "denoise"),
    ActivationPatch("z", 0, 2, "denoise", positions=(22,)),
    ActivationPatch("z", 0, 2, "noise"),
]


def test_estimates_equal_the_derivative_along_each_kinds_replacement(model, task):
    estimates = estimates_of(model, task, CASES)
    assert estimates.shape == (len(CASES), task.n_pairs)
    for row, intervention in zip(estimates, CASES, strict=True):
        expected = derivative(model, task, intervention)
        torch.testing.assert_close(row, expected, atol=1e-6, rtol=1e-6, msg=intervention.describe)
        assert expected.abs().max() > 1e-4  # no case is trivially zero


def test_per_position_estimates_add_up_to_the_all_position_estimate(model, task):
    n = task.n_positions
    each = [MeanAblation(1, 2, positions=(p,)) for p in range(n)]
    estimates = estimates_of(model, task, [MeanAblation(1, 2), *each])
    torch.testing.assert_close(estimates[1:].sum(0), estimates[0], atol=1e-9, rtol=1e-9)


def test_patch_estimates_are_attribution_patching(model, task):
    patches = [ActivationPatch("z", layer, head) for layer in range(2) for head in range(4)]
    estimates = estimates_of(model, task, patches).mean(-1)
    expected = approximate_head_patching_scores(model, task, "logit_diff").flatten()
    torch.testing.assert_close(estimates, expected.double(), atol=1e-9, rtol=1e-9)


@pytest.mark.slow
def test_integrated_gradients_add_up_to_the_joint_intervention(model, task):
    # completeness: along the joint path the estimates of every site sum to the exact
    # effect of all the interventions together (a left Riemann sum: error O(1 / steps))
    for kind in (ZeroAblation, MeanAblation):
        heads = [kind(layer, head) for layer in range(2) for head in range(4)]
        joint = interv.run(model, task, [Combined(tuple(heads))], "logit_diff").effect[0]
        coarse = estimates_of(model, task, heads).sum(0)
        fine = estimates_of(model, task, heads, steps=16).sum(0)
        finer = estimates_of(model, task, heads, steps=64).sum(0)
        error = [float((x - joint).abs().mean()) for x in (coarse, fine, finer)]
        assert error[1] < error[0] / 4 and error[2] < error[1] / 2, (kind, error)
        # two interventions on one site take separate paths; one step is attribution
    both = [ZeroAblation(1, 2), MeanAblation(1, 2)]
    separate = estimates_of(model, task, both, steps=8)
    alone = [estimates_of(model, task, [one], steps=8)[0] for one in both]
    torch.testing.assert_close(separate, torch.stack(alone), atol=1e-9, rtol=1e-9)


def test_an_integrated_screen_says_so(model32, task32):
    ablations = [ZeroAblation(layer, head) for layer, head in HEADS]
    screen = Screen(top_k=3, audit=2, alpha=None, estimator="integrated", steps=4)
    result = interv.run(model32, task32, ablations, "logit_diff", screen=screen)
    audit = result.screens[0].audit
    assert "integrated gradients (4 path points)" in audit.describe()
    expected = estimates_of(model32, task32, ablations, steps=4).mean(-1)
    torch.testing.assert_close(audit.estimates, expected, atol=1e-6, rtol=1e-6)


@pytest.fixture(scope="module")
def model32():
    return interv.load_model("induction-2l")


@pytest.fixture(scope="module")
def task32(model32):
    return interv.load_task("induction", n_pairs=16).tokenize(model32)


HEADS = [(layer, head) for layer in range(2) for head in range(4)]


def test_a_screened_run_keeps_exact_values_and_estimates_apart(model32, task32):
    ablations = [ZeroAblation(layer, head) for layer, head in HEADS]
    full = interv.run(model32, task32, ablations)
    screened = interv.run(
        model32, task32, ablations, screen=Screen(top_k=2, audit=3, alpha=None, seed=1)
    )
    assert full.status == ("exact",) * 8 and not full.screened
    assert screened.status.count(EXACT_VERIFIED) == 2
    assert screened.status.count(EXACT_AUDIT) == 3
    assert screened.status.count(ESTIMATED) == 3
    exact = screened.exact
    torch.testing.assert_close(screened.values[exact], full.values[exact], atol=1e-5, rtol=1e-5)
    audit = screened.screens[0].audit
    estimated = ~exact
    # an estimate is the clean value plus the first-order change, never an exact value
    torch.testing.assert_close(
        (screened.values[estimated] - screened.clean).mean(-1).double(),
        audit.estimates[estimated],
        atol=1e-5,
        rtol=1e-5,
    )
    records = screened.to_records()
    for record in records:
        assert record["exact"] == (record["status"] != ESTIMATED)
        estimated = record["semantics"].endswith(
            "; estimated by attribution (first-order), not intervened"
        )
        assert estimated == (not record["exact"])
    described = screened.screens[0].describe()
    assert "8 zero_ablation interventions" in described
    assert "Spearman rho of estimate and exact over the 5 checked" in described


def test_the_saturated_previous_token_head_is_caught_by_the_audit(model32, task32):
    # L0H2, the previous-token head, acts through the induction heads' attention pattern:
    # the softmax saturates and its first-order estimate has the wrong sign (about +0.4
    # logits against an exact -10). The screen ranks it second, behind L0H1.
    ablations = [ZeroAblation(layer, head) for layer, head in HEADS]
    saturated = HEADS.index((0, 2))
    exact = interv.run(model32, task32, ablations)
    exact_effect = exact.mean() - exact.clean.mean()
    blind = interv.run(model32, task32, ablations, screen=Screen(top_k=1, audit=0, alpha=None))
    audit = blind.screens[0].audit
    assert audit.estimates[saturated] > 0 > -5 > exact_effect[saturated]
    assert int(exact_effect.abs().argmax()) == saturated
    assert blind.status[saturated] == ESTIMATED  # unverified, unaudited: only estimated
    assert audit.miss_bound == 1.0  # and the outcome says nothing is known about the rest
    # with an audit (seed 2 draws L0H2 into it) the miss is found, verification extends,
    # and the exact ranking puts L0H2 first
    checked = interv.run(
        model32, task32, ablations, screen=Screen(top_k=1, audit=2, alpha=0.05, seed=2)
    )
    audit = checked.screens[0].audit
    assert checked.status[saturated] != ESTIMATED
    assert audit.top(1).tolist() == [saturated]
    assert audit.looks > 1 and audit.n_verified > 1
    assert audit.stopped_by != "bound" or audit.miss_bound < 0.05


def test_a_resumed_screen_runs_no_exact_work_twice(model, task):
    ablations = [
        ZeroAblation(layer, head, positions=(p,)) for layer, head in HEADS for p in (20, 21, 22)
    ]
    target = get_metric("logit_diff")
    base = _base_runs(model, task, ablations, True, None)
    clean = forward_with_hooks(model, task.clean_tokens, task)[0]
    corrupted = forward_with_hooks(model, task.corrupted_tokens, task)[0]
    clean_logits = base.readouts["clean"]

    def score(logits):
        copies = logits.shape[0] // task.n_pairs
        return target(
            logits,
            task.target_ids.repeat(copies),
            task.foil_ids.repeat(copies),
            clean_logits.repeat(copies, 1),
        ).reshape(copies, task.n_pairs)

    screen = Screen(top_k=3, audit=6, alpha=0.05, step=3, seed=0)
    baselines = {"clean": clean, "corrupted": corrupted}
    # 4 interventions per forward
    scoring = ExactScoring(score, baselines, max_batch_size=64, reuse_prefix=True)
    whole = screened_values(model, task, ablations, base, target, screen, scoring)

    stored: dict[int, torch.Tensor] = {}

    class Killed(Exception):
        pass

    def store_then_die(indices, values):
        stored.update(zip(indices, values, strict=True))
        if len(stored) >= 8:
            raise Killed

    with pytest.raises(Killed):
        screened_values(
            model,
            task,
            ablations,
            base,
            target,
            screen,
            scoring,
            Resume(estimates=whole.estimates, on_exact=store_then_die),
        )
    known = torch.full((len(ablations), task.n_pairs), torch.nan, dtype=torch.float64)
    for index, values in stored.items():
        known[index] = values
    asked: list[int] = []
    resumed = screened_values(
        model,
        task,
        ablations,
        base,
        target,
        screen,
        scoring,
        Resume(
            known=known,
            estimates=whole.estimates,
            on_exact=lambda indices, values: asked.extend(indices),
        ),
    )
    assert not set(asked) & set(stored)  # nothing stored is computed again
    assert resumed.n_computed == len(asked) == whole.n_computed - len(stored)
    assert resumed.status == whole.status
    torch.testing.assert_close(resumed.values, whole.values, atol=1e-9, rtol=1e-9)


def test_a_kind_that_cannot_be_screened_names_the_kinds_that_can(model32, task32):
    with pytest.raises(IntervError, match="value_scale") as error:
        interv.run(model32, task32, [ZeroAblation(0, 0), ValueScale(1, 0)], screen=Screen(top_k=1))
    for name in SCREENABLE_KINDS:
        assert name in str(error.value)


@pytest.mark.parametrize(
    ("screen", "metric", "message"),
    [
        (
            Screen(top_k=9),
            "logit_diff",
            r"top_k \(9\) must be at most the number of interventions screened \(8\)",
        ),
        ("yes", "logit_diff", "screen must be an interv.Screen"),
        (Screen(top_k=2), "kl_from_clean", "kl_from_clean.*gradient zero, at the clean run"),
    ],
)
def test_bad_screens_are_refused_before_any_forward(model32, task32, screen, metric, message):
    ablations = [ZeroAblation(layer, head) for layer, head in HEADS]
    with pytest.raises(IntervError, match=message):
        interv.run(model32, task32, ablations, metric=metric, screen=screen)


@pytest.mark.real_model
def test_smollm2_screen_matches_attribution_patching_and_the_exact_runner(smollm2_bridge):
    model = smollm2_bridge
    task = interv.load_task("ioi", n_pairs=8).tokenize(model)  # padded: 18 positions
    heads = [(layer, head) for layer in (28, 29) for head in range(model.cfg.n_heads)]
    patches = [ActivationPatch("z", layer, head) for layer, head in heads]
    estimates = estimates_of(model, task, patches).mean(-1)
    scores = approximate_head_patching_scores(model, task, "logit_diff")
    expected = torch.stack([scores[layer, head] for layer, head in heads]).double()
    torch.testing.assert_close(estimates, expected, atol=1e-5, rtol=1e-4)
    last = task.shared_positions[-1]  # positions real in every prompt (padding is refused)
    ablations = [
        MeanAblation(layer, head, positions=(p,)) for layer, head in heads for p in (14, last)
    ]
    screened = interv.run(model, task, ablations, screen=Screen(top_k=3, audit=6, alpha=None))
    full = interv.run(model, task, ablations)
    exact = screened.exact
    assert int(exact.sum()) == 9
    torch.testing.assert_close(screened.values[exact], full.values[exact], atol=1e-4, rtol=1e-4)
