"""Screened sweeps: each entry screened, stored as it goes, resumed without repeating work."""

from __future__ import annotations

import json

import pytest
import torch

import interv
from interv.audit import ESTIMATED, Screen
from interv.engine.interventions import ActivationPatch, ZeroAblation
from interv.errors import IntervError
from interv.sweeps import load_sweep, merge_sweeps, run_sweep
from interv.sweeps.config import parse_config
from interv.sweeps.ray_executor import run_sweep_ray
from interv.sweeps.store import SweepStore

SCREEN = {"top_k": 3, "audit": 20, "alpha": 0.2, "step": 3}


def config(**screen) -> dict:
    return {
        "model": {"spec": "induction-2l"},
        "task": {"name": "induction", "n_pairs": 8},
        "sweep": {
            "batch_size": 64,
            "unit_size": 4,
            "screen": screen or SCREEN,
            "interventions": [
                {"kind": "zero_ablation", "positions": "each", "sites": {"layers": [1]}},
                {"kind": "denoise"},
            ],
        },
    }


@pytest.fixture(scope="module")
def model():
    return interv.load_model("induction-2l")


@pytest.fixture(scope="module")
def whole_dir(model, tmp_path_factory):
    directory = tmp_path_factory.mktemp("whole") / "sweep"
    run_sweep(config(), directory, model=model)
    return directory


@pytest.fixture(scope="module")
def whole(whole_dir):
    return load_sweep(whole_dir)


def exact_records(directory) -> list[dict]:
    lines = (directory / "units.jsonl").read_text().splitlines()
    return [r for r in map(json.loads, lines) if r["unit"].startswith("x")]


def test_each_entry_is_one_screen_equal_to_a_screened_run(model, whole):
    task = interv.load_task("induction", n_pairs=8).tokenize(model)
    each = task.shared_positions  # "each": the positions real in every prompt
    first = [ZeroAblation(1, h, positions=(p,)) for h in range(4) for p in each]
    second = [ActivationPatch("z", layer, head) for layer in range(2) for head in range(4)]
    assert whole.n_interventions == len(first) + len(second)
    assert len(whole.screens) == 2
    for outcome, members in zip(whole.screens, (first, second), strict=True):
        alone = interv.run(model, task, members, max_batch_size=64, screen=Screen(**SCREEN))
        rows = list(outcome.indices)
        assert [whole.status[i] for i in rows] == list(alone.status)
        torch.testing.assert_close(whole.values[rows], alone.values, atol=1e-5, rtol=1e-5)
        assert outcome.audit.n_checked == alone.screens[0].audit.n_checked
    frame = whole.to_pandas()
    assert set(frame["status"]) <= {"exact (verified)", "exact (audit)", ESTIMATED}
    assert (frame["exact"] == (frame["status"] != ESTIMATED)).all()


def test_an_interrupted_screened_sweep_resumes_without_repeating_exact_work(
    model, whole, tmp_path, monkeypatch
):
    out = tmp_path / "sweep"
    append = SweepStore.append
    pieces = []

    def append_then_stop(self, record):
        append(self, record)
        if record["unit"].startswith("x"):
            pieces.append(record["unit"])
            if len(pieces) == 3:  # killed in the middle of the first entry's looks
                raise KeyboardInterrupt

    monkeypatch.setattr(SweepStore, "append", append_then_stop)
    with pytest.raises(KeyboardInterrupt):
        run_sweep(config(), out, model=model)
    monkeypatch.setattr(SweepStore, "append", append)
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["status"] == "interrupted"
    before = sum(len(r["indices"]) for r in exact_records(out))

    resumed = run_sweep(config(), out, model=model)
    indices = [i for record in exact_records(out) for i in record["indices"]]
    assert len(indices) == len(set(indices))  # no intervention was run exactly twice
    checked = sum(outcome.audit.n_checked for outcome in resumed.screens)
    assert len(indices) == checked
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["computed_in_last_run"] == checked - before
    assert resumed.status == whole.status
    torch.testing.assert_close(resumed.values, whole.values, atol=1e-5, rtol=1e-5)
    # a finished sweep reruns nothing
    n_records = len(exact_records(out))
    again = run_sweep(config(), out, model=model)
    assert len(exact_records(out)) == n_records
    assert json.loads((out / "manifest.json").read_text())["computed_in_last_run"] == 0
    assert again.status == whole.status


def test_an_unfinished_screened_sweep_says_to_rerun(model, tmp_path, monkeypatch):
    out = tmp_path / "sweep"
    append = SweepStore.append

    def stop_at_first_outcome(self, record):
        append(self, record)
        if record["unit"] == "a000":
            raise KeyboardInterrupt

    monkeypatch.setattr(SweepStore, "append", stop_at_first_outcome)
    with pytest.raises(KeyboardInterrupt):
        run_sweep(config(), out, model=model)
    with pytest.raises(IntervError, match=r"1 of its 2 entries unfinished.*rerun the same command"):
        load_sweep(out)


