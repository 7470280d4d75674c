"""Second-order terms of a patch along its own direction (Zhang & Wang 2026, arXiv 2606.09899).

>>> d1, d2 = along_patches(model, prompts, positions, copies, build, values)  # doctest: +SKIP

"When Attribution Patching Lies" corrects attribution patching's first-order estimate of a
patch ``a -> a + delta`` with the second-order Taylor term of the metric along it. With
``f(t)`` the metric of the run that reads ``a + t delta`` (everything downstream live)::

    first  = f'(0)   = g . delta               (attribution patching's estimate)
    second = f''(0)  = delta^T H delta         (a Hessian-vector product)
    hvp    = f'(0) + f''(0) / 2
    multi-step (S)   = sum_{s<S} f'(s/S) / S + f''(s/S) / (2 S^2)

and the reliability score of an estimate compares the two terms, ``|f''(0)| / (2 |f'(0)|)``.

:func:`along_patches` computes ``f'`` and ``f''`` of many patches at once: ``copies``
stacked copies of the prompts, each copy's patch scaled by its own scalar ``t`` per prompt
(``[copies, n]``), one forward and two backwards (``f'`` with its graph, then ``f''``): each
copy's rows depend on their own ``t`` only, so the gradient of the summed metric holds every
copy's and prompt's ``f'``, and the gradient of the summed ``f'`` every ``f''``. A patch has
its own direction, so each patch is one copy: the diagonal ``delta_j^T H delta_j`` of many
patches is not one extra backward of one run. Edge screens (:mod:`interv.circuits.second_order`)
and node screens (:mod:`interv.engine.screening`, ``Screen(estimator="hvp")``) build their
patches on it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch

from interv.engine.architecture import architecture_of
from interv.engine.forward import PATTERN, HookFn, OwnGradient, Prompts, forward, model_device
from interv.engine.sites import Site

__all__ = [
    "along_patches",
    "check_second_order",
    "copies_per_forward",
    "hvp_estimates",
    "reliability",
]

HVP_FORWARD_BYTES = 512 << 20
"""About the activations (and their graph) one stacked second-order forward may hold."""


def check_second_order(model: Any) -> None:
    """Refuse, in one line naming the family, a model whose attention the second derivative
    cannot pass: the correction differentiates twice through every layer's attention as the
    model computes it from its pattern, a softmax over keys."""
    architecture_of(model).require(
        "attention_rows",
        hint=(
            "the HVP correction differentiates twice through each layer's softmax pattern "
            "(supported: models whose every layer is softmax attention with a pattern hook; "
            "tested: the zoo models, SmolLM2); use the first-order estimate"
        ),
    )


def copies_per_forward(model: Any, n_prompts: int, n_positions: int) -> int:
    """How many copies of ``n_prompts`` prompts one :func:`along_patches` forward stacks: about
    :data:`HVP_FORWARD_BYTES` of residual streams and their twice-differentiable graph (16 per
    layer), between 1 and 64."""
    cfg = model.cfg
    per_copy = n_prompts * n_positions * cfg.d_model * 4 * (cfg.n_layers + 1) * 16
    return max(1, min(64, HVP_FORWARD_BYTES // max(per_copy, 1)))


def along_patches(
    model: Any,
    prompts: Prompts,
    positions: torch.Tensor,
    copies: int,
    build: Callable[[torch.Tensor], Sequence[tuple[Site, HookFn]]],
    values: Callable[[torch.Tensor], torch.Tensor],
    *,
    at: float = 0.0,
    hooks: Sequence[tuple[Site, HookFn]] = (),
    dtype: torch.dtype | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """``f'(at)`` and ``f''(at)`` ``[copies, n]`` (float64, on the CPU) of each copy's and
    prompt's metric along its own patch (module docstring).

    Args:
        model: the transformer-lens bridge.
        prompts: the ``n`` prompts (stacked ``copies`` times here).
        positions: ``[n]`` each prompt's answer position.
        copies: the number of patches, one per copy.
        build: ``t [copies, n]`` (a leaf that requires grad) -> the hooks that add each copy's
            patch scaled by its ``t`` (rows ``copy * n .. (copy + 1) * n`` of the batch);
            called with gradients on, so what it computes from ``t`` stays differentiable.
        values: answer logits ``[copies * n, d_vocab]`` -> ``[copies, n]`` metric.
        at: the ``t`` at which the derivatives are taken.
        hooks: hooks that run before the patches (e.g. per-head key/value copies).
        dtype: ``t``'s dtype (None: the model's parameters').

    The forward computes attention from the pattern (twice differentiable) and records only
    what depends on ``t``; the model's parameters get no ``.grad``."""
    n = prompts.n
    if dtype is None:
        dtype = next(model.parameters()).dtype
    t = torch.full((copies, n), float(at), dtype=dtype, device=model_device(model))
    t.requires_grad_(True)
    with torch.enable_grad():
        patches = list(build(t))
    found: dict[str, torch.Tensor] = {}

    def of(logits: torch.Tensor) -> None:
        (d1,) = torch.autograd.grad(values(logits).sum(), [t], create_graph=True)
        d2 = None
        if d1.requires_grad:  # else f is linear in t along every patch
            (d2,) = torch.autograd.grad(d1.sum(), [t], allow_unused=True)
        found["first"] = d1.detach()
        found["second"] = torch.zeros_like(d1) if d2 is None else d2.detach()

    forward(
        model,
        prompts.repeat(copies),
        hooks=[*hooks, *patches],
        readout="position_logits",
        positions=positions.repeat(copies),
        attention=PATTERN,
        gradient=OwnGradient(of),  # f' and f'' with respect to t, no other backward
    )
    return found["first"].double().cpu(), found["second"].double().cpu()


def hvp_estimates(
    first: Callable[[float], tuple[torch.Tensor, torch.Tensor]], steps: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The ``steps``-segment estimate ``[patches, n]`` and, at ``t = 0``, the first and second
    derivatives, from ``first(t) -> (f'(t), f''(t))``."""
    d1, d2 = first(0.0)
    estimate = d1 / steps + d2 / (2 * steps * steps)
    for s in range(1, steps):
        a, b = first(s / steps)
        estimate = estimate + a / steps + b / (2 * steps * steps)
    return estimate, d1, d2


def reliability(first: torch.Tensor, second: torch.Tensor) -> torch.Tensor:
    """Zhang & Wang's reliability score of each prompt-mean estimate: ``|f''(0)| /
    (2 |f'(0)|)`` from the prompt-mean derivatives ``[patches]`` (0 where both are 0, inf
    where only the first-order term is 0)."""
    num = second.abs() / 2
    den = first.abs()
    out = torch.where(den > 0, num / den.clamp_min(torch.finfo(den.dtype).tiny), torch.inf)
    return torch.where(num == 0, torch.zeros_like(out), out)
