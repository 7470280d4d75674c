"""The Ray executor on a local Ray instance: units computed by two workers, stored by the
driver, equal the single-process run."""

from __future__ import annotations

import json
import os

import pytest
import torch

from interv.sweeps import run_sweep

ray = pytest.importorskip("ray", reason="the Ray executor is an optional extra (interv[ray])")

from interv.sweeps.ray_executor import run_sweep_ray  # noqa: E402

os.environ.setdefault("HF_HUB_OFFLINE", "1")

RAW = {
    "model": {"spec": "induction-2l"},
    "task": {"name": "induction", "n_pairs": 6},
    "sweep": {
        "batch_size": 24,
        "unit_size": 2,
        "interventions": [
            {"kind": "zero_ablation"},
            {
                "kind": "denoise",
                "component": "resid_pre",
                "sites": {"layers": [1]},
                "positions": "each",
            },
        ],
    },
}


@pytest.mark.slow
def test_ray_workers_give_the_single_process_result(tmp_path):
    expected = run_sweep(RAW, tmp_path / "local", progress=False)
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        result = run_sweep_ray(RAW, tmp_path / "ray", n_workers=2, progress=False)
    finally:
        ray.shutdown()
    assert result.n_interventions == expected.n_interventions > 8
    torch.testing.assert_close(result.values, expected.values, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(result.clean, expected.clean, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(result.corrupted, expected.corrupted, atol=1e-5, rtol=1e-5)
    assert result.descriptions == expected.descriptions
    manifest = json.loads((tmp_path / "ray" / "manifest.json").read_text())
    assert manifest["status"] == "complete"
    n_units = -(-expected.n_interventions // 2)  # units of 2 interventions
    assert manifest["computed_in_last_run"] == manifest["n_units"] == n_units
