"""Where the answer is: one owner (the tokenized task), either padding side.

- A left-padded task is answered at each prompt's last real token, as the right-padded task
  of the same prompts is (``answer_query_positions() == (-1,)``, equal ``answer_offsets``).
- ``view_attention(model, task, result=run)`` of a left-padded task works, and its report
  equals the right-padded one's (effects and concentration, to float rounding).
- A left-padded sweep's ``interv report DIR`` renders, with the right-padded sweep's numbers.
- A task whose answers no one query position describes is refused before any forward, with
  advice that works (the route it names is run here).
"""

from __future__ import annotations

import dataclasses
import os

import pytest

import interv
from interv.cli import main
from interv.errors import IntervError
from interv.report.sweep import report_from_sweep
from interv.sweeps import run_sweep
from tests._calls import counting_calls

os.environ.setdefault("HF_HUB_OFFLINE", "1")

KINDS = [interv.ZeroAblation(1, 0), interv.ActivationPatch("z", 1, 3), interv.ZeroAblation(0, 2)]


@pytest.fixture(scope="module")
def zoo(induction_zoo):
    return induction_zoo


@pytest.fixture(scope="module")
def sides(zoo):
    """The same prompts (of 23 and 26 tokens) right- and left-padded."""
    pairs = interv.load_task("induction", n_pairs=6, seed=0)
    return {side: pairs.tokenize(zoo, padding_side=side) for side in ("right", "left")}


def test_a_left_padded_task_is_answered_at_each_prompts_last_real_token(sides):
    right, left = sides["right"], sides["left"]
    lengths = right.attention_mask.sum(1)
    assert len(set(lengths.tolist())) > 1  # the padding matters
    assert left.padding_side == "left"
    assert left.answer_offsets == right.answer_offsets == tuple((lengths - 1).tolist())
    assert left.answer_query_positions() == right.answer_query_positions() == (-1,)


def test_view_attention_of_a_left_padded_task_equals_the_right_padded_view(zoo, sides):
    reports = {}
    for side, task in sides.items():
        result = interv.run(zoo, task, KINDS, metric="logit_diff")
        viewer = interv.view_attention(zoo, task, heads=["L1H0", "L1H3"], result=result)
        reports[side] = viewer.report
    right, left = reports["right"], reports["left"]
    for report in (right, left):
        assert report.header.query_positions.startswith("the answer position of each prompt")
    assert left.header.padding_side == "left"
    for a, b in zip(right.rows, left.rows, strict=True):
        assert (a.kind, a.label) == (b.kind, b.label)
        assert b.effect_mean == pytest.approx(a.effect_mean, abs=1e-5)
        for metric, value in a.concentration.items():
            assert b.concentration[metric] == pytest.approx(value, rel=1e-5, abs=1e-6), metric


def test_answers_no_one_query_describes_are_refused_before_the_forward_with_a_route_that_works(
    zoo, sides
):
    left = sides["left"]
    moved = left.answer_positions.clone()
    moved[0] -= 1  # prompt 0 answered one token early: neither "last" nor one common offset
    task = dataclasses.replace(left, answer_positions=moved)
    result = interv.run(zoo, task, KINDS[:1], metric="logit_diff")
    with pytest.raises(IntervError) as refused:
        task.answer_query_positions()
    message = str(refused.value)
    assert f"({list(task.answer_offsets)};" in message
    assert "query_positions explicitly" not in message
    with counting_calls(zoo) as calls, pytest.raises(IntervError) as viewed:
        interv.view_attention(zoo, task, heads=["L1H0"], result=result)
    assert calls == []
    assert str(viewed.value).endswith("and pass that report as result=")
    # the route the message names
    concentration = interv.concentration(zoo, task, query_positions=[-1])
    report = interv.build_report(result, concentration)
    assert "NOT the answer positions" in report.header.query_positions
    viewer = interv.view_attention(zoo, task, heads=["L1H0"], result=report)
    assert viewer.report is report


SWEEP = {
    "model": {"spec": "induction-2l"},
    "task": {"name": "induction", "n_pairs": 6, "seed": 0},
    "sweep": {
        "interventions": [
            {"kind": "zero_ablation", "sites": {"layers": [1]}},
            {"kind": "denoise", "component": "z", "sites": {"layers": [1], "heads": [3]}},
        ]
    },
}


@pytest.mark.slow
def test_a_left_padded_sweep_reports_the_right_padded_sweeps_numbers(tmp_path, capsys):
    reports = {}
    for side in ("right", "left"):
        raw = {**SWEEP, "task": {**SWEEP["task"], "padding_side": side}}
        run_sweep(raw, tmp_path / side, progress=False)
        reports[side] = report_from_sweep(tmp_path / side, n_bootstrap=50)
    assert main(["report", str(tmp_path / "left"), "--out", str(tmp_path / "page")]) == 0
    assert "interv: error" not in capsys.readouterr().err
    right, left = reports["right"], reports["left"]
    assert left.header.padding_side == "left"
    assert left.header.query_positions == right.header.query_positions
    assert left.header.query_positions.startswith("the answer position of each prompt")
    assert left.header.clean_mean == pytest.approx(right.header.clean_mean, abs=1e-5)
    for a, b in zip(right.rows, left.rows, strict=True):
        assert (a.kind, a.label) == (b.kind, b.label)
        assert b.effect_mean == pytest.approx(a.effect_mean, abs=1e-5)
        for metric, value in a.concentration.items():
            assert b.concentration[metric] == pytest.approx(value, rel=1e-5, abs=1e-6), metric
