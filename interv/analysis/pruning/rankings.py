"""Orders of heads, least important first: by concentration, exact effect, attribution, chance."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import torch

from interv.analysis.concentration import concentration
from interv.analysis.pruning.evaluations import Evaluation, Head, TaskEvaluation
from interv.engine.architecture import architecture_of
from interv.engine.attribution_patching import approximate_head_patching_scores
from interv.engine.sites import check_head
from interv.errors import IntervError

if TYPE_CHECKING:
    from interv.tasks.tokenized import TokenizedPairs

__all__ = [
    "RANKINGS",
    "check_heads",
    "check_rankings",
    "check_seeds",
    "random_order_name",
    "rank_heads",
    "ranking_rule",
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
    model: Any, evaluation: Evaluation, rankings: Sequence[str], off_row_sink: str | None
) -> dict[str, torch.Tensor]:
    """Per ranking, its concentration number per head, ``[layer, head_index]``: from
    :func:`interv.concentration` (each layer's own admitted keys: causal or bidirectional,
    padding, sliding window or chunk), mean over each prompt's query rows, then over
    prompts, sink = position 0; ``off_row_sink`` as in :func:`interv.concentration`."""
    with torch.no_grad():
        heads = concentration(model, **evaluation.concentration_input(), off_row_sink=off_row_sink)
    return {name: heads.per_head(_CONCENTRATION_METRIC[name]) for name in rankings}


def ranking_rule(model: Any, name: str, off_row_sink: str | None = None) -> str:
    """What ranking ``name`` (of :data:`RANKINGS`) ranks by on ``model``: its description,
    and for the concentration rankings the keys each layer admits (the model's mask rule,
    e.g. ``"causal AND padding AND sliding window 4 (layers 0, 2); ..."``) and how an
    off-row sink was counted."""
    if name not in _CONCENTRATION_METRIC:
        return RANKINGS[name]
    sink = "; off-row sink counted as an extra sink key" if off_row_sink == "as_key" else ""
    return (
        f"{RANKINGS[name]}; over the keys each layer admits: "
        f"{architecture_of(model).mask_rule}{sink}"
    )


def rank_heads(
    model: Any,
    evaluation: Evaluation,
    *,
    rankings: Sequence[str] = tuple(RANKINGS),
    heads: Sequence[Head] | None = None,
    attribution_task: TokenizedPairs | None = None,
    seed: int = 0,
    random_seeds: Sequence[int] | None = None,
    off_row_sink: str | None = None,
) -> dict[str, tuple[Head, ...]]:
    """Orders of ``heads``, least important first, under each ranking of :data:`RANKINGS`.

    Concentration rankings average the head's numbers (:func:`interv.concentration`, over
    the keys each layer admits) over every query position of the evaluation's inputs, then
    over prompts (sink = position 0).
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
        off_row_sink: for the concentration rankings on a model with a learned off-row
            sink (gpt-oss): None (default) refuses it, ``"as_key"`` counts the deficit as
            an extra sink key (:func:`interv.concentration`).

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
        per_head = _per_head_concentration(model, evaluation, needs_concentration, off_row_sink)
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
