"""How much each token's attention update draws on each key, per layer: by weight, by norm
(Kobayashi et al., EMNLP 2020), and rolled out over the layers (Abnar & Zuidema, ACL 2020).

>>> flow = token_attention(model, ["The cat sat on the mat."])
>>> flow.weights.shape            # [batch, layer, query_pos, key_pos], head-averaged weights
>>> flow.norm_shares()            # Kobayashi's norm-based weighting, as shares of each row
>>> flow.rollout()                # attention rollout (not causal), [batch, query_pos, key_pos]

For layer ``l``, query ``t`` and key ``j``, with head ``h``'s weight ``a^h_tj`` and
transformed value ``f^h(x_j) = v^h_j W_O^h`` (the value vector, bias included, through the
head's output projection; residual-stream units):

- weight-based: ``w_tj = mean_h a^h_tj`` (a fraction of the row, rows sum to 1);
- norm-based: ``n_tj = || sum_h a^h_tj f^h(x_j) ||``, the size of what key ``j``
  contributes to the layer's attention output at ``t`` (residual-stream units), and its
  share ``n_tj / sum_j' n_tj'`` of the row (Kobayashi et al.'s norm-based analysis; the
  output bias, which no key contributes, is left out);
- rollout: ``R = A~_L ... A~_1`` with ``A~_l = r I + (1 - r) w_l``
  (:func:`interv.metrics.attention_rollout`).

All three are computed from the weights and the values of one forward; none is an
intervention, so none measures what a token *does* for the output. Compare them with an
exact effect, e.g. :class:`~interv.engine.masks.KeyKnockout` of the token in every layer.
Positions are absolute (padded) positions; ``key_mask`` says which keys each query sees at
each layer: the mask the layer applies (:func:`interv.engine.architecture.architecture_of`:
causal or bidirectional, AND padding, AND the family's sliding window or chunk), checked
against every row. Rows of a model with an off-row learned sink (gpt-oss) sum to less than 1:
refused unless ``off_row_sink="as_key"`` (the deficit, which writes no value, then stays out
of the weights and norms: rows sum to less than 1). Gated heads (Qwen3-Next, Qwen3.5) write
``(sigmoid(g^h_t) * a^h . V^h) W_O^h``: there ``f^h_t(x_j) = (sigmoid(g^h_t) * v^h_j) W_O^h``
depends on the query's gate too (:mod:`interv.analysis._gates`), and the scope says so.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch

from interv.analysis._gates import gate_factors
from interv.analysis._inputs import prompt_batch
from interv.engine.architecture import (
    architecture_of,
    check_admitted,
    check_off_row_sink,
    layer_list,
)
from interv.engine.forward import AttentionPath, Prompts, choose_attention, forward
from interv.engine.rows import RowChunk, RowRequest
from interv.engine.sites import Site, kv_head_of
from interv.errors import IntervError
from interv.metrics.rollout import attention_rollout

if TYPE_CHECKING:
    from collections.abc import Sequence

    from transformer_lens.model_bridge import TransformerBridge

    from interv.tasks.tokenized import TokenizedPairs

__all__ = ["KeyShares", "TokenAttention", "key_shares", "token_attention"]

ROLLOUT_CAVEAT = (
    "attention rollout (Abnar & Zuidema 2020) multiplies head-averaged attention matrices "
    "through the layers, with the residual connection as a fixed share of attention to the "
    "token itself; it ignores values, output projections, MLPs and norms, and is a "
    "concentration-side summary of the weights, not a causal effect"
)

# Upper bound on the elements of one chunk [batch, query chunk, key, d_model] of the
# norm-based contributions (float32: 64 MiB).
_CHUNK_ELEMENTS = 1 << 24


@dataclass(frozen=True, eq=False)
class TokenAttention:
    """Weight-based and norm-based attention of every layer, for a prompt set.

    Attributes:
        weights: ``[batch, layer, query_pos, key_pos]`` float64 head-averaged attention
            weights (fraction of the row).
        norms: ``[batch, layer, query_pos, key_pos]`` float64 ``||sum_h a^h f^h(x_j)||``
            (residual-stream units).
        key_mask: ``[batch, layer, query_pos, key_pos]`` bool, True = key available to the
            query at that layer (the layer's own mask, :attr:`mask_rule`).
        real: ``[batch, pos]`` bool, True at real tokens.
        model_name: name of the model (scope).
        causal: whether the causal mask applied.
        mask_rule: the keys each layer admits, in words.
        off_row_sink: None, or ``"as_key"`` when rows with an off-row sink's deficit were
            accepted.
        gated_layers: layers whose heads gate their output: there the norms are
            ``||sum_h a^h_tj (sigmoid(g^h_t) * v^h_j) W_O^h||``, the gate included.
    """

    weights: torch.Tensor
    norms: torch.Tensor
    key_mask: torch.Tensor
    real: torch.Tensor
    model_name: str
    causal: bool
    mask_rule: str = ""
    off_row_sink: str | None = None
    gated_layers: tuple[int, ...] = ()

    @property
    def n_prompts(self) -> int:
        """Number of prompts."""
        return int(self.weights.shape[0])

    def norm_shares(self) -> torch.Tensor:
        """``[batch, layer, query, key]`` float64 norm-based weights as shares of each row
        (``n_tj / sum_j' n_tj'``, fractions; 0 in rows with no available key)."""
        total = self.norms.sum(dim=-1, keepdim=True)
        return torch.where(total > 0, self.norms / total.clamp(min=1e-300), 0.0)

    def rollout(self, residual: float = 0.5) -> torch.Tensor:
        """``[batch, query, key]`` float64 attention rollout of :attr:`weights` over every
        layer (see :data:`ROLLOUT_CAVEAT`: not a causal effect)."""
        return attention_rollout(self.weights, residual=residual, key_mask=self.key_mask)

    def shares_on(self, keys: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Each prompt's mean share, over its real query rows, of the row on ``keys``.

        Args:
            keys: ``[batch, key_pos]`` bool, the keys of interest of each prompt (e.g. its
                [CLS] and [SEP] tokens).

        Returns:
            ``(weight_share, norm_share)``, each ``[batch, layer]`` float64 fractions:
            ``sum_{j in keys} w_tj`` and ``sum_{j in keys} n_tj / sum_j n_tj``, averaged
            over the prompt's real queries.
        """
        if keys.dtype != torch.bool or keys.shape != self.real.shape:
            raise IntervError(
                f"keys must be a bool tensor of shape {tuple(self.real.shape)} [batch, key_pos]; "
                f"got {keys.dtype} of shape {tuple(keys.shape)}"
            )
        chosen = keys[:, None, None, :].to(torch.float64)
        weight = (self.weights * chosen).sum(dim=-1)  # [batch, layer, query]
        norm = (self.norm_shares() * chosen).sum(dim=-1)
        queries = (self.real[:, None] & self.key_mask.any(dim=-1)).to(torch.float64)
        count = queries.sum(dim=-1)
        return (weight * queries).sum(dim=-1) / count, (norm * queries).sum(dim=-1) / count

    @property
    def rollout_caveat(self) -> str:
        """What :meth:`rollout` is and is not, in one sentence (:data:`ROLLOUT_CAVEAT`)."""
        return ROLLOUT_CAVEAT

    @property
    def scope(self) -> str:
        """Model, prompts, mask rule and units."""
        lengths = sorted(int(n) for n in self.real.sum(dim=1))
        mask = self.mask_rule or (
            "causal AND padding" if self.causal else "bidirectional: padding only"
        )
        return (
            f"model {self.model_name}; {self.n_prompts} prompts of {lengths[0]}..{lengths[-1]} "
            f"tokens; per layer, weight = head-averaged attention weight (fraction of the "
            f"row), norm = ||sum_h a^h_tj v^h_j W_O^h|| (residual-stream units); mask: {mask}"
            + (
                f"; gated heads (layers {layer_list(self.gated_layers)}): norm = ||sum_h a^h_tj "
                "(sigmoid(g^h_t) * v^h_j) W_O^h||, each head's output gate included"
                if self.gated_layers
                else ""
            )
        )


def _transformed_values(
    model: TransformerBridge, layer: int, heads: list[int], store: dict[int, torch.Tensor]
) -> Any:
    """Hook on ``layer``'s values storing ``f^h(x_j) = v^h_j W_O^h`` ``[batch, head, key,
    d_model]`` per query head (query head ``h`` reads key/value head ``heads[h]``)."""

    def hook(values: torch.Tensor, hook: Any) -> None:
        w_out = model.blocks[layer].attn.W_O.detach()  # [head, d_head, d_model]
        per_head = values.detach()[:, :, heads]  # [batch, key, head, d_head]
        store[layer] = torch.einsum("bkhd,hdm->bhkm", per_head, w_out.to(values))

    return hook


def token_attention(
    model: TransformerBridge,
    prompts_or_tokens: str | Sequence[str] | torch.Tensor | TokenizedPairs,
    *,
    attention_mask: torch.Tensor | None = None,
    off_row_sink: str | None = None,
) -> TokenAttention:
    """Weight-based and norm-based attention of every layer, from one forward.

    Args:
        model: a transformer-lens ``TransformerBridge``.
        prompts_or_tokens: strings (BOS prepended, right-padded), a ``[batch, pos]`` int
            token tensor or a :class:`~interv.TokenizedPairs` (its clean prompts).
        attention_mask: ``[batch, pos]`` bool for a padded token tensor.
        off_row_sink: None (default) refuses a model whose rows sum to less than 1 (an
            off-row learned sink, gpt-oss); ``"as_key"`` accepts them.

    Returns:
        A :class:`TokenAttention` (memory: two ``[batch, layer, pos, pos]`` float64 arrays).
    """
    arch = architecture_of(model)
    arch.require("attention_rows", hint="token_attention needs rows at every layer")
    check_off_row_sink(arch, off_row_sink)
    batch = prompt_batch(model, prompts_or_tokens, attention_mask)
    cfg = model.cfg
    real = batch.real
    n_pos = real.shape[1]
    masks = {rule: rule.admitted(real) & real[:, :, None] for rule in set(arch.key_rules)}
    key_mask = torch.stack([masks[rule] for rule in arch.key_rules], dim=1)  # [b, l, q, k]
    heads = [kv_head_of(cfg, h) for h in range(cfg.n_heads)]
    weights: list[torch.Tensor] = []
    norms: list[torch.Tensor] = []
    transformed: dict[int, torch.Tensor] = {}
    gated = tuple(layer for layer in arch.attention_layers if arch.layer(layer).output_gate)
    gated_values: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}  # values, W_O
    gated_patterns: dict[int, torch.Tensor] = {}  # a gated layer's pattern, until its gate

    def value_hook(layer: int) -> Any:
        if layer not in gated:
            return _transformed_values(model, layer, heads, transformed)

        def hook(values: torch.Tensor, hook: Any) -> None:  # the pattern waits for the gate
            w_out = model.blocks[layer].attn.W_O.detach()  # [head, d_head, d_model]
            gated_values[layer] = (values.detach()[:, :, heads], w_out.to(values))

        return hook

    def append_norms(pattern: torch.Tensor, summed_of: Any) -> None:
        """Append ``||summed_of(chunk, start)||`` ``[batch, query, key]`` over query chunks."""
        width = pattern.shape[0] * n_pos * cfg.d_model
        step = max(1, _CHUNK_ELEMENTS // max(1, width))
        rows = []
        for start in range(0, n_pos, step):
            chunk = pattern[:, :, start : start + step]  # [batch, head, q, key]
            rows.append(summed_of(chunk, start).norm(dim=-1).to(torch.float64).cpu())
        norms.append(torch.cat(rows, dim=1))

    def pattern_hook(layer: int) -> Any:
        def hook(pattern: torch.Tensor, hook: Any) -> None:
            pattern = pattern.detach()  # [batch, head, query, key]
            at_real = real.to(pattern.device)[:, None, :, None]
            admitted = key_mask[:, layer].to(pattern.device)
            check_admitted(torch.where(at_real, pattern, 0), admitted, layer=layer)
            weights.append(pattern.to(torch.float64).mean(dim=1).cpu())
            if layer in gated:
                gated_patterns[layer] = pattern
                return
            f = transformed.pop(layer)  # [batch, head, key, d_model]
            append_norms(
                pattern, lambda chunk, start: torch.einsum("bhqk,bhkm->bqkm", chunk, f.to(chunk))
            )

        return hook

    def gate_hook(layer: int) -> Any:
        def hook(gate: torch.Tensor, hook: Any) -> None:
            per_head, w_out = gated_values.pop(layer)
            pattern = gated_patterns.pop(layer)
            gates = gate_factors(gate, cfg.n_heads)  # [batch, pos, head, d_head]

            def summed_of(chunk: torch.Tensor, start: int) -> torch.Tensor:
                g = gates[:, start : start + chunk.shape[2]].to(chunk)
                return torch.einsum(
                    "bhqk,bqhd,bkhd,hdm->bqkm", chunk, g, per_head.to(chunk), w_out.to(chunk)
                )

            append_norms(pattern, summed_of)

        return hook

    hooks = []
    for layer in range(cfg.n_layers):
        hooks += [
            (Site("v", layer), value_hook(layer)),
            (Site("pattern", layer), pattern_hook(layer)),
        ]
        if layer in gated:
            hooks.append((Site("gate", layer), gate_hook(layer)))
    last = cfg.n_layers - 1
    forward(
        model,
        Prompts(batch.tokens, real),
        hooks=hooks,
        readout=None,
        stop_after=Site("gate" if last in gated else "pattern", last),
    )
    mask = key_mask.to(torch.float64)
    return TokenAttention(
        weights=torch.stack(weights, dim=1) * mask,
        norms=torch.stack(norms, dim=1) * mask,
        key_mask=key_mask,
        real=real,
        model_name=str(getattr(cfg, "model_name", "unknown")),
        causal=not arch.encoder,
        mask_rule=arch.mask_rule,
        off_row_sink=off_row_sink,
        gated_layers=gated,
    )


@dataclass(frozen=True, eq=False)
class KeyShares:
    """Each prompt's mean share of its attention rows on chosen keys, per layer, by weight
    and by norm: :meth:`TokenAttention.shares_on` without the ``[pos, pos]`` arrays.

    Attributes:
        weight: ``[batch, layer]`` float64 mean over the prompt's real queries (that see a
            key) of ``sum_{j in keys} w_tj`` (fraction of the row, head-averaged weights).
        norm: ``[batch, layer]`` float64 the same for the norm-based shares
            ``n_tj / sum_j' n_tj'`` (fraction of the row's norm-based weights).
        keys: ``[batch, pos]`` bool, the chosen keys.
        real: ``[batch, pos]`` bool, the real tokens.
        model_name: name of the model (scope).
        attention: how the rows were obtained (``"pattern"`` or ``"rows"``, see
            :func:`key_shares`).
    """

    weight: torch.Tensor
    norm: torch.Tensor
    keys: torch.Tensor
    real: torch.Tensor
    model_name: str
    attention: str

    @property
    def scope(self) -> str:
        """Model, prompts, keys, how the rows were obtained, and units."""
        lengths = sorted(int(n) for n in self.real.sum(dim=1))
        return (
            f"model {self.model_name}; {self.real.shape[0]} prompts of {lengths[0]}..{lengths[-1]} "
            f"tokens; {int(self.keys.sum())} chosen keys; per prompt and layer, the mean over "
            "real queries of the row's share on the chosen keys by head-averaged weight and by "
            f"norm (||sum_h a^h_tj v^h_j W_O^h||, Kobayashi et al.), fractions; rows: "
            f"{self.attention}"
        )


# Upper bound on the elements of one chunk [batch, query, key, d_model] of the norm-based
# contributions on the pattern-free path (float32: 64 MiB).
_KEY_SHARE_ELEMENTS = 1 << 24


def key_shares(
    model: TransformerBridge,
    prompts_or_tokens: str | Sequence[str] | torch.Tensor | TokenizedPairs,
    keys: torch.Tensor,
    *,
    attention_mask: torch.Tensor | None = None,
    off_row_sink: str | None = None,
    attention: str = "auto",
) -> KeyShares:
    """Each prompt's mean share of its rows on ``keys``, per layer, by weight and by norm.

    The numbers of :meth:`TokenAttention.shares_on`, in memory linear in the prompt length
    on the pattern-free path: with ``attention="rows"`` (and by default from
    :data:`~interv.engine.rows.LONG_CONTEXT` positions on) every layer's rows are recomputed
    in query chunks from its queries and keys (:mod:`interv.engine.rows`) and reduced as they
    come, the norm-based contributions ``sum_h a^h_tj f^h(x_j)`` chunk by chunk
    (``chunk x pos x d_model``); ``"pattern"`` goes through :func:`token_attention`.

    Args:
        model: a transformer-lens ``TransformerBridge``.
        prompts_or_tokens: strings, a ``[batch, pos]`` int token tensor or a
            :class:`~interv.TokenizedPairs`.
        keys: ``[batch, pos]`` bool, the keys of interest of each prompt (e.g. its BOS).
        attention_mask: ``[batch, pos]`` bool for a padded token tensor.
        off_row_sink: as in :func:`token_attention`.
        attention: ``"auto"``, ``"pattern"`` or ``"rows"`` (named in the result).

    Returns:
        A :class:`KeyShares`.
    """
    check_off_row_sink(architecture_of(model), off_row_sink)
    batch = prompt_batch(model, prompts_or_tokens, attention_mask)
    real = batch.real
    if not isinstance(keys, torch.Tensor) or keys.dtype != torch.bool or keys.shape != real.shape:
        raise IntervError(
            f"keys must be a bool tensor of shape {tuple(real.shape)} [batch, key_pos]; got "
            f"{getattr(keys, 'dtype', type(keys).__name__)} of shape "
            f"{tuple(getattr(keys, 'shape', ()))}"
        )
    prompts = Prompts(batch.tokens, real)
    mode = choose_attention(model, prompts, attention)
    name = str(getattr(model.cfg, "model_name", "unknown"))
    if mode == "pattern":
        flow = token_attention(model, batch.tokens, attention_mask=real, off_row_sink=off_row_sink)
        weight, norm = flow.shares_on(keys)
        return KeyShares(weight, norm, keys, real, name, "pattern")
    weight, norm = _key_shares_without_pattern(model, prompts, keys)
    return KeyShares(weight, norm, keys, real, name, "recomputed from queries and keys, no pattern")


def _key_shares_without_pattern(
    model: TransformerBridge, prompts: Prompts, keys: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    cfg = model.cfg
    n_batch, n_pos = prompts.tokens.shape
    heads = [kv_head_of(cfg, h) for h in range(cfg.n_heads)]
    transformed: dict[int, torch.Tensor] = {}
    f64 = torch.float64
    sums = torch.zeros(2, n_batch, cfg.n_layers, dtype=f64)
    counts = torch.zeros(n_batch, cfg.n_layers, dtype=f64)

    def reduce(chunk: RowChunk) -> None:
        (start, stop), (low, high) = chunk.queries, chunk.keys
        weights = chunk.weights  # [batch, head, query, key]
        device = weights.device
        f = transformed[chunk.layer][:, :, low:high].to(weights)
        chosen = keys[:, low:high].to(device)[:, None, :].to(f64)  # [batch, 1, key]
        summed = torch.einsum("bhqk,bhkm->bqkm", weights, f)
        norms = summed.norm(dim=-1).to(f64)  # [batch, query, key]
        total = norms.sum(dim=-1)
        norm_share = torch.where(total > 0, (norms * chosen).sum(dim=-1) / total, 0.0)
        weight_share = (weights.to(f64).mean(dim=1) * chosen).sum(dim=-1)
        # the queries TokenAttention.shares_on counts: the real ones (each sees itself)
        counted = prompts.mask[:, start:stop].to(device=device, dtype=f64)
        sums[0, :, chunk.layer] += (weight_share * counted).sum(dim=-1).cpu()
        sums[1, :, chunk.layer] += (norm_share * counted).sum(dim=-1).cpu()
        counts[:, chunk.layer] += counted.sum(dim=-1).cpu()

    step = max(1, _KEY_SHARE_ELEMENTS // max(1, n_batch * n_pos * cfg.d_model))
    forward(
        model,
        prompts,
        hooks=[
            (Site("v", layer), _transformed_values(model, layer, heads, transformed))
            for layer in range(cfg.n_layers)
        ],
        readout=None,
        stop_after=Site("z", cfg.n_layers - 1),
        attention=AttentionPath("rows", RowRequest(on_chunk=reduce, chunk=step)),
    )
    return sums[0] / counts, sums[1] / counts
