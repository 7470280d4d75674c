"""Attention without the pattern: each layer's output and its rows' numbers from the queries,
keys and values, in linear memory.

The bridge's attention builds each layer's whole pattern ``[batch, head, T, T]`` (and Hugging
Face a ``T x T`` mask beside it): 4.9 GB for a 2-layer, 8-head model at 8k tokens, ~70 GB at
32k. Inside :func:`pattern_free` every attention layer hands interv the tensors it multiplies
(queries and keys after rotary, query/key norms and the family's own query scaling; values
after every hook) and interv computes the rest:

- the layer's output ``z = softmax(scale * q . k [soft-capped] + mask) V``, with a fused
  attention kernel (``torch.nn.functional.scaled_dot_product_attention``) where it can express
  the layer, else in query chunks;
- per query row, reduced on the fly (:class:`RowStats`, all float64): the entropy, the mass,
  the weights at chosen keys (sinks) and weighted sums of per-key columns (e.g. value
  norms). The fused path reads them off the kernel's log-sum-exp ``lse`` and more output
  columns (``H = lse - sum_j a_j s_j`` with ``sum_j a_j s_j = scale * q . (sum_j a_j k_j)``,
  ``a_sink = exp(s_sink - lse)``), the kernel run in float32 over tiles of 2,048 keys whose
  results are combined in float64 (within 1e-6 nats of exact float64 row numbers at 4k
  tokens); the chunked path from the chunk's rows, with the same reductions as the pattern
  path;
- on request, the rows themselves, chunk by chunk (:class:`RowChunk`).

The admitted keys come from the layer's :class:`~interv.engine.architecture.KeyRule` (causal or
bidirectional AND padding AND the family's window or chunk), not from Hugging Face's mask,
whose ``T x T`` construction is switched off. The largest arrays are one chunk of rows
(``batch x heads x chunk x keys``, a few MiB) and the ``[batch, head, T]`` row numbers.

Where a layer is computed (its recipe's
:attr:`~interv.engine.architecture.AttentionRecipe.handover`), and how (its recipe's scale, soft
cap, off-row sink and ALiBi, :meth:`~interv.engine.architecture.AttentionRecipe.logits` and
:meth:`~interv.engine.architecture.AttentionRecipe.rows` on the chunked path):

- ``handoff`` (transformer-lens's ``PositionEmbeddingsAttentionBridge``: Llama, Mistral, Qwen,
  Gemma, OLMo, Phi, Cohere, Granite, StableLM, Starcoder2, SmolLM3, gpt-oss): the bridge runs
  until its rotated queries and keys (``hook_rot_q``/``hook_rot_k``) and hands over before the
  scores;
- ``reconstruct`` (``JointQKVAttentionBridge`` and its rotary and ALiBi variants: GPT-2,
  GPT-NeoX, Phi-3, Bloom): interv replaces the bridge's score computation;
- ``interface`` (bridges that run Hugging Face's own module: GPT-J, OPT, Llama-4, BERT,
  RoBERTa): interv is Hugging Face's attention function for the duration;
- GPT-Neo's module computes its pattern itself and is refused.

:func:`verify` checks, on the first chunk of the prompt, that the rows interv computes equal
the model's own pattern at every layer and its outputs the model's, and refuses in one line
where they do not. ``forward(..., attention="auto")`` (:mod:`interv.engine.forward`) runs
pattern-free from :data:`LONG_CONTEXT` positions on.

>>> request = RowRequest(on_layer=lambda layer, stats: kept.append(stats))
>>> forward(model, Prompts.of(tokens), readout=None, attention=AttentionPath("rows", request))
>>> kept[0].entropy.shape                          # [batch, head_index, pos], nats
"""

from __future__ import annotations

import contextlib
import math
import weakref
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from interv.engine.architecture import (
    Architecture,
    AttentionRecipe,
    KeyRule,
    architecture_of,
    recipe_of,
)
from interv.engine.restrictions import KeyRestriction
from interv.engine.sites import Site
from interv.errors import IntervError

__all__ = [
    "ATTENTION_MODES",
    "LONG_CONTEXT",
    "MAX_PATTERN_BYTES",
    "PATTERN_HOOKS",
    "RowChunk",
    "RowRequest",
    "RowStats",
    "admits_keys",
    "admitted_counts",
    "outside_hooks",
    "pattern_bytes",
    "pattern_free",
    "rows_refusal",
    "verified",
    "verify",
]

ATTENTION_MODES = ("auto", "pattern", "rows")
"""How :func:`~interv.engine.forward.forward` computes attention: ``"pattern"`` the model's own
attention (every layer's pattern materialized), ``"rows"`` pattern-free (this module),
``"auto"`` pattern-free from :data:`LONG_CONTEXT` positions on when nothing needs the pattern
and the family allows it, the model's own attention otherwise."""

LONG_CONTEXT = 2048
"""Positions from which ``attention="auto"`` computes attention without the pattern."""

MAX_PATTERN_BYTES = 4 << 30
"""Largest pattern of one layer (``batch x heads x T x T`` x bytes per weight) interv lets the
model materialize when something needs it (a hook or capture of the pattern, pattern patching,
rollout): above it the forward is refused, naming the size."""

_ROW_ELEMENTS = 1 << 22
"""Upper bound on the elements of one chunk of rows ``[batch, head, chunk, keys]`` (float32:
16 MiB per array)."""
_MASK_ELEMENTS = 1 << 24
"""Upper bound on the elements of one chunk's mask ``[batch, 1, chunk, keys]`` on the fused
path."""
_KEY_TILE = 2048
"""Keys per call of the fused kernel that yields the row numbers (see
:func:`_tiled_attention`)."""
_WINDOW_CHUNK = 256
"""Fewest query rows per chunk of a windowed layer (see :func:`_query_step`)."""
_STATS_DTYPE = torch.float32
"""The dtype of the fused kernel that yields the row numbers."""
_VERIFY_POSITIONS = 32
"""Query rows compared with the model's own pattern by :func:`verify`."""
_INTERFACE = "interv_rows"
"""The name interv's attention function is registered under in Hugging Face's
``AttentionInterface`` (also switching off Hugging Face's mask construction)."""


# ----------------------------------------------------------------------------- values


