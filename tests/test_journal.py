"""A kill at any write boundary leaves a directory the same command, rerun, repairs.

Every write of interv passes named boundaries (:func:`interv._outputs.boundary`). A kill at
one leaves the disk as it is at that instant, so these tests copy the directory at every
boundary of one uninterrupted run (:func:`interv._outputs.fault_injection`), then rerun the
same job on each copy: it must finish, give the uninterrupted run's results, and leave every
file proven by the marker (another interv command may write beside them). No timing, no
signals: each boundary is visited once. The jobs are the stores' own (a sweep, a circuit
discovery with its outputs, the model cache) with stand-in work, so each rerun takes
milliseconds.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest
import torch

from interv._journal import MANIFEST
from interv._outputs import MARKER, claim_dir, fault_injection, is_scratch
from interv.audit import Screen, verify_screen
from interv.circuits.store import (
    OUTPUTS,
    CircuitStore,
    discover_resumable,
    read_exact,
    read_exact_per_prompt,
)
from interv.errors import IntervError
from interv.models import _cache
from interv.sweeps.config import parse_config
from interv.sweeps.store import SweepStore, read_units

# ---- the harness ----


def _killed_states(job: Callable[[Path], object], directory: Path, root: Path) -> list[tuple]:
    """Run ``job(directory)`` once; at each write boundary copy ``directory`` (what a kill
    there would leave). Returns ``(event, copy)`` per boundary and the run's result."""
    states = []

    def snapshot(event: str, path: Path) -> None:
        copy = root / f"kill-{len(states):03d}"
        if directory.exists():  # else the kill leaves nothing: the copy does not exist
            shutil.copytree(directory, copy, symlinks=True)
        states.append((event, copy))

    with fault_injection(snapshot):
        result = job(directory)
    return states, result


def _proven(directory: Path) -> None:
    """Every file of ``directory`` is one interv wrote and the marker proves (a claim of the
    whole directory accepts it), and no scratch is left."""
    claim_dir(directory).abandon()
    assert not [p.name for p in directory.iterdir() if is_scratch(p.name)]


# ---- the circuit directory: scores, exact log, outputs ----

N_EDGES = 30
TRUE = torch.linspace(-2, 2, N_EDGES) ** 3
IDENTITY = {"model": "toy", "task_fingerprint": "abc", "method": "eap", "steps": 1}


class _Scores:
    def __init__(self, scores: torch.Tensor) -> None:
        self.scores = scores

    def to_dict(self) -> dict:
        return {"format": "stand-in", "scores": self.scores.tolist()}

    @classmethod
    def from_dict(cls, data: dict) -> _Scores:
        return cls(torch.tensor(data["scores"], dtype=torch.float64))


SPREAD = torch.tensor([-1.0, 0.25, 0.75], dtype=torch.float64)  # mean 0: 3 prompts
PATCHED: list[int] = []  # the edges the stand-in discovery computed


def _discovery(*, scores, known, exact_per_prompt, on_exact, kept):
    def evaluate(indices: torch.Tensor) -> torch.Tensor:
        for start in range(0, len(indices), 2):  # batches of 2: several appends
            chunk = indices[start : start + 2]
            PATCHED.extend(chunk.tolist())
            for index in chunk.tolist():  # as discover: the rows first, then on_exact
                exact_per_prompt[index] = TRUE[index].double() + SPREAD
            on_exact(chunk, TRUE[chunk])
        return TRUE[indices]

    prior = torch.full((N_EDGES,), torch.nan, dtype=torch.float64)
    for index, value in (known or {}).items():
        prior[index] = value
    return verify_screen(Screen(top_k=4, audit=4, alpha=None), scores.scores, evaluate, known=prior)


def _circuit_job(out: Path) -> list[str]:
    with CircuitStore.open(out, IDENTITY) as store:
        audit, _ = discover_resumable(
            store,
            scores=lambda: _Scores(TRUE + 0.1),
            discover=_discovery,
            from_dict=_Scores.from_dict,
            finish=False,
        )
        for name in OUTPUTS:
            store.write_output(name, f"{name}: {audit.exact.nan_to_num(0).tolist()}\n")
        store.finish()
    return audit.status


def test_a_circuit_run_killed_at_any_write_boundary_is_repaired_by_its_rerun(tmp_path):
    states, status = _killed_states(_circuit_job, tmp_path / "run", tmp_path)
    events = {event for event, _ in states}
    assert {"write_file:published", "append_line:synced", "lock:held"} <= events
    reference = tmp_path / "run"
    for event, copy in states:
        stored = set(read_exact(copy)) if copy.exists() else set()
        PATCHED.clear()
        assert _circuit_job(copy) == status, event
        assert not stored & set(PATCHED), event  # no stored edge computed again
        assert read_exact(copy) == read_exact(reference), event
        rows = read_exact_per_prompt(copy)
        assert rows.keys() == read_exact(reference).keys(), event
        for index, row in rows.items():
            assert torch.equal(row, TRUE[index].double() + SPREAD), event
        for name in OUTPUTS:
            assert (copy / name).read_bytes() == (reference / name).read_bytes(), event
        assert json.loads((copy / MANIFEST).read_text())["status"] == "complete", event
        _proven(copy)
    _proven(reference)


