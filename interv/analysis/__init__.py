"""Analyses of a whole model: run it and reduce what its heads do.

- :mod:`interv.analysis.concentration`: entropy, sink split and value-aware numbers
  of every head, reduced inside the hooks (no attention cache).
- :mod:`interv.analysis.similarity`: head-by-head similarity under keep-sink and
  drop-sink, with the share of "which head is closer" verdicts that flip.
- :mod:`interv.analysis.clustering`: head clusterings under both conventions and
  their agreement (adjusted Rand index, with a bootstrap interval over prompts).
- :mod:`interv.analysis.entropy_change`: the change of entropy between two conditions,
  split exactly into sink growth and content sharpening.
- :mod:`interv.analysis.pruning`: heads ranked by each concentration metric, by exact
  effect and by attribution, mean-ablated cumulatively: loss against heads removed.

- :mod:`interv.analysis.pairwise`: pairwise ablations of heads and their interaction
  terms (do two heads back each other up?).
- :mod:`interv.analysis.sinks`: Gu et al.'s sink rate of every head for one key, with that
  key's key and value norms, and the special inputs (random tokens, one repeated token).
- :mod:`interv.analysis.token_flow`: per layer, each token's attention by weight and by
  norm (Kobayashi et al.), and attention rollout (a summary of weights, not causal).
- :mod:`interv.analysis.text_effects`: next-token loss of a text under interventions (e.g. the
  attention masks of :mod:`interv.engine.masks`), with intervals over chunks.
- :func:`approximate_head_patching_scores` (:mod:`interv.engine.attribution_patching`):
  attribution patching, a first-order approximation of head patching, for screening.

The public names below are resolved lazily; importing this package imports nothing heavy.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from interv._lazy import lazy_exports

# public name -> module that owns it
_EXPORTS: dict[str, str] = {
    "attention_rows": "interv.analysis._patterns",
    "AttentionRows": "interv.analysis._patterns",
    "head_similarity": "interv.analysis.similarity",
    "HeadSimilarity": "interv.analysis.similarity",
    "cluster_heads": "interv.analysis.clustering",
    "HeadClustering": "interv.analysis.clustering",
    "clustering_agreement": "interv.analysis.clustering",
    "ClusteringAgreement": "interv.analysis.clustering",
    "entropy_change_attribution": "interv.analysis.entropy_change",
    "EntropyAttribution": "interv.analysis.entropy_change",
    "pruning_curves": "interv.analysis.pruning",
    "rank_heads": "interv.analysis.pruning",
    "PruningCurves": "interv.analysis.pruning",
    "TaskEvaluation": "interv.analysis.pruning",
    "TextEvaluation": "interv.analysis.pruning",
    "EmbeddingEvaluation": "interv.analysis.pruning",
    "approximate_head_patching_scores": "interv.engine.attribution_patching",
    "interactions": "interv.analysis.pairwise",
    "head_interactions": "interv.analysis.pairwise",
    "HeadInteractions": "interv.analysis.pairwise",
    "pair_design": "interv.analysis.pairwise",
    "sink_profile": "interv.analysis.sinks",
    "SinkProfile": "interv.analysis.sinks",
    "random_tokens": "interv.analysis.sinks",
    "repeated_tokens": "interv.analysis.sinks",
    "token_attention": "interv.analysis.token_flow",
    "TokenAttention": "interv.analysis.token_flow",
    "key_shares": "interv.analysis.token_flow",
    "KeyShares": "interv.analysis.token_flow",
    "text_loss": "interv.analysis.text_effects",
    "TextLoss": "interv.analysis.text_effects",
}


__all__ = sorted(_EXPORTS)

__getattr__, __dir__ = lazy_exports("interv.analysis", _EXPORTS, globals())


if TYPE_CHECKING:  # pragma: no cover - static analysers see the real names
    from interv.analysis._patterns import AttentionRows, attention_rows
    from interv.analysis.clustering import (
        ClusteringAgreement,
        HeadClustering,
        cluster_heads,
        clustering_agreement,
    )
    from interv.analysis.entropy_change import EntropyAttribution, entropy_change_attribution
    from interv.analysis.pairwise import (
        HeadInteractions,
        head_interactions,
        interactions,
        pair_design,
    )
    from interv.analysis.pruning import (
        EmbeddingEvaluation,
        PruningCurves,
        TaskEvaluation,
        TextEvaluation,
        pruning_curves,
        rank_heads,
    )
    from interv.analysis.similarity import HeadSimilarity, head_similarity
    from interv.analysis.sinks import SinkProfile, random_tokens, repeated_tokens, sink_profile
    from interv.analysis.text_effects import TextLoss, text_loss
    from interv.analysis.token_flow import KeyShares, TokenAttention, key_shares, token_attention
    from interv.engine.attribution_patching import approximate_head_patching_scores
