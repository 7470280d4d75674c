"""build_report: the report's numbers are the engine's numbers, with scope and units."""

from __future__ import annotations

import json

import pytest
import torch
from _report_fixtures import make_concentration, make_result

from interv.analysis.concentration import METRICS
from interv.engine.interventions import (
    ActivationPatch,
    MeanAblation,
    ResampleAblation,
    ValueScale,
    ZeroAblation,
)
from interv.engine.sites import Site
from interv.errors import IntervError
from interv.report.render import to_json
from interv.report.report import Report
from interv.report.table import build_report

N_PROMPTS = 6


def _toy(seed: int = 0):
    generator = torch.Generator().manual_seed(seed)
    interventions = [
        ZeroAblation(0, 1),
        MeanAblation(1, 0, reference="clean"),
        ActivationPatch("z", 1, 1, direction="denoise"),
        ActivationPatch("resid_pre", 1, direction="denoise", positions=(3,)),
    ]
    values = torch.randn(len(interventions), N_PROMPTS, generator=generator)
    clean = torch.randn(N_PROMPTS, generator=generator) + 3
    corrupted = torch.randn(N_PROMPTS, generator=generator)
    result = make_result(
        values,
        clean,
        corrupted,
        [type(iv).__name__ for iv in interventions],
        [iv.describe() for iv in interventions],
        [iv.base_run for iv in interventions],
        sites=[iv.site for iv in interventions],
    )
    per_prompt = {
        name: torch.rand(N_PROMPTS, 2, 2, generator=generator, dtype=torch.float64)
        for name in METRICS
    }
    return interventions, result, make_concentration(per_prompt), per_prompt


def test_report_numbers_equal_the_engine_numbers():
    interventions, result, conc, per_prompt = _toy()
    report = build_report(result, conc, interventions=interventions, n_bootstrap=200)
    baselines = {"clean": result.clean, "corrupted": result.corrupted}
    for j, row in enumerate(report.rows):
        effect = result.values[j].double() - baselines[result.base_runs[j]].double()
        assert row.per_prompt_effect == pytest.approx(effect.tolist())
        assert row.effect_mean == pytest.approx(float(effect.mean()))
        assert row.effect_std == pytest.approx(float(effect.std()))
        assert (row.effect_min, row.effect_max) == pytest.approx(
            (float(effect.min()), float(effect.max()))
        )
        assert row.effect_ci_low <= row.effect_mean <= row.effect_ci_high
        assert row.semantics == result.descriptions[j]
    patch_rows = [row for row in report.rows if row.kind == "ActivationPatch"]
    assert [row.recovery for row in patch_rows] == pytest.approx(
        result.mean_recovery()[2:].tolist()
    )
    assert report.rows[0].recovery is None
    for row in report.rows[:3]:
        for name in METRICS:
            expected = per_prompt[name][:, row.site.layer, row.site.head].mean()
            assert row.concentration[name] == pytest.approx(float(expected))
            expected_sd = per_prompt[name][:, row.site.layer, row.site.head].std()
            assert row.concentration_std[name] == pytest.approx(float(expected_sd))
    assert report.rows[3].concentration is None
    assert report.header.effect_scale == pytest.approx(
        abs(float(result.clean.mean() - result.corrupted.mean()))
    )


def test_result_effect_is_measured_from_each_interventions_base_run():
    values = torch.tensor([[1.0, 2.0, 3.0], [0.5, 0.25, 4.0], [9.0, 8.0, 7.0]])
    clean = torch.tensor([2.0, 2.0, 1.0])
    corrupted = torch.tensor([-1.0, 0.0, 3.0])
    runs = ["clean", "corrupted", "clean"]
    result = make_result(values, clean, corrupted, ["A", "B", "C"], ["a", "b", "c"], runs)
    expected = [[-1.0, 0.0, 2.0], [1.5, 0.25, 1.0], [7.0, 6.0, 6.0]]  # by hand
    assert result.effect.dtype == torch.float64
    assert result.effect.tolist() == expected
    assert result.effect_scale == pytest.approx(abs(5 / 3 - 2 / 3))
    report = build_report(result, make_concentration({"entropy": torch.rand(3, 1, 1)}))
    assert [list(row.per_prompt_effect) for row in report.rows] == expected
    assert report.header.effect_scale == result.effect_scale
    frame = result.to_pandas()
    assert frame["effect"].tolist() == [x for row in expected for x in row]


def test_denoising_patch_effect_is_measured_from_the_corrupted_run():
    interventions, result, conc, _ = _toy()
    report = build_report(result, conc, interventions=interventions, n_bootstrap=50)
    patch = report.rows[2]
    assert patch.base_run == "corrupted"
    assert patch.effect_mean == pytest.approx(float((result.values[2] - result.corrupted).mean()))


def test_every_row_has_a_semantics_sentence_and_every_concentration_number_a_unit():
    interventions, result, conc, _ = _toy()
    report = build_report(result, conc, interventions=interventions, n_bootstrap=50)
    for row in report.rows:
        assert row.semantics.strip()
        if row.concentration is not None:
            assert set(row.concentration) <= set(report.header.concentration_units)
    assert all(report.header.concentration_units[name] for name in METRICS)
    assert report.header.metric_unit == "logits"


