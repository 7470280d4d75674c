"""Target metrics and normalized recovery: analytic oracles and hand recomputations."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from interv.engine.results import normalized_recovery
from interv.engine.targets import (
    METRICS,
    get_metric,
    kl_from_clean,
    log_prob,
    logit_diff,
    prob,
    target_logit,
)
from interv.errors import IntervError

LOGITS = torch.tensor([[1.0, 2.0, 4.0], [0.0, 0.0, 0.0]])
TARGETS = torch.tensor([2, 0])
FOILS = torch.tensor([0, 1])


def logits_strategy(batch: int = 3, d_vocab: int = 5):
    values = st.floats(-20, 20, allow_nan=False, width=32)
    return st.lists(values, min_size=batch * d_vocab, max_size=batch * d_vocab).map(
        lambda xs: torch.tensor(xs).reshape(batch, d_vocab)
    )


def test_target_logit_and_logit_diff_read_the_named_columns():
    assert target_logit(LOGITS, TARGETS).tolist() == [4.0, 0.0]
    assert logit_diff(LOGITS, TARGETS, FOILS).tolist() == [3.0, 0.0]


def test_log_prob_and_prob_match_hand_softmax():
    expected = 4.0 - math.log(math.exp(1) + math.exp(2) + math.exp(4))
    assert log_prob(LOGITS, TARGETS)[0].item() == pytest.approx(expected, abs=1e-6)
    # uniform logits over 3 tokens: probability 1/3, log-prob -log 3
    assert prob(LOGITS, TARGETS)[1].item() == pytest.approx(1 / 3, abs=1e-7)
    assert log_prob(LOGITS, TARGETS)[1].item() == pytest.approx(-math.log(3), abs=1e-6)


@given(logits_strategy())
def test_probabilities_of_every_token_sum_to_one(logits):
    total = sum(prob(logits, torch.full((3,), v)) for v in range(5))
    torch.testing.assert_close(total, torch.ones(3), atol=1e-5, rtol=0)


@given(logits_strategy(), logits_strategy())
def test_kl_from_clean_is_nonnegative_and_zero_on_the_clean_run(logits, clean):
    assert bool((kl_from_clean(logits, clean) >= -1e-6).all())
    torch.testing.assert_close(kl_from_clean(clean, clean), torch.zeros(3), atol=1e-6, rtol=0)


def test_kl_from_clean_matches_hand_sum():
    clean = torch.tensor([[0.0, math.log(3.0)]])  # p_clean = (1/4, 3/4)
    logits = torch.tensor([[0.0, 0.0]])  # p = (1/2, 1/2)
    expected = 0.25 * math.log(0.25 / 0.5) + 0.75 * math.log(0.75 / 0.5)
    assert kl_from_clean(logits, clean).item() == pytest.approx(expected, abs=1e-6)


def test_every_metric_names_a_unit_in_its_definition():
    for metric in METRICS.values():
        assert metric.unit in metric.definition or metric.unit == "probability"
        assert "answer position" in metric.definition


def test_unknown_metric_lists_the_choices():
    with pytest.raises(IntervError, match=r"'logitdiff'.*'logit_diff'"):
        get_metric("logitdiff")


def test_metric_needing_a_foil_refuses_a_task_without_one():
    with pytest.raises(IntervError, match=r"logit_diff.*needs foil.*'target_logit'"):
        get_metric("logit_diff")(LOGITS, TARGETS, None, LOGITS)


def test_normalized_recovery_is_one_at_clean_zero_at_corrupted_nan_when_undefined():
    clean = torch.tensor([2.0, 1.0, 5.0])
    corrupted = torch.tensor([0.0, 3.0, 5.0])
    values = torch.stack([clean, corrupted, torch.tensor([1.0, 2.0, 7.0])])
    recovery = normalized_recovery(values, clean, corrupted, atol=1e-6)
    torch.testing.assert_close(recovery[:2, :2], torch.tensor([[1.0, 1.0], [0.0, 0.0]]))
    torch.testing.assert_close(recovery[2, :2], torch.tensor([0.5, 0.5]))
    assert bool(recovery[:, 2].isnan().all())
