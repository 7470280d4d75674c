"""Every field of every file interv stores, corrupted with a value of the wrong type, is
refused by the file's schema in one line naming the damage; never a traceback, never read.

Each stored file (a circuit directory's ``scores.json``, ``circuit.json``,
``faithfulness.json``, ``mission.json``, an ``exact.jsonl`` line and the manifest; a report's
``report.json``; a sweep's manifest, baselines and the four kinds of unit records) is written
by interv's own writers, then every JSON path in it (the first and last item of each list)
is replaced by a value of another JSON type (hypothesis draws which), and the file's reader
must raise an :class:`~interv.errors.IntervError` with a one-line message. Free-form fields
(a sweep's normalized config, a circuit run's identity, an intervention's parameters, the
versions) hold any JSON and are left out.
"""

from __future__ import annotations

import copy
import dataclasses
import json
import math
import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
from _circuit_fixtures import make_circuit, make_concentration, make_curve, with_stability
from _synthetic_reports import synthetic_report
from hypothesis import given, settings
from hypothesis import strategies as st

from interv._journal import started
from interv._schema import parse
from interv.audit import Screen, verify_screen
from interv.circuits import CircuitResult, EdgeScores, FaithfulnessCurve
from interv.circuits._stored import CircuitManifest, ExactRecord
from interv.circuits.mission import MissionLink, mission_link
from interv.circuits.selection import StableCircuit
from interv.circuits.store import FORMAT as CIRCUIT_RUN
from interv.engine.results import ScreenOutcome
from interv.errors import IntervError
from interv.report.report import Report
from interv.sweeps import store as sweeps

FREE_FORM = {"config", "identity", "params", "versions"}


def _with_selection(circuit: CircuitResult) -> CircuitResult:
    """``circuit`` with a stability selection of two edges, two groups and two resamples."""
    inclusion = torch.zeros(circuit.graph.n_edges, dtype=torch.float64)
    inclusion[[1, 2, 5]] = torch.tensor([1.0, 0.9, 0.4], dtype=torch.float64)
    selection = StableCircuit(
        graph=circuit.graph,
        selected=(1, 2),
        inclusion=inclusion,
        pi=0.8,
        q=2,
        n_resamples=10,
        subsample=4,
        seed=0,
        n_prompts=8,
        bound=0.5,
        n_verified=3,
        n_exact_computed=0,
        groups=("0", "1"),
        group_pairs=(4, 4),
        group_jaccard=(1.0, 0.5),
        jaccard=(1.0, 0.5),
        jaccard_mean=0.75,
        jaccard_low=0.5,
        jaccard_high=1.0,
        sentence="stability selection over 10 half subsamples of the 8 prompt pairs",
    )
    return dataclasses.replace(circuit, selection=selection)


def _audit() -> dict:
    estimates = torch.linspace(-1, 1, 12, dtype=torch.float64)
    audit = verify_screen(Screen(top_k=3, audit=3, alpha=None), estimates, lambda i: estimates[i])
    return ScreenOutcome((0, 1, 2), audit, "zero_ablation, 12 heads").to_dict()


def _sweep_manifest() -> dict:
    return started(
        sweeps.FORMAT,
        config={"sweep": {"seed": 0}},
        config_hash="abc",
        seed=0,
        shard="0/2",
        task_fingerprint="def",
        n_units=3,
        n_interventions=3,
        merged_from=None,
    )


def _baselines() -> dict:
    report = synthetic_report(n_layers=1, n_heads=2, n_prompts=3, n_positions=4, n_bootstrap=20)
    return {
        "config_hash": "abc",
        "clean": [2.0, 2.5, 3.0],
        "corrupted": [0.5, 0.25, 0.0],
        "dtype": "float32",
        "recovery_atol": 1e-6,
        "metric": {"name": "logit_diff", "unit": "logits", "definition": "target - foil"},
        "scope": {
            "model_name": "m",
            "task_name": "t",
            "n_prompts": 3,
            "n_positions": 5,
            "answer_positions": [4, 4, 4],
            "padding_side": "right",
        },
        "provenance": report.provenance.to_dict(),
    }


_ROWS = {
    "kinds": ["ZeroAblation"],
    "descriptions": ["L0H0 output (z) set to zero"],
    "base_runs": ["clean"],
    "sites": [{"component": "z", "layer": 0, "head": 0, "positions": None}],
    "params": [{"kind": "ZeroAblation", "layer": 0, "head": 0}],
}


