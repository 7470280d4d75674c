"""Report sections that join several intervention rows: paths, decompositions, interactions.

Each section puts a causal quantity next to the concentration of every head involved:

- **decomposition** (per head): the total effect of an ablation, its direct effect
  (:class:`~interv.engine.paths.DirectEffect`, the final norm's scale frozen) and the
  indirect effect ``total - direct`` (everything through later blocks and the final
  norm's rescaling), each a mean over prompts with a bootstrap interval;
- **paths** (per path patch): the sender and receivers with the effect and recovery of
  the path, and the concentration of the sender and of each receiver;
- **interactions** (per pair): ``f(AB) - f(A) - f(B) + f(none)`` with its interval and
  the compensation flag (:mod:`interv.analysis.pairwise`), and both heads'
  concentration.

Rows are matched through the interventions' fields (``InterventionResult.params``), never
through their sentences. Pure: no model.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from interv.engine.interventions import head_ablation
from interv.engine.results import intervention_params
from interv.engine.sites import head_label
from interv.flags import FlagRules
from interv.stats import bootstrap_mean_ci

__all__ = [
    "CONCENTRATED_INDIRECT",
    "DIRECT_OPPOSED",
    "DecompositionRow",
    "InteractionRow",
    "PathRow",
    "SectionTable",
    "decompositions",
    "interaction_rows",
    "path_rows",
    "section_tables",
]

CONCENTRATED_INDIRECT = "concentrated, large indirect effect"
DIRECT_OPPOSED = "indirect opposes direct"


@dataclass(frozen=True)
class Estimate:
    """A mean over prompts with its percentile bootstrap interval, in the metric's unit."""

    mean: float
    ci_low: float
    ci_high: float

    @classmethod
    def of(cls, values: torch.Tensor, indices: torch.Tensor, level: float) -> Estimate:
        low, high = bootstrap_mean_ci(values, indices, level)
        return cls(float(values.mean()), low, high)


@dataclass(frozen=True)
class DecompositionRow:
    """A head's total effect split into direct (into the logits) and indirect parts.

    Attributes:
        head: the head label; layer, head_index: its position.
        baseline: the ablation (``"zero"``, ``"mean"``, ``"resample"``).
        total, direct, indirect: estimates in the metric's unit (``indirect = total -
            direct`` per prompt).
        normalized_entropy, sink_mass: the head's concentration (mean over prompts).
        flags: :data:`CONCENTRATED_INDIRECT`, :data:`DIRECT_OPPOSED` where they hold.
        total_semantics, direct_semantics: the two interventions' sentences.
    """

    head: str
    layer: int
    head_index: int
    baseline: str
    total: Estimate
    direct: Estimate
    indirect: Estimate
    normalized_entropy: float
    sink_mass: float
    flags: tuple[str, ...]
    total_semantics: str
    direct_semantics: str


@dataclass(frozen=True)
class PathRow:
    """One path patch: sender, receivers, effect, and every head's concentration."""

    sender: str
    receivers: tuple[str, ...]
    receiver_input: str
    direction: str
    effect: Estimate
    recovery: float
    sender_normalized_entropy: float
    sender_sink_mass: float
    receivers_normalized_entropy: tuple[float, ...]
    receivers_sink_mass: tuple[float, ...]
    semantics: str


@dataclass(frozen=True)
class InteractionRow:
    """One pair of heads: single and pair effects, the interaction, both heads' concentration."""

    head_a: str
    head_b: str
    baseline: str
    effect_a: float
    effect_b: float
    effect_pair: float
    interaction: Estimate
    compensation: bool
    normalized_entropy_a: float
    normalized_entropy_b: float
    sink_mass_a: float
    sink_mass_b: float


Concentration = Mapping[tuple[int, int], Mapping[str, float]]
"""(layer, head) -> metric name -> mean over prompts."""


def _conc(concentration: Concentration, head: tuple[int, int], name: str) -> float:
    """A head's mean concentration metric ``name``; NaN for a head without one."""
    return concentration.get(head, {}).get(name, math.nan)


def _fields(params: Mapping[str, Any]) -> dict[str, Any]:
    return {key: value for key, value in params.items() if key != "kind"}


def _key(params: Mapping[str, Any]) -> str:
    return repr(sorted(params.items()))


