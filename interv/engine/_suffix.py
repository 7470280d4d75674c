"""Prefix reuse: run only the blocks an intervention can change, score only the answer.

An intervention whose earliest site is in block ``L`` cannot change anything that
block ``L`` reads: the residual stream entering block ``L`` (``hook_resid_pre``) is the
base run's own. So an exact intervened forward needs only the *suffix* of the model,
blocks ``L..n_layers-1``, started from that residual, plus the final normalization and
the unembedding at each prompt's answer position (the only logits a target metric
reads). On average over a sweep of every layer this halves the block work, and the
unembedding (``d_model x d_vocab``, large for real vocabularies) runs on one position
instead of all.

The backend's own ``forward(start_at_layer=L)`` still executes blocks ``0..L-1``
internally, so it saves nothing; instead this module records, during the base run,
the exact inputs each block received (hidden states and keyword arguments: attention
mask, position ids, rotary position embeddings, as the Hugging Face model computed
them) and later calls the blocks ``L..`` itself with those inputs. The blocks are the
bridge's own modules, so every transformer-lens hook inside them fires as in a full
forward, and ``blocks.{L}.hook_resid_pre`` (the block's input hook) still sees the
injected residual.

Private: no stability promise. The runner is the only caller.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import torch

__all__ = ["BlockInputs", "record_block_inputs", "suffix_answer_logits"]

# Keyword arguments carrying an incremental-decoding cache: a suffix call never uses one.
_CACHE_KWARGS = ("cache", "past_key_values", "past_key_value", "layer_past")


@dataclass(frozen=True)
class BlockInputs:
    """What every block received during one base forward of ``n`` prompts.

    Attributes:
        residuals: per block ``L``, the residual stream entering it, ``[n, pos, d_model]``.
        kwargs: per block ``L``, the other keyword arguments it was called with
            (attention mask, position ids, position embeddings), cache arguments removed.
        n_prompts: ``n``, the batch size of the base forward.
    """

    residuals: tuple[torch.Tensor, ...]
    kwargs: tuple[dict[str, Any], ...]
    n_prompts: int


@contextmanager
def record_block_inputs(model: Any) -> Iterator[list[BlockInputs]]:
    """Record the inputs of every block during the forwards run inside the context.

    Yields a list that, after the context exits, holds one :class:`BlockInputs` per
    complete forward (every block called once). The recording hooks are plain torch
    forward pre-hooks on the blocks, removed in ``finally``.
    """
    n_layers = len(model.blocks)
    residuals: list[torch.Tensor] = []
    kwargs: list[dict[str, Any]] = []
    recorded: list[BlockInputs] = []

    def make_hook(layer: int) -> Any:
        def hook(module: Any, args: tuple, block_kwargs: dict[str, Any]) -> None:
            if layer == 0 or len(args) > 1:
                # a new forward; extra positional inputs are not replayed, so a forward
                # that passes any stays incomplete and is not recorded
                residuals.clear()
                kwargs.clear()
            if len(args) > 1:
                return
            hidden = args[0] if args else block_kwargs["hidden_states"]
            rest = {k: v for k, v in block_kwargs.items() if k != "hidden_states"}
            residuals.append(hidden.detach())
            kwargs.append(_without_cache(rest))
            if layer == n_layers - 1 and len(residuals) == n_layers:
                recorded.append(BlockInputs(tuple(residuals), tuple(kwargs), hidden.shape[0]))

        return hook

    handles = [
        block.register_forward_pre_hook(make_hook(layer), with_kwargs=True)
        for layer, block in enumerate(model.blocks)
    ]
    try:
        yield recorded
    finally:
        for handle in handles:
            handle.remove()


def _without_cache(block_kwargs: dict[str, Any]) -> dict[str, Any]:
    kwargs = {k: (None if k in _CACHE_KWARGS else v) for k, v in block_kwargs.items()}
    if "use_cache" in kwargs:
        kwargs["use_cache"] = False
    return kwargs


def _repeat_batch(value: Any, copies: int, n_prompts: int) -> Any:
    """Stack ``copies`` copies of every batch-leading tensor (``[n_prompts, ...]``, ndim >= 2).

    Other tensors (e.g. rotary tables ``[1, pos, d]``, broadcast over the batch) pass
    unchanged. Tuples and lists are handled element-wise.
    """
    if isinstance(value, torch.Tensor):
        if value.ndim >= 2 and value.shape[0] == n_prompts and copies > 1:
            return value.repeat(copies, *([1] * (value.ndim - 1)))
        return value
    if isinstance(value, tuple | list):
        return type(value)(_repeat_batch(item, copies, n_prompts) for item in value)
    return value


def suffix_answer_logits(
    model: Any,
    inputs: list[BlockInputs],
    start_layer: int,
    answer_positions: torch.Tensor,
) -> torch.Tensor:
    """Run blocks ``start_layer..`` on stacked base runs; logits at the answer positions.

    Args:
        model: the bridge whose base forwards produced ``inputs``.
        inputs: the :class:`BlockInputs` of each stacked copy's base run, in row order;
            all of the same prompts' mask (so their block keyword arguments agree).
        start_layer: the first block to run (the earliest block any hook edits).
        answer_positions: ``[len(inputs) * n_prompts]`` position scored in each row.

    Returns:
        ``[len(inputs) * n_prompts, d_vocab]`` next-token logits at the answer positions.
    """
    copies, n_prompts = len(inputs), inputs[0].n_prompts
    hidden = torch.cat([base.residuals[start_layer] for base in inputs])
    for layer in range(start_layer, len(model.blocks)):
        kwargs = {
            name: _repeat_batch(value, copies, n_prompts)
            for name, value in inputs[0].kwargs[layer].items()
        }
        output = model.blocks[layer](hidden, **kwargs)
        hidden = output[0] if isinstance(output, tuple) else output
    rows = torch.arange(hidden.shape[0], device=hidden.device)
    at_answer = hidden[rows, answer_positions.to(hidden.device)].unsqueeze(1)
    return model.unembed(model.ln_final(at_answer)).squeeze(1)
