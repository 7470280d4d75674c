"""Reference computations with plain torch forward hooks on a bridge's hook modules.

The engine's own machinery is not used here: a hook is a ``register_forward_hook`` on
the module behind a transformer-lens hook name. Note that the module behind a head hook
(``hook_z``, ``hook_q``...) sees the heads flattened, ``[batch, pos, n_heads * d_head]``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping

import torch


def forward_with_hooks(
    model,
    tokens: torch.Tensor,
    task,
    hooks: Mapping[str, Callable[[torch.Tensor], torch.Tensor]] | None = None,
    keep: Iterable[str] = (),
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """Target minus foil logit at the task's answer positions under plain hooks
    ``{hook_name: fn(output) -> output}``, and the (edited) outputs of the hook modules
    named in ``keep``."""
    hooks, keep = dict(hooks or {}), set(keep)
    kept: dict[str, torch.Tensor] = {}

    def wrap(name: str):
        def hook(module, args, out):
            out = out if name not in hooks else hooks[name](out)
            if name in keep:
                kept[name] = out.detach().clone()
            return out

        return hook

    handles = [model.hook_dict[name].register_forward_hook(wrap(name)) for name in {*hooks, *keep}]
    try:
        with torch.no_grad():
            logits = model(tokens, attention_mask=task.attention_mask)
    finally:
        for handle in handles:
            handle.remove()
    rows = torch.arange(task.n_pairs)
    at = logits[rows, task.answer_positions]
    return at[rows, task.target_ids] - at[rows, task.foil_ids], kept


def head_columns(model, head: int) -> slice:
    """Columns of ``head`` in a flattened ``[batch, pos, heads * d_head]`` hook output."""
    return slice(head * model.cfg.d_head, (head + 1) * model.cfg.d_head)
