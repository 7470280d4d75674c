"""Circuits on Ray workers (``executor=RayExecutor(...)``) equal the local run, float for
float: the exact edges (verified, audited, those the stability resamples verify) and the
faithfulness curve's circuits run in the same stacked forwards as a local run with the
same ``batch_size``, on a local Ray cluster of 2 workers."""

from __future__ import annotations

import functools

import pytest
import torch

import interv
from interv.audit import Screen
from interv.circuits import RayExecutor, discover, faithfulness
from interv.errors import IntervError

ray = pytest.importorskip("ray", reason="the ray extra is not installed (pip install interv[ray])")

SCREEN = Screen(top_k=8, audit=6, alpha=None)
OPTIONS = dict(screen=SCREEN, stability=12, select="stability", resamples=12, q=6, batch_size=4)


@pytest.mark.slow
def test_ray_workers_give_the_local_numbers():
    model = interv.load_model("induction-2l")
    task = interv.load_task("induction", n_pairs=8, seed=0).tokenize(model)
    local = discover(model, task, **OPTIONS)
    local_curve = faithfulness(model, task, local, fractions=[0.05, 0.2, 1.0], batch_size=2)
    seen: list[int] = []
    load = functools.partial(interv.load_model, "induction-2l")
    with RayExecutor(load, n_workers=2) as executor:
        spread = discover(
            model, task, **OPTIONS, executor=executor, on_exact=lambda i, v: seen.extend(i)
        )
        curve = faithfulness(
            model, task, spread, fractions=[0.05, 0.2, 1.0], batch_size=2, executor=executor
        )
    assert sorted(seen) == sorted(local.audit.checked.nonzero().flatten().tolist())
    assert torch.equal(spread.audit.exact.nan_to_num(7.0), local.audit.exact.nan_to_num(7.0))
    assert spread.status == local.status
    assert spread.stability.to_dict() == local.stability.to_dict()
    assert spread.selection.to_dict() == local.selection.to_dict()
    assert torch.equal(curve.per_prompt, local_curve.per_prompt)
    assert (curve.cpr, curve.cmd) == (local_curve.cpr, local_curve.cmd)


def test_a_bad_executor_is_refused_before_any_work():
    with pytest.raises(IntervError, match="n_workers must be an integer >= 1; got 0"):
        RayExecutor(functools.partial(interv.load_model, "induction-2l"), n_workers=0)
    with pytest.raises(IntervError, match="load must be a callable"):
        RayExecutor("induction-2l")
    model = interv.load_model("induction-2l")
    task = interv.load_task("induction", n_pairs=4, seed=0).tokenize(model)
    with pytest.raises(IntervError, match=r"executor must be None .* got str"):
        discover(model, task, executor="ray")
