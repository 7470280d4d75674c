"""DataFrames: long frames with units and semantics as columns; pandas stays optional."""

from __future__ import annotations

import contextlib
import dataclasses
import io
import math
import sys

import pandas as pd
import pytest
import torch
from _report_fixtures import make_concentration, make_result

from interv._pandas import require_pandas
from interv.analysis.concentration import METRICS
from interv.analysis.pruning.curves import PruningCurves
from interv.analysis.similarity import DISTANCE_UNITS, FlipRate, HeadSimilarity
from interv.cli import main
from interv.engine.interventions import ActivationPatch, MeanAblation, ZeroAblation
from interv.errors import IntervError
from interv.provenance import Provenance
from interv.report.render import to_json
from interv.report.table import build_report

N_PROMPTS = 4


@pytest.fixture(scope="module")
def toy():
    generator = torch.Generator().manual_seed(0)
    interventions = [
        ZeroAblation(0, 1),
        MeanAblation(1, 0, reference="clean"),
        ActivationPatch("z", 1, 1, direction="denoise"),
        ActivationPatch("resid_pre", 1, direction="denoise", positions=(3,)),
    ]
    result = make_result(
        torch.randn(len(interventions), N_PROMPTS, generator=generator),
        torch.randn(N_PROMPTS, generator=generator) + 3,
        torch.randn(N_PROMPTS, generator=generator),
        [type(iv).__name__ for iv in interventions],
        [iv.describe() for iv in interventions],
        [iv.base_run for iv in interventions],
        sites=[iv.site for iv in interventions],
    )
    per_prompt = {
        name: torch.rand(N_PROMPTS, 2, 2, generator=generator, dtype=torch.float64)
        for name in METRICS
    }
    concentration = make_concentration(per_prompt)
    report = build_report(result, concentration, interventions=interventions, n_bootstrap=20)
    return result, concentration, report


def test_result_frame_has_one_row_per_intervention_and_prompt_with_effect_and_semantics(toy):
    result, _, _ = toy
    frame = result.to_pandas()
    assert len(frame) == result.n_interventions * N_PROMPTS
    assert {"semantics", "unit", "kind", "base_run", "effect", "recovery"} <= set(frame.columns)
    assert set(frame["unit"]) == {"logits"}
    patch = frame[(frame["intervention"] == 2) & (frame["prompt"] == 1)].iloc[0]
    assert patch["base_run"] == "corrupted"
    assert patch["effect"] == pytest.approx(float(result.values[2, 1] - result.corrupted[1]))
    assert patch["semantics"] == result.descriptions[2]
    assert frame.loc[frame["intervention"] == 3, "positions"].iloc[0] == "3"
    wide = frame.pivot_table(index="prompt", columns="kind", values="effect", aggfunc="mean")
    assert list(wide.columns) == sorted(set(result.kinds))


def test_concentration_frame_is_long_with_each_metrics_unit(toy):
    _, concentration, _ = toy
    frame = concentration.to_pandas()
    assert len(frame) == N_PROMPTS * 2 * 2 * 1 * len(METRICS)
    assert dict(zip(frame["metric"], frame["unit"], strict=True)) == METRICS
    row = frame[
        (frame["metric"] == "sink_mass")
        & (frame["prompt"] == 2)
        & (frame["layer"] == 1)
        & (frame["head"] == 0)
    ].iloc[0]
    assert row["value"] == pytest.approx(float(concentration.sink_mass[2, 1, 0, 0]))
    assert row["label"] == "L1H0" and row["query_position"] == -1 and row["query_index"] == 4
    per_head = frame.pivot_table(index=["layer", "head"], columns="metric", values="value")
    assert per_head.loc[(1, 0), "entropy"] == pytest.approx(
        float(concentration.per_head("entropy")[1, 0])
    )


def test_report_frame_has_one_row_per_report_row_with_units(toy):
    _, _, report = toy
    frame = report.to_pandas()
    assert len(frame) == len(report.rows)
    assert list(frame["semantics"]) == [row.semantics for row in report.rows]
    assert list(frame["family"]) == ["ablation", "ablation", "patch", "patch"]
    assert set(frame["effect_unit"]) == {"logits"}
    assert frame.attrs["units"]["effect_mean"] == "logits"
    assert frame.attrs["units"]["normalized_entropy"] == METRICS["normalized_entropy"]
    assert frame.loc[0, "normalized_entropy"] == pytest.approx(
        report.rows[0].concentration["normalized_entropy"]
    )
    assert math.isnan(frame.loc[3, "normalized_entropy"])  # a residual patch: no head
    assert pd.isna(frame.loc[3, "head"]) and frame.loc[3, "layer"] == 1
    assert frame.loc[0, "recovery"] != frame.loc[0, "recovery"]  # ablations: NaN


