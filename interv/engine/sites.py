"""Sites: where in a model an intervention acts, and the only place hook names are spelled.

A :class:`Site` names an activation by *component*, block ``layer``, optionally a
query ``head`` and the ``positions`` it concerns. It is data: interventions declare
their sites, results carry them, reports group by them. This module is the one place
in interv that knows transformer-lens hook names (``blocks.{L}.attn.hook_z`` and
friends); everything else asks :func:`hook_name`.

Components and the activation each carries (transformer-lens vocabulary):

- ``"resid_pre"`` / ``"resid_mid"`` / ``"resid_post"``: the residual stream before the
  block, between attention and MLP, after the block, ``[batch, pos, d_model]``.
- ``"attn_out"`` / ``"mlp_out"``: the attention / MLP sublayer output written into the
  residual stream, ``[batch, pos, d_model]``.
- ``"q"``, ``"z"``: per query head, ``[batch, pos, head_index, d_head]`` (``z`` is the
  head's output before the output projection).
- ``"k"``, ``"v"``: per key/value head, ``[batch, pos, n_key_value_heads, d_head]``.
  A site names the *query* head; under grouped-query attention query head ``h`` reads
  key/value head ``kv_head_of(cfg, h)``, shared with the other heads of its group.
- ``"scores"``: attention logits before the softmax, ``[batch, head_index, query_pos,
  key_pos]`` (scaled, soft-capped and masked as the bridge hooks them; an off-row sink logit
  joins the softmax after them). Bridges that run Hugging Face's attention module whole do not
  hook them.
- ``"pattern"``: attention weights, ``[batch, head_index, query_pos, key_pos]``.
- ``"gate"``: gated attention only (Qwen3-Next, Qwen3.5): the logits of each head's output
  gate, ``[batch, pos, head_index * d_head]``; ``z = sigmoid(gate) * (a . V)`` per head.
- ``"final_resid"``: the residual stream entering the final norm, ``[batch, pos,
  d_model]``; ``"final_scale"``: the final norm's scale (RMS or standard deviation of
  each position), ``[batch, pos, 1]``. These two belong to no block: their ``layer`` is
  None.

Within a block the hooks fire in the order resid_pre, q, k, v, scores, pattern, gate (where the
heads are gated), z, attn_out, resid_mid, mlp_out, resid_post; after the last block come
final_resid and final_scale (:data:`COMPONENTS`).

Layer, head and position *ranges* depend on a model and a task; they are checked by
:func:`check_site` when a run starts.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from interv._checks import as_int, as_positions, check_index
from interv._fields import convert, converted
from interv.errors import IntervError

__all__ = [
    "COMPONENTS",
    "FINAL_COMPONENTS",
    "HEAD_COMPONENTS",
    "MLP_COMPONENTS",
    "RESIDUAL_COMPONENTS",
    "Site",
    "as_site_positions",
    "block_output_hook",
    "check_component",
    "check_head",
    "check_layer",
    "check_positions",
    "check_prompt_positions",
    "check_site",
    "head_axis",
    "head_label",
    "hook_name",
    "kv_head_of",
    "n_key_value_heads",
    "select_head",
    "stored_head",
]

# component -> hook name template (filled with the layer), in forward order within a block
_HOOK_TEMPLATES: dict[str, str] = {
    "resid_pre": "blocks.{layer}.hook_resid_pre",
    "q": "blocks.{layer}.attn.hook_q",
    "k": "blocks.{layer}.attn.hook_k",
    "v": "blocks.{layer}.attn.hook_v",
    "scores": "blocks.{layer}.attn.hook_attn_scores",
    "pattern": "blocks.{layer}.attn.hook_pattern",
    "gate": "blocks.{layer}.attn.hook_q_gate",
    "z": "blocks.{layer}.attn.hook_z",
    "attn_out": "blocks.{layer}.hook_attn_out",
    "resid_mid": "blocks.{layer}.hook_resid_mid",
    "mlp_out": "blocks.{layer}.hook_mlp_out",
    "resid_post": "blocks.{layer}.hook_resid_post",
    "final_resid": "ln_final.hook_in",
    "final_scale": "ln_final.hook_scale",
}
COMPONENTS: tuple[str, ...] = tuple(_HOOK_TEMPLATES)
"""Every component a site can name, in forward order."""

FINAL_COMPONENTS: tuple[str, ...] = ("final_resid", "final_scale")
"""Components after the last block (the final norm's input and scale); their layer is None."""

HEAD_COMPONENTS: tuple[str, ...] = ("q", "k", "v", "pattern", "z")
"""Components with a head axis (a site may name a query head)."""

RESIDUAL_COMPONENTS: tuple[str, ...] = (
    "resid_pre",
    "resid_mid",
    "resid_post",
    "attn_out",
    "mlp_out",
)
"""Components of width ``d_model`` written into or read from the residual stream."""

MLP_COMPONENTS: tuple[str, ...] = ("resid_mid", "mlp_out")
"""Components that exist only in models with MLPs."""

_KEY_VALUE_COMPONENTS = ("k", "v")
_PHRASES = {
    "resid_pre": "residual stream before block {layer} (resid_pre)",
    "resid_mid": "residual stream between attention and MLP of block {layer} (resid_mid)",
    "resid_post": "residual stream after block {layer} (resid_post)",
    "attn_out": "attention output of block {layer} (attn_out)",
    "mlp_out": "MLP output of block {layer} (mlp_out)",
    "final_resid": "residual stream entering the final norm (final_resid)",
    "final_scale": "final norm's scale (final_scale)",
    "z": "{who} output (z)",
    "q": "{who} queries (q)",
    "k": "{who} keys (k)",
    "v": "{who} values (v)",
    "scores": "{who} attention logits before the softmax (scores)",
    "pattern": "{who} attention pattern",
    "gate": "{who} output gate logits (gate)",
}
_HEAD_AXIS = {"q": 2, "k": 2, "v": 2, "z": 2, "pattern": 1}


def check_component(component: str) -> None:
    """Raise :class:`IntervError` unless ``component`` is one of :data:`COMPONENTS`."""
    if component not in _HOOK_TEMPLATES:
        raise IntervError(f"unknown component {component!r}; choose one of {COMPONENTS}")


def _known_component(component: str, what: str) -> str:
    check_component(component)
    return component


def _index_or_none(value: Any, what: str) -> int | None:
    return None if value is None else as_int(value, what, minimum=0)


def as_site_positions(positions: Iterable[int] | int | None, what: str = "positions") -> Any:
    """The positions an intervention acts at: distinct positions >= 0, or None for every
    position; an empty collection is refused (it would intervene nowhere and report zero
    effects as if measured)."""
    found = as_positions(positions, what)
    if found == ():
        raise IntervError(
            f"{what} must name at least one position, or be None for every position; got an "
            "empty collection, which would intervene nowhere and report zero effects as if "
            "measured"
        )
    return found


def at_positions(positions: Iterable[int] | None) -> str:
    """Positions in words: "at all positions", "at position 3", "at positions [3, 5]"."""
    if positions is None:
        return "at all positions"
    positions = list(positions)
    if len(positions) == 1:
        return f"at position {positions[0]}"
    return f"at positions {positions}"


def head_label(layer: int, head: int) -> str:
    """The label of a query head, ``"L{layer}H{head}"`` (e.g. ``"L1H3"``)."""
    return f"L{layer}H{head}"


@dataclass(frozen=True)
class Site:
    """Where an activation lives: a component of block ``layer``, maybe one head.

    Attributes:
        component: one of :data:`COMPONENTS`.
        layer: the block, ``>= 0``; None for :data:`FINAL_COMPONENTS` (and only there).
        head: a query head (components of :data:`HEAD_COMPONENTS` only); None = the
            whole activation.
        positions: the token positions concerned; None = all. Informational for the
            engine (an intervention writes where it chooses); reports group by it.
    """

    component: str = converted(_known_component)
    layer: int | None = converted(_index_or_none, default=None)
    head: int | None = converted(_index_or_none, default=None)
    positions: tuple[int, ...] | None = converted(as_site_positions, default=None)

    def __post_init__(self) -> None:
        convert(self)
        final = self.component in FINAL_COMPONENTS
        if final and self.layer is not None:
            raise IntervError(
                f"component {self.component!r} comes after the last block and has no "
                f"layer; got layer={self.layer!r}"
            )
        if not final and self.layer is None:
            raise IntervError(f"component {self.component!r} needs a layer (block index)")
        if self.head is not None and self.component not in HEAD_COMPONENTS:
            raise IntervError(
                f"component {self.component!r} has no head axis; got head={self.head}. "
                f"Heads apply only to {HEAD_COMPONENTS}"
            )

    @property
    def label(self) -> str:
        """``L1H3`` for a head, ``L1 resid_pre`` otherwise, plus ``@p,q`` for positions."""
        if self.head is not None:
            text = head_label(self.layer, self.head)
        elif self.layer is None:
            text = self.component
        else:
            text = f"L{self.layer} {self.component}"
        if self.positions is not None:
            text += "@" + ",".join(str(p) for p in self.positions)
        return text

    @property
    def phrase(self) -> str:
        """The activation in words, for semantics sentences (positions not included).

        E.g. ``"L1H2 output (z)"``, ``"residual stream before block 3 (resid_pre)"``.
        """
        who = (
            f"every head of block {self.layer}"
            if self.head is None
            else head_label(self.layer, self.head)
        )
        return _PHRASES[self.component].format(layer=self.layer, who=who)

    def with_positions(self, positions: Iterable[int] | None) -> Site:
        """The same site with other ``positions``."""
        return Site(self.component, self.layer, self.head, as_positions(positions, "positions"))

    def without_positions(self) -> Site:
        """The same activation, all positions (the key under which it is captured)."""
        return Site(self.component, self.layer, self.head)

    def to_dict(self) -> dict[str, Any]:
        """Plain data: ``{"component", "layer", "head", "positions"}`` (JSON-ready)."""
        return {
            "component": self.component,
            "layer": self.layer,
            "head": self.head,
            "positions": None if self.positions is None else list(self.positions),
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Site:
        """Inverse of :meth:`to_dict`."""
        return cls(data["component"], data.get("layer"), data.get("head"), data.get("positions"))

    @property
    def order(self) -> tuple[float, int]:
        """Sort key in forward order: (block, position of the component in the block)."""
        layer = float("inf") if self.layer is None else self.layer
        return (layer, COMPONENTS.index(self.component))


def hook_name(site_or_component: Site | str, layer: int | None = None) -> str:
    """The transformer-lens hook name of a site (or of ``component`` in block ``layer``).

    Example: ``hook_name(Site("z", 3)) == hook_name("z", 3) == "blocks.3.attn.hook_z"``.
    """
    if isinstance(site_or_component, Site):
        component, layer = site_or_component.component, site_or_component.layer
    else:
        component = site_or_component
        check_component(component)
    return _HOOK_TEMPLATES[component].format(layer=layer)


def block_output_hook(layer: int) -> str:
    """Hook name of block ``layer``'s output, ``[batch, pos, d_model]`` (for the last block:
    the residual stream entering the final norm, or an encoder's final hidden states)."""
    return f"blocks.{layer}.hook_out"


def head_axis(component: str) -> int:
    """The axis of the head index in ``component``'s activation."""
    return _HEAD_AXIS[component]


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


def stored_head(cfg: Any, site: Site) -> int | None:
    """The index along the head axis of ``site``'s activation (its kv head for k and v)."""
    if site.head is None:
        return None
    return kv_head_of(cfg, site.head) if site.component in _KEY_VALUE_COMPONENTS else site.head


def select_head(activation: Any, site: Site, cfg: Any) -> Any:
    """The slice of ``activation`` (``[n, ...]`` at ``site``'s component) that ``site`` names.

    A view: the head axis is dropped for a site with a head (its key/value head for
    ``k`` and ``v``); the whole activation otherwise. Writing into the view writes into
    ``activation``.
    """
    head = stored_head(cfg, site)
    return activation if head is None else activation.select(head_axis(site.component), head)


def check_layer(cfg: Any, layer: int, component: str | None = None) -> None:
    """Raise :class:`IntervError` unless ``layer`` is a block index of the model.

    ``cfg`` is the model's config (``model.cfg``). When ``component`` is an MLP site
    (``"resid_mid"``, ``"mlp_out"``) the model must have MLPs.
    """
    check_index(layer, cfg.n_layers, "layer", f"the model has {cfg.n_layers} layers")
    if component in MLP_COMPONENTS and getattr(cfg, "attn_only", False):
        raise IntervError(
            f"component {component!r} needs an MLP, but the model is attention-only; "
            f"choose one of {tuple(c for c in COMPONENTS if c not in MLP_COMPONENTS)}"
        )


def check_head(cfg: Any, layer: int, head: int) -> None:
    """Raise :class:`IntervError` unless (``layer``, ``head``) names a query head."""
    check_layer(cfg, layer)
    check_index(head, cfg.n_heads, "head", f"layer {layer} has {cfg.n_heads} heads")


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


def check_prompt_positions(
    positions: Iterable[int] | None,
    mask: Any,
    what: str,
    *,
    from_first_real: bool = False,
) -> None:
    """Raise :class:`IntervError` unless every position is a real token of every prompt.

    The one check of positions against the prompts they apply to (the positions and key
    positions of interventions, sinks), for either padding side: a position that is padding in some
    prompt would add that prompt's exact no-change (or a sink mass of 0) to a mean with no
    flag. ``mask`` is ``[batch, pos]`` bool, True at real tokens (one contiguous run per
    prompt). Positions index the padded tensor, or with ``from_first_real`` count from each
    prompt's first real token (BOS = 0). None means all positions and is always valid.
    """
    if positions is None:
        return
    lengths = mask.sum(1)
    first_real = mask.to(dtype=lengths.dtype).argmax(1)
    shortest = int(lengths.min())
    for p in positions:
        if from_first_real:
            padding = lengths <= p
        else:
            inside = p < mask.shape[1]
            padding = ~mask[:, p] if inside else lengths >= 0
        if bool(padding.any()):
            bad = [int(i) for i in padding.nonzero()[:, 0]]
            shown = ", ".join(str(i) for i in bad[:5]) + (", ..." if len(bad) > 5 else "")
            if from_first_real:
                rule = (
                    f"counted from each prompt's first real token, valid positions are "
                    f"0..{shortest - 1} (the shortest prompt has {shortest} tokens)"
                )
            else:
                i = bad[0]
                start, n = int(first_real[i]), int(lengths[i])
                rule = (
                    f"prompt {i}'s real tokens are at positions {start}..{start + n - 1} of "
                    f"the padded length {mask.shape[1]}"
                )
            raise IntervError(
                f"{what} {p} is not a real token of {len(bad)} of {mask.shape[0]} prompts "
                f"({shown}): {rule}. A position that is padding in a prompt would average "
                "that prompt's exact no-effect (or a sink mass of 0) into the result; choose "
                "positions inside every prompt, or prompts of equal length"
            )


def check_site(cfg: Any, site: Site, n_positions: int) -> None:
    """Raise :class:`IntervError` unless ``site`` exists in the model and the prompts."""
    if site.layer is not None:
        check_layer(cfg, site.layer, site.component)
    if site.head is not None:
        check_head(cfg, site.layer, site.head)
    check_positions(site.positions, n_positions, "position")
