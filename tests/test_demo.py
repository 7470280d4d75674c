"""``interv demo`` and ``interv report`` end to end on the zoo model (no SmolLM2 here)."""

from __future__ import annotations

import contextlib
import io
import json
import time
from html.parser import HTMLParser

import pytest
import torch

from interv import ZeroAblation, load_task, run
from interv.cli import main
from interv.models.loading import load_model
from interv.report.report import Report

pytestmark = pytest.mark.slow  # whole demo runs: out of the quick loop


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    out = tmp_path_factory.mktemp("demo") / "interv-report"
    stdout = io.StringIO()
    start = time.perf_counter()
    with contextlib.redirect_stdout(stdout):
        status = main(["demo", "--out", str(out)])
    seconds = time.perf_counter() - start
    data = json.loads((out / "report.json").read_text(encoding="utf-8"))
    return status, out, stdout.getvalue(), Report.from_dict(data), seconds


def test_demo_writes_every_format_and_prints_where_and_the_three_rows(demo):
    status, out, printed, _, seconds = demo
    assert status == 0
    for name in ("report.md", "report.html", "report.json", "report.csv", "attention_row.png"):
        assert (out / name).is_file()
    assert str(out) in printed
    numbered = [line for line in printed.splitlines() if line.strip()[:2] in {"1.", "2.", "3."}]
    assert len(numbered) == 3 and all("flags:" in line for line in numbered)
    assert seconds < 120, f"demo took {seconds:.0f} s (target: under 60 s on 2 cores)"


def test_demo_report_has_every_intervention_family(demo):
    report = demo[3]
    header = report.header
    n_heads = header.n_layers * header.n_heads
    per_head = {"ZeroAblation", "MeanAblation", "ResampleAblation", "ValueScale"}
    counts = {kind: sum(row.kind == kind for row in report.rows) for kind in report.kinds}
    assert all(counts[kind] == n_heads for kind in per_head)
    # one z patch per head, one resid_pre patch per layer x position real in every prompt
    patched = [r.site.positions for r in report.rows if r.site.component == "resid_pre"]
    shared = load_task("induction", n_pairs=header.n_prompts).tokenize(load_model("induction-2l"))
    assert sorted({p for (p,) in patched}) == list(shared.shared_positions)
    assert counts["ActivationPatch"] == n_heads + header.n_layers * len(shared.shared_positions)
    assert report.header.model == "interv-zoo/induction-2l"
    assert "answer position" in report.header.query_positions


def test_demo_numbers_equal_a_separate_engine_run(demo):
    report = demo[3]
    model = load_model("induction-2l")
    task = load_task("induction", n_pairs=16, seed=0).tokenize(model)
    result = run(model, task, [ZeroAblation(0, 2)], "logit_diff")
    (row,) = [r for r in report.rows if r.kind == "ZeroAblation" and r.site.label == "L0H2"]
    effect = result.values[0].double() - result.clean.double()
    assert row.effect_mean == pytest.approx(float(effect.mean()), abs=1e-5)
    assert report.header.clean_mean == pytest.approx(float(result.clean.mean()), abs=1e-5)


def test_demo_html_embeds_its_five_figures(demo):
    sources: list[str] = []

    class Images(HTMLParser):
        def handle_starttag(self, tag, attrs):
            if tag == "img":
                sources.append(dict(attrs)["src"])

    Images().feed((demo[1] / "report.html").read_text(encoding="utf-8"))
    assert len(sources) == 5
    assert all(source.startswith("data:image/png;base64,") for source in sources)


def test_report_command_rerenders_a_saved_demo(demo, tmp_path):
    stdout = io.StringIO()
    with contextlib.redirect_stdout(stdout):
        status = main(["report", str(demo[1]), "--out", str(tmp_path)])
    assert status == 0
    again = Report.from_dict(json.loads((tmp_path / "report.json").read_text(encoding="utf-8")))
    assert again.rows == demo[3].rows
    assert torch.isfinite(torch.tensor([r.effect_mean for r in again.rows])).all()


def test_report_command_refuses_a_directory_without_results(tmp_path, capsys):
    assert main(["report", str(tmp_path)]) == 2
    assert "neither a saved report" in capsys.readouterr().err


@pytest.mark.slow
def test_report_command_renders_a_sweep_directory(tmp_path):
    from interv.sweeps import load_sweep
    from interv.sweeps.execute import run_sweep

    config = {
        "model": {"spec": "induction-2l"},
        "task": {"name": "induction", "n_pairs": 4},
        "sweep": {
            "batch_size": 128,
            "interventions": [{"kind": "zero_ablation", "sites": "all_heads"}],
        },
    }
    run_sweep(config, tmp_path / "sweep", progress=False)
    with contextlib.redirect_stdout(io.StringIO()):
        status = main(["report", str(tmp_path / "sweep"), "--out", str(tmp_path / "report")])
    assert status == 0
    report = Report.from_dict(
        json.loads((tmp_path / "report" / "report.json").read_text(encoding="utf-8"))
    )
    stored = load_sweep(tmp_path / "sweep")
    assert [row.semantics for row in report.rows] == list(stored.descriptions)
    expected = (stored.values.double() - stored.clean.double()).mean(-1)
    assert [row.effect_mean for row in report.rows] == pytest.approx(expected.tolist())
    assert all(row.concentration is not None for row in report.rows)


def test_the_readme_demo_lines_write_to_different_default_directories():
    from pathlib import Path

    from interv.demo import DEFAULT_MODEL, DEFAULT_OUT

    readme = (Path(__file__).parent.parent / "README.md").read_text(encoding="utf-8")
    lines = [
        line
        for line in readme.splitlines()
        if line.startswith("interv demo") and "[" not in line and "--pairs" not in line
    ]
    words = [line.split("#")[0].split()[2:] for line in lines]  # after "interv demo"
    models = [  # the model: the first positional argument, else the default
        w[0] if w and not w[0].startswith("-") else DEFAULT_MODEL for w in words
    ]
    assert len(models) == 2 and all("--out" not in line for line in lines)
    assert len({DEFAULT_OUT[model] for model in models}) == 2


@pytest.mark.slow  # zoo-sized but among the quick loop's slowest (issue 32)
def test_a_default_directory_with_a_users_file_is_left_alone(demo, tmp_path, monkeypatch, capsys):
    import interv.demo

    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(interv.demo, "_compute", lambda *args: (demo[3], None))
    (tmp_path / "interv-report").mkdir()
    (tmp_path / "interv-report" / "report.md").write_text("my notes")
    assert main(["demo"]) == 0
    out = capsys.readouterr().out
    assert "interv-report/ holds files interv did not write" in out
    assert "report written to interv-report-2/" in out
    assert (tmp_path / "interv-report" / "report.md").read_text() == "my notes"
    assert (tmp_path / "interv-report-2" / "report.json").is_file()
    assert main(["demo"]) == 0  # a rerun rewrites its own files, in the same place
    assert "report written to interv-report-2/" in capsys.readouterr().out
