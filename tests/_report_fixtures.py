"""Hand-made engine results and head concentrations for the report tests (no model)."""

from __future__ import annotations

from collections.abc import Sequence

import torch

from interv.analysis.concentration import METRICS, HeadConcentration
from interv.engine.results import InterventionResult, MetricInfo, Scope, normalized_recovery

MODEL = "test-model"


def make_result(
    values: torch.Tensor,
    clean: torch.Tensor,
    corrupted: torch.Tensor,
    kinds: Sequence[str],
    descriptions: Sequence[str],
    base_runs: Sequence[str] | None = None,
) -> InterventionResult:
    """An InterventionResult with ``values`` ``[k, n]`` and the given baselines."""
    n = clean.shape[0]
    base_runs = base_runs or ["clean"] * len(kinds)
    return InterventionResult(
        values=values,
        clean=clean,
        corrupted=corrupted,
        recovery=normalized_recovery(values, clean, corrupted, 1e-6),
        n_undefined_recovery=int(((clean - corrupted).abs() <= 1e-6).sum()),
        recovery_atol=1e-6,
        descriptions=tuple(descriptions),
        kinds=tuple(kinds),
        base_runs=tuple(base_runs),
        metric=MetricInfo("logit_diff", "logits", "target minus foil logit"),
        scope=Scope(MODEL, "toy", n, 5, tuple([4] * n), "right"),
    )


def make_concentration(per_prompt: dict[str, torch.Tensor]) -> HeadConcentration:
    """A HeadConcentration with one query (the answer, position 4 of 5-token prompts).

    ``per_prompt`` maps some metric names to ``[n_prompts, layer, head]`` tensors;
    the others are filled with 0.5.
    """
    shape = next(iter(per_prompt.values())).shape
    n = shape[0]
    tensors = {
        name: per_prompt.get(name, torch.full(shape, 0.5)).to(torch.float64)[..., None]
        for name in METRICS
    }
    return HeadConcentration(
        **tensors,
        n_available_keys=torch.full((n, 1), 5),
        query_positions=(-1,),
        query_index=torch.full((n, 1), 4),
        sink_positions=(0,),
        model_name=MODEL,
        prompt_lengths=tuple([5] * n),
    )
