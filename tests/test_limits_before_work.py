"""Limits known before work are checked with the other arguments, before any forward.

- Bootstrap resamples of a circuit's stability: at most ``MAX_RESAMPLES``, the refusal
  stating the memory the count would need (``discover``, ``circuit_stability`` and
  ``interv circuit --stability``).
- Stability resamples prompts: at least ``interv.stats.MIN_ITEMS`` prompt pairs.
- An n/a interval says why (a stored stability of 2 prompts), and a small audit's rank
  correlation is shown with its interval, or as n/a with the reason below the minimum.

A spy counts every call of the model's modules: a refusal leaves it at zero.
"""

from __future__ import annotations

import dataclasses
import math
import os

import pytest
from _circuit_fixtures import make_circuit, with_stability

import interv
from interv.audit import Screen
from interv.circuits import circuit_stability, discover
from interv.circuits.stability import MAX_RESAMPLES, check_resamples
from interv.cli import main
from interv.errors import IntervError
from interv.report.circuit import audit_lines, stability_columns
from interv.stats import MIN_ITEMS
from tests._calls import counting_calls

os.environ.setdefault("HF_HUB_OFFLINE", "1")

SCREEN = Screen(top_k=10, audit=0, alpha=None)


@pytest.fixture(scope="module")
def zoo(induction_zoo):
    model = induction_zoo
    task = interv.load_task("induction", n_pairs=8, seed=1).tokenize(model)
    return model, task


@pytest.fixture(scope="module")
def found(zoo):
    model, task = zoo
    return discover(model, task, screen=SCREEN)


def test_resamples_beyond_the_maximum_are_refused_with_the_memory_they_would_need(zoo, found):
    model, task = zoo
    memory = r"would need at least 192\.0 TB of memory .* choose 2\.\.10000"
    with counting_calls(model) as calls:
        with pytest.raises(IntervError, match=r"^stability 1000000000000 exceeds .*" + memory):
            discover(model, task, screen=SCREEN, stability=10**12)
        with pytest.raises(IntervError, match=r"^n_resamples 1000000000000 exceeds .*" + memory):
            circuit_stability(model, task, found, n_resamples=10**12)
        with pytest.raises(IntervError, match=f"^n_resamples {MAX_RESAMPLES + 1} exceeds"):
            circuit_stability(model, task, found, n_resamples=MAX_RESAMPLES + 1)
    assert calls == []
    # 24 bytes per resample and prompt: 1e12 x 8 x 24 = 192 TB
    assert check_resamples(MAX_RESAMPLES, 8) == MAX_RESAMPLES


def test_the_cli_refuses_too_many_resamples_or_too_few_pairs_before_loading(
    tmp_path, capsys, monkeypatch
):
    import interv.models.loading as loading

    monkeypatch.setattr(loading, "load_model", pytest.fail)
    argv = ["circuit", "induction-2l", "--n-pairs", "8", "--out", str(tmp_path / "out")]
    assert main([*argv, "--stability", "1000000000000"]) == 2
    err = capsys.readouterr().err
    assert "--stability 1000000000000 exceeds the maximum of 10000" in err
    assert "192.0 TB" in err
    argv[argv.index("8")] = "2"
    assert main([*argv, "--stability", "20"]) == 2
    err = capsys.readouterr().err
    assert f"fewer than {MIN_ITEMS} prompt pairs; the task has 2" in err
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("n_pairs", [1, 2])
def test_stability_on_fewer_prompts_than_the_minimum_is_refused_before_any_forward(zoo, n_pairs):
    model, task = zoo
    few = task.select(list(range(n_pairs)))
    with counting_calls(model) as calls, pytest.raises(IntervError) as refused:
        discover(model, few, screen=SCREEN, stability=20)
    assert calls == []
    assert str(refused.value) == (
        f"stability: circuit stability resamples the prompts and gives no interval from fewer "
        f"than {MIN_ITEMS} prompt pairs; the task has {n_pairs}: use at least {MIN_ITEMS} pairs, "
        "or no stability"
    )


def test_stability_with_scores_that_carry_no_per_prompt_values_is_refused_up_front(zoo, found):
    model, task = zoo
    bare = dataclasses.replace(found.scores, per_prompt=None)
    with counting_calls(model) as calls, pytest.raises(IntervError, match="per-prompt estimates"):
        discover(model, task, screen=SCREEN, scores=bare, stability=20)
    assert calls == []


def test_an_na_stability_interval_says_why():
    circuit = with_stability(make_circuit(), {})
    two = dataclasses.replace(
        circuit.stability, n_prompts=2, low=[math.nan] * 2, high=[math.nan] * 2
    )
    _, rows = stability_columns(two)
    reason = "n/a: 2 prompts, fewer than 3 (no interval)"
    assert [row[2] for row in rows] == [reason, reason]
    assert f"({reason})" in repr(two)
    assert "nan" not in repr(two)


def test_a_small_audit_shows_its_rank_correlation_with_its_interval_or_why_not(zoo):
    model, task = zoo
    four = discover(model, task, screen=Screen(top_k=3, audit=1, alpha=None))
    assert four.audit.n_checked == 4
    line = audit_lines(four)[1]
    low, high = four.audit.rank_interval
    assert "over the 4 checked edges" in line
    assert f"(95% interval {low:.3g} ... {high:.3g}, bootstrap over them)" in line
    two = discover(model, task, screen=Screen(top_k=1, audit=1, alpha=None))
    assert math.isnan(two.audit.rank_agreement)
    assert audit_lines(two)[1].endswith(
        "over the 2 checked edges n/a: 2 checked edges, fewer than 3 (no rank correlation)"
    )
