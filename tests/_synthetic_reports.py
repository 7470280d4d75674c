"""Reports of the demo's shape built from hand-made results (no model): the demo's five
interventions per head on chosen layers, then one residual patch per layer x position.

``synthetic_report(n_layers=30, n_heads=9)`` has the shape of the full SmolLM2-135M demo
(270 heads x 5 kinds); ``layers=(17, 20, 23)`` the three-layer one.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from interv.analysis.concentration import METRICS, HeadConcentration
from interv.demo import demo_interventions
from interv.engine.results import InterventionResult, MetricInfo, Scope, intervention_fields
from interv.provenance import Provenance
from interv.report.report import Report
from interv.report.table import build_report

MODEL = "synthetic-model"


def synthetic_report(
    *,
    n_layers: int,
    n_heads: int,
    layers: Sequence[int] | None = None,
    n_prompts: int = 8,
    n_positions: int = 18,
    n_bootstrap: int = 200,
    seed: int = 0,
) -> Report:
    """A report with random effects and concentration of the demo's shape."""
    layers = list(range(n_layers)) if layers is None else list(layers)
    generator = torch.Generator().manual_seed(seed)
    interventions = demo_interventions(n_layers, n_heads, n_positions, layers)
    clean = torch.full((n_prompts,), 3.0) + 0.1 * torch.randn(n_prompts, generator=generator)
    # most interventions do little, a few a lot (effects of up to a few logits)
    scale = torch.rand(len(interventions), 1, generator=generator) ** 4 * 3
    shift = scale * torch.randn(len(interventions), 1, generator=generator)
    noise = 0.3 * scale * torch.randn(len(interventions), n_prompts, generator=generator)
    values = clean + shift + noise
    corrupted = torch.zeros(n_prompts)
    result = InterventionResult.build(
        values,
        clean,
        corrupted,
        **intervention_fields(interventions, None),
        metric=MetricInfo("logit_diff", "logits", "target minus foil logit"),
        scope=Scope(
            MODEL, "toy", n_prompts, n_positions, tuple([n_positions - 1] * n_prompts), "right"
        ),
        provenance=Provenance(MODEL, dtype="float32", prompts="toy-prompts", n_prompts=n_prompts),
        recovery_atol=1e-6,
    )
    shape = (n_prompts, n_layers, n_heads, 1)
    per_metric = {
        name: torch.rand(shape, generator=generator, dtype=torch.float64) for name in METRICS
    }
    concentration = HeadConcentration(
        **per_metric,
        n_available_keys=torch.full((n_prompts, n_layers, 1), n_positions),
        query_positions=(-1,),
        query_index=torch.full((n_prompts, 1), n_positions - 1),
        sink_positions=(0,),
        model_name=MODEL,
        provenance=Provenance(MODEL, dtype="float32", prompts="toy-prompts", n_prompts=n_prompts),
        prompt_lengths=tuple([n_positions] * n_prompts),
    )
    return build_report(
        result, concentration, interventions=interventions, n_bootstrap=n_bootstrap, seed=seed
    )