def decompositions(
    params: Sequence[Mapping[str, Any]],
    effects: Sequence[torch.Tensor],
    descriptions: Sequence[str],
    concentration: Concentration,
    indices: torch.Tensor,
    level: float,
    rules: FlagRules,
    effect_scale: float,
) -> tuple[DecompositionRow, ...]:
    """One row per direct effect whose total (the matching ablation) is also present."""
    by_params = {_key(p): j for j, p in enumerate(params)}
    rows = []
    for j, p in enumerate(params):
        if p.get("kind") != "DirectEffect":
            continue
        fields = _fields(p)
        total = head_ablation(fields["baseline"], fields["layer"], fields["head"], fields["seed"])
        t = by_params.get(_key(intervention_params(total)))
        if t is None:
            continue
        head = (fields["layer"], fields["head"])
        indirect = effects[t] - effects[j]
        entropy = _conc(concentration, head, "normalized_entropy")
        row_flags = []
        large = rules.large_fraction * effect_scale
        indirect_mean = float(indirect.mean())
        if entropy <= rules.concentrated_at_most and abs(indirect_mean) >= large > 0:
            row_flags.append(CONCENTRATED_INDIRECT)
        direct_mean = float(effects[j].mean())
        near = rules.near_zero_fraction * effect_scale
        if direct_mean * indirect_mean < 0 and min(abs(direct_mean), abs(indirect_mean)) > near:
            row_flags.append(DIRECT_OPPOSED)
        rows.append(
            DecompositionRow(
                head=head_label(*head),
                layer=head[0],
                head_index=head[1],
                baseline=fields["baseline"],
                total=Estimate.of(effects[t], indices, level),
                direct=Estimate.of(effects[j], indices, level),
                indirect=Estimate.of(indirect, indices, level),
                normalized_entropy=entropy,
                sink_mass=_conc(concentration, head, "sink_mass"),
                flags=tuple(row_flags),
                total_semantics=descriptions[t],
                direct_semantics=descriptions[j],
            )
        )
    return tuple(rows)


def path_rows(
    params: Sequence[Mapping[str, Any]],
    effects: Sequence[torch.Tensor],
    recoveries: Sequence[float],
    descriptions: Sequence[str],
    concentration: Concentration,
    indices: torch.Tensor,
    level: float,
) -> tuple[PathRow, ...]:
    """One row per path patch, with the sender's and each receiver's concentration."""
    rows = []
    for j, p in enumerate(params):
        if p.get("kind") != "PathPatch":
            continue
        fields = _fields(p)
        sender = (fields["layer"], fields["head"])
        receivers = [tuple(r) for r in fields["receivers"]]
        rows.append(
            PathRow(
                sender=head_label(*sender),
                receivers=tuple(head_label(*r) for r in receivers) or ("logits",),
                receiver_input=fields["receiver_input"],
                direction=fields["direction"],
                effect=Estimate.of(effects[j], indices, level),
                recovery=recoveries[j],
                sender_normalized_entropy=_conc(concentration, sender, "normalized_entropy"),
                sender_sink_mass=_conc(concentration, sender, "sink_mass"),
                receivers_normalized_entropy=tuple(
                    _conc(concentration, r, "normalized_entropy") for r in receivers
                ),
                receivers_sink_mass=tuple(_conc(concentration, r, "sink_mass") for r in receivers),
                semantics=descriptions[j],
            )
        )
    return tuple(rows)


def interaction_rows(interactions: Any, concentration: Concentration) -> tuple[InteractionRow, ...]:
    """One row per pair of a :class:`~interv.analysis.pairwise.HeadInteractions`."""
    rows = []
    heads = interactions.heads
    for i in range(len(heads)):
        for j in range(i + 1, len(heads)):
            a, b = heads[i], heads[j]
            rows.append(
                InteractionRow(
                    head_a=head_label(*a),
                    head_b=head_label(*b),
                    baseline=interactions.baseline,
                    effect_a=float(interactions.single[i].mean()),
                    effect_b=float(interactions.single[j].mean()),
                    effect_pair=float(interactions.pair[i, j].mean()),
                    interaction=Estimate(
                        float(interactions.mean[i, j]),
                        float(interactions.ci_low[i, j]),
                        float(interactions.ci_high[i, j]),
                    ),
                    compensation=(a, b) in interactions.compensation,
                    normalized_entropy_a=_conc(concentration, a, "normalized_entropy"),
                    normalized_entropy_b=_conc(concentration, b, "normalized_entropy"),
                    sink_mass_a=_conc(concentration, a, "sink_mass"),
                    sink_mass_b=_conc(concentration, b, "sink_mass"),
                )
            )
    return tuple(rows)


