"""interv: causal interpretability for transformers.

Attention *concentration* (how a head spreads its weights) and causal *effect* (how
much the target output changes when a component is intervened on) are different
questions. interv measures both, for the same scope, and never lets one stand in
for the other.

Importing ``interv`` is cheap and has no side effects: the public names below are
resolved lazily on first use, so neither torch, transformer-lens nor matplotlib is
imported until a function that needs them is touched.
"""

from __future__ import annotations

from interv._lazy import lazy_exports
from interv.errors import IntervError

__version__ = "0.1.0"

# public name -> module that owns it
_EXPORTS: dict[str, str] = {
    # concentration metrics (pure math)
    "entropy": "interv.metrics.concentration",
    "normalized_entropy": "interv.metrics.concentration",
    "effective_support": "interv.metrics.concentration",
    "max_weight": "interv.metrics.concentration",
    "top_k_mass": "interv.metrics.concentration",
    "available_keys": "interv.metrics.concentration",
    "sink_split": "interv.metrics.sink",
    "SinkSplit": "interv.metrics.sink",
    "entropy_change": "interv.metrics.sink",
    "EntropyChange": "interv.metrics.sink",
    "mean_entropy_change": "interv.metrics.sink",
    "clr": "interv.metrics.compositional",
    "aitchison_distance": "interv.metrics.compositional",
    "aitchison_split": "interv.metrics.compositional",
    "AitchisonSplit": "interv.metrics.compositional",
    "compare_rows": "interv.metrics.compare",
    # concentration of a model's heads (reduced inside hooks)
    "concentration": "interv.analysis.concentration",
    "HeadConcentration": "interv.analysis.concentration",
    # whole-model sink analyses
    "attention_rows": "interv.analysis._patterns",
    "head_similarity": "interv.analysis.similarity",
    "HeadSimilarity": "interv.analysis.similarity",
    "cluster_heads": "interv.analysis.clustering",
    "HeadClustering": "interv.analysis.clustering",
    "entropy_change_attribution": "interv.analysis.attribution",
    "EntropyAttribution": "interv.analysis.attribution",
    "checkpoint_entropy_change": "interv.analysis.attribution",
    "pruning_curves": "interv.analysis.pruning",
    "rank_heads": "interv.analysis.pruning",
    "PruningCurves": "interv.analysis.pruning",
    "TaskEvaluation": "interv.analysis.pruning",
    "TextEvaluation": "interv.analysis.pruning",
    "EmbeddingEvaluation": "interv.analysis.pruning",
    "plot_pruning_curves": "interv.analysis.pruning",
    # interventions and the runner
    "run": "interv.engine.runner",
    "InterventionResult": "interv.engine.results",
    "TargetMetric": "interv.engine.targets",
    "ReferenceSet": "interv.engine.interventions",
    "ZeroAblation": "interv.engine.interventions",
    "MeanAblation": "interv.engine.interventions",
    "ResampleAblation": "interv.engine.interventions",
    "ActivationPatch": "interv.engine.interventions",
    "ValueScale": "interv.engine.interventions",
    "ValueReplace": "interv.engine.interventions",
    "AttentionKnockout": "interv.engine.interventions",
    "PatternPatch": "interv.engine.interventions",
    "ValuePatch": "interv.engine.interventions",
    "Combined": "interv.engine.interventions",
    "approximate_head_patching_scores": "interv.engine.attribution",
    # sweeps and reports
    "run_sweep": "interv.sweeps.execute",
    "load_sweep": "interv.sweeps.collect",
    "merge_sweeps": "interv.sweeps.collect",
    "build_report": "interv.report.table",
    "Report": "interv.report.table",
    "save_report": "interv.report.render",
    # models and tasks
    "load_model": "interv.models.loading",
    "PromptPairs": "interv.tasks.pairs",
    "TokenizedPairs": "interv.tasks.tokenized",
    "load_task": "interv.tasks.builtin",
    "available_tasks": "interv.tasks.builtin",
}

__all__ = ["IntervError", "__version__", *sorted(_EXPORTS)]


__getattr__, __dir__ = lazy_exports("interv", _EXPORTS, globals())
