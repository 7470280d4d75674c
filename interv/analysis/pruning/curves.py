"""Pruning curves: the first ``k`` heads of each order mean-ablated together, at chosen ``k``."""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import torch

from interv._pandas import require_pandas
from interv.analysis.pruning.evaluations import Evaluation, Head
from interv.analysis.pruning.rankings import (
    RANKINGS,
    check_heads,
    check_seeds,
    random_order_name,
    rank_heads,
    ranking_rule,
)
from interv.engine.sites import head_label
from interv.errors import IntervError
from interv.stats import bootstrap_indices, percentile_interval

if TYPE_CHECKING:
    import pandas

    from interv.tasks.tokenized import TokenizedPairs

__all__ = ["PruningCurves", "pruning_curves"]


@dataclass(frozen=True, eq=False)
class PruningCurves:
    """One evaluation per number of heads removed, for each order.

    Attributes:
        orders: order name -> the heads removed, in order (length ``max_heads``).
        values: order name -> ``[len(ks)]`` float64; entry ``i`` is the evaluation with
            the first ``ks[i]`` heads mean-ablated together (``k = 0``: unablated), in
            :attr:`unit`: the mean over items of :attr:`item_values`.
        evaluation: what is measured.
        unit: the unit of every value.
        lower_is_better: True for losses, False for similarities and logit scores.
        ablation: the semantics sentence of the ablation.
        scope: model, inputs and aggregation.
        rules: order name -> what the ranking ranks by and its direction ("given" for
            orders passed in).
        ks: the numbers of heads removed at which the curves are evaluated, ascending;
            default (empty at construction) ``0 .. len(values) - 1``.
        item_values: order name -> ``[len(ks), n_items]`` float64 value of each item
            (prompt, text chunk or sentence, :attr:`items`) in :attr:`unit`; empty when
            not measured (no intervals then).
        items: what an item is, e.g. ``"chunks"``.
    """

    orders: dict[str, tuple[Head, ...]]
    values: dict[str, torch.Tensor]
    evaluation: str
    unit: str
    lower_is_better: bool
    ablation: str
    scope: str
    rules: dict[str, str]
    ks: tuple[int, ...] = ()
    item_values: dict[str, torch.Tensor] = field(default_factory=dict)
    items: str = "items"

    def __post_init__(self) -> None:
        lengths = {len(values) for values in self.values.values()}
        if len(lengths) > 1:
            raise IntervError(f"every curve needs the same number of points; got {lengths}")
        if not self.ks:
            object.__setattr__(self, "ks", tuple(range(lengths.pop() if lengths else 0)))
        elif lengths and lengths != {len(self.ks)}:
            raise IntervError(
                f"ks has {len(self.ks)} points but the curves have {lengths.pop()}: {self.ks}"
            )
        for name, items in self.item_values.items():
            if items.ndim != 2 or items.shape[0] != len(self.ks):
                raise IntervError(
                    f"item_values[{name!r}] must be [len(ks)={len(self.ks)}, n_items]; got "
                    f"{tuple(items.shape)}"
                )

    @property
    def max_heads(self) -> int:
        """Most heads removed on any curve."""
        return max(len(order) for order in self.orders.values())

    @property
    def n_items(self) -> int:
        """Items (prompts, chunks, sentences) each value is a mean over; 0 if unknown."""
        return next((items.shape[1] for items in self.item_values.values()), 0)

    def describe(self, name: str) -> str:
        """One line: the curve of order ``name`` with its unit."""
        if name not in self.orders:
            raise IntervError(f"unknown order {name!r}; choose one of {tuple(self.orders)}")
        points = ", ".join(f"{float(v):.4g}" for v in self.values[name])
        ks = f"0..{self.ks[-1]}" if self.ks == tuple(range(len(self.ks))) else str(list(self.ks))
        return f"{name}: {self.evaluation} ({self.unit}) at k = {ks}: {points}"

    def _bootstrap(self, n_bootstrap: int, seed: int) -> torch.Tensor:
        if not self.item_values:
            raise IntervError(
                "these curves carry no per-item values (item_values); intervals need them"
            )
        return bootstrap_indices(self.n_items, n_bootstrap, seed)

    def _check_order(self, name: str) -> None:
        if name not in self.item_values:
            raise IntervError(f"unknown order {name!r}; choose one of {tuple(self.item_values)}")

    def intervals(
        self, *, level: float = 0.95, n_bootstrap: int = 1000, seed: int = 0
    ) -> dict[str, torch.Tensor]:
        """Percentile bootstrap interval over items of every point of every curve.

        The same resamples of items (seeded) serve every order, so intervals of different
        orders come from the same draws.

        Returns:
            order name -> ``[len(ks), 2]`` float64 (low, high) in :attr:`unit`.
        """
        indices = self._bootstrap(n_bootstrap, seed)
        out = {}
        for name, items in self.item_values.items():
            draws = items[:, indices].mean(dim=-1)  # [point, resample]
            out[name] = torch.tensor(
                [percentile_interval(row, level, n_items=indices.shape[-1]) for row in draws],
                dtype=torch.float64,
            )
        return out

    def difference(
        self,
        first: str,
        second: str,
        *,
        level: float = 0.95,
        n_bootstrap: int = 1000,
        seed: int = 0,
    ) -> torch.Tensor:
        """``second - first`` at every point, with a paired bootstrap interval over items.

        Each resample draws the same items for both orders (the items are shared: the same
        prompts, chunks or sentences). For a loss in nats, ``exp`` of the difference and
        of its interval ends is the ratio of perplexities (``exp`` is monotone, so the
        percentile interval maps over).

        Returns:
            ``[len(ks), 3]`` float64: difference of the means, interval low, interval high,
            in :attr:`unit`.
        """
        self._check_order(first)
        self._check_order(second)
        indices = self._bootstrap(n_bootstrap, seed)
        delta = self.item_values[second] - self.item_values[first]  # [point, item]
        draws = delta[:, indices].mean(dim=-1)
        bounds = torch.tensor(
            [percentile_interval(row, level, n_items=indices.shape[-1]) for row in draws]
        )
        return torch.cat([delta.mean(dim=-1, keepdim=True), bounds.to(torch.float64)], dim=-1)

    def to_records(self) -> list[dict[str, Any]]:
        """One plain dict per order and ``k``, for tables and reports.

        Keys: ``order``, ``rule``, ``k`` (heads removed), ``removed`` (the k-th head,
        e.g. ``"L1H2"``; None at ``k = 0``), ``heads_removed`` (all k), ``value``,
        ``unit``, ``evaluation``, ``semantics``, ``scope``.
        """
        records = []
        for name, order in self.orders.items():
            for k, value in zip(self.ks, self.values[name].tolist(), strict=True):
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

    def to_pandas(self) -> pandas.DataFrame:
        """A long ``pandas.DataFrame`` of :meth:`to_records`, one row per order and heads
        removed, with unit and semantics (needs pandas).

        Curves that carry every item's value also get ``ci_low`` and ``ci_high``: the 95%
        percentile bootstrap interval over items of each point (:meth:`intervals`, 1000
        resamples, seed 0), described in ``frame.attrs["interval"]``.
        """
        level = 0.95
        frame = require_pandas().DataFrame.from_records(self.to_records())
        frame["heads_removed"] = frame["heads_removed"].map(" ".join)
        if self.item_values:
            intervals = self.intervals(level=level)
            bounds = [
                intervals[name][i].tolist() for name in self.orders for i in range(len(self.ks))
            ]
            frame["ci_low"] = [low for low, _ in bounds]
            frame["ci_high"] = [high for _, high in bounds]
            frame.attrs["interval"] = (
                f"{level:.0%} percentile bootstrap interval over the {self.n_items} "
                f"{self.items}, 1000 resamples, seed 0, in {self.unit}"
            )
        return frame


