"""Sites: where in a transformer-lens model an intervention acts.

This is the one module of interv that knows transformer-lens hook names
(``blocks.{L}.attn.hook_z`` and friends) and checks layers, heads and positions
against a model's config. Everything else in interv names a site by a *component*
(``"z"``, ``"resid_pre"``, ``"resid_mid"``, ``"resid_post"``, ``"attn_out"``,
``"mlp_out"``) plus a layer, and asks this module for the hook name.

Components and the activation shape their hook carries (transformer-lens vocabulary):

- ``"z"``: one attention head's output before the output projection, ``[batch, pos,
  head_index, d_head]``. Needs a head.
- ``"resid_pre"`` / ``"resid_mid"`` / ``"resid_post"``: the residual stream before the
  block, between attention and MLP, after the block, ``[batch, pos, d_model]``.
- ``"attn_out"`` / ``"mlp_out"``: the attention / MLP sublayer output written into the
  residual stream, ``[batch, pos, d_model]``.

Two read-only helper hooks serve the z-level routing and value interventions:
``pattern_hook`` (``[batch, head_index, query_pos, key_pos]``) and ``value_hook``
(``[batch, key_pos, n_key_value_heads, d_head]``; under grouped-query attention query
head ``h`` reads value head ``kv_head_of(cfg, h)``).

To attach hooks, use the model's own context manager, which removes exactly the hooks
it attached in a ``finally`` and leaves hooks the user attached alone::

    with model.hooks(fwd_hooks=[(hook_name("z", 1), fn)]):
        logits = model(tokens)
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from interv.errors import IntervError

__all__ = [
    "COMPONENTS",
    "HEAD_COMPONENTS",
    "check_component",
    "check_head",
    "check_layer",
    "check_positions",
    "hook_name",
    "kv_head_of",
    "n_key_value_heads",
    "pattern_hook",
    "value_hook",
]

# component -> hook name template (filled with the layer)
_HOOK_TEMPLATES: dict[str, str] = {
    "z": "blocks.{layer}.attn.hook_z",
    "resid_pre": "blocks.{layer}.hook_resid_pre",
    "resid_mid": "blocks.{layer}.hook_resid_mid",
    "resid_post": "blocks.{layer}.hook_resid_post",
    "attn_out": "blocks.{layer}.hook_attn_out",
    "mlp_out": "blocks.{layer}.hook_mlp_out",
}
COMPONENTS: tuple[str, ...] = tuple(_HOOK_TEMPLATES)
"""Components an intervention can name, in forward order within a block."""

HEAD_COMPONENTS: tuple[str, ...] = ("z",)
"""Components whose activation has a ``head_index`` axis (an intervention must name a head)."""

_MLP_COMPONENTS = ("resid_mid", "mlp_out")


def check_component(component: str) -> None:
    """Raise :class:`IntervError` unless ``component`` is one of :data:`COMPONENTS`."""
    if component not in _HOOK_TEMPLATES:
        raise IntervError(f"unknown component {component!r}; choose one of {COMPONENTS}")


def hook_name(component: str, layer: int) -> str:
    """The transformer-lens hook name of ``component`` in block ``layer``.

    Example: ``hook_name("z", 3) == "blocks.3.attn.hook_z"``.
    """
    check_component(component)
    return _HOOK_TEMPLATES[component].format(layer=layer)


def pattern_hook(layer: int) -> str:
    """Hook name of the attention pattern ``[batch, head_index, query_pos, key_pos]``."""
    return f"blocks.{layer}.attn.hook_pattern"


def value_hook(layer: int) -> str:
    """Hook name of the value vectors ``[batch, key_pos, n_key_value_heads, d_head]``."""
    return f"blocks.{layer}.attn.hook_v"


def check_layer(cfg: Any, layer: int, component: str | None = None) -> None:
    """Raise :class:`IntervError` unless ``layer`` is a block index of the model.

    ``cfg`` is the model's config (``model.cfg``). When ``component`` is an MLP site
    (``"resid_mid"``, ``"mlp_out"``) the model must have MLPs.
    """
    if isinstance(layer, bool) or not isinstance(layer, int):
        raise IntervError(f"layer must be an int; got {layer!r}")
    if not 0 <= layer < cfg.n_layers:
        raise IntervError(
            f"layer {layer} is out of range; the model has {cfg.n_layers} layers "
            f"(valid layers 0..{cfg.n_layers - 1})"
        )
    if component in _MLP_COMPONENTS and getattr(cfg, "attn_only", False):
        raise IntervError(
            f"component {component!r} needs an MLP, but the model is attention-only; "
            f"choose one of {tuple(c for c in COMPONENTS if c not in _MLP_COMPONENTS)}"
        )


def check_head(cfg: Any, layer: int, head: int) -> None:
    """Raise :class:`IntervError` unless (``layer``, ``head``) names a query head."""
    check_layer(cfg, layer)
    if isinstance(head, bool) or not isinstance(head, int):
        raise IntervError(f"head must be an int; got {head!r}")
    if not 0 <= head < cfg.n_heads:
        raise IntervError(
            f"head {head} is out of range; layer {layer} has {cfg.n_heads} heads "
            f"(valid heads 0..{cfg.n_heads - 1})"
        )


def check_positions(positions: Iterable[int] | None, n_positions: int, what: str) -> None:
    """Raise :class:`IntervError` unless every position lies in ``0..n_positions - 1``.

    ``None`` means all positions and is always valid. ``what`` names the positions in
    the message (e.g. ``"key position"``).
    """
    if positions is None:
        return
    for p in positions:
        if not 0 <= p < n_positions:
            raise IntervError(
                f"{what} {p} is beyond the prompt; the task's prompts have {n_positions} "
                f"positions (valid positions 0..{n_positions - 1})"
            )


def n_key_value_heads(cfg: Any) -> int:
    """Number of key/value heads: ``cfg.n_key_value_heads``, or ``cfg.n_heads`` without GQA."""
    n_kv = getattr(cfg, "n_key_value_heads", None)
    return cfg.n_heads if n_kv is None else int(n_kv)


def kv_head_of(cfg: Any, head: int) -> int:
    """Index of the key/value head that query head ``head`` reads.

    Under grouped-query attention consecutive groups of ``n_heads // n_key_value_heads``
    query heads share one key/value head (transformer-lens convention), so query head
    ``h`` reads value head ``h // group``. Without GQA this is ``head`` itself.
    """
    return head // (cfg.n_heads // n_key_value_heads(cfg))
