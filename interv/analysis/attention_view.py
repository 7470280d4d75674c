"""Attention rows of chosen heads on chosen prompts, with every row's numbers.

>>> view = attention_view(model, ["<bos> a b c a b"], heads=["L1H0", (0, 2)])
>>> view.pattern.shape            # [prompt, head, query_row, key_pos], as the model produced it
>>> view.query_positions          # the position of each query row: (0, 1, ..., 5)
>>> view.sink_mass[0, 0]          # [query_row] float64, NaN at padding queries
>>> long = attention_view(model, long_tokens, heads=["L1H0"])   # 8,192 tokens
>>> long.rows_text                # "every 32nd query row of 8,192 (256 rows) plus the last ..."

**Query rows.** A view keeps the rows of chosen query positions (:attr:`AttentionView.
query_positions`, positions of the view's columns): every row for prompts up to
:data:`ALL_ROWS_UP_TO` positions, above that by default a stated subsample (every
``ceil(N / DEFAULT_ROWS)``-th position from 0, plus each shown prompt's last real position),
or the positions given (``query_positions=``; ``"all"``: every row). A row of a subsampled
view equals the full view's row at that position (the same weights, the same numbers).
Every consumer indexes rows through :attr:`AttentionView.query_positions`; one that needs the
whole square refuses a subsampled view in one line (:meth:`AttentionView.require_square`).

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

**Attention path.** ``attention="auto"`` (default) computes the rows without the pattern from
:data:`~interv.engine.rows.LONG_CONTEXT` positions on where the family allows it
(:mod:`interv.engine.rows`: rows recomputed from the queries and keys, chunk by chunk, only the
kept rows stored), with the model's own pattern otherwise (each layer's pattern, of which only
the kept rows are stored); ``"rows"`` and ``"pattern"`` force one (named in the scope).

Memory: ``[prompt, head, query_row, key]`` float32, rows x keys per head-prompt; a full
1024-token prompt holds 4 MiB per head, 256 rows of an 8,192-token prompt 8 MiB.
:data:`MAX_CELLS` bounds a view (cells = prompts x heads x rows x keys).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import pairwise
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
from interv.engine.forward import AttentionPath, Prompts, choose_attention, forward
from interv.engine.rows import RowChunk, RowRequest
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
    "ALL_ROWS_UP_TO",
    "DEFAULT_ROWS",
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
"""Largest number of pattern cells (prompts x heads x query rows x key positions) a view
holds: 64 full head-prompts of 1024 tokens, or 32 of 256 rows of 8,192 tokens (256 MiB of
float32)."""

ALL_ROWS_UP_TO = 1024
"""Prompts (padded positions ``N``) up to this length show every query row by default;
longer ones a subsample of at most :data:`DEFAULT_ROWS` evenly spaced rows plus each
prompt's last real position."""

DEFAULT_ROWS = 256
"""Evenly spaced query rows of a long view by default (every ``ceil(N / DEFAULT_ROWS)``-th
position from 0)."""

MAX_HEADS_BY_DEFAULT = 16
"""``heads=None`` shows every head only for models with at most this many heads."""

_HEAD_TEXT = re.compile(r"^L(\d+)H(\d+)$")


