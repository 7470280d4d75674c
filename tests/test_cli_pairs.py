"""``--pairs FILE.jsonl``: the user's own prompt pairs in every command that runs a task."""

from __future__ import annotations

import json

import pytest

import interv
from interv.cli import main
from interv.report.report import Report


@pytest.fixture
def own_pairs(tmp_path, monkeypatch):
    """Five induction pairs of the zoo's vocabulary, written as a user would, in agree.jsonl."""
    monkeypatch.chdir(tmp_path)
    pairs = interv.load_task("induction", n_pairs=5, seed=3)
    lines = [
        json.dumps({"clean": c, "corrupted": k, "target": t, "foil": f})
        for c, k, t, f in zip(pairs.clean, pairs.corrupted, pairs.targets, pairs.foils, strict=True)
    ]
    (tmp_path / "agree.jsonl").write_text("\n".join(lines) + "\n")
    return pairs, tmp_path


def test_paths_runs_on_the_users_pairs_and_names_them_in_the_scope(own_pairs, capsys):
    argv = ["paths", "induction-2l", "--pairs", "agree.jsonl", "--sender", "0", "2", "--top", "1"]
    assert main(argv) == 0
    first = capsys.readouterr().out.splitlines()[0]
    assert "on 5 prompts of 'agree'" in first and "in logits" in first


def test_n_pairs_takes_the_first_pairs_of_the_file(own_pairs, capsys):
    argv = ["interactions", "induction-2l", "--pairs", "agree.jsonl", "--n-pairs", "3"]
    assert main([*argv, "--heads", "L1H0", "L1H2"]) == 0
    out = capsys.readouterr().out
    assert "L1H0 & L1H2 (mean ablation): alone" in out


def test_pruning_takes_the_users_pairs(own_pairs, capsys):
    argv = ["pruning", "induction-2l", "--pairs", "agree.jsonl", "--rankings", "random"]
    assert main([*argv, "--max-heads", "2", "--layers", "1"]) == 0
    assert "scope:" in capsys.readouterr().out


@pytest.mark.slow
def test_demo_reports_on_the_users_pairs(own_pairs, capsys):
    argv = ["demo", "--pairs", "agree.jsonl", "--n-pairs", "3", "--layers", "1", "--out", "r"]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "scope: interv-zoo/induction-2l on agree, 3 prompts" in out
    saved = Report.from_dict(json.loads((own_pairs[1] / "r" / "report.json").read_text()))
    assert saved.header.task == "agree" and saved.header.n_prompts == 3


def test_task_and_pairs_together_are_refused_by_the_parser(own_pairs, capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["paths", "induction-2l", "--task", "ioi", "--pairs", "agree.jsonl", "--sender", "0"])
    assert exit_.value.code == 2
    assert "argument --pairs: not allowed with argument --task" in capsys.readouterr().err
