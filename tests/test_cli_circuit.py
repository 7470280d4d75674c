"""``interv circuit``: clear errors before any model loads, and a run that resumes."""

from __future__ import annotations

import hashlib
import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest

import interv
import interv.models.loading
from interv.cli import main


def _snapshot(root: Path) -> dict[str, str]:
    return {
        str(p.relative_to(root)): "dir"
        if p.is_dir()
        else hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
    }


@pytest.fixture
def workdir(tmp_path, monkeypatch):
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "notes.txt").write_text("someone's file")
    (tmp_path / "afile").write_text("a file")
    (tmp_path / "bad.jsonl").write_text('{"clean": "A B", "corrupted"\n')
    monkeypatch.chdir(tmp_path)
    return tmp_path


@pytest.fixture
def no_load(monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("a model was loaded before the options were checked")

    monkeypatch.setattr(interv.models.loading, "load_model", refuse)


BASE = ["circuit", "induction-2l", "--out", "run"]
CASES = [
    (["--method", "acdc"], r"--method: invalid choice: 'acdc' \(choose from 'eap', 'eap-ig'\)"),
    (["--top-k", "0"], r"--top-k must be >= 1; got 0"),
    (["--top-k", "-3"], r"--top-k must be >= 1; got -3"),
    (["--audit", "-1"], r"--audit must be >= 0; got -1"),
    (["--method", "eap-ig", "--steps", "0"], r"--steps \(interpolation steps m\) must be >= 1"),
    (["--steps", "4"], r"--steps 4 applies to --method eap-ig only"),
    (["--pairs", "missing.jsonl"], r"--pairs: .*missing\.jsonl"),
    (["--pairs", "bad.jsonl"], r"bad\.jsonl"),
    (["--task", "nosuch"], r"unknown task 'nosuch'; available tasks are"),
    (["--metric", "accuracy"], r"--metric: invalid choice: 'accuracy' \(choose from"),
    (
        ["--complement", "zero"],
        r"--complement: invalid choice: 'zero' \(choose from 'corrupted', 'mean'\)",
    ),
    (["--convention", "leaderboard"], r"--convention: invalid choice: 'leaderboard'"),
    (["--n-pairs", "0"], r"--n-pairs must be >= 1; got 0"),
    (["--n-edges", "0"], r"--n-edges must be >= 1; got 0"),
    (["--batch-size", "0"], r"--batch-size must be >= 1; got 0"),
    (["--alpha", "2"], r"--alpha must be a number in \(0, 1\) or 'none'"),
    (["--stability", "1"], r"--stability \(bootstrap resamples\) must be >= 2; got 1"),
    (["--task", "ioi", "--pairs", "x.jsonl"], r"not allowed with argument"),
]


@pytest.mark.parametrize(("extra", "pattern"), CASES, ids=[" ".join(c[0]) for c in CASES])
def test_a_bad_option_fails_with_its_value_and_the_choices_before_any_model_loads(
    extra, pattern, workdir, no_load, capsys
):
    before = _snapshot(workdir)
    try:
        status = main([*BASE, *extra])
    except SystemExit as exit_:  # argparse's own errors
        status = exit_.code
    err = capsys.readouterr().err
    assert status == 2, err
    assert "Traceback" not in err
    assert any(re.search(pattern, line) for line in err.splitlines() if "error" in line), err
    assert _snapshot(workdir) == before


@pytest.mark.parametrize(
    ("spec", "out", "pattern"),
    [
        ("nosuch-model", "run", r"nosuch-model"),
        ("induction-2l", "afile", r"'afile' is an existing file"),
        ("induction-2l", "mine", r"neither empty nor a circuit directory"),
    ],
)
def test_a_bad_model_or_output_fails_before_any_model_loads(
    spec, out, pattern, workdir, no_load, capsys
):
    before = _snapshot(workdir)
    assert main(["circuit", spec, "--out", out]) == 2
    err = capsys.readouterr().err
    assert re.search(pattern, err), err
    assert _snapshot(workdir) == before


def test_the_command_is_listed_in_the_help(capsys):
    with pytest.raises(SystemExit):
        main(["circuit", "--help"])
    out = capsys.readouterr().out
    assert "--top-k TOP_K" in out and "--audit AUDIT" in out and "eap-ig" in out


ZOO = [
    "circuit",
    "induction-2l",
    "--n-pairs",
    "8",
    "--top-k",
    "5",
    "--audit",
    "10",
    "--alpha",
    "none",
]
OUTPUTS = ("circuit.json", "faithfulness.json", "mission.json", "circuit.md", "circuit.html")


@pytest.fixture
def counted(monkeypatch):
    """The edges each exact evaluation is asked for; ``stop_after`` edges, then Ctrl-C."""
    import interv.circuits.discovery as discovery

    real = discovery.edge_effects
    calls: dict = {"edges": [], "stop_after": None}

    def edge_effects(model, task, graph, edges, *, on_batch=None, **kwargs):
        edges = list(edges)
        stop = calls["stop_after"]
        if stop is not None:
            head = edges[:stop]
            values = real(model, task, graph, head, **{**kwargs, "per_prompt": True})
            calls["edges"] += head
            if on_batch is not None:
                on_batch(list(range(len(head))), values)  # [k, n_prompts], as edge_effects
            raise KeyboardInterrupt
        calls["edges"] += edges
        return real(model, task, graph, edges, on_batch=on_batch, **kwargs)

    monkeypatch.setattr(discovery, "edge_effects", edge_effects)
    return calls


def test_a_zoo_run_writes_its_outputs_and_an_interrupted_run_resumes_without_recomputing(
    tmp_path, capsys, counted
):
    out = tmp_path / "run"
    counted["stop_after"] = 3
    assert main([*ZOO, "--out", str(out)]) == 130  # Ctrl-C after 3 exact edges stored
    first = list(counted["edges"])
    assert len(first) == 3 and len((out / "exact.jsonl").read_text().splitlines()) == 1
    assert not any((out / name).exists() for name in OUTPUTS)

    counted.update(stop_after=None, edges=[])
    assert main([*ZOO, "--out", str(out)]) == 0
    assert not set(counted["edges"]) & set(first)
    assert len(counted["edges"]) == 15 - 3
    text = capsys.readouterr().out
    assert "12 exact effects computed by this run; 3 stored by an earlier run were reused" in text
    assert "5 exact (verified), 10 exact (audit), 66 estimated" in text
    assert "concentrated, sink-parked heads outside the circuit:" in text
    for name in OUTPUTS:
        assert (out / name).is_file(), name
    circuit = json.loads((out / "circuit.json").read_text())
    assert circuit["status"].count("exact (verified)") == 5
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["status"] == "complete" and manifest["computed_in_last_run"] == 12

    counted["edges"] = []
    assert main([*ZOO, "--out", str(out), "--quiet"]) == 0  # complete: nothing recomputed
    assert counted["edges"] == []
    assert capsys.readouterr().out == ""


def test_a_pairs_file_gives_the_prompts(tmp_path, capsys):
    pairs = tmp_path / "my_pairs.jsonl"
    interv.load_task("induction", n_pairs=4, seed=1).to_jsonl(pairs)
    out = tmp_path / "run"
    argv = ["circuit", "induction-2l", "--pairs", str(pairs), "--top-k", "3", "--audit", "0"]
    argv += ["--alpha", "none"]
    extra = ["--greedy", "--stability", "20", "--convention", "mib"]
    assert main([*argv, *extra, "--out", str(out)]) == 0
    text = capsys.readouterr().out
    assert "81 edges, 3 exact (verified), 0 exact (audit), 78 estimated" in text
    assert "stability (Jaccard with the full-sample circuit): top-20 " in text
    assert "20 bootstrap resamples (seed 0) of the 4 prompt pairs" in text
    circuit = json.loads((out / "circuit.json").read_text())
    assert circuit["edge_scores"]["provenance"]["n_prompts"] == 4
    assert circuit["edge_scores"]["unit"] == "logits"
    curve = json.loads((out / "faithfulness.json").read_text())
    assert curve["greedy"] is True and "greedy circuits" in curve["sentence"]
    assert curve["convention"] == "mib" and curve["n_edges_kept"][:2] == [0, 0]  # int(p 81)
    stability = circuit["stability"]
    assert stability["sizes"] == [20] and len(stability["jaccard"][0]) == 20


KILLED_AFTER_FIRST_BATCH = """
import os, signal, sys
import interv.circuits.discovery as discovery
from interv.cli import main

real = discovery.edge_effects


def edge_effects(*args, on_batch=None, **kwargs):
    def kill_after(positions, values):
        on_batch(positions, values)
        os.kill(os.getpid(), signal.SIGKILL)  # no cleanup, no finally: as a real kill

    return real(*args, on_batch=kill_after, **kwargs)


discovery.edge_effects = edge_effects
sys.exit(main(sys.argv[1:]))
"""


@pytest.mark.slow  # a fresh interpreter loads torch and the model twice: ~20 s on 2 cores
def test_a_discovery_killed_mid_run_is_resumed_by_the_same_command(tmp_path):
    out = tmp_path / "run"
    argv = [*ZOO, "--batch-size", "4", "--out", str(out), "--quiet"]
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).parent.parent)}
    killed = subprocess.run(
        [sys.executable, "-c", KILLED_AFTER_FIRST_BATCH, *argv], env=env, capture_output=True
    )
    assert killed.returncode == -signal.SIGKILL
    stored = (out / "exact.jsonl").read_text().splitlines()
    assert len(stored) == 1 and len(json.loads(stored[0])["indices"]) == 4
    assert json.loads((out / "manifest.json").read_text())["status"] == "running"
    assert main(argv) == 0
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["status"] == "complete"
    assert (manifest["stored_before"], manifest["computed_in_last_run"]) == (4, 15 - 4)
    assert (out / "exact.jsonl").read_text().splitlines()[0] == stored[0]


def test_k_beyond_the_graph_is_refused_after_loading_and_leaves_no_directory(workdir, capsys):
    before = _snapshot(workdir)
    assert main(["circuit", "induction-2l", "--top-k", "1000", "--out", "run"]) == 2
    err = capsys.readouterr().err
    assert "--top-k 1000 exceeds the graph's 81 edges" in err
    assert _snapshot(workdir) == before  # the claimed directory was removed again