def test_killed_after_an_output_is_published_before_the_marker_confirms_it(tmp_path):
    """The kill window of issue 30: circuit.json on disk, the marker not yet updated. The
    marker named it (pending) before it was published, so the rerun accepts its own file."""
    states, _ = _killed_states(_circuit_job, tmp_path / "run", tmp_path)
    published = [
        copy
        for event, copy in states
        if event == "write_file:published" and (copy / "circuit.json").is_file()
    ]
    first = published[0]
    marker = json.loads((first / MARKER).read_text())["files"]["circuit.json"]
    assert "pending" in marker and "sha256" not in marker  # not yet confirmed
    _circuit_job(first)
    _proven(first)


# ---- the sweep directory: baselines, unit log, plan ----

SWEEP = parse_config(
    {
        "model": {"spec": "induction-2l"},
        "task": {"name": "induction", "n_pairs": 2},
        "sweep": {"interventions": [{"kind": "zero_ablation", "sites": {"layers": [0]}}]},
    }
)


def _unit(k: int) -> dict:
    return {
        "unit": f"u{k:05d}",
        "config_hash": SWEEP.config_hash,
        "start": k,
        "kinds": ["ZeroAblation"],
        "descriptions": [f"L0H{k} output (z) set to zero"],
        "base_runs": ["clean"],
        "sites": [{"component": "z", "layer": 0, "head": k, "positions": None}],
        "params": [{"kind": "ZeroAblation", "layer": 0, "head": k}],
        "values": [[1.0 + k, 2.0 - k]],
    }


def _sweep_job(out: Path) -> dict:
    with SweepStore.open(out, SWEEP, None, "fingerprint") as store:
        store.record_plan(3, 3)
        store.write_baselines({"config_hash": SWEEP.config_hash, "clean": [2.0, 2.0]})
        done = store.completed()
        for k in range(3):
            if f"u{k:05d}" not in done:
                store.append(_unit(k))
        store.finish()
    return read_units(out, SWEEP.config_hash)


def test_a_sweep_killed_at_any_write_boundary_is_repaired_by_its_rerun(tmp_path):
    states, units = _killed_states(_sweep_job, tmp_path / "run", tmp_path)
    assert sum(event == "append_line:synced" for event, _ in states) == 3
    for event, copy in states:
        assert _sweep_job(copy) == units, event
        assert json.loads((copy / MANIFEST).read_text())["status"] == "complete", event
        _proven(copy)


# ---- the model cache: an entry built in scratch and renamed into place ----


def _build(directory: Path) -> None:
    (directory / "config.json").write_text('{"d_model": 8}')
    (directory / "weights.bin").write_bytes(b"\x00\x01" * 64)


def test_a_cache_build_killed_at_any_boundary_is_rebuilt_whole(tmp_path, monkeypatch):
    root = tmp_path / "cache"

    def job(cache: Path) -> tuple[str, ...]:
        monkeypatch.setenv("INTERV_CACHE", str(cache))
        path, _ = _cache.ensure_cached_dir("entry", _build)
        return tuple(sorted(p.name for p in path.iterdir()))

    states, files = _killed_states(job, root, tmp_path)
    assert {"publish_dir:built", "publish_dir:renamed", "lock:held"} <= {e for e, _ in states}
    for event, copy in states:
        assert job(copy) == files == ("config.json", "weights.bin"), event
        assert (copy / "entry" / "weights.bin").read_bytes() == b"\x00\x01" * 64, event
        assert not [p.name for p in copy.iterdir() if is_scratch(p.name)], event


def test_a_rerun_refuses_scores_of_another_run_naming_the_field(tmp_path):
    """A circuit rerun after a kill, with the scores.json of another run copied in: the
    stored scores are joined with this run's provenance before anything resumes."""
    from _circuit_fixtures import PROMPTS, make_circuit

    from interv.circuits import EdgeScores

    out = tmp_path / "run"
    foreign = make_circuit(provenance=PROMPTS.replace(prompts="other prompts")).scores
    with CircuitStore.open(out, IDENTITY) as store:
        store.write_scores(foreign.to_dict())
    with (
        pytest.raises(IntervError, match=r"this run and the stored .*scores\.json come from"),
        CircuitStore.open(out, IDENTITY) as store,
    ):
        discover_resumable(
            store,
            scores=lambda: None,
            discover=lambda **_: None,
            from_dict=EdgeScores.from_dict,
            expected=PROMPTS,
        )
