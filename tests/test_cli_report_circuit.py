"""``interv report DIR`` on a directory that ``interv circuit`` wrote: circuit.md and
circuit.html rendered again from the stored JSON, under the rules of every report."""

from __future__ import annotations

import hashlib
import json
import os
import re
from pathlib import Path

import pytest

import interv.circuits.store as circuit_store
import interv.cli.report_circuit as report_circuit
from interv.circuits import CircuitResult, FaithfulnessCurve
from interv.circuits.discovery import FORMAT as CIRCUIT_FORMAT
from interv.circuits.mission import MissionLink, mission_link
from interv.cli import main
from interv.report.circuit import circuit_markdown
from interv.report.circuit_page import circuit_page
from tests._circuit_fixtures import make_circuit, make_concentration, make_curve

OUTPUTS = ("circuit.json", "faithfulness.json", "mission.json", "circuit.md", "circuit.html")


def _snapshot(root: Path) -> dict[str, str]:
    return {
        str(p.relative_to(root)): "dir"
        if p.is_dir()
        else hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
    }


def _circuit_dir(path: Path, *, stale: bool = True) -> Path:
    """A circuit directory as interv circuit leaves it (its store, its five outputs), built
    from the hand-made fixtures through the command's own store; ``stale``: the Markdown and
    page written are placeholders (an older renderer's), so a re-render changes them."""
    circuit = make_circuit()
    curve = make_curve(circuit)
    link = mission_link(circuit, make_concentration())
    with circuit_store.CircuitStore.open(path, {"model": "toy-2l", "task": "toy"}) as store:
        store.write_scores({"format": "placeholder"})
        store.write_output("circuit.json", json.dumps(circuit.to_dict()) + "\n")
        store.write_output("faithfulness.json", json.dumps(curve.to_dict(), indent=1) + "\n")
        store.write_output("mission.json", json.dumps(link.to_dict(), indent=1) + "\n")
        md = "# stale\n" if stale else circuit_markdown(circuit, curve, link)
        page = "<html>stale</html>\n" if stale else circuit_page(circuit, curve, link)
        store.write_output("circuit.md", md)
        store.write_output("circuit.html", page)
        store.finish()
    return path


def test_the_formats_agree_with_the_writers():
    assert report_circuit.CIRCUIT_FORMAT == CIRCUIT_FORMAT
    assert report_circuit.RUN_FORMAT == circuit_store.FORMAT


def test_a_circuit_directory_is_re_rendered_in_place_from_its_json(tmp_path, capsys):
    run = _circuit_dir(tmp_path / "run")
    before = _snapshot(run)
    assert main(["report", str(run)]) == 0
    out = capsys.readouterr().out
    assert f"circuit re-rendered to {run}/ (circuit.md, circuit.html)" in out
    assert "toy-2l on toy-task, 81 edges" in out and "semantics: EAP scores" in out
    circuit = CircuitResult.from_dict(json.loads((run / "circuit.json").read_text()))
    curve = FaithfulnessCurve.from_dict(json.loads((run / "faithfulness.json").read_text()))
    link = MissionLink.from_dict(json.loads((run / "mission.json").read_text()))
    assert (run / "circuit.md").read_text() == circuit_markdown(circuit, curve, link)
    assert (run / "circuit.html").read_text() == circuit_page(circuit, curve, link)
    after = _snapshot(run)
    changed = {name for name in before if before[name] != after.get(name)}
    assert changed == {"circuit.md", "circuit.html", ".interv-files.json"}
    # the new files are listed as interv's: a second re-render is accepted and identical
    assert main(["report", str(run)]) == 0
    assert {k: v for k, v in _snapshot(run).items() if k != ".interv-files.json"} == {
        k: v for k, v in after.items() if k != ".interv-files.json"
    }


def test_a_circuit_is_rendered_into_out_leaving_the_input_alone(tmp_path, capsys):
    run = _circuit_dir(tmp_path / "run")
    before = _snapshot(run)
    assert main(["report", str(run), "--out", str(tmp_path / "again")]) == 0
    assert _snapshot(run) == before
    assert sorted(p.name for p in (tmp_path / "again").iterdir()) == [
        ".interv-files.json",
        "circuit.html",
        "circuit.md",
    ]
    assert "# Circuit: toy-2l on toy-task" in (tmp_path / "again" / "circuit.md").read_text()


def test_an_edited_page_is_never_overwritten(tmp_path, capsys):
    run = _circuit_dir(tmp_path / "run")
    (run / "circuit.html").write_text("<html>my notes</html>")
    before = _snapshot(run)
    assert main(["report", str(run)]) == 2
    err = capsys.readouterr().err
    assert "interv did not write" in err and "pass --out DIR" in err
    assert _snapshot(run) == before  # nothing written, circuit.md included


def test_a_foreign_file_in_out_is_refused(tmp_path, capsys):
    run = _circuit_dir(tmp_path / "run")
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "notes.txt").write_text("someone's")
    before = _snapshot(tmp_path)
    assert main(["report", str(run), "--out", str(tmp_path / "mine")]) == 2
    assert "holds files interv did not write" in capsys.readouterr().err
    assert _snapshot(tmp_path) == before


