"""interv.run as plan then execute: RunPlan checks everything first, execute runs it."""

from __future__ import annotations

import dataclasses

import pytest
import torch

import interv
from interv.audit import Screen
from interv.engine.runner import Resume, RunPlan, execute
from interv.errors import IntervError


@pytest.fixture(scope="module")
def zoo(induction_zoo):
    return induction_zoo, interv.load_task("induction", n_pairs=6, seed=0).tokenize(induction_zoo)


def test_executing_a_plan_gives_what_run_gives(zoo):
    model, task = zoo
    heads = [interv.ZeroAblation(1, h) for h in range(4)]
    plan = RunPlan.build(model, task, heads, "logit_diff", max_batch_size=12, progress=False)
    assert plan.interventions == tuple(heads) and plan.max_batch_size == 12
    assert plan.label == "interv.run: 4 interventions"
    ran = interv.run(model, task, heads, "logit_diff", max_batch_size=12, progress=False)
    executed = execute(model, plan)
    torch.testing.assert_close(executed.values, ran.values)
    assert executed.descriptions == ran.descriptions


def test_a_plan_is_frozen_and_checked_before_any_forward(zoo):
    model, task = zoo
    plan = RunPlan.build(model, task, interv.ZeroAblation(0, 0), "logit_diff", progress=False)
    assert plan.max_batch_size >= task.n_pairs  # the automatic size, resolved in the plan
    with pytest.raises(dataclasses.FrozenInstanceError):
        plan.reuse_prefix = False
    with pytest.raises(IntervError, match=r"max_batch_size must be"):
        RunPlan.build(model, task, [interv.ZeroAblation(0, 0)], "logit_diff", max_batch_size=0)
    with pytest.raises(IntervError, match=r"reuse_prefix must be True or False"):
        RunPlan.build(model, task, [interv.ZeroAblation(0, 0)], "logit_diff", reuse_prefix=1)


def test_resume_continues_only_a_screened_plan_and_its_callbacks_see_the_work(zoo):
    model, task = zoo
    plan = RunPlan.build(model, task, [interv.ZeroAblation(0, 0)], "logit_diff", progress=False)
    with pytest.raises(IntervError, match=r"resume= continues a screened run"):
        execute(model, plan, resume=Resume())
    heads = [interv.ZeroAblation(layer, head) for layer in range(2) for head in range(4)]
    screen = Screen(top_k=2, audit=2, alpha=None)
    screened = RunPlan.build(model, task, heads, "logit_diff", screen=screen, progress=False)
    seen: dict[str, list] = {"estimates": [], "exact": []}
    resume = Resume(
        on_estimates=lambda estimates, reliability: seen["estimates"].append(estimates),
        on_exact=lambda indices, values: seen["exact"].extend(indices),
    )
    result = execute(model, screened, resume=resume)
    assert len(seen["estimates"]) == 1 and seen["estimates"][0].shape == (8, task.n_pairs)
    assert sorted(seen["exact"]) == [i for i, ok in enumerate(result.exact.tolist()) if ok]
