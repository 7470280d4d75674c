"""Hand-made engine results and head concentrations for the report tests (no model)."""

from __future__ import annotations

import re
from collections.abc import Sequence

import torch

from interv.analysis.concentration import METRICS, HeadConcentration
from interv.engine.results import InterventionResult, MetricInfo, Scope
from interv.engine.sites import Site
from interv.provenance import Provenance

MODEL = "test-model"


def make_result(
    values: torch.Tensor,
    clean: torch.Tensor,
    corrupted: torch.Tensor,
    kinds: Sequence[str],
    descriptions: Sequence[str],
    base_runs: Sequence[str] | None = None,
    sites: Sequence[Site | None] | None = None,
) -> InterventionResult:
    """An InterventionResult with ``values`` ``[k, n]`` and the given baselines.

    Without ``sites``, a description naming ``L{layer}H{head}`` is filed under that
    head's output ``z`` (these fixtures' own convention), any other under no site.
    """
    n = clean.shape[0]
    if sites is None:
        found = [re.search(r"\bL(\d+)H(\d+)\b", d) for d in descriptions]
        sites = [None if m is None else Site("z", int(m[1]), int(m[2])) for m in found]
    return InterventionResult.build(
        values,
        clean,
        corrupted,
        kinds=kinds,
        descriptions=descriptions,
        base_runs=base_runs or ["clean"] * len(kinds),
        sites=sites,
        params=[{"kind": kind} for kind in kinds],
        metric=MetricInfo("logit_diff", "logits", "target minus foil logit"),
        scope=Scope(MODEL, "toy", n, 5, tuple([4] * n), "right"),
        provenance=Provenance(MODEL, dtype="float32", prompts="toy-prompts", n_prompts=n),
        recovery_atol=1e-6,
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
        n_available_keys=torch.full((n, shape[1], 1), 5),
        query_positions=(-1,),
        query_index=torch.full((n, 1), 4),
        sink_positions=(0,),
        model_name=MODEL,
        provenance=Provenance(MODEL, dtype="float32", prompts="toy-prompts", n_prompts=n),
        prompt_lengths=tuple([5] * n),
    )
