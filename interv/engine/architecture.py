"""What a model's family computes: which keys each layer admits, and the other facts a number
depends on, read once from the model's configuration and module structure.

interv's numbers follow what the model computes, not what a plain GPT-2 would. A layer of
Mistral admits only the last ``sliding_window`` keys, Llama-4's chunked layers only the keys of
the query's chunk, an encoder every real key; gpt-oss adds a learned sink logit to each head's
softmax (rows over real keys sum to less than 1), Gemma-2 soft-caps its logits, OLMo-2
normalizes each sublayer's output before the residual add. :func:`architecture_of` returns one
frozen :class:`Architecture` per model (cached; the model is never touched) holding these facts
as plain fields, and every consumer reads them from there:

- :class:`KeyRule` (one per layer with attention): which keys a query may attend to, causal or
  bidirectional, AND padding, AND where the family has one a sliding window or a chunk;
  :meth:`KeyRule.admitted` builds the ``[batch, query, key]`` bool mask (for any subset of the
  queries), :meth:`KeyRule.describe` says it in words;
- :class:`LayerAttention`: the rest of one layer's attention (positional scheme, logit scale
  and soft cap, query/key norms, off-row sink, output gate);
- :class:`AttentionRecipe` (:func:`recipe_of`, one per layer, read afresh each call): how the
  layer turns its queries and keys into a row, with the handles that takes (the sink
  parameter, the QK norm modules, the rotary convention, ALiBi, how the bridge hands q/k over);
  its :meth:`~AttentionRecipe.logits`, :meth:`~AttentionRecipe.rows` and
  :meth:`~AttentionRecipe.admitted` are the one recipe the rows engine, AtP*'s QK fix and the
  mask edits compute with. This module is the only one that reads Hugging Face's or the
  bridge's attention attributes;
- :class:`Architecture`: the per-layer values plus the block and output facts (pre/post norms,
  parallel residual, residual multiplier, mixture-of-experts layers, final logit soft cap and
  scale), :meth:`Architecture.require` refusing in one line what interv cannot model exactly.

A family that is not a decoder or encoder whose attention is a softmax over keys (state-space
and recurrent models, encoder-decoders, vision and audio models) is refused by
:func:`architecture_of` before any work. tests/test_families.py checks every field that a mask
or a number depends on against the model's own forward (Hugging Face's eager attention), family
by family; docs/architectures.md is generated from those checks.

>>> arch = architecture_of(model)                # a 4-layer Gemma-2, sliding_window 4096
>>> arch.key_rule(0).describe()
'causal AND padding AND sliding window 4096'
>>> arch.mask_rule
'causal AND padding AND sliding window 4096 (layers 0, 2); causal AND padding (layers 1, 3)'
>>> arch.key_rule(0).admitted(real).shape        # real: [batch, pos] bool
torch.Size([2, 13, 13])
>>> arch.require("plain_logits")
IntervError: gemma2: the model's logits apply a final logit soft cap 30 after the unembedding
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import weakref
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, NoReturn

import torch

from interv.errors import IntervError

__all__ = [
    "FEATURES",
    "HANDOVERS",
    "OFF_ROW_SINK_OPTIONS",
    "POSITIONAL",
    "Architecture",
    "AttentionRecipe",
    "KeyRule",
    "LayerAttention",
    "architecture_of",
    "check_admitted",
    "check_off_row_sink",
    "layer_list",
    "recipe_of",
    "rotate_half",
    "rules_text",
]

POSITIONAL = ("rotary", "alibi", "learned", "none", "relative")
"""Positional schemes of a layer's attention: ``"rotary"`` (queries and keys rotated by
position), ``"alibi"`` (a per-head linear bias on the logits), ``"learned"`` (absolute
position embeddings added to the input: the layer itself sees no position), ``"none"`` (no
position at all at this layer, e.g. SmolLM3's and Llama-4's NoPE layers), ``"relative"``
(relative position buckets)."""

OFF_ROW_SINK_OPTIONS = (None, "as_key")
"""How a consumer treats rows that sum to less than 1 over real keys (an off-row learned sink,
gpt-oss): None refuses them; ``"as_key"`` counts the deficit ``1 - sum(a)`` as one extra sink
"key" with its own mass, after the last real key."""


# ----------------------------------------------------------------------------- key rules


@dataclass(frozen=True)
class KeyRule:
    """Which keys one layer admits for a query (the mask the model itself applies).

    Positions are indices into the padded ``[batch, pos]`` tensor; ``real`` marks real tokens
    (one contiguous run per prompt, padding on either side). Key ``j`` is admitted for query
    ``t`` iff ``j`` is real AND:

    - ``causal``: ``j <= t`` (False for bidirectional encoders: every real key);
    - ``window`` (sliding/local attention): ``t - j < window``, so the query sees itself and
      the ``window - 1`` keys before it (Hugging Face's ``kv_idx > q_idx - sliding_window``;
      GPT-Neo's ``window_size`` means the same);
    - ``chunk`` (Llama-4 chunked attention): ``j`` and ``t`` lie in the same chunk of
      ``chunk`` positions counted from the prompt's first real token.

    Attributes:
        causal: whether keys after the query are excluded.
        window: sliding-window size in keys (query included), or None.
        chunk: chunk size in positions, or None.
    """

    causal: bool = True
    window: int | None = None
    chunk: int | None = None

    def __post_init__(self) -> None:
        for name in ("window", "chunk"):
            value = getattr(self, name)
            if value is not None and (
                isinstance(value, bool) or not isinstance(value, int) or value < 1
            ):
                raise IntervError(f"KeyRule.{name} must be a positive int or None; got {value!r}")
        if not self.causal and (self.window is not None or self.chunk is not None):
            raise IntervError(
                "KeyRule: a bidirectional rule with a window or chunk is not modelled; got "
                f"window={self.window}, chunk={self.chunk}"
            )

    def describe(self) -> str:
        """The rule in words, e.g. ``"causal AND padding AND sliding window 4096"``."""
        words = ["causal AND padding" if self.causal else "bidirectional: padding"]
        if self.window is not None:
            words.append(f"sliding window {self.window}")
        if self.chunk is not None:
            words.append(f"chunks of {self.chunk}")
        return " AND ".join(words)

    def admitted(
        self,
        real: torch.Tensor,
        queries: torch.Tensor | slice | None = None,
        keys: torch.Tensor | slice | None = None,
    ) -> torch.Tensor:
        """The ``[batch, query, key]`` bool mask: True where the key is admitted.

        Args:
            real: ``[batch, key]`` bool, True at real tokens.
            queries: the query positions (indices into the padded tensor) to build rows for:
                None = every position; a slice (e.g. a chunk ``slice(start, stop)``); a
                ``[query]`` int tensor shared by every prompt; or ``[batch, query]`` per
                prompt. Only these rows are built, so a chunk of queries of a long prompt
                costs ``chunk x key``, never ``key x key``.
            keys: the key positions to build columns for: ``slice(low, high)`` (None = every
                position), the mask's ``[..., low:high]`` without building the rest; or a
                ``[batch, n_keys]`` int tensor of chosen keys per prompt (e.g. each prompt's
                sinks; a position outside ``0..pos-1`` is never admitted).
        """
        if real.ndim != 2 or real.dtype != torch.bool:
            raise IntervError(
                f"real must be a [batch, key] bool tensor; got {real.dtype} of shape "
                f"{tuple(real.shape)}"
            )
        n_keys = real.shape[1]
        device = real.device
        if queries is None:
            queries = slice(0, n_keys)
        if isinstance(queries, slice):
            start, stop, step = queries.indices(n_keys)
            query = torch.arange(start, stop, step, device=device)[None, :]
        else:
            query = queries.to(device=device, dtype=torch.int64)
            if query.ndim == 1:
                query = query[None, :]
            if query.ndim != 2:
                raise IntervError(
                    f"queries must be a [query] or [batch, query] int tensor; got shape "
                    f"{tuple(queries.shape)}"
                )
        t = query[:, :, None]  # [batch or 1, query, 1]
        if isinstance(keys, torch.Tensor):
            chosen = keys.to(device=device, dtype=torch.int64)
            inside = (chosen >= 0) & (chosen < n_keys)
            key = chosen.clamp(0, n_keys - 1)[:, None, :]  # [batch, 1, n_keys]
            mask = (real.gather(1, key[:, 0]) & inside)[:, None, :]
            mask = mask.expand(real.shape[0], query.shape[1], chosen.shape[1])
        else:
            low, high, _ = (keys or slice(0, n_keys)).indices(n_keys)
            key = torch.arange(low, high, device=device)[None, None, :]
            mask = real[:, None, low:high].expand(real.shape[0], query.shape[1], high - low)
        if self.causal:
            mask = mask & (key <= t)
        if self.window is not None:
            mask = mask & (key > t - self.window)
        if self.chunk is not None:
            first = real.to(torch.int64).argmax(dim=1)[:, None, None]
            mask = mask & (
                torch.div(key - first, self.chunk, rounding_mode="floor")
                == torch.div(t - first, self.chunk, rounding_mode="floor")
            )
        return mask


def layer_list(layers: Sequence[int]) -> str:
    """``"0, 2, 4"``; runs of four or more consecutive layers as ``"0-5"``."""
    parts: list[str] = []
    run: list[int] = []
    for layer in sorted(layers):
        if run and layer == run[-1] + 1:
            run.append(layer)
            continue
        if run:
            parts.append(_run_text(run))
        run = [layer]
    if run:
        parts.append(_run_text(run))
    return ", ".join(parts)


def rules_text(layers: Sequence[int], rules: Sequence[KeyRule]) -> str:
    """The key rules of ``layers`` in words, grouped by rule: ``"causal AND padding AND sliding
    window 4 (layers 0, 2); causal AND padding (layers 1, 3)"``; one shared rule alone."""
    groups: dict[KeyRule, list[int]] = {}
    for layer, rule in zip(layers, rules, strict=True):
        groups.setdefault(rule, []).append(layer)
    if len(groups) == 1:
        return next(iter(groups)).describe()
    return "; ".join(
        f"{rule.describe()} ({_layers_phrase(members)})" for rule, members in groups.items()
    )


def _layers_phrase(layers: Sequence[int]) -> str:
    """``"layer 3"`` or ``"layers 0, 2"``."""
    return f"layer{'s' if len(layers) > 1 else ''} {layer_list(layers)}"


def _run_text(run: list[int]) -> str:
    if len(run) >= 4:
        return f"{run[0]}-{run[-1]}"
    return ", ".join(str(layer) for layer in run)


def check_admitted(
    pattern: torch.Tensor,
    admitted: torch.Tensor,
    *,
    layer: int,
    queries: torch.Tensor | None = None,
    tolerance: float | None = None,
) -> None:
    """Refuse a pattern that puts mass on a key its layer's rule excludes.

    Args:
        pattern: ``[batch, head_index, query, key]`` attention weights (rows of the queries
            ``admitted`` was built for).
        admitted: ``[batch or 1, query, key]`` bool from :meth:`KeyRule.admitted`.
        layer: the layer (for the message).
        queries: ``[batch or 1, query]`` absolute query positions (for the message); default
            ``0..query-1``.
        tolerance: largest mass allowed on excluded keys per row; default ``eps`` of the
            pattern's dtype times the number of keys.

    Raises:
        IntervError naming layer, head, query and the key with the most excluded mass: the
        model's mask differs from the rule interv derived from its configuration, so every
        count of available keys would be wrong.
    """
    outside = torch.where(admitted[:, None], 0.0, pattern.to(torch.float32))
    leaked = outside.sum(dim=-1)  # [batch, head, query]
    if tolerance is None:
        eps = torch.finfo(pattern.dtype).eps if pattern.is_floating_point() else 1e-6
        tolerance = max(eps, 1.2e-7) * pattern.shape[-1]
    bad = leaked > tolerance
    if not bool(bad.any()):
        return
    b, h, q = (int(i) for i in bad.nonzero()[0])
    key = int(outside[b, h, q].argmax())
    position = q if queries is None else int(queries[min(b, queries.shape[0] - 1), q])
    raise IntervError(
        f"layer {layer} head {h} (prompt {b}, query position {position}) puts mass "
        f"{float(leaked[b, h, q]):.3g} on key {key}, which the layer's mask excludes "
        f"(largest at key {key}: {float(outside[b, h, q, key]):.3g}); the model attends to keys "
        "interv's mask rule does not admit, so its counts of available keys would be wrong"
    )


def check_off_row_sink(arch: Architecture, off_row_sink: str | None) -> None:
    """Validate the ``off_row_sink`` option (one of :data:`OFF_ROW_SINK_OPTIONS`) and refuse a
    model with an off-row sink when it is None, naming the option."""
    if off_row_sink not in OFF_ROW_SINK_OPTIONS:
        raise IntervError(
            f"off_row_sink must be one of {OFF_ROW_SINK_OPTIONS}; got {off_row_sink!r}"
        )
    if off_row_sink is None:
        arch.require(
            "normalized_rows",
            hint="pass off_row_sink='as_key' to count the deficit 1 - sum(a) as one extra sink "
            "key with its own mass",
        )


# ----------------------------------------------------------------------------- profiles


@dataclass(frozen=True)
class LayerAttention:
    """One layer's attention as the model computes it.

    Attributes:
        keys: the :class:`KeyRule` of this layer.
        positional: one of :data:`POSITIONAL`.
        scale: the constant that multiplies ``q . k`` before the softmax (``1/sqrt(d_head)``
            for most families, Gemma's ``query_pre_attn_scalar ** -0.5``, GPT-Neo's 1,
            Granite's ``attention_multiplier``); None where it is not one constant (Llama-4's
            NoPE layers with ``attn_temperature_tuning`` scale queries by position) or not
            known.
        softcap: ``c`` of the logits' soft cap ``c * tanh(logits / c)`` before the softmax
            (Gemma-2: 50), or None.
        qk_norm: queries and keys are normalized before the product (Qwen3, Gemma-3,
            OLMo-2/3, Cohere with ``use_qk_norm``, Llama-4's rotary layers).
        off_row_sink: a learned per-head sink logit joins the softmax's denominator (gpt-oss):
            rows over real keys sum to less than 1.
        output_gate: the head's output ``a . V`` is multiplied by a learned, input-dependent
            gate before the output projection (Qwen3-Next, Qwen3.5).
    """

    keys: KeyRule
    positional: str
    scale: float | None
    softcap: float | None = None
    qk_norm: bool = False
    off_row_sink: bool = False
    output_gate: bool = False


HANDOVERS = ("handoff", "reconstruct", "interface")
"""How a layer's attention bridge hands its queries and keys to interv (:attr:`AttentionRecipe.
handover`): ``"handoff"`` (transformer-lens's ``PositionEmbeddingsAttentionBridge``: the bridge
runs until its rotated queries and keys, ``hook_rot_q``/``hook_rot_k``, and hands over before
the scores), ``"reconstruct"`` (``JointQKVAttentionBridge`` and its rotary and ALiBi variants:
interv replaces the bridge's score computation), ``"interface"`` (bridges that run Hugging
Face's module whole: interv is Hugging Face's attention function for the duration)."""


@dataclass(frozen=True, eq=False)
class AttentionRecipe:
    """How one layer turns its queries and keys into a row, as the model computes it: the one
    reader of Hugging Face's and the bridge's attention attributes (:func:`recipe_of`).

    ``row = softmax over [logits at the admitted keys, the off-row sink logit]`` with
    ``logits = softcap(scale * q . k + bias)``: :meth:`logits` and :meth:`rows` compute it,
    :meth:`admitted` says which keys stay (the layer's :class:`KeyRule` AND whatever an
    intervention keeps), :meth:`prepare` turns hooked queries or keys into the ones the logits
    read (QK norm, rotary embedding). The rows engine (:mod:`interv.engine.rows`), the QK fix
    (:mod:`interv.circuits.screens`) and the mask edits (:mod:`interv.engine.masks`) all use it.

    Attributes:
        layer: the layer.
        family: the family (for messages).
        attention: the layer's :class:`LayerAttention` (key rule, scale, soft cap...).
        handover: one of :data:`HANDOVERS`, or None where the bridge hands nothing over
            (its Hugging Face module computes its pattern itself: GPT-Neo).
        pattern_feeds_output: the bridge's pattern hook fires before ``a . V``, so an edit or a
            gradient of the pattern reaches the head's output (False where the bridge runs
            Hugging Face's module whole and hooks the returned weights afterwards: GPT-Neo,
            GPT-J, OPT, Llama-4, BERT).
        scores_hooked: the bridge hooks the logits (``hook_attn_scores``, scaled, capped and
            masked, before the off-row sink joins) before the softmax.
        sinks: ``[heads]`` the learned off-row sink logits (the module's parameter), or None.
        alibi: the block passes a per-head linear bias (Bloom's ALiBi) added to the logits.
        q_norm, k_norm: the query and key norm modules (Hugging Face's), or None.
        norm_per_head: the norms normalize each head over ``d_head`` (False: over all heads at
            once, OLMo-2's).
        norm_after_rotary: the norms run after the rotary embedding (HunYuan).
        rotation: the rotary convention: ``"half"`` (Llama's, halves rotated against each
            other, the first ``rotary_dim`` dimensions), ``"pairs"`` (adjacent pairs: Cohere,
            GLM, ERNIE), or None without a rotary embedding.
        gated: the bridge gates the heads' merged output with a gate module of its own.
    """

    layer: int
    family: str
    attention: LayerAttention
    handover: str | None
    pattern_feeds_output: bool
    scores_hooked: bool = False
    sinks: torch.Tensor | None = None
    alibi: bool = False
    q_norm: Any = None
    k_norm: Any = None
    norm_per_head: bool = True
    norm_after_rotary: bool = False
    rotation: str | None = None
    gated: bool = False

    @property
    def keys(self) -> KeyRule:
        """The layer's :class:`KeyRule`."""
        return self.attention.keys

    @property
    def scale(self) -> float | None:
        """The constant on ``q . k`` (None: not one constant; :attr:`LayerAttention.scale`)."""
        return self.attention.scale

    @property
    def softcap(self) -> float | None:
        """``c`` of the logits' soft cap ``c tanh(logits / c)``, or None."""
        return self.attention.softcap

    def called_with(self, scale: float, softcap: Any, sinks: Any) -> AttentionRecipe:
        """This recipe with the scale, soft cap and sink logits that Hugging Face's module
        passes to its attention function for one call (they stand for the layer's own)."""
        attention = dataclasses.replace(
            self.attention, scale=float(scale), softcap=_positive(softcap)
        )
        sink = sinks if isinstance(sinks, torch.Tensor) else None
        return dataclasses.replace(self, attention=attention, sinks=sink)

    def admitted(
        self,
        real: torch.Tensor,
        queries: torch.Tensor | slice | None = None,
        keys: torch.Tensor | slice | None = None,
        kept: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """The key mask ``[batch, query, key]`` bool: the layer's own rule
        (:meth:`KeyRule.admitted`, same arguments) AND ``kept`` (broadcastable: the keys an
        intervention lets stay), so an edit never re-admits a key the model excludes."""
        allowed = self.keys.admitted(real, queries, keys)
        return allowed if kept is None else allowed & kept

    def logits(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        admitted: torch.Tensor | None = None,
        bias: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """``[..., head, query, key]`` logits ``softcap(scale * q . k + bias)``, ``-inf`` where
        ``admitted`` (broadcastable bool) is False, in ``q``'s dtype.

        Args:
            q: ``[..., head, query, d_head]`` prepared queries (:meth:`prepare`).
            k: ``[..., head, key, d_head]`` prepared keys (query heads: grouped keys repeated).
            admitted: the keys that stay (:meth:`admitted`, a head axis inserted), or None.
            bias: an additive logit broadcastable to the result (Bloom's ALiBi), or None.
        """
        return self.finish(self.products(q, k), admitted, bias)

    def products(self, q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
        """The scaled products ``scale * q . k`` ``[..., head, query, key]`` of prepared
        ``q [..., head, query, d_head]`` and ``k [..., head, key, d_head]`` (before
        :meth:`finish`)."""
        if self.scale is None:
            raise IntervError(
                f"{self.family}: layer {self.layer} scales q . k by a position-dependent or "
                "unknown factor"
            )
        return torch.matmul(q, k.transpose(-1, -2)) * self.scale

    def finish(
        self,
        products: torch.Tensor,
        admitted: torch.Tensor | None = None,
        bias: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """The logits (:meth:`logits`) from the scaled products ``scale * q . k``
        ``[..., head, query, key]``: the bias added, the soft cap, ``-inf`` where ``admitted``
        is False (the QK fix adds its exact change of the products before this step)."""
        logits = products
        if bias is not None:
            logits = logits + bias.to(logits.dtype)
        if self.softcap is not None:
            logits = torch.tanh(logits / self.softcap) * self.softcap
        if admitted is not None:
            logits = logits.masked_fill(~admitted, -math.inf)
        return logits

    def change_of_logits(self, products: torch.Tensor, change: torch.Tensor) -> torch.Tensor:
        """``finish(products + change) - finish(products)`` at the admitted keys (the bias
        cancels; no mask), without the cancellation of that difference: ``change`` itself
        without a soft cap, else ``cap t (1 - T^2) / (1 + T t)`` with ``t = tanh(change /
        cap)``, ``T = tanh(products / cap)`` (the tanh of a sum). In ``change``'s dtype;
        ``products`` broadcasts against it."""
        if self.softcap is None:
            return change
        cap = self.softcap
        scaled = products.to(change.dtype) / cap
        base, slope = torch.tanh(scaled), torch.cosh(scaled).pow(-2)  # 1 - T^2, not cancelled
        t = torch.tanh(change / cap)
        return (t * slope).mul_(cap).div_(t.mul(base).add_(1))

    def rows(self, logits: torch.Tensor) -> torch.Tensor:
        """The attention rows ``[..., head, query, key]`` of ``logits`` (:meth:`logits`): the
        softmax over the keys and, where the layer has one, its off-row sink logit (which then
        takes the rest of each row's mass); 0 at excluded keys and in rows without a key."""
        if self.sinks is not None:
            sink = self.sinks.detach().to(device=logits.device, dtype=logits.dtype)
            sink = sink.reshape(-1, 1, 1).expand(*logits.shape[:-1], 1)
            weights = torch.softmax(torch.cat([logits, sink], dim=-1), dim=-1)[..., :-1]
        else:
            weights = torch.softmax(logits, dim=-1)
        empty = (logits == -math.inf).all(dim=-1, keepdim=True)
        return torch.where(empty, 0.0, weights)

    def prepare(
        self, x: torch.Tensor, which: str, tables: tuple[torch.Tensor, torch.Tensor] | None
    ) -> torch.Tensor:
        """Hooked queries (``which="q"``) or keys (``"k"``) ``[n, ..., pos, heads, d_head]`` as
        the logits read them, float64: the layer's QK norm (per head), then the rotary
        embedding with ``tables`` ``(cos, sin)`` ``[n or 1, pos, rotary_dim]`` as the model
        passes them to the block (None: no rotation)."""
        norm = self.q_norm if which == "q" else self.k_norm
        if norm is not None:
            weight = next(norm.parameters(), None)
            dtype = x.dtype if weight is None else weight.dtype
            x = norm(x.to(dtype))
        x = x.to(torch.float64)
        if tables is not None:
            x = rotate_half(x, tables[0].to(x), tables[1].to(x))
        return x

    def describe(self) -> str:
        """The recipe in words, e.g. ``"QK norm, rotary embedding, scale 0.3536, soft cap 50,
        causal AND padding AND sliding window 4"``."""
        steps = [
            part
            for part, used in (
                ("QK norm", self.attention.qk_norm),
                ("rotary embedding", self.rotation is not None),
                ("ALiBi", self.alibi),
                (f"scale {self.scale:.4g}" if self.scale is not None else "", True),
                (f"soft cap {self.softcap:g}" if self.softcap else "", self.softcap is not None),
                ("an off-row sink logit", self.sinks is not None),
                (self.keys.describe(), True),
            )
            if used and part
        ]
        return ", ".join(steps)

    def qk_fix_refusal(self) -> str | None:
        """Why AtP*'s QK fix cannot recompute this layer's pattern from its hooked queries and
        keys (one line), or None."""
        at = f"layer {self.layer}"
        if not self.pattern_feeds_output:
            return (
                f"{at}'s attention pattern is hooked only after the heads' outputs (the bridge "
                "runs Hugging Face's attention module whole), so the metric has no gradient "
                "with respect to it"
            )
        if self.sinks is not None:
            return f"{at}'s rows sum to less than 1 (a learned off-row sink logit per head)"
        if self.scale is None:
            return f"{at} scales q . k by a position-dependent or unknown factor"
        if self.attention.positional not in ("rotary", "learned", "none"):
            return (
                f"{at}'s {self.attention.positional} position scheme adds to the logits where "
                "the QK fix does not reproduce it"
            )
        if self.rotation not in (None, "half"):
            return f"{at}'s rotary embedding rotates adjacent pairs, which the QK fix does not"
        if self.attention.qk_norm:
            if self.q_norm is None or self.k_norm is None:
                return f"{at}'s query/key norm was not found"
            if not self.norm_per_head:
                return f"{at}'s query/key norm spans every head at once, not each head"
            if self.norm_after_rotary:
                return f"{at}'s queries and keys are normalized after the rotation"
        return None


def rotate_half(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """The rotary embedding (Llama's convention) of ``x [n, ..., pos, heads, d_head]`` with
    ``cos``/``sin`` ``[n or 1, pos, rotary_dim]``: the first ``rotary_dim`` dimensions ``r``
    become ``r cos + rotate_half(r) sin`` (halves rotated against each other), the rest
    pass."""
    width = cos.shape[-1]
    shape = (cos.shape[0], *([1] * (x.ndim - 4)), cos.shape[1], 1, width)
    cos, sin = cos.reshape(shape), sin.reshape(shape)
    part, rest = x[..., :width], x[..., width:]
    half = width // 2
    turned = torch.cat([-part[..., half:], part[..., :half]], dim=-1)
    return torch.cat([part * cos + turned * sin, rest], dim=-1)


FEATURES: dict[str, str] = {
    "attention_rows": "every layer's attention is a softmax over keys with a pattern hook",
    "normalized_rows": "every row sums to 1 over the keys it admits (no off-row sink)",
    "plain_logits": "the logits are unembed(ln_final(x)), with no post-processing",
    "additive_writes": "each sublayer's output is added unchanged to the residual stream",
    "ungated_heads": "a head's output is its attention row times its values (no output gate)",
    "dense_mlps": "every MLP returns one tensor (no mixture of experts)",
    "constant_scale": "every layer multiplies q . k by one constant",
}
"""What a consumer may :meth:`Architecture.require`, and what each promises."""


@dataclass(frozen=True)
class Architecture:
    """What a model's family computes, one frozen value per model (:func:`architecture_of`).

    Attributes:
        family: the family (Hugging Face ``model_type``, e.g. ``"gemma2"``; ``"native"`` for
            transformer-lens native models).
        encoder: bidirectional attention (BERT-style); False for causal decoders.
        layers: per layer, its :class:`LayerAttention`, or None where the layer has no
            softmax attention (the linear-attention layers of a hybrid such as Qwen3-Next).
        layer_kinds: per layer, what it computes in words (``"full_attention"``,
            ``"sliding_attention"``, ``"chunked_attention"``, ``"linear_attention"``...).
        pre_attention_norm: a norm feeds the attention (``ln1``); False for OLMo-2/3.
        post_attention_norm: the attention output is normalized before the residual add
            (Gemma-2/3 ``post_attention_layernorm``, OLMo-2/3; the bridge's ``ln1_post``).
        pre_mlp_norm: a norm of its own feeds the MLP (``ln2``); False for OLMo-2/3 and for
            parallel blocks that share ``ln1`` (GPT-J, Phi, Cohere).
        post_mlp_norm: the MLP output is normalized before the residual add (``ln2_post``).
        parallel_residual: attention and MLP read the same block input and both add into the
            residual stream (GPT-J, GPT-NeoX with ``use_parallel_residual``, Phi, Cohere).
        residual_multiplier: each sublayer's output is multiplied by this before the add
            (Granite), or None.
        moe_layers: layers whose MLP is a mixture of experts (the bridge returns a tuple
            there: output and router logits).
        final_logit_softcap: ``c`` of the final logits' soft cap ``c * tanh(logits / c)``
            (Gemma-2: 30), or None.
        logit_scale: factor applied to the logits after the unembedding (Cohere
            ``logit_scale``; Granite ``1 / logits_scaling``), or None.
        residual_norm: the residual stream itself is normalized after each sublayer's add
            (BERT's post-LN blocks: ``ln1`` and ``ln2`` sit after the adds), so it is not a
            sum of the sublayers' writes.
        head_transform: a dense layer and an activation run between the last block and the
            final norm (a masked-LM head's transform, BERT's ``mlm_head``).
    """

    family: str
    encoder: bool
    layers: tuple[LayerAttention | None, ...]
    layer_kinds: tuple[str, ...]
    pre_attention_norm: bool = True
    post_attention_norm: bool = False
    pre_mlp_norm: bool = True
    post_mlp_norm: bool = False
    parallel_residual: bool = False
    residual_multiplier: float | None = None
    moe_layers: tuple[int, ...] = ()
    final_logit_softcap: float | None = None
    logit_scale: float | None = None
    residual_norm: bool = False
    head_transform: bool = False

    # -- per-layer views

    @property
    def n_layers(self) -> int:
        """Number of layers."""
        return len(self.layers)

    @property
    def attention_layers(self) -> tuple[int, ...]:
        """Layers whose attention is a softmax over keys (all but a hybrid's linear layers)."""
        return tuple(i for i, layer in enumerate(self.layers) if layer is not None)

    def layer(self, layer: int) -> LayerAttention:
        """The :class:`LayerAttention` of ``layer``; refuses a layer without softmax attention."""
        if not 0 <= layer < self.n_layers:
            raise IntervError(f"layer must be in 0..{self.n_layers - 1}; got {layer}")
        found = self.layers[layer]
        if found is None:
            raise IntervError(
                f"{self.family}: layer {layer} is {self.layer_kinds[layer]}, with no attention rows"
            )
        return found

    def key_rule(self, layer: int) -> KeyRule:
        """The :class:`KeyRule` of ``layer``."""
        return self.layer(layer).keys

    @property
    def key_rules(self) -> tuple[KeyRule | None, ...]:
        """Per layer, its :class:`KeyRule` (None for a layer without softmax attention)."""
        return tuple(None if layer is None else layer.keys for layer in self.layers)

    @property
    def off_row_sink(self) -> bool:
        """Whether some layer adds a learned sink logit to its softmax (rows sum below 1)."""
        return any(layer is not None and layer.off_row_sink for layer in self.layers)

    @property
    def attention_gate(self) -> bool:
        """Whether some layer gates its heads' outputs."""
        return any(layer is not None and layer.output_gate for layer in self.layers)

    @property
    def windowed(self) -> bool:
        """Whether some layer admits fewer keys than causal (or bidirectional) AND padding."""
        return any(
            rule is not None and (rule.window is not None or rule.chunk is not None)
            for rule in self.key_rules
        )

    def mask_rule_of(self, layers: Sequence[int] | None = None) -> str:
        """The key rule of ``layers`` (default: all with attention) in words, grouped by rule:
        ``"causal AND padding AND sliding window 4 (layers 0, 2); causal AND padding
        (layers 1, 3)"``; one rule shared by every layer is named alone."""
        chosen = self.attention_layers if layers is None else tuple(layers)
        return rules_text(chosen, [self.key_rule(layer) for layer in chosen])

    @property
    def mask_rule(self) -> str:
        """:meth:`mask_rule_of` every attention layer."""
        return self.mask_rule_of()

    # -- refusals

    def lacks(self, feature: str) -> str | None:
        """Why this family lacks ``feature`` (one of :data:`FEATURES`), or None if it has it."""
        if feature not in FEATURES:
            raise IntervError(f"unknown feature {feature!r}; choose one of {tuple(FEATURES)}")
        return _LACKS[feature](self)

    def require(self, feature: str, *, hint: str = "") -> None:
        """Raise a one-line :class:`IntervError` naming the family and what it lacks when it
        does not have ``feature`` (one of :data:`FEATURES`); ``hint`` is appended."""
        reason = self.lacks(feature)
        if reason is not None:
            self.refuse(reason, hint=hint)

    def refuse(self, reason: str, *, hint: str = "") -> NoReturn:
        """Raise the one-line refusal ``"<family>: <reason>[; <hint>]"``."""
        raise IntervError(f"{self.family}: {reason}" + (f"; {hint}" if hint else ""))

    def describe(self) -> str:
        """Every fact in one short paragraph (for logs and the architecture table)."""
        facts = [f"{self.family}: {'encoder' if self.encoder else 'decoder'}"]
        if self.attention_layers:
            facts.append(f"mask {self.mask_rule}")
        for feature in FEATURES:
            reason = self.lacks(feature)
            if reason is not None:
                facts.append(reason)
        return "; ".join(facts)


def _layers_with(arch: Architecture, test: Any) -> list[int]:
    return [i for i, layer in enumerate(arch.layers) if layer is not None and test(layer)]


def _lacks_rows(arch: Architecture) -> str | None:
    missing = [i for i, layer in enumerate(arch.layers) if layer is None]
    if not missing:
        return None
    kinds = sorted({arch.layer_kinds[i] for i in missing})
    verb = "are" if len(missing) > 1 else "is"
    return f"{_layers_phrase(missing)} {verb} {' / '.join(kinds)}, with no softmax attention rows"


def _lacks_normalized(arch: Architecture) -> str | None:
    layers = _layers_with(arch, lambda layer: layer.off_row_sink)
    if not layers:
        return None
    return (
        f"attention rows sum to less than 1 over real keys (a learned off-row sink logit per "
        f"head, {_layers_phrase(layers)})"
    )


def _lacks_plain_logits(arch: Architecture) -> str | None:
    steps = []
    if arch.final_logit_softcap is not None:
        steps.append(f"a final logit soft cap {arch.final_logit_softcap:g}")
    if arch.logit_scale is not None:
        steps.append(f"a logit scale {arch.logit_scale:g}")
    found = []
    if arch.head_transform:
        found.append(
            "a dense layer and an activation (a masked-LM head's transform) before the final norm"
        )
    if steps:
        found.append(f"{' and '.join(steps)} after the unembedding")
    if not found:
        return None
    return f"the model's logits apply {' and '.join(found)}"


def _lacks_additive(arch: Architecture) -> str | None:
    if arch.residual_norm:
        return (
            "the residual stream is normalized after each sublayer's add (post-LN blocks), so it "
            "is not a sum of the sublayers' writes"
        )
    steps = []
    if arch.post_attention_norm:
        steps.append("the attention output")
    if arch.post_mlp_norm:
        steps.append("the MLP output")
    found = []
    if steps:
        found.append(f"a norm on {' and '.join(steps)} before the residual add")
    if arch.residual_multiplier is not None:
        found.append(f"a residual multiplier {arch.residual_multiplier:g}")
    if not found:
        return None
    return f"sublayer writes pass {' and '.join(found)}"


def _lacks_ungated(arch: Architecture) -> str | None:
    layers = _layers_with(arch, lambda layer: layer.output_gate)
    if not layers:
        return None
    return (
        f"each head's output is gated by a learned, input-dependent gate after a . V "
        f"({_layers_phrase(layers)})"
    )


def _lacks_dense(arch: Architecture) -> str | None:
    if not arch.moe_layers:
        return None
    return f"the MLPs of {_layers_phrase(arch.moe_layers)} are mixtures of experts"


def _lacks_constant_scale(arch: Architecture) -> str | None:
    layers = _layers_with(arch, lambda layer: layer.scale is None)
    if not layers:
        return None
    return f"{_layers_phrase(layers)}: q . k scaled by a position-dependent or unknown factor"


_LACKS = {
    "attention_rows": _lacks_rows,
    "normalized_rows": _lacks_normalized,
    "plain_logits": _lacks_plain_logits,
    "additive_writes": _lacks_additive,
    "ungated_heads": _lacks_ungated,
    "dense_mlps": _lacks_dense,
    "constant_scale": _lacks_constant_scale,
}


# ----------------------------------------------------------------------------- detection

_CACHE: weakref.WeakKeyDictionary[Any, Architecture] = weakref.WeakKeyDictionary()

# Families the bridge loads that are not decoders or encoders with softmax attention rows.
_NOT_ATTENTION = {
    "mamba": "a state-space model (no attention)",
    "mamba2": "a state-space model (no attention)",
    "falcon_mamba": "a state-space model (no attention)",
    "rwkv": "a recurrent model (no attention)",
    "rwkv7": "a recurrent model (no attention)",
    "hyenadna": "a long-convolution model (no attention)",
    "recurrent_gemma": "a recurrent hybrid (RG-LRU blocks with local attention)",
}
_ATTENTION_KINDS = {"full_attention", "sliding_attention", "chunked_attention"}
_NO_SCALE_FAMILIES = {"gpt_neo": 1.0}  # GPT-Neo does not scale q . k


def architecture_of(model: Any) -> Architecture:
    """The :class:`Architecture` of ``model`` (a transformer-lens ``TransformerBridge``).

    Computed once per model object and cached (weakly: the cache never keeps a model alive);
    the model is only read. Raises a one-line :class:`IntervError` for a family that is not a
    decoder or encoder with softmax attention rows (state-space, recurrent, encoder-decoder,
    vision or audio models), or whose masks interv cannot derive (an unknown layer type).
    """
    try:
        return _CACHE[model]
    except (KeyError, TypeError):
        pass
    arch = _detect(model)
    with contextlib.suppress(TypeError):  # not weak-referenceable: recomputed next time
        _CACHE[model] = arch
    return arch


def recipe_of(model: Any, layer: int) -> AttentionRecipe:
    """The :class:`AttentionRecipe` of ``model``'s layer ``layer`` (a transformer-lens
    ``TransformerBridge``), read from the layer's attention bridge and Hugging Face module each
    call (it holds the module's own sink parameter and norms, so it follows weight edits);
    refuses a layer without softmax attention in one line."""
    arch = architecture_of(model)
    attention = arch.layer(layer)
    cfg = model.cfg
    attn = model.blocks[layer]._modules.get("attn")
    original = getattr(attn, "original_component", None)
    inner = getattr(original, "self", original)  # BERT-style: the scores live in .self
    names = {cls.__name__ for cls in type(attn).__mro__}
    q_norm = _module_named(inner, ("q_norm", "q_layernorm"))
    k_norm = _module_named(inner, ("k_norm", "k_layernorm"))
    per_head = True
    for norm in (q_norm, k_norm):
        weight = None if norm is None else next(norm.parameters(), None)
        if weight is not None and weight.shape[-1] != int(cfg.d_head):
            per_head = False
    rotation = None
    if attention.positional == "rotary":
        pairs = bool(getattr(cfg, "rotary_interleaved_cos_sin", False)) or bool(
            getattr(cfg, "rotary_adjacent_pairs", False)
        )
        rotation = "pairs" if pairs else "half"
    sinks = getattr(inner, "sinks", None)
    feeds = _pattern_feeds_output(attn)
    return AttentionRecipe(
        layer=layer,
        family=arch.family,
        attention=attention,
        handover=_handover(attn, names),
        pattern_feeds_output=feeds,
        scores_hooked=feeds and hasattr(attn, "hook_attn_scores"),
        sinks=sinks if isinstance(sinks, torch.Tensor) else None,
        alibi="BloomAttentionBridge" in names,
        q_norm=q_norm,
        k_norm=k_norm,
        norm_per_head=per_head,
        norm_after_rotary=bool(getattr(cfg, "qk_norm_after_rope", False)),
        rotation=rotation,
        gated=attn is not None and attn._modules.get("gate") is not None,
    )


def _module_named(module: Any, names: Sequence[str]) -> Any:
    for name in names:
        found = getattr(module, name, None) if module is not None else None
        if isinstance(found, torch.nn.Module):
            return found
    return None


def _handover(attn: Any, names: set[str]) -> str | None:
    """How a layer's attention bridge hands over its queries and keys (:data:`HANDOVERS`)."""
    if attn is None:
        return None
    if "PositionEmbeddingsAttentionBridge" in names and hasattr(attn, "hook_rot_k"):
        return "handoff"
    if "JointQKVAttentionBridge" in names:
        return "reconstruct"
    if type(attn).__name__ == "AttentionBridge" and attn.original_component is not None:
        return "interface"
    return None


def _pattern_feeds_output(attn: Any) -> bool:
    """Whether the bridge fires ``hook_pattern`` before ``a . V`` in this attention module:
    transformer-lens's plain ``AttentionBridge`` runs Hugging Face's module whole and fires
    the pattern hook on its returned weights, unless the module hooks the pattern inside."""
    if attn is None:
        return False
    # transformer-lens is heavy to import; it is loaded whenever a bridge exists
    from transformer_lens.model_bridge.generalized_components.attention import AttentionBridge

    if type(attn).forward is not AttentionBridge.forward:
        return True  # a subclass that computes the attention itself, pattern before z
    original = getattr(attn, "original_component", None)
    return bool(getattr(original, "accepts_pattern_fn", False))


def _detect(model: Any) -> Architecture:
    cfg = getattr(model, "cfg", None)
    if cfg is None or not hasattr(model, "blocks"):
        raise IntervError(
            f"expected a transformer-lens TransformerBridge (with .cfg and .blocks); got "
            f"{type(model).__name__}"
        )
    original = getattr(model, "original_model", None)
    hf = getattr(original, "config", None)
    if hf is not None and not hasattr(hf, "model_type"):
        hf = None
    family = str(getattr(hf, "model_type", "") or "native") if hf is not None else "native"
    _refuse_kind(family, cfg, hf)
    blocks = list(model.blocks)
    n_layers = len(blocks)
    kinds = _layer_kinds(family, cfg, hf, n_layers)
    encoder = getattr(cfg, "attention_dir", "causal") == "bidirectional" and not bool(
        getattr(hf, "is_decoder", False)
    )
    layers: list[LayerAttention | None] = []
    for index, (block, kind) in enumerate(zip(blocks, kinds, strict=True)):
        attention = block._modules.get("attn") if hasattr(block, "_modules") else None
        if kind not in _ATTENTION_KINDS or attention is None:
            if kind in _ATTENTION_KINDS:
                kinds[index] = "no attention module"
            layers.append(None)
            continue
        layers.append(_layer_attention(family, cfg, hf, attention, index, kind, encoder))
    if not any(layer is not None for layer in layers):
        raise IntervError(
            f"{family}: no layer has softmax attention rows; interv analyses attention "
            "transformers (decoders and encoders)"
        )
    parts = [block._modules if hasattr(block, "_modules") else {} for block in blocks]
    first = parts[0]
    return Architecture(
        family=family,
        encoder=encoder,
        layers=tuple(layers),
        layer_kinds=tuple(kinds),
        pre_attention_norm="ln1" in first,
        post_attention_norm="ln1_post" in first,
        pre_mlp_norm="ln2" in first,
        post_mlp_norm="ln2_post" in first,
        parallel_residual=_parallel(cfg, hf),
        residual_multiplier=_not_one(getattr(hf, "residual_multiplier", None)),
        moe_layers=tuple(i for i, block in enumerate(blocks) if _is_moe(block)),
        final_logit_softcap=_positive(getattr(hf, "final_logit_softcapping", None)),
        logit_scale=_logit_scale(hf),
        residual_norm=_norm_after_add(blocks[0]),
        head_transform="mlm_head" in getattr(model, "_modules", {}),
    )


def _refuse_kind(family: str, cfg: Any, hf: Any) -> None:
    """One line for a family that is not a decoder or encoder of attention rows."""
    if family in _NOT_ATTENTION:
        raise IntervError(
            f"{family}: {_NOT_ATTENTION[family]}; interv analyses attention transformers "
            "(decoders and encoders)"
        )
    if bool(getattr(hf, "is_encoder_decoder", False)):
        raise IntervError(
            f"{family}: an encoder-decoder (cross-attention rows are not modelled); interv "
            "analyses decoders and encoders"
        )
    for flag, what in (
        ("is_multimodal", "a multimodal model"),
        ("is_visual_model", "a vision model"),
        ("is_audio_model", "an audio model"),
    ):
        if bool(getattr(cfg, flag, False)):
            raise IntervError(
                f"{family}: {what}; interv analyses text decoders and encoders (load the text "
                "model alone where the family has one)"
            )


def _layer_kinds(family: str, cfg: Any, hf: Any, n_layers: int) -> list[str]:
    """Per layer, the kind of attention (``"full_attention"``, ``"sliding_attention"``...)."""
    if hf is None:
        local = [kind for kind in getattr(cfg, "attn_types", None) or () if kind != "global"]
        if local:
            raise IntervError(
                f"{family}: native local attention ({local[0]!r} layers) is not modelled"
            )
        return ["full_attention"] * n_layers
    declared = getattr(hf, "layer_types", None)
    if declared is not None:
        kinds = [str(kind) for kind in declared]
        if len(kinds) != n_layers:
            raise IntervError(
                f"{family}: config.layer_types names {len(kinds)} layers but the model has "
                f"{n_layers}"
            )
        return kinds
    neo = getattr(hf, "attention_layers", None)
    if family == "gpt_neo" and neo is not None:
        return ["sliding_attention" if kind == "local" else "full_attention" for kind in neo]
    if getattr(hf, "sliding_window", None) is not None and getattr(hf, "use_sliding_window", True):
        # Mistral, Mixtral, Phi-3, Starcoder2: one window on every layer
        return ["sliding_attention"] * n_layers
    return ["full_attention"] * n_layers


def _layer_attention(
    family: str, cfg: Any, hf: Any, attention: Any, index: int, kind: str, encoder: bool
) -> LayerAttention:
    window = chunk = None
    if kind == "sliding_attention":
        size = getattr(hf, "window_size", None) if family == "gpt_neo" else None
        window = size if size is not None else getattr(hf, "sliding_window", None)
        if window is None:
            raise IntervError(
                f"{family}: layer {index} is a sliding-window layer but the config names no "
                "window size"
            )
    elif kind == "chunked_attention":
        chunk = getattr(hf, "attention_chunk_size", None)
        if chunk is None:
            raise IntervError(
                f"{family}: layer {index} is a chunked-attention layer but the config names no "
                "attention_chunk_size"
            )
    if encoder and (window is not None or chunk is not None):
        raise IntervError(
            f"{family}: an encoder with local attention (layer {index}) is not modelled"
        )
    module = getattr(attention, "original_component", None)
    inner = getattr(module, "self", module)  # BERT-style: the scores live in .self
    pet = str(getattr(cfg, "positional_embedding_type", "standard"))
    positional = {"standard": "learned", "relative_positional_bias": "relative"}.get(pet, pet)
    if positional == "rotary" and not bool(getattr(inner, "use_rope", True)):
        positional = "none"
    if (
        positional == "rotary"
        and getattr(inner, "sliding_window", None) is not None
        and getattr(inner, "is_sliding", True) is False
    ):
        positional = "none"  # EXAONE-4's global layers of a hybrid: no rotation (NoPE)
    if positional == "rotary" and family == "cohere2" and kind != "sliding_attention":
        positional = "none"  # Cohere-2 rotates only on its sliding layers
    if positional not in POSITIONAL:
        raise IntervError(f"{family}: positional scheme {pet!r} is not modelled")
    scale: float | None
    if family in _NO_SCALE_FAMILIES:
        scale = _NO_SCALE_FAMILIES[family]
    elif hasattr(inner, "scaling"):
        scale = float(inner.scaling)
    elif hasattr(inner, "inv_norm_factor"):  # Bloom
        scale = float(inner.inv_norm_factor)
    elif family == "native":
        scale = float(cfg.d_head) ** -0.5 if getattr(cfg, "use_attn_scale", True) else 1.0
    else:
        scale = None
    if positional == "none" and bool(getattr(inner, "attn_temperature_tuning", False)):
        scale = None  # Llama-4 NoPE layers scale queries by a function of position
    # q_norm/k_norm (Qwen3, Gemma-3, OLMo-2, Cohere), q_layernorm (StableLM), qk_norm (Llama-4)
    norms = ("q_norm", "k_norm", "q_layernorm", "qk_norm")
    qk_norm = any(isinstance(getattr(inner, name, None), torch.nn.Module) for name in norms)
    return LayerAttention(
        keys=KeyRule(causal=not encoder, window=_as_int(window), chunk=_as_int(chunk)),
        positional=positional,
        scale=scale,
        softcap=_positive(getattr(inner, "attn_logit_softcapping", None)),
        qk_norm=qk_norm,
        off_row_sink=isinstance(getattr(inner, "sinks", None), torch.Tensor),
        output_gate=bool(getattr(cfg, "gated_q_proj", False))
        or bool(getattr(hf, "attn_output_gate", False)),
    )


def _parallel(cfg: Any, hf: Any) -> bool:
    declared = getattr(hf, "use_parallel_residual", None)
    if declared is not None:
        return bool(declared)
    return bool(getattr(cfg, "parallel_attn_mlp", False))


def _norm_after_add(block: Any) -> bool:
    """Whether the block's first norm sits inside its attention module, after the residual
    add (BERT's ``attention.output.LayerNorm``): a post-LN block."""
    parts = block._modules if hasattr(block, "_modules") else {}
    ln1, attention = parts.get("ln1"), parts.get("attn")
    ln1_name, attention_name = getattr(ln1, "name", None), getattr(attention, "name", None)
    if not isinstance(ln1_name, str) or not isinstance(attention_name, str):
        return False
    return ln1_name.startswith(attention_name + ".")


def _is_moe(block: Any) -> bool:
    mlp = block._modules.get("mlp") if hasattr(block, "_modules") else None
    if mlp is None:
        return False
    original = getattr(mlp, "original_component", None)
    return "MoE" in type(mlp).__name__ or hasattr(original, "experts")


def _logit_scale(hf: Any) -> float | None:
    scale = _not_one(getattr(hf, "logit_scale", None))
    if scale is not None:
        return scale
    divisor = _not_one(getattr(hf, "logits_scaling", None))
    return None if divisor is None else 1.0 / divisor


def _not_one(value: Any) -> float | None:
    if value is None or isinstance(value, bool):
        return None
    number = float(value)
    return None if number == 1.0 else number


def _positive(value: Any) -> float | None:
    if value is None or isinstance(value, bool):
        return None
    number = float(value)
    return number if number > 0 else None


def _as_int(value: Any) -> int | None:
    return None if value is None else int(value)
