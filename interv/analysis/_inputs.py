"""Prompts, token tensors or TokenizedPairs in; one padded token batch with its mask out.

Internal module, no stability promise. The analysis runners accept several input
forms; this module turns each into a :class:`PromptBatch` and validates the
attention mask (bool, one contiguous run of real tokens per prompt, padding on
either side).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch

from interv.errors import IntervError
from interv.tasks.pairs import check_tokenizable
from interv.tasks.tokenized import TokenizedPairs, check_distinct

if TYPE_CHECKING:
    from transformer_lens.model_bridge import TransformerBridge

__all__ = ["PromptBatch", "prompt_batch"]


@dataclass(frozen=True, eq=False)
class PromptBatch:
    """A padded token batch.

    Attributes:
        tokens: ``[batch, pos]`` int64 token ids.
        real: ``[batch, pos]`` bool, True at real (non-padding) tokens.
        first_real: ``[batch]`` int64 position of each prompt's first real token.
        lengths: ``[batch]`` int64 number of real tokens per prompt.
    """

    tokens: torch.Tensor
    real: torch.Tensor
    first_real: torch.Tensor
    lengths: torch.Tensor


def prompt_batch(
    model: TransformerBridge,
    prompts_or_tokens: str | Sequence[str] | torch.Tensor | TokenizedPairs,
    attention_mask: torch.Tensor | None,
) -> PromptBatch:
    """Turn any accepted input form into a validated :class:`PromptBatch`."""
    if isinstance(prompts_or_tokens, TokenizedPairs):
        if attention_mask is not None:
            raise IntervError(
                "attention_mask must be None for TokenizedPairs input (the pairs carry their "
                "own mask); got a tensor"
            )
        tokens, mask = prompts_or_tokens.clean_tokens, prompts_or_tokens.attention_mask
    elif isinstance(prompts_or_tokens, str) or (
        isinstance(prompts_or_tokens, Sequence)
        and prompts_or_tokens
        and all(isinstance(p, str) for p in prompts_or_tokens)
    ):
        if attention_mask is not None:
            raise IntervError(
                "attention_mask must be None for string prompts (interv pads them itself); "
                "got a tensor"
            )
        prompts = [prompts_or_tokens] if isinstance(prompts_or_tokens, str) else prompts_or_tokens
        tokens, mask = _tokenize(model, list(prompts))
    elif isinstance(prompts_or_tokens, torch.Tensor):
        tokens = prompts_or_tokens
        if tokens.ndim == 1:
            tokens = tokens[None, :]
            attention_mask = None if attention_mask is None else attention_mask[None, :]
        mask = attention_mask
    else:
        raise IntervError(
            "prompts_or_tokens must be a string, a non-empty list of strings, a [batch, pos] "
            f"int token tensor or a TokenizedPairs; got {type(prompts_or_tokens).__name__}"
        )
    return _validated(tokens, mask)


def _tokenize(model: TransformerBridge, prompts: list[str]) -> tuple[torch.Tensor, torch.Tensor]:
    """Tokenize each prompt alone (BOS prepended, never silently truncated to the model's
    context) and right-pad to the longest; a prompt
    the tokenizer cannot encode is a clear error naming its unknown words."""
    try:
        rows = [model.to_tokens(prompt, prepend_bos=True, truncate=False)[0] for prompt in prompts]
    except Exception:  # tokenizers raise bare Exceptions: name the prompt and its words
        check_tokenizable(model, prompts)
        raise
    longest = max(len(row) for row in rows)
    tokens = torch.zeros(len(rows), longest, dtype=torch.int64)
    mask = torch.zeros(len(rows), longest, dtype=torch.bool)
    for i, row in enumerate(rows):
        tokens[i, : len(row)] = row
        mask[i, : len(row)] = True
    return tokens, mask


def _validated(tokens: torch.Tensor, mask: torch.Tensor | None) -> PromptBatch:
    if tokens.ndim != 2 or tokens.is_floating_point() or tokens.dtype == torch.bool:
        raise IntervError(
            f"tokens must be an int tensor of shape [batch, pos]; got {tokens.dtype} of shape "
            f"{tuple(tokens.shape)}"
        )
    if tokens.shape[0] == 0 or tokens.shape[1] == 0:
        raise IntervError(f"tokens must hold at least one token; got shape {tuple(tokens.shape)}")
    if mask is None:
        mask = torch.ones(tokens.shape, dtype=torch.bool)
    if not isinstance(mask, torch.Tensor) or mask.dtype != torch.bool:
        kind = mask.dtype if isinstance(mask, torch.Tensor) else type(mask).__name__
        raise IntervError(f"attention_mask must be a bool tensor (True = real token); got {kind}")
    if mask.shape != tokens.shape:
        raise IntervError(
            f"attention_mask must have the tokens' shape {tuple(tokens.shape)}; "
            f"got {tuple(mask.shape)}"
        )
    lengths = mask.sum(dim=1)
    if bool((lengths == 0).any()):
        i = int((lengths == 0).nonzero()[0, 0])
        raise IntervError(f"prompt {i} has no real token; every prompt needs at least one")
    first_real = mask.to(torch.int64).argmax(dim=1)
    positions = torch.arange(tokens.shape[1])
    contiguous = (positions >= first_real[:, None]) & (positions < (first_real + lengths)[:, None])
    if not bool((contiguous == mask).all()):
        i = int((contiguous != mask).any(dim=1).nonzero()[0, 0])
        raise IntervError(
            f"prompt {i} has padding between real tokens (mask {mask[i].int().tolist()}); "
            "padding must be on the left or the right only"
        )
    check_distinct(tokens, mask, "prompt")
    return PromptBatch(
        tokens=tokens.to(torch.int64), real=mask, first_real=first_real, lengths=lengths
    )