@dataclass(frozen=True)
class SectionTable:
    """One section as a table any renderer can draw: title, a sentence, columns, cells."""

    title: str
    intro: str
    columns: tuple[str, ...]
    rows: tuple[tuple[str, ...], ...]


def _num(value: float, digits: int = 4) -> str:
    return "n/a" if value is None or math.isnan(value) else f"{value:.{digits}g}"


def _est(estimate: Estimate, unit: str) -> str:
    return f"{_num(estimate.mean)} [{_num(estimate.ci_low)}, {_num(estimate.ci_high)}] {unit}"


def section_tables(
    decomposition: Sequence[DecompositionRow],
    paths: Sequence[PathRow],
    interactions: Sequence[InteractionRow],
    interaction_semantics: str,
    unit: str,
    level: float,
) -> tuple[SectionTable, ...]:
    """The report's joined sections as tables (only those with rows)."""
    ci = f"mean [{level:.0%} CI] over prompts"
    conc = "normalized entropy (fraction of log n) / sink mass (fraction)"
    tables = []
    if decomposition:
        tables.append(
            SectionTable(
                "Direct and indirect effects",
                "total = effect of the ablation on every path; direct = only on the path into "
                "the final norm and unembedding, the norm's scale frozen at the clean run's "
                "value; indirect = total - direct (through later blocks and the final norm's "
                "rescaling), per prompt. The direct and total sentences are in the table.",
                (
                    "head",
                    "baseline",
                    f"total, {ci}",
                    f"direct, {ci}",
                    f"indirect, {ci}",
                    conc,
                    "flags",
                    "direct effect semantics",
                ),
                tuple(
                    (
                        row.head,
                        row.baseline,
                        _est(row.total, unit),
                        _est(row.direct, unit),
                        _est(row.indirect, unit),
                        f"{_num(row.normalized_entropy, 3)} / {_num(row.sink_mass, 3)}",
                        ", ".join(row.flags),
                        row.direct_semantics,
                    )
                    for row in decomposition
                ),
            )
        )
    if paths:
        tables.append(
            SectionTable(
                "Path patching",
                "each row patches the sender's output from the other run only along its path "
                "into the receivers' input, everything else frozen at the base run; effect = "
                "metric minus the base run's; recovery is dimensionless (1 = clean, 0 = "
                "corrupted).",
                (
                    "sender",
                    "receivers (input)",
                    "direction",
                    f"effect, {ci}",
                    "recovery",
                    f"sender {conc}",
                    "receivers' normalized entropy",
                    "semantics",
                ),
                tuple(
                    (
                        row.sender,
                        f"{', '.join(row.receivers)} ({row.receiver_input})",
                        row.direction,
                        _est(row.effect, unit),
                        _num(row.recovery, 3),
                        f"{_num(row.sender_normalized_entropy, 3)} / "
                        f"{_num(row.sender_sink_mass, 3)}",
                        ", ".join(_num(v, 3) for v in row.receivers_normalized_entropy) or "-",
                        row.semantics,
                    )
                    for row in paths
                ),
            )
        )
    if interactions:
        tables.append(
            SectionTable(
                "Interactions between heads",
                interaction_semantics,
                (
                    "heads",
                    "baseline",
                    f"effect alone A / B ({unit})",
                    f"effect together ({unit})",
                    f"interaction, {ci}",
                    f"A: {conc}",
                    f"B: {conc}",
                    "flags",
                ),
                tuple(
                    (
                        f"{row.head_a} & {row.head_b}",
                        row.baseline,
                        f"{_num(row.effect_a)} / {_num(row.effect_b)}",
                        _num(row.effect_pair),
                        _est(row.interaction, unit),
                        f"{_num(row.normalized_entropy_a, 3)} / {_num(row.sink_mass_a, 3)}",
                        f"{_num(row.normalized_entropy_b, 3)} / {_num(row.sink_mass_b, 3)}",
                        "compensation" if row.compensation else "",
                    )
                    for row in interactions
                ),
            )
        )
    return tuple(tables)
