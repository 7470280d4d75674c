"""Full attention patterns of chosen heads on chosen prompts, with every row's numbers.

>>> view = attention_view(model, ["<bos> a b c a b"], heads=["L1H0", (0, 2)])
>>> view.pattern.shape            # [prompt, head, query_pos, key_pos], as the model produced it
>>> view.sink_mass[0, 0]          # [query_pos] float64, NaN at padding queries

What :func:`interv.view_attention` draws, computed here, below the report layer: one
forward through :func:`interv.engine.forward.forward` (stopped after the last layer asked
for; a hook keeps only the chosen heads' slices of each pattern), then, per query row,
the row metrics of :func:`interv.metrics.sink_split`: sink mass, entropy, normalized
entropy, content entropy and content normalized entropy. Nothing is re-derived here.

Masks, with positions counted in the padded batch and the same rule as
:func:`interv.analysis.attention_rows`: key ``j`` is available for query ``t`` at a head iff
``t`` is real and the head's layer admits ``j`` (its own mask:
:func:`interv.engine.architecture.architecture_of`: causal or bidirectional, AND padding, AND
the family's sliding window or chunk); every row is checked against it. The sink set ``S``
holds the given positions counted from each prompt's first real token, and a query uses only
the sink keys it can see. Padding queries have no available key: every metric is NaN there.
Padding keys are not candidates: they are not counted in ``n`` and carry no entropy.

Off-row sinks (gpt-oss: rows over real keys sum to less than 1) are refused before the forward
unless ``off_row_sink="as_key"``: the deficit is then one more sink key of each row in the
numbers (its mass in the sink mass and the entropy, one more in ``n``).

Memory: ``[prompt, head, query, key]`` float32, quadratic in the prompt length; a
1024-token prompt holds 4 MiB per head. :data:`MAX_CELLS` bounds a view.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch

from interv._checks import as_positions, check_index
from interv.analysis._inputs import PromptBatch, prompt_batch
from interv.engine.architecture import (
    KeyRule,
    architecture_of,
    check_admitted,
    check_off_row_sink,
    rules_text,
)
from interv.engine.forward import Prompts, forward
from interv.engine.sites import (
    Site,
    check_head,
    check_prompt_positions,
    head_label,
    kv_head_of,
    n_key_value_heads,
)
from interv.errors import IntervError
from interv.metrics import sink_split
from interv.provenance import Provenance
from interv.tasks.tokenized import TokenizedPairs, prompts_fingerprint

if TYPE_CHECKING:
    from transformer_lens.model_bridge import TransformerBridge

__all__ = [
    "MAX_CELLS",
    "MAX_HEADS_BY_DEFAULT",
    "ROW_METRICS",
    "AttentionView",
    "attention_view",
    "parse_heads",
]

ROW_METRICS: dict[str, str] = {
    "sink_mass": "fraction of the row's mass",
    "entropy": "nats",
    "normalized_entropy": "fraction of log(n)",
    "content_entropy": "nats",
    "content_normalized_entropy": "fraction of log(n - |S|)",
}
"""Per-row numbers of an :class:`AttentionView` and their units."""

MAX_CELLS = 1 << 26
"""Largest number of pattern cells (prompts x heads x positions^2) a view holds: 64
head-prompts of 1024 tokens (256 MiB of float32)."""

MAX_HEADS_BY_DEFAULT = 16
"""``heads=None`` shows every head only for models with at most this many heads."""

_HEAD_TEXT = re.compile(r"^L(\d+)H(\d+)$")


@dataclass(frozen=True, eq=False)
class AttentionView:
    """Patterns of chosen heads on chosen prompts, with the masks and per-row numbers.

    Tensors are on the CPU. ``P`` = prompts shown, ``K`` = heads shown, ``N`` = padded
    positions (padding columns that no shown prompt needs are dropped).

    Attributes:
        pattern: ``[P, K, N, N]`` float32 attention weights (query, key) as the model
            produced them; rows of padding queries are whatever the model computed there.
        key_mask: ``[P, K, N, N]`` bool, True = key ``j`` is available to query ``t`` at
            the head's layer.
        real: ``[P, N]`` bool, True at real tokens (False = padding).
        sink_mask: ``[P, N]`` bool, True at the sink keys of each prompt.
        token_ids: ``[P, N]`` int64.
        tokens: per prompt, the text of every position (padding included).
        n_available: ``[P, K, N]`` int64 number of available keys ``n`` of each query row
            (0 for a padding query; the off-row sink key counted with ``"as_key"``).
        sink_mass, entropy, normalized_entropy, content_entropy,
            content_normalized_entropy: ``[P, K, N]`` float64 row metrics in the units
            of :data:`ROW_METRICS` (entropies in nats), NaN where undefined (padding
            queries; ``n <= 1`` for normalized entropy; no content mass or
            ``n - |S| <= 1`` for the content numbers).
        heads: ``(layer, head)`` of each head shown.
        kv_heads: the key/value head each query head reads (grouped-query attention:
            query head ``h`` reads ``h // (n_heads // n_key_value_heads)``).
        n_heads: query heads per layer; n_key_value_heads: key/value heads per layer;
            n_layers: layers of the model.
        prompt_indices: the position of each shown prompt in the input batch.
        prompt_lengths: real tokens per shown prompt.
        model_name: ``model.cfg.model_name``; n_ctx: the model's context in tokens.
        causal: whether the causal mask applies (False for bidirectional encoders).
        sink_positions: the sink set, counted from each prompt's first real token.
        task_name, n_task_prompts, task_positions, answer_positions, padding_side: the
            task (:class:`~interv.TokenizedPairs`) the prompts are the clean prompts
            of, for joining effects; None when the prompts were strings or tokens.
        provenance: the model (name, weights, dtype) and the whole batch's prompts (a
            task's pairs too) the shown prompts come from
            (:class:`~interv.provenance.Provenance`): what effects shown beside it must share.
        unit: the entropy unit, ``"nats"``.
        key_rules: the :class:`~interv.engine.architecture.KeyRule` of each shown head's
            layer.
        off_row_sink: None, or ``"as_key"`` when an off-row sink's deficit is counted as a
            sink key in the numbers.
    """

    pattern: torch.Tensor
    key_mask: torch.Tensor
    real: torch.Tensor
    sink_mask: torch.Tensor
    token_ids: torch.Tensor
    tokens: tuple[tuple[str, ...], ...]
    n_available: torch.Tensor
    sink_mass: torch.Tensor
    entropy: torch.Tensor
    normalized_entropy: torch.Tensor
    content_entropy: torch.Tensor
    content_normalized_entropy: torch.Tensor
    heads: tuple[tuple[int, int], ...]
    kv_heads: tuple[int, ...]
    n_heads: int
    n_key_value_heads: int
    n_layers: int
    prompt_indices: tuple[int, ...]
    prompt_lengths: tuple[int, ...]
    model_name: str
    n_ctx: int
    causal: bool
    sink_positions: tuple[int, ...]
    provenance: Provenance
    task_name: str | None = None
    n_task_prompts: int | None = None
    task_positions: int | None = None
    answer_positions: tuple[int, ...] | None = None
    padding_side: str | None = None
    unit: str = "nats"
    key_rules: tuple[KeyRule, ...] = ()
    off_row_sink: str | None = None

    @property
    def n_prompts(self) -> int:
        """Prompts shown."""
        return int(self.pattern.shape[0])

    @property
    def n_positions(self) -> int:
        """Padded positions ``N``."""
        return int(self.pattern.shape[-1])

    @property
    def head_labels(self) -> tuple[str, ...]:
        """``"L{layer}H{head}"`` of each head shown."""
        return tuple(head_label(layer, head) for layer, head in self.heads)

    @property
    def group_size(self) -> int:
        """Query heads per key/value head (1 without grouped-query attention)."""
        return self.n_heads // self.n_key_value_heads

    def kv_label(self, index: int) -> str:
        """The key/value group of shown head ``index`` in words, e.g. ``"kv head 1 of 3,
        shared by L17H3, L17H4, L17H5"`` (``"own key/value head"`` without GQA)."""
        layer, _ = self.heads[index]
        kv = self.kv_heads[index]
        if self.group_size == 1:
            return f"own key/value head (kv head {kv} of {self.n_key_value_heads})"
        members = range(kv * self.group_size, (kv + 1) * self.group_size)
        shared = ", ".join(head_label(layer, h) for h in members)
        return f"kv head {kv} of {self.n_key_value_heads}, shared by {shared}"

    def metric(self, name: str) -> torch.Tensor:
        """The ``[P, K, N]`` row metric ``name`` (one of :data:`ROW_METRICS`)."""
        if name not in ROW_METRICS:
            raise IntervError(f"unknown row metric {name!r}; choose one of {tuple(ROW_METRICS)}")
        return getattr(self, name)

    @property
    def mask_rule(self) -> str:
        """The key mask in words (per group of shown heads' layers sharing a rule)."""
        layers = sorted({layer for layer, _ in self.heads})
        rule_of = dict(zip((layer for layer, _ in self.heads), self.key_rules, strict=True))
        words = rules_text(layers, [rule_of[layer] for layer in layers])
        if self.off_row_sink == "as_key":
            words += "; off-row sink counted as an extra sink key"
        return words

    @property
    def source(self) -> str:
        """Where the prompts come from, in words."""
        if self.task_name is None:
            return f"{self.n_prompts} prompt{'s' if self.n_prompts != 1 else ''}"
        return (
            f"{self.n_prompts} of the {self.n_task_prompts} clean prompts of task "
            f"{self.task_name!r}"
        )

    @property
    def scope(self) -> str:
        """One line naming model, prompts, lengths, heads, sink, mask rule and unit."""
        lengths = sorted(self.prompt_lengths)
        return (
            f"model {self.model_name}; {self.source} of {lengths[0]}..{lengths[-1]} tokens; "
            f"{len(self.heads)} heads; every query row; sink positions "
            f"{list(self.sink_positions)} from each prompt's first real token; mask: "
            f"{self.mask_rule}; entropy unit {self.unit}"
        )


def parse_heads(heads: Any, cfg: Any) -> tuple[tuple[int, int], ...]:
    """Heads as ``(layer, head)`` pairs, checked against the model's config.

    Args:
        heads: None (every head, for models with at most :data:`MAX_HEADS_BY_DEFAULT`
            heads), a layer index (every head of that layer), or a sequence of
            ``(layer, head)`` pairs and ``"L1H3"`` labels.
        cfg: the model's config (``model.cfg``).

    Raises:
        IntervError: a head or layer out of range (naming the valid range), a malformed
            entry, a repeated head, or None for a model with many heads.
    """
    n_layers, n_heads = int(cfg.n_layers), int(cfg.n_heads)
    if heads is None:
        if n_layers * n_heads > MAX_HEADS_BY_DEFAULT:
            raise IntervError(
                f"heads=None shows every head only for models with at most "
                f"{MAX_HEADS_BY_DEFAULT} heads; {cfg.model_name} has {n_layers * n_heads} "
                f"({n_layers} layers x {n_heads} heads): choose heads, e.g. heads=[(17, 4), "
                f"'L20H1'] or heads=17 (every head of layer 17; layers 0..{n_layers - 1})"
            )
        return tuple((layer, head) for layer in range(n_layers) for head in range(n_heads))
    if isinstance(heads, int) and not isinstance(heads, bool):
        check_index(heads, n_layers, "layer", f"the model has {n_layers} layers")
        return tuple((heads, head) for head in range(n_heads))
    if isinstance(heads, str) or not isinstance(heads, Sequence) or not heads:
        raise IntervError(
            "heads must be a layer index or a non-empty sequence of (layer, head) pairs or "
            f"'L1H3' labels; got {heads!r}"
        )
    parsed = []
    for entry in heads:
        if isinstance(entry, str):
            match = _HEAD_TEXT.match(entry.strip())
            if match is None:
                raise IntervError(
                    f"a head is written 'L1H3' or (1, 3) (layer, head); got {entry!r} in heads"
                )
            pair = (int(match.group(1)), int(match.group(2)))
        elif isinstance(entry, Sequence) and len(entry) == 2:
            pair = (entry[0], entry[1])
        else:
            raise IntervError(
                f"a head is written 'L1H3' or (1, 3) (layer, head); got {entry!r} in heads"
            )
        check_head(cfg, *pair)
        parsed.append((int(pair[0]), int(pair[1])))
    if len(set(parsed)) != len(parsed):
        repeated = next(p for p in parsed if parsed.count(p) > 1)
        raise IntervError(f"heads must not repeat a head; got {head_label(*repeated)} twice")
    return tuple(parsed)


def _chosen_prompts(batch: PromptBatch, prompt_indices: Any) -> tuple[int, ...]:
    n = int(batch.tokens.shape[0])
    if prompt_indices is None:
        return tuple(range(n))
    indices = as_positions(prompt_indices, "prompt_indices", allow_empty=False)
    for index in indices:
        check_index(index, n, "prompt", f"there are {n} prompts")
    return indices


def _check_context(batch: PromptBatch, chosen: tuple[int, ...], n_ctx: int, name: str) -> None:
    for index in chosen:
        length = int(batch.lengths[index])
        if length > n_ctx:
            raise IntervError(
                f"prompt {index} has {length} tokens; model {name} takes at most n_ctx={n_ctx} "
                f"tokens: shorten it (every prompt must have 1..{n_ctx} tokens)"
            )


def _trimmed(batch: PromptBatch, chosen: tuple[int, ...]) -> tuple[torch.Tensor, torch.Tensor]:
    """Tokens and mask of the chosen prompts without the columns that are padding in all."""
    rows = list(chosen)
    tokens, real = batch.tokens[rows], batch.real[rows]
    used = real.any(dim=0).nonzero()[:, 0]
    columns = slice(int(used[0]), int(used[-1]) + 1)
    return tokens[:, columns], real[:, columns]


def _masks(
    real: torch.Tensor, rules: Sequence[KeyRule], sink_positions: tuple[int, ...]
) -> tuple[torch.Tensor, torch.Tensor]:
    """``key_mask [P, K, N, N]`` (one rule per shown head) and ``sink_mask [P, N]``: the
    rule of the module docstring (that of :func:`interv.analysis._patterns.rows_from_pattern`)."""
    n = real.shape[1]
    masks = {rule: rule.admitted(real) & real[:, :, None] for rule in set(rules)}
    key_mask = torch.stack([masks[rule] for rule in rules], dim=1)
    first_real = real.to(torch.int64).argmax(dim=1)
    relative = torch.arange(n)[None, :] - first_real[:, None]
    sink_mask = torch.zeros_like(real)
    for position in sink_positions:
        sink_mask |= (relative == position) & real
    return key_mask, sink_mask


def attention_view(
    model: TransformerBridge,
    prompts_or_tokens: str | Sequence[str] | torch.Tensor | TokenizedPairs,
    *,
    heads: Any = None,
    attention_mask: torch.Tensor | None = None,
    prompt_indices: Sequence[int] | None = None,
    sink: int | Sequence[int] = 0,
    off_row_sink: str | None = None,
) -> AttentionView:
    """Run ``model`` once and keep the chosen heads' patterns with every row's numbers.

    Args:
        model: a transformer-lens ``TransformerBridge``.
        prompts_or_tokens: a string or list of strings (``model.to_tokens``, BOS
            prepended, right-padded), a ``[batch, pos]`` int token tensor, or a
            :class:`~interv.TokenizedPairs` (its clean prompts and mask).
        heads: see :func:`parse_heads`.
        attention_mask: ``[batch, pos]`` bool for a padded token tensor.
        prompt_indices: the prompts of the batch to show (default: all).
        sink: sink position(s), counted from each prompt's first real token.
        off_row_sink: None (default) refuses a model whose rows sum to less than 1 (an
            off-row learned sink, gpt-oss); ``"as_key"`` counts the deficit as one more
            sink key in the numbers.

    Returns:
        An :class:`AttentionView`.

    Raises:
        IntervError: before the forward, for heads or prompts out of range, a prompt
            longer than the model's context, or a view larger than :data:`MAX_CELLS`.
    """
    cfg = model.cfg
    name = str(getattr(cfg, "model_name", "unknown"))
    arch = architecture_of(model)
    check_off_row_sink(arch, off_row_sink)
    chosen_heads = parse_heads(heads, cfg)
    for layer, _ in chosen_heads:
        arch.layer(layer)  # a layer without attention rows is refused in one line
    sink_positions = as_positions(
        sink, "sink", allow_empty=False, meaning="counted from each prompt's first real token"
    )
    batch = prompt_batch(model, prompts_or_tokens, attention_mask)
    chosen = _chosen_prompts(batch, prompt_indices)
    n_ctx = int(cfg.n_ctx)
    _check_context(batch, chosen, n_ctx, name)
    tokens, real = _trimmed(batch, chosen)
    check_prompt_positions(sink_positions, real, "sink position", from_first_real=True)
    n_positions = int(tokens.shape[1])
    cells = len(chosen) * len(chosen_heads) * n_positions**2
    if cells > MAX_CELLS:
        raise IntervError(
            f"{len(chosen)} prompts x {len(chosen_heads)} heads x {n_positions}^2 positions is "
            f"{cells:,} pattern cells; a view holds at most {MAX_CELLS:,}: choose fewer heads "
            "or prompts (prompt_indices=...)"
        )
    rules = tuple(arch.key_rule(layer) for layer, _ in chosen_heads)
    pattern = _patterns(model, tokens, real, chosen_heads)
    key_mask, sink_mask = _masks(real, rules, sink_positions)
    at_real = real[:, None, :, None]
    for k, (layer, _) in enumerate(chosen_heads):
        check_admitted(torch.where(at_real, pattern[:, k : k + 1], 0), key_mask[:, k], layer=layer)
    deficit = tuple(
        off_row_sink == "as_key" and arch.layer(layer).off_row_sink for layer, _ in chosen_heads
    )
    metrics = _row_metrics(pattern, key_mask, sink_mask, deficit)
    task = prompts_or_tokens if isinstance(prompts_or_tokens, TokenizedPairs) else None
    return AttentionView(
        pattern=pattern,
        key_mask=key_mask,
        real=real,
        sink_mask=sink_mask,
        token_ids=tokens,
        tokens=tuple(_token_texts(model, row) for row in tokens),
        n_available=key_mask.sum(dim=-1) + torch.tensor(deficit)[None, :, None] * real[:, None],
        **metrics,
        heads=chosen_heads,
        kv_heads=tuple(kv_head_of(cfg, head) for _, head in chosen_heads),
        n_heads=int(cfg.n_heads),
        n_key_value_heads=n_key_value_heads(cfg),
        n_layers=int(cfg.n_layers),
        prompt_indices=chosen,
        prompt_lengths=tuple(int(batch.lengths[i]) for i in chosen),
        model_name=name,
        n_ctx=n_ctx,
        causal=not arch.encoder,
        sink_positions=sink_positions,
        provenance=Provenance.of(model, task)
        if task is not None
        else Provenance.of(
            model,
            prompts=prompts_fingerprint(batch.tokens, batch.real),
            n_prompts=int(batch.tokens.shape[0]),
        ),
        task_name=None if task is None else task.name,
        n_task_prompts=None if task is None else task.n_pairs,
        task_positions=None if task is None else task.n_positions,
        answer_positions=None
        if task is None
        else tuple(int(p) for p in task.answer_positions.tolist()),
        padding_side=None if task is None else task.padding_side,
        key_rules=rules,
        off_row_sink=off_row_sink if any(deficit) else None,
    )


def _patterns(
    model: Any, tokens: torch.Tensor, real: torch.Tensor, heads: tuple[tuple[int, int], ...]
) -> torch.Tensor:
    """``[P, K, N, N]`` float32 patterns of ``heads``: each layer's hook keeps its heads'
    slices only (the rest of the layer's pattern is freed by the model)."""
    by_layer: dict[int, list[int]] = {}
    for layer, head in heads:
        by_layer.setdefault(layer, []).append(head)
    kept: dict[tuple[int, int], torch.Tensor] = {}

    def keeper(layer: int) -> Any:
        def hook(pattern: torch.Tensor, hook: Any) -> None:
            for head in by_layer[layer]:
                kept[(layer, head)] = pattern[:, head].detach().to(torch.float32).cpu()

        return hook

    forward(
        model,
        Prompts(tokens, real),
        hooks=[(Site("pattern", layer), keeper(layer)) for layer in by_layer],
        readout=None,
        stop_after=Site("pattern", max(by_layer)),
    )
    return torch.stack([kept[pair] for pair in heads], dim=1)


def _row_metrics(
    pattern: torch.Tensor,
    key_mask: torch.Tensor,
    sink_mask: torch.Tensor,
    deficit: tuple[bool, ...],
) -> dict[str, torch.Tensor]:
    """The :data:`ROW_METRICS` of every row, one (prompt, head) at a time (float64 memory
    stays a few copies of one ``[N, N]`` pattern); ``deficit[k]``: head ``k``'s rows may sum
    to less than 1, the rest counted as one more sink key."""
    n_prompts, n_heads, n_positions, _ = pattern.shape
    out = {
        name: torch.full((n_prompts, n_heads, n_positions), torch.nan, dtype=torch.float64)
        for name in ROW_METRICS
    }
    for p in range(n_prompts):
        for k in range(n_heads):
            mask = key_mask[p, k]
            sink = sink_mask[p][None, :] & mask  # a query uses only the sink keys it can see
            split = sink_split(pattern[p, k], sink=sink, key_mask=mask, allow_deficit=deficit[k])
            for name in ROW_METRICS:
                out[name][p, k] = getattr(split, name)
    return out


def _token_texts(model: Any, row: torch.Tensor) -> tuple[str, ...]:
    """The text of every token of ``row`` (one decode per token)."""
    tokenizer = getattr(model, "tokenizer", None)
    if tokenizer is None:
        return tuple(str(int(t)) for t in row)
    return tuple(tokenizer.decode([int(t)]) for t in row)