DAMAGE = [
    ("circuit.json", lambda d: d.pop("edges"), r"circuit\.json' is damaged: .*'edges'"),
    ("circuit.json", lambda d: d.update(format="x/1"), r"circuit\.json': field 'format' must be"),
    (
        "circuit.json",
        lambda d: d["status"].__setitem__(0, "guessed"),
        r"circuit\.json' is damaged: circuit\.status\[0\] must be one of .*; got 'guessed'",
    ),
    ("faithfulness.json", lambda d: d.pop("mean"), r"faithfulness\.json' is damaged: .*'mean'"),
    (
        "mission.json",
        lambda d: d.pop("heads"),
        r"mission\.json' is damaged: .*missing field 'heads'",
    ),
    (
        "mission.json",
        lambda d: d["heads"][0].update(strength="big"),
        r"mission\.json' is damaged: .*heads\[0\]\.strength must be a number; got 'big'",
    ),
]


@pytest.mark.parametrize(("name", "damage", "pattern"), DAMAGE)
def test_a_damaged_file_is_refused_naming_the_file_and_the_field(
    name, damage, pattern, tmp_path, capsys
):
    run = _circuit_dir(tmp_path / "run")
    data = json.loads((run / name).read_text())
    damage(data)
    (run / name).write_text(json.dumps(data))
    before = _snapshot(run)
    assert main(["report", str(run)]) == 2
    err = capsys.readouterr().err
    assert str(run / name) in err
    assert re.search(pattern, err), err
    assert _snapshot(run) == before


def test_invalid_json_names_the_file(tmp_path, capsys):
    run = _circuit_dir(tmp_path / "run")
    (run / "circuit.json").write_text('{"format": "interv.circuit/1", "edges": [')
    assert main(["report", str(run)]) == 2
    err = capsys.readouterr().err
    assert f"circuit file {str(run / 'circuit.json')!r} is not valid JSON" in err


def test_an_unfinished_run_says_to_rerun_it(tmp_path, capsys):
    run = tmp_path / "run"
    with circuit_store.CircuitStore.open(run, {"model": "toy-2l"}) as store:
        store.write_scores({"format": "placeholder"})
    assert main(["report", str(run)]) == 2
    err = capsys.readouterr().err
    assert "holds no circuit.json (the run's status is 'running')" in err
    assert "rerun the same interv circuit command" in err


def test_a_missing_curve_leaves_its_section_out(tmp_path, capsys):
    run = _circuit_dir(tmp_path / "run")
    os.unlink(run / "faithfulness.json")
    assert main(["report", str(run)]) == 0
    assert "left out (not in" in capsys.readouterr().out
    assert "## Faithfulness" not in (run / "circuit.md").read_text()


def test_a_link_is_refused_not_followed(tmp_path, capsys):
    run = _circuit_dir(tmp_path / "run")
    (tmp_path / "other.md").write_text("elsewhere")
    os.unlink(run / "circuit.md")
    os.symlink(tmp_path / "other.md", run / "circuit.md")
    assert main(["report", str(run)]) == 2
    assert "is a symbolic link" in capsys.readouterr().err
    assert (tmp_path / "other.md").read_text() == "elsewhere"


def test_csv_is_refused_for_a_circuit(tmp_path, capsys):
    run = _circuit_dir(tmp_path / "run")
    assert main(["report", str(run), "--csv"]) == 2
    assert "is a circuit directory (interv circuit): --csv and --parquet" in (
        capsys.readouterr().err
    )


def test_a_running_circuit_command_is_not_raced(tmp_path, capsys):
    run = _circuit_dir(tmp_path / "run")
    with circuit_store.CircuitStore.open(run, {"model": "toy-2l", "task": "toy"}):
        assert main(["report", str(run)]) == 2
    assert "is being written by interv circuit" in capsys.readouterr().err


def test_a_zoo_circuit_run_re_renders_to_the_same_files(tmp_path, capsys):
    out = tmp_path / "run"
    argv = ["circuit", "induction-2l", "--n-pairs", "4", "--top-k", "3", "--audit", "2"]
    assert main([*argv, "--out", str(out), "--quiet"]) == 0
    before = _snapshot(out)
    assert main(["report", str(out), "--out", str(tmp_path / "again")]) == 0
    for name in ("circuit.md", "circuit.html"):
        assert (tmp_path / "again" / name).read_bytes() == (out / name).read_bytes(), name
    assert main(["report", str(out)]) == 0
    assert {k: v for k, v in _snapshot(out).items() if k != ".interv-files.json"} == {
        k: v for k, v in before.items() if k != ".interv-files.json"
    }


def test_a_broken_sweep_manifest_is_left_to_the_sweep_path(tmp_path, capsys):
    (tmp_path / "sweep").mkdir()
    (tmp_path / "sweep" / "manifest.json").write_text("{not json")
    assert main(["report", str(tmp_path / "sweep")]) == 2
    err = capsys.readouterr().err
    assert "manifest.json" in err and "circuit" not in err


def test_a_mission_or_curve_of_another_run_is_refused_naming_the_field(tmp_path, capsys):
    """A mission.json of another model (heads of a 3-layer model) or a faithfulness.json of
    another run's prompts copied into the directory: the page is not rendered with them."""
    run = _circuit_dir(tmp_path / "run")
    other = make_circuit(provenance=make_circuit().provenance.replace(model="toy-3l"))
    concentration = make_concentration(provenance=other.provenance.replace(metric=None))
    foreign = {
        "mission.json": (mission_link(other, concentration).to_dict(), "different models"),
        "faithfulness.json": (
            make_curve(
                make_circuit(provenance=other.provenance.replace(model="toy-2l", prompts="x"))
            ).to_dict(),
            "different prompts",
        ),
    }
    for name, (data, words) in foreign.items():
        kept = (run / name).read_text()
        (run / name).write_text(json.dumps(data))
        before = _snapshot(run)
        assert main(["report", str(run)]) == 2
        assert words in capsys.readouterr().err
        assert _snapshot(run) == before
        (run / name).write_text(kept)
