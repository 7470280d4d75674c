"""The screen / verify / audit core: bounds, stopping, and exact values kept apart."""

from __future__ import annotations

import dataclasses
import json
import math

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from interv.audit import (
    ESTIMATED,
    EXACT_AUDIT,
    EXACT_VERIFIED,
    Audit,
    Screen,
    clopper_pearson_upper,
    hypergeometric_upper,
    verify_screen,
)
from interv.errors import IntervError


class Counting:
    """An exact evaluator that records which candidates it was asked for."""

    def __init__(self, exact: torch.Tensor) -> None:
        self.exact = exact
        self.calls: list[list[int]] = []

    def __call__(self, indices: torch.Tensor) -> torch.Tensor:
        self.calls.append(indices.tolist())
        return self.exact[indices]

    @property
    def asked(self) -> list[int]:
        return [i for call in self.calls for i in call]


def test_clopper_pearson_zero_successes_has_its_closed_form():
    for n in (1, 10, 59, 60, 300):
        assert clopper_pearson_upper(0, n) == pytest.approx(1 - 0.05 ** (1 / n), rel=1e-12)
    # the rule of three: about 3 / n at 95%
    assert clopper_pearson_upper(0, 300) == pytest.approx(3 / 300, rel=0.01)


def test_clopper_pearson_equals_the_beta_quantile():
    beta = pytest.importorskip("scipy.stats").beta
    for successes, trials, level in [(1, 10, 0.95), (3, 60, 0.95), (7, 20, 0.9), (19, 20, 0.99)]:
        expected = beta.ppf(level, successes + 1, trials - successes)
        assert clopper_pearson_upper(successes, trials, level) == pytest.approx(expected, abs=1e-9)


def test_clopper_pearson_edges_and_bad_input():
    assert clopper_pearson_upper(0, 0) == 1.0
    assert clopper_pearson_upper(5, 5) == 1.0
    with pytest.raises(IntervError, match="must not exceed trials"):
        clopper_pearson_upper(3, 2)
    with pytest.raises(IntervError, match=r"level must lie in \(0, 1\); got 1.5"):
        clopper_pearson_upper(0, 3, 1.5)


@given(
    st.integers(min_value=1, max_value=80).flatmap(
        lambda n: st.tuples(st.integers(min_value=0, max_value=n - 1), st.just(n))
    )
)
def test_clopper_pearson_is_monotone_and_above_the_observed_rate(case):
    successes, trials = case
    bound = clopper_pearson_upper(successes, trials)
    assert successes / trials < bound <= 1
    assert bound < clopper_pearson_upper(successes + 1, trials)
    assert bound > clopper_pearson_upper(successes, trials + 1)


def test_a_perfect_screen_stops_on_the_bound_with_no_misses():
    exact = torch.linspace(10, 0.1, 200, dtype=torch.float64)
    evaluate = Counting(exact)
    audit = verify_screen(Screen(top_k=20, audit=60, alpha=0.05), exact.clone(), evaluate)
    assert audit.stopped_by == "bound"
    assert audit.misses == 0
    assert audit.miss_bound == pytest.approx(1 - 0.05 ** (1 / 60))
    assert audit.top().tolist() == list(range(20))
    assert audit.n_checked == 80
    assert audit.rank_agreement == pytest.approx(1.0)
    assert sorted(evaluate.asked) == sorted(set(evaluate.asked))  # nothing evaluated twice


def test_statuses_keep_exact_and_estimated_apart():
    exact = torch.arange(30, 0, -1, dtype=torch.float64)
    audit = verify_screen(Screen(top_k=5, audit=10, alpha=None), exact, Counting(exact))
    assert audit.stopped_by == "one look"
    assert audit.status.count(EXACT_VERIFIED) == 5
    assert audit.status.count(EXACT_AUDIT) == 10
    assert audit.status.count(ESTIMATED) == 15
    for i, status in enumerate(audit.status):
        assert math.isnan(audit.exact[i]) == (status == ESTIMATED)
    # plotting value: exact where checked, the estimate elsewhere
    assert torch.equal(audit.value, exact)


def test_a_saturated_candidate_ranked_out_by_the_screen_is_caught_by_the_audit():
    # candidate 7 has a large exact effect but a tiny first-order estimate (saturation)
    exact = torch.tensor([9.0, 8.0, 7.0, 0.3, 0.2, 0.1, 0.05, 12.0, 0.0, 0.01])
    estimates = exact.clone()
    estimates[7] = 0.001
    audit = verify_screen(
        Screen(top_k=3, audit=7, alpha=0.05, budget=10), estimates, exact.__getitem__
    )
    assert audit.misses == 1  # candidate 7, audited, beats the top-3 threshold
    assert audit.status[7] != ESTIMATED
    assert 7 in audit.top().tolist()  # ranked by its exact value once checked
    assert audit.stopped_by in {"budget", "all checked"}


