"""Flags follow their stated rules; agreement and its statistics follow their definitions."""

from __future__ import annotations

import pytest
import torch
from _report_fixtures import make_concentration, make_result
from hypothesis import given
from hypothesis import strategies as st

from interv.errors import IntervError
from interv.flags import (
    BASELINE_SENSITIVE,
    CONCENTRATED_LITTLE_EFFECT,
    DIFFUSE_LARGE_EFFECT,
    SINK_DOMINATED,
    FlagRules,
)
from interv.report.agreement import agreement
from interv.report.flags import assign_flags
from interv.report.table import build_report
from interv.stats import bootstrap_indices, spearman

N = 4  # prompts


def _constructed_report():
    """Clean 2.0, corrupted 0.0 (effect scale 2 logits); one layer of five heads.

    head 0: concentrated (0.1), effect -0.1 -> concentrated, little effect
    head 1: diffuse (0.9), effect -1.5 -> diffuse, large effect
    head 2: sink mass 0.8 -> sink-dominated
    head 3: zero / mean / resample effects 0.0 / -0.2 / -1.0 -> baseline-sensitive (1.0 > 0.5)
    head 4: zero / mean / resample effects 0.0 / -0.2 / -0.4 -> not (0.4 <= 0.5)
    """
    rows = [
        ("ZeroAblation", 0, -0.1),
        ("ZeroAblation", 1, -1.5),
        ("ZeroAblation", 2, -0.5),
        ("ZeroAblation", 3, 0.0),
        ("MeanAblation", 3, -0.2),
        ("ResampleAblation", 3, -1.0),
        ("ZeroAblation", 4, 0.0),
        ("MeanAblation", 4, -0.2),
        ("ResampleAblation", 4, -0.4),
    ]
    clean = torch.full((N,), 2.0)
    values = torch.stack([clean + effect for _, _, effect in rows])
    result = make_result(
        values,
        clean,
        torch.zeros(N),
        [kind for kind, _, _ in rows],
        [f"L0H{head} {kind}" for kind, head, _ in rows],
    )
    normalized = torch.tensor([0.1, 0.9, 0.5, 0.5, 0.5], dtype=torch.float64)
    sink = torch.tensor([0.0, 0.0, 0.8, 0.1, 0.1], dtype=torch.float64)
    conc = make_concentration(
        {
            "normalized_entropy": normalized.expand(N, 1, 5).clone(),
            "sink_mass": sink.expand(N, 1, 5).clone(),
        }
    )
    return build_report(result, conc, n_bootstrap=20)


def test_flags_follow_their_rules_on_a_constructed_result():
    report = _constructed_report()
    flags = [row.flags for row in report.rows]
    assert flags == [
        (CONCENTRATED_LITTLE_EFFECT,),
        (DIFFUSE_LARGE_EFFECT,),
        (SINK_DOMINATED,),
        (BASELINE_SENSITIVE,),
        (BASELINE_SENSITIVE,),
        (BASELINE_SENSITIVE,),
        (),
        (),
        (),
    ]


def test_rules_are_written_with_their_thresholds_in_the_metric_unit():
    report = _constructed_report()
    rules = report.rules_text
    assert set(rules) == {
        CONCENTRATED_LITTLE_EFFECT,
        DIFFUSE_LARGE_EFFECT,
        SINK_DOMINATED,
        BASELINE_SENSITIVE,
    }
    assert "0.2 logits" in rules[CONCENTRATED_LITTLE_EFFECT]  # 0.1 x scale 2
    assert "1 logits" in rules[DIFFUSE_LARGE_EFFECT]  # 0.5 x scale 2
    assert "0.5" in rules[SINK_DOMINATED]
    assert "0.5 logits" in rules[BASELINE_SENSITIVE]  # 0.25 x scale 2


@given(
    entropy=st.floats(0, 1),
    sink=st.floats(0, 1),
    effect=st.floats(-3, 3),
    scale=st.floats(0.01, 5),
)
def test_single_row_flags_match_the_rule_predicates(entropy, sink, effect, scale):
    rules = FlagRules()
    (flags,) = assign_flags(
        kinds=["ZeroAblation"],
        heads=[(0, 0)],
        effect_means=[effect],
        normalized_entropy=[entropy],
        sink_mass=[sink],
        effect_scale=scale,
        rules=rules,
    )
    expected = []
    if entropy <= 0.3 and abs(effect) <= 0.1 * scale:
        expected.append(CONCENTRATED_LITTLE_EFFECT)
    if entropy >= 0.7 and abs(effect) >= 0.5 * scale:
        expected.append(DIFFUSE_LARGE_EFFECT)
    if sink > 0.5:
        expected.append(SINK_DOMINATED)
    assert flags == tuple(expected)