def test_constant_effect_has_a_zero_width_interval():
    clean = torch.full((N_PROMPTS,), 2.0)
    result = make_result(
        torch.full((1, N_PROMPTS), 1.5), clean, torch.zeros(N_PROMPTS), ["ZeroAblation"], ["L0H0 x"]
    )
    conc = make_concentration({"entropy": torch.rand(N_PROMPTS, 1, 1)})
    row = build_report(result, conc, n_bootstrap=100).rows[0]
    assert (row.effect_ci_low, row.effect_mean, row.effect_ci_high) == pytest.approx((-0.5,) * 3)


def test_bootstrap_interval_is_reproducible_from_its_seed():
    interventions, result, conc, _ = _toy()
    first = build_report(result, conc, interventions=interventions, n_bootstrap=100, seed=3)
    again = build_report(result, conc, interventions=interventions, n_bootstrap=100, seed=3)
    other = build_report(result, conc, interventions=interventions, n_bootstrap=100, seed=4)
    assert first.rows[0].effect_ci_low == again.rows[0].effect_ci_low
    assert first.rows[0].effect_ci_low != other.rows[0].effect_ci_low
    assert first.header.n_bootstrap == 100 and first.header.seed == 3


def test_rows_take_their_sites_from_the_results_data_not_from_the_sentences():
    interventions = [
        ZeroAblation(1, 0),
        ResampleAblation(0, 1, positions=(4,)),
        ActivationPatch("resid_pre", 1, positions=(3,)),
        ValueScale(1, 1, key_positions=(0,), factor=0.0),
    ]
    sites = [iv.site for iv in interventions]
    assert sites == [
        Site("z", 1, 0),
        Site("z", 0, 1, (4,)),
        Site("resid_pre", 1, positions=(3,)),
        Site("z", 1, 1),
    ]
    result = make_result(
        torch.ones(4, N_PROMPTS),
        torch.full((N_PROMPTS,), 2.0),
        torch.zeros(N_PROMPTS),
        [type(iv).__name__ for iv in interventions],
        ["a sentence that names L0H0 but is about another site"] * 4,
        sites=sites,
    )
    conc = make_concentration({"entropy": torch.rand(N_PROMPTS, 2, 2)})
    report = build_report(result, conc, n_bootstrap=10)
    assert [row.site for row in report.rows] == sites
    assert [row.label for row in report.rows] == ["L1H0", "L0H1@4", "L1 resid_pre@3", "L1H1"]


def test_header_names_the_answer_position_as_the_query():
    interventions, result, conc, _ = _toy()
    header = build_report(result, conc, interventions=interventions, n_bootstrap=10).header
    assert "answer position" in header.query_positions
    assert header.sink_positions == (0,)
    assert "causal" in header.mask_rule


def test_concentration_of_other_prompts_is_refused_with_both_counts():
    interventions, result, _, _ = _toy()
    other = make_concentration({"entropy": torch.rand(N_PROMPTS + 1, 2, 2)})
    with pytest.raises(IntervError, match=r"different numbers of prompts \(6 and 7\)"):
        build_report(result, other, interventions=interventions)


def test_wrong_number_of_interventions_is_refused():
    interventions, result, conc, _ = _toy()
    with pytest.raises(IntervError, match="3 interventions for 4 result rows"):
        build_report(result, conc, interventions=interventions[:3])


def test_report_round_trips_through_strict_json():
    generator = torch.Generator().manual_seed(1)
    heads = [(layer, head) for layer in range(2) for head in range(2)]
    interventions = [ZeroAblation(layer, head) for layer, head in heads]
    result = make_result(
        torch.randn(4, N_PROMPTS, generator=generator),
        torch.full((N_PROMPTS,), 2.0),
        torch.zeros(N_PROMPTS),
        ["ZeroAblation"] * 4,
        [iv.describe() for iv in interventions],
        sites=[iv.site for iv in interventions],
    )
    conc = make_concentration(
        {"normalized_entropy": torch.rand(N_PROMPTS, 2, 2, generator=generator)}
    )
    report = build_report(result, conc, n_bootstrap=50)
    assert report.agreement, "four heads of one kind must give an all-layer agreement"
    data = json.loads(to_json(report), parse_constant=lambda c: pytest.fail(f"non-strict {c}"))
    again = Report.from_dict(data)
    assert again.rows == report.rows

    def normalized_entropy_agreement(r: Report) -> list[tuple]:
        return [
            (a.layer, a.n_heads, a.rho, a.ci_low, a.ci_high)
            for a in r.agreement
            if a.metric == "normalized_entropy"
        ]

    assert normalized_entropy_agreement(again) == normalized_entropy_agreement(report)
    assert len(again.agreement) == len(report.agreement)
    assert again.header == report.header


def test_non_report_json_is_refused():
    with pytest.raises(IntervError, match="not a saved interv report"):
        Report.from_dict({"rows": []})