def test_screen_true_takes_the_defaults_and_the_sweep_seed():
    parsed = parse_config({**config(), "sweep": {**config()["sweep"], "screen": True, "seed": 4}})
    assert parsed.screen == Screen(seed=4)
    without = {**config(), "sweep": {k: v for k, v in config()["sweep"].items() if k != "screen"}}
    assert "screen" not in parse_config(without).sweep  # no key: unscreened hashes unchanged
    assert parse_config(without).screen is None
    one_look = parse_config(config(top_k=2, alpha=False)).screen
    assert one_look.alpha is None and one_look.top_k == 2


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"screen": {"top_k": 0}}, r"sweep.screen.top_k must be >= 1; got 0"),
        ({"screen": {"k": 3}}, r"unknown key sweep.screen.k; allowed keys of sweep.screen"),
        ({"screen": "yes"}, "sweep.screen must be a table with keys"),
        ({"screen": {"alpha": 2.0}}, r"sweep.screen: Screen alpha must lie in \(0, 1\)"),
        (
            {"screen": {"estimator": "hessian"}},
            r"sweep.screen: unknown Screen estimator 'hessian'; choose one of \('attribution', "
            "'integrated', 'gim', 'hvp'\\)",
        ),
        (
            {"screen": {"hvp_steps": 2}},
            r"sweep.screen: Screen hvp_steps \(2\) applies with estimator='hvp' only; got "
            "estimator='attribution'",
        ),
        (
            {"screen": {"estimator": "hvp", "hvp_steps": 0}},
            r"sweep.screen: Screen hvp_steps .* must be >= 1; got 0",
        ),
        (
            {"screen": {"estimator": "hvp", "hvp_steps": 1.5}},
            r"sweep.screen: Screen hvp_steps .* must be an integer; got 1.5",
        ),
        (
            {"screen": {"estimators": "hvp"}},
            r"unknown key sweep.screen.estimators; allowed keys of sweep.screen: \('top_k', "
            "'audit', 'alpha', 'budget', 'step', 'level', 'seed', 'bound', 'estimator', 'steps', "
            "'hvp_steps'\\)",
        ),
        (
            {"interventions": [{"kind": "value_scale"}]},
            "sweep.interventions\\[0\\] with sweep.screen: screen= cannot estimate.*"
            "'zero_ablation', 'mean_ablation'",
        ),
        (
            {"metric": "kl_from_clean"},
            "with sweep.screen: screen= with metric 'kl_from_clean' cannot estimate",
        ),
    ],
)
def test_bad_screened_configs_are_refused_before_any_model_loads(change, message):
    raw = config()
    raw["sweep"] = {**raw["sweep"], **change}
    with pytest.raises(IntervError, match=message):
        parse_config(raw)


def test_a_screened_sweep_refuses_shards_and_merging(whole_dir, tmp_path):
    with pytest.raises(IntervError, match="cannot be sharded"):
        run_sweep(config(), tmp_path / "shard", shard="0/2")
    with pytest.raises(IntervError, match="nothing to merge"):
        merge_sweeps([whole_dir], tmp_path / "merged")
    with pytest.raises(IntervError, match="runs in one process"):
        run_sweep_ray(config(), tmp_path / "ray")


def test_the_cli_screens_a_sweep_and_a_rerun_with_the_same_flags_resumes(tmp_path, capsys):
    from interv.cli import main

    path = tmp_path / "sweep.toml"
    path.write_text(
        '[model]\nspec = "induction-2l"\n[task]\nname = "induction"\nn_pairs = 8\n'
        '[sweep]\nbatch_size = 64\n[[sweep.interventions]]\nkind = "mean_ablation"\n'
    )
    argv = ["sweep", str(path), "--out", str(tmp_path / "out"), "--top-k", "2", "--audit", "5"]
    assert main(argv) == 0
    printed = capsys.readouterr().out
    assert "screened sweep complete: 8 interventions" in printed
    assert "8 intervened on exactly, none estimated" in printed  # the budget checked all 8
    assert "8 mean_ablation interventions: attribution (first-order)" in printed
    assert main(argv) == 0
    assert "0 exact evaluations by this run" in capsys.readouterr().out
    stored = load_sweep(tmp_path / "out").screens[0].audit.screen
    assert (stored.top_k, stored.audit, stored.alpha) == (2, 5, 0.05)


