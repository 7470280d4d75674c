"""Devices and dtypes: the device check's smoke run (benchmarks/device_check.py, the CPU in
float32 and bfloat16) and a multi-device map passed through ``load_model``."""

from __future__ import annotations

import math
import sys
import time
from pathlib import Path

import pytest
import torch
from _families import family

import interv
from interv.engine.forward import Prompts, forward
from interv.errors import IntervError

BENCHMARKS = Path(__file__).parent.parent / "benchmarks"


@pytest.fixture(scope="module")
def device_check():
    sys.path.insert(0, str(BENCHMARKS))
    try:
        import device_check

        yield device_check
    finally:
        sys.path.remove(str(BENCHMARKS))


def test_the_device_checks_smoke_run_compares_every_step_with_cpu_float32(device_check):
    start = time.perf_counter()
    report = device_check.main(["--smoke"])
    print(f"device check --smoke: {time.perf_counter() - start:.1f} s")
    configurations = report["configurations"]
    assert set(configurations) == {"cpu float32", "cpu bfloat16"}
    for got in configurations.values():
        assert set(got["figures"]) == set(device_check.STEPS)
        assert got["attention"] == "recomputed from queries and keys, no pattern"
    compared = configurations["cpu bfloat16"]["against_cpu_float32"]
    assert set(compared) == {
        "concentration.normalized_entropy",
        "concentration.sink_mass",
        "sweep.effect",
        "screened.effect",
        "circuits.scores",
        "circuits.faithfulness",
    }
    for name, cells in compared.items():
        assert cells["nan_agree"], name
        assert math.isfinite(cells["max_abs_difference"]), name
    # bfloat16 weights, row numbers accumulated in float32/float64: close to float32's
    assert compared["concentration.normalized_entropy"]["max_abs_difference"] < 1e-2
    assert compared["concentration.sink_mass"]["max_abs_difference"] < 1e-2


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a CUDA device")
def test_the_device_check_says_it_was_not_run_without_a_gpu(device_check):
    report = device_check.main(["--device", "cuda"])
    assert report["not_run"].startswith("device 'cuda': this machine has no CUDA device")


def test_load_model_passes_a_device_map_through_the_bridge():
    fam = family("llama")
    mapped = interv.load_model(str(fam.directory), device_map={"": "cpu"})
    plain = interv.load_model(str(fam.directory))
    prompts = Prompts(fam.tokens, fam.real)
    torch.testing.assert_close(forward(mapped, prompts).readout, forward(plain, prompts).readout)
    with pytest.raises(IntervError, match=r"either device .* or device_map, not both"):
        interv.load_model(str(fam.directory), device="cpu:0", device_map="auto")
    with pytest.raises(IntervError, match="device_map applies to Hugging Face models"):
        interv.load_model("induction-2l", device_map="auto")
    with pytest.raises(IntervError, match="device_map must be"):
        interv.load_model(str(fam.directory), device_map=3)
