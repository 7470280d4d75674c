"""Sweeps on the zoo model: equal to the engine's own run, resumable, shardable, mergeable."""

from __future__ import annotations

import json
import os
import shutil

import pytest
import torch

from interv.cli import main
from interv.engine.runner import run
from interv.errors import IntervError
from interv.sweeps import execute, load_sweep, merge_sweeps, parse_config, run_sweep
from interv.sweeps.execute import SweepWorker
from interv.tasks.builtin import load_task

os.environ.setdefault("HF_HUB_OFFLINE", "1")

RAW = {
    "model": {"spec": "induction-2l"},
    "task": {"name": "induction", "n_pairs": 6, "seed": 3},
    "sweep": {
        "batch_size": 24,
        "unit_size": 3,
        "interventions": [
            {"kind": "zero_ablation"},
            {"kind": "resample_ablation", "sites": {"layers": [1]}, "seed": 4},
            {
                "kind": "denoise",
                "component": "resid_pre",
                "sites": {"layers": [1]},
                "positions": [1, 5],
            },
            {"kind": "knockout", "sites": {"layers": [1], "heads": [0]}},
        ],
    },
}
N_INTERVENTIONS = 8 + 4 + 1 + 1  # 14 in 5 units of 3, 3, 3, 3, 2


def assert_same_result(actual, expected):
    """Equal to float rounding: a sweep batches the interventions into other forwards than
    a single run does, so bitwise equality depends on the CPU's kernels."""
    close = {"atol": 1e-5, "rtol": 1e-5}
    torch.testing.assert_close(actual.values, expected.values, **close)
    torch.testing.assert_close(actual.clean, expected.clean, **close)
    torch.testing.assert_close(actual.corrupted, expected.corrupted, **close)
    torch.testing.assert_close(actual.recovery, expected.recovery, equal_nan=True, **close)
    assert actual.n_undefined_recovery == expected.n_undefined_recovery
    assert actual.descriptions == expected.descriptions
    assert actual.kinds == expected.kinds
    assert actual.base_runs == expected.base_runs
    assert actual.metric == expected.metric
    assert actual.scope == expected.scope


@pytest.fixture(scope="module")
def single(tmp_path_factory):
    directory = tmp_path_factory.mktemp("sweeps") / "single"
    return directory, run_sweep(RAW, directory, progress=False)


def test_sweep_equals_the_engine_run_on_the_same_interventions(single):
    _, result = single
    worker = SweepWorker.load(parse_config(RAW))
    interventions = tuple(iv for unit in worker.units for iv in unit.interventions)
    assert len(interventions) == N_INTERVENTIONS
    assert [len(unit.interventions) for unit in worker.units] == [3, 3, 3, 3, 2]
    # the engine groups 24 // 6 = 4 interventions per forward; a unit of 3 fits in one
    direct = run(worker.model, worker.task, interventions, "logit_diff", max_batch_size=24)
    assert_same_result(result, direct)


def test_directory_reads_back_to_the_same_result_without_a_model(single, monkeypatch):
    directory, result = single
    monkeypatch.setattr(execute.SweepWorker, "load", pytest.fail)
    assert_same_result(load_sweep(directory), result)
    assert_same_result(run_sweep(RAW, directory, progress=False), result)  # complete: no model
    manifest = json.loads((directory / "manifest.json").read_text())
    assert (manifest["status"], manifest["n_units"], manifest["shard"]) == ("complete", 5, None)
    assert manifest["finished"] is not None


