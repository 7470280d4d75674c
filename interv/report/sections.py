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

from interv._display import number
from interv.engine.interventions import head_ablation
from interv.engine.results import intervention_params
from interv.engine.sites import head_label
from interv.flags import FlagRules
from interv.stats import bootstrap_mean_ci

__all__ = [
    "CONCENTRATED_INDIRECT",
    "DIRECT_OPPOSED",
    "BaselineCount",
    "DecompositionRow",
    "InteractionRow",
    "PathRow",
    "RankedHead",
    "SectionTable",
    "baseline_counts",
    "baseline_note",
    "decompositions",
    "interaction_rows",
    "ordinal",
    "path_rows",
    "ranked_heads",
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


def _largest_first(value: float) -> tuple[bool, float]:
    """Sort key: largest |value| first, NaN last."""
    return (math.isnan(value), -abs(value))


def _est(estimate: Estimate, unit: str) -> str:
    return f"{number(estimate.mean)} [{number(estimate.ci_low)}, {number(estimate.ci_high)}] {unit}"


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
    by_interaction = sorted(interactions, key=lambda r: _largest_first(r.interaction.mean))
    conc = "normalized entropy (fraction of log n) / sink mass (fraction)"
    tables = []
    if decomposition:
        tables.append(
            SectionTable(
                "Direct and indirect effects",
                "total = effect of the ablation on every path; direct = only on the path into "
                "the final norm and unembedding, the norm's scale frozen at the clean run's "
                "value; indirect = total - direct (through later blocks and the final norm's "
                "rescaling), per prompt. The direct and total sentences are in the table. Rows "
                "by |total effect|, largest first.",
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
                        f"{number(row.normalized_entropy, 3)} / {number(row.sink_mass, 3)}",
                        ", ".join(row.flags),
                        row.direct_semantics,
                    )
                    for row in sorted(decomposition, key=lambda r: _largest_first(r.total.mean))
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
                "corrupted). Rows by |effect|, largest first.",
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
                        number(row.recovery, 3),
                        f"{number(row.sender_normalized_entropy, 3)} / "
                        f"{number(row.sender_sink_mass, 3)}",
                        ", ".join(number(v, 3) for v in row.receivers_normalized_entropy) or "-",
                        row.semantics,
                    )
                    for row in sorted(paths, key=lambda r: _largest_first(r.effect.mean))
                ),
            )
        )
    if interactions:
        tables.append(
            SectionTable(
                "Interactions between heads",
                f"{interaction_semantics} Rows by |interaction|, largest first.".strip(),
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
                        f"{number(row.effect_a)} / {number(row.effect_b)}",
                        number(row.effect_pair),
                        _est(row.interaction, unit),
                        f"{number(row.normalized_entropy_a, 3)} / {number(row.sink_mass_a, 3)}",
                        f"{number(row.normalized_entropy_b, 3)} / {number(row.sink_mass_b, 3)}",
                        "compensation" if row.compensation else "",
                    )
                    for row in by_interaction
                ),
            )
        )
    return tuple(tables)


# ------------------------------------------------------------------------------------
# The headline: which heads matter, and how concentrated they are (and the reverse)
# ------------------------------------------------------------------------------------


def ordinal(n: int) -> str:
    """``1st``, ``2nd``, ``3rd``, ``4th``, ..., ``11th``, ``12th``, ``13th``, ``21st``."""
    suffix = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"


@dataclass(frozen=True)
class RankedHead:
    """One head of the headline: its effect under one kind with the interval, and its rank
    by |effect| and by concentration among the kind's heads.

    Attributes:
        head: the head label (``L26H0``); kind: the intervention class name.
        effect: the mean effect over prompts with its bootstrap interval (metric unit).
        effect_rank: rank by |mean effect| among the kind's heads (1 = largest).
        normalized_entropy: the head's mean normalized entropy (fraction of log n).
        concentration_rank: rank by normalized entropy (1 = most concentrated).
        n_heads: heads of the kind that are ranked (exact rows with a finite entropy).
        sink_mass: the head's mean sink mass (fraction of the row).
        flags: the row's flags; semantics: the intervention's sentence.
        other_effects: ``(kind, mean effect)`` of the same head under the report's other
            whole-head kinds, in report order.
    """

    head: str
    kind: str
    effect: Estimate
    effect_rank: int
    normalized_entropy: float
    concentration_rank: int
    n_heads: int
    sink_mass: float
    flags: tuple[str, ...]
    semantics: str
    other_effects: tuple[tuple[str, float], ...]

    @property
    def concentration_text(self) -> str:
        """``157th of 270 by normalized entropy (0.612)``."""
        return (
            f"{ordinal(self.concentration_rank)} of {self.n_heads} by normalized entropy "
            f"({number(self.normalized_entropy, 3)})"
        )

    @property
    def effect_text(self) -> str:
        """``3rd of 270 by |effect|``."""
        return f"{ordinal(self.effect_rank)} of {self.n_heads} by |effect|"


