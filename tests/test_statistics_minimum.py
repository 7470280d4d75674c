"""Statistics own their minimum: an interval needs the number of prompts it resamples and is
n/a (with the reason) below 3, a rank correlation is n/a below 3 items, whoever calls; and a
repeated prompt is refused in every prompt set interv measures (counted once: never twice)."""

from __future__ import annotations

import math

import pytest
import torch

import interv
from interv.audit import Screen
from interv.circuits import discover, faithfulness
from interv.errors import IntervError
from interv.report.circuit import circuit_markdown
from interv.report.circuit_page import circuit_page
from interv.stats import MIN_ITEMS, percentile_interval, spearman, too_few


def test_an_interval_cannot_be_asked_without_the_number_of_prompts_resampled():
    samples = torch.tensor([0.2, 0.4, 0.9], dtype=torch.float64)
    with pytest.raises(TypeError, match="n_items"):
        percentile_interval(samples, 0.95)  # type: ignore[call-arg]


@pytest.mark.parametrize("n", [0, 1, 2])
def test_below_the_minimum_an_interval_is_na_and_says_why(n):
    samples = torch.full((50,), 0.891, dtype=torch.float64)
    low, high = percentile_interval(samples, 0.95, n_items=n)
    assert math.isnan(low) and math.isnan(high)
    assert too_few(n) == f"n/a: {n} prompt{'' if n == 1 else 's'}, fewer than 3 (no interval)"


def test_from_the_minimum_on_an_interval_is_given():
    samples = torch.linspace(0, 1, 101, dtype=torch.float64)
    low, high = percentile_interval(samples, 0.9, n_items=MIN_ITEMS)
    assert low == pytest.approx(0.05) and high == pytest.approx(0.95)
    assert too_few(MIN_ITEMS) == ""


def test_a_rank_correlation_of_fewer_than_three_items_is_na():
    assert math.isnan(float(spearman(torch.tensor([1.0, 2.0]), torch.tensor([2.0, 1.0]))))
    assert float(spearman(torch.tensor([1.0, 2.0, 3.0]), torch.tensor([3.0, 2.0, 1.0]))) == -1.0


@pytest.fixture(scope="module")
def zoo():
    return interv.load_model("induction-2l")


def test_a_faithfulness_curve_on_one_prompt_has_no_interval_and_says_why(zoo):
    """The probe: "CPR 0.891 [0.891, 0.891]" from one prompt; n/a with the reason now."""
    task = interv.load_task("induction", n_pairs=1, seed=0).tokenize(zoo)
    circuit = discover(zoo, task, screen=Screen(top_k=3, audit=2, alpha=None))
    curve = faithfulness(zoo, task, circuit, fractions=(0.1, 0.5, 1.0), n_bootstrap=50)
    assert all(math.isnan(v) for v in (*curve.cpr_interval, *curve.cmd_interval, *curve.low))
    text = circuit_markdown(circuit, curve)
    assert f"(95% interval {too_few(1)})" in text
    assert f"{curve.cpr:.4g} (95% interval n/a: 1 prompt, fewer than 3" in text
    assert "95% interval n/a: 1 prompt" in circuit_page(circuit, curve)


def test_a_repeated_prompt_is_refused_in_every_prompt_set(zoo):
    pairs = interv.load_task("induction", n_pairs=3, seed=0)
    task = pairs.tokenize(zoo)
    rows = [0, 1, 0]
    with pytest.raises(IntervError, match=r"clean prompt 2 repeats clean prompt 0"):
        interv.TokenizedPairs(
            clean_tokens=task.clean_tokens[rows],
            corrupted_tokens=task.corrupted_tokens[rows],
            attention_mask=task.attention_mask[rows],
            answer_positions=task.answer_positions[rows],
            target_ids=task.target_ids[rows],
            foil_ids=None if task.foil_ids is None else task.foil_ids[rows],
        )
    with pytest.raises(IntervError, match=r"prompt 1 repeats prompt 0 .*not independent"):
        interv.concentration(zoo, ["A B C D", "A B C D"], progress=False)
