"""Pruning curves: the first ``k`` heads of each order mean-ablated together, ``k = 0..K``."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch

from interv.analysis.pruning.evaluations import Evaluation, Head
from interv.analysis.pruning.rankings import RANKINGS, check_heads, rank_heads
from interv.engine.sites import head_label
from interv.errors import IntervError

if TYPE_CHECKING:
    from interv.tasks.tokenized import TokenizedPairs

__all__ = ["PruningCurves", "pruning_curves"]


@dataclass(frozen=True, eq=False)
class PruningCurves:
    """One evaluation per number of heads removed, for each order.

    Attributes:
        orders: order name -> the heads removed, in order (length ``max_heads``).
        values: order name -> ``[max_heads + 1]`` float64; entry ``k`` is the
            evaluation with the first ``k`` heads mean-ablated together (``k = 0``:
            unablated), in :attr:`unit`.
        evaluation: what is measured.
        unit: the unit of every value.
        lower_is_better: True for losses, False for similarities and logit scores.
        ablation: the semantics sentence of the ablation.
        scope: model, inputs and aggregation.
        rules: order name -> what the ranking ranks by and its direction ("given" for
            orders passed in).
    """

    orders: dict[str, tuple[Head, ...]]
    values: dict[str, torch.Tensor]
    evaluation: str
    unit: str
    lower_is_better: bool
    ablation: str
    scope: str
    rules: dict[str, str]

    @property
    def max_heads(self) -> int:
        """Most heads removed on any curve."""
        return max(len(order) for order in self.orders.values())

    def describe(self, name: str) -> str:
        """One line: the curve of order ``name`` with its unit."""
        if name not in self.orders:
            raise IntervError(f"unknown order {name!r}; choose one of {tuple(self.orders)}")
        points = ", ".join(f"{float(v):.4g}" for v in self.values[name])
        return (
            f"{name}: {self.evaluation} ({self.unit}) at k = 0..{len(self.orders[name])}: {points}"
        )

    def to_records(self) -> list[dict[str, Any]]:
        """One plain dict per order and ``k``, for tables and reports.

        Keys: ``order``, ``rule``, ``k`` (heads removed), ``removed`` (the k-th head,
        e.g. ``"L1H2"``; None at ``k = 0``), ``heads_removed`` (all k), ``value``,
        ``unit``, ``evaluation``, ``semantics``, ``scope``.
        """
        records = []
        for name, order in self.orders.items():
            for k, value in enumerate(self.values[name].tolist()):
                records.append(
                    {
                        "order": name,
                        "rule": self.rules[name],
                        "k": k,
                        "removed": None if k == 0 else head_label(*order[k - 1]),
                        "heads_removed": [head_label(*head) for head in order[:k]],
                        "value": value,
                        "unit": self.unit,
                        "evaluation": self.evaluation,
                        "semantics": self.ablation,
                        "scope": self.scope,
                    }
                )
        return records

    def to_pandas(self) -> Any:
        """A long ``pandas.DataFrame`` of :meth:`to_records`, one row per order and heads
        removed, with unit and semantics (:func:`interv.frames.pruning_frame`; needs pandas)."""
        from interv.frames import pruning_frame

        return pruning_frame(self)


def pruning_curves(
    model: Any,
    evaluation: Evaluation,
    *,
    orders: dict[str, Sequence[Head]] | Sequence[str] = tuple(RANKINGS),
    max_heads: int | None = None,
    heads: Sequence[Head] | None = None,
    attribution_task: TokenizedPairs | None = None,
    seed: int = 0,
) -> PruningCurves:
    """Mean-ablate the first ``k`` heads of each order together, ``k = 0 .. max_heads``.

    Args:
        model: a transformer-lens ``TransformerBridge`` in eval mode.
        evaluation: a :class:`TaskEvaluation`, :class:`TextEvaluation` or
            :class:`EmbeddingEvaluation`.
        orders: explicit orders (name -> heads, least important first), or ranking
            names of :data:`RANKINGS` computed with :func:`rank_heads`.
        max_heads: most heads removed; default the length of the longest order.
        heads: candidate heads for ranking names; default every head.
        attribution_task, seed: passed to :func:`rank_heads`.

    Returns:
        :class:`PruningCurves`.

    Raises:
        IntervError: unknown rankings, bad heads, or ``max_heads`` outside
            ``[0, shortest order length]``.
    """
    if isinstance(orders, dict):
        given = {name: check_heads(model, order) for name, order in orders.items()}
        rules = dict.fromkeys(given, "given")
    else:
        given = rank_heads(
            model,
            evaluation,
            rankings=tuple(orders),
            heads=heads,
            attribution_task=attribution_task,
            seed=seed,
        )
        rules = {name: RANKINGS[name] for name in given}
    shortest = min(len(order) for order in given.values())
    if max_heads is None:
        max_heads = shortest
    if (
        isinstance(max_heads, bool)
        or not isinstance(max_heads, int)
        or not (0 <= max_heads <= shortest)
    ):
        raise IntervError(f"max_heads must be an int in [0, {shortest}]; got {max_heads!r}")
    kept = {name: order[:max_heads] for name, order in given.items()}
    # One evaluation call for every distinct set of heads (k = 0 is shared by all orders).
    distinct = list(
        dict.fromkeys(order[:k] for order in kept.values() for k in range(max_heads + 1))
    )
    measured = dict(zip(distinct, evaluation.values(model, distinct).tolist(), strict=True))
    values = {
        name: torch.tensor([measured[order[:k]] for k in range(max_heads + 1)], dtype=torch.float64)
        for name, order in kept.items()
    }
    return PruningCurves(
        orders=kept,
        values=values,
        evaluation=evaluation.name,
        unit=evaluation.unit,
        lower_is_better=evaluation.lower_is_better,
        ablation=evaluation.ablation,
        scope=f"model {getattr(model.cfg, 'model_name', 'unknown')}; {evaluation.scope}",
        rules=rules,
    )
