"""Gu et al.'s sink rate of a whole model, the first token's key and value norms, and the
special inputs their claims are about (random tokens, one repeated token).

>>> tokens = random_tokens(model, n_prompts=32, length=64, seed=0)     # BOS + 63 random
>>> profile = sink_profile(model, tokens)                               # key 0, eps 0.3
>>> profile.rate, profile.rate_interval()                               # Sink_1^0.3 in Gu et al.

For every prompt, layer and head, :func:`sink_profile` computes the sink score of one key
position (:func:`interv.metrics.sink_scores`: the mean weight on key ``k`` over the
queries that can see it) inside the pattern hooks, and the norms of every token's key
and value vectors in the key and value hooks (per key/value head under grouped-query
attention; under rotary embeddings the key's norm is the same before and after the
rotation). Nothing quadratic in the context is kept. Positions are counted from each
prompt's first real token. The sink rate (Gu et al.'s ``Sink_k^eps``) is the share of
(prompt, layer, head) scores above ``eps``: a concentration number, about where the
heads put their mass, not about what that mass does.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch

from interv._checks import as_int
from interv.analysis._inputs import prompt_batch
from interv.engine.architecture import architecture_of, check_off_row_sink
from interv.engine.forward import AttentionPath, Prompts, choose_attention, forward
from interv.engine.rows import RowRequest, RowStats, admits_keys
from interv.engine.sites import Site
from interv.errors import IntervError
from interv.metrics.sink_heads import GU_EPS, check_eps, sink_scores
from interv.stats import bootstrap_indices, percentile_interval

if TYPE_CHECKING:
    from collections.abc import Sequence

    from transformer_lens.model_bridge import TransformerBridge

    from interv.tasks.tokenized import TokenizedPairs

__all__ = ["SinkProfile", "random_tokens", "repeated_tokens", "sink_profile"]


@dataclass(frozen=True, eq=False)
class SinkProfile:
    """Sink scores of every head and the key/value norms of one key position, per prompt.

    Attributes:
        scores: ``[batch, layer, head_index]`` float64 sink scores ``alpha_k`` in [0, 1]
            (fraction of a row's mass; NaN where no query sees the key).
        key_norms: ``[batch, layer, kv_head]`` float64 ``||k||`` of the key position's
            key vector divided by the mean ``||k||`` of the prompt's other real tokens
            (dimensionless; < 1 = smaller than the others).
        value_norms: the same ratio for the value vectors.
        key: the key position, counted from each prompt's first real token (0-based;
            Gu et al.'s ``k`` is ``key + 1``).
        eps: the threshold of :attr:`rate`, in (0, 1).
        model_name: name of the model (scope).
        inputs: what the prompts are (e.g. "32 random-token prompts"), for the scope.
        prompt_lengths: real tokens per prompt.
        causal: whether the causal mask applied (False for a bidirectional encoder).
        mask_rule: the keys each layer admits, in words (the queries that "see" the key
            are those whose layer admits it: a sliding window shortens the list).
    """

    scores: torch.Tensor
    key_norms: torch.Tensor
    value_norms: torch.Tensor
    key: int
    eps: float
    model_name: str
    inputs: str
    prompt_lengths: tuple[int, ...]
    causal: bool = True
    mask_rule: str = ""

    @property
    def n_prompts(self) -> int:
        """Number of prompts."""
        return int(self.scores.shape[0])

    @property
    def per_prompt(self) -> torch.Tensor:
        """``[batch]`` float64 share of the prompt's heads whose score exceeds ``eps``."""
        defined = ~self.scores.isnan()
        above = (self.scores > self.eps) & defined
        counts = defined.flatten(1).sum(dim=1)
        share = above.flatten(1).sum(dim=1).to(torch.float64) / counts.clamp(min=1)
        return torch.where(counts > 0, share, torch.nan)

    @property
    def rate(self) -> float:
        """Gu et al.'s ``Sink_k^eps``: share of (prompt, layer, head) scores above ``eps``
        (fraction of heads in [0, 1]; every prompt has the same heads, so this is also the
        mean of :attr:`per_prompt`)."""
        defined = ~self.scores.isnan()
        if not bool(defined.any()):
            return math.nan
        return float((self.scores[defined] > self.eps).to(torch.float64).mean())

    @property
    def per_layer(self) -> torch.Tensor:
        """``[layer]`` float64 share of each layer's (prompt, head) scores above ``eps``."""
        defined = ~self.scores.isnan()
        above = ((self.scores > self.eps) & defined).sum(dim=(0, 2)).to(torch.float64)
        return above / defined.sum(dim=(0, 2)).clamp(min=1)

    def rate_interval(
        self, *, level: float = 0.95, n_bootstrap: int = 1000, seed: int = 0
    ) -> tuple[float, float]:
        """Percentile bootstrap interval of :attr:`rate` over prompts (fraction of heads)."""
        values = self.per_prompt
        indices = bootstrap_indices(self.n_prompts, n_bootstrap, seed)
        return percentile_interval(values[indices].nanmean(dim=-1), level, n_items=self.n_prompts)

    def norm_ratio(self, which: str = "value") -> torch.Tensor:
        """``[layer]`` float64 mean over prompts and key/value heads of the key position's
        norm ratio (``which``: ``"key"`` or ``"value"``; dimensionless)."""
        if which not in ("key", "value"):
            raise IntervError(f"which must be 'key' or 'value'; got {which!r}")
        ratios = self.key_norms if which == "key" else self.value_norms
        return ratios.nanmean(dim=(0, 2))

    def norm_ratio_interval(
        self, which: str = "value", *, level: float = 0.95, n_bootstrap: int = 1000, seed: int = 0
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """``([layer], [layer])`` percentile bootstrap interval over prompts of
        :meth:`norm_ratio`."""
        self.norm_ratio(which)  # validates ``which``
        ratios = (self.key_norms if which == "key" else self.value_norms).nanmean(dim=2)
        indices = bootstrap_indices(self.n_prompts, n_bootstrap, seed)
        samples = ratios[indices].nanmean(dim=1)  # [n_bootstrap, layer]
        bounds = [
            percentile_interval(samples[:, layer], level, n_items=self.n_prompts)
            for layer in range(ratios.shape[1])
        ]
        low, high = zip(*bounds, strict=True)
        return torch.tensor(low, dtype=torch.float64), torch.tensor(high, dtype=torch.float64)

    @property
    def scope(self) -> str:
        """Model, inputs, lengths, key, threshold, mask rule and unit."""
        lengths = sorted(self.prompt_lengths)
        mask = self.mask_rule or (
            "causal AND padding" if self.causal else "bidirectional: padding only"
        )
        return (
            f"model {self.model_name}; {self.inputs}: {self.n_prompts} prompts of "
            f"{lengths[0]}..{lengths[-1]} tokens; sink score of key position {self.key} "
            f"(from each prompt's first real token) = mean weight on it over the queries that "
            f"see it (fraction of the row), rate = share of (prompt, layer, head) scores above "
            f"eps = {self.eps:g}; mask: {mask}"
        )


def sink_profile(
    model: TransformerBridge,
    prompts_or_tokens: str | Sequence[str] | torch.Tensor | TokenizedPairs,
    *,
    attention_mask: torch.Tensor | None = None,
    key: int = 0,
    eps: float = GU_EPS,
    inputs: str | None = None,
    off_row_sink: str | None = None,
    attention: str = "auto",
) -> SinkProfile:
    """Sink scores of every head for one key position, and that key's key and value norms.

    Args:
        model: a transformer-lens ``TransformerBridge``; each layer's key mask is the one
            the model applies (:func:`~interv.engine.architecture.architecture_of`).
        prompts_or_tokens: strings (BOS prepended, right-padded), a ``[batch, pos]`` int
            token tensor (e.g. :func:`random_tokens`) or a :class:`~interv.TokenizedPairs`.
        attention_mask: ``[batch, pos]`` bool for a padded token tensor.
        key: the key position, counted from each prompt's first real token; it must lie
            inside the shortest prompt, which needs another real token.
        eps: the threshold of the rate, in (0, 1) (default 0.3, Gu et al.'s).
        inputs: how the prompts are named in the scope (default: "N prompts").
        off_row_sink: None (default) refuses rows that sum to less than 1 (gpt-oss's
            off-row sink); ``"as_key"`` accepts them (a key's score is still the mean
            weight on it; the deficit is a sink of its own, not key ``key``).
        attention: ``"pattern"`` reads each layer's pattern; ``"rows"`` computes the weights
            on the key from the queries and keys without any pattern (memory linear in the
            prompt length, :mod:`interv.engine.rows`); ``"auto"`` (default) the latter from
            :data:`~interv.engine.rows.LONG_CONTEXT` positions on where the family allows it.
            Both count the queries that see the key the same way (the layer's own mask).

    Returns:
        A :class:`SinkProfile`.
    """
    eps = check_eps(eps)
    key = as_int(key, "key", minimum=0)
    arch = architecture_of(model)
    arch.require("attention_rows", hint="sink_profile needs rows at every layer")
    check_off_row_sink(arch, off_row_sink)
    batch = prompt_batch(model, prompts_or_tokens, attention_mask)
    shortest = int(batch.lengths.min())
    if key >= shortest - 1:
        raise IntervError(
            f"key position {key} is beyond the prompt: the shortest prompt has {shortest} "
            f"real tokens, and a key's norm ratio needs another token (valid keys "
            f"0..{shortest - 2})"
        )
    causal = not arch.encoder
    n_layers = model.cfg.n_layers
    real = batch.real
    key_abs = batch.first_real + key  # [batch]
    rows = torch.arange(real.shape[0])
    scores: list[torch.Tensor] = []
    norms: dict[str, list[torch.Tensor]] = {"k": [], "v": []}

    def norm_hook(component: str) -> Any:
        def hook(activation: torch.Tensor, hook: Any) -> None:
            lengths = activation.detach().to(torch.float64).norm(dim=-1).cpu()  # [b, pos, kv]
            at_key = lengths[rows, key_abs]  # [batch, kv_head]
            others = real.clone()
            others[rows, key_abs] = False
            weights = others.to(torch.float64).unsqueeze(-1)
            mean_others = (lengths * weights).sum(dim=1) / weights.sum(dim=1)
            norms[component].append(at_key / mean_others)

        return hook

    deficit = off_row_sink == "as_key"
    prompts = Prompts(batch.tokens, real)
    mode = choose_attention(model, prompts, attention)
    hooks = []
    for layer in range(n_layers):
        hooks += [(Site("k", layer), norm_hook("k")), (Site("v", layer), norm_hook("v"))]
    if mode == "rows":

        def rows_hook(layer: int, stats: RowStats) -> None:
            # the weight on the key (re-closed as sink_scores does, unless the row's deficit
            # is a sink of its own), averaged over the real queries the layer lets see it
            device = stats.at_keys.device
            weight = stats.at_keys[..., 0]
            if not deficit:
                weight = weight / torch.where(stats.mass > 0, stats.mass, 1.0)
            rule = arch.key_rule(layer)
            sees = admits_keys(rule, real, key_abs[:, None])[..., 0] & real  # [batch, query]
            sees = sees.to(device)
            count = sees.sum(dim=-1, keepdim=True).to(torch.float64)  # [batch, 1]
            total = (weight * sees[:, None, :]).sum(dim=-1)
            scores.append(torch.where(count > 0, total / count.clamp(min=1), torch.nan).cpu())

        forward(
            model,
            prompts,
            hooks=hooks,
            readout=None,
            stop_after=Site("z", n_layers - 1),
            attention=AttentionPath("rows", RowRequest(keys=key_abs[:, None], on_layer=rows_hook)),
        )
    else:
        admitted = {
            rule: (rule.admitted(real) & real[:, :, None])[:, None]  # [batch, 1, query, key]
            for rule in set(arch.key_rules)
        }

        def pattern_hook(layer: int) -> Any:
            key_mask = admitted[arch.key_rule(layer)]
            options = {"causal": causal, "allow_deficit": deficit}

            def hook(activation: torch.Tensor, hook: Any) -> None:
                pattern = activation.detach()  # [batch, head, query, key], on the device
                mask = key_mask.to(pattern.device)
                if bool((key_abs == key_abs[0]).all()):  # the same key everywhere: one call
                    found = sink_scores(pattern, int(key_abs[0]), key_mask=mask, **options)
                    scores.append(found.cpu())
                    return
                per_prompt = [
                    sink_scores(
                        pattern[b : b + 1], int(key_abs[b]), key_mask=mask[b : b + 1], **options
                    )[0]
                    for b in range(pattern.shape[0])
                ]
                scores.append(torch.stack(per_prompt).cpu())  # [batch, head]

            return hook

        hooks += [(Site("pattern", layer), pattern_hook(layer)) for layer in range(n_layers)]
        forward(
            model,
            prompts,
            hooks=hooks,
            readout=None,
            stop_after=Site("pattern", n_layers - 1),
            attention=AttentionPath("pattern"),
        )
    return SinkProfile(
        scores=torch.stack(scores, dim=1),
        key_norms=torch.stack(norms["k"], dim=1),
        value_norms=torch.stack(norms["v"], dim=1),
        key=key,
        eps=eps,
        model_name=str(getattr(model.cfg, "model_name", "unknown")),
        inputs=inputs or f"{batch.tokens.shape[0]} prompts",
        prompt_lengths=tuple(int(n) for n in batch.lengths),
        causal=causal,
        mask_rule=arch.mask_rule,
    )


def _ordinary_ids(model: TransformerBridge) -> torch.Tensor:
    """Token ids of the vocabulary that are not special tokens (BOS, EOS, padding, ...)."""
    n_vocab = int(model.cfg.d_vocab)
    tokenizer = model.tokenizer
    special = set(getattr(tokenizer, "all_special_ids", None) or ())
    added = getattr(tokenizer, "added_tokens_decoder", None) or {}
    special |= {int(i) for i, token in added.items() if getattr(token, "special", False)}
    ids = torch.tensor([i for i in range(n_vocab) if i not in special], dtype=torch.int64)
    if ids.numel() == 0:
        raise IntervError(f"model {model.cfg.model_name!r} has no ordinary (non-special) tokens")
    return ids


def _with_bos(model: TransformerBridge, tokens: torch.Tensor, bos: bool) -> torch.Tensor:
    if not bos:
        return tokens
    bos_id = getattr(model.tokenizer, "bos_token_id", None)
    if bos_id is None:
        raise IntervError(f"model {model.cfg.model_name!r} has no BOS token; pass bos=False")
    return torch.cat([torch.full((tokens.shape[0], 1), int(bos_id)), tokens], dim=1)


def _check_shape(n_prompts: int, length: int, bos: bool) -> tuple[int, int]:
    n_prompts = as_int(n_prompts, "n_prompts", minimum=1)
    length = as_int(length, "length", minimum=2)
    if not isinstance(bos, bool):
        raise IntervError(f"bos must be True or False; got {bos!r}")
    return n_prompts, length


def random_tokens(
    model: TransformerBridge, n_prompts: int, length: int, *, seed: int = 0, bos: bool = True
) -> torch.Tensor:
    """``[n_prompts, length]`` int64 prompts of tokens drawn uniformly (with replacement,
    seeded) from the vocabulary's ordinary (non-special) tokens; with ``bos`` the first of
    the ``length`` tokens is the model's BOS token. Gu et al.'s "random tokens" input."""
    n_prompts, length = _check_shape(n_prompts, length, bos)
    ids = _ordinary_ids(model)
    generator = torch.Generator().manual_seed(as_int(seed, "seed"))
    picks = torch.randint(ids.numel(), (n_prompts, length - int(bos)), generator=generator)
    return _with_bos(model, ids[picks], bos)


def repeated_tokens(
    model: TransformerBridge, n_prompts: int, length: int, *, seed: int = 0, bos: bool = False
) -> torch.Tensor:
    """``[n_prompts, length]`` int64 prompts each made of one ordinary token repeated (one
    token per prompt, drawn uniformly without replacement where the vocabulary allows,
    seeded); with ``bos`` the first token is the model's BOS token instead.

    Without BOS every position holds the same token, the input of Gu et al.'s
    propositions: a model whose positions are told apart only by rotary (or no)
    position embeddings then computes the same hidden state at every position.
    """
    n_prompts, length = _check_shape(n_prompts, length, bos)
    ids = _ordinary_ids(model)
    generator = torch.Generator().manual_seed(as_int(seed, "seed"))
    if n_prompts <= ids.numel():
        picks = torch.randperm(ids.numel(), generator=generator)[:n_prompts]
    else:
        picks = torch.randint(ids.numel(), (n_prompts,), generator=generator)
    tokens = ids[picks][:, None].expand(n_prompts, length - int(bos)).clone()
    return _with_bos(model, tokens, bos)
