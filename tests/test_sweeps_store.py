"""The sweep directory: append-only records survive torn writes, one config per directory."""

from __future__ import annotations

import json
import os

import pytest

from interv.errors import IntervError
from interv.sweeps.config import parse_config
from interv.sweeps.execute import store_units
from interv.sweeps.plan import Shard
from interv.sweeps.store import SweepStore, read_manifest, read_units

RAW = {
    "model": {"spec": "induction-2l"},
    "task": {"name": "induction"},
    "sweep": {"interventions": [{"kind": "zero_ablation"}]},
}
CONFIG = parse_config(RAW)
TASK = "0123456789abcdef"  # a task fingerprint


def record(index: int, value: float = 1.5) -> dict:
    """A unit record as the sweep writes it (one intervention, one prompt)."""
    return {
        "unit": f"u{index:05d}",
        "config_hash": CONFIG.config_hash,
        "start": index,
        "kinds": ["ZeroAblation"],
        "descriptions": [f"unit {index}"],
        "base_runs": ["clean"],
        "values": [[value]],
    }


def test_new_directory_gets_a_running_manifest_with_versions_and_config(tmp_path):
    with SweepStore.open(tmp_path / "out", CONFIG, None, TASK):
        pass
    manifest = read_manifest(tmp_path / "out")
    assert manifest["status"] == "running"
    assert manifest["finished"] is None
    assert manifest["config"] == CONFIG.normalized
    assert manifest["config_hash"] == CONFIG.config_hash
    assert set(manifest["versions"]) == {"interv", "torch", "transformer-lens"}
    assert manifest["seed"] == 0


def test_appended_records_read_back_and_a_torn_last_line_is_dropped_then_cut(tmp_path):
    with SweepStore.open(tmp_path, CONFIG, None, TASK) as store:
        store.append(record(0))
        store.append(record(1))
    units = tmp_path / "units.jsonl"
    whole = units.read_bytes()
    units.write_bytes(whole + json.dumps(record(2)).encode()[:17])  # a write torn mid-line
    assert sorted(read_units(tmp_path, CONFIG.config_hash)) == ["u00000", "u00001"]
    with SweepStore.open(tmp_path, CONFIG, None, TASK) as store:
        assert units.read_bytes() == whole  # reopening cut the torn tail
        store.append(record(2))
    assert sorted(read_units(tmp_path, CONFIG.config_hash)) == ["u00000", "u00001", "u00002"]
    assert len(units.read_text().splitlines()) == 3


def test_equal_duplicates_are_merged_and_different_duplicates_refused(tmp_path):
    with SweepStore.open(tmp_path, CONFIG, None, TASK) as store:
        store.append(record(0))
        store.append(record(0))
        assert list(store.completed()) == ["u00000"]
        store.append(record(0, value=2.5))
        with pytest.raises(IntervError, match="unit u00000 is stored twice with different"):
            store.completed()


def test_a_complete_line_that_is_not_json_is_an_error_not_a_silent_loss(tmp_path):
    with SweepStore.open(tmp_path, CONFIG, None, TASK) as store:
        store.append(record(0))
    with (tmp_path / "units.jsonl").open("a") as handle:
        handle.write("{not json\n")
    with pytest.raises(IntervError, match="line 2 is not a JSON record"):
        read_units(tmp_path, CONFIG.config_hash)


def test_another_config_into_a_directory_with_results_is_refused_with_the_differing_keys(
    tmp_path,
):
    with SweepStore.open(tmp_path, CONFIG, None, TASK) as store:
        store.append(record(0))
    other = parse_config({**RAW, "sweep": {**RAW["sweep"], "metric": "prob"}})
    with pytest.raises(IntervError) as error:
        SweepStore.open(tmp_path, other, None, TASK)
    message = str(error.value)
    assert str(tmp_path) in message
    assert 'sweep.metric: "logit_diff" -> "prob"' in message
    with pytest.raises(IntervError, match=r"results of shard None .*not 1/2; rerun with --shard"):
        SweepStore.open(tmp_path, CONFIG, Shard(1, 2), TASK)


def test_a_directory_without_results_starts_afresh_with_another_config(tmp_path):
    with SweepStore.open(tmp_path, CONFIG, None, TASK):
        pass  # as when the model named by the config failed to load
    other = parse_config({**RAW, "model": {"spec": "induction-2l", "device": "meta"}})
    with SweepStore.open(tmp_path, other, Shard(0, 2), TASK) as store:
        assert store.manifest["config_hash"] == other.config_hash
    assert read_manifest(tmp_path)["shard"] == "0/2"


def test_a_non_empty_directory_that_is_not_a_sweep_is_refused(tmp_path):
    (tmp_path / "notes.txt").write_text("mine")
    with pytest.raises(IntervError, match=r"neither empty nor a sweep directory .*notes\.txt"):
        SweepStore.open(tmp_path, CONFIG, None, TASK)


def test_a_directory_is_written_by_one_process_at_a_time(tmp_path):
    with (
        SweepStore.open(tmp_path, CONFIG, None, TASK),
        pytest.raises(IntervError, match="is being written by another process"),
    ):
        SweepStore.open(tmp_path, CONFIG, None, TASK)
    with SweepStore.open(tmp_path, CONFIG, None, TASK):  # released on close
        pass


def test_finish_records_the_end_time_atomically_and_leaves_no_temporary_file(tmp_path):
    with SweepStore.open(tmp_path, CONFIG, None, TASK) as store:
        store.record_plan(3, 7)
        store.finish()
    manifest = read_manifest(tmp_path)
    assert (manifest["status"], manifest["n_units"], manifest["n_interventions"]) == (
        "complete",
        3,
        7,
    )
    assert manifest["finished"] >= manifest["started"]
    assert sorted(os.listdir(tmp_path)) == [".interv-files.json", ".lock", "manifest.json"]


def test_a_changed_plan_under_the_same_config_is_refused(tmp_path):
    with SweepStore.open(tmp_path, CONFIG, None, TASK) as store:
        store.record_plan(3, 7)
    with (
        SweepStore.open(tmp_path, CONFIG, None, TASK) as store,
        pytest.raises(IntervError, match="planned with n_units=3, now 4"),
    ):
        store.record_plan(4, 9)


def test_progress_bar_with_eta_only_when_asked_or_on_a_terminal(tmp_path, capsys):
    baselines = {"config_hash": CONFIG.config_hash}
    with SweepStore.open(tmp_path, CONFIG, None, TASK) as store:
        computed = [(record(k), baselines) for k in (1, 2)]
        store_units(store, computed, n_done=1, n_todo=2, progress=True)
        bar = capsys.readouterr().err
        assert "sweep units" in bar
        assert "3/3" in bar
        assert "<00:00" in bar  # the ETA
        store_units(store, [(record(3), baselines)], n_done=3, n_todo=1, progress=None)
        assert capsys.readouterr().err == ""  # stderr is not a terminal under pytest
        assert sorted(store.completed()) == ["u00001", "u00002", "u00003"]


def test_same_config_on_other_prompt_pairs_is_refused_once_results_exist(tmp_path):
    with SweepStore.open(tmp_path, CONFIG, None, TASK) as store:
        store.append(record(0))
    with pytest.raises(IntervError, match=r"same config on other prompt pairs .*JSONL file"):
        SweepStore.open(tmp_path, CONFIG, None, "fedcba9876543210")