def test_adaptive_stopping_extends_verification_in_estimate_order():
    # the screen puts the true top-5 at estimate ranks 6-10: the first look misses them
    n = 120
    exact = torch.cat([torch.full((5,), 1.0), torch.full((5,), 5.0), torch.full((n - 10,), 0.01)])
    estimates = torch.cat(
        [torch.full((5,), 3.0), torch.full((5,), 2.0), torch.full((n - 10,), 0.0)]
    )
    evaluate = Counting(exact)
    audit = verify_screen(Screen(top_k=5, audit=100, alpha=0.05), estimates, evaluate)
    assert audit.looks == 2
    assert audit.n_verified == 10
    assert sorted(audit.top().tolist()) == [5, 6, 7, 8, 9]
    assert audit.threshold == pytest.approx(5.0)
    assert audit.misses == 0
    assert audit.stopped_by == "bound"
    assert audit.miss_bound_corrected > audit.miss_bound
    assert len(evaluate.asked) == len(set(evaluate.asked))


def test_budget_stops_verification_and_says_so():
    exact = torch.rand(50, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    estimates = torch.flip(exact, (0,))  # an uninformative screen
    audit = verify_screen(
        Screen(top_k=5, audit=10, alpha=0.01, budget=25), estimates, exact.__getitem__
    )
    assert audit.n_checked <= 25
    assert audit.stopped_by == "budget"
    assert "stopped by budget" in audit.describe()


def test_known_exact_values_are_reused_not_recomputed():
    exact = torch.linspace(5, 0, 40, dtype=torch.float64)
    first = verify_screen(Screen(top_k=4, audit=12, alpha=None), exact, exact.__getitem__)
    evaluate = Counting(exact)
    second = verify_screen(
        Screen(top_k=4, audit=12, alpha=None), exact, evaluate, known=first.exact
    )
    assert evaluate.calls == []
    assert torch.equal(first.exact.nan_to_num(-1), second.exact.nan_to_num(-1))


def test_miss_rate_against_a_full_sweep():
    exact = torch.tensor([5.0, 4.0, 3.0, 6.0, 0.0, 0.0, 0.0, 0.0])
    estimates = torch.tensor([5.0, 4.0, 3.0, 0.0, 0.1, 0.1, 0.1, 0.1])
    audit = verify_screen(Screen(top_k=2, audit=0, alpha=None), estimates, exact.__getitem__)
    assert audit.threshold == 4.0
    assert math.isnan(audit.miss_rate)
    assert audit.miss_bound == 1.0  # no audit: nothing is known about the rest
    assert audit.miss_rate_against(exact) == pytest.approx(1 / 6)  # candidate 3 of 6


def test_no_rank_correlation_from_too_few_checked_candidates():
    exact = torch.tensor([3.0, 2.0, 1.0])
    audit = verify_screen(Screen(top_k=1, audit=1, alpha=None), exact, exact.__getitem__)
    assert math.isnan(audit.rank_agreement)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"top_k": 0}, "top_k must be >= 1; got 0"),
        ({"audit": -1}, "audit must be >= 0; got -1"),
        ({"alpha": 1.0}, r"alpha must lie in \(0, 1\) or be None; got 1.0"),
        ({"alpha": float("nan")}, "alpha must be a finite number"),
        ({"budget": 3, "top_k": 5}, r"budget \(3 exact evaluations\) must be at least top_k \(5\)"),
        ({"step": 0}, "step must be >= 1; got 0"),
        ({"level": 0.0}, r"level must lie in \(0, 1\); got 0.0"),
        ({"bound": "count"}, r"unknown Screen bound 'count'; choose one of \('rate', 'any'\)"),
        ({"estimator": "ig"}, "unknown Screen estimator 'ig'; choose one of"),
        ({"steps": 0}, r"steps \(integrated-gradient points\) must be >= 1; got 0"),
        ({"steps": 50}, r"steps \(50\) applies with estimator='integrated' only; got estimator="),
    ],
)
def test_bad_screens_are_refused_naming_the_value(kwargs, message):
    with pytest.raises(IntervError, match=message):
        Screen(**kwargs)


def test_bad_estimates_and_evaluators_are_refused():
    with pytest.raises(IntervError, match="top_k must be at most the 3 candidates; got 20"):
        verify_screen(Screen(), torch.ones(3), torch.ones(3).__getitem__)
    with pytest.raises(IntervError, match=r"must be finite; candidates \[1\]"):
        verify_screen(Screen(top_k=1), torch.tensor([1.0, math.nan]), torch.ones(2).__getitem__)
    with pytest.raises(IntervError, match="evaluate returned 1 values for 2 candidates"):
        verify_screen(Screen(top_k=2, audit=0), torch.ones(2), lambda idx: torch.ones(1))