def test_effect_flags_are_not_raised_without_an_effect_scale():
    (flags,) = assign_flags(
        kinds=["ZeroAblation"],
        heads=[(0, 0)],
        effect_means=[0.0],
        normalized_entropy=[0.0],
        sink_mass=[0.9],
        effect_scale=0.0,
        rules=FlagRules(),
    )
    assert flags == (SINK_DOMINATED,)


def test_bad_thresholds_are_refused_with_value_and_range():
    with pytest.raises(IntervError, match=r"sink_mass_above must lie in \[0, 1\]; got 1.5"):
        FlagRules(sink_mass_above=1.5)
    with pytest.raises(IntervError, match="concentrated_at_most must be below diffuse_at_least"):
        FlagRules(concentrated_at_most=0.8, diffuse_at_least=0.7)


def test_spearman_matches_hand_computed_values():
    assert float(spearman(torch.tensor([1.0, 2, 3, 4]), torch.tensor([1.0, 3, 2, 4]))) == (
        pytest.approx(0.8)
    )
    # ties share their mean rank: ranks (1.5, 1.5, 3) against (1, 2, 3)
    assert float(spearman(torch.tensor([1.0, 1, 2]), torch.tensor([1.0, 2, 3]))) == (
        pytest.approx(0.75**0.5)
    )
    assert torch.isnan(spearman(torch.ones(3), torch.tensor([1.0, 2, 3])))


@given(st.lists(st.integers(-1000, 1000), min_size=3, max_size=12, unique=True))
def test_spearman_is_invariant_to_monotone_transforms(values):
    x = torch.tensor(values, dtype=torch.float64)
    y = torch.sin(x)
    # x**3 + x is strictly increasing and exact in float64 for these integers
    assert float(spearman(x, y)) == pytest.approx(float(spearman(x**3 + x, y)))
    assert float(spearman(x, -x)) == pytest.approx(-1.0)


def test_agreement_of_a_perfect_rank_relation_is_one_with_a_zero_width_interval():
    n_heads, n_prompts = 6, 5
    conc = torch.linspace(0.1, 0.9, n_heads, dtype=torch.float64).expand(n_prompts, n_heads)
    effect = -torch.linspace(0.2, 3.0, n_heads, dtype=torch.float64)[:, None].expand(
        n_heads, n_prompts
    )
    (overall, layer0, layer1) = agreement(
        kind="ZeroAblation",
        metric="normalized_entropy",
        layers=[0, 0, 0, 1, 1, 1],
        per_prompt_effect=effect,
        per_prompt_concentration=conc,
        indices=bootstrap_indices(n_prompts, 50, 0),
        level=0.95,
    )
    assert (overall.layer, overall.n_heads) == (None, 6)
    assert (layer0.layer, layer1.layer) == (0, 1)
    for entry in (overall, layer0, layer1):
        assert (entry.rho, entry.ci_low, entry.ci_high) == pytest.approx((1.0, 1.0, 1.0))


def test_agreement_skips_layers_with_fewer_than_three_heads():
    entries = agreement(
        kind="ZeroAblation",
        metric="sink_mass",
        layers=[0, 0, 0, 1],
        per_prompt_effect=torch.randn(4, 3, generator=torch.Generator().manual_seed(0)),
        per_prompt_concentration=torch.rand(3, 4, generator=torch.Generator().manual_seed(1)),
        indices=bootstrap_indices(3, 20, 0),
        level=0.9,
    )
    assert [(e.layer, e.n_heads) for e in entries] == [(None, 4), (0, 3)]


def test_instructive_rows_rank_disagreement_and_skip_rows_without_effect():
    n_heads = 4
    normalized = torch.tensor([0.1, 0.2, 0.6, 0.9], dtype=torch.float64)
    # zero ablation: the most concentrated head has the smallest effect and vice versa;
    # value scale: effects near zero (<= 0.1 x scale 2), in the opposite order
    zero = [-0.01, -0.5, -1.0, -1.8]
    value = [-0.05, -0.04, -0.02, -0.01]
    kinds = ["ZeroAblation"] * n_heads + ["ValueScale"] * n_heads
    clean = torch.full((N,), 2.0)
    result = make_result(
        torch.stack([clean + e for e in zero + value]),
        clean,
        torch.zeros(N),
        kinds,
        [f"L0H{h % n_heads} {k}" for h, k in enumerate(kinds)],
    )
    conc = make_concentration({"normalized_entropy": normalized.expand(N, 1, n_heads).clone()})
    top = build_report(result, conc, n_bootstrap=10).instructive(2)
    # L0H0 (most concentrated, effect 0.01 <= 0.1 x scale 2) is never instructive: its
    # rank gap is large only because a tiny effect ranks last
    assert [(row.kind, row.site.label) for row, _ in top] == [
        ("ZeroAblation", "L0H3"),
        ("ZeroAblation", "L0H1"),
    ]
    assert "1st of 4 by |effect|, but 4th of 4 by concentration" in top[0][1]
