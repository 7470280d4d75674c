"""The examples of issue 37 (items 3 and 7), each pinned: a stored value whose invariants
fail, or a file from an older interv, is refused in one line naming the file and the field,
with advice that works; nothing renders a number that misleads.

Each case writes a circuit directory from the hand-made fixtures, damages one file the way
the issue did, and runs ``interv report DIR --out NEW`` (or the reader it names)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from _circuit_fixtures import make_circuit, make_concentration, make_curve
from test_stored_files import _baselines

import interv.circuits.store as circuit_store
from interv.circuits.mission import mission_link
from interv.cli import main
from interv.errors import IntervError
from interv.sweeps import store as sweeps


def _circuit_dir(path: Path) -> Path:
    circuit = make_circuit()
    path.mkdir()
    (path / "circuit.json").write_text(json.dumps(circuit.to_dict()))
    (path / "faithfulness.json").write_text(json.dumps(make_curve(circuit).to_dict()))
    link = mission_link(circuit, make_concentration(), n_bootstrap=20)
    (path / "mission.json").write_text(json.dumps(link.to_dict()))
    return path


def _edit(path: Path, change) -> None:
    data = json.loads(path.read_text())
    change(data)
    path.write_text(json.dumps(data))


def _report(directory: Path, capsys) -> str:
    """``interv report DIR --out NEW``'s error, checked to be one line; "" if it rendered."""
    code = main(["report", str(directory), "--out", str(directory.parent / "out")])
    err = capsys.readouterr().err.strip()
    if code == 0:
        return ""
    assert code == 2 and "\n" not in err and "Traceback" not in err, err
    return err


@pytest.mark.parametrize("token", ["Infinity", "1e400", "NaN", "-Infinity"])
def test_a_cpr_that_is_not_a_finite_number_is_refused(token, tmp_path, capsys):
    run = _circuit_dir(tmp_path / "run")
    path = run / "faithfulness.json"
    path.write_text(re.sub(r'"cpr": [^,]+', f'"cpr": {token}', path.read_text()))
    err = _report(run, capsys)
    assert re.search(
        r"faithfulness\.json' is damaged: faithfulness curve\.cpr must be a finite", err
    )


def test_a_cpr_the_curve_does_not_give_is_refused(tmp_path, capsys):
    run = _circuit_dir(tmp_path / "run")
    _edit(run / "faithfulness.json", lambda d: d.update(cpr=0.5))
    err = _report(run, capsys)
    assert "faithfulness.json' is damaged" in err and "cpr is 0.5 but the stored curve" in err


def test_a_circuit_size_beyond_the_graph_is_refused(tmp_path, capsys):
    run = _circuit_dir(tmp_path / "run")
    _edit(run / "faithfulness.json", lambda d: d["n_edges_kept"].__setitem__(-1, 10**30))
    assert "faithfulness.json' is damaged: faithfulness curve: n_edges_kept" in _report(run, capsys)


def test_circuit_sizes_of_another_graph_are_refused_beside_the_circuit(tmp_path, capsys):
    run = _circuit_dir(tmp_path / "run")  # 81 edges; the sizes of a 10,000-edge graph
    fractions = json.loads((run / "faithfulness.json").read_text())["fractions"]
    kept = [max(1, round(f * 10_000)) for f in fractions]
    _edit(run / "faithfulness.json", lambda d: d.update(n_edges_kept=kept))
    err = _report(run, capsys)
    assert "faithfulness.json' does not belong with" in err
    assert "n_edges_kept[0] is 10 at fraction 0.001, but a graph of 81 edges" in err


@pytest.mark.parametrize(
    ("change", "field"),
    [
        (lambda d: d.update(sentences={}), r"mission link\.sentences must hold exactly the keys"),
        (
            lambda d: d["heads"][0].update(concentration={}),
            r"mission link\.heads\[0\]\.concentration must hold exactly the keys",
        ),
    ],
)
def test_a_tampered_mission_link_is_refused_in_one_line(change, field, tmp_path, capsys):
    run = _circuit_dir(tmp_path / "run")
    _edit(run / "mission.json", change)
    assert re.search(r"mission\.json' is damaged: " + field, _report(run, capsys))


def test_a_lone_surrogate_in_a_stored_name_is_refused_naming_the_field(tmp_path, capsys):
    run = _circuit_dir(tmp_path / "run")
    path = run / "circuit.json"
    path.write_text(path.read_text().replace('"task": "toy-task"', '"task": "toy-task\\ud83e"'))
    err = _report(run, capsys)
    assert "circuit.json' is damaged: circuit.task holds a lone surrogate" in err


def _before_provenance(data: dict) -> None:
    """``circuit.json`` as interv wrote it before provenance: the prompt count and unit on
    the circuit, none in its scores."""
    del data["edge_scores"]["provenance"], data["edge_scores"]["unit"]
    data.update(n_prompts=8, unit="logits")


def test_a_circuit_from_before_provenance_is_told_apart_from_damage(tmp_path, capsys):
    run = _circuit_dir(tmp_path / "run")
    _edit(run / "circuit.json", _before_provenance)
    err = _report(run, capsys)
    assert "circuit.json' was written by an interv from before provenance" in err
    assert "is damaged" not in err and "rerun the interv circuit command into a new --out" in err


def _resume(run: Path) -> None:
    with circuit_store.CircuitStore.open(run, {"model": "toy-2l"}) as store:
        circuit_store.discover_resumable(
            store, scores=lambda: None, discover=lambda **_: None, finish=False
        )


def test_resuming_on_scores_from_before_provenance_names_the_file(tmp_path):
    scores = make_circuit().scores.to_dict()
    del scores["provenance"], scores["unit"]
    with circuit_store.CircuitStore.open(tmp_path / "run", {"model": "toy-2l"}) as store:
        store.write_scores(scores)
    with pytest.raises(IntervError, match=r"scores\.json' was written by an interv from before "):
        _resume(tmp_path / "run")


def test_resuming_on_scores_with_an_extra_key_names_the_file(tmp_path):
    scores = make_circuit().scores.to_dict()
    scores["extra"] = 1
    with circuit_store.CircuitStore.open(tmp_path / "run", {"model": "toy-2l"}) as store:
        store.write_scores(scores)
    with pytest.raises(
        IntervError, match=r"scores\.json' is damaged: edge scores has unknown fields \['extra'\]"
    ):
        _resume(tmp_path / "run")


def test_a_sweep_from_before_provenance_is_not_called_damaged(tmp_path):
    baselines = json.loads(json.dumps(_baselines()))
    del baselines["provenance"]
    (tmp_path / sweeps.BASELINES).write_text(json.dumps(baselines))
    with pytest.raises(IntervError) as error:
        sweeps.read_baselines(tmp_path)
    message = str(error.value)
    assert "baselines.json' was written by an interv from before provenance" in message
    assert "rerun the sweep into a new --out" in message
    assert "damaged" not in message.split(":")[0] and "restore the file" not in message


def test_a_circuit_json_that_is_a_directory_is_refused_with_advice_that_works(tmp_path, capsys):
    run = _circuit_dir(tmp_path / "run")
    (run / "circuit.json").unlink()
    (run / "circuit.json").mkdir()
    err = _report(run, capsys)
    assert "circuit.json' is a directory" in err
    assert "move it out of" in err and "into a new --out" in err
    assert "to finish it (it resumes)" not in err  # a rerun in place would fail again
