"""Sweep configs: every key and value validated before any model load, defaults normalized."""

from __future__ import annotations

import copy
import subprocess
import sys

import pytest
from hypothesis import given
from hypothesis import strategies as st

from interv.engine.registry import get_kind
from interv.errors import IntervError
from interv.sweeps import execute
from interv.sweeps.config import config_diff, load_config, parse_config

MINIMAL = {
    "model": {"spec": "induction-2l"},
    "task": {"name": "induction"},
    "sweep": {"interventions": [{"kind": "zero_ablation"}]},
}


def with_change(path: tuple, value: object) -> dict:
    raw = copy.deepcopy(MINIMAL)
    target = raw
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = value
    return raw


def test_defaults_are_filled_in_and_hash_ignores_spelled_out_defaults():
    config = parse_config(MINIMAL)
    assert config.sweep["metric"] == "logit_diff"
    assert config.sweep["interventions"] == [
        {"kind": "zero_ablation", "sites": "all_heads", "positions": None}
    ]
    explicit = with_change(("sweep", "batch_size"), 32)
    explicit["task"].update(n_pairs=16, seed=0)
    assert parse_config(explicit).config_hash == config.config_hash
    assert parse_config(with_change(("sweep", "batch_size"), 8)).config_hash != config.config_hash


def test_resample_seed_defaults_to_the_sweep_seed():
    raw = with_change(("sweep", "interventions"), [{"kind": "resample_ablation"}])
    raw["sweep"]["seed"] = 7
    assert parse_config(raw).sweep["interventions"][0]["seed"] == 7


@pytest.mark.parametrize(
    ("path", "value", "expected"),
    [
        (("model", "specs"), "x", "unknown key model.specs; allowed keys of model: ('spec', "),
        (("sweep", "metric"), "acc", "sweep.metric must be one of ('target_logit', "),
        (("sweep", "batch_size"), 0, "sweep.batch_size must be >= 1; got 0"),
        (("sweep", "unit_size"), 2.5, "sweep.unit_size must be an integer; got 2.5"),
        (("task", "n_pairs"), True, "task.n_pairs must be an integer; got True"),
        (("task", "padding_side"), "up", "task.padding_side must be one of ('right', 'left')"),
        (("model", "dtype"), "int8", "model.dtype must be one of ('float32', 'bfloat16',"),
        (("sweep", "interventions"), [], "sweep.interventions must be a non-empty array"),
    ],
)
def test_bad_values_name_the_key_and_the_allowed_values(path, value, expected):
    with pytest.raises(IntervError) as error:
        parse_config(with_change(path, value))
    assert expected in str(error.value)


@pytest.mark.parametrize(
    ("entry", "expected"),
    [
        (
            {"kind": "zero"},
            "sweep.interventions[0].kind: unknown intervention kind 'zero'; choose one of "
            "('activation_patch', 'add_vector', ",
        ),
        (
            {"kind": "no_such_module_xyz:Kind"},
            "sweep.interventions[0].kind: intervention kind 'no_such_module_xyz:Kind' names "
            "module 'no_such_module_xyz', which is not imported; interv does not import code a "
            "config or a manifest names unless you allow it: pass --allow-import "
            "no_such_module_xyz",
        ),
        (
            {"kind": "combined"},
            "kind 'combined' (Combined) has no 'layer' field, so a sweep cannot expand it",
        ),
        (
            {"kind": "value_scale", "factor": float("nan")},
            "sweep.interventions[0] (kind 'value_scale'): factor must be a finite number; got nan",
        ),
        (
            {"kind": "add_vector"},
            "missing key sweep.interventions[0].vector; kind 'add_vector' needs it",
        ),
        (
            {"kind": "zero_ablation", "factor": 0.5},
            "unknown key sweep.interventions[0] (kind 'zero_ablation').factor; allowed keys",
        ),
        (
            {"kind": "zero_ablation", "sites": {"layer": [0]}},
            "unknown key sweep.interventions[0].sites.layer; allowed keys of "
            "sweep.interventions[0].sites: ('layers', 'heads')",
        ),
        (
            {"kind": "zero_ablation", "sites": "all_layers"},
            "sweep.interventions[0].sites must be one of ('all_heads',); got 'all_layers'",
        ),
        (
            {"kind": "denoise", "component": "resid_pre", "sites": {"heads": [1]}},
            "unknown key sweep.interventions[0].sites.heads; allowed keys of "
            "sweep.interventions[0].sites: ('layers',)",
        ),
        (
            {"kind": "noise", "component": "mlp"},
            "sweep.interventions[0] (kind 'noise'): unknown component 'mlp'; choose one of "
            "('z', 'resid_pre',",
        ),
        (
            {"kind": "zero_ablation", "positions": "every"},
            "sweep.interventions[0].positions must be 'each' (one intervention per position)",
        ),
        (
            {"kind": "zero_ablation", "positions": [2, -1]},
            "sweep.interventions[0].positions[1] must be >= 0; got -1",
        ),
        (
            {"kind": "knockout", "key_positions": [0, 0]},
            "sweep.interventions[0] (kind 'knockout'): key_positions must not repeat a position; "
            "got [0, 0]",
        ),
        (
            {"kind": "mean_ablation", "reference": "other"},
            "sweep.interventions[0] (kind 'mean_ablation'): unknown reference 'other'; choose "
            "one of ('clean', 'corrupted')",
        ),
        (
            {"kind": "pattern_patch", "direction": "both"},
            "sweep.interventions[0] (kind 'pattern_patch'): unknown direction 'both'; choose "
            "one of ('denoise', 'noise')",
        ),
    ],
)
def test_bad_intervention_entries_name_the_key_path_and_the_choices(entry, expected):
    with pytest.raises(IntervError) as error:
        parse_config(with_change(("sweep", "interventions"), [entry]))
    assert expected in str(error.value)


