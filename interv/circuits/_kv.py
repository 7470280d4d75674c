"""Per-query-head copies of the keys and values (internal): how the model runs for MIB's
ungrouped graph of a grouped-query model.

Under grouped-query attention each key/value head's key and value are shared by a group of
query heads (the attention repeats them per query head). For the ungrouped graph
(``Graph.from_model(model, kv="ungrouped")``) every query head reads its *own copy*: while
:func:`kv_copies` is open, the hooks it returns expand the hooked keys and values
``[batch, pos, n_key_value_heads, d_head]`` to ``[batch, pos, n_heads, d_head]`` (query head
``h`` gets key/value head ``h // group_size``'s, as the model's repeat does) and the
attention modules stop repeating them. Unedited, the forward is the model's own (checked
once per model by :func:`check_kv_copies`); a hook placed after the expansion at site ``k``
or ``v`` edits, or takes the gradient of, one query head's copy alone.
"""

from __future__ import annotations

import contextlib
import weakref
from collections.abc import Iterator
from typing import Any

import torch

from interv.engine.forward import PATTERN, Prompts, forward
from interv.engine.sites import Site
from interv.errors import IntervError

__all__ = ["check_kv_copies", "kv_copies"]

_GROUPS = "num_key_value_groups"
_CHECKED: weakref.WeakKeyDictionary[Any, bool] = weakref.WeakKeyDictionary()


def _modules(model: Any) -> list[Any]:
    """Each block's attention module that repeats the keys and values (refused without)."""
    found = []
    for layer, block in enumerate(model.blocks):
        module = getattr(getattr(block, "attn", None), "original_component", None)
        if not isinstance(getattr(module, _GROUPS, None), int):
            raise IntervError(
                f"kv='ungrouped': block {layer}'s attention ({type(module).__name__}) has no "
                f"{_GROUPS} interv can set, so its query heads cannot read their own copies of "
                "the keys and values; use kv='grouped'"
            )
        found.append(module)
    return found


@contextlib.contextmanager
def kv_copies(model: Any, n_heads: int, n_kv_heads: int) -> Iterator[list[tuple[Site, Any]]]:
    """While open, the model's attention reads one key and value per query head; yields the
    hooks (sites ``k`` and ``v`` of every block) that make the copies: put them before any
    hook that edits or differentiates a copy. Yields no hooks when there is nothing to copy
    (``n_kv_heads == n_heads``)."""
    if n_kv_heads == n_heads:
        yield []
        return
    group = n_heads // n_kv_heads
    modules = _modules(model)

    def expand(activation: torch.Tensor, hook: Any) -> torch.Tensor:
        return activation.repeat_interleave(group, dim=2)

    saved = [getattr(module, _GROUPS) for module in modules]
    try:
        for module in modules:
            setattr(module, _GROUPS, 1)
        yield [(Site(c, layer), expand) for layer in range(len(modules)) for c in ("k", "v")]
    finally:
        for module, value in zip(modules, saved, strict=True):
            setattr(module, _GROUPS, value)


def check_kv_copies(model: Any, n_heads: int, n_kv_heads: int) -> None:
    """Refuse (one line) a model whose forward with per-query-head copies is not its own:
    one short forward (four tokens) with and without the copies, logits compared; once per
    model."""
    if n_kv_heads == n_heads or _CHECKED.get(model, False):
        return
    tokens = torch.arange(4).remainder(int(model.cfg.d_vocab)).unsqueeze(0)
    prompts = Prompts.of(tokens)
    own = forward(model, prompts, readout="logits", attention=PATTERN).readout
    try:
        with kv_copies(model, n_heads, n_kv_heads) as hooks:
            copied = forward(
                model, prompts, hooks=hooks, readout="logits", attention=PATTERN
            ).readout
    except (RuntimeError, ValueError) as error:
        raise IntervError(
            f"kv='ungrouped': this model's attention does not accept per-query-head keys and "
            f"values ({str(error).splitlines()[0][:120]}); use kv='grouped'"
        ) from None
    gap = float((copied - own).abs().max())
    tolerance = 1e-4 * (1 + float(own.abs().max()))
    if not gap <= tolerance:
        raise IntervError(
            f"kv='ungrouped': the model run with per-query-head copies of its keys and values "
            f"differs from its own run by {gap:.3g} (tolerance {tolerance:.3g}); use "
            "kv='grouped'"
        )
    with contextlib.suppress(TypeError):  # not weak-referenceable: checked every time
        _CHECKED[model] = True
