"""Reports join rows into sections: direct vs indirect, path patches, interactions."""

from __future__ import annotations

import json

import pytest

import interv
from interv.analysis.pairwise import pair_design
from interv.report.render import to_json, to_markdown
from interv.report.report import Report


@pytest.fixture(scope="module")
def report():
    model = interv.load_model("induction-2l")
    task = interv.load_task("induction", n_pairs=12, seed=6).tokenize(model)
    heads = [(1, 0), (1, 2), (0, 2)]
    interventions = [
        *(interv.ZeroAblation(layer, head) for layer, head in heads),
        *(interv.DirectEffect(layer, head) for layer, head in heads),
        interv.PathPatch(0, 2, ((1, 0), (1, 1), (1, 2), (1, 3)), "k"),
        interv.PathPatch(0, 2, (), "logits"),
        *pair_design(heads, "mean"),
    ]
    result = interv.run(model, task, interventions)
    concentration = interv.concentration(model, task, query_positions=[-1])
    return result, concentration, interv.build_report(result, concentration, n_bootstrap=100)


def test_each_head_with_a_direct_effect_gets_total_direct_and_indirect(report):
    result, concentration, built = report
    assert [row.head for row in built.decomposition] == ["L1H0", "L1H2", "L0H2"]
    effect = result.values - result.clean
    for i, row in enumerate(built.decomposition):
        assert row.total.mean == pytest.approx(float(effect[i].mean()), abs=1e-5)
        assert row.direct.mean == pytest.approx(float(effect[3 + i].mean()), abs=1e-5)
        assert row.indirect.mean == pytest.approx(row.total.mean - row.direct.mean, abs=1e-5)
        assert row.direct.ci_low <= row.direct.mean <= row.direct.ci_high
    l0h2 = built.decomposition[2]
    assert abs(l0h2.indirect.mean) > 10 * abs(l0h2.direct.mean)  # the previous-token head
    expected_entropy = float(concentration.per_head("normalized_entropy")[0, 2])
    assert l0h2.normalized_entropy == pytest.approx(expected_entropy, abs=1e-9)


def test_path_rows_carry_sender_and_receivers_concentration(report):
    _, concentration, built = report
    keys, logits = built.paths
    assert keys.sender == "L0H2" and keys.receivers == ("L1H0", "L1H1", "L1H2", "L1H3")
    per_head = concentration.per_head("normalized_entropy")
    assert keys.receivers_normalized_entropy == pytest.approx(per_head[1].tolist(), abs=1e-9)
    assert logits.receivers == ("logits",) and logits.receivers_normalized_entropy == ()
    assert abs(keys.effect.mean) > 10 * abs(logits.effect.mean)


def test_interactions_reach_the_report_with_their_rule_and_both_heads_concentration(report):
    _, _, built = report
    assert len(built.interactions) == 3
    assert built.interactions[0].head_a == "L1H0" and built.interactions[0].head_b == "L1H2"
    assert (
        "compensation" in built.rules_text and "f(AB) - f(A) - f(B)" in built.interaction_semantics
    )


def test_sections_render_and_round_trip_through_json(report):
    _, _, built = report
    text = to_markdown(built)
    for title in ("Direct and indirect effects", "Path patching", "Interactions between heads"):
        assert f"## {title}" in text
    assert "direct effect of L0H2: its output (z) set to zero" in text
    again = Report.from_dict(json.loads(to_json(built)))
    assert again.decomposition == built.decomposition
    assert again.paths == built.paths
    assert again.interactions == built.interactions
