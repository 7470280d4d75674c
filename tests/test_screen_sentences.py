"""Every estimated value says how it was estimated: its screen's estimator, named.

A screened run's estimated rows carry the sentence of the screen that produced them (the
estimator with its ``steps`` / ``hvp_steps``), in the result's sentences and records, in a
report's rows, effect cells, notes, Markdown, HTML and CSV; "first-order" only for
attribution. Stored results written before screens named their estimator read back with
what they stored. The expected sentences are written out by hand, not asked of the code.
"""

from __future__ import annotations

import dataclasses
import html
import json

import pytest

import interv
from interv._inert import markdown_text
from interv.audit import ESTIMATED, UNRECORDED_ESTIMATE, Screen
from interv.engine.interventions import ZeroAblation
from interv.engine.results import ScreenOutcome
from interv.report.page import page_fragment
from interv.report.render import to_csv, to_json, to_markdown
from interv.report.report import Report
from interv.report.table import build_report
from interv.report.views import effect_text

HEADS = [(layer, head) for layer in range(2) for head in range(4)]
CHECK = {"top_k": 2, "audit": 1, "alpha": None}
SENTENCES = {
    "attribution": (
        Screen(**CHECK),
        "estimated by attribution (first-order), not intervened",
    ),
    "integrated": (
        Screen(**CHECK, estimator="integrated", steps=3),
        "estimated by integrated gradients (3 path points), not intervened",
    ),
    "gim": (
        Screen(**CHECK, estimator="gim"),
        "estimated by GIM's modified backward (gradient-based; no Taylor term), not intervened",
    ),
    "hvp": (
        Screen(**CHECK, estimator="hvp"),
        "estimated by attribution with Zhang & Wang's HVP correction (second-order), not "
        "intervened",
    ),
    "hvp-2": (
        Screen(**CHECK, estimator="hvp", hvp_steps=2),
        "estimated by Zhang & Wang's multi-step HVP estimate (2 segments, second-order in "
        "each), not intervened",
    ),
}


@pytest.fixture(scope="module")
def zoo():
    model = interv.load_model("induction-2l")
    task = interv.load_task("induction", n_pairs=4, seed=1).tokenize(model)
    return model, task, interv.concentration(model, task, query_positions=[-1])


RUN = ["attribution", "integrated", "gim", "hvp"]  # hvp_steps=2: the same run, a longer one


class Runs(dict):
    """Each estimator's screened run of the 8 zero ablations, run on first use."""

    def __init__(self, model, task):
        super().__init__()
        self.model, self.task = model, task

    def __missing__(self, name):
        ablations = [ZeroAblation(*head) for head in HEADS]
        self[name] = interv.run(self.model, self.task, ablations, screen=SENTENCES[name][0])
        return self[name]


@pytest.fixture(scope="module")
def screened(zoo):
    return Runs(*zoo[:2])


def test_screen_sentences_name_their_estimator_and_first_order_only_for_attribution():
    for name, (screen, expected) in SENTENCES.items():
        assert screen.estimate_sentence() == expected
        assert ("first-order" in expected) == (name == "attribution")
    one_point = Screen(estimator="integrated", steps=1).estimate_sentence()
    assert "1 path point" in one_point and "first-order" in one_point  # the base gradient


@pytest.mark.parametrize("name", RUN)
def test_a_screened_runs_estimates_carry_their_estimators_sentence(screened, name):
    result = screened[name]
    expected = SENTENCES[name][1]
    assert result.status.count(ESTIMATED) == 5  # 8 heads: 2 verified, 1 audited
    for j in range(result.n_interventions):
        if result.status[j] == ESTIMATED:
            assert result.estimate_sentence(j) == expected
            assert result.sentence(j) == f"{result.descriptions[j]}; {expected}"
        else:
            assert result.estimate_sentence(j) == ""
            assert result.sentence(j) == result.descriptions[j]
    assert result.estimate_sentences() == (expected,)
    records = result.to_records()
    assert {r["semantics"].endswith(expected) for r in records if not r["exact"]} == {True}
    assert f"5 of 8 values are estimates (marked ≈, status 'estimated'): {expected}" in repr(result)


