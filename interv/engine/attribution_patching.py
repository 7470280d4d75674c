"""Attribution patching: a first-order *approximation* of head-output patching.

>>> scores = approximate_head_patching_scores(model, task)   # doctest: +SKIP
>>> scores.shape                                             # [n_layers, n_heads]

Exact denoising of head ``(L, h)`` at all positions runs the corrupted prompts with
that head's output ``z`` replaced by the clean one and measures the target metric
``m``. Attribution patching replaces that forward by a first-order Taylor expansion
around the corrupted run:

``m(z_clean) - m(z_corr)  ~=  sum_{pos, d_head} dm/dz (at z_corr) * (z_clean - z_corr)``

so one forward and one backward of the corrupted run score every head at once. It is
a screening method: the linear approximation fails where the metric saturates or
heads interact nonlinearly (attention patterns, layer norms). Its ranking should be
checked, and its top candidates verified with exact interventions
(:func:`interv.engine.runner.run` with ``ActivationPatch("z", L, h)``).

Scores are in the metric's unit, per head, for the prompt-mean metric.
"""

from __future__ import annotations

from typing import Any

import torch

from interv.engine.forward import Gradient, Prompts, forward, model_device
from interv.engine.sites import Site
from interv.engine.targets import TargetMetric, get_metric
from interv.tasks.tokenized import TokenizedPairs

__all__ = ["approximate_head_patching_scores"]


def approximate_head_patching_scores(
    model: Any, task: TokenizedPairs, metric: str | TargetMetric = "logit_diff"
) -> torch.Tensor:
    """First-order estimate of each head's all-position denoising effect (approximate).

    For every head, ``sum_{pos, d_head} grad * (z_clean - z_corrupted)``, with ``grad``
    the gradient of the prompt-mean metric on the corrupted run with respect to the
    head's output ``z`` (``[batch, pos, head_index, d_head]``), summed over prompts.
    Approximates ``mean_i m(corrupted_i with z_h clean) - mean_i m(corrupted_i)``. One
    clean forward, one corrupted forward and one backward; model parameters get no
    ``.grad``.

    Args:
        model: a transformer-lens ``TransformerBridge`` in eval mode.
        task: clean/corrupted prompt pairs.
        metric: a name in :data:`interv.engine.targets.METRICS` or a ``TargetMetric``.

    Returns:
        ``[n_layers, n_heads]`` estimated change of the prompt-mean metric, in the
        metric's unit (an approximation, not an intervention result).

    Raises:
        IntervError: unknown metric, or a metric needing a foil on a task without one.
    """
    target_metric = get_metric(metric)
    target_metric.check_foil(task.foil_ids)
    device = model_device(model)
    sites = [Site("z", layer) for layer in range(model.cfg.n_layers)]
    clean = forward(
        model,
        Prompts.of(task.clean_tokens, task.attention_mask),
        capture=sites,
        readout="position_logits",
        positions=task.answer_positions,
    )
    target = task.target_ids.to(device)
    foil = None if task.foil_ids is None else task.foil_ids.to(device)
    corrupted = forward(
        model,
        Prompts.of(task.corrupted_tokens, task.attention_mask),
        readout="position_logits",
        positions=task.answer_positions,
        gradient=Gradient(
            sites, lambda logits: target_metric(logits, target, foil, clean.readout) / task.n_pairs
        ),
    )
    return torch.stack(
        [
            (corrupted.gradients[site] * (clean.captured[site] - corrupted.captured[site])).sum(
                (0, 1, 3)
            )
            for site in sites
        ]
    ).cpu()
