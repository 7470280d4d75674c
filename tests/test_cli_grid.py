"""The layer x position recovery grid of any task: ``interv grid`` and ``recovery_grid``."""

from __future__ import annotations

import json

import pytest

import interv
from interv.cli import main
from interv.demo import grid_interventions, recovery_grid
from interv.errors import IntervError
from interv.report.page import page_fragment


@pytest.fixture(scope="module")
def zoo():
    return interv.load_model("induction-2l")


def test_the_last_layers_resid_post_at_the_answer_recovers_everything(zoo):
    # one pair: the answer position is one position, where the final residual stream is
    # the clean run's, so the logits (and the recovery) are the clean ones
    pairs = interv.load_task("induction", n_pairs=1, seed=1)
    report = recovery_grid(zoo, pairs, component="resid_post", layers=[1], n_bootstrap=20)
    task = pairs.tokenize(zoo)
    answer = int(task.answer_positions[0])
    cells = {row.site.positions[0]: row for row in report.rows}
    assert len(cells) == task.n_positions
    assert cells[answer].recovery == pytest.approx(1.0, abs=1e-4)
    # causal attention: a position after the answer changes nothing
    assert all(abs(cells[p].effect_mean) < 1e-5 for p in range(answer + 1, task.n_positions))


def test_each_cell_is_the_exact_intervention_run_alone(zoo):
    task = interv.load_task("induction", n_pairs=4, seed=2).tokenize(zoo)
    report = recovery_grid(zoo, task, layers=[1], n_bootstrap=20)
    patch = grid_interventions(2, task.n_positions, layers=[1])[5]
    alone = interv.run(zoo, task, [patch], "logit_diff")
    (row,) = [r for r in report.rows if r.site == patch.site]
    assert row.semantics == patch.describe()
    assert row.effect_mean == pytest.approx(float(alone.effect[0].mean()), abs=1e-5)
    assert "data-part='grid'" in page_fragment(report)


def test_grid_prints_the_grid_with_its_sentence_and_writes_the_report(tmp_path, capsys):
    pairs = interv.load_task("induction", n_pairs=3, seed=3)
    with (tmp_path / "own.jsonl").open("w") as file:
        for c, k, t, f in zip(
            pairs.clean, pairs.corrupted, pairs.targets, pairs.foils, strict=True
        ):
            file.write(json.dumps({"clean": c, "corrupted": k, "target": t, "foil": f}) + "\n")
    argv = ["grid", "induction-2l", "--pairs", str(tmp_path / "own.jsonl"), "--out"]
    assert main([*argv, str(tmp_path / "g")]) == 0
    out = capsys.readouterr().out.splitlines()
    assert "on 3 prompts of 'own'" in out[0] and "logits" in out[0]
    assert "(resid_pre) from the clean run patched into the corrupted run at position 0" in out[1]
    assert "dimensionless" in out[2]
    assert out[3].startswith("prompt 0's clean tokens by position: 0:'<bos>' 1:")
    assert out[4].startswith("layer ") and out[5].startswith("L0 ") and out[6].startswith("L1 ")
    assert "largest recovery:" in out
    page = (tmp_path / "g" / "report.html").read_text()
    assert "Recovery by layer and position" in page
    assert (tmp_path / "g" / "recovery_by_layer_position.png").is_file()


def test_a_bad_grid_option_fails_before_the_model_loads(capsys, monkeypatch):
    import interv.models.loading

    monkeypatch.setattr(interv.models.loading, "load_model", pytest.fail)
    assert main(["grid", "induction-2l", "--layers", "-1"]) == 2
    assert "--layers" in capsys.readouterr().err
    with pytest.raises(IntervError, match=r"unknown grid component 'z'; choose one of"):
        grid_interventions(2, 4, component="z")
    with pytest.raises(IntervError, match=r"layer 2 is out of range"):
        grid_interventions(2, 4, layers=[2])
