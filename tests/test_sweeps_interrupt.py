"""A sweep killed with SIGKILL mid-run resumes on rerun: nothing repeated, lost or duplicated."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest
import torch

from interv.sweeps import load_sweep, run_sweep

CONFIG = """
[model]
spec = "induction-2l"
[task]
name = "induction"
n_pairs = 6
[sweep]
batch_size = 24
unit_size = 2
[[sweep.interventions]]
kind = "zero_ablation"
[[sweep.interventions]]
kind = "mean_ablation"
sites = {layers = [1]}
"""
N_UNITS = (8 + 4) // 2

# The sweep command, with every unit slowed by 0.5 s so that the kill lands mid-sweep.
SLOW_SWEEP = """
import sys, time
import interv.sweeps.execute as execute
engine_run = execute.run
def slow_run(*args, **kwargs):
    time.sleep(0.5)
    return engine_run(*args, **kwargs)
execute.run = slow_run
from interv.cli import main
sys.exit(main(sys.argv[1:]))
"""
SWEEP = "import sys; from interv.cli import main; sys.exit(main(sys.argv[1:]))"


def stored_ids(directory) -> list[str]:
    path = directory / "units.jsonl"
    if not path.is_file():
        return []
    data = path.read_text()
    return [json.loads(line)["unit"] for line in data[: data.rfind("\n") + 1].splitlines()]


@pytest.mark.slow
def test_sigkill_mid_sweep_then_rerun_equals_an_uninterrupted_run(tmp_path):
    config = tmp_path / "sweep.toml"
    config.write_text(CONFIG)
    expected = run_sweep(config, tmp_path / "uninterrupted", progress=False)
    out = tmp_path / "out"
    command = [str(config), "--out", str(out), "--quiet"]
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}

    sweep = subprocess.Popen(
        [sys.executable, "-c", SLOW_SWEEP, "sweep", *command], env=env, stderr=subprocess.PIPE
    )
    deadline = time.monotonic() + 120
    while not stored_ids(out) and sweep.poll() is None and time.monotonic() < deadline:
        time.sleep(0.01)
    sweep.send_signal(signal.SIGKILL)
    _, stderr = sweep.communicate()
    assert sweep.returncode == -signal.SIGKILL, stderr.decode()
    before = stored_ids(out)
    assert 1 <= len(before) < N_UNITS
    assert json.loads((out / "manifest.json").read_text())["status"] == "running"

    rerun = subprocess.run(
        [sys.executable, "-c", SWEEP, "sweep", *command], env=env, capture_output=True, check=False
    )
    assert rerun.returncode == 0, rerun.stderr.decode()
    after = stored_ids(out)
    assert after[: len(before)] == before  # nothing stored was rewritten
    assert sorted(after) == [f"u{k:05d}" for k in range(N_UNITS)]  # each unit exactly once
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["computed_in_last_run"] == N_UNITS - len(before)
    assert manifest["status"] == "complete"

    result = load_sweep(out)
    torch.testing.assert_close(result.values, expected.values, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(result.clean, expected.clean, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(result.corrupted, expected.corrupted, atol=1e-5, rtol=1e-5)
    assert result.descriptions == expected.descriptions