def test_the_estimator_is_a_key_of_the_screen_and_of_the_sweeps_identity(whole_dir, tmp_path):
    plain = parse_config(config())
    named = parse_config(config(**SCREEN, estimator="attribution"))
    assert named.config_hash == plain.config_hash  # the default: the same sweep, same hash
    assert "estimator" not in plain.sweep["screen"]
    hvp = parse_config(config(**SCREEN, estimator="hvp", hvp_steps=2))
    assert hvp.screen == Screen(**SCREEN, estimator="hvp", hvp_steps=2)
    assert hvp.config_hash != plain.config_hash
    integrated = parse_config(config(**SCREEN, estimator="integrated", steps=3))
    assert (integrated.screen.estimator, integrated.screen.steps) == ("integrated", 3)
    # a directory screened by attribution is another sweep's: refused, before any model loads
    with pytest.raises(IntervError, match=r'sweep.screen.estimator: \(absent\) -> "hvp"'):
        run_sweep(config(**SCREEN, estimator="hvp"), whole_dir)


def _hvp_config() -> dict:
    return {
        "model": {"spec": "induction-2l"},
        "task": {"name": "induction", "n_pairs": 8},
        "sweep": {
            "batch_size": 8,  # one intervention per exact forward: several exact records
            "screen": {"top_k": 2, "audit": 3, "alpha": False, "estimator": "hvp"},
            "interventions": [{"kind": "zero_ablation"}],
        },
    }


def _records(directory, prefix: str) -> list[dict]:
    lines = (directory / "units.jsonl").read_text().splitlines()
    return [r for r in map(json.loads, lines) if r["unit"].startswith(prefix)]


def test_a_resumed_hvp_screened_sweep_equals_an_uninterrupted_one(model, tmp_path, monkeypatch):
    whole = run_sweep(_hvp_config(), tmp_path / "whole", model=model)
    reliability = whole.screens[0].audit.reliability
    assert reliability is not None and reliability.shape == (8,)
    (estimates,) = _records(tmp_path / "whole", "e")
    assert estimates["reliability"] == [float(r) for r in reliability]  # stored with them

    out = tmp_path / "sweep"
    append = SweepStore.append

    def append_then_stop(self, record):
        append(self, record)
        if record["unit"].startswith("x"):  # killed after the first exact forward
            raise KeyboardInterrupt

    monkeypatch.setattr(SweepStore, "append", append_then_stop)
    with pytest.raises(KeyboardInterrupt):
        run_sweep(_hvp_config(), out, model=model)
    monkeypatch.setattr(SweepStore, "append", append)
    assert not _records(out, "a")
    resumed = run_sweep(_hvp_config(), out, model=model)
    assert _records(out, "e") == [estimates]  # the same estimates and scores, reused
    audit, fresh = resumed.screens[0].audit, whole.screens[0].audit
    assert torch.equal(audit.reliability, fresh.reliability)
    assert audit.method == fresh.method and "HVP" in audit.method
    assert resumed.status == whole.status
    torch.testing.assert_close(resumed.values, whole.values, atol=1e-5, rtol=1e-5)
    (stored,), (again,) = _records(tmp_path / "whole", "a"), _records(out, "a")
    assert stored["outcome"]["audit"]["reliability"] == again["outcome"]["audit"]["reliability"]


def test_the_cli_sets_the_estimator_and_refuses_a_bad_one_in_one_line(tmp_path, capsys):
    from interv.audit import ESTIMATORS
    from interv.cli import build_parser, main
    from interv.cli.sweeps import ESTIMATORS as LISTED
    from interv.cli.sweeps import _screened

    assert LISTED == ESTIMATORS  # --help lists the library's estimators
    path = tmp_path / "sweep.toml"
    path.write_text(
        '[model]\nspec = "induction-2l"\n[task]\nname = "induction"\n'
        '[[sweep.interventions]]\nkind = "mean_ablation"\n'
    )
    argv = ["sweep", str(path), "--out", str(tmp_path / "out")]
    args = build_parser().parse_args([*argv, "--estimator", "hvp", "--hvp-steps", "3"])
    screened = _screened(interv.sweeps.load_config(path), args)
    assert screened.screen == Screen(estimator="hvp", hvp_steps=3)
    assert main([*argv, "--hvp-steps", "3"]) == 2
    said = capsys.readouterr().err
    assert said.count("\n") == 1
    assert "sweep.screen: Screen hvp_steps (3) applies with estimator='hvp' only" in said
    assert not (tmp_path / "out").exists()  # refused before any directory or model


def test_the_docs_hvp_table_is_a_valid_screen_of_the_example_sweep():
    import re
    import tomllib
    from pathlib import Path

    root = Path(__file__).parent.parent
    page = (root / "docs" / "sweeps.md").read_text(encoding="utf-8")
    (table,) = [b for b in re.findall(r"^```toml\n(.*?)^```", page, re.S | re.M) if "hvp" in b]
    raw = tomllib.loads((root / "examples" / "sweep_screen.toml").read_text(encoding="utf-8"))
    raw["sweep"]["screen"] = tomllib.loads(table)["sweep"]["screen"]
    assert parse_config(raw).screen == Screen(top_k=5, audit=60, seed=0, estimator="hvp")
