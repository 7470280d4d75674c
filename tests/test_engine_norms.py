"""interv.engine.norms.norm_form: a norm's closed form identified from its own outputs.

Each form (torch's LayerNorm, Llama's RMSNorm ``w``, Gemma's ``1 + w``) is named on a seeded
probe and on a given input alike, and the named form applied by hand reproduces the module;
a module of another form, or without a weight of one axis, is not named.
"""

from __future__ import annotations

import pytest
import torch

from interv.engine.norms import norm_form
from tests._norms import norms


def _modules(d: int = 12) -> dict[str, torch.nn.Module]:
    torch.manual_seed(4)
    return norms(d)


@pytest.mark.parametrize(
    ("name", "centered", "plus_one"),
    [("layernorm", True, False), ("llama", False, False), ("gemma", False, True)],
)
def test_each_form_is_named_and_reproduces_its_module(name, centered, plus_one):
    module = _modules()[name]
    form = norm_form(module)
    assert (form.centered, form.plus_one) == (centered, plus_one)
    assert form.eps == float(getattr(module, "variance_epsilon", getattr(module, "eps", 0)))
    x = torch.randn(3, 5, 12, dtype=torch.float64) * 2
    bias = getattr(module, "bias", None)
    want = module.double()(x)
    got = form.apply(x, form.gain(module)) + (0.0 if bias is None else bias.detach().double())
    # Llama's module normalizes in float32 whatever its input
    torch.testing.assert_close(got, want, rtol=1e-6, atol=1e-6)
    assert norm_form(_modules()[name], torch.randn(2, 12)) == norm_form(_modules()[name])


def test_a_module_of_another_form_or_shape_is_not_named():
    assert norm_form(_modules()["max"]) is None
    assert norm_form(torch.nn.Linear(4, 4)) is None  # a weight of two axes
    assert norm_form(_modules()["llama"], torch.randn(2, 7)) is None  # the input's width


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("name", ["layernorm", "llama", "gemma"])
def test_a_half_precision_norm_is_named_by_its_weights(name, dtype):
    """Its own rounding (~4e-3 relative) would hide every form at float32's tolerance: the
    form is identified on a float64 copy, and the module is left in its dtype."""
    module = _modules()[name].to(dtype)
    full = _modules()[name]
    assert norm_form(module) == norm_form(full) is not None
    assert module.weight.dtype == dtype