@pytest.mark.parametrize("name", RUN)
def test_a_reports_effect_cell_and_notes_name_the_estimator(zoo, screened, name):
    expected = SENTENCES[name][1]
    report = build_report([screened[name]], zoo[2], n_bootstrap=20)
    unit = report.header.metric_unit
    for row in report.rows:
        if row.exact:
            assert row.estimate == "" and "estimated by" not in effect_text(row, unit)
        else:
            assert row.estimate == expected
            assert effect_text(row, unit).startswith("estimate ≈ ")
            assert effect_text(row, unit).endswith(f" {unit}; {expected}")
    note = f"5 of 8 rows are estimates, not intervention results: {expected} (flag"
    assert any(note in text for text in report.notes)
    assert markdown_text(expected) in to_markdown(report)
    assert html.escape(expected) in page_fragment(report)
    assert expected in to_csv(report)
    loaded = Report.from_dict(json.loads(to_json(report)))
    assert [row.estimate for row in loaded.rows] == [row.estimate for row in report.rows]


def _written_before(outcome: ScreenOutcome, method: str) -> dict:
    """``outcome`` as a result stored before screens named their estimator: the screen
    without its estimator fields where they did not exist yet, and the method as written."""
    data = outcome.to_dict()
    if method == "attribution (first-order)":  # before Screen had estimators at all
        for key in ("estimator", "steps", "hvp_steps"):
            del data["audit"]["screen"][key]
    data["audit"]["method"] = method
    return data


def test_stored_results_of_before_read_back_with_the_estimator_they_stored(screened):
    attribution, gim = screened["attribution"], screened["gim"]
    old = ScreenOutcome.from_dict(
        _written_before(attribution.screens[0], "attribution (first-order)")
    )
    result = dataclasses.replace(attribution, screens=(old,))
    assert result.estimate_sentences() == (
        "estimated by attribution (first-order), not intervened",
    )
    # a GIM screen stored by the code before: its method as then written, no "first-order"
    old = ScreenOutcome.from_dict(
        _written_before(gim.screens[0], "GIM's modified backward (gradient-based)")
    )
    result = dataclasses.replace(gim, screens=(old,))
    assert result.estimate_sentences() == (
        "estimated by GIM's modified backward (gradient-based), not intervened",
    )
    # estimated rows without the screen that made them: the estimator is not claimed
    bare = dataclasses.replace(gim, screens=())
    assert bare.estimate_sentences() == (UNRECORDED_ESTIMATE,)
    assert "first-order" not in UNRECORDED_ESTIMATE


def test_a_report_saved_before_rows_named_their_estimator_still_reads(zoo, screened):
    report = build_report([screened["hvp"]], zoo[2], n_bootstrap=20)
    data = json.loads(to_json(report))
    for row in data["rows"]:
        row.pop("estimate")
    loaded = Report.from_dict(data)
    unit = loaded.header.metric_unit
    cells = [effect_text(row, unit) for row in loaded.rows if not row.exact]
    assert len(cells) == 5
    assert all(cell.endswith(f"; {UNRECORDED_ESTIMATE}") for cell in cells)


def test_the_sweep_summary_names_the_estimator_of_its_estimates(screened):
    from interv.cli.sweeps import _summary

    manifest = {"computed_in_last_run": None, "shard": None}
    printed = _summary(screened["integrated"], "out", manifest)
    expected = "3 intervened on exactly, 5 estimated by integrated gradients (3 path points), "
    assert expected + "not intervened; results in out" in printed
    assert "first-order" not in printed


def test_the_attention_viewer_shows_an_estimate_as_one_naming_its_estimator(zoo, screened):
    model, task, _ = zoo
    result = screened["gim"]
    site = result.sites[result.status.index(ESTIMATED)]
    viewer = interv.view_attention(model, task, heads=[(site.layer, site.head)], result=result)
    page = viewer.fragment()
    assert "<b>estimate ≈ " in page and "CI nan" not in page
    assert html.escape(f" logits; {SENTENCES['gim'][1]}") + "</b>" in page
