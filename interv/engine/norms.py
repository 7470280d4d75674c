"""Which normalization a plain torch module computes, identified from its own outputs.

Two consumers need a norm's closed form, not just its output: AtP*'s QK fix takes the change
of a block's first norm apart (``norm(x + d) - norm(x)`` from two sums per sender), and
GIM's backward holds a norm's statistic constant. Transformer-lens's bridge says what its
own normalization components compute (``uses_rms_norm``, ``uses_weight_offset``), but the
Hugging Face modules under it (a Gemma-3 layer's per-head ``q_norm``, Llama's
``LlamaRMSNorm``) are classes of their own, neither ``torch.nn.LayerNorm`` nor
``torch.nn.RMSNorm``. :func:`norm_form` identifies the form numerically: one of

- LayerNorm: ``weight * (x - mean(x)) * r + bias``,
- RMSNorm: ``weight * x * r``,
- Gemma's RMSNorm: ``(1 + weight) * x * r``,

with ``r = (mean of the squares (of x centered, for a LayerNorm) + eps) ** -0.5`` over the
last axis, must reproduce the module's output on an input and on a moved one to float32
precision (on a float64 copy of the module, so a bfloat16 model's norms are identified by
their weights, not hidden by their rounding); a module none reproduces is not identified
(None), and each consumer says what it does then. The result is cached per module and
identified again after the module's weight is edited in place or a hook is added to it.
"""

from __future__ import annotations

import contextlib
import weakref
from copy import deepcopy
from dataclasses import dataclass
from typing import Any

import torch

__all__ = ["NormForm", "norm_form"]


@dataclass(frozen=True)
class NormForm:
    """A norm's closed form (module docstring).

    Attributes:
        centered: LayerNorm (subtracts the mean, may add a bias) or RMSNorm.
        plus_one: the gain is ``1 + weight`` (Gemma's RMSNorm) rather than ``weight``.
        eps: added to the mean of the squares.
    """

    centered: bool
    plus_one: bool
    eps: float

    def gain(self, module: Any) -> torch.Tensor:
        """The module's gain ``[d]`` float64 (``weight`` or ``1 + weight``), detached."""
        weight = module.weight.detach().double()
        return weight + 1.0 if self.plus_one else weight

    def apply(self, x: torch.Tensor, gain: torch.Tensor) -> torch.Tensor:
        """The norm of ``x`` ``[..., d]`` with ``gain`` and no bias, in ``x``'s dtype."""
        if self.centered:
            x = x - x.mean(-1, keepdim=True)
        return gain * x * (x.square().mean(-1, keepdim=True) + self.eps).rsqrt()


_SHAPES = ((True, False), (False, False), (False, True))
"""``(centered, plus_one)`` of each form tried, in order: LayerNorm, RMSNorm, Gemma's."""

_KNOWN: weakref.WeakKeyDictionary[Any, Any] = weakref.WeakKeyDictionary()
"""Per module, the form :func:`norm_form` identified and the module's state then."""


def norm_form(module: Any, x: torch.Tensor | None = None) -> NormForm | None:
    """The form of ``module`` (module docstring), or None where no form reproduces it.

    Args:
        module: a torch module with a ``weight`` ``[d]`` and an ``eps`` (or Hugging Face's
            ``variance_epsilon``).
        x: an input ``[..., d]`` to identify on (and on ``x`` moved by its own flip); None: a
            fixed seeded input of 4 rows. Used only when the module is not already identified
            in its present state.
    """
    weight = getattr(module, "weight", None)
    eps = getattr(module, "variance_epsilon", getattr(module, "eps", None))
    if not isinstance(weight, torch.Tensor) or weight.dim() != 1:
        return None
    if isinstance(eps, bool) or not isinstance(eps, float | int):
        return None
    if x is not None and x.shape[-1:] != weight.shape:
        return None
    state = (weight._version, len(module._forward_hooks), len(module._forward_pre_hooks))
    known = _KNOWN.get(module)
    if known is None or known[0] != state:
        if x is None:
            generator = torch.Generator().manual_seed(0)
            x = 3.0 * torch.randn(4, weight.shape[0], generator=generator, dtype=torch.float64)
            x = x + 0.5
        known = (state, _identify(module, x, float(eps)))
        with contextlib.suppress(TypeError):  # a module that cannot be weakly referenced
            _KNOWN[module] = known
    return known[1]


def _identify(module: Any, x: torch.Tensor, eps: float) -> NormForm | None:
    """On a float64 copy of ``module`` (a bfloat16 or float16 module's own rounding, ~4e-3
    relative, would hide every form; a module that computes in float32 inside stays within
    the tolerance), the first form that reproduces it, or None."""
    bias = getattr(module, "bias", None)
    x = x.double()
    moved = x + 0.5 * x.flip(-1)
    copy = deepcopy(module).double()
    with torch.no_grad():
        wants = [copy(x).double(), copy(moved).double()]
        for centered, plus_one in _SHAPES:
            form = NormForm(centered=centered, plus_one=plus_one, eps=eps)
            if not form.centered and isinstance(bias, torch.Tensor):
                continue
            gain = form.gain(module)
            shift = bias.detach().double() if isinstance(bias, torch.Tensor) else 0.0
            fits = True
            for inputs, want in zip((x, moved), wants, strict=True):
                got = form.apply(inputs.double(), gain) + shift
                tolerance = 1e-5 * float(want.abs().max()) + 1e-6
                fits = fits and float((got - want).abs().max()) <= tolerance
            if fits:
                return form
    return None
