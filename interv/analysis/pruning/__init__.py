"""Pruning curves: mean-ablate heads cumulatively in the order a ranking gives.

A *ranking* orders heads from least to most important under some criterion: an
attention-concentration number (raw entropy, content entropy, sink mass), a
value-aware number (contribution norm), the exact causal effect of ablating the
head alone, a first-order attribution score, or a seeded random order (several seeds
give several random orders, ``random_seeds=``). A *pruning curve* mean-ablates the
first ``k`` heads of an order together (every ``k = 0 .. K``, or chosen ``ks=``) and
evaluates the model each time. Each value is a mean over items (prompts, text chunks,
sentences); the curves keep every item's value, so :meth:`PruningCurves.intervals` and
:meth:`PruningCurves.difference` give percentile bootstrap intervals over items.
Pruning removes the least important heads first, so a ranking that knows which heads
matter keeps the curve flat for longer. Comparing the curves of concentration rankings
with the curve of the exact effect shows how far "concentrated" is from "important".

Evaluations (each states its unit and the reference of the mean ablation):

- :class:`TaskEvaluation`: a target metric of a prompt-pair task at the answer
  position, through :func:`interv.engine.runner.run` with
  ``Combined(parts=(MeanAblation(L, h), ...))``: each ablated head's ``z`` is replaced
  by its mean over the task's clean prompts at the same position. ``metric="loss"`` is
  the cross-entropy of the target token (``-log_prob``, nats).
- :class:`TextEvaluation`: language-model loss on a text sample (by default the one
  shipped in ``interv/data/text_sample.txt``), the mean next-token cross-entropy over
  every predicted position, in nats/token (perplexity = ``exp`` of it). The text is
  one token stream cut into chunks, so the reference is *pooled*: each ablated head's
  ``z`` is replaced at every position by its mean over all positions of all chunks.
- :class:`EmbeddingEvaluation`: for encoders without a trained output head
  (all-MiniLM-L6-v2): the mean over sentences of the cosine similarity between the
  sentence embedding under ablation and the unablated one (unit: cosine, in [-1, 1];
  1 = unchanged). Reference: pooled over the sentences' real tokens.

Every evaluation runs through the engine: each set of ablated heads is one
:class:`~interv.engine.interventions.Combined` of mean ablations, stacked with the other
sets along the batch axis and started at its earliest ablated block
(:mod:`interv.engine.stacking`); text and embedding evaluations read out the whole
sequence (logits, final hidden states) instead of the answer position.

Modules: :mod:`~interv.analysis.pruning.evaluations` (what a curve measures),
:mod:`~interv.analysis.pruning.rankings` (orders of heads),
:mod:`~interv.analysis.pruning.curves` (the curves); the plot is
:func:`interv.report.plots.plot_pruning_curves`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from interv._lazy import lazy_exports

# public name -> module that owns it
_EXPORTS: dict[str, str] = {
    "PruningCurves": "interv.analysis.pruning.curves",
    "pruning_curves": "interv.analysis.pruning.curves",
    "EmbeddingEvaluation": "interv.analysis.pruning.evaluations",
    "Evaluation": "interv.analysis.pruning.evaluations",
    "Head": "interv.analysis.pruning.evaluations",
    "TaskEvaluation": "interv.analysis.pruning.evaluations",
    "TextEvaluation": "interv.analysis.pruning.evaluations",
    "text_sample": "interv.analysis.pruning.evaluations",
    "RANKINGS": "interv.analysis.pruning.rankings",
    "check_rankings": "interv.analysis.pruning.rankings",
    "random_order_name": "interv.analysis.pruning.rankings",
    "rank_heads": "interv.analysis.pruning.rankings",
}

__all__ = sorted(_EXPORTS)

__getattr__, __dir__ = lazy_exports("interv.analysis.pruning", _EXPORTS, globals())


if TYPE_CHECKING:  # pragma: no cover - static analysers see the real names
    from interv.analysis.pruning.curves import PruningCurves, pruning_curves
    from interv.analysis.pruning.evaluations import (
        EmbeddingEvaluation,
        Evaluation,
        Head,
        TaskEvaluation,
        TextEvaluation,
        text_sample,
    )
    from interv.analysis.pruning.rankings import (
        RANKINGS,
        check_rankings,
        random_order_name,
        rank_heads,
    )
