"""Do two heads back each other up? Pairwise ablations and their interaction terms.

For heads ``A`` and ``B`` ablated with the same baseline, four runs give the target
metric ``f``: none (clean), ``A`` alone, ``B`` alone, both together
(:class:`~interv.engine.interventions.PairAblation`). The interaction term

``I(A, B) = f(AB) - f(A) - f(B) + f(none)``

is 0 when the two ablations add up; it is large when the heads compensate for each
other (each alone looks harmless, both together are not) or when one only matters
through the other. Per prompt, in the metric's unit; the mean over prompts carries a
percentile bootstrap interval over prompts. Effects here are relative to the clean run,
``e(X) = f(X) - f(none)``, so ``I = e(AB) - e(A) - e(B)``.

**Compensation** (the flag): both single ablations look harmless, ``|mean e(A)|`` and
``|mean e(B)|`` at most ``near_zero_fraction x`` the effect scale
``|mean clean - mean corrupted|``, while the interaction is not: ``|mean I|`` above that
threshold and its interval excluding 0. Reading single-head ablations alone would call
such heads unimportant.

:func:`interactions` runs the design on a model; :func:`head_interactions` reads the
terms from any result that holds the single and pair ablations (a run or a sweep).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch

from interv._progress import Progress
from interv.engine.interventions import BASELINES, PairAblation, head_ablation
from interv.engine.results import intervention_params
from interv.engine.runner import run
from interv.engine.sites import head_label
from interv.errors import IntervError
from interv.flags import FlagRules
from interv.stats import bootstrap_indices, percentile_interval

if TYPE_CHECKING:
    from interv.engine.protocol import Intervention
    from interv.engine.results import InterventionResult
    from interv.tasks.tokenized import TokenizedPairs

__all__ = ["COMPENSATION", "HeadInteractions", "head_interactions", "interactions", "pair_design"]

Head = tuple[int, int]

COMPENSATION = "compensation"
"""The flag of a pair whose single ablations look harmless but whose interaction does not."""

INTERACTION_DEFINITION = (
    "interaction I(A, B) = f(AB) - f(A) - f(B) + f(none) per prompt, f the target metric "
    "with the named heads ablated together (none = the clean run)"
)


def _check_heads(heads: Sequence[Head]) -> tuple[Head, ...]:
    pairs = tuple((int(layer), int(head)) for layer, head in heads)
    if len(pairs) < 2 or len(set(pairs)) != len(pairs):
        raise IntervError(f"heads must be at least two distinct (layer, head) pairs; got {heads}")
    return pairs


def pair_design(heads: Sequence[Head], baseline: str = "mean", seed: int = 0) -> list[Intervention]:
    """Each head ablated alone, then every pair together (``H + H (H - 1) / 2`` interventions)."""
    heads = _check_heads(heads)
    if baseline not in BASELINES:
        raise IntervError(f"unknown baseline {baseline!r}; choose one of {BASELINES}")
    singles = [head_ablation(baseline, layer, head, seed) for layer, head in heads]
    pairs = [
        PairAblation(a[0], a[1], b[0], b[1], baseline, seed)
        for i, a in enumerate(heads)
        for b in heads[i + 1 :]
    ]
    return [*singles, *pairs]


@dataclass(frozen=True, eq=False)
class HeadInteractions:
    """Pairwise interaction terms of a set of heads, with intervals and compensation flags.

    Attributes:
        heads: the heads, in matrix order.
        baseline: the ablation baseline (``"zero"``, ``"mean"``, ``"resample"``).
        single: ``[head, prompt]`` effect ``e(A) = f(A) - f(none)`` of each head alone.
        pair: ``[head, head, prompt]`` effect ``e(AB)`` of each pair (NaN on the diagonal).
        interaction: ``[head, head, prompt]`` ``I(A, B) = e(AB) - e(A) - e(B)`` (NaN on
            the diagonal), symmetric.
        mean, ci_low, ci_high: ``[head, head]`` mean of ``I`` over prompts and its
            percentile bootstrap interval.
        compensation: the flagged pairs ``(A, B)`` with ``A`` before ``B``.
        unit, metric: the metric's unit and name; semantics: the design in one sentence;
        rule: the compensation rule with its threshold in the metric's unit.
        effect_scale: ``|mean clean - mean corrupted|`` in the metric's unit.
        n_bootstrap, level, seed: the bootstrap.
    """

    heads: tuple[Head, ...]
    baseline: str
    single: torch.Tensor
    pair: torch.Tensor
    interaction: torch.Tensor
    mean: torch.Tensor
    ci_low: torch.Tensor
    ci_high: torch.Tensor
    compensation: tuple[tuple[Head, Head], ...]
    unit: str
    metric: str
    semantics: str
    rule: str
    effect_scale: float
    n_bootstrap: int
    level: float
    seed: int

    @property
    def labels(self) -> tuple[str, ...]:
        """``"L{layer}H{head}"`` of each head, in matrix order."""
        return tuple(head_label(*head) for head in self.heads)

    def describe_pair(self, a: Head, b: Head) -> str:
        """One line: the two single effects, the pair effect and the interaction."""
        i, j = self.heads.index(tuple(a)), self.heads.index(tuple(b))
        flag = (
            " [compensation]"
            if (self.heads[min(i, j)], self.heads[max(i, j)]) in (self.compensation)
            else ""
        )
        return (
            f"{self.labels[i]} & {self.labels[j]} ({self.baseline} ablation): alone "
            f"{float(self.single[i].mean()):+.4g} and {float(self.single[j].mean()):+.4g}, "
            f"together {float(self.pair[i, j].mean()):+.4g}, interaction "
            f"{float(self.mean[i, j]):+.4g} [{float(self.ci_low[i, j]):+.4g}, "
            f"{float(self.ci_high[i, j]):+.4g}] {self.unit}{flag}"
        )

    def to_records(self) -> list[dict[str, Any]]:
        """One plain dict per pair ``A < B``: heads, effects, interaction, interval, flag."""
        records = []
        for i in range(len(self.heads)):
            for j in range(i + 1, len(self.heads)):
                records.append(
                    {
                        "head_a": self.labels[i],
                        "head_b": self.labels[j],
                        "baseline": self.baseline,
                        "effect_a": float(self.single[i].mean()),
                        "effect_b": float(self.single[j].mean()),
                        "effect_pair": float(self.pair[i, j].mean()),
                        "interaction": float(self.mean[i, j]),
                        "ci_low": float(self.ci_low[i, j]),
                        "ci_high": float(self.ci_high[i, j]),
                        "compensation": (self.heads[i], self.heads[j]) in self.compensation,
                        "unit": self.unit,
                        "metric": self.metric,
                        "semantics": self.semantics,
                    }
                )
        return records


def head_interactions(
    result: InterventionResult,
    *,
    rules: FlagRules | None = None,
    n_bootstrap: int = 1000,
    level: float = 0.95,
    seed: int = 0,
) -> HeadInteractions:
    """The interaction terms of the pair ablations in ``result`` (needs their singles too).

    Raises:
        IntervError: no pair ablation in ``result``, pairs of several baselines, or a
            pair whose single ablations are missing.
    """
    pairs = [
        (j, PairAblation(**{k: v for k, v in params.items() if k != "kind"}))
        for j, params in enumerate(result.params)
        if params.get("kind") == "PairAblation"
    ]
    if not pairs:
        raise IntervError("the result holds no PairAblation; run pair_design(heads) first")
    baselines = {pair.baseline for _, pair in pairs}
    if len(baselines) > 1:
        raise IntervError(f"the pair ablations mix baselines {sorted(baselines)}; use one")
    rows = {_key(params): j for j, params in enumerate(result.params)}
    heads = tuple(
        dict.fromkeys(
            head
            for _, pair in pairs
            for head in ((pair.layer, pair.head), (pair.other_layer, pair.other_head))
        )
    )
    effect = result.effect  # every row used here is an ablation of the clean run
    n = len(heads)
    single = torch.full((n, effect.shape[1]), torch.nan, dtype=torch.float64)
    pair_effect = torch.full((n, n, effect.shape[1]), torch.nan, dtype=torch.float64)
    for j, pair in pairs:
        a = heads.index((pair.layer, pair.head))
        b = heads.index((pair.other_layer, pair.other_head))
        for index, part in zip((a, b), pair.parts, strict=True):
            row = rows.get(_key(intervention_params(part)))
            if row is None:
                raise IntervError(
                    f"the result has the pair {pair.describe()!r} but not its single "
                    f"ablation {part.describe()!r}; run pair_design(heads) for the whole design"
                )
            single[index] = effect[row]
        pair_effect[a, b] = pair_effect[b, a] = effect[j]
    interaction = pair_effect - single[:, None] - single[None, :]
    indices = bootstrap_indices(effect.shape[1], n_bootstrap, seed)
    resampled = interaction[..., indices].mean(-1)  # [head, head, n_bootstrap]
    mean = interaction.mean(-1)
    low = torch.full_like(mean, torch.nan)
    high = torch.full_like(mean, torch.nan)
    for a in range(n):
        for b in range(n):
            if a != b and not bool(mean[a, b].isnan()):
                low[a, b], high[a, b] = percentile_interval(
                    resampled[a, b], level, n_items=effect.shape[1]
                )
    rules = FlagRules() if rules is None else rules
    scale = result.effect_scale
    near = rules.near_zero_fraction * scale
    compensation = tuple(
        (heads[a], heads[b])
        for a in range(n)
        for b in range(a + 1, n)
        if scale > 0
        and abs(float(single[a].mean())) <= near
        and abs(float(single[b].mean())) <= near
        and abs(float(mean[a, b])) > near
        and not (float(low[a, b]) <= 0 <= float(high[a, b]))
    )
    baseline = baselines.pop()
    return HeadInteractions(
        heads=heads,
        baseline=baseline,
        single=single,
        pair=pair_effect,
        interaction=interaction,
        mean=mean,
        ci_low=low,
        ci_high=high,
        compensation=compensation,
        unit=result.metric.unit,
        metric=result.metric.name,
        semantics=(
            f"{INTERACTION_DEFINITION}; each ablated head's output (z) "
            f"{_REPLACED[baseline].format(seed=seed)}, at all positions, in the clean run; "
            f"{result.scope.n_prompts} prompts of {result.scope.task_name!r}"
        ),
        rule=(
            f"{COMPENSATION}: both single ablations |mean effect| <= "
            f"{rules.near_zero_fraction:g} x effect scale = {near:.4g} {result.metric.unit}, "
            f"while |mean interaction| > {near:.4g} {result.metric.unit} and its "
            f"{level:.0%} interval excludes 0"
        ),
        effect_scale=scale,
        n_bootstrap=n_bootstrap,
        level=level,
        seed=seed,
    )


_REPLACED = {
    "zero": "set to zero",
    "mean": "replaced by its mean over the clean prompts at the same position",
    "resample": "resampled from the corrupted prompts (seed {seed})",
}


def _key(params: dict[str, Any]) -> str:
    return repr(sorted(params.items()))


def interactions(
    model: Any,
    task: TokenizedPairs,
    heads: Sequence[Head],
    *,
    baseline: str = "mean",
    metric: str = "logit_diff",
    seed: int = 0,
    n_bootstrap: int = 1000,
    level: float = 0.95,
    max_batch_size: int | None = None,
    progress: Progress = None,
) -> HeadInteractions:
    """Run the pairwise design on ``heads`` and return the interaction terms.

    ``H`` single ablations and ``H (H - 1) / 2`` pair ablations, stacked in
    :func:`interv.run` (each forward starts at the earliest ablated block), which takes
    ``max_batch_size`` (None: chosen from the model and memory) and ``progress`` (a bar
    over the ablations; see :func:`interv.run`).
    """
    design = pair_design(heads, baseline, seed)
    result = run(model, task, design, metric, max_batch_size=max_batch_size, progress=progress)
    return head_interactions(result, n_bootstrap=n_bootstrap, level=level, seed=seed)