def ranked_heads(rows: Sequence[Any], kind: str) -> tuple[RankedHead, ...]:
    """Every exact whole-head row of ``kind`` with a finite normalized entropy as a
    :class:`RankedHead`, largest |effect| first (ties: the report's order).

    ``rows`` are :class:`~interv.report.table.ReportRow` (their bootstrap interval is
    carried as is).
    """
    members = [
        row
        for row in rows
        if row.kind == kind
        and row.head is not None
        and row.exact
        and row.concentration is not None
        and math.isfinite(row.concentration["normalized_entropy"])
        and math.isfinite(row.effect_mean)
    ]
    by_effect = sorted(members, key=lambda r: (-abs(r.effect_mean), r.index))
    by_conc = sorted(members, key=lambda r: (r.concentration["normalized_entropy"], r.index))
    conc_rank = {row.index: rank for rank, row in enumerate(by_conc, start=1)}
    others: dict[tuple[int, int], list[tuple[str, float]]] = {}
    for row in rows:
        if row.head is not None and row.exact and row.kind != kind:
            others.setdefault(row.head, []).append((row.kind, row.effect_mean))
    return tuple(
        RankedHead(
            head=row.label,
            kind=kind,
            effect=Estimate(row.effect_mean, row.effect_ci_low, row.effect_ci_high),
            effect_rank=rank,
            normalized_entropy=row.concentration["normalized_entropy"],
            concentration_rank=conc_rank[row.index],
            n_heads=len(members),
            sink_mass=row.concentration["sink_mass"],
            flags=row.flags,
            semantics=row.semantics,
            other_effects=tuple(others.get(row.head, ())),
        )
        for rank, row in enumerate(by_effect, start=1)
    )


@dataclass(frozen=True)
class BaselineCount:
    """How many heads an ablation baseline finds important.

    A head *passes* when its mean effect is beyond ``near_zero_fraction x effect scale``
    (the flag rules' "near zero") and its bootstrap interval excludes 0.
    """

    kind: str
    n_pass: int
    n_heads: int
    heads: tuple[str, ...]


def baseline_counts(
    rows: Sequence[Any], kinds: Sequence[str], threshold: float
) -> tuple[BaselineCount, ...]:
    """One :class:`BaselineCount` per kind of ``kinds`` with exact whole-head rows;
    ``threshold`` is the near-zero bound in the metric's unit."""
    counts = []
    for kind in kinds:
        members = [r for r in rows if r.kind == kind and r.head is not None and r.exact]
        if not members:
            continue
        passing = tuple(
            r.label
            for r in members
            if abs(r.effect_mean) > threshold and (r.effect_ci_low > 0 or r.effect_ci_high < 0)
        )
        counts.append(BaselineCount(kind, len(passing), len(members), passing))
    return tuple(counts)


_ZERO, _MEAN = "ZeroAblation", "MeanAblation"


def baseline_note(counts: Sequence[BaselineCount], threshold: float, unit: str) -> str | None:
    """A sentence for the headline when ablation baselines disagree about how many heads
    matter (the largest count is more than twice the smallest and at least 2 more), else
    None. Says that the zero-ablation picture is mostly off-distribution damage when most
    heads that pass under zero ablation do not pass under mean ablation."""
    if len(counts) < 2:
        return None
    low = min(c.n_pass for c in counts)
    high = max(c.n_pass for c in counts)
    if not (high > 2 * low and high - low >= 2):
        return None
    listed = "; ".join(f"{c.kind}: {c.n_pass} of {c.n_heads} heads" for c in counts)
    note = (
        f"The ablation baselines disagree about how many heads matter ({listed} pass: "
        f"|mean effect| > {threshold:.4g} {unit} with an interval excluding 0)."
    )
    by_kind = {c.kind: c for c in counts}
    zero, mean = by_kind.get(_ZERO), by_kind.get(_MEAN)
    if zero is not None and mean is not None and zero.n_pass:
        only_zero = sorted(set(zero.heads) - set(mean.heads))
        if 2 * len(only_zero) > zero.n_pass:
            note += (
                f" {len(only_zero)} of the {zero.n_pass} heads that pass under zero ablation "
                "do not pass under mean ablation: the zero-ablation picture is mostly "
                "off-distribution damage (setting an output to 0 moves the residual stream "
                "where the model never is), so read the mean-ablation effects first."
            )
    return note
