"""Reports of screened runs: estimates are flagged, never ranked, and the audit is shown."""

from __future__ import annotations

import json
import math

import pytest
import torch

import interv
from interv._inert import markdown_text
from interv.audit import ESTIMATED, Screen
from interv.engine.interventions import MeanAblation, ZeroAblation
from interv.flags import ESTIMATED_FLAG
from interv.report.page import page_fragment
from interv.report.render import to_csv, to_json, to_markdown
from interv.report.report import Report
from interv.report.table import build_report
from interv.report.views import head_groups

HEADS = [(layer, head) for layer in range(2) for head in range(4)]


@pytest.fixture(scope="module")
def report():
    model = interv.load_model("induction-2l")
    task = interv.load_task("induction", n_pairs=16).tokenize(model)
    screen = Screen(top_k=2, audit=2, alpha=None, seed=0)
    zero = interv.run(model, task, [ZeroAblation(*h) for h in HEADS], screen=screen)
    mean = interv.run(model, task, [MeanAblation(*h) for h in HEADS])  # exact, unscreened
    concentration = interv.concentration(model, task, query_positions=[-1])
    return build_report([zero, mean], concentration, n_bootstrap=100)


def test_estimated_rows_carry_the_flag_the_sentence_and_their_status(report):
    estimated = [row for row in report.rows if not row.exact]
    assert len(estimated) == 4  # 8 zero ablations: 2 verified, 2 audited, 4 estimated
    for row in report.rows:
        assert (row.status == ESTIMATED) == (ESTIMATED_FLAG in row.flags)
        estimated = row.semantics.endswith("estimated by attribution (first-order), not intervened")
        assert estimated == (row.status == ESTIMATED)
    assert {row.status for row in report.rows if row.kind == "MeanAblation"} == {"exact"}
    assert ESTIMATED_FLAG in report.rules_text
    assert any(
        "4 of 16 rows are estimates, not intervention results: estimated by attribution "
        "(first-order), not intervened (flag" in note
        for note in report.notes
    )


def test_estimates_are_never_ranked_with_exact_values(report):
    estimated = {row.index for row in report.rows if not row.exact}
    assert not estimated & {row.index for row, _ in report.instructive(len(report.rows))}
    zero = [a for a in report.agreement if a.kind == "ZeroAblation" and a.layer is None]
    assert zero and all(a.n_heads == 4 for a in zero)  # the 4 exact heads only
    mean = [a for a in report.agreement if a.kind == "MeanAblation" and a.layer is None]
    assert all(a.n_heads == 8 for a in mean)
    grid = report.effect_grid("ZeroAblation")
    for row in report.rows:
        if row.kind == "ZeroAblation":
            assert math.isnan(grid[row.head]) == (not row.exact)
    for group in head_groups(report):
        assert all(row.exact for row in group.rows.values())


def test_the_audit_is_shown_in_every_format(report):
    (summary,) = report.screens
    assert (summary.n_candidates, summary.n_verified, summary.n_audited) == (8, 2, 2)
    assert summary.stopped_by == "one look"
    assert summary.label == "8 zero_ablation interventions"
    markdown = to_markdown(report)
    assert "## Screens and their audits" in markdown
    assert markdown_text(summary.sentence) in markdown
    assert "estimate ≈" in markdown
    page = page_fragment(report)
    assert "Screens and their audits (1)" in page
    # the page sorts an estimate's effect cell as n/a (its text does not start with a number)
    assert "<td>estimate ≈" in page
    assert "status" in to_csv(report).splitlines()[0]


def test_a_saved_report_keeps_statuses_and_screens(report):
    loaded = Report.from_dict(json.loads(to_json(report)))
    assert [row.status for row in loaded.rows] == [row.status for row in report.rows]
    assert loaded.screens[0].sentence == report.screens[0].sentence
    assert loaded.screens[0].miss_bound == report.screens[0].miss_bound
    frame = report.to_pandas()
    assert list(frame["exact"]) == [row.exact for row in report.rows]
    assert set(frame["status"]) == {"exact", "exact (verified)", "exact (audit)", ESTIMATED}


def test_an_old_saved_report_without_statuses_reads_as_exact(report):
    data = json.loads(to_json(report))
    for row in data["rows"]:
        row.pop("status")
        row.pop("estimate")  # added after statuses
    data.pop("screens")
    loaded = Report.from_dict(data)
    assert all(row.exact for row in loaded.rows) and loaded.screens == ()
    assert torch.isfinite(torch.tensor([row.effect_mean for row in loaded.rows])).all()
