"""Orders of heads, least important first: by concentration, exact effect, attribution, chance."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import torch

from interv.analysis._patterns import attention_rows
from interv.analysis.concentration import concentration
from interv.analysis.pruning.evaluations import Evaluation, Head, TaskEvaluation
from interv.engine.attribution_patching import approximate_head_patching_scores
from interv.engine.sites import check_head
from interv.errors import IntervError
from interv.metrics.sink import sink_split

if TYPE_CHECKING:
    from interv.tasks.tokenized import TokenizedPairs

__all__ = [
    "RANKINGS",
    "check_heads",
    "check_rankings",
    "check_seeds",
    "random_order_name",
    "rank_heads",
]

RANKINGS: dict[str, str] = {
    "entropy": (
        "raw attention entropy (nats), ascending: most concentrated heads removed first. "
        "Tests the reading that a collapsed head (mass parked on one key, often the sink) "
        "is idle; the reverse reading would keep them"
    ),
    "content_entropy": (
        "content entropy H(q) without the sink (nats), ascending: same direction as raw "
        "entropy, so the two curves differ only by the sink split"
    ),
    "sink_mass": (
        "sink mass (fraction), descending: heads that park the most mass on the sink "
        "removed first (the 'dormant head' reading)"
    ),
    "contribution": (
        "value-aware contribution norm sum_i a_i ||v_i W_O|| (residual-stream units), "
        "ascending: heads writing the least removed first"
    ),
    "exact_effect": (
        "|exact effect| of mean-ablating the head alone, under the curve's own "
        "evaluation, ascending: least important removed first"
    ),
    "attribution": (
        "|attribution-patching score| (first-order estimate of the head's denoising effect "
        "on a task, an approximation), ascending: least important removed first"
    ),
    "random": "uniformly random order (seeded)",
}
"""Ranking name -> what it ranks by, its direction and why. NaN scores go last."""

_CONCENTRATION_METRIC = {
    "entropy": "entropy",
    "content_entropy": "content_entropy",
    "sink_mass": "sink_mass",
    "contribution": "contribution_norm",
}
_DESCENDING = frozenset({"sink_mass"})


def check_heads(model: Any, heads: Sequence[Head] | None) -> tuple[Head, ...]:
    """``heads`` as distinct checked ``(layer, head)`` pairs; None = every head of the model."""
    cfg = model.cfg
    if heads is None:
        return tuple((layer, head) for layer in range(cfg.n_layers) for head in range(cfg.n_heads))
    checked = tuple((int(layer), int(head)) for layer, head in heads)
    for layer, head in checked:
        check_head(cfg, layer, head)
    if not checked or len(set(checked)) != len(checked):
        raise IntervError(f"heads must be a non-empty list of distinct (layer, head); got {heads}")
    return checked


def _order(heads: tuple[Head, ...], scores: torch.Tensor, descending: bool) -> tuple[Head, ...]:
    """Heads sorted by score (ties: by layer, head); NaN scores last."""
    values = [float(s) for s in scores]

    def key(item: tuple[Head, float]) -> tuple[bool, float, Head]:
        head, value = item
        nan = value != value
        return (nan, 0.0 if nan else (-value if descending else value), head)

    return tuple(head for head, _ in sorted(zip(heads, values, strict=True), key=key))


def check_rankings(rankings: Sequence[str]) -> None:
    """Raise :class:`IntervError` unless ``rankings`` is a non-empty list of :data:`RANKINGS`."""
    if isinstance(rankings, str) or not rankings:
        raise IntervError(
            f"rankings must be a non-empty list of {tuple(RANKINGS)}; got {rankings!r}"
        )
    unknown = [name for name in rankings if name not in RANKINGS]
    if unknown:
        raise IntervError(f"unknown rankings {unknown!r}; choose from {tuple(RANKINGS)}")


def _per_head_concentration(
    model: Any, evaluation: Evaluation, rankings: Sequence[str]
) -> dict[str, torch.Tensor]:
    """Per ranking, its concentration number per head, ``[layer, head_index]``.

    Mean over each prompt's query rows, then over prompts, sink = position 0. Causal
    models use :func:`interv.concentration` (reduced inside hooks). Bidirectional
    encoders (``cfg.attention_dir == "bidirectional"``, e.g. MiniLM), which
    :func:`interv.concentration` does not cover yet, use their full patterns from
    :func:`interv.analysis.attention_rows` and :func:`interv.metrics.sink_split` (no
    ``"contribution"``).
    """
    inputs = evaluation.concentration_input()
    if getattr(model.cfg, "attention_dir", "causal") != "bidirectional":
        with torch.no_grad():
            heads = concentration(model, **inputs)
        return {name: heads.per_head(_CONCENTRATION_METRIC[name]) for name in rankings}
    if "contribution" in rankings:
        allowed = tuple(name for name in RANKINGS if name != "contribution")
        raise IntervError(
            "ranking 'contribution' needs interv.concentration, which covers causal models "
            f"only; for this bidirectional model choose from {allowed}"
        )
    rows = attention_rows(model, **inputs)
    split = sink_split(
        rows.pattern,
        sink=rows.sink_mask[:, None, None, None, :],
        key_mask=rows.key_mask[:, None, None],
    )
    included = rows.included[:, None, None, :]
    return {
        name: getattr(split, _CONCENTRATION_METRIC[name])
        .where(included, torch.nan)
        .nanmean(-1)
        .nanmean(0)
        for name in rankings
    }


def rank_heads(
    model: Any,
    evaluation: Evaluation,
    *,
    rankings: Sequence[str] = tuple(RANKINGS),
    heads: Sequence[Head] | None = None,
    attribution_task: TokenizedPairs | None = None,
    seed: int = 0,
    random_seeds: Sequence[int] | None = None,
) -> dict[str, tuple[Head, ...]]:
    """Orders of ``heads``, least important first, under each ranking of :data:`RANKINGS`.

    Concentration rankings average the head's numbers over every query position of
    the evaluation's inputs, then over prompts (sink = position 0; see
    :func:`_per_head_concentration` for bidirectional encoders).
    ``"exact_effect"`` mean-ablates each head alone under ``evaluation`` (one
    evaluation per head). ``"attribution"`` uses
    :func:`interv.engine.attribution_patching.approximate_head_patching_scores` on
    ``attribution_task`` (default: the evaluation's task), an approximation.

    Args:
        model: a transformer-lens ``TransformerBridge``.
        evaluation: what the pruning curve will measure.
        rankings: names in :data:`RANKINGS`.
        heads: candidate heads ``(layer, head)``; default every head.
        attribution_task: prompt pairs for ``"attribution"``.
        seed: seed of ``"random"``.
        random_seeds: several seeds instead of ``seed``: ``"random"`` then gives one
            order per seed, named by :func:`random_order_name` (``"random (seed 3)"``),
            in the place of ``"random"``.

    Returns:
        Ranking name -> every candidate head, least important first.

    Raises:
        IntervError: unknown ranking, bad heads, ``"attribution"`` without a task, or
            ``random_seeds`` that are not distinct ints.
    """
    check_rankings(rankings)
    seeds = check_seeds(random_seeds)
    candidates = check_heads(model, heads)
    rows = torch.tensor([c[0] for c in candidates])
    cols = torch.tensor([c[1] for c in candidates])
    orders: dict[str, tuple[Head, ...]] = {}
    needs_concentration = [name for name in rankings if name in _CONCENTRATION_METRIC]
    if needs_concentration:
        per_head = _per_head_concentration(model, evaluation, needs_concentration)
        for name in needs_concentration:
            orders[name] = _order(candidates, per_head[name][rows, cols], name in _DESCENDING)
    if "exact_effect" in rankings:
        values = evaluation.values(model, [(), *((head,) for head in candidates)])
        orders["exact_effect"] = _order(candidates, (values[1:] - values[0]).abs(), False)
    if "attribution" in rankings:
        task = attribution_task
        if task is None and isinstance(evaluation, TaskEvaluation):
            task = evaluation.task
        if task is None:
            raise IntervError(
                "ranking 'attribution' needs prompt pairs: pass attribution_task=, or use a "
                "TaskEvaluation, or leave 'attribution' out of rankings"
            )

        metric = evaluation.engine_metric if isinstance(evaluation, TaskEvaluation) else "log_prob"
        scores = approximate_head_patching_scores(model, task, metric)
        orders["attribution"] = _order(candidates, scores[rows, cols].abs(), False)
    if "random" in rankings:
        for chosen in (seed,) if seeds is None else seeds:
            generator = torch.Generator().manual_seed(chosen)
            permutation = torch.randperm(len(candidates), generator=generator)
            name = "random" if seeds is None else random_order_name(chosen)
            orders[name] = tuple(candidates[i] for i in permutation.tolist())
    names: list[str] = []
    for ranking in rankings:
        if ranking == "random" and seeds is not None:
            names.extend(random_order_name(s) for s in seeds)
        else:
            names.append(ranking)
    return {name: orders[name] for name in names}


def random_order_name(seed: int) -> str:
    """The name of the random order of ``seed`` when several seeds are asked for."""
    return f"random (seed {seed})"


def check_seeds(seeds: Sequence[int] | None) -> tuple[int, ...] | None:
    """``seeds`` as a tuple of distinct ints (None stays None)."""
    if seeds is None:
        return None
    if isinstance(seeds, str | bytes) or not isinstance(seeds, Sequence):
        raise IntervError(f"random_seeds must be a sequence of distinct ints; got {seeds!r}")
    checked = tuple(seeds)
    if (
        not checked
        or any(isinstance(s, bool) or not isinstance(s, int) for s in checked)
        or len(set(checked)) != len(checked)
    ):
        raise IntervError(f"random_seeds must be a non-empty list of distinct ints; got {seeds!r}")
    return checked
