"""A circuit run stopped mid-way and rerun patches no stored edge again, evaluates no stored
circuit of a faithfulness curve again, and writes the uninterrupted run's files, byte for
byte, stability figures included: ``exact.jsonl`` keeps each edge's per-prompt exact effects
(the discovery's and, as they return, those only the stability resamples or the selection's
subsamples verify), which the resampled figures re-average; ``curves.jsonl`` keeps each
evaluated circuit's per-prompt metric. A run killed (SIGKILL) under the local executor
resumes on Ray workers to the same files.

Every run here patches one edge (or evaluates one circuit) per stacked forward
(``--batch-size 1``), so an edge's numbers do not depend on which edges a run (or a worker)
patched beside it, and the files can be compared byte for byte.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import interv.circuits.curves as curves
import interv.circuits.patching as patching
from interv.circuits.executor import Kept
from interv.circuits.store import (
    CURVES,
    EXACT,
    OUTPUTS,
    CircuitStore,
    discover_resumable,
    read_exact,
    read_exact_per_prompt,
)
from interv.cli import main
from interv.errors import IntervError
from interv.provenance import Provenance

RUN = [
    "circuit",
    "induction-2l",
    "--n-pairs",
    "8",
    "--top-k",
    "6",
    "--audit",
    "10",
    "--alpha",
    "none",
    "--stability",
    "20",
    "--select",
    "stability",
    "--subsamples",
    "12",
    "--batch-size",
    "1",
    "--quiet",
]
WRITTEN = OUTPUTS[:5]  # no mib_circuit.json without --convention mib
FOUND, RESAMPLED = 16, 16  # edges: the discovery's (top 6, audit 10), the resamples' (9 + 7)
CIRCUITS = 21 + 5  # the curve's (10 fractions by |value| and signed, the empty one), the
# selected circuit's own (its size and the full graph, both ways, the empty one)


@pytest.fixture
def patched(monkeypatch):
    """The edges each stacked forward patches (discovery, stability and selection alike),
    in this process; ``stop_at``: Ctrl-C when that many forwards have run."""
    real = patching._edge_job
    calls: dict = {"edges": [], "stop_at": None}

    def job(model, shared, edges, cache):
        if calls["stop_at"] is not None and len(calls["edges"]) >= calls["stop_at"]:
            raise KeyboardInterrupt
        calls["edges"] += edges
        return real(model, shared, edges, cache)

    monkeypatch.setattr(patching, "_edge_job", job)
    return calls


@pytest.fixture
def evaluated(monkeypatch):
    """The circuits each curve job evaluates, in this process; ``stop_at``: Ctrl-C when
    that many jobs have run."""
    real = curves._curve_job
    calls: dict = {"circuits": 0, "jobs": 0, "stop_at": None}

    def job(model, shared, kept, cache):
        if calls["stop_at"] is not None and calls["jobs"] >= calls["stop_at"]:
            raise KeyboardInterrupt
        calls["jobs"] += 1
        calls["circuits"] += kept.shape[0]
        return real(model, shared, kept, cache)

    monkeypatch.setattr(curves, "_curve_job", job)
    return calls


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """An uninterrupted run (this process, the local executor)."""
    out = tmp_path_factory.mktemp("reference") / "run"
    assert main([*RUN, "--out", str(out)]) == 0
    return out


def _same_outputs(run: Path, reference: Path) -> None:
    for name in ("scores.json", *WRITTEN):
        assert (run / name).read_bytes() == (reference / name).read_bytes(), name
    assert read_exact(run) == read_exact(reference)
    rows, expected = read_exact_per_prompt(run), read_exact_per_prompt(reference)
    assert rows.keys() == expected.keys()
    assert all(torch.equal(rows[i], expected[i]) for i in expected)


def test_a_resumed_run_patches_no_stored_edge_and_equals_the_uninterrupted_run(
    tmp_path, patched, reference
):
    out = tmp_path / "run"
    patched["stop_at"] = 7
    assert main([*RUN, "--out", str(out)]) == 130  # Ctrl-C in the 8th exact forward
    stored = read_exact(out)
    assert len(stored) == 7 and read_exact_per_prompt(out).keys() == stored.keys()
    assert all(row.shape == (8,) for row in read_exact_per_prompt(out).values())

    patched.update(stop_at=None, edges=[])
    assert main([*RUN, "--out", str(out)]) == 0
    assert not set(patched["edges"]) & set(stored)  # neither the audit nor the resamples
    _same_outputs(out, reference)
    circuit = json.loads((out / "circuit.json").read_text())
    done = json.loads((reference / "circuit.json").read_text())
    assert circuit["stability"] == done["stability"] and circuit["selection"] == done["selection"]
    manifest = json.loads((out / "manifest.json").read_text())
    assert (manifest["stored_before"], manifest["computed_in_last_run"]) == (
        7,
        FOUND + RESAMPLED - 7,
    )


@pytest.mark.parametrize("stop_at", [FOUND + 4, FOUND + 9 + 3], ids=["stability", "selection"])
def test_a_run_stopped_in_the_resamples_patches_none_of_their_stored_edges(
    tmp_path, patched, reference, stop_at
):
    """Stopped while the stability resamples (or the selection's subsamples) patch the edges
    only they verify: those that returned are stored as they returned, and the rerun
    reuses them (its figures count them as patched for the resamples, as the
    uninterrupted run does: the same circuit.json)."""
    out = tmp_path / "run"
    patched["stop_at"] = stop_at
    assert main([*RUN, "--out", str(out)]) == 130
    stored = read_exact(out)
    assert len(stored) == stop_at and read_exact_per_prompt(out).keys() == stored.keys()
    lines = [json.loads(line) for line in (out / EXACT).read_text().splitlines()]
    assert sum(line.get("stage") == "resamples" for line in lines) == stop_at - FOUND

    patched.update(stop_at=None, edges=[])
    assert main([*RUN, "--out", str(out)]) == 0
    assert not set(patched["edges"]) & set(stored)
    assert len(patched["edges"]) == FOUND + RESAMPLED - stop_at
    _same_outputs(out, reference)
    manifest = json.loads((out / "manifest.json").read_text())
    assert (manifest["stored_before"], manifest["computed_in_last_run"]) == (
        stop_at,
        FOUND + RESAMPLED - stop_at,
    )


@pytest.mark.parametrize("stop_at", [10, 21 + 2], ids=["curve", "selected circuit's curve"])
def test_a_run_stopped_in_a_curve_evaluates_none_of_its_stored_circuits(
    tmp_path, patched, evaluated, reference, stop_at
):
    out = tmp_path / "run"
    evaluated["stop_at"] = stop_at
    assert main([*RUN, "--out", str(out)]) == 130
    assert len((out / CURVES).read_text().splitlines()) == stop_at
    assert len(read_exact(out)) == FOUND + RESAMPLED

    patched["edges"] = []
    evaluated.update(stop_at=None, circuits=0)
    assert main([*RUN, "--out", str(out)]) == 0
    assert patched["edges"] == []  # every exact effect was stored
    assert evaluated["circuits"] == CIRCUITS - stop_at
    _same_outputs(out, reference)
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["computed_in_last_run"] == 0
    assert (manifest["circuits_stored_before"], manifest["circuits_in_last_run"]) == (
        stop_at,
        CIRCUITS - stop_at,
    )


def test_a_directory_the_previous_store_left_still_resumes(tmp_path, patched, evaluated, reference):
    """Killed in a curve, as the previous store left it (no resamples' lines, no
    curves.jsonl): the rerun patches the resamples' edges and evaluates the curves again,
    no discovery edge, and writes the uninterrupted run's files."""
    out = tmp_path / "run"
    evaluated["stop_at"] = 10
    assert main([*RUN, "--out", str(out)]) == 130
    log = out / EXACT
    lines = [line for line in log.read_text().splitlines() if '"stage"' not in line]
    log.write_text("".join(line + "\n" for line in lines))
    (out / CURVES).unlink()
    found = set(read_exact(out))
    assert len(found) == FOUND

    patched["edges"] = []
    evaluated.update(stop_at=None, circuits=0)
    assert main([*RUN, "--out", str(out)]) == 0
    assert len(patched["edges"]) == RESAMPLED and not set(patched["edges"]) & found
    assert evaluated["circuits"] == CIRCUITS
    _same_outputs(out, reference)


def test_a_torn_or_missing_curve_log_is_repaired_by_the_rerun(tmp_path, evaluated, reference):
    """A kill inside the last append (the record whole but its newline): the rerun cuts it
    off and evaluates its circuit again; a log lost altogether: every circuit again. The
    files are the uninterrupted run's either way."""
    out = tmp_path / "run"
    evaluated["stop_at"] = 10
    assert main([*RUN, "--out", str(out)]) == 130
    log = out / CURVES
    log.write_bytes(log.read_bytes()[:-1])
    evaluated.update(stop_at=None, circuits=0)
    assert main([*RUN, "--out", str(out)]) == 0
    assert evaluated["circuits"] == CIRCUITS - 9
    _same_outputs(out, reference)

    log.unlink()
    (out / "faithfulness.json").unlink()
    evaluated["circuits"] = 0
    assert main([*RUN, "--out", str(out)]) == 0
    assert evaluated["circuits"] == CIRCUITS
    _same_outputs(out, reference)


def test_a_curve_reads_only_its_own_lines(tmp_path):
    """Lines of another curve (other settings or other circuits) are never read; two values
    for one circuit of a curve are refused naming the line."""
    key = {
        "fingerprint": "0123456789abcdef",
        "order": "0" * 64,
        "n_circuits": 5,
        "n_prompts": 2,
        "fractions": [0.5, 1.0],
        "complement": "corrupted",
        "convention": "interv",
        "greedy": False,
        "selection": False,
    }
    with CircuitStore.open(tmp_path / "run", {"model": "toy"}) as store:
        kept = store.curve_resume(key)
        assert kept.stored == {}
        kept.keep([0, 3], torch.tensor([[1.0, 2.0], [3.0, 4.0]], dtype=torch.float64))
        for other in ({"fractions": [0.2, 1.0]}, {"order": "1" * 64}, {"selection": True}):
            assert store.curve_resume({**key, **other}).stored == {}
        again = store.curve_resume(key).stored
        assert again.keys() == {0, 3} and torch.equal(again[3], torch.tensor([3.0, 4.0]))
        kept.keep([3], torch.tensor([[3.0, 4.5]]))
        with pytest.raises(
            IntervError,
            match=r"curves\.jsonl': circuit 3 of a curve is stored twice with different values "
            r"\(line 2\)",
        ):
            store.curve_resume(key)
        with pytest.raises(IntervError, match=r"circuit 5 is outside the curve's 5 circuits"):
            kept.keep([5], torch.tensor([[0.0, 1.0]]))
        with pytest.raises(IntervError, match=r"rows of 3 prompts for the curve's 2"):
            kept.keep([4], torch.tensor([[0.0, 1.0, 2.0]]))


def test_lines_without_per_prompt_values_still_resume(tmp_path, patched, reference):
    """A directory begun before interv stored per-prompt values: its means are reused by the
    audit, its edges patched again for the stability figures only, and the files agree."""
    out = tmp_path / "run"
    patched["stop_at"] = 5
    assert main([*RUN, "--out", str(out)]) == 130
    log = out / EXACT
    lines = [json.loads(line) for line in log.read_text().splitlines()]
    log.write_text(
        "".join(json.dumps({k: r[k] for k in ("indices", "values")}) + "\n" for r in lines)
    )
    stored = set(read_exact(out))

    patched.update(stop_at=None, edges=[])
    assert main([*RUN, "--out", str(out)]) == 0
    again = patched["edges"]
    assert len(again) == len(set(again))  # each edge patched once in this run
    assert stored <= set(again)  # the resamples need their per-prompt values
    for name in ("faithfulness.json", "mission.json"):
        assert (out / name).read_bytes() == (reference / name).read_bytes(), name
    circuit = json.loads((out / "circuit.json").read_text())
    done = json.loads((reference / "circuit.json").read_text())
    patched_again = circuit["stability"]["n_exact_computed"] - done["stability"]["n_exact_computed"]
    assert patched_again == len(stored)  # the same figures; the stored edges patched for them
    for part in ("stability", "selection"):
        for key in ("n_exact_computed", "sentence"):
            del circuit[part][key], done[part][key]
    assert circuit == done


def test_per_prompt_values_that_disagree_with_their_mean_are_refused_naming_the_line(
    tmp_path, patched
):
    out = tmp_path / "run"
    patched["stop_at"] = 3
    assert main([*RUN, "--out", str(out)]) == 130
    log = out / EXACT
    lines = log.read_text().splitlines()
    record = json.loads(lines[1])
    record["per_prompt"][0][0] += 1.0
    lines[1] = json.dumps(record)
    log.write_text("\n".join(lines) + "\n")
    with pytest.raises(
        IntervError,
        match=r"exact\.jsonl': line 2 is damaged: .*'per_prompt'\[0\] \(edge \d+\) averages ",
    ):
        read_exact(out)
    assert main([*RUN, "--out", str(out)]) == 2  # refused, one line, before any exact work

    record["per_prompt"][0] = record["per_prompt"][0][:4]  # 4 prompts of 8
    record["values"][0] = sum(record["per_prompt"][0]) / 4
    lines[1] = json.dumps(record)
    log.write_text("\n".join(lines) + "\n")
    with pytest.raises(IntervError, match=r"line 2 holds per-prompt effects of 4 prompts, line 1"):
        read_exact(out)


def test_per_prompt_values_of_another_prompt_count_are_refused_before_any_exact_work(tmp_path):
    class Scores:
        def to_dict(self):
            return {"format": "stand-in"}

    out = tmp_path / "run"
    with CircuitStore.open(out, {"model": "toy"}) as store:
        store.append_exact([4, 9], [0.5, 1.0], [[0.0, 1.0], [1.0, 1.0]])
        with pytest.raises(
            IntervError, match=r"per-prompt exact values of shape \(1, 2\) for 2 edges"
        ):
            store.append_exact([4, 9], [0.5, 1.0], [[0.0, 1.0]])
    with (
        pytest.raises(
            IntervError,
            match=r"exact\.jsonl' holds per-prompt exact effects of 2 prompts for this run's 3",
        ),
        CircuitStore.open(out, {"model": "toy"}) as store,
    ):
        discover_resumable(
            store,
            scores=Scores,
            discover=lambda **_: pytest.fail("exact work began"),
            expected=Provenance("toy", n_prompts=3),
        )


KILLED_AFTER = """
import os, signal, sys
import interv.circuits.discovery as discovery
from interv.cli import main

real = discovery.edge_effects
after, stored = int(sys.argv[1]), 0


def edge_effects(*args, on_batch=None, **kwargs):
    def kill_after(positions, values):
        global stored
        on_batch(positions, values)  # stored: appended and fsync-ed
        stored += 1
        if stored == after:
            os.kill(os.getpid(), signal.SIGKILL)  # no cleanup, no finally: as a real kill

    return real(*args, on_batch=kill_after, **kwargs)


discovery.edge_effects = edge_effects
sys.exit(main(sys.argv[2:]))
"""


@pytest.fixture
def stopping_curves(monkeypatch):
    """Ctrl-C right after the ``stop_at``-th curve circuit is stored (the executor's jobs
    in flight abandoned, as on a Ctrl-C)."""
    real = CircuitStore.curve_resume
    calls: dict = {"stored": 0, "stop_at": None}

    def curve_resume(self, curve):
        kept = real(self, curve)

        def keep(circuits, rows):
            kept.keep(circuits, rows)
            calls["stored"] += len(circuits)
            if calls["stop_at"] is not None and calls["stored"] >= calls["stop_at"]:
                raise KeyboardInterrupt

        return Kept(kept.stored, keep)

    monkeypatch.setattr(CircuitStore, "curve_resume", curve_resume)
    return calls


@pytest.mark.slow  # a fresh interpreter, then a local Ray cluster of 2 workers
def test_a_run_killed_under_the_local_executor_resumes_on_ray_workers_and_back(
    tmp_path, request, stopping_curves
):
    """Killed (SIGKILL) after its 7th exact edge under the local executor; resumed on Ray
    workers (the rest of the discovery, the resamples' edges, the curves) and stopped there
    after 10 curve circuits; resumed in this process: no stored edge patched, no stored
    circuit evaluated, the uninterrupted run's files."""
    pytest.importorskip("ray", reason="the ray extra is not installed (pip install interv[ray])")
    out = tmp_path / "run"
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).parent.parent)}
    killed = subprocess.Popen(
        [sys.executable, "-c", KILLED_AFTER, "7", *RUN, "--out", str(out)],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    reference = request.getfixturevalue("reference")  # meanwhile, on the other core
    _, stderr = killed.communicate(timeout=300)
    assert killed.returncode == -signal.SIGKILL, stderr.decode()[-2000:]
    assert json.loads((out / "manifest.json").read_text())["status"] == "running"
    stored = read_exact(out)
    assert len(stored) == 7 and read_exact_per_prompt(out).keys() == stored.keys()

    stopping_curves.update(stop_at=10, stored=0)  # (the reference ran meanwhile)
    ray_run = [*RUN, "--executor", "ray", "--workers", "2", "--out", str(out)]
    assert main(ray_run) == 130
    assert len(read_exact(out)) == FOUND + RESAMPLED  # 25 patched on the workers
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["status"] == "interrupted" and len(manifest["resumed"]) == 1
    circuits = stopping_curves["stored"]
    assert 10 <= circuits < CIRCUITS

    stopping_curves["stop_at"] = None
    patched = request.getfixturevalue("patched")  # in this process only (not on the workers)
    evaluated = request.getfixturevalue("evaluated")
    assert main([*RUN, "--out", str(out)]) == 0
    assert patched["edges"] == [] and evaluated["circuits"] == CIRCUITS - circuits
    _same_outputs(out, reference)
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["status"] == "complete" and len(manifest["resumed"]) == 2
    assert (manifest["stored_before"], manifest["computed_in_last_run"]) == (FOUND + RESAMPLED, 0)
    assert (manifest["circuits_stored_before"], manifest["circuits_in_last_run"]) == (
        circuits,
        CIRCUITS - circuits,
    )


def test_a_kill_inside_the_last_append_is_repaired_by_the_rerun(tmp_path, patched, reference):
    """The whole last record written but its newline: the rerun cuts it off, patches its
    edge again (and no other stored one) and writes the uninterrupted run's files."""
    out = tmp_path / "run"
    patched["stop_at"] = 4
    assert main([*RUN, "--out", str(out)]) == 130
    log = out / EXACT
    data = log.read_bytes()
    torn = json.loads(data[data[:-1].rfind(b"\n") + 1 :])["indices"]
    log.write_bytes(data[:-1])
    stored = set(read_exact(out))
    assert len(stored) == 3 and not stored & set(torn)

    patched.update(stop_at=None, edges=[])
    assert main([*RUN, "--out", str(out)]) == 0
    assert not set(patched["edges"]) & stored and set(torn) <= set(patched["edges"])
    _same_outputs(out, reference)