@dataclass(frozen=True, eq=False)
class RowStats:
    """The per-row numbers of one layer, for every query position (float64).

    A row is query ``t``'s weights ``a_j`` over the keys ``j`` the layer admits; it splits
    into the requested keys (:attr:`RowRequest.keys`, e.g. the sinks) and the rest. Entries
    of queries with no admitted key (``n == 0``, e.g. padding queries) are meaningless.

    Attributes:
        layer: the layer.
        entropy: ``[batch, head, pos]`` ``-sum_j a_j log a_j`` in nats over the admitted keys.
        mass: ``[batch, head, pos]`` ``sum_j a_j`` over the admitted keys (1 except with an
            off-row sink, where the sink logit takes the rest).
        at_keys: ``[batch, head, pos, n_keys]`` the weight on each requested key, 0 where the
            layer does not admit it for the query.
        rest: ``[batch, head, pos]`` ``sum_j a_j`` over the admitted keys that are not
            requested (summed directly: precise also when the requested keys take almost all
            the mass).
        rest_entropy: ``[batch, head, pos]`` ``-sum_j a_j log a_j`` over the same keys.
        weighted: ``[batch, head, pos, m]`` ``sum_j a_j X_j`` of the requested per-key columns
            ``X`` (:attr:`RowRequest.columns`), or None.
        n: ``[batch, pos]`` int64 number of admitted keys.
        path: ``"fused"`` (a fused kernel and its log-sum-exp) or ``"chunks"`` (rows built in
            query chunks).
    """

    layer: int
    entropy: torch.Tensor
    mass: torch.Tensor
    at_keys: torch.Tensor
    rest: torch.Tensor
    rest_entropy: torch.Tensor
    weighted: torch.Tensor | None
    n: torch.Tensor
    path: str


@dataclass(frozen=True, eq=False)
class RowChunk:
    """The rows of one chunk of queries of one layer, as the model computes them.

    Attributes:
        layer: the layer.
        queries: the query positions ``[start, stop)`` (padded positions).
        keys: the key positions ``[start, stop)`` the rows cover; every key outside is
            excluded for these queries.
        weights: ``[batch, head, query, key]`` float32 weights (0 at excluded keys and in
            rows without an admitted key).
        admitted: ``[batch, query, key]`` bool, the keys the layer admits.
    """

    layer: int
    queries: tuple[int, int]
    keys: tuple[int, int]
    weights: torch.Tensor
    admitted: torch.Tensor


ColumnsFn = Callable[[int, torch.Tensor], torch.Tensor]
"""``columns(layer, values) -> [batch, head, pos, m]``: per-key columns to weight by each row,
from the layer's values ``[batch, pos, n_key_value_heads, d_head]`` (as every hook left them)."""


@dataclass(frozen=True, eq=False)
class RowRequest:
    """What a pattern-free forward reports about each layer's rows.

    Attributes:
        keys: ``[batch, n_keys]`` int64 key positions (padded positions) whose weight every
            row reports in :attr:`RowStats.at_keys`, e.g. each prompt's sink; None: none.
        columns: per-key columns weighted by each row (:data:`ColumnsFn`), or None.
        on_layer: called with ``(layer, RowStats)`` once per layer, or None.
        on_chunk: called with each :class:`RowChunk`, or None (rows are then built in query
            chunks at every layer, the slower path).
        layers: the layers to report on (None: every layer).
        chunk: query rows per chunk (None: chosen from the lengths, a few MiB per array).
        exact: build rows in query chunks even where the fused kernel could be used.
    """

    keys: torch.Tensor | None = None
    columns: ColumnsFn | None = None
    on_layer: Callable[[int, RowStats], None] | None = None
    on_chunk: Callable[[RowChunk], None] | None = None
    layers: frozenset[int] | None = None
    chunk: int | None = None
    exact: bool = False

    def __post_init__(self) -> None:
        if self.chunk is not None and (
            isinstance(self.chunk, bool) or not isinstance(self.chunk, int) or self.chunk < 1
        ):
            raise IntervError(
                f"RowRequest.chunk must be a positive int or None; got {self.chunk!r}"
            )
        if self.keys is not None and (self.keys.ndim != 2 or self.keys.is_floating_point()):
            raise IntervError(
                f"RowRequest.keys must be a [batch, n_keys] int tensor; got {self.keys.dtype} "
                f"of shape {tuple(self.keys.shape)}"
            )

    def wants(self, layer: int) -> bool:
        """Whether ``layer``'s rows are reported."""
        wanted = self.on_layer is not None or self.on_chunk is not None
        return wanted and (self.layers is None or layer in self.layers)


# ----------------------------------------------------------------------------- key rules


def admitted_counts(rule: KeyRule, real: torch.Tensor) -> torch.Tensor:
    """``[batch, pos]`` int64 number of keys ``rule`` admits for each query (linear in T;
    equal to ``rule.admitted(real).sum(-1)``)."""
    n_pos = real.shape[1]
    first = real.to(torch.int64).argmax(dim=1)[:, None]
    end = first + real.sum(dim=1, keepdim=True)  # one past the last real token
    if not rule.causal:
        return (end - first).expand(-1, n_pos).clone()
    t = torch.arange(n_pos, device=real.device)[None, :]
    low = first.expand(-1, n_pos)
    if rule.window is not None:
        low = torch.maximum(low, t - rule.window + 1)
    if rule.chunk is not None:
        block = torch.div(t - first, rule.chunk, rounding_mode="floor")
        low = torch.maximum(low, first + block * rule.chunk)
    high = torch.minimum(t, end - 1)
    return (high - low + 1).clamp(min=0)


def admits_keys(rule: KeyRule, real: torch.Tensor, keys: torch.Tensor) -> torch.Tensor:
    """``[batch, pos, n_keys]`` bool: whether ``rule`` admits key ``keys[b, i]`` (padded
    positions, ``[batch, n_keys]``) for each query (:meth:`KeyRule.admitted` at those keys)."""
    return rule.admitted(real, keys=keys)