@given(
    st.integers(min_value=0, max_value=10_000),
    st.integers(min_value=1, max_value=8),
    st.integers(min_value=0, max_value=30),
    st.sampled_from([None, 0.05, 0.3]),
)
def test_the_audit_invariants_hold_for_any_screen(seed, top_k, n_audit, alpha):
    generator = torch.Generator().manual_seed(seed)
    n = 40
    exact = torch.randn(n, generator=generator, dtype=torch.float64)
    estimates = exact + torch.randn(n, generator=generator, dtype=torch.float64)
    evaluate = Counting(exact)
    audit = verify_screen(
        Screen(top_k=top_k, audit=n_audit, alpha=alpha, seed=seed), estimates, evaluate
    )
    assert len(evaluate.asked) == len(set(evaluate.asked))
    checked = audit.checked
    assert torch.equal(audit.exact[checked], exact[checked])
    verified = audit.order[: audit.n_verified]
    assert all(audit.status[i] == EXACT_VERIFIED for i in verified.tolist())
    assert audit.threshold == pytest.approx(float(exact[verified].abs().topk(top_k).values.min()))
    assert audit.misses == int((exact[audit.audited].abs() > audit.threshold).sum())
    assert set(audit.audited.tolist()).isdisjoint(verified.tolist())
    assert set(audit.top().tolist()) <= set(checked.nonzero().flatten().tolist())


def _brute_force_upper(observed: int, sample: int, population: int, level: float) -> int:
    """The largest D whose P[X <= observed] exceeds 1 - level, by direct enumeration."""

    def tail(marked: int) -> float:
        total = math.comb(population, sample)
        return (
            sum(
                math.comb(marked, i) * math.comb(population - marked, sample - i)
                for i in range(observed + 1)
            )
            / total
        )

    return max(d for d in range(population + 1) if tail(d) > 1 - level)


@given(
    st.integers(min_value=1, max_value=80),
    st.floats(min_value=0.0, max_value=1.0),
    st.floats(min_value=0.0, max_value=1.0),
)
def test_the_finite_population_bound_equals_direct_enumeration(population, share, seen):
    sample = round(share * population)
    observed = round(seen * sample)
    assert hypergeometric_upper(observed, sample, population, 0.95) == _brute_force_upper(
        observed, sample, population, 0.95
    )


def test_the_finite_population_bound_by_hand_and_its_coverage():
    # no miss in 60 of 63: one marked item would be missed with probability 3/63 < 5 %
    assert hypergeometric_upper(0, 60, 63, 0.95) == 0
    assert hypergeometric_upper(0, 0, 10, 0.95) == 10  # nothing sampled: nothing known
    assert hypergeometric_upper(5, 5, 5, 0.95) == 5
    generator = torch.Generator().manual_seed(0)
    covered = 0
    for _ in range(400):
        marked = int(torch.randint(0, 30, (1,), generator=generator))
        drawn = torch.randperm(200, generator=generator)[:40]
        observed = int((drawn < marked).sum())
        covered += hypergeometric_upper(observed, 40, 200, 0.95) >= marked
    assert covered / 400 >= 0.95


def test_bound_any_extends_verification_until_no_unchecked_candidate_can_beat_the_top():
    # one candidate with a large exact effect sits at the bottom of the estimates
    n = 100
    exact = torch.linspace(1.0, 0.0, n, dtype=torch.float64)
    exact[n - 1] = 10.0
    estimates = torch.linspace(1.0, 0.0, n, dtype=torch.float64)
    rate = verify_screen(Screen(top_k=5, audit=20, alpha=0.2, seed=1), estimates, exact.__getitem__)
    assert rate.stopped_by == "bound" and rate.unchecked_bound > 0
    assert "unchecked candidates above it" in rate.describe()
    audit = verify_screen(
        Screen(top_k=5, audit=20, alpha=0.05, bound="any", seed=1), estimates, exact.__getitem__
    )
    assert audit.unchecked_bound == 0
    assert n - 1 in audit.top().tolist()  # found: verified or audited
    # at most a share alpha of the unverified candidates is left unaudited
    assert (audit.n_unverified - audit.audited.numel()) <= 0.05 * audit.n_unverified
    assert Screen(bound="any").describe().count("finite-population") == 1


def test_reliability_scores_keep_infinity_apart_from_no_value_when_stored():
    """An HVP audit's reliability ``inf`` (only the first-order term is 0: the least reliable
    estimate) reads back as ``inf``, NaN as NaN; audits stored with null for both still read."""
    exact = torch.tensor([3.0, 2.0, 1.0, 0.5])
    audit = verify_screen(Screen(top_k=2, audit=1, alpha=None), exact, exact.__getitem__)
    scores = torch.tensor([0.25, math.inf, math.nan, 0.0], dtype=torch.float64)
    audit = dataclasses.replace(audit, reliability=scores)
    stored = audit.to_dict()
    assert stored["reliability"] == [0.25, "inf", None, 0.0]
    back = Audit.from_dict(json.loads(json.dumps(stored))).reliability
    torch.testing.assert_close(back, scores, equal_nan=True)
    stored["reliability"] = [0.25, None, None, 0.0]  # as written before "inf" was
    assert Audit.from_dict(stored).reliability[1].isnan()