def test_missing_and_conflicting_tables_are_named():
    raw = copy.deepcopy(MINIMAL)
    del raw["task"]
    with pytest.raises(IntervError, match=r"missing key config.task; config needs"):
        parse_config(raw)
    with pytest.raises(IntervError, match="task has both 'name' and 'path'"):
        parse_config(with_change(("task", "path"), "pairs.jsonl"))


def test_task_path_resolves_against_the_config_folder_but_is_hashed_as_written(tmp_path):
    (tmp_path / "sweep.toml").write_text(
        '[model]\nspec = "induction-2l"\n[task]\npath = "pairs.jsonl"\n'
        '[sweep]\n[[sweep.interventions]]\nkind = "zero_ablation"\n'
    )
    config = load_config(tmp_path / "sweep.toml")
    assert config.task["path"] == "pairs.jsonl"  # as written: the hash ignores the folder
    assert config.task_path == tmp_path / "pairs.jsonl"


def test_broken_toml_and_missing_file_raise_interv_errors(tmp_path):
    (tmp_path / "bad.toml").write_text("[model\n")
    with pytest.raises(IntervError, match="is not valid TOML"):
        load_config(tmp_path / "bad.toml")
    with pytest.raises(IntervError, match="does not exist"):
        load_config(tmp_path / "absent.toml")


def test_config_diff_lists_exactly_the_changed_leaves():
    old = parse_config(MINIMAL).normalized
    raw = with_change(("sweep", "batch_size"), 4)
    raw["sweep"]["interventions"] = [{"kind": "zero_ablation", "sites": {"layers": [1]}}]
    assert config_diff(old, parse_config(raw).normalized) == [
        "sweep.batch_size: 32 -> 4",
        'sweep.interventions[0].sites: "all_heads" -> (absent)',
        "sweep.interventions[0].sites.layers: (absent) -> [1]",
    ]


def test_invalid_config_fails_before_any_model_is_loaded(tmp_path, monkeypatch):
    def no_model(*args, **kwargs):
        raise AssertionError("a model was loaded for an invalid config")

    monkeypatch.setattr(execute.SweepWorker, "load", no_model)
    with pytest.raises(IntervError, match=r"sweep\.metric"):
        execute.run_sweep(with_change(("sweep", "metric"), "accuracy"), tmp_path / "out")
    assert not (tmp_path / "out").exists()


entries = st.one_of(
    st.fixed_dictionaries(
        {"kind": st.sampled_from(["zero_ablation", "mean_ablation", "resample_ablation"])},
        optional={
            "sites": st.one_of(
                st.just("all_heads"),
                st.fixed_dictionaries(
                    {}, optional={"layers": st.just([0, 1]), "heads": st.just([2])}
                ),
            ),
            "positions": st.one_of(
                st.just("each"), st.lists(st.integers(0, 9), min_size=1, max_size=3, unique=True)
            ),
        },
    ),
    st.fixed_dictionaries(
        {"kind": st.sampled_from(["denoise", "noise"])},
        optional={
            "component": st.sampled_from(["resid_pre", "attn_out"]),
            "sites": st.just({"layers": [1]}),
        },
    ),
    st.fixed_dictionaries(
        {"kind": st.sampled_from(["value_scale", "knockout"])},
        optional={"key_positions": st.lists(st.integers(0, 5), max_size=2, unique=True)},
    ),
)


@given(interventions=st.lists(entries, min_size=1, max_size=4), seed=st.integers(0, 99))
def test_normalizing_is_idempotent(interventions, seed):
    raw = copy.deepcopy(MINIMAL)
    raw["sweep"] = {"interventions": interventions, "seed": seed}
    normalized = parse_config(raw).normalized
    assert parse_config(copy.deepcopy(normalized)).normalized == normalized


def test_unknown_task_fails_before_any_directory_or_model(tmp_path, monkeypatch):
    monkeypatch.setattr(execute.SweepWorker, "load", pytest.fail)
    with pytest.raises(IntervError, match=r"unknown task 'inductoin'; available tasks are"):
        execute.run_sweep(with_change(("task", "name"), "inductoin"), tmp_path / "out")
    with pytest.raises(IntervError, match=r"task\.path '/nonexistent/pairs\.jsonl' does not"):
        execute.run_sweep({**MINIMAL, "task": {"path": "/nonexistent/pairs.jsonl"}}, tmp_path / "o")
    assert not (tmp_path / "out").exists()
    assert not (tmp_path / "o").exists()


def test_importing_sweeps_and_registering_their_commands_imports_no_torch():
    code = (
        "import argparse, sys, interv.sweeps; from interv.cli.sweeps import register; "
        "register(argparse.ArgumentParser().add_subparsers()); print('torch' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_every_public_sweeps_name_resolves():
    import interv.sweeps

    for name in interv.sweeps.__all__:
        assert getattr(interv.sweeps, name) is not None, name


def test_a_kind_reads_from_its_fields_whether_it_is_swept_over_heads():
    zero, patch, steer, project = (
        get_kind(name) for name in ("zero_ablation", "denoise", "add_vector", "project_out")
    )
    assert zero.takes_head({})  # a required head
    assert not steer.takes_head({"component": "resid_pre"})  # no head field
    assert patch.takes_head({"component": "z"})  # an optional head on a head component
    assert not patch.takes_head({"component": "resid_post"})
    assert not project.takes_head({"component": "resid_mid"})
    assert patch.options == ("component", "positions")  # direction is fixed by the kind
    built = patch.at({"kind": "denoise", "component": "z", "sites": "all_heads"}, layer=1, head=2)
    assert (built.layer, built.head, built.direction) == (1, 2, "denoise")