def test_resume_after_a_torn_write_recomputes_only_the_missing_units(single, tmp_path):
    directory, result = single
    resumed = tmp_path / "resumed"
    shutil.copytree(directory, resumed)
    lines = (resumed / "units.jsonl").read_bytes().splitlines(keepends=True)
    # as after a kill during the third append: two whole lines and half of the third
    (resumed / "units.jsonl").write_bytes(b"".join(lines[:2]) + lines[2][: len(lines[2]) // 2])
    manifest = json.loads((resumed / "manifest.json").read_text())
    manifest.update(status="running", finished=None)
    (resumed / "manifest.json").write_text(json.dumps(manifest))
    assert_same_result(run_sweep(RAW, resumed, progress=False), result)
    after = json.loads((resumed / "manifest.json").read_text())
    assert after["computed_in_last_run"] == 3
    assert len(after["resumed"]) == 1
    ids = [json.loads(line)["unit"] for line in (resumed / "units.jsonl").read_text().splitlines()]
    assert sorted(ids) == [f"u{k:05d}" for k in range(5)]


def test_merged_shards_equal_the_single_run(single, tmp_path):
    _, result = single
    shards = [tmp_path / f"shard{i}" for i in range(3)]
    parts = [run_sweep(RAW, shards[i], shard=f"{i}/3", progress=False) for i in range(3)]
    # shard 0 holds units 0 and 3 (interventions 0-2 and 9-11)
    assert parts[0].descriptions == result.descriptions[0:3] + result.descriptions[9:12]
    with pytest.raises(IntervError, match="do not cover the sweep: missing units"):
        merge_sweeps(shards[:2], tmp_path / "partial")
    assert_same_result(merge_sweeps(shards, tmp_path / "merged"), result)
    assert_same_result(merge_sweeps(shards, tmp_path / "merged"), result)  # idempotent
    lines = (tmp_path / "merged" / "units.jsonl").read_text().splitlines()
    assert len(lines) == 5


def test_merging_sweeps_of_different_configs_is_refused(single, tmp_path):
    directory, _ = single
    other = json.loads(json.dumps(RAW))
    other["sweep"]["interventions"] = other["sweep"]["interventions"][:1]
    run_sweep(other, tmp_path / "other", progress=False)
    with pytest.raises(
        IntervError, match=r"(?s)their configs differ .*sweep\.interventions\[1\]\.kind"
    ):
        merge_sweeps([directory, tmp_path / "other"], tmp_path / "merged")


def test_rerun_with_another_config_is_refused_before_loading_the_model(single, monkeypatch):
    directory, _ = single
    monkeypatch.setattr(execute.SweepWorker, "load", pytest.fail)
    other = json.loads(json.dumps(RAW))
    other["sweep"]["batch_size"] = 12
    with pytest.raises(IntervError, match=r"differing keys \(stored -> given\): sweep\.batch"):
        run_sweep(other, directory)


def test_incomplete_directory_does_not_load_as_a_result(single, tmp_path):
    directory, _ = single
    partial = tmp_path / "partial"
    shutil.copytree(directory, partial)
    lines = (partial / "units.jsonl").read_text().splitlines(keepends=True)
    (partial / "units.jsonl").write_text("".join(lines[:4]))
    with pytest.raises(
        IntervError, match=r"misses 1 of its 5 units .*says the sweep completed.*interv sweep "
    ):
        load_sweep(partial)


def test_a_failed_run_says_so_in_the_manifest_and_a_rerun_resumes(single, tmp_path, monkeypatch):
    _, result = single
    compute = execute.SweepWorker.compute

    def fail_on_the_third_unit(self, index):
        if index == 2:
            raise RuntimeError("out of memory (simulated)")
        return compute(self, index)

    monkeypatch.setattr(execute.SweepWorker, "compute", fail_on_the_third_unit)
    with pytest.raises(RuntimeError, match="simulated"):
        run_sweep(RAW, tmp_path / "failed", progress=False)
    manifest = json.loads((tmp_path / "failed" / "manifest.json").read_text())
    assert manifest["status"] == "failed"
    assert manifest["error"] == "RuntimeError: out of memory (simulated)"
    monkeypatch.setattr(execute.SweepWorker, "compute", compute)
    assert_same_result(run_sweep(RAW, tmp_path / "failed", progress=False), result)
    manifest = json.loads((tmp_path / "failed" / "manifest.json").read_text())
    assert (manifest["status"], manifest["computed_in_last_run"]) == ("complete", 3)


def test_a_run_that_fails_before_storing_anything_leaves_no_directory(tmp_path, monkeypatch):
    def no_model(config, model=None, pairs=None):
        raise KeyboardInterrupt

    monkeypatch.setattr(execute.SweepWorker, "load", no_model)
    with pytest.raises(KeyboardInterrupt):
        run_sweep(RAW, tmp_path / "new" / "sweep", progress=False)
    assert not (tmp_path / "new").exists()


def test_a_rerun_of_a_complete_sweep_says_it_computed_nothing(single, tmp_path, capsys):
    directory, _ = single
    copy = tmp_path / "copy"
    shutil.copytree(directory, copy)
    (tmp_path / "sweep.toml").write_text(tomli_w_dumps(RAW))
    assert main(["sweep", str(tmp_path / "sweep.toml"), "--out", str(copy)]) == 0
    out = capsys.readouterr().out
    assert "none computed by this run (every unit was stored already)" in out
    assert json.loads((copy / "manifest.json").read_text())["computed_in_last_run"] == 0


def tomli_w_dumps(raw: dict) -> str:
    """RAW as TOML (tables of scalars, lists and inline tables only)."""

    def value(v):
        if isinstance(v, dict):
            return "{" + ", ".join(f"{k} = {value(x)}" for k, x in v.items()) + "}"
        if isinstance(v, list):
            return "[" + ", ".join(value(x) for x in v) + "]"
        return json.dumps(v)

    lines = []
    for table, entries in raw.items():
        lines.append(f"[{table}]")
        for key, v in entries.items():
            if key == "interventions":
                continue
            lines.append(f"{key} = {value(v)}")
    for entry in raw["sweep"].get("interventions", []):
        lines.append("[[sweep.interventions]]")
        lines.extend(f"{key} = {value(v)}" for key, v in entry.items())
    return "\n".join(lines) + "\n"


def test_jsonl_task_cli_summary_and_refusal_of_edited_pairs(tmp_path, capsys):
    load_task("induction", n_pairs=6, seed=3).to_jsonl(tmp_path / "pairs.jsonl")
    (tmp_path / "sweep.toml").write_text(
        '[model]\nspec = "induction-2l"\n[task]\npath = "pairs.jsonl"\n'
        '[sweep]\nunit_size = 3\nbatch_size = 24\n[[sweep.interventions]]\nkind = "zero_ablation"\n'
    )
    out = tmp_path / "out"
    assert main(["sweep", str(tmp_path / "sweep.toml"), "--out", str(out)]) == 0
    summary = capsys.readouterr().out
    assert summary.startswith(
        "sweep complete (all units): 8 interventions x 6 prompts of task 'pairs' on model "
        "'interv-zoo/induction-2l', metric logit_diff in logits; 3 units in the whole sweep, "
        "3 computed by this run"
    )
    assert main(["sweep", str(tmp_path / "sweep.toml"), "--out", str(out), "--shard", "0/2"]) == 2
    assert "holds results of shard None (None = all units), not 0/2" in capsys.readouterr().err
    edited = load_task("induction", n_pairs=6, seed=4)
    edited.to_jsonl(tmp_path / "pairs.jsonl")
    assert main(["sweep", str(tmp_path / "sweep.toml"), "--out", str(out), "--quiet"]) == 2
    assert "same config on other prompt pairs" in capsys.readouterr().err
