"""Edits of the attention mask of every head: a sliding window with sink tokens, and keys
hidden from every query.

>>> streaming = WindowAttention(window=32, sink_tokens=4)   # StreamingLLM's mask
>>> result = interv.run(model, task, [WindowAttention(32), streaming])

Both kinds change which keys every head of the chosen layers may attend to, in the clean
run, and renormalize each query row over the keys that stay. Renormalizing the weights is
exactly masking the scores before the softmax::

    softmax(s)_j restricted to M, divided by its mass on M  =  exp(s_j) / sum_{i in M} exp(s_i)

so the result equals a forward whose attention mask was changed (checked against the native
model run with that mask, and against Hugging Face's 4-D masks). Where attention runs
without the pattern (``attention="auto"`` from :data:`~interv.engine.rows.LONG_CONTEXT`
positions on, or ``"rows"``), each edit is a
:class:`~interv.engine.restrictions.KeyRestriction` per edited layer
(:meth:`_MaskEdit.kept`) that the engine ANDs with the layer's own rule inside the
attention, in linear memory at any length (equal to the pattern path within 1e-5,
``tests/test_engine_restrictions.py``). With the model's own attention they are written at
the z level, like :class:`~interv.engine.interventions.AttentionKnockout`: from each layer's
observed pattern ``A`` and values ``V``, every head's output becomes ``z + (A' - A) V``,
with ``A'`` the masked, renormalized pattern. Later layers see the edited residual stream,
so the edit of layer ``L`` changes the patterns of layers after ``L`` the way a changed mask
would. Positions are counted from each prompt's first real token; position ids (learned or
rotary) are left as they were, so a window keeps every key's original distance to the query
(StreamingLLM's rolling cache instead renumbers the cached keys; on prompts shorter than the
model's training context both distances are ones the model was trained on).

- :class:`WindowAttention` [``window_attention``]: each query sees its ``window`` most
  recent tokens (itself included) and the first ``sink_tokens`` tokens.
- :class:`KeyKnockout` [``key_knockout``]: the chosen key positions are hidden from every
  query but their own; with every layer edited, nothing a token holds reaches another
  position (attention is the only path between positions).

The edit composes with the model's own mask: the keys that stay are the intervention's AND
the layer's own :class:`~interv.engine.architecture.KeyRule` (causal, padding, and the
layer's sliding window or chunk), so ``WindowAttention(8192)`` on a model with a 4096-key
window re-admits nothing. On a model with such windows, the sentence of the intervention as
it applies to the model (:meth:`~interv.engine.protocol.Intervention.for_model`, which
:func:`interv.run` calls) names them: "..., within the model's own sliding window 4 at
layers 0, 2, ...". Where a layer adds a learned sink logit to the softmax's denominator
(gpt-oss), the row is the masked softmax with the sink logit in it, computed in float64 from
the layer's observed logits (site ``scores``) by the layer's
:class:`~interv.engine.architecture.AttentionRecipe` (renormalizing the observed weights by
``sum_{i in M} a_i + (1 - sum(a))`` instead loses the sink's share to cancellation when a row's
mass is almost all on real keys and few of them stay). Gated heads (Qwen3-Next, Qwen3.5:
``z = sigmoid(g) * (a . V)``): the change ``(A' - A) V`` passes the head's own gate, read at
site ``gate``. Refused in one line: layers without softmax attention rows (a hybrid's linear
layers) and layers whose pattern the bridge hooks only after the heads' outputs (families
transformer-lens wraps whole: GPT-Neo, GPT-J, OPT, Llama-4, BERT, RoBERTa).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

import torch

from interv._checks import as_int, as_positions
from interv.engine.architecture import Architecture, architecture_of, layer_list, recipe_of
from interv.engine.protocol import EditContext, Intervention, register
from interv.engine.restrictions import KeyRestriction
from interv.engine.sites import Site, check_layer, check_positions, kv_head_of
from interv.errors import IntervError

if TYPE_CHECKING:
    from interv.tasks.tokenized import TokenizedPairs

__all__ = ["KeyKnockout", "WindowAttention"]


def _layers_phrase(layers: tuple[int, ...] | None) -> str:
    if layers is None:
        return "every layer"
    if len(layers) == 1:
        return f"layer {layers[0]}"
    return f"layers {list(layers)}"


@dataclass(frozen=True)
class _MaskEdit(Intervention):
    """A changed key mask for every head of ``layers`` (None = all), written at the z level.

    Subclasses define :meth:`kept`, the ``[n, query, key]`` bool keys that stay (of a block
    of queries and keys). With
    ``layers=None`` the sites are known only once :meth:`check` has seen the model (the
    runner checks every intervention before it asks for its sites); ``edits()`` before that
    raises a clear error.
    """

    family = "routing"

    def __post_init__(self) -> None:
        layers = self.layers
        if layers is not None:
            layers = tuple(sorted(as_positions(layers, "layers", allow_empty=False)))
        object.__setattr__(self, "layers", layers)

    def _layers(self, n_layers: int) -> tuple[int, ...]:
        return tuple(range(n_layers)) if self.layers is None else self.layers

    @property
    def start_layer(self) -> int | None:
        return 0 if self.layers is None else self.layers[0]

    @property
    def site(self) -> None:
        return None

    def edits(self) -> tuple[Site, ...]:
        # the layers are known only with a model; edits() is asked for before one exists
        # only to find the start layer, which start_layer answers, so every edit is
        # declared from the stored layers (or the model's, in check())
        return tuple(Site("z", layer) for layer in self._declared_layers())

    def observes(self) -> tuple[Site, ...]:
        gated = getattr(self, "_gated", ())  # known once for_model has seen the model
        sunk = getattr(self, "_sunk", ())
        return tuple(
            site
            for layer in self._declared_layers()
            for site in (
                *((Site("scores", layer),) if layer in sunk else ()),
                Site("pattern", layer),
                Site("v", layer),
                *((Site("gate", layer),) if layer in gated else ()),
            )
        )

    def _declared_layers(self) -> tuple[int, ...]:
        if self.layers is not None:
            return self.layers
        n_layers = getattr(self, "_n_layers", None)
        if n_layers is None:
            raise IntervError(
                f"{type(self).__name__} with layers=None needs the model's number of layers; "
                "run it through interv.run (which checks it against the model first), or "
                "pass layers explicitly"
            )
        return tuple(range(n_layers))

    def check(self, cfg: Any, n_positions: int) -> None:
        if self.layers is None:
            object.__setattr__(self, "_n_layers", int(cfg.n_layers))
        for layer in self._declared_layers():
            check_layer(cfg, layer)
        super().check(cfg, n_positions)

    def for_model(self, model: Any) -> _MaskEdit:
        """A copy that knows ``model``'s own masks on the edited layers (its sentence names
        their windows and chunks, and any learned sink); refuses in one line a layer it
        cannot edit exactly (see the module docstring)."""
        n_layers = int(model.cfg.n_layers)
        layers = self._layers(n_layers)
        for layer in layers:
            check_layer(model.cfg, layer)
        arch = architecture_of(model)
        for layer in layers:
            _check_editable(arch, model, layer, type(self).__name__)
        bound = replace(self)
        object.__setattr__(bound, "_n_layers", n_layers)
        object.__setattr__(bound, "_own_masks", _own_masks_phrase(arch, layers))
        gated = tuple(layer for layer in layers if arch.layers[layer].output_gate)
        object.__setattr__(bound, "_gated", gated)
        sunk = tuple(layer for layer in layers if arch.layers[layer].off_row_sink)
        object.__setattr__(bound, "_sunk", sunk)
        return bound

    def _own_masks_text(self) -> tuple[str, str]:
        """What the sentence says of the model's own masks and learned sink, each ``""``
        before :meth:`for_model` and where the model has none (:func:`_own_masks_phrase`)."""
        return getattr(self, "_own_masks", ("", ""))

    def kept(self, real: torch.Tensor, queries: slice, keys: slice) -> torch.Tensor:
        """``[n, query, key]`` bool: the keys each of ``queries`` may still attend to among
        ``keys`` (slices of padded positions), by this edit alone (:meth:`edit` and the
        pattern-free engine AND it with the layer's own rule).

        ``real`` is ``[n, pos]`` bool (True at real tokens, one contiguous run per row).
        """
        raise NotImplementedError

    def key_restrictions(self) -> tuple[KeyRestriction, ...]:
        """The edit inside the attention of every edited layer, every head (applied where
        attention runs without the pattern; see :mod:`interv.engine.restrictions`)."""
        return tuple(KeyRestriction(layer, self.kept) for layer in self._declared_layers())

    def edit(self, site: Site, activation: torch.Tensor, context: EditContext) -> torch.Tensor:
        pattern = context.observed(Site("pattern", site.layer))  # [n, head, query, key]
        values = context.observed(Site("v", site.layer))  # [n, key, kv_head, d_head]
        own = architecture_of(context.model).layers[site.layer]
        if own is None:  # for_model refuses such a layer before any forward
            raise IntervError(f"layer {site.layer} has no softmax attention rows to mask")
        for needed, what, known in (
            (own.output_gate, "heads gate their output", "_gated"),
            (own.off_row_sink, "rows have an off-row sink logit", "_sunk"),
        ):
            if needed and site.layer not in getattr(self, known, ()):
                raise IntervError(
                    f"layer {site.layer}'s {what}; apply {type(self).__name__}.for_model(model) "
                    "first (interv.run and text_loss do), so that the edit reads "
                    + ("the gate" if known == "_gated" else "the layer's logits")
                )
        key = ("mask", id(self), site.layer)
        found = context.state.get(key)
        if found is None:
            recipe = recipe_of(context.model, site.layer)
            real = context.mask.to(pattern.device)
            every = slice(0, pattern.shape[-1])
            found = recipe, recipe.admitted(real, kept=self.kept(real, every, every))
            context.state[key] = found
        recipe, allowed = found
        heads = [kv_head_of(context.cfg, h) for h in range(pattern.shape[1])]
        per_head = values[:, :, heads]  # [n, key, head, d_head]
        if own.off_row_sink:
            # the masked softmax with the sink logit in it, from the layer's own logits
            # (float64): no cancellation of the sink's share 1 - sum(a)
            scores = context.observed(Site("scores", site.layer)).to(torch.float64)
            new = recipe.rows(scores.masked_fill(~allowed[:, None], -math.inf))
            delta = torch.einsum("nhqk,nkhd->nqhd", new - pattern.double(), per_head.double())
        else:
            kept = pattern * allowed[:, None].to(pattern.dtype)
            mass = kept.sum(dim=-1, keepdim=True)
            new = torch.where(mass > 0, kept / torch.where(mass > 0, mass, 1.0), 0.0)
            delta = torch.einsum("nhqk,nkhd->nqhd", new - pattern, per_head.to(pattern.dtype))
        if own.output_gate:  # z = sigmoid(g) * (a . V): the change passes the same gate
            gate = context.observed(Site("gate", site.layer))  # [n, pos, head * d_head]
            delta = delta * torch.sigmoid(gate.to(delta.dtype)).reshape(delta.shape)
        return activation + delta.to(activation.dtype)


def _check_editable(arch: Architecture, model: Any, layer: int, kind: str) -> None:
    """Refuse, in one line, a layer whose mask a z-level edit cannot change exactly."""
    reason = _why_not_editable(arch, model, layer, kind)
    if reason is None:
        return
    others = [i for i in range(len(arch.layers)) if not _why_not_editable(arch, model, i, kind)]
    hint = f"{kind} can edit {_at_layers(others)}" if others else ""
    arch.refuse(reason, hint=hint)


def _why_not_editable(arch: Architecture, model: Any, layer: int, kind: str) -> str | None:
    own = arch.layers[layer]
    if own is None:
        return f"layer {layer} is {arch.layer_kinds[layer]}, with no softmax attention rows to mask"
    recipe = recipe_of(model, layer)
    if not recipe.pattern_feeds_output:
        return (
            f"transformer-lens hooks layer {layer}'s attention pattern only after the heads' "
            "outputs (z) are computed (it wraps Hugging Face's attention module whole), so a "
            "mask edit written at z cannot read it"
        )
    if recipe.sinks is not None and not recipe.scores_hooked:
        return (
            f"layer {layer}'s rows have an off-row sink logit and the bridge does not hook the "
            "logits, which the edit needs to renormalize the kept keys against the sink"
        )
    if not own.keys.causal and kind == "WindowAttention":
        return (
            f"layer {layer} is bidirectional; a window of recent tokens is defined for causal "
            "layers"
        )
    return None


def _own_masks_phrase(arch: Architecture, layers: tuple[int, ...]) -> tuple[str, str]:
    """What the sentence says of the model's own masks on ``layers``: ``(", within the
    model's own sliding window 4 at layers 0, 2", " and the model's learned sink logit
    (layers 0-3)")``; ``""`` for a part the edited layers lack."""
    limits: dict[str, list[int]] = {}
    sinks: list[int] = []
    for layer in layers:
        own = arch.layers[layer]
        if own is None:
            continue
        if own.keys.window is not None:
            limits.setdefault(f"sliding window {own.keys.window}", []).append(layer)
        if own.keys.chunk is not None:
            limits.setdefault(f"chunks of {own.keys.chunk}", []).append(layer)
        if own.off_row_sink:
            sinks.append(layer)
    within = ""
    if limits:
        within = ", within the model's own " + " and ".join(
            f"{what} at {_at_layers(members)}" for what, members in limits.items()
        )
    sink = f" and the model's learned sink logit ({_at_layers(sinks)})" if sinks else ""
    return within, sink


def _at_layers(layers: list[int]) -> str:
    return f"layer{'s' if len(layers) > 1 else ''} {layer_list(layers)}"


def _grid(queries: slice, keys: slice, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """``[1, query, 1]`` and ``[1, 1, key]`` int64 positions of a block of rows."""
    query = torch.arange(queries.start, queries.stop, device=device)[None, :, None]
    return query, torch.arange(keys.start, keys.stop, device=device)[None, None, :]


def _first_real(real: torch.Tensor) -> torch.Tensor:
    """``[n]`` position of each row's first real token."""
    return real.to(torch.int64).argmax(dim=1)


@register("window_attention")
@dataclass(frozen=True)
class WindowAttention(_MaskEdit):
    """Sliding-window attention with sink tokens, in every head of ``layers``, in the clean run.

    Query ``t`` (counted from the prompt's first real token) keeps the keys
    ``t - window + 1 .. t`` and ``0 .. sink_tokens - 1``; every other key is removed and
    the row renormalized over the kept ones (exactly the mask applied before the
    softmax). ``sink_tokens = 0`` is a plain sliding window (StreamingLLM's "window
    attention"); ``sink_tokens = 4`` with ``window`` recent tokens is StreamingLLM's mask.
    A window at least as long as the prompt is the identity.

    Attributes:
        window: recent tokens each query sees, itself included (``>= 1``).
        sink_tokens: first tokens every query also sees (``>= 0``).
        layers: the layers whose heads are edited; None = every layer.
    """

    window: int
    sink_tokens: int = 0
    layers: tuple[int, ...] | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "window", as_int(self.window, "window", minimum=1))
        object.__setattr__(self, "sink_tokens", as_int(self.sink_tokens, "sink_tokens", minimum=0))
        super().__post_init__()

    def kept(self, real: torch.Tensor, queries: slice, keys: slice) -> torch.Tensor:
        first = _first_real(real)[:, None, None]  # [n, 1, 1]
        query, key = _grid(queries, keys, real.device)
        recent = (key <= query) & (key > query - self.window)
        sinks = ((key - first) < self.sink_tokens) & (key <= query)
        return (recent | sinks) & real[:, None, keys]

    def describe(self, task: TokenizedPairs | None = None) -> str:
        if self.sink_tokens == 0:
            sinks = " only"
        elif self.sink_tokens == 1:
            sinks = " and to the first token"
        else:
            sinks = f" and to the first {self.sink_tokens} tokens"
        within, learned = self._own_masks_text()
        return (
            f"every head of {_layers_phrase(self.layers)} attends to its "
            f"{self.window} most recent token{'' if self.window == 1 else 's'} (itself "
            f"included){sinks}{within}, each query row renormalized over those keys"
            f"{learned} (the attention mask changed before the softmax; position ids "
            "unchanged)"
        )


@register("key_knockout")
@dataclass(frozen=True)
class KeyKnockout(_MaskEdit):
    """Keys hidden from every query but their own, in every head of ``layers``, in the clean run.

    No query attends to ``key_positions`` (counted from each prompt's first real token)
    except the query at the same position; every row is renormalized over its remaining
    keys (the mask applied before the softmax). With every layer edited this removes
    every path from those tokens to other positions; their own positions still compute.

    Attributes:
        key_positions: the hidden key positions.
        layers: the layers whose heads are edited; None = every layer.
    """

    key_positions: tuple[int, ...]
    layers: tuple[int, ...] | None = None

    def __post_init__(self) -> None:
        positions = as_positions(self.key_positions, "key_positions", allow_empty=False)
        object.__setattr__(self, "key_positions", positions)
        super().__post_init__()

    def check(self, cfg: Any, n_positions: int) -> None:
        super().check(cfg, n_positions)
        check_positions(self.key_positions, n_positions, "key position")

    def prompt_positions(self) -> tuple[tuple[str, tuple[int, ...] | None, bool], ...]:
        return (*super().prompt_positions(), ("key position", self.key_positions, True))

    def kept(self, real: torch.Tensor, queries: slice, keys: slice) -> torch.Tensor:
        first = _first_real(real)[:, None, None]  # [n, 1, 1]
        query, key = _grid(queries, keys, real.device)
        hidden = torch.zeros(real.shape[0], 1, keys.stop - keys.start, dtype=torch.bool)
        hidden = hidden.to(real.device)
        for position in self.key_positions:
            hidden |= key - first == position
        return (~hidden | (query == key)) & real[:, None, keys]

    def describe(self, task: TokenizedPairs | None = None) -> str:
        positions = self.key_positions
        what = (
            f"key position {positions[0]}"
            if len(positions) == 1
            else f"key positions {list(positions)}"
        )
        within, learned = self._own_masks_text()
        return (
            f"{what} hidden from every query but its own in every head of "
            f"{_layers_phrase(self.layers)}{within}, each query row renormalized over the "
            f"remaining keys{learned} (the attention mask changed before the softmax)"
        )
