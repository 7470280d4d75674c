"""Small pieces every forward of the engine and its analyses shares.

Used by the runner, attribution patching and pruning; they take a model and tensors and
hold no state.
"""

from __future__ import annotations

from typing import Any

import torch

__all__ = ["answer_logits", "forward_kwargs", "model_device"]


def model_device(model: Any) -> torch.device:
    """The device of ``model``'s parameters (CPU for a model without parameters)."""
    parameter = next(model.parameters(), None)
    return torch.device("cpu") if parameter is None else parameter.device


def forward_kwargs(mask: torch.Tensor) -> dict[str, torch.Tensor]:
    """Pass the attention mask only when there is padding (otherwise the default path)."""
    return {} if bool(mask.all()) else {"attention_mask": mask}


def answer_logits(logits: torch.Tensor, answer_positions: torch.Tensor) -> torch.Tensor:
    """``[batch, pos, d_vocab]`` -> ``[batch, d_vocab]`` at each row's answer position."""
    rows = torch.arange(logits.shape[0], device=logits.device)
    return logits[rows, answer_positions.to(logits.device)]
