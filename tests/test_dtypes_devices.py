"""Half-precision models and devices, end to end (concentration, run, report).

Bounds follow the dtype: with ``eps`` its machine epsilon (bfloat16 2^-7, float16
2^-10), a half-precision model's effects stay within ``4 eps x`` the effect scale of the
float32 model's, and its concentration numbers within ``4 eps`` (fractions) of them.
Device tests run on every device this machine has: the CPU here, a GPU where one exists.
"""

from __future__ import annotations

import pytest
import torch

import interv

HALF = [torch.bfloat16, torch.float16]
DEVICES = ["cpu", *(["cuda"] if torch.cuda.is_available() else [])]


def interventions():
    return [
        *(interv.ZeroAblation(layer, head) for layer in range(2) for head in range(4)),
        interv.MeanAblation(1, 2),
        interv.ActivationPatch("z", 0, 2),
        interv.ValueScale(1, 0),
        interv.DirectEffect(1, 1),
        interv.PathPatch(0, 2, ((1, 0),), "k"),
    ]


@pytest.fixture(scope="module")
def reference():
    model = interv.load_model("induction-2l")
    task = interv.load_task("induction", n_pairs=16, seed=0).tokenize(model)
    result = interv.run(model, task, interventions())
    return task, result, interv.concentration(model, task, query_positions=[-1])


@pytest.mark.parametrize("dtype", HALF, ids=str)
def test_half_precision_matches_float32_within_a_bound_set_by_the_dtype(reference, dtype):
    task, expected, expected_heads = reference
    eps = torch.finfo(dtype).eps
    model = interv.load_model("induction-2l", dtype=dtype)
    result = interv.run(model, task, interventions())
    heads = interv.concentration(model, task, query_positions=[-1])
    scale = float((expected.clean - expected.corrupted).abs().mean())
    effect = result.values - result.clean
    effect32 = expected.values - expected.clean
    assert result.values.dtype == torch.float32  # readouts come back in float32
    assert float((effect - effect32).abs().mean(-1).max()) <= 4 * eps * scale
    for name in ("normalized_entropy", "sink_mass", "content_normalized_entropy"):
        difference = (heads.metric(name) - expected_heads.metric(name)).abs()
        assert float(difference.nan_to_num().max()) <= 4 * eps, name
    report = interv.build_report(result, heads, n_bootstrap=20)
    assert len(report.rows) == len(interventions()) and report.decomposition


@pytest.mark.parametrize("device", DEVICES)
def test_models_on_a_device_give_the_cpu_numbers(reference, device):
    task, expected, expected_heads = reference
    model = interv.load_model("induction-2l", device=device)
    assert {p.device.type for p in model.parameters()} == {device}
    result = interv.run(model, task, interventions())
    heads = interv.concentration(model, task, query_positions=[-1])
    assert result.values.device.type == "cpu" and heads.entropy.device.type == "cpu"
    torch.testing.assert_close(result.values, expected.values, atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(
        heads.entropy, expected_heads.entropy, atol=1e-5, rtol=1e-5, equal_nan=True
    )


@pytest.mark.real_model
def test_smollm2_in_bfloat16_matches_float32(smollm2_bridge):
    eps = torch.finfo(torch.bfloat16).eps
    half = interv.load_model("smollm2-135m", dtype=torch.bfloat16)
    task = interv.load_task("ioi", n_pairs=4, seed=0).tokenize(smollm2_bridge)
    cells = [
        interv.ZeroAblation(23, 3),
        interv.ZeroAblation(20, 0),
        interv.ActivationPatch("z", 23, 3),
    ]
    full, low = (interv.run(m, task, cells) for m in (smollm2_bridge, half))
    scale = float((full.clean - full.corrupted).abs().mean())
    difference = ((low.values - low.clean) - (full.values - full.clean)).abs().mean(-1)
    assert float(difference.max()) <= 8 * eps * scale  # 30 layers of bfloat16 rounding
    heads = [interv.concentration(m, task, query_positions=[-1]) for m in (smollm2_bridge, half)]
    assert float((heads[0].normalized_entropy - heads[1].normalized_entropy).abs().max()) <= 8 * eps