def _check_ks(ks: Sequence[int] | None, max_heads: int) -> tuple[int, ...]:
    """``ks`` as an ascending tuple of distinct ints in ``[0, max_heads]``; None = all."""
    if ks is None:
        return tuple(range(max_heads + 1))
    if isinstance(ks, str | bytes) or not isinstance(ks, Sequence):
        raise IntervError(f"ks must be a sequence of ints in [0, {max_heads}]; got {ks!r}")
    checked = tuple(ks)
    valid = (
        bool(checked)
        and all(not isinstance(k, bool) and isinstance(k, int) for k in checked)
        and all(0 <= k <= max_heads for k in checked)
        and all(a < b for a, b in itertools.pairwise(checked))
    )
    if not valid:
        raise IntervError(
            f"ks must be ascending distinct ints in [0, {max_heads}] (max_heads); got {ks!r}"
        )
    return checked


def pruning_curves(
    model: Any,
    evaluation: Evaluation,
    *,
    orders: dict[str, Sequence[Head]] | Sequence[str] = tuple(RANKINGS),
    max_heads: int | None = None,
    ks: Sequence[int] | None = None,
    heads: Sequence[Head] | None = None,
    attribution_task: TokenizedPairs | None = None,
    seed: int = 0,
    random_seeds: Sequence[int] | None = None,
    off_row_sink: str | None = None,
) -> PruningCurves:
    """Mean-ablate the first ``k`` heads of each order together, for each ``k`` in ``ks``.

    Args:
        model: a transformer-lens ``TransformerBridge`` in eval mode.
        evaluation: a :class:`TaskEvaluation`, :class:`TextEvaluation` or
            :class:`EmbeddingEvaluation`.
        orders: explicit orders (name -> heads, least important first), or ranking
            names of :data:`RANKINGS` computed with :func:`rank_heads`.
        max_heads: most heads removed; default the length of the shortest order.
        ks: the numbers of heads removed to evaluate, ascending, in ``[0, max_heads]``;
            default every ``k`` from 0 to ``max_heads``. Each point costs one evaluation
            per order (sets that are the same heads in another order are evaluated once).
        heads: candidate heads for ranking names; default every head.
        attribution_task, seed: passed to :func:`rank_heads`.
        random_seeds: passed to :func:`rank_heads`: one random order per seed (named
            ``"random (seed s)"``) instead of one ``"random"`` order of ``seed``.
        off_row_sink: passed to :func:`rank_heads` (a learned off-row sink, gpt-oss).

    Returns:
        :class:`PruningCurves`, with every item's value (:attr:`PruningCurves.item_values`)
        for intervals over items.

    Raises:
        IntervError: unknown rankings, bad heads, ``max_heads`` outside
            ``[0, shortest order length]``, or ``ks`` not ascending within it.
    """
    seeds = check_seeds(random_seeds)
    if isinstance(orders, dict) and seeds is not None:
        raise IntervError(
            "random_seeds names random orders to compute; with explicit orders (a dict) pass "
            "the random orders in the dict instead"
        )
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
            random_seeds=seeds,
            off_row_sink=off_row_sink,
        )
        seeded = {random_order_name(s): f"{RANKINGS['random']}, seed {s}" for s in (seeds or ())}
        rules = {
            name: seeded.get(name) or ranking_rule(model, name, off_row_sink) for name in given
        }
    shortest = min(len(order) for order in given.values())
    if max_heads is None:
        max_heads = shortest
    if (
        isinstance(max_heads, bool)
        or not isinstance(max_heads, int)
        or not (0 <= max_heads <= shortest)
    ):
        raise IntervError(f"max_heads must be an int in [0, {shortest}]; got {max_heads!r}")
    points = _check_ks(ks, max_heads)
    kept = {name: order[:max_heads] for name, order in given.items()}
    # One evaluation for every distinct set of heads (k = 0 is shared by all orders, and so
    # is k = every head); the evaluation runs each set once, whatever its order.
    distinct = list(dict.fromkeys(order[:k] for order in kept.values() for k in points))
    measured = dict(zip(distinct, evaluation.item_values(model, distinct), strict=True))
    item_values = {
        name: torch.stack([measured[order[:k]] for k in points]) for name, order in kept.items()
    }
    return PruningCurves(
        orders=kept,
        values={name: items.mean(dim=-1) for name, items in item_values.items()},
        evaluation=evaluation.name,
        unit=evaluation.unit,
        lower_is_better=evaluation.lower_is_better,
        ablation=evaluation.ablation,
        scope=f"model {getattr(model.cfg, 'model_name', 'unknown')}; {evaluation.scope}",
        rules=rules,
        ks=points,
        item_values=item_values,
        items=evaluation.items,
    )
