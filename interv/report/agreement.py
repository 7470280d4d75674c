"""Agreement between concentration and causation, with what it does and does not show.

For one intervention kind (e.g. zero ablation) and one concentration metric, the
agreement is Spearman's rank correlation, across heads, between the head's mean
concentration (over prompts, at the report's query positions) and the absolute value
of its mean effect. Its interval is a percentile bootstrap over prompts: both the
concentration means and the effect means are recomputed on each resample of prompts.
It is computed over all heads and per layer (where a layer has at least three heads
with defined values).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from interv.stats import MIN_ITEMS, percentile_interval, spearman

__all__ = ["AGREEMENT_CAVEAT", "Agreement", "agreement"]

AGREEMENT_CAVEAT = (
    "A rank correlation across heads shows whether ordering heads by a concentration "
    "metric orders them like the size of their measured effect, for this model, task, "
    "intervention and these query positions. It does not show that concentration causes "
    "the effect, that one head's concentration predicts its own effect, or that the "
    "relation holds for other tasks, positions or models; per-layer values rest on few "
    "heads and their intervals are wide."
)
"""The sentence printed with every agreement table."""


@dataclass(frozen=True)
class Agreement:
    """Rank correlation of one concentration metric with |effect| over a set of heads.

    Attributes:
        kind: intervention class name whose effects are correlated.
        metric: concentration metric name.
        layer: the layer the heads come from; None = all layers.
        n_heads: number of heads with a defined concentration value.
        rho: Spearman's rho in [-1, 1] (NaN if either side is constant).
        ci_low, ci_high: percentile bootstrap interval over prompts.
    """

    kind: str
    metric: str
    layer: int | None
    n_heads: int
    rho: float
    ci_low: float
    ci_high: float


def agreement(
    *,
    kind: str,
    metric: str,
    layers: Sequence[int],
    per_prompt_effect: torch.Tensor,
    per_prompt_concentration: torch.Tensor,
    indices: torch.Tensor,
    level: float,
) -> tuple[Agreement, ...]:
    """Agreement over all heads, then per layer, for one kind and one metric.

    Args:
        kind: intervention class name (carried into the result).
        metric: concentration metric name (carried into the result).
        layers: ``[n_heads]`` layer of each head.
        per_prompt_effect: ``[n_heads, n_prompts]`` effect of each head's intervention
            on each prompt (metric unit).
        per_prompt_concentration: ``[n_prompts, n_heads]`` the head's concentration on
            each prompt (NaN where undefined).
        indices: ``[n_bootstrap, n_prompts]`` resampled prompt indices.
        level: confidence level of the interval.
    """
    defined = ~per_prompt_concentration.isnan().all(dim=0)
    layer_tensor = torch.tensor(list(layers))
    groups: list[tuple[int | None, torch.Tensor]] = [(None, defined)]
    groups += [(int(layer), defined & (layer_tensor == layer)) for layer in sorted(set(layers))]
    results = []
    for layer, selected in groups:
        n_heads = int(selected.sum())
        if n_heads < MIN_ITEMS:  # no rank correlation of fewer (interv.stats)
            continue
        effect = per_prompt_effect[selected].to(torch.float64)
        conc = per_prompt_concentration[:, selected].to(torch.float64)
        rho = spearman(conc.nanmean(dim=0), effect.mean(dim=-1).abs())
        boot_conc = conc[indices].nanmean(dim=1)  # [n_bootstrap, n_heads]
        boot_effect = effect[:, indices].mean(dim=-1).abs().T  # [n_bootstrap, n_heads]
        complete = ~boot_conc.isnan().any(dim=-1)
        low, high = percentile_interval(
            spearman(boot_conc[complete], boot_effect[complete]), level, n_items=indices.shape[1]
        )
        results.append(Agreement(kind, metric, layer, n_heads, float(rho), low, high))
    return tuple(results)
