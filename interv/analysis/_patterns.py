"""Full attention rows of every head of a model for a small prompt set, with their masks.

Internal module, no stability promise (its two public names are re-exported). The
sink-aware analyses (head similarity, head clustering, entropy-change attribution)
compare whole rows of different heads, so, unlike :func:`interv.analysis.concentration`,
they need the full patterns: ``[batch, layer, head_index, query_pos, key_pos]``, which is
quadratic in the context length. Keep prompt sets small (tens of prompts of tens of
tokens).

Masks, with positions counted from each prompt's first real token:

- key ``j`` is available for query ``t`` at a layer iff ``t`` is a real token and the layer's
  own mask admits ``j`` (:func:`interv.engine.architecture.architecture_of`: causal or
  bidirectional, AND padding, AND the family's sliding window or chunk); every row is
  checked against it (mass on an excluded key is refused, naming layer, head and key);
- the sink set ``S`` holds the given positions (default 0: BOS or [CLS]);
- **query rule**: a query row is *included* iff it is real and has at least two available
  content keys (``n - |S| >= 2``). Rows with fewer content keys have no drop-sink
  comparison worth making (one content key gives the same content row for every head),
  so they are excluded under *both* conventions and from the entropy attribution, so
  that every comparison is like for like.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch

from interv._checks import as_positions
from interv.analysis._inputs import prompt_batch
from interv.engine.architecture import (
    KeyRule,
    architecture_of,
    check_admitted,
    check_off_row_sink,
    rules_text,
)
from interv.engine.forward import Prompts, forward
from interv.engine.sites import Site, check_layer, check_prompt_positions, head_label
from interv.errors import IntervError
from interv.provenance import Provenance
from interv.tasks.tokenized import prompts_fingerprint

if TYPE_CHECKING:
    from transformer_lens.model_bridge import TransformerBridge

    from interv.tasks.tokenized import TokenizedPairs

__all__ = [
    "QUERY_RULE",
    "AttentionRows",
    "attention_rows",
    "prompt_mean_weights",
    "rows_from_pattern",
]

QUERY_RULE = "real queries with at least 2 available content keys (n - |S| >= 2)"


@dataclass(frozen=True, eq=False)
class AttentionRows:
    """Attention rows of every head for a prompt set, with the masks that define them.

    Attributes:
        pattern: ``[batch, layer, head_index, query_pos, key_pos]`` attention weights
            as the model produced them (float dtype of the model); with
            ``off_row_sink="as_key"`` one more key column at the end holds each row's
            deficit ``1 - sum(a)``.
        key_mask: ``[batch, layer, query_pos, key_pos]`` bool, True = key available at that
            layer (:attr:`key_rules`), False at padding queries.
        sink_mask: ``[batch, key_pos]`` bool, True at the sink keys of each prompt (and at
            the off-row sink key).
        included: ``[batch, query_pos]`` bool, True at the query rows kept by the query
            rule (:data:`QUERY_RULE`) at every kept layer.
        model_name: name of the model (scope).
        causal: whether the causal mask was applied (False for bidirectional encoders).
        sink_positions: the sink set, counted from each prompt's first real token.
        prompt_lengths: real tokens per prompt (scope).
        layers: the model layers held, in the order of the pattern's layer dim.
        key_rules: the :class:`~interv.engine.architecture.KeyRule` of each held layer.
        off_row_sink: None, or ``"as_key"`` when the last key column is the off-row sink.
        provenance: the model (name, weights, dtype) and the prompts
            (:class:`~interv.provenance.Provenance`); rows built from a given pattern know
            only the model name they were given.
    """

    pattern: torch.Tensor
    key_mask: torch.Tensor
    sink_mask: torch.Tensor
    included: torch.Tensor
    model_name: str
    causal: bool
    sink_positions: tuple[int, ...]
    prompt_lengths: tuple[int, ...]
    layers: tuple[int, ...]
    provenance: Provenance
    key_rules: tuple[KeyRule, ...] = ()
    off_row_sink: str | None = None

    @property
    def n_prompts(self) -> int:
        """Number of prompts (the batch size)."""
        return self.pattern.shape[0]

    @property
    def n_layers(self) -> int:
        """Number of layers."""
        return self.pattern.shape[1]

    @property
    def n_heads(self) -> int:
        """Query heads per layer."""
        return self.pattern.shape[2]

    @property
    def head_labels(self) -> tuple[str, ...]:
        """``"L{layer}H{head}"`` of every head, layer-major (the flat head order)."""
        return tuple(head_label(i, j) for i in self.layers for j in range(self.n_heads))

    @property
    def mask_rule(self) -> str:
        """The key mask in words, per group of layers sharing a rule."""
        words = rules_text(self.layers, self.key_rules)
        if self.off_row_sink == "as_key":
            words += "; off-row sink counted as an extra sink key (the last key column)"
        return words

    @property
    def shared_rule(self) -> bool:
        """Whether every held layer admits the same keys."""
        return len(set(self.key_rules)) <= 1

    @property
    def any_key_mask(self) -> torch.Tensor:
        """``[batch, query_pos, key_pos]``: keys available at some held layer (every head's
        mass lies inside it)."""
        return self.key_mask.any(dim=1)

    def flat_key_mask(self) -> torch.Tensor:
        """``[layer * head_index, batch, query_pos, key_pos]`` key mask of each head, in the
        order of :meth:`flat_heads` (an expanded view, no copy)."""
        batch, layers, heads, queries, keys = self.pattern.shape
        mask = self.key_mask.permute(1, 0, 2, 3)[:, None]  # [layer, 1, batch, query, key]
        return mask.expand(layers, heads, batch, queries, keys).reshape(
            layers * heads, batch, queries, keys
        )

    @property
    def scope(self) -> str:
        """One line naming model, prompts, lengths, query rule, sink and mask rule."""
        lengths = sorted(self.prompt_lengths)
        n_rows = int(self.included.sum())
        return (
            f"model {self.model_name}; {self.n_prompts} prompts of {lengths[0]}..{lengths[-1]} "
            f"tokens; {n_rows} query rows ({QUERY_RULE}); sink positions "
            f"{list(self.sink_positions)} from each prompt's first real token; mask: "
            f"{self.mask_rule}"
        )

    def flat_heads(self) -> torch.Tensor:
        """``[layer * head_index, batch, query_pos, key_pos]`` pattern, layer-major."""
        batch, layers, heads, queries, keys = self.pattern.shape
        return self.pattern.permute(1, 2, 0, 3, 4).reshape(layers * heads, batch, queries, keys)


def rows_from_pattern(
    pattern: torch.Tensor,
    *,
    attention_mask: torch.Tensor | None = None,
    causal: bool = True,
    sink: int | Sequence[int] = 0,
    model_name: str = "constructed rows",
    layers: Sequence[int] | None = None,
    key_rules: Sequence[KeyRule] | None = None,
    off_row_sink: str | None = None,
    provenance: Provenance | None = None,
) -> AttentionRows:
    """Wrap a ``[batch, layer, head_index, query_pos, key_pos]`` pattern with its masks.

    Args:
        pattern: attention weights; each available row sums to 1 (checked by the metrics).
        attention_mask: ``[batch, pos]`` bool, True at real tokens (one contiguous run per
            prompt); None = every token is real.
        causal: apply the causal mask (key ``j`` available for query ``t`` iff ``j <= t``);
            ignored when ``key_rules`` is given.
        sink: sink position(s), counted from each prompt's first real token.
        model_name: name used in the scope of every result.
        layers: model layer of each entry of the pattern's layer dim (default 0, 1, ...).
        key_rules: the :class:`~interv.engine.architecture.KeyRule` of each pattern layer
            (default: ``KeyRule(causal=causal)`` for every layer).
        off_row_sink: None (rows sum to 1), or ``"as_key"``: rows may sum to less than 1 and
            the deficit becomes one more key column, in the sink set.
        provenance: where the pattern came from (default: only ``model_name`` known).

    Returns:
        An :class:`AttentionRows`; raises :class:`IntervError` if no row is included or a
        row puts mass on a key its layer does not admit.
    """
    if not isinstance(pattern, torch.Tensor) or pattern.ndim != 5:
        shape = tuple(pattern.shape) if isinstance(pattern, torch.Tensor) else type(pattern)
        raise IntervError(
            f"pattern must be a tensor [batch, layer, head_index, query_pos, key_pos]; got {shape}"
        )
    batch, n_layers, _, queries, keys = pattern.shape
    layers = tuple(range(n_layers)) if layers is None else tuple(layers)
    if len(layers) != n_layers:
        raise IntervError(
            f"layers must name one model layer per pattern layer ({n_layers}); got {layers}"
        )
    rules = (KeyRule(causal=causal),) * n_layers if key_rules is None else tuple(key_rules)
    if len(rules) != n_layers or not all(isinstance(rule, KeyRule) for rule in rules):
        raise IntervError(
            f"key_rules must hold one KeyRule per pattern layer ({n_layers}); got {key_rules!r}"
        )
    if off_row_sink not in (None, "as_key"):
        raise IntervError(f"off_row_sink must be one of (None, 'as_key'); got {off_row_sink!r}")
    if queries != keys:
        raise IntervError(
            f"pattern must have as many query as key positions (self-attention); got "
            f"{queries} queries and {keys} keys"
        )
    if attention_mask is None:
        attention_mask = torch.ones(batch, keys, dtype=torch.bool)
    if attention_mask.dtype != torch.bool or attention_mask.shape != (batch, keys):
        raise IntervError(
            f"attention_mask must be a bool tensor of shape {(batch, keys)}; got "
            f"{attention_mask.dtype} of shape {tuple(attention_mask.shape)}"
        )
    sink_positions = as_positions(
        sink, "sink", allow_empty=False, meaning="counted from each prompt's first real token"
    )
    real = attention_mask
    check_prompt_positions(sink_positions, real, "sink position", from_first_real=True)
    first_real = real.to(torch.int64).argmax(dim=1)
    relative = torch.arange(keys)[None, :] - first_real[:, None]  # [batch, pos]
    masks = {rule: rule.admitted(real) & real[:, :, None] for rule in set(rules)}
    key_mask = torch.stack([masks[rule] for rule in rules], dim=1)  # [batch, layer, q, k]
    real_rows = real[:, None, :, None]
    for index, layer in enumerate(layers):
        check_admitted(
            torch.where(real_rows, pattern[:, index], 0), key_mask[:, index], layer=layer
        )
    sink_mask = torch.zeros(batch, keys, dtype=torch.bool)
    for position in sink_positions:
        sink_mask |= (relative == position) & real
    n_content = (key_mask & ~sink_mask[:, None, None, :]).sum(dim=-1)  # [batch, layer, q]
    included = real & (n_content >= 2).all(dim=1)
    if not bool(included.any()):
        raise IntervError(
            f"no query row has at least 2 available content keys (sink {list(sink_positions)}, "
            f"prompt lengths {real.sum(dim=1).tolist()}); the sink-aware analyses need prompts "
            f"of at least {len(sink_positions) + 2} tokens"
        )
    if off_row_sink == "as_key":
        deficit = (1 - torch.where(key_mask[:, :, None], pattern, 0).sum(dim=-1)).clamp(min=0)
        pattern = torch.cat([pattern, deficit[..., None].to(pattern.dtype)], dim=-1)
        key_mask = torch.cat([key_mask, real[:, None, :, None].expand(-1, n_layers, -1, 1)], -1)
        sink_mask = torch.cat([sink_mask, torch.ones(batch, 1, dtype=torch.bool)], dim=-1)
    return AttentionRows(
        pattern=pattern,
        key_mask=key_mask,
        sink_mask=sink_mask,
        included=included,
        model_name=model_name,
        causal=rules[0].causal,
        sink_positions=sink_positions,
        prompt_lengths=tuple(int(n) for n in real.sum(dim=1)),
        layers=layers,
        key_rules=rules,
        off_row_sink=off_row_sink,
        provenance=Provenance(model_name) if provenance is None else provenance,
    )


def attention_rows(
    model: TransformerBridge,
    prompts_or_tokens: str | Sequence[str] | torch.Tensor | TokenizedPairs,
    *,
    attention_mask: torch.Tensor | None = None,
    sink: int | Sequence[int] = 0,
    layers: Sequence[int] | None = None,
    off_row_sink: str | None = None,
) -> AttentionRows:
    """Run ``model`` once and keep every head's full attention pattern.

    Args:
        model: a transformer-lens ``TransformerBridge``; each layer's key mask is the one
            the model applies (:func:`~interv.engine.architecture.architecture_of`).
        prompts_or_tokens: strings (``model.to_tokens``, BOS prepended, right-padded), a
            ``[batch, pos]`` int token tensor, or a :class:`~interv.TokenizedPairs`.
        attention_mask: ``[batch, pos]`` bool for a padded token tensor.
        sink: sink position(s), counted from each prompt's first real token.
        layers: the layers to keep (default: all); pair costs grow with the square of
            the number of heads kept.
        off_row_sink: None (default) refuses a model whose rows sum to less than 1 over
            real keys (gpt-oss); ``"as_key"`` appends the deficit as an extra sink key.

    Returns:
        An :class:`AttentionRows` holding ``[batch, layer, head_index, query_pos,
        key_pos]`` patterns (memory quadratic in the context length).
    """
    arch = architecture_of(model)
    check_off_row_sink(arch, off_row_sink)
    if layers is None:
        arch.require(
            "attention_rows",
            hint="hold layers with attention rows: attention_rows(..., layers="
            f"{list(arch.attention_layers)})",
        )
    n_layers = model.cfg.n_layers
    kept = (
        tuple(range(n_layers))
        if layers is None
        else as_positions(layers, "layers", allow_empty=False)
    )
    for layer in kept:
        check_layer(model.cfg, layer)
    for layer in kept:
        arch.layer(layer)  # refuses a layer without attention rows, in one line
    sites = [Site("pattern", layer) for layer in kept]
    batch = prompt_batch(model, prompts_or_tokens, attention_mask)
    captured = forward(
        model,
        Prompts(batch.tokens, batch.real),
        capture=sites,
        readout=None,
        stop_after=Site("pattern", max(kept)),
    ).captured
    pattern = torch.stack([captured[site] for site in sites], dim=1).cpu()
    return rows_from_pattern(
        pattern,
        attention_mask=batch.real,
        sink=sink,
        model_name=str(getattr(model.cfg, "model_name", "unknown")),
        layers=kept,
        key_rules=[arch.key_rule(layer) for layer in kept],
        off_row_sink=off_row_sink if arch.off_row_sink else None,
        provenance=Provenance.of(
            model,
            prompts=prompts_fingerprint(batch.tokens, batch.real),
            n_prompts=int(batch.tokens.shape[0]),
        ),
    )


def prompt_mean_weights(used: torch.Tensor) -> torch.Tensor:
    """``[row, prompt]`` float64 weights that average the ``used`` rows of each prompt.

    Args:
        used: ``[batch, query_pos]`` bool, the rows kept; selecting ``values[used]``
            orders rows prompt by prompt, as here.

    Returns:
        ``W`` with ``W[r, p] = 1 / (rows of prompt p)`` if row ``r`` belongs to prompt
        ``p``, else 0, so ``values[used] @ W`` is each prompt's mean over its rows (0 for
        a prompt without rows: callers reject those).
    """
    prompt_of_row = torch.arange(used.shape[0])[:, None].expand_as(used)[used]
    weights = torch.nn.functional.one_hot(prompt_of_row, used.shape[0]).to(torch.float64)
    return weights / weights.sum(dim=0).clamp(min=1)