def _stored_files() -> dict[str, tuple[Any, Callable[[Any], object]]]:
    """File -> (its content as interv writes it, its reader)."""
    circuit = make_circuit()
    link = mission_link(circuit, make_concentration(), n_bootstrap=20)
    report = synthetic_report(n_layers=1, n_heads=2, n_prompts=3, n_positions=4, n_bootstrap=20)
    record = {"config_hash": "abc"}
    return {
        "scores.json": (circuit.scores.to_dict(), EdgeScores.from_dict),
        "circuit.json": (circuit.to_dict(), CircuitResult.from_dict),
        "circuit.json with stability": (
            with_stability(circuit, {}).to_dict(),
            CircuitResult.from_dict,
        ),
        "circuit.json with selection": (
            _with_selection(circuit).to_dict(),
            CircuitResult.from_dict,
        ),
        "faithfulness.json": (make_curve(circuit).to_dict(), FaithfulnessCurve.from_dict),
        "mission.json": (link.to_dict(), MissionLink.from_dict),
        "exact.jsonl": ({"indices": [3, 7], "values": [0.5, -0.25]}, _reader(ExactRecord)),
        "exact.jsonl with per-prompt values": (
            {"indices": [3, 7], "values": [0.5, -0.25], "per_prompt": [[0.25, 0.75], [-0.5, 0]]},
            _reader(ExactRecord),
        ),
        "circuit manifest.json": (
            started(CIRCUIT_RUN, identity={"model": "m"}),
            _reader(CircuitManifest),
        ),
        "report.json": (report.to_dict(), Report.from_dict),
        "sweep manifest.json": (_sweep_manifest(), _reader(sweeps.SweepManifest)),
        "baselines.json": (_baselines(), _reader(sweeps.SweepBaselines)),
        "units.jsonl u": (
            {"unit": "u00000", "start": 0, **record, **_ROWS, "values": [[1.0, 2.0]]},
            _reader(sweeps.UnitRecord),
        ),
        "units.jsonl e": (
            {"unit": "e000", "entry": 0, "start": 0, **record, **_ROWS, "estimates": [[0.5]]},
            _reader(sweeps.EstimatesRecord),
        ),
        "units.jsonl x": (
            {"unit": "x00000", "entry": 0, **record, "indices": [0], "values": [[1.0, 2.0]]},
            _reader(sweeps.ExactValuesRecord),
        ),
        "units.jsonl a": (
            {"unit": "a000", "entry": 0, **record, "outcome": _audit()},
            _reader(sweeps.OutcomeRecord),
        ),
    }


def _reader(schema: type) -> Callable[[Any], object]:
    return lambda data: parse(schema, data, schema.__name__)


def _plain(data: Any) -> Any:
    return json.loads(json.dumps(data, allow_nan=False))


def _paths(value: Any, path: tuple = ()) -> Iterator[tuple]:
    """Every path into ``value`` (the first and last item of each list), free-form fields
    left out."""
    if path:
        yield path
    if isinstance(value, dict):
        for key, item in value.items():
            if key not in FREE_FORM:
                yield from _paths(item, (*path, key))
    elif isinstance(value, list) and value:
        for index in sorted({0, len(value) - 1}):
            yield from _paths(value[index], (*path, index))


def _wrong(original: Any) -> list[Any]:
    """JSON values of another type than ``original``; null is never one (it is NaN for a
    float), and a null is replaced by an object of a wrong-typed entry."""
    if isinstance(original, bool):
        return ["yes", 2, [], {}]
    if isinstance(original, int):
        return ["1", 1.5, True, [], {}]
    if isinstance(original, float):
        return ["x", True, [], {}]
    if isinstance(original, str):
        return [7, True, [], {}]
    if isinstance(original, list):
        return ["x", 7, {}]
    if isinstance(original, dict):
        return ["x", 7, []]
    return [{"wrong": "object"}]  # null: no optional scalar, list or table takes this


def _get(data: Any, path: tuple) -> Any:
    for key in path:
        data = data[key]
    return data


def _set(data: Any, path: tuple, value: Any) -> None:
    _get(data, path[:-1])[path[-1]] = value


FILES = _stored_files()


@pytest.mark.parametrize("name", list(FILES))
def test_the_file_interv_writes_is_read_back(name):
    content, reader = FILES[name]
    reader(_plain(content))


@pytest.mark.parametrize("name", list(FILES))
@settings(max_examples=3)
@given(data=st.data())
def test_every_field_of_a_stored_file_corrupted_is_refused_in_one_line(name, data):
    content, reader = FILES[name]
    content = _plain(content)
    for path in _paths(content):
        broken = copy.deepcopy(content)
        _set(broken, path, data.draw(st.sampled_from(_wrong(_get(content, path))), label=str(path)))
        try:
            reader(broken)
        except IntervError as error:
            assert "\n" not in str(error), f"{name} {path}: {error}"
        else:
            pytest.fail(f"{name}: {path} = {_get(broken, path)!r} was read")