def _key_range(rule: KeyRule, firsts: list[int], start: int, stop: int, n_pos: int) -> tuple:
    """The keys ``[low, high)`` that can be admitted for queries ``[start, stop)`` of any
    prompt (``firsts``: each prompt's first real position)."""
    high = stop if rule.causal else n_pos
    low = 0
    if rule.window is not None:
        low = max(0, start - rule.window + 1)
    if rule.chunk is not None:
        low = max(low, min(f + max(0, (start - f) // rule.chunk) * rule.chunk for f in firsts))
        low = min(low, start)
    return low, high


def _query_step(rule: KeyRule, rows: int, n_pos: int, elements: int) -> int:
    """Query rows per chunk, so that one chunk's block ``rows x queries x keys`` holds at
    most ``elements`` entries (``rows``: batch, or batch x heads).

    Without a window, a chunk of ``s`` queries reads at most ``n_pos`` keys. A window of ``w``
    keys makes a chunk read ``s + w - 1`` of them (the keys of its first query's window to its
    last query): its chunks are ``max(w + 1, 256)`` queries (fewer where that block would
    exceed ``elements``), so the block is ``O(s * (s + w))``, not ``O(s * T)``, and the kernel
    reads at most about twice the keys the rows admit."""
    if rule.window is None:
        return max(1, elements // max(1, rows * n_pos))
    span = min(n_pos, rule.window + 1)
    step = min(n_pos, max(span, _WINDOW_CHUNK))
    while step > 1 and rows * step * (step + span - 1) > elements:
        step //= 2
    return step


# ----------------------------------------------------------------------------- the numbers


def _marked(batch: int, n_pos: int, index: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
    """``[batch, n_pos]`` bool: True at ``index[b, i]`` where ``valid[b, i]`` (repeated and
    invalid entries leave a valid mark in place)."""
    counts = torch.zeros(batch, n_pos, dtype=torch.int64, device=index.device)
    return counts.scatter_add_(1, index, valid.to(torch.int64)) > 0


def _stats_from_rows(
    weights: torch.Tensor,
    admitted: torch.Tensor,
    key_index: torch.Tensor,
    key_ok: torch.Tensor,
    columns: torch.Tensor | None,
) -> dict[str, torch.Tensor]:
    """The :class:`RowStats` sums of float32 rows ``[b, h, q, k]`` (float64).

    ``key_index`` ``[b, n_keys]`` the requested keys relative to the rows' first key (-1:
    outside); ``key_ok`` ``[b, q, n_keys]`` admitted and inside; ``columns`` ``[b, h, k, m]``.
    """
    f64 = torch.float64
    plogp = torch.special.xlogy(weights, weights)
    inside = key_index >= 0
    index = key_index.clamp(min=0)
    requested = _marked(weights.shape[0], weights.shape[-1], index, inside)  # [b, k]
    other = (admitted & ~requested[:, None, :])[:, None].to(weights.dtype)  # [b, 1, q, k]
    gather = index[:, None, None, :].expand(*weights.shape[:-1], -1)
    sums = {
        "entropy": -plogp.sum(dim=-1, dtype=f64),
        "mass": (weights * admitted[:, None].to(weights.dtype)).sum(dim=-1, dtype=f64),
        "at_keys": weights.gather(-1, gather).to(f64) * key_ok[:, None].to(f64),
        "rest": (weights * other).sum(dim=-1, dtype=f64),
        "rest_entropy": -(plogp * other).sum(dim=-1, dtype=f64),
    }
    if columns is not None:
        weighted = torch.einsum("bhqk,bhkm->bhqm", weights, columns.to(weights.dtype))
        sums["weighted"] = weighted.to(f64)
    return sums


# ----------------------------------------------------------------------------- kernels


def _lse_attention(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    mask: torch.Tensor | None,
    causal: bool,
    scale: float,
) -> tuple[torch.Tensor, torch.Tensor] | None:
    """A fused kernel's output and log-sum-exp (``[b, h, q, w]``, ``[b, h, q]``), float32
    inputs of one width; None where the device has no such kernel."""
    if mask is not None:
        mask = mask.to(query.dtype)
    if query.device.type == "cpu":
        op = getattr(torch.ops.aten, "_scaled_dot_product_flash_attention_for_cpu", None)
        if op is None:
            return None
        out, lse = op(query, key, value, 0.0, causal, attn_mask=mask, scale=scale)
        return out, lse
    if query.device.type == "cuda":
        op = getattr(torch.ops.aten, "_scaled_dot_product_efficient_attention", None)
        if op is None:
            return None
        try:
            out, lse, _, _ = op(query, key, value, mask, True, 0.0, causal, scale=scale)
        except RuntimeError:
            return None
        return out, lse[..., : query.shape[2]]
    return None


def _anchored(keys: torch.Tensor, at: torch.Tensor | None) -> torch.Tensor:
    """Keys ``[b, h, t, d]`` minus each prompt's key at the first requested position ``at[:,
    0]`` (where it lies inside): every logit of a row moves by the same amount (the softmax is
    unchanged) and the anchor's logit becomes exactly 0, so ``lse`` and ``sum_j a_j s_j`` stay
    small, and their difference (the entropy) precise, in rows that the anchor dominates."""
    if at is None or at.shape[1] == 0:
        return keys
    first = at[:, 0]
    inside = ((first >= 0) & (first < keys.shape[2])).to(keys.dtype)
    index = first.clamp(0, keys.shape[2] - 1)[:, None, None, None]
    anchor = keys.gather(2, index.expand(-1, keys.shape[1], 1, keys.shape[3]))
    return keys - anchor * inside[:, None, None, None]


Part = tuple[int, int, int, int, "torch.Tensor | None", bool]
"""``(query start, query stop, key low, key high, float mask or None, causal)``: one call."""


def _tiles(parts: Iterable[Part]) -> Iterator[Part]:
    """``parts`` split into key tiles of :data:`_KEY_TILE` keys (and, for the plain causal
    part, query tiles on the same grid: the diagonal tile is causal, those below it full)."""
    for start, stop, low, high, mask, causal in parts:
        if causal:  # one part over every position; tiles of one grid, the diagonal causal
            for first in range(start, stop, _KEY_TILE):
                last = min(first + _KEY_TILE, stop)
                for key in range(low, last, _KEY_TILE):
                    yield first, last, key, min(key + _KEY_TILE, last), None, key == first
            continue
        for key in range(low, high, _KEY_TILE):
            end = min(key + _KEY_TILE, high)
            tile = None if mask is None else mask[..., key - low : end - low]
            yield start, stop, key, end, tile, False


def _tiled_attention(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    tiles: Iterator[Part],
    scale: float,
) -> tuple[torch.Tensor, torch.Tensor] | None:
    """The fused kernel over ``tiles``, combined in float64: ``(out [b, h, t, w], lse [b, h,
    t])``. Each tile's log-sum-exp is over at most :data:`_KEY_TILE` keys and the tiles' are
    summed in float64, so the float32 rounding of one ``log`` of a sum over every key
    (``~ulp(log T)``) does not reach the row numbers. The tiles of one query range are folded
    into its running sum one by one (memory: one query range, not its every key tile). None
    where the device has no such kernel."""
    batch, n_heads, n_pos, width = value.shape[0], query.shape[1], query.shape[2], value.shape[3]
    f64 = torch.float64
    out = torch.zeros(batch, n_heads, n_pos, width, dtype=f64, device=query.device)
    lse = torch.full((batch, n_heads, n_pos), -math.inf, dtype=f64, device=query.device)

    def fold(start: int, stop: int, part: torch.Tensor, log: torch.Tensor) -> None:
        # out = (exp(lse) out + exp(log) part) / exp(total), total = logaddexp(lse, log)
        before = lse[:, :, start:stop]
        log = log.to(f64)
        total = torch.logaddexp(before, log)
        finite = torch.where(total > -math.inf, total, 0.0)
        kept = torch.exp(before - finite)[..., None]
        new = torch.exp(log - finite)[..., None]
        part = torch.where((log > -math.inf)[..., None], part.to(f64), 0.0)  # empty in a tile
        out[:, :, start:stop] = out[:, :, start:stop] * kept + part * new
        lse[:, :, start:stop] = total

    for start, stop, low, high, mask, causal in tiles:
        got = _lse_attention(
            query[:, :, start:stop], key[:, :, low:high], value[:, :, low:high], mask, causal, scale
        )
        if got is None:
            return None
        part, part_lse = got
        if mask is not None:  # the kernel reports lse 0 for a row with no admitted key here
            empty = (mask == -math.inf).all(dim=-1)  # [b, 1, q] or [b, 1, 1]
            part_lse = part_lse.masked_fill(empty, -math.inf)
        fold(start, stop, part, part_lse)
    return out, lse


def _padded(tensor: torch.Tensor, width: int) -> torch.Tensor:
    if tensor.shape[-1] == width:
        return tensor
    return torch.nn.functional.pad(tensor, (0, width - tensor.shape[-1]))


# ----------------------------------------------------------------------------- one call


@dataclass
class _Call:
    """One attention computation: a layer's rotated queries and keys, and values.

    ``q`` ``[b, h, t, d]``, ``k``/``v`` ``[b, kv, t, d]`` (the model's dtype); ``recipe`` how
    the layer turns them into rows (scale, soft cap, off-row sink); ``bias`` ``[b, h, t]`` an
    additive per-key logit (ALiBi).
    """

    layer: int
    q: torch.Tensor
    k: torch.Tensor
    v: torch.Tensor
    recipe: AttentionRecipe
    bias: torch.Tensor | None = None

    @property
    def scale(self) -> float:
        scale = self.recipe.scale
        if scale is None:
            raise IntervError(
                f"layer {self.layer}: q . k is scaled by a position-dependent or unknown factor"
            )
        return scale


class _Engine:
    """The state of one pattern-free forward: the model's rules, the prompts' real tokens,
    the request, and which layers ran."""

    def __init__(
        self,
        model: Any,
        arch: Architecture,
        real: torch.Tensor,
        request: RowRequest,
        restrictions: Sequence[tuple[slice, KeyRestriction]] = (),
    ):
        self.model = model
        self.arch = arch
        self.real = real.to(torch.bool)
        self.request = request
        self.restrictions = tuple(restrictions)
        self.ran: set[int] = set()
        self.recipes: tuple[AttentionRecipe | None, ...] = tuple(
            None if layer is None else recipe_of(model, index)
            for index, layer in enumerate(arch.layers)
        )

    def real_for(self, batch: int) -> torch.Tensor:
        n = self.real.shape[0]
        if batch % n:
            raise IntervError(
                f"a pattern-free attention call has {batch} rows, not a multiple of the "
                f"{n} prompts whose mask it was given"
            )
        return self.real if batch == n else self.real.repeat(batch // n, 1)

    def attend(self, call: _Call) -> torch.Tensor:
        """The layer's output ``[b, h, t, d]`` in the values' dtype; reports its rows."""
        batch, n_heads, n_pos, _ = call.q.shape
        real = self.real_for(batch).to(call.q.device)
        if real.shape[1] != n_pos:
            raise IntervError(
                f"layer {call.layer}: attention over {n_pos} positions, but the prompts' mask "
                f"has {real.shape[1]}"
            )
        self.ran.add(call.layer)
        request = self.request
        report = request.wants(call.layer)
        columns = None
        if report and request.on_layer is not None and request.columns is not None:
            columns = request.columns(call.layer, call.v.transpose(1, 2))
        group = n_heads // call.k.shape[1]
        if group > 1:  # query head h reads key/value head h // group
            call.k = call.k.repeat_interleave(group, dim=1)
            call.v = call.v.repeat_interleave(group, dim=1)
        rule = self.arch.key_rule(call.layer)
        restricted = self._restricted(call.layer, batch, n_heads)
        if restricted and report:
            raise IntervError(
                f"layer {call.layer}: row statistics under an intervention's key restriction "
                "are not computed; ask for the rows of an unedited forward"
            )
        exact = (
            request.exact
            or (report and request.on_chunk is not None)
            or call.recipe.softcap is not None
            or call.recipe.sinks is not None
            or call.bias is not None
        )
        if not exact:
            done = self._fused(call, rule, real, report, columns, restricted)
            if done is not None:
                return done
        return self._chunks(call, rule, real, report, columns, restricted)

    # -- helpers

    def _restricted(
        self, layer: int, batch: int, n_heads: int
    ) -> tuple[tuple[slice, KeyRestriction], ...]:
        """The key restrictions of ``layer``'s rows (of copies that run it), checked."""
        found = tuple((rows, r) for rows, r in self.restrictions if r.layer == layer)
        for rows, restriction in found:
            start, stop, step = rows.indices(batch)
            if step != 1 or stop != rows.stop or start >= stop:
                raise IntervError(
                    f"layer {layer}: a key restriction of rows {rows.start}..{rows.stop} in a "
                    f"forward of {batch} rows at that layer"
                )
            heads = restriction.heads or ()
            if heads and heads[-1] >= n_heads:
                raise IntervError(
                    f"layer {layer}: a key restriction of heads {list(heads)}; the layer has "
                    f"{n_heads} query heads"
                )
        return found

    def _admitted(
        self,
        rule: KeyRule,
        real: torch.Tensor,
        restricted: tuple[tuple[slice, KeyRestriction], ...],
        queries: slice,
        keys: slice,
        n_heads: int,
    ) -> torch.Tensor:
        """``[b, 1 or heads, query, key]`` bool: the keys the layer's rule admits for a block
        of rows, AND every key restriction of the rows and heads it names."""
        admitted = rule.admitted(real, queries, keys)[:, None]
        if not restricted:
            return admitted
        if any(r.heads is not None for _, r in restricted):
            admitted = admitted.expand(-1, n_heads, -1, -1)
        admitted = admitted.clone()
        for rows, restriction in restricted:
            kept = restriction.kept(real[rows], queries, keys)[:, None]
            if restriction.heads is None:
                admitted[rows] &= kept
            else:
                heads = list(restriction.heads)
                admitted[rows, heads] = admitted[rows, heads] & kept
        return admitted

    def _keys(self, real: torch.Tensor) -> torch.Tensor:
        """``[b, n_keys]`` requested key positions for ``b`` rows (-1 where outside)."""
        keys = self.request.keys
        if keys is None:
            return torch.zeros(real.shape[0], 0, dtype=torch.int64, device=real.device)
        keys = keys.to(device=real.device, dtype=torch.int64)
        keys = keys.repeat(real.shape[0] // keys.shape[0], 1)
        return torch.where((keys >= 0) & (keys < real.shape[1]), keys, -1)

    def _report(
        self,
        call: _Call,
        rule: KeyRule,
        real: torch.Tensor,
        sums: dict[str, torch.Tensor],
        path: str,
    ) -> None:
        on_layer = self.request.on_layer
        if on_layer is None:
            return
        stats = RowStats(
            layer=call.layer,
            entropy=sums["entropy"],
            mass=sums["mass"],
            at_keys=sums["at_keys"],
            rest=sums["rest"],
            rest_entropy=sums["rest_entropy"],
            weighted=sums.get("weighted"),
            n=admitted_counts(rule, real),
            path=path,
        )
        on_layer(call.layer, stats)

    # -- the chunked path

    def _chunks(
        self,
        call: _Call,
        rule: KeyRule,
        real: torch.Tensor,
        report: bool,
        columns: torch.Tensor | None,
        restricted: tuple[tuple[slice, KeyRestriction], ...] = (),
    ) -> torch.Tensor:
        q, k, v = call.q, call.k, call.v
        batch, n_heads, n_pos, _ = q.shape
        f32 = torch.float32
        out = torch.empty(batch, n_heads, n_pos, v.shape[-1], dtype=v.dtype, device=v.device)
        firsts = [int(f) for f in real.to(torch.int64).argmax(dim=1).cpu()]
        summing = report and self.request.on_layer is not None
        keys = self._keys(real)
        key_ok = admits_keys(rule, real, keys)
        sums: dict[str, torch.Tensor] = {}
        step = self.request.chunk or _query_step(rule, batch * n_heads, n_pos, _ROW_ELEMENTS)
        for start in range(0, n_pos, step):
            stop = min(start + step, n_pos)
            low, high = _key_range(rule, firsts, start, stop, n_pos)
            allowed = self._admitted(
                rule, real, restricted, slice(start, stop), slice(low, high), n_heads
            )
            bias = None if call.bias is None else call.bias[:, :, None, low:high]
            scores = call.recipe.logits(
                q[:, :, start:stop].to(f32), k[:, :, low:high].to(f32), allowed, bias
            )
            weights = call.recipe.rows(scores)  # 0 in a row without an admitted key
            out[:, :, start:stop] = torch.matmul(weights.to(v.dtype), v[:, :, low:high])
            admitted = allowed[:, 0]  # [b, q, k] (no restriction where rows are reported)
            if report and self.request.on_chunk is not None:
                chunk = RowChunk(call.layer, (start, stop), (low, high), weights, admitted)
                self.request.on_chunk(chunk)
            if not summing:
                continue
            inside = (keys >= low) & (keys < high)
            index = torch.where(inside, keys - low, -1)
            ok = key_ok[:, start:stop] & inside[:, None, :]
            cols = columns[:, :, low:high] if columns is not None else None
            for name, part in _stats_from_rows(weights, admitted, index, ok, cols).items():
                if name not in sums:
                    sums[name] = part.new_zeros(*part.shape[:2], n_pos, *part.shape[3:])
                sums[name][:, :, start:stop] = part
        if summing:
            self._report(call, rule, real, sums, "chunks")
        return out

    # -- the fused path

    def _parts(
        self,
        rule: KeyRule,
        real: torch.Tensor,
        n_pos: int,
        restricted: tuple[tuple[slice, KeyRestriction], ...] = (),
        n_heads: int = 1,
    ) -> Iterator[tuple[Part, torch.Tensor | None]]:
        """The pieces of the fused call, each with the rows it must leave at zero: ``[b, 1 or
        heads, query]`` bool where a key restriction removed every key the rule admits (the
        masked softmax of an empty row is no weight at all), or None."""
        batch = real.shape[0]
        no_left_padding = not bool(real[:, 0].logical_not().any())
        plain = not restricted
        causal = rule.causal and rule.window is None and rule.chunk is None
        if plain and causal and no_left_padding:
            # causal from the first position: padding keys lie after every real query
            yield (0, n_pos, 0, n_pos, None, True), None
            return
        if plain and not rule.causal:
            mask = None
            if not bool(real.all()):
                mask = torch.zeros(batch, 1, 1, n_pos, dtype=torch.float32, device=real.device)
                mask = mask.masked_fill(~real[:, None, None, :], -math.inf)
            yield (0, n_pos, 0, n_pos, mask, False), None
            return
        firsts = [int(f) for f in real.to(torch.int64).argmax(dim=1).cpu()]
        per_head = n_heads if any(r.heads is not None for _, r in restricted) else 1
        step = self.request.chunk or _query_step(rule, batch * per_head, n_pos, _MASK_ELEMENTS)
        for start in range(0, n_pos, step):
            stop = min(start + step, n_pos)
            low, high = _key_range(rule, firsts, start, stop, n_pos)
            queries, keys = slice(start, stop), slice(low, high)
            admitted = self._admitted(rule, real, restricted, queries, keys, n_heads)
            # a query with no admitted key attends to itself: outputs stay finite (a padding
            # query's are never read; a row a restriction emptied is zeroed after the call)
            empty = ~admitted.any(dim=-1, keepdim=True)
            dead = None
            if restricted:
                ruled = rule.admitted(real, queries, keys).any(dim=-1)[:, None]
                dead = empty[..., 0] & ruled
            own = torch.arange(start, stop, device=real.device)[:, None] == torch.arange(
                low, high, device=real.device
            )
            admitted = admitted | (empty & own)
            mask = torch.zeros(admitted.shape, dtype=torch.float32, device=real.device)
            yield (start, stop, low, high, mask.masked_fill(~admitted, -math.inf), False), dead

    def _fused(
        self,
        call: _Call,
        rule: KeyRule,
        real: torch.Tensor,
        report: bool,
        columns: torch.Tensor | None,
        restricted: tuple[tuple[slice, KeyRestriction], ...] = (),
    ) -> torch.Tensor | None:
        q, k, v = call.q, call.k, call.v
        batch, n_heads, n_pos, d_head = q.shape
        f32 = _STATS_DTYPE

        def pieces() -> Iterator[tuple[Part, torch.Tensor | None]]:
            # built chunk by chunk as the calls consume them: one chunk's mask at a time
            return self._parts(rule, real, n_pos, restricted, n_heads)

        if report and self.request.on_layer is not None:
            # one kernel call in float32 whose value columns are [v (float32 models), the
            # keys other than the requested ones, an indicator of those, ones, X]
            fuse = v.dtype == f32
            keys = self._keys(real)
            anchored = _anchored(k.to(f32), keys)
            requested = _marked(batch, n_pos, keys.clamp(min=0), keys >= 0)
            other = (~requested).to(f32)[:, None, :, None]  # [b, 1, t, 1]
            blocks = [v] if fuse else []
            ones = torch.ones(batch, n_heads, n_pos, 1, dtype=f32, device=q.device)
            blocks += [anchored * other, other.expand(batch, n_heads, n_pos, 1), ones]
            if columns is not None:
                blocks.append(columns.to(device=q.device, dtype=f32))
            values = torch.cat(blocks, dim=-1)
            width = max(d_head, values.shape[-1])
            if q.device.type == "cuda":  # its kernels want widths in multiples of 8
                width = -(-width // 8) * 8
            qs, ks, vs = (_padded(t.to(f32), width) for t in (q, anchored, values))
            parts = (part for part, _ in pieces())
            combined = _tiled_attention(qs, ks, vs, _tiles(parts), call.scale)
            if combined is None:
                return None
            out, lse = combined
            sums = self._fused_sums(call, rule, real, keys, anchored, out, lse, columns)
            self._report(call, rule, real, sums, "fused")
            if fuse:
                return out[..., : v.shape[-1]].to(v.dtype)
        z = torch.empty(batch, n_heads, n_pos, v.shape[-1], dtype=v.dtype, device=v.device)
        for (start, stop, low, high, mask, causal), dead in pieces():
            part = torch.nn.functional.scaled_dot_product_attention(
                q[:, :, start:stop],
                k[:, :, low:high],
                v[:, :, low:high],
                attn_mask=None if mask is None else mask == 0,
                is_causal=causal,
                scale=call.scale,
            )
            if dead is not None:
                part = torch.where(dead[..., None], 0.0, part)
            z[:, :, start:stop] = part
        return z

    def _fused_sums(
        self,
        call: _Call,
        rule: KeyRule,
        real: torch.Tensor,
        keys: torch.Tensor,
        anchored: torch.Tensor,
        out: torch.Tensor,
        lse: torch.Tensor,
        columns: torch.Tensor | None,
    ) -> dict[str, torch.Tensor]:
        """The :class:`RowStats` sums from the fused kernel's output and log-sum-exp.

        With logits ``s_j`` (anchored keys), ``log a_j = s_j - lse``: over the keys that
        are not requested, ``-sum a_j log a_j = rest * lse - scale * q . (sum a_j k_j)``,
        both sums read off the kernel's value columns (each divided by the kernel's own sum
        of all weights, a column of ones); at a requested key ``a = exp(s - lse)``.
        """
        f64 = torch.float64
        q, v = call.q, call.v
        n_heads, d_head = q.shape[1], q.shape[3]
        offset = v.shape[-1] if v.dtype == _STATS_DTYPE else 0
        lse64 = lse.to(f64)
        # every column over the kernel's own sum of the weights (its float32 rounding of the
        # normalizer, common to all columns, cancels)
        columns_out = out[..., offset:].to(f64)
        total = columns_out[..., d_head + 1 : d_head + 2]
        columns_out = columns_out / total
        index = keys.clamp(min=0)[:, None, :, None].expand(-1, n_heads, -1, d_head)
        picked = anchored.gather(2, index).to(f64)  # [b, h, n_keys, d]
        logits = call.scale * torch.einsum("bhtd,bhsd->bhts", q.to(f64), picked)
        ok = admits_keys(rule, real, keys)[:, None].to(f64)
        at_keys = torch.exp(logits - lse64[..., None]) * ok
        # the mass of the other keys: 1 - (the requested keys' exact weights) where those hold
        # at most half the row, else the kernel's own sum over the other keys (no cancellation
        # either way)
        on_keys = at_keys.sum(dim=-1)
        rest = torch.where(on_keys <= 0.5, 1.0 - on_keys, columns_out[..., d_head])
        rest_keys = columns_out[..., :d_head]  # sum over the rest of a_j k_j
        rest_entropy = rest * lse64 - call.scale * (q.to(f64) * rest_keys).sum(dim=-1)
        sums = {
            "entropy": rest_entropy - torch.special.xlogy(at_keys, at_keys).sum(dim=-1),
            "mass": rest + at_keys.sum(dim=-1),
            "at_keys": at_keys,
            "rest": rest,
            "rest_entropy": rest_entropy,
        }
        if columns is not None:
            sums["weighted"] = columns_out[..., d_head + 2 : d_head + 2 + columns.shape[-1]]
        return sums


# ----------------------------------------------------------------------------- the styles


class _Handoff(Exception):
    """Raised by the hook on a layer's rotated keys: interv takes over from there."""


def _output(attn: Any, z: torch.Tensor) -> torch.Tensor:
    """The bridge's own tail after ``a . V``: heads merged, the output projection (through
    ``hook_z``; per head where ``use_attn_result`` asks for ``hook_result``)."""
    batch, n_heads, n_pos, d_head = z.shape
    merged = z.transpose(1, 2).reshape(batch, n_pos, n_heads * d_head)
    if (
        bool(getattr(attn.config, "use_attn_result", False))
        and attn.o.original_component is not None
    ):
        merged = attn.o.hook_in(merged)
        return attn._compute_per_head_result(
            merged.view(batch, n_pos, n_heads, d_head), n_heads, d_head
        )
    return attn.o(merged)


def _install_handoff(engine: _Engine, layer: int, attn: Any) -> Callable[[], None]:
    state: dict[str, torch.Tensor] = {}

    def keep(name: str) -> Any:
        def hook(module: Any, args: Any, output: torch.Tensor) -> None:
            state[name] = output

        return hook

    def hand_over(module: Any, args: Any, output: torch.Tensor) -> None:
        state["k"] = output
        raise _Handoff

    handles = [
        attn.v.hook_out.register_forward_hook(keep("v")),
        attn.hook_rot_q.register_forward_hook(keep("q")),
        attn.hook_rot_k.register_forward_hook(hand_over),
    ]
    bound = attn.forward

    def forward(*args: Any, **kwargs: Any) -> Any:
        state.clear()
        try:
            bound(*args, **kwargs)
        except _Handoff:
            pass
        else:
            raise IntervError(
                f"layer {layer}: the attention bridge finished without handing over its rotated "
                "queries and keys"
            )
        q, k, values = state.pop("q"), state.pop("k"), state.pop("v")
        batch, _, n_pos, d_head = q.shape
        v = values.reshape(batch, n_pos, -1, d_head).transpose(1, 2)
        z = engine.attend(_Call(layer, q, k, v, engine.recipes[layer]))
        merged = attn._pre_output_projection(z.transpose(1, 2).reshape(batch, n_pos, -1))
        weight = getattr(attn.o.original_component, "weight", None)
        if (
            isinstance(weight, torch.Tensor)
            and weight.dtype.is_floating_point
            and merged.dtype != weight.dtype
        ):
            merged = merged.to(weight.dtype)
        z = merged.view(batch, n_pos, -1, d_head).transpose(1, 2)
        return attn.hook_out(_output(attn, z)), None

    # on the instance itself (the bridge forwards unknown attribute writes to the HF module)
    attn.__dict__["forward"] = forward

    def undo() -> None:
        for handle in handles:
            handle.remove()
        attn.__dict__.pop("forward", None)

    return undo


def _install_reconstruct(engine: _Engine, layer: int, attn: Any) -> Callable[[], None]:
    cfg = attn.config
    n_heads = int(cfg.n_heads)
    n_kv = int(getattr(cfg, "n_key_value_heads", None) or n_heads)
    recipe = engine.recipes[layer]

    def reconstruct(q: Any, k: Any, v: Any, **kwargs: Any) -> tuple[torch.Tensor, None]:
        q, k, v, batch, n_pos, _ = attn._reshape_qkv_to_heads(q, k, v, n_heads, n_kv)
        embeddings = kwargs.get("position_embeddings")
        if hasattr(attn, "_apply_rotary_pos_emb") and isinstance(embeddings, tuple):
            cos, sin = attn._apply_position_embedding_hooks(embeddings)
            q, k = attn._apply_rotary_pos_emb(q, k, cos, sin)
        bias = None
        alibi = kwargs.get("alibi")
        if recipe.alibi and isinstance(alibi, torch.Tensor):
            bias = alibi.reshape(batch, n_heads, -1)[..., :n_pos]
        z = engine.attend(_Call(layer, q, k, v, recipe, bias=bias))
        return _output(attn, z), None

    attn.__dict__["_reconstruct_attention"] = reconstruct

    def undo() -> None:
        attn.__dict__.pop("_reconstruct_attention", None)

    return undo


_ENGINES: list[_Engine] = []
"""The engines of the pattern-free forwards in progress (innermost last)."""
_MODULE_LAYERS: dict[int, int] = {}


def _interface_attention(
    module: Any,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: Any,
    dropout: float = 0.0,
    scaling: float | None = None,
    **kwargs: Any,
) -> tuple[torch.Tensor, None]:
    """Hugging Face's attention-function signature: ``[b, h, t, d]`` in, ``[b, t, h, d]`` out."""
    if not _ENGINES or id(module) not in _MODULE_LAYERS:
        raise IntervError(
            f"interv's pattern-free attention was called by {type(module).__name__} outside a "
            "pattern-free forward"
        )
    layer = _MODULE_LAYERS[id(module)]
    engine = _ENGINES[-1]
    # Hugging Face passes this call's scale, soft cap and sink logits: they stand for the
    # layer's recipe (Llama-4's NoPE layers scale their queries before the call)
    scale = float(scaling) if scaling is not None else float(query.shape[-1]) ** -0.5
    recipe = engine.recipes[layer].called_with(scale, kwargs.get("softcap"), kwargs.get("s_aux"))
    z = engine.attend(_Call(layer, query, key, value, recipe))
    return z.transpose(1, 2).contiguous(), None


def _install_interface(engine: _Engine, layer: int, attn: Any) -> Callable[[], None]:
    ids = [id(module) for module in attn.original_component.modules()]
    for key in ids:
        _MODULE_LAYERS[key] = layer

    def undo() -> None:
        for key in ids:
            _MODULE_LAYERS.pop(key, None)

    return undo


_INSTALL = {
    "handoff": _install_handoff,
    "reconstruct": _install_reconstruct,
    "interface": _install_interface,
}


@contextlib.contextmanager
def _hugging_face_switched(model: Any) -> Iterator[None]:
    """Hugging Face's attention implementation set to interv's for the duration: modules that
    dispatch through ``AttentionInterface`` call interv, and no ``T x T`` mask is built."""
    from transformers import AttentionInterface

    AttentionInterface.register(_INTERFACE, _interface_attention)
    config = getattr(getattr(model, "original_model", None), "config", None)
    before = getattr(config, "_attn_implementation", None) if config is not None else None
    if config is None or before is None:
        yield
        return
    config._attn_implementation = _INTERFACE
    try:
        yield
    finally:
        config._attn_implementation = before


def rows_refusal(model: Any) -> str | None:
    """Why ``model``'s attention cannot be computed pattern-free, in one line (None if it can;
    :func:`verify` then checks the rows against the model's own)."""
    arch = architecture_of(model)
    for feature in ("attention_rows", "ungated_heads"):
        reason = arch.lacks(feature)
        if reason is not None:
            return f"{arch.family}: {reason}"
    for layer, block in enumerate(model.blocks):
        if arch.layers[layer] is None:
            continue
        recipe = recipe_of(model, layer)
        if recipe.norm_after_rotary:
            return f"{arch.family}: queries and keys are normalized after the rotation"
        if recipe.handover is None:
            name = type(block._modules.get("attn")).__name__
            return (
                f"{arch.family}: layer {layer}'s attention ({name}) does not hand its queries and "
                "keys to interv"
            )
        if recipe.gated:
            return f"{arch.family}: layer {layer}'s heads are gated after a . V"
    return None


@contextlib.contextmanager
def pattern_free(
    model: Any,
    real: torch.Tensor,
    request: RowRequest,
    restrictions: Sequence[tuple[slice, KeyRestriction]] = (),
) -> Iterator[_Engine]:
    """Inside, ``model``'s attention layers compute without their pattern (see the module
    docstring) for prompts whose real tokens are ``real`` ``[n, pos]`` (a forward may stack
    copies of them); everything installed is removed on exit, also on error.

    ``restrictions``: ``(rows, KeyRestriction)`` pairs, each ANDed with its layer's own rule
    for the rows ``rows`` of the batch (a stacked copy; :mod:`interv.engine.restrictions`)."""
    reason = rows_refusal(model)
    if reason is not None:
        raise IntervError(reason + "; attention without the pattern is not available")
    engine = _Engine(model, architecture_of(model), real, request, restrictions)
    undo: list[Callable[[], None]] = []
    with contextlib.ExitStack() as stack:
        try:
            for layer, block in enumerate(model.blocks):
                attn = block._modules.get("attn")
                recipe = engine.recipes[layer]
                if recipe is not None and recipe.handover is not None:  # rows_refusal checked
                    undo.append(_INSTALL[recipe.handover](engine, layer, attn))
            stack.enter_context(_hugging_face_switched(model))
            _ENGINES.append(engine)
            yield engine
        finally:
            if _ENGINES and _ENGINES[-1] is engine:
                _ENGINES.pop()
            for step in reversed(undo):
                step()


# ----------------------------------------------------------------------------- checks


def pattern_bytes(model: Any, n_rows: int, n_pos: int) -> int:
    """Bytes of one layer's pattern ``[n_rows, heads, n_pos, n_pos]`` in the model's dtype."""
    parameter = next(model.parameters(), None)
    itemsize = 4 if parameter is None else max(2, parameter.element_size())
    return n_rows * int(model.cfg.n_heads) * n_pos * n_pos * itemsize


PATTERN_HOOKS = ("hook_attn_scores", "hook_pattern")
"""The hook points of an attention bridge that attention without the pattern never fires."""

_HOOK_DICTS = ("_forward_hooks", "_forward_pre_hooks", "_backward_hooks", "_backward_pre_hooks")


def outside_hooks(model: Any) -> list[str]:
    """The names of ``model``'s :data:`PATTERN_HOOKS` points that carry a hook attached from
    outside (``model.add_hook``, ``with model.hooks(...)``): attention without the pattern
    would skip them. Read at every choice of the path, never remembered."""
    held = []
    for layer, block in enumerate(getattr(model, "blocks", ())):
        attn = block._modules.get("attn")
        for name in PATTERN_HOOKS:
            point = getattr(attn, name, None)
            if point is not None and any(getattr(point, d, None) for d in _HOOK_DICTS):
                held.append(f"blocks.{layer}.attn.{name}")
    return held


_VERIFIED: weakref.WeakKeyDictionary[Any, tuple] = weakref.WeakKeyDictionary()


def _state(model: Any) -> tuple:
    parameter = next(model.parameters(), None)
    versions = sum(p._version for p in model.parameters())
    where = (str(parameter.device), str(parameter.dtype)) if parameter is not None else ()
    return (*where, versions)


def verified(model: Any) -> bool:
    """Whether :func:`verify` accepted ``model`` in its current weights."""
    return _VERIFIED.get(model) == _state(model)


def _tolerance(dtype: torch.dtype, floor: float) -> float:
    return max(floor, 8 * torch.finfo(dtype).eps) if dtype.is_floating_point else floor


def verify(model: Any, tokens: torch.Tensor, real: torch.Tensor, run: Callable[..., Any]) -> None:
    """Check, on the first rows of the prompt, that interv's pattern-free attention equals the
    model's own at every layer; refuse in one line where it does not.

    The first real tokens of prompt 0 (up to 32) run three times through ``run(tokens,
    capture=..., attention=..., rows=...)`` (interv's forward, no readout): with the model's
    own attention (its pattern and outputs ``z`` captured), with rows built in chunks
    (compared with the pattern, weight by weight), and on the fused path (its outputs and row
    numbers compared with the chunked ones). A causal model computes the same first rows
    inside a longer prompt. Remembered per model until a weight changes.

    Raises:
        IntervError naming the family, the layer and the difference.
    """
    reason = rows_refusal(model)
    if reason is not None:
        raise IntervError(reason + "; attention without the pattern is not available")
    state = _state(model)
    if _VERIFIED.get(model) == state:
        return
    arch = architecture_of(model)
    layers = [i for i, layer in enumerate(arch.layers) if layer is not None]
    first = int(real[0].to(torch.int64).argmax())
    n = min(int(real[0].sum()), _VERIFY_POSITIONS)
    prefix = tokens[:1, first : first + n].cpu()
    pattern_sites = [Site("pattern", layer) for layer in layers]
    z_sites = [Site("z", layer) for layer in layers]
    _VERIFIED[model] = state  # the runs below are pattern-free forwards of this model
    try:
        own = run(prefix, capture=pattern_sites + z_sites, attention="pattern")
        chunks: dict[int, list[RowChunk]] = {}
        exact: dict[int, RowStats] = {}
        fused: dict[int, RowStats] = {}
        keys = torch.zeros(1, 1, dtype=torch.int64)
        rebuilt = run(
            prefix,
            capture=z_sites,
            attention="rows",
            rows=RowRequest(
                keys=keys,
                on_chunk=lambda c: chunks.setdefault(c.layer, []).append(c),
                on_layer=lambda layer, s: exact.__setitem__(layer, s),
                exact=True,
            ),
        )
        quick = run(
            prefix,
            capture=z_sites,
            attention="rows",
            rows=RowRequest(keys=keys, on_layer=lambda layer, s: fused.__setitem__(layer, s)),
        )
    except BaseException:
        _VERIFIED.pop(model, None)
        raise
    try:
        for layer in layers:
            module = type(model.blocks[layer].attn.original_component).__name__
            _compare_layer(arch, module, layer, n, own, rebuilt, quick, chunks, exact, fused)
    except IntervError:
        _VERIFIED.pop(model, None)
        raise


def _compare_layer(
    arch: Architecture,
    module: str,
    layer: int,
    n: int,
    own: Any,
    rebuilt: Any,
    quick: Any,
    chunks: dict[int, list[RowChunk]],
    exact: dict[int, RowStats],
    fused: dict[int, RowStats],
) -> None:
    def refuse(what: str, difference: float, tolerance: float) -> None:
        arch.refuse(
            f"layer {layer}'s {what} differ from the model's own by {difference:.3g} on the "
            f"first {n} positions (tolerance {tolerance:.1g}), so interv cannot compute this "
            "family's attention without the pattern",
            hint="use attention='pattern' (memory quadratic in the prompt length)",
        )

    if layer not in chunks or layer not in exact or layer not in fused:
        arch.refuse(
            f"layer {layer}'s attention ran without handing its queries and keys to interv "
            f"({module} computes its pattern itself)",
            hint="use attention='pattern' (memory quadratic in the prompt length)",
        )
    pattern = own.captured[Site("pattern", layer)].float()
    rows = torch.zeros_like(pattern)
    for chunk in chunks[layer]:
        (start, stop), (low, high) = chunk.queries, chunk.keys
        rows[:, :, start:stop, low:high] = chunk.weights.to(rows.device)
    tolerance = _tolerance(own.captured[Site("pattern", layer)].dtype, 1e-5)
    difference = float((rows - pattern).abs().max())
    if not difference <= tolerance:
        refuse("attention rows recomputed from its queries and keys", difference, tolerance)
    reference = own.captured[Site("z", layer)].float()
    scale = 1.0 + float(reference.abs().max())
    for out in (rebuilt, quick):
        z = out.captured[Site("z", layer)].float()
        tolerance = _tolerance(own.captured[Site("z", layer)].dtype, 1e-5) * scale
        difference = float((z - reference).abs().max())
        if not difference <= tolerance:
            refuse("head outputs computed without the pattern", difference, tolerance)
    a, b = exact[layer], fused[layer]
    # the two runs' later layers see inputs that differ by the rounding of the model's dtype
    tolerance = _tolerance(own.captured[Site("z", layer)].dtype, 1e-4)
    real = (a.n > 0)[:, None, :]  # [b, 1, t]
    for name in ("entropy", "rest", "rest_entropy"):
        difference = float(torch.where(real, getattr(a, name) - getattr(b, name), 0).abs().max())
        if not difference <= tolerance:
            refuse(f"row numbers ({name}) from the fused kernel", difference, tolerance)
    difference = float(torch.where(real[..., None], a.at_keys - b.at_keys, 0).abs().max())
    if not difference <= tolerance:
        refuse(
            "row numbers (weights at the requested keys) from the fused kernel",
            difference,
            tolerance,
        )
