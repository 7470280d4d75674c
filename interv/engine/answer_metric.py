"""The target metric of each prompt at its answer position, and its gradients.

One owner of "prompt ``i``'s metric: its logits at its answer position, its target and foil
ids, the clean run's logits there". Exact path patching scores stacked copies of the prompts
with :func:`answer_metric`; every first-order screen (attribution patching, screened
interventions, edge screens) differentiates it with :func:`answer_gradients`: one forward
and one backward of a base run, every site at once.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import torch

from interv.engine.forward import (
    AUTO,
    AttentionPath,
    ForwardOutput,
    Gradient,
    HookFn,
    Prompts,
    forward,
    model_device,
)
from interv.engine.sites import Site
from interv.engine.targets import TargetMetric
from interv.errors import IntervError

if TYPE_CHECKING:
    from interv.tasks.tokenized import TokenizedPairs

__all__ = ["answer_gradients", "answer_metric"]

RUNS: tuple[str, ...] = ("clean", "corrupted")


def answer_metric(
    metric: TargetMetric,
    task: TokenizedPairs,
    clean_logits: torch.Tensor,
    *,
    copies: int = 1,
) -> Callable[[torch.Tensor], torch.Tensor]:
    """``logits -> metric``: answer logits of ``copies`` stacked copies of the task's prompts
    ``[copies * n, d_vocab]`` to each row's metric ``[copies * n]`` (its prompt's target and
    foil, against the clean run's answer logits ``clean_logits`` ``[n, d_vocab]``), on the
    logits' device."""

    def of(logits: torch.Tensor) -> torch.Tensor:
        device = logits.device
        return metric(
            logits,
            task.target_ids.to(device).repeat(copies),
            None if task.foil_ids is None else task.foil_ids.to(device).repeat(copies),
            clean_logits.to(device).repeat(copies, 1),
        )

    return of


def answer_gradients(
    model: Any,
    task: TokenizedPairs,
    run: str,
    sites: Sequence[Site],
    metric: TargetMetric,
    clean_logits: torch.Tensor,
    *,
    hooks: Sequence[tuple[Site, HookFn]] = (),
    capture: Sequence[Site] = (),
    attention: AttentionPath = AUTO,
) -> ForwardOutput:
    """One forward and one backward of ``run``'s prompts (``"clean"`` or ``"corrupted"``, with
    ``hooks``): :attr:`ForwardOutput.gradients` holds, per site of ``sites``, the gradient of
    the sum over prompts of each prompt's :func:`answer_metric` with respect to the activation
    (prompts are independent rows, so it holds every prompt's own gradient); ``sites`` and
    ``capture`` are captured, and the readout is the answer logits ``[n, d_vocab]``;
    ``attention``: how the forward computes attention (:class:`AttentionPath`)."""
    if run not in RUNS:
        raise IntervError(f"unknown run {run!r}; choose one of {RUNS}")
    tokens = task.clean_tokens if run == "clean" else task.corrupted_tokens
    return forward(
        model,
        Prompts.of(tokens, task.attention_mask),
        hooks=hooks,
        capture=capture,
        readout="position_logits",
        positions=task.answer_positions,
        gradient=Gradient(sites, answer_metric(metric, task, clean_logits.to(model_device(model)))),
        attention=attention,
    )