@dataclass(frozen=True, eq=False)
class AttentionView:
    """Patterns of chosen heads on chosen prompts, with the masks and per-row numbers.

    Tensors are on the CPU. ``P`` = prompts shown, ``K`` = heads shown, ``N`` = padded
    positions (padding columns that no shown prompt needs are dropped), ``R`` = query rows
    kept (``N`` for a full view): row ``r`` is query position ``query_positions[r]``.

    Attributes:
        pattern: ``[P, K, R, N]`` float32 attention weights (query row, key) as the model
            produced them; rows of padding queries are whatever the model computed there
            (all zero where they were computed without the pattern).
        key_mask: ``[P, K, R, N]`` bool, True = key ``j`` is available to the row's query
            at the head's layer.
        real: ``[P, N]`` bool, True at real tokens (False = padding).
        sink_mask: ``[P, N]`` bool, True at the sink keys of each prompt.
        token_ids: ``[P, N]`` int64.
        tokens: per prompt, the text of every position (padding included).
        n_available: ``[P, K, R]`` int64 number of available keys ``n`` of each query row
            (0 for a padding query; the off-row sink key counted with ``"as_key"``).
        sink_mass, entropy, normalized_entropy, content_entropy,
            content_normalized_entropy: ``[P, K, R]`` float64 row metrics in the units
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
        query_positions: the query position (a column of the view) of each row, increasing.
        rows_text: which rows the view keeps, in words (in :attr:`scope`), e.g. ``"every
            query row"`` or ``"every 32nd query row of 8,192 (256 rows) plus the last real
            position"``.
        attention: how the rows were computed: ``"pattern"`` (the model's own attention) or
            ``"rows"`` (recomputed from queries and keys without the pattern).
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
    query_positions: tuple[int, ...]
    rows_text: str
    attention: str
    task_name: str | None = None
    n_task_prompts: int | None = None
    task_positions: int | None = None
    answer_positions: tuple[int, ...] | None = None
    padding_side: str | None = None
    unit: str = "nats"
    key_rules: tuple[KeyRule, ...] = ()
    off_row_sink: str | None = None

    def __post_init__(self) -> None:
        n = int(self.pattern.shape[-1])
        positions = self.query_positions
        if (
            not positions
            or any(b <= a for a, b in pairwise(positions))
            or positions[0] < 0
            or positions[-1] >= n
            or self.pattern.shape[2] != len(positions)
            or self.key_mask.shape != self.pattern.shape
        ):
            raise IntervError(
                f"an AttentionView's query_positions must be increasing positions of its {n} "
                f"columns, one per row of its pattern of shape {tuple(self.pattern.shape)}; "
                f"got {len(positions)} positions"
            )
        if self.attention not in ("pattern", "rows"):
            raise IntervError(
                f"an AttentionView's attention is 'pattern' or 'rows'; got {self.attention!r}"
            )

    @property
    def n_prompts(self) -> int:
        """Prompts shown."""
        return int(self.pattern.shape[0])

    @property
    def n_positions(self) -> int:
        """Padded positions ``N``."""
        return int(self.pattern.shape[-1])

    @property
    def n_rows(self) -> int:
        """Query rows kept ``R`` (``N`` for a full view)."""
        return len(self.query_positions)

    @property
    def subsampled(self) -> bool:
        """Whether the view keeps only some query rows (not the full ``N x N`` square)."""
        return self.n_rows != self.n_positions

    def row_of(self, position: int) -> int:
        """The row index of query position ``position`` (a column of the view).

        Raises:
            IntervError: the view keeps no row at that position (naming the kept ones).
        """
        try:
            return self.query_positions.index(position)
        except ValueError:
            raise IntervError(
                f"the view keeps no query row at position {position!r}; it keeps "
                f"{self.rows_text} (view.query_positions)"
            ) from None

    def require_square(self, what: str) -> None:
        """Refuse a subsampled view where ``what`` needs every query row, in one line."""
        if self.subsampled:
            raise IntervError(
                f"{what} needs every query row; this view keeps {self.rows_text}: build the "
                "view with query_positions='all' (bounded by MAX_CELLS), or read the kept rows "
                "in Python (view.pattern[p, k, r] is query position view.query_positions[r])"
            )

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
        """The ``[P, K, R]`` row metric ``name`` (one of :data:`ROW_METRICS`)."""
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
            f"{len(self.heads)} heads; {self.rows_text}; rows computed "
            f"{'from the pattern' if self.attention == 'pattern' else 'without the pattern'}; "
            "sink positions "
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


def _query_rows(query_positions: Any, real: torch.Tensor) -> tuple[tuple[int, ...], str]:
    """The kept query positions (columns of the view) and their description (module
    docstring: every row, the default subsample, or the positions given)."""
    n = int(real.shape[1])
    every = isinstance(query_positions, str) and query_positions == "all"
    if every or (query_positions is None and n <= ALL_ROWS_UP_TO):
        return tuple(range(n)), "every query row"
    if query_positions is None:
        step = -(-n // DEFAULT_ROWS)
        spaced = set(range(0, n, step))
        last = {int(row.nonzero()[-1, 0]) for row in real}
        extra = len(last - spaced)
        if step == 1:
            return tuple(range(n)), "every query row"
        text = (
            f"every {_ordinal(step)} query row of {n:,} ({len(spaced)} rows) plus the last "
            f"real position of each prompt ({extra} more)"
        )
        return tuple(sorted(spaced | last)), text
    if isinstance(query_positions, str):
        raise IntervError(
            f"query_positions must be None (every row up to {ALL_ROWS_UP_TO} positions, a "
            "subsample above), 'all', or a sequence of positions; got "
            f"{query_positions!r}"
        )
    given = as_positions(query_positions, "query_positions", allow_empty=False)
    for position in given:
        check_index(position, n, "query position", f"the view has {n} positions")
    chosen = tuple(sorted(given))
    if chosen == tuple(range(n)):
        return chosen, "every query row"
    shown = ", ".join(str(p) for p in chosen[:8]) + (", ..." if len(chosen) > 8 else "")
    return chosen, f"{len(chosen)} chosen query rows of {n:,} (positions {shown})"


def _ordinal(n: int) -> str:
    suffix = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"


def _masks(
    real: torch.Tensor,
    rules: Sequence[KeyRule],
    sink_positions: tuple[int, ...],
    rows: torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor]:
    """``key_mask [P, K, R, N]`` (one rule per shown head, the rows of the query positions
    ``rows``) and ``sink_mask [P, N]``: the rule of the module docstring (that of
    :func:`interv.analysis._patterns.rows_from_pattern`)."""
    n = real.shape[1]
    masks = {rule: rule.admitted(real, rows) & real[:, rows, None] for rule in set(rules)}
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
    query_positions: Sequence[int] | str | None = None,
    attention: str = "auto",
) -> AttentionView:
    """Run ``model`` once and keep the chosen heads' rows with every row's numbers.

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
        query_positions: the query rows to keep, as positions of the view's columns (the
            batch's padded positions less the leading columns that are padding in every
            shown prompt; for strings and right-padded batches the batch's own): None
            (default) every row up to :data:`ALL_ROWS_UP_TO` positions, above that every
            ``ceil(N / DEFAULT_ROWS)``-th position from 0 plus each prompt's last real
            position; ``"all"``; or a sequence of positions.
        attention: ``"auto"`` (default: without the pattern from
            :data:`~interv.engine.rows.LONG_CONTEXT` positions on where the family allows),
            ``"rows"`` (without the pattern; refused in one line where interv cannot) or
            ``"pattern"`` (the model's own attention).

    Returns:
        An :class:`AttentionView`.

    Raises:
        IntervError: before the forward, for heads, prompts or query positions out of
            range, a prompt longer than the model's context, or a view larger than
            :data:`MAX_CELLS`.
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
    positions, rows_text = _query_rows(query_positions, real)
    cells = len(chosen) * len(chosen_heads) * len(positions) * n_positions
    if cells > MAX_CELLS:
        raise IntervError(
            f"{len(chosen)} prompts x {len(chosen_heads)} heads x {len(positions)} query rows x "
            f"{n_positions} keys is {cells:,} pattern cells; a view holds at most "
            f"{MAX_CELLS:,}: choose fewer heads, prompts (prompt_indices=...) or query rows "
            "(query_positions=...)"
        )
    rules = tuple(arch.key_rule(layer) for layer, _ in chosen_heads)
    rows = torch.tensor(positions, dtype=torch.int64)
    prompts = Prompts(tokens, real)
    mode = choose_attention(model, prompts, attention)
    keep = _rows_without_pattern if mode == "rows" else _patterns
    pattern = keep(model, prompts, chosen_heads, rows)
    key_mask, sink_mask = _masks(real, rules, sink_positions, rows)
    at_real = real[:, rows][:, None, :, None]
    for k, (layer, _) in enumerate(chosen_heads):
        check_admitted(
            torch.where(at_real, pattern[:, k : k + 1], 0),
            key_mask[:, k],
            layer=layer,
            queries=rows[None, :],
        )
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
        n_available=key_mask.sum(dim=-1)
        + torch.tensor(deficit)[None, :, None] * real[:, rows][:, None],
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
        query_positions=positions,
        rows_text=rows_text,
        attention=mode,
        key_rules=rules,
        off_row_sink=off_row_sink if any(deficit) else None,
    )


