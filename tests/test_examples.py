"""The runnable examples in examples/ run and print what they promise."""

from __future__ import annotations

import runpy
import sys
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


def test_own_intervention_example_runs_through_run_sweep_and_report(tmp_path, monkeypatch, capsys):
    from interv.engine import protocol

    monkeypatch.setattr(sys, "argv", ["own_intervention.py", "--out", str(tmp_path / "sweep")])
    try:
        runpy.run_path(str(EXAMPLES / "own_intervention.py"), run_name="__main__")
    finally:
        protocol._KINDS.pop("interpolate", None)
    lines = capsys.readouterr().out.splitlines()
    recovery = {line.split("  ", 1)[1]: float(line.split()[1]) for line in lines[:9]}
    full = "L1H0 output (z) moved 1 of the way from the corrupted run's value to the clean run's"
    patch = next(sentence for sentence in recovery if sentence.startswith("denoising: L1H0"))
    assert recovery[f"{full}, in the corrupted run"] == pytest.approx(recovery[patch], abs=1e-3)
    assert (tmp_path / "sweep" / "units.jsonl").is_file()
    assert "semantics: L1H" in lines[-2] and "normalized entropy of that head" in lines[-1]


def test_paths_sweep_example_reports_decomposition_paths_and_interactions(tmp_path):
    from interv.report.sweep import report_from_sweep
    from interv.sweeps import run_sweep

    run_sweep(EXAMPLES / "sweep_paths.toml", tmp_path / "sweep", progress=False)
    report = report_from_sweep(tmp_path / "sweep", n_bootstrap=50)
    assert len(report.decomposition) == 8 and len(report.paths) == 5
    assert [(row.head_a, row.head_b) for row in report.interactions] == [("L1H1", "L1H3")]
    together = next(path for path in report.paths if len(path.receivers) == 4)
    assert together.sender == "L0H2" and together.effect.mean < -3


def test_screened_sweep_example_reports_its_audits_and_flags_its_estimates(tmp_path):
    from interv.flags import ESTIMATED_FLAG
    from interv.report.sweep import report_from_sweep
    from interv.sweeps import run_sweep

    result = run_sweep(EXAMPLES / "sweep_screen.toml", tmp_path / "sweep", progress=False)
    # every head at each of the 22 positions real in all 16 prompts (22 to 28 tokens)
    assert result.n_interventions == 2 * 176 and len(result.screens) == 2
    report = report_from_sweep(tmp_path / "sweep", n_bootstrap=50)
    assert [s.label for s in report.screens] == [
        "176 zero_ablation interventions",
        "176 activation_patch interventions",
    ]
    estimated = [row for row in report.rows if not row.exact]
    assert estimated and all(ESTIMATED_FLAG in row.flags for row in estimated)
    assert len(estimated) == sum(s.n_candidates - s.n_checked for s in report.screens)


@pytest.mark.slow
def test_investigation_example_runs_every_step_on_the_zoo_with_smoke(tmp_path, monkeypatch, capsys):
    out = tmp_path / "report"
    argv = ["investigation.py", "--smoke", "--out", str(out), "--n-bootstrap", "20"]
    monkeypatch.setattr(sys, "argv", argv)
    runpy.run_path(str(EXAMPLES / "investigation.py"), run_name="__main__")
    text = capsys.readouterr().out
    assert text.startswith("InterventionResult: 8 interventions")
    assert "direct effect of L" in text and "path patching (noising)" in text
    assert (out / "report.html").is_file() and "report written to" in text


def test_agreement_pairs_read_as_sixteen_pairs_of_equal_length():
    from interv import PromptPairs

    pairs = PromptPairs.from_jsonl(EXAMPLES / "agreement_pairs.jsonl")
    assert len(pairs.clean) == 16 and set(pairs.targets) == {" is"} and set(pairs.foils) == {" are"}
    for clean, corrupted in zip(pairs.clean, pairs.corrupted, strict=True):
        assert corrupted.split()[1] == clean.split()[1] + "s"  # only the subject's number
