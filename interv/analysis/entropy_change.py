"""How much of a change in attention entropy is sink growth, and how much content sharpening.

Attention entropy often "collapses" between two conditions (early and late training
checkpoints, short and long contexts, two models, two prompt sets). A head whose
entropy drops may have sharpened its content distribution, or may simply have moved
mass onto the sink. The exact identity of :mod:`interv.metrics.sink` separates the two::

    dH = sink_part + content_part
    sink_part    = d h(s) + d[s H(a_S/s)] - ds * mean(H(q))
    content_part = (1 - mean(s)) * dH(q)

with ``s`` the sink mass, ``q`` the content distribution, ``d`` = after minus before
and ``mean`` the average of the two conditions. Two modes, chosen from the inputs:

- **paired rows** (both conditions have the same prompts, positions and masks, e.g.
  two checkpoints on one prompt set): :func:`interv.metrics.entropy_change` per row, then the
  mean over each prompt's included query rows, then the mean over prompts (each prompt
  weighs the same); the split of each mean is exact because the split is linear, and
  the per-prompt values give the spread;
- **condition means** (different prompts or lengths): :func:`interv.metrics.mean_entropy_change`
  on each condition's included rows of each head (every row weighs the same); no
  per-prompt spread (NaN), since the prompts do not correspond.

Query rows follow :data:`~interv.analysis._patterns.QUERY_RULE`. The **sink share** of a
head is ``sink_part / total``; it is NaN (undefined) where ``|total| < share_atol``
(default 1e-3 nats), and lies outside [0, 1] when the two parts have opposite signs.
"Overall" numbers are means over heads, and the overall share is
``mean(sink_part) / mean(total)`` under the same rule.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from interv.analysis._patterns import (
    QUERY_RULE,
    AttentionRows,
    prompt_mean_weights,
)
from interv.errors import IntervError
from interv.metrics._rows import check_unit
from interv.metrics.sink import entropy_change, mean_entropy_change, sink_split
from interv.provenance import compares, join
from interv.stats import bootstrap_indices, percentile_interval

__all__ = [
    "PAIRED",
    "UNPAIRED",
    "EntropyAttribution",
    "entropy_change_attribution",
]

PAIRED = "paired rows: per-row split, mean over each prompt's rows, then over prompts"
UNPAIRED = "condition means: split of the change of each head's mean over all included rows"


@dataclass(frozen=True, eq=False)
class EntropyAttribution:
    """Per-head split of an entropy change between two conditions.

    Per-head fields are float64 ``[layer, head_index]`` in ``unit``; per-prompt fields
    ``[prompt, layer, head_index]`` (paired mode only, else None).

    Attributes:
        total: change of the mean row entropy, after minus before.
        sink_part: the part due to the sink (``d h(s) + d[s H(a_S/s)] - ds mean H(q)``).
        content_part: the part due to the content spread (``(1 - mean s) dH(q)``).
            ``total == sink_part + content_part`` to float64 rounding.
        sink_mass_before, sink_mass_after: mean sink mass (fraction of the row's mass).
        per_prompt_total, per_prompt_sink_part, per_prompt_content_part: per-prompt
            means (paired mode), whose mean over prompts is the per-head field.
        mode: :data:`PAIRED` or :data:`UNPAIRED`.
        unit: ``"nats"`` or ``"bits"``.
        share_atol: ``|total|`` below which a share is undefined (NaN), in ``unit``.
        before_label, after_label: the two conditions in words (e.g. "step 0").
        model_names: model of each condition (scope).
        n_prompts: prompts of each condition; n_rows: included rows of each condition.
        sink_positions: sink set, counted from each prompt's first real token.
    """

    total: torch.Tensor
    sink_part: torch.Tensor
    content_part: torch.Tensor
    sink_mass_before: torch.Tensor
    sink_mass_after: torch.Tensor
    per_prompt_total: torch.Tensor | None
    per_prompt_sink_part: torch.Tensor | None
    per_prompt_content_part: torch.Tensor | None
    mode: str
    unit: str
    share_atol: float
    before_label: str
    after_label: str
    model_names: tuple[str, str]
    n_prompts: tuple[int, int]
    n_rows: tuple[int, int]
    sink_positions: tuple[int, ...]
    query_rule: str = QUERY_RULE

    def _share(self, sink: torch.Tensor, total: torch.Tensor) -> torch.Tensor:
        return torch.where(total.abs() >= self.share_atol, sink / total, torch.nan)

    @property
    def sink_share(self) -> torch.Tensor:
        """``[layer, head_index]`` ``sink_part / total`` (fraction; NaN if ``|total|`` small)."""
        return self._share(self.sink_part, self.total)

    def spread(self, field: str) -> torch.Tensor:
        """``[layer, head_index]`` standard deviation over prompts of a per-prompt field.

        ``field`` is ``"total"``, ``"sink_part"`` or ``"content_part"``; NaN in
        condition-means mode or with a single prompt.
        """
        choices = ("total", "sink_part", "content_part")
        if field not in choices:
            raise IntervError(f"field must be one of {choices}; got {field!r}")
        per_prompt = getattr(self, f"per_prompt_{field}")
        if per_prompt is None or per_prompt.shape[0] < 2:
            return torch.full_like(self.total, torch.nan)
        return per_prompt.std(dim=0)

    @property
    def overall(self) -> dict[str, float]:
        """Means over heads of ``total``, ``sink_part``, ``content_part`` (in ``unit``) and
        ``sink_share = mean(sink_part) / mean(total)`` (NaN if ``|mean(total)| < share_atol``)."""
        total, sink = self.total.mean(), self.sink_part.mean()
        return {
            "total": float(total),
            "sink_part": float(sink),
            "content_part": float(self.content_part.mean()),
            "sink_share": float(self._share(sink, total)),
        }

    def overall_share_interval(
        self, *, level: float = 0.95, n_bootstrap: int = 1000, seed: int = 0
    ) -> tuple[float, float]:
        """Percentile bootstrap interval over prompts of the overall sink share.

        Each resample draws the prompts with replacement and recomputes
        ``mean(sink_part) / mean(total)`` (means over heads of the resampled prompts'
        means, NaN where ``|mean(total)| < share_atol``). Paired mode only: in
        condition-means mode, or with one prompt, the interval is ``(nan, nan)``.
        """
        if self.per_prompt_total is None or self.per_prompt_total.shape[0] < 2:
            return (float("nan"), float("nan"))
        n_prompts = self.per_prompt_total.shape[0]
        indices = bootstrap_indices(n_prompts, n_bootstrap, seed)  # [resample, prompt]
        total = self.per_prompt_total.flatten(1).mean(dim=-1)[indices].mean(dim=-1)
        sink = self.per_prompt_sink_part.flatten(1).mean(dim=-1)[indices].mean(dim=-1)
        return percentile_interval(self._share(sink, total), level, n_items=n_prompts)

    @property
    def scope(self) -> str:
        """One line: the two conditions, models, prompts, rows, query rule, mode and unit."""
        return (
            f"entropy change from {self.before_label} ({self.model_names[0]}, "
            f"{self.n_prompts[0]} prompts, {self.n_rows[0]} rows) to {self.after_label} "
            f"({self.model_names[1]}, {self.n_prompts[1]} prompts, {self.n_rows[1]} rows); "
            f"{self.query_rule}; sink positions {list(self.sink_positions)}; {self.mode}; "
            f"unit {self.unit}"
        )

    def describe(self) -> str:
        """One line with the overall split, its unit and scope."""
        overall = self.overall
        share = overall["sink_share"]
        share_text = "undefined" if share != share else f"{100 * share:.0f}%"
        return (
            f"mean over {self.total.numel()} heads: entropy change {overall['total']:+.4f} "
            f"{self.unit} = sink {overall['sink_part']:+.4f} + content "
            f"{overall['content_part']:+.4f} {self.unit}; share due to the sink {share_text}"
        )

    def to_records(self) -> list[dict[str, Any]]:
        """One dict per head plus one ``head == "overall"`` dict (mean over heads).

        Keys: ``head``, ``layer``, ``head_index`` (None for overall), ``total``,
        ``sink_part``, ``content_part``, ``sink_share``, ``total_std_over_prompts``,
        ``sink_mass_before``, ``sink_mass_after``, ``unit``, ``before``, ``after``,
        ``mode``, ``query_rule``, ``n_prompts_before``, ``n_prompts_after``, ``models``.
        """
        scope = {
            "unit": self.unit,
            "before": self.before_label,
            "after": self.after_label,
            "mode": self.mode,
            "query_rule": self.query_rule,
            "n_prompts_before": self.n_prompts[0],
            "n_prompts_after": self.n_prompts[1],
            "models": list(self.model_names),
        }
        share, spread = self.sink_share, self.spread("total")
        records = []
        n_layers, n_heads = self.total.shape
        for layer in range(n_layers):
            for head in range(n_heads):
                records.append(
                    {
                        "head": f"L{layer}H{head}",
                        "layer": layer,
                        "head_index": head,
                        "total": float(self.total[layer, head]),
                        "sink_part": float(self.sink_part[layer, head]),
                        "content_part": float(self.content_part[layer, head]),
                        "sink_share": float(share[layer, head]),
                        "total_std_over_prompts": float(spread[layer, head]),
                        "sink_mass_before": float(self.sink_mass_before[layer, head]),
                        "sink_mass_after": float(self.sink_mass_after[layer, head]),
                    }
                    | scope
                )
        overall = self.overall
        records.append(
            {
                "head": "overall",
                "layer": None,
                "head_index": None,
                **overall,
                "total_std_over_prompts": float("nan"),
                "sink_mass_before": float(self.sink_mass_before.mean()),
                "sink_mass_after": float(self.sink_mass_after.mean()),
            }
            | scope
        )
        return records


CONDITIONS = ("model", "revision", "prompts", "n_prompts")
"""What two conditions of an entropy change may differ in (checkpoints, models, context
lengths); their dtype must agree."""


def _mean_sink_mass(
    heads: torch.Tensor, sink: torch.Tensor, key_mask: torch.Tensor, included: torch.Tensor | None
) -> torch.Tensor:
    """``[head]`` mean sink mass of ``[head, row, key]`` rows: over prompts of each prompt's
    mean when ``included`` (``[batch, query_pos]``) is given, else over rows."""
    mass = sink_split(heads, sink=sink, key_mask=key_mask).sink_mass  # [head, row]
    if included is None:
        return mass.mean(dim=-1)
    return (mass @ prompt_mean_weights(included)).mean(dim=-1)


def _paired(before: AttentionRows, after: AttentionRows) -> bool:
    """True when both conditions have the same prompts layout, masks and sinks."""
    return (
        before.pattern.shape == after.pattern.shape
        and bool((before.key_mask == after.key_mask).all())
        and bool((before.sink_mask == after.sink_mask).all())
        and bool((before.included == after.included).all())
    )


@compares(*CONDITIONS)
def entropy_change_attribution(
    before: AttentionRows,
    after: AttentionRows,
    *,
    unit: str = "nats",
    share_atol: float = 1e-3,
    before_label: str = "before",
    after_label: str = "after",
) -> EntropyAttribution:
    """Split every head's entropy change between two conditions into sink and content parts.

    Args:
        before, after: attention rows of the two conditions (from
            :func:`interv.analysis.attention_rows`), with the same number of layers and
            heads. Paired mode when they share prompts layout and masks (see the module
            docstring), condition-means mode otherwise.
        unit: ``"nats"`` or ``"bits"``.
        share_atol: ``|total|`` (in ``unit``) below which the sink share is NaN.
        before_label, after_label: the conditions in words, for the scope.

    Returns:
        An :class:`EntropyAttribution` with ``total == sink_part + content_part``.
    """
    check_unit(unit)
    join(
        before,
        after,
        what=(f"the {before_label} rows", f"the {after_label} rows"),
        across=CONDITIONS,
    )
    if before.pattern.shape[1:3] != after.pattern.shape[1:3]:
        raise IntervError(
            "both conditions need the same layers and heads to attribute per head; got "
            f"{tuple(before.pattern.shape[1:3])} and {tuple(after.pattern.shape[1:3])} "
            "(layer, head_index)"
        )
    if before.sink_positions != after.sink_positions:
        raise IntervError(
            f"both conditions need the same sink positions; got {list(before.sink_positions)} "
            f"and {list(after.sink_positions)}"
        )
    if isinstance(share_atol, bool) or not share_atol >= 0:
        raise IntervError(f"share_atol must be a number >= 0 (in {unit}); got {share_atol!r}")
    n_layers, n_heads = before.pattern.shape[1:3]
    splits = []
    for rows in (before, after):
        heads = rows.flat_heads()[:, rows.included]  # [head, row, key]
        key_mask = rows.flat_key_mask()[:, rows.included]  # [head, row, key]: each layer's
        sink = rows.sink_mask[:, None, :].expand_as(rows.any_key_mask)[rows.included]
        splits.append((heads, sink, key_mask))
    paired = _paired(before, after)
    if paired:
        (first, sink, key_mask), (second, _, _) = splits
        change = entropy_change(first, second, sink=sink, key_mask=key_mask, unit=unit)
        weights = prompt_mean_weights(before.included)  # [row, prompt]
        per_prompt = {
            name: (value @ weights).T.reshape(-1, n_layers, n_heads)  # [prompt, layer, head]
            for name, value in (
                ("total", change.total),
                ("sink_part", change.sink_part),
                ("content_part", change.content_part),
            )
        }
        per_head = {name: value.mean(dim=0) for name, value in per_prompt.items()}
    else:
        totals, sinks, contents = [], [], []
        for head in range(n_layers * n_heads):
            head_splits = [
                sink_split(heads[head], sink=sink, key_mask=key_mask[head], unit=unit)
                for heads, sink, key_mask in splits
            ]
            change = mean_entropy_change(*head_splits)
            totals.append(change.total)
            sinks.append(change.sink_part)
            contents.append(change.content_part)
        per_head = {
            "total": torch.stack(totals).reshape(n_layers, n_heads),
            "sink_part": torch.stack(sinks).reshape(n_layers, n_heads),
            "content_part": torch.stack(contents).reshape(n_layers, n_heads),
        }
        per_prompt = None
    mass_before, mass_after = (
        _mean_sink_mass(heads, sink, key_mask, rows.included if paired else None).reshape(
            n_layers, n_heads
        )
        for (heads, sink, key_mask), rows in zip(splits, (before, after), strict=True)
    )
    return EntropyAttribution(
        total=per_head["total"],
        sink_part=per_head["sink_part"],
        content_part=per_head["content_part"],
        sink_mass_before=mass_before,
        sink_mass_after=mass_after,
        per_prompt_total=None if per_prompt is None else per_prompt["total"],
        per_prompt_sink_part=None if per_prompt is None else per_prompt["sink_part"],
        per_prompt_content_part=None if per_prompt is None else per_prompt["content_part"],
        mode=PAIRED if paired else UNPAIRED,
        unit=unit,
        share_atol=share_atol,
        before_label=before_label,
        after_label=after_label,
        model_names=(before.model_name, after.model_name),
        n_prompts=(before.n_prompts, after.n_prompts),
        n_rows=(int(before.included.sum()), int(after.included.sum())),
        sink_positions=before.sink_positions,
    )