_Heads = tuple[tuple[int, int], ...]


def _by_layer(heads: _Heads) -> dict[int, list[int]]:
    by_layer: dict[int, list[int]] = {}
    for layer, head in heads:
        by_layer.setdefault(layer, []).append(head)
    return by_layer


def _patterns(model: Any, prompts: Prompts, heads: _Heads, rows: torch.Tensor) -> torch.Tensor:
    """``[P, K, R, N]`` float32 rows ``rows`` of the patterns of ``heads``, from the model's
    own attention: each layer's hook keeps its heads' rows only (the rest of the layer's
    pattern is freed by the model)."""
    by_layer = _by_layer(heads)
    kept: dict[tuple[int, int], torch.Tensor] = {}

    def keeper(layer: int) -> Any:
        def hook(pattern: torch.Tensor, hook: Any) -> None:
            index = rows.to(pattern.device)
            for head in by_layer[layer]:
                kept[(layer, head)] = pattern[:, head, index].detach().to(torch.float32).cpu()

        return hook

    forward(
        model,
        prompts,
        hooks=[(Site("pattern", layer), keeper(layer)) for layer in by_layer],
        readout=None,
        stop_after=Site("pattern", max(by_layer)),
        attention=AttentionPath("pattern"),
    )
    return torch.stack([kept[pair] for pair in heads], dim=1)