def test_pruning_and_similarity_frames_carry_units_and_scope():
    curves = PruningCurves(
        orders={"entropy": ((0, 1), (1, 0))},
        values={"entropy": torch.tensor([1.0, 1.5, 2.5], dtype=torch.float64)},
        evaluation="loss",
        unit="nats per token",
        lower_is_better=True,
        ablation="heads mean-ablated over the text",
        scope="model m",
        rules={"entropy": "lowest entropy first"},
    )
    frame = curves.to_pandas()
    assert list(frame["k"]) == [0, 1, 2] and list(frame["value"]) == [1.0, 1.5, 2.5]
    assert set(frame["unit"]) == {"nats per token"}
    assert list(frame["heads_removed"]) == ["", "L0H1", "L0H1 L1H0"]
    assert "ci_low" not in frame  # no per-item values, no interval
    items = torch.tensor([[1.0, 1.0, 1.0], [1.0, 1.5, 2.0], [2.0, 2.5, 3.0]], dtype=torch.float64)
    with_items = dataclasses.replace(curves, item_values={"entropy": items}, items="chunks")
    frame = with_items.to_pandas()
    interval = with_items.intervals()["entropy"]
    assert frame[["ci_low", "ci_high"]].to_numpy().tolist() == interval.tolist()
    assert (frame["ci_low"] <= frame["ci_high"]).all() and frame.loc[0, "ci_low"] == 1.0
    assert "over the 3 chunks" in frame.attrs["interval"]
    flip = FlipRate("cosine", 0.25, 0.1, 0.4, 0.95, 10, 1, 0, 4, 4, False, 0)
    similarity = HeadSimilarity(
        per_prompt=torch.rand(1, 2, 2, 3, 3, dtype=torch.float64),
        aitchison_sink_term=torch.empty(0),
        aitchison_content_term=torch.empty(0),
        aitchison_sink_share=torch.empty(0),
        flips=(flip,),
        measures=("cosine",),
        head_labels=("L0H0", "L0H1", "L1H0"),
        model_name="m",
        n_prompts=2,
        prompt_lengths=(5, 5),
        n_rows=2,
        n_rows_no_content=0,
        zero_replacement=1e-6,
        n_zeros_replaced={"keep_sink": 0, "drop_sink": 0},
        sink_positions=(0,),
        mask_rule="causal",
        provenance=Provenance("m", n_prompts=2),
    )
    frame = similarity.to_pandas()
    assert len(frame) == 2 * 3  # two conventions x three head pairs
    assert set(frame["unit"]) == {DISTANCE_UNITS["cosine"]}
    assert set(frame["sink_positions"]) == {"0"}


def test_without_pandas_to_pandas_says_how_to_install_it(toy, monkeypatch):
    monkeypatch.setitem(sys.modules, "pandas", None)  # import pandas now raises ImportError
    with pytest.raises(IntervError, match=r"pip install 'interv\[pandas\]'"):
        require_pandas()
    with pytest.raises(IntervError, match="optional dependency"):
        toy[2].to_pandas()


@pytest.mark.slow
def test_importing_the_classes_with_frames_does_not_import_pandas():
    import subprocess

    modules = "interv._pandas, interv.engine.results, interv.report.table, interv.report.page"
    code = f"import sys, {modules}; print('pandas' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_report_command_writes_tables_instead_of_the_page(toy, tmp_path):
    report = toy[2]
    (tmp_path / "saved").mkdir()
    (tmp_path / "saved" / "report.json").write_text(to_json(report), encoding="utf-8")
    out = tmp_path / "tables"
    stdout = io.StringIO()
    with contextlib.redirect_stdout(stdout):
        status = main(["report", str(tmp_path / "saved"), "--out", str(out), "--csv", "--parquet"])
    assert status == 0
    assert sorted(p.name for p in out.iterdir()) == [
        ".interv-files.json",
        "rows.csv",
        "rows.parquet",
    ]
    for frame in (pd.read_csv(out / "rows.csv"), pd.read_parquet(out / "rows.parquet")):
        assert list(frame["semantics"]) == [row.semantics for row in report.rows]
        assert frame["effect_mean"].tolist() == pytest.approx([r.effect_mean for r in report.rows])
    assert "rows.csv" in stdout.getvalue() and "logits" in stdout.getvalue()


def test_report_command_writes_a_sweeps_per_prompt_effects(tmp_path):
    from interv.sweeps import load_sweep
    from interv.sweeps.execute import run_sweep

    config = {
        "model": {"spec": "induction-2l"},
        "task": {"name": "induction", "n_pairs": 4},
        "sweep": {
            "batch_size": 128,
            "interventions": [{"kind": "zero_ablation", "sites": "all_heads"}],
        },
    }
    run_sweep(config, tmp_path / "sweep", progress=False)
    with contextlib.redirect_stdout(io.StringIO()):
        status = main(["report", str(tmp_path / "sweep"), "--out", str(tmp_path / "t"), "--csv"])
    assert status == 0
    effects = pd.read_csv(tmp_path / "t" / "effects.csv")
    stored = load_sweep(tmp_path / "sweep")
    assert len(effects) == stored.n_interventions * stored.scope.n_prompts
    assert len(pd.read_csv(tmp_path / "t" / "rows.csv")) == stored.n_interventions
