"""Modified backward passes for attribution: GIM's (Edin et al. 2025, arXiv 2505.17630).

A gradient-times-difference estimate (EAP) reads the model's gradient. Gradient Interaction
Modifications (GIM) change only the *backward* pass, so that attention's self-repair (the
softmax handing weight to the other keys when one score drops) does not hide the scores
that matter; every forward value stays the model's own. :class:`GIM` holds the three
modifications, as the authors' package ``gim-explain`` 0.1.4 implements them (its defaults
are the defaults here):

- **frozen norm statistics**: each LayerNorm's standard deviation and each RMSNorm's root
  mean square is a constant in the backward (a LayerNorm's mean is not: it is still
  subtracted), so the backward of ``y = w (x - mean(x)) / s + b`` is
  ``dx = h - mean(h)``, ``h = w dy / s`` (``dx = w dy / s`` for an RMSNorm). Every norm the
  bridge runs as a transformer-lens normalization component is frozen: each block's
  ``ln1``, ``ln2`` (and the post-norms of Gemma-2/3), and the final norm; and the per-head
  query and key norms of Gemma-3 and Qwen3 (Hugging Face modules, their form identified
  from their outputs by :func:`interv.engine.norms.norm_form`; OLMo-2's, over all heads,
  are the bridge's normalization components, frozen as such).
- **the softmax's gradient at temperature T**: the attention softmax's backward is
  ``dscores = s_T * (dpattern - sum_keys(s_T * dpattern))`` with ``s_T = softmax(scores /
  T)``, no ``1 / T`` factor (the package's rule), where the forward keeps ``T = 1``. It is
  applied at the pattern (``s_T = p^(1/T) / sum p^(1/T)`` from the model's own pattern
  ``p``, masked keys staying 0): the incoming gradient is replaced by one through which the
  model's own softmax backward gives exactly that ``dscores``.
- **rescaled gradients into q, k and v**: the gradient reaching the hooked queries, keys
  and values from the attention is multiplied by ``q_scale``, ``k_scale``, ``v_scale``
  (default 1/4, 1/4, 1/2: the package's split of a product's gradient among its factors),
  both where it flows on into the residual stream and where a screen reads it.

The package freezes the modules that are instances of ``nn.LayerNorm`` or ``nn.RMSNorm``,
which no Hugging Face decoder's norms are (``LlamaRMSNorm``, ``Gemma3RMSNorm`` are classes of
their own): here every norm the paper names is frozen, by what it computes. A query/key norm
of another form is refused by :func:`check_gim`. Not implemented: a softmax outside
attention (the metric's gradient is exact).

``GIM(temperature=1, q_scale=1, k_scale=1, v_scale=1, freeze_norms=False)`` is the
model's own backward (no hook is attached at all).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass
from typing import Any

import torch

from interv.engine.architecture import architecture_of, recipe_of
from interv.engine.norms import NormForm, norm_form
from interv.engine.sites import Site
from interv.errors import IntervError

__all__ = [
    "GIM",
    "check_gim",
    "frozen_norm_grad",
    "gradient_scale",
    "modified_backward",
    "tempered_softmax_grad",
]

HookFn = Callable[[torch.Tensor, Any], torch.Tensor]


@dataclass(frozen=True)
class GIM:
    """GIM's backward modifications (module docstring); the forward is never changed.

    Attributes:
        temperature: ``T > 0`` at which the attention softmax's gradient is taken (1: the
            model's own).
        q_scale, k_scale, v_scale: positive multipliers of the gradients into the queries,
            keys and values (1: unscaled).
        freeze_norms: treat every norm's scale (standard deviation / root mean square) as a
            constant in the backward.
    """

    temperature: float = 2.0
    q_scale: float = 0.25
    k_scale: float = 0.25
    v_scale: float = 0.5
    freeze_norms: bool = True

    def __post_init__(self) -> None:
        for name in ("temperature", "q_scale", "k_scale", "v_scale"):
            value = getattr(self, name)
            if (
                isinstance(value, bool)
                or not isinstance(value, int | float)
                or not math.isfinite(value)
                or value <= 0
            ):
                raise IntervError(f"GIM {name} must be a finite number > 0; got {value!r}")
        if not isinstance(self.freeze_norms, bool):
            raise IntervError(f"GIM freeze_norms must be True or False; got {self.freeze_norms!r}")

    def scale(self, component: str) -> float:
        """The multiplier of the gradient into ``component`` (``"q"``, ``"k"``, ``"v"``; 1
        for any other reader)."""
        return {"q": self.q_scale, "k": self.k_scale, "v": self.v_scale}.get(component, 1.0)

    def describe(self) -> str:
        """What this backward does, in one sentence."""
        parts = []
        if self.freeze_norms:
            parts.append("norm statistics frozen")
        if self.temperature != 1:
            parts.append(f"attention softmax gradient at temperature {self.temperature:g}")
        if (self.q_scale, self.k_scale, self.v_scale) != (1, 1, 1):
            parts.append(
                f"gradients into q, k, v scaled by {self.q_scale:g}, {self.k_scale:g}, "
                f"{self.v_scale:g}"
            )
        if not parts:
            return "GIM backward with every modification off (the model's own gradient)"
        return "GIM-style backward (" + "; ".join(parts) + "; the forward unchanged)"

    def settings(self) -> dict[str, Any]:
        """The settings as plain data (for provenance and fingerprints)."""
        return {
            "temperature": float(self.temperature),
            "q_scale": float(self.q_scale),
            "k_scale": float(self.k_scale),
            "v_scale": float(self.v_scale),
            "freeze_norms": self.freeze_norms,
        }

    def hooks(self, n_layers: int) -> list[tuple[Site, HookFn]]:
        """The forward hooks that carry the softmax temperature (at each layer's pattern) and
        the q/k/v gradient scales (at the hooked q, k, v); values pass unchanged."""
        out: list[tuple[Site, HookFn]] = []
        for layer in range(n_layers):
            for component in ("q", "k", "v"):
                factor = self.scale(component)
                if factor != 1:
                    out.append((Site(component, layer), _scaling_hook(factor)))
            if self.temperature != 1:
                out.append((Site("pattern", layer), _tempering_hook(float(self.temperature))))
        return out

    @contextmanager
    def applied(self, model: Any) -> Iterator[None]:
        """Within the block, the model's norm components backpropagate with frozen
        statistics (if ``freeze_norms``); restored on exit, also on error."""
        if not self.freeze_norms:
            yield
            return
        patched: list[tuple[Any, str]] = []
        try:
            for norm in _norm_components(model):
                spec = _NormSpec.of(norm)
                original = norm.original_component
                if original is not None and not isinstance(original, torch.nn.Identity):
                    _patch(original, "forward", original.forward, spec, patched)
                if hasattr(norm, "_python_norm_forward"):
                    _patch(norm, "_python_norm_forward", norm._python_norm_forward, spec, patched)
            for layer, name, module, form in _qk_norms(model):
                if form is None:  # check_gim refuses the model
                    raise IntervError(_unidentified(layer, name, module))
                spec = _NormSpec(rms=not form.centered, weight=form.gain(module), eps=form.eps)
                _patch(module, "forward", module.forward, spec, patched)
            yield
        finally:
            for module, name in reversed(patched):
                delattr(module, name)


def modified_backward(model: Any, gim: GIM | None) -> Any:
    """``gim.applied(model)``, or a context that changes nothing for None."""
    return nullcontext() if gim is None else gim.applied(model)


def gradient_scale(gim: GIM | None, component: str) -> float:
    """The multiplier of the gradient into ``component`` (1 without ``gim``)."""
    return 1.0 if gim is None else gim.scale(component)


def check_gim(model: Any, gim: Any) -> GIM | None:
    """``gim`` as a :class:`GIM` (``True``: the defaults; ``False``/None: none), refused in one
    line, before any model work, on a family whose backward it cannot modify."""
    if gim is None or gim is False:
        return None
    if gim is True:
        gim = GIM()
    if not isinstance(gim, GIM):
        raise IntervError(f"gim must be an interv.circuits.GIM, True or False; got {gim!r}")
    arch = architecture_of(model)
    supported = (
        "GIM-style backward supports decoders whose every layer is softmax attention with rows "
        "summing to 1 and, to freeze norms, whose query/key norms (if any) are LayerNorms or "
        "RMSNorms (tested: the zoo models, Llama, SmolLM2, Gemma-3, Qwen3)"
    )
    arch.require("attention_rows", hint=supported)
    arch.require("normalized_rows", hint=supported)
    if gim.freeze_norms:
        for layer, name, module, form in _qk_norms(model):
            if form is None:
                arch.refuse(
                    _unidentified(layer, name, module) + ", so GIM cannot freeze its statistic",
                    hint=supported + "; or use GIM(freeze_norms=False)",
                )
    if gim.freeze_norms and not _norm_components(model) and arch.pre_attention_norm:
        arch.refuse("no transformer-lens normalization component found", hint=supported)
    return gim


# -- frozen norms


@dataclass(frozen=True)
class _NormSpec:
    rms: bool
    weight: torch.Tensor | None
    eps: float

    @classmethod
    def of(cls, norm: Any) -> _NormSpec:
        original = norm.original_component
        eps = getattr(original, "eps", None)
        if eps is None:
            eps = getattr(original, "variance_epsilon", None)
        if eps is None:
            eps = getattr(norm.config, "eps", 1e-5)
        weight = getattr(norm, "weight", None)
        if isinstance(weight, torch.Tensor) and getattr(norm, "uses_weight_offset", False):
            weight = 1.0 + weight
        return cls(
            rms=bool(getattr(norm, "uses_rms_norm", False)),
            weight=weight.detach() if isinstance(weight, torch.Tensor) else None,
            eps=float(eps),
        )


def frozen_norm_grad(
    x: torch.Tensor, grad: torch.Tensor, *, rms: bool, weight: torch.Tensor | None, eps: float
) -> torch.Tensor:
    """The input gradient of a norm ``[..., d]`` whose scale is held constant: with
    ``h = weight * grad / s``, ``h - mean(h)`` for a LayerNorm (``s`` the standard deviation
    with ``eps``), ``h`` for an RMSNorm (``s`` the root mean square with ``eps``)."""
    xf = x.double()
    if rms:
        scale = (xf.pow(2).mean(-1, keepdim=True) + eps).sqrt()
    else:
        centered = xf - xf.mean(-1, keepdim=True)
        scale = (centered.pow(2).mean(-1, keepdim=True) + eps).sqrt()
    h = grad.double() / scale
    if weight is not None:
        h = h * weight.double().to(h.device)
    if not rms:
        h = h - h.mean(-1, keepdim=True)
    return h.to(x.dtype)


class _FrozenNorm(torch.autograd.Function):
    """Forward: the norm's own output ``y``; backward: the frozen-statistics gradient into
    ``x`` (none into ``y``'s own graph)."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, y: torch.Tensor, spec: _NormSpec) -> torch.Tensor:
        ctx.save_for_backward(x)
        ctx.spec = spec
        return y.clone()

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, None, None]:
        (x,) = ctx.saved_tensors
        spec = ctx.spec
        return frozen_norm_grad(x, grad, rms=spec.rms, weight=spec.weight, eps=spec.eps), None, None


def _patch(module: Any, name: str, original: Any, spec: _NormSpec, patched: list) -> None:
    if any(m is module and n == name for m, n in patched):
        return  # shared by two components (a parallel block's one norm): patched once

    def frozen(x: torch.Tensor, *args: Any, **kwargs: Any) -> torch.Tensor:
        y = original(x, *args, **kwargs)
        if not torch.is_grad_enabled() or not x.requires_grad:
            return y
        return _FrozenNorm.apply(x, y, spec)

    object.__setattr__(module, name, frozen)  # an instance attribute, removed on exit
    patched.append((module, name))


def _qk_norms(model: Any) -> list[tuple[int, str, Any, NormForm | None]]:
    """Every layer's query and key norm modules that are not the bridge's normalization
    components (those are frozen as components: OLMo-2's, over all heads; Hugging Face's
    per-head ones of Gemma-3 and Qwen3 are not), as ``(layer, "query" or "key", module, its
    form)`` (:func:`~interv.engine.norms.norm_form`; None where not identified)."""
    arch = architecture_of(model)
    components = {id(norm) for norm in _norm_components(model)}
    found = []
    for layer in arch.attention_layers:
        if not arch.layer(layer).qk_norm:
            continue
        recipe = recipe_of(model, layer)
        for name, module in (("query", recipe.q_norm), ("key", recipe.k_norm)):
            if module is not None and id(module) not in components:
                found.append((layer, name, module, norm_form(module)))
    return found


def _unidentified(layer: int, name: str, module: Any) -> str:
    """Why a query/key norm cannot be frozen, naming it (its class and weight shape)."""
    weight = getattr(module, "weight", None)
    shape = tuple(weight.shape) if isinstance(weight, torch.Tensor) else None
    return (
        f"layer {layer}'s {name} norm ({type(module).__name__}, weight shape {shape}) is not "
        "identified as a LayerNorm or RMSNorm over its last axis"
    )


def _norm_components(model: Any) -> list[Any]:
    from transformer_lens.model_bridge.generalized_components.normalization import (
        NormalizationBridge,
    )

    return [m for m in model.modules() if isinstance(m, NormalizationBridge)]


# -- attention: softmax temperature and q/k/v scales


def tempered_softmax_grad(
    pattern: torch.Tensor, grad: torch.Tensor, temperature: float
) -> torch.Tensor:
    """GIM's gradient of the attention scores ``s_T * (grad - sum_keys(s_T * grad))``, with
    ``s_T = softmax(scores / T)`` computed from the pattern as ``p^(1/T) / sum p^(1/T)``
    (keys with ``p = 0`` stay 0; an empty row gives 0)."""
    p = pattern.double().clamp_min(0)
    powered = p.pow(1.0 / temperature)
    tempered = (powered / powered.sum(-1, keepdim=True)).nan_to_num(0.0)
    g = grad.double()
    return tempered * (g - (tempered * g).sum(-1, keepdim=True))


class _TemperedPattern(torch.autograd.Function):
    """Forward: the pattern unchanged; backward: the pattern gradient ``g'`` through which
    the model's own softmax backward ``p * (g' - sum p g')`` gives GIM's score gradient
    ``r`` (``g' = r / p`` where ``p > 0``; ``r`` sums to 0 over keys, so ``sum p g' = 0``)."""

    @staticmethod
    def forward(ctx: Any, pattern: torch.Tensor, temperature: float) -> torch.Tensor:
        ctx.save_for_backward(pattern)
        ctx.temperature = temperature
        return pattern.clone()

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, None]:
        (pattern,) = ctx.saved_tensors
        wanted = tempered_softmax_grad(pattern, grad, ctx.temperature)
        p = pattern.double()
        through = torch.where(p > 0, wanted / p.clamp_min(torch.finfo(torch.float64).tiny), 0.0)
        return through.to(grad.dtype), None


class _ScaledGrad(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, factor: float) -> torch.Tensor:
        ctx.factor = factor
        return x.clone()

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, None]:
        return grad * ctx.factor, None


def _scaling_hook(factor: float) -> HookFn:
    def scale(activation: torch.Tensor, hook: Any) -> torch.Tensor:
        return _ScaledGrad.apply(activation, factor) if activation.requires_grad else activation

    return scale


def _tempering_hook(temperature: float) -> HookFn:
    def temper(activation: torch.Tensor, hook: Any) -> torch.Tensor:
        if not activation.requires_grad:
            return activation
        return _TemperedPattern.apply(activation, temperature)

    return temper