def test_a_damaged_field_is_named_with_its_file(tmp_path):
    from interv._schema import read

    path = tmp_path / "baselines.json"
    broken = _plain(_baselines())
    broken["provenance"]["n_prompts"] = "three"
    path.write_text(json.dumps(broken))
    with pytest.raises(
        IntervError, match=r"baselines\.json' is damaged: .*\.provenance\.n_prompts"
    ):
        read(Path(path), sweeps.SweepBaselines, "sweep baselines")


def test_fields_named_by_the_schemas_are_the_fields_interv_writes():
    """The schemas and the writers agree: no field written that a schema does not name."""
    for name, (content, _) in FILES.items():
        assert isinstance(_plain(content), dict), name
    assert {f.name for f in dataclasses.fields(sweeps.SweepManifest)} >= set(_sweep_manifest())


# Invariants: every numeric field set to inf, NaN, huge and negative is refused in one line
# naming the file and the field's path, or (where the value is allowed) rendered correctly.
# A circuit directory's files are rendered by `interv report` and a report.json as Markdown;
# a sweep's files and the journals are read only (their render needs a whole sweep: their
# values are checked against each other by the sweep's reader). A provenance that differs
# between a circuit and its curve or link is named in words ("different numbers of
# prompts") with both files.

_CIRCUIT_DIR = ("circuit.json", "faithfulness.json", "mission.json")
_RENDERED = {"circuit.json", "circuit.json with stability", "faithfulness.json", "mission.json"}
_NOT_A_NUMBER = re.compile(r"(?<![\w.])-?(inf|nan)(?![\w])")  # as Python prints them


def _numeric_paths(content: Any) -> list[tuple]:
    return [
        path
        for path in _paths(content)
        if isinstance(_get(content, path), int | float)
        and not isinstance(_get(content, path), bool)
    ]


def _render_circuit(directory: Path, out: Path) -> str:
    from interv.cli.report_circuit import rerender_circuit

    rerender_circuit(directory, str(out))
    return (out / "circuit.md").read_text()


def _read_and_render(name: str, content: Any, directory: Path, out: Path) -> str | None:
    """The file written as JSON (``Infinity`` and ``NaN`` as Python's json writes them),
    read back by its reader naming the file, and rendered where interv renders it."""
    from interv._schema import from_file
    from interv.report.render import to_markdown

    _, reader = FILES[name]
    if name in _RENDERED:
        file = name.split()[0]
        for other in _CIRCUIT_DIR:
            if other != file:
                (directory / other).write_text(json.dumps(_plain(FILES[other][0])))
        (directory / file).write_text(json.dumps(content))
        return _render_circuit(directory, out)
    path = directory / name.split()[-1]
    path.write_text(json.dumps(content))
    value = from_file(path, reader, name)
    return to_markdown(value) if name == "report.json" else None


@pytest.mark.slow
@pytest.mark.parametrize("name", list(FILES))
@settings(max_examples=2, deadline=None)
@given(
    huge=st.sampled_from([1e300, 1.7e308, 10**30, 10**400]),
    negative=st.sampled_from([-1, -0.5, -1e6]),
)
def test_every_numeric_field_at_inf_nan_huge_or_negative_is_refused_or_rendered(
    name, huge, negative, tmp_path_factory
):
    content = _plain(FILES[name][0])
    for path in _numeric_paths(content):
        original = _get(content, path)
        for value in (math.inf, -math.inf, math.nan, huge, negative * (abs(original) + 1)):
            broken = copy.deepcopy(content)
            _set(broken, path, value)
            directory = tmp_path_factory.mktemp("stored")
            out = tmp_path_factory.mktemp("out") / "rendered"
            where = f"{name} {list(path)} = {value!r}"
            try:
                text = _read_and_render(name, broken, directory, out)
            except IntervError as error:
                message = str(error)
                assert "\n" not in message, where
                assert str(directory) in message, f"{where}: the file is not named: {message}"
                field = str(path[-1]) if isinstance(path[-1], str) else str(path[-2])
                joined = "does not belong with" in message  # the provenance entry, in words
                assert joined or field in message, f"{where}: the field is not named: {message}"
                continue
            assert not (isinstance(value, float) and math.isinf(value)), f"{where} was read"
            if text is not None:
                shown = _NOT_A_NUMBER.search(text)
                assert shown is None, f"{where} renders {shown.group(0)!r}"