def _rows_without_pattern(
    model: Any, prompts: Prompts, heads: _Heads, rows: torch.Tensor
) -> torch.Tensor:
    """``[P, K, R, N]`` float32 rows ``rows`` of ``heads``, recomputed from the queries and
    keys chunk by chunk (:class:`~interv.engine.rows.RowChunk`) without the pattern: each
    chunk's rows at ``rows`` are copied out, the rest dropped (0 outside the chunk's keys,
    which the layer excludes)."""
    by_layer = _by_layer(heads)
    slot = {pair: k for k, pair in enumerate(heads)}
    out = torch.zeros(prompts.n, len(heads), len(rows), prompts.tokens.shape[1])

    def keep(chunk: RowChunk) -> None:
        (start, stop), (low, high) = chunk.queries, chunk.keys
        inside = ((rows >= start) & (rows < stop)).nonzero()[:, 0]
        if not len(inside):
            return
        local = (rows[inside] - start).to(chunk.weights.device)
        for head in by_layer[chunk.layer]:
            weights = chunk.weights[:, head, local].detach().to(torch.float32).cpu()
            out[:, slot[(chunk.layer, head)], inside, low:high] = weights

    forward(
        model,
        prompts,
        readout=None,
        stop_after=Site("z", max(by_layer)),
        attention=AttentionPath("rows", RowRequest(on_chunk=keep, layers=frozenset(by_layer))),
    )
    return out


def _row_metrics(
    pattern: torch.Tensor,
    key_mask: torch.Tensor,
    sink_mask: torch.Tensor,
    deficit: tuple[bool, ...],
) -> dict[str, torch.Tensor]:
    """The :data:`ROW_METRICS` of every row, one (prompt, head) at a time (float64 memory
    stays a few copies of one ``[R, N]`` pattern); ``deficit[k]``: head ``k``'s rows may sum
    to less than 1, the rest counted as one more sink key."""
    n_prompts, n_heads, n_rows, _ = pattern.shape
    out = {
        name: torch.full((n_prompts, n_heads, n_rows), torch.nan, dtype=torch.float64)
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
