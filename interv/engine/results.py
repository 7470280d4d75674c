"""Typed results of an intervention run.

An :class:`InterventionResult` holds, for every intervention and prompt, the target
metric's value, next to the clean and corrupted baselines of the same prompts, the
normalized recovery, each intervention's semantics sentence, the metric's definition
and unit, and the scope (model, task, prompts, answer positions). It never touches a
model: reports and plots consume it.

Normalized recovery of prompt ``i`` under intervention ``j``:
``(m[j, i] - m_corrupted[i]) / (m_clean[i] - m_corrupted[i])``; 1 = the clean value,
0 = the corrupted value (dimensionless). It is NaN where the denominator is within
``recovery_atol`` of 0 (the pair does not separate the runs); those prompts are counted
in :attr:`InterventionResult.n_undefined_recovery`.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated, Any, Literal

import torch

from interv._display import Display, number
from interv._pandas import positions_text, require_pandas
from interv._schema import AtLeast, parse
from interv.audit import (
    ESTIMATED,
    EXACT_AUDIT,
    EXACT_VERIFIED,
    UNRECORDED_ESTIMATE,
    Audit,
    StoredAudit,
)
from interv.engine.protocol import RUNS, Intervention, ReferenceSet, semantics
from interv.engine.sites import Site
from interv.errors import IntervError
from interv.provenance import Provenance
from interv.stats import too_few

if TYPE_CHECKING:
    import pandas

    from interv.engine.targets import TargetMetric
    from interv.tasks.tokenized import TokenizedPairs

__all__ = [
    "EXACT",
    "STATUSES",
    "InterventionResult",
    "MetricInfo",
    "Scope",
    "ScreenOutcome",
    "intervention_fields",
    "intervention_params",
    "normalized_recovery",
]


EXACT = "exact"
"""The status of a value from an exact intervention in a run without a screen."""

STATUSES: tuple[str, ...] = (EXACT, EXACT_VERIFIED, EXACT_AUDIT, ESTIMATED)
"""Every status a result's value can have; only :data:`~interv.audit.ESTIMATED` is not exact."""


def normalized_recovery(
    values: torch.Tensor, clean: torch.Tensor, corrupted: torch.Tensor, atol: float
) -> torch.Tensor:
    """``(values - corrupted) / (clean - corrupted)``, NaN where ``|clean - corrupted| <= atol``.

    Args:
        values: ``[..., n_prompts]`` metric values under an intervention.
        clean: ``[n_prompts]`` clean baseline.
        corrupted: ``[n_prompts]`` corrupted baseline.
        atol: absolute tolerance on the denominator, in the metric's unit.

    Returns:
        Same shape as ``values``; dimensionless (1 = clean, 0 = corrupted).
    """
    denominator = clean - corrupted
    defined = denominator.abs() > atol
    safe = torch.where(defined, denominator, torch.ones_like(denominator))
    return torch.where(defined, (values - corrupted) / safe, torch.nan)


@dataclass(frozen=True)
class MetricInfo:
    """Name, unit and one-sentence definition of the target metric of a result."""

    name: str
    unit: str
    definition: str


@dataclass(frozen=True)
class Scope:
    """What the numbers of a result are about.

    Attributes:
        model_name: ``model.cfg.model_name``.
        task_name: the task's name.
        n_prompts: number of prompt pairs.
        n_positions: padded prompt length, in tokens.
        answer_positions: the scored position of each prompt.
        padding_side: ``"right"`` or ``"left"``.

    What joins compare (model identity, prompt fingerprints) is the result's
    :class:`~interv.provenance.Provenance`.
    """

    model_name: str
    task_name: str
    n_prompts: Annotated[int, AtLeast(1)]
    n_positions: Annotated[int, AtLeast(1)]
    answer_positions: tuple[int, ...]
    padding_side: Literal["right", "left"]

    def __post_init__(self) -> None:
        if len(self.answer_positions) != self.n_prompts:
            raise IntervError(
                f"answer_positions holds {len(self.answer_positions)} positions for "
                f"n_prompts {self.n_prompts}"
            )
        outside = [
            p for p in self.answer_positions if not -self.n_positions <= p < self.n_positions
        ]
        if outside:
            raise IntervError(
                f"answer_positions {outside[0]} is outside the {self.n_positions} positions"
            )

    @classmethod
    def of(cls, model: Any, task: TokenizedPairs) -> Scope:
        """The scope of a run of ``model`` on ``task``."""
        return cls(
            model_name=str(getattr(model.cfg, "model_name", type(model).__name__)),
            task_name=task.name,
            n_prompts=task.n_pairs,
            n_positions=task.n_positions,
            answer_positions=tuple(int(p) for p in task.answer_positions),
            padding_side=task.padding_side,
        )


def _plain(value: Any) -> Any:
    """A field value as JSON-ready data (tuples as lists; sets and objects by name)."""
    if isinstance(value, Intervention):
        return intervention_params(value)
    if isinstance(value, ReferenceSet):
        return f"reference set {value.name!r} ({value.tokens.shape[0]} prompts)"
    if isinstance(value, tuple | list):
        return [_plain(item) for item in value]
    if value is None or isinstance(value, bool | int | float | str):
        return value
    return repr(value)


def intervention_params(intervention: Intervention) -> dict[str, Any]:
    """An intervention's fields as JSON-ready data, with its class under ``"kind"``.

    E.g. ``{"kind": "ZeroAblation", "layer": 1, "head": 2, "positions": None}``.
    """
    values = {"kind": type(intervention).__name__}
    if dataclasses.is_dataclass(intervention):
        for spec in dataclasses.fields(intervention):
            values[spec.name] = _plain(getattr(intervention, spec.name))
    return values


def intervention_fields(
    interventions: Sequence[Intervention], task: TokenizedPairs | None
) -> dict[str, tuple]:
    """Per intervention: ``kinds`` (class names), ``descriptions`` (semantics sentences),
    ``base_runs``, ``sites`` (:class:`~interv.engine.sites.Site` or None) and ``params``
    (:func:`intervention_params`), as :meth:`InterventionResult.build` takes them."""
    return {
        "kinds": tuple(type(iv).__name__ for iv in interventions),
        "descriptions": tuple(semantics(iv, task) for iv in interventions),
        "base_runs": tuple(iv.base_run for iv in interventions),
        "sites": tuple(iv.site for iv in interventions),
        "params": tuple(intervention_params(iv) for iv in interventions),
    }


@dataclass(frozen=True, eq=False)
class ScreenOutcome:
    """How one screen checked some of a result's interventions (see :mod:`interv.audit`).

    Attributes:
        indices: the result rows (interventions) the screen covered, in the audit's
            candidate order.
        audit: the verification and audit of their prompt-mean effects.
        label: what the candidates are, in words (e.g. "zero_ablation, 270 heads").
    """

    indices: tuple[int, ...]
    audit: Audit
    label: str

    def describe(self) -> str:
        """The audit's outcome in one sentence: what was checked, the misses, the bound,
        the rank agreement of estimate and exact with its interval, what stopped it."""
        audit = self.audit
        level = f"{audit.screen.level:.0%}"
        if math.isnan(audit.rank_agreement):
            reason = too_few(audit.n_checked, "checked candidate", "rank correlation")
            rank = f"rank agreement {reason or 'n/a (constant values)'}"
        else:
            low, high = audit.rank_interval
            rank = (
                f"Spearman rho of estimate and exact over the {audit.n_checked} checked "
                f"{audit.rank_agreement:.2f} [{low:.2f}, {high:.2f}] ({level} bootstrap)"
            )
        return f"{self.label}: {audit.describe()}; {rank}"

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-ready data; :meth:`from_dict` inverts it."""
        return {"indices": list(self.indices), "label": self.label, "audit": self.audit.to_dict()}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ScreenOutcome:
        """The outcome :meth:`to_dict` wrote, read through its schema (:class:`StoredOutcome`)."""
        stored = parse(StoredOutcome, data, "screen outcome")
        return cls(tuple(stored.indices), Audit.from_dict(data["audit"]), stored.label)


@dataclass(frozen=True)
class StoredOutcome:
    """The schema of a :class:`ScreenOutcome` as :meth:`ScreenOutcome.to_dict` writes it."""

    indices: list[Annotated[int, AtLeast(0)]]
    label: str
    audit: StoredAudit


@dataclass(frozen=True, eq=False)
class InterventionResult:
    """Per-intervention, per-prompt target metric values with their baselines.

    Attributes:
        values: ``[n_interventions, n_prompts]`` metric under each intervention.
        clean: ``[n_prompts]`` metric on the clean run (no intervention).
        corrupted: ``[n_prompts]`` metric on the corrupted run (no intervention).
        recovery: ``[n_interventions, n_prompts]`` normalized recovery (dimensionless),
            NaN where undefined.
        n_undefined_recovery: number of prompts whose clean and corrupted baselines
            are within ``recovery_atol`` (their recovery is NaN for every intervention).
        recovery_atol: tolerance on ``|clean - corrupted|``, in the metric's unit.
        descriptions: the semantics sentence of each intervention.
        kinds: the class name of each intervention.
        base_runs: the run each intervention modified (``"clean"``/``"corrupted"``).
        sites: where each intervention acts (component, layer, head, positions), as
            data; None for an intervention that is not filed under one site (e.g. a
            combination of heads).
        params: each intervention's fields as plain data (:func:`intervention_params`),
            e.g. the second head of a pair ablation or the receivers of a path patch.
        metric: the metric's name, unit and definition.
        scope: model, task, prompts and positions.
        provenance: model (name, weights, dtype), prompts and pairs, metric
            (:class:`~interv.provenance.Provenance`); every join of this result with
            another goes through :func:`~interv.provenance.join`.
        status: per intervention, how its values were obtained (:data:`STATUSES`):
            ``"exact"`` (a run without a screen), ``"exact (verified)"`` or ``"exact
            (audit)"`` (intervened on by a screen's verification or audit), or
            ``"estimated"``: a screen's estimate (the base run's value plus the
            estimated change), not intervened on (:meth:`estimate_sentence` names the
            estimator).
        screens: the screens that chose what was intervened on, with their audits (each
            covers the rows in its :attr:`ScreenOutcome.indices`).
    """

    values: torch.Tensor
    clean: torch.Tensor
    corrupted: torch.Tensor
    recovery: torch.Tensor
    n_undefined_recovery: int
    recovery_atol: float
    descriptions: tuple[str, ...]
    kinds: tuple[str, ...]
    base_runs: tuple[str, ...]
    sites: tuple[Site | None, ...]
    params: tuple[dict[str, Any], ...]
    metric: MetricInfo
    scope: Scope
    provenance: Provenance
    status: tuple[str, ...] = ()
    screens: tuple[ScreenOutcome, ...] = ()

    def __post_init__(self) -> None:
        if not isinstance(self.provenance, Provenance):
            raise IntervError(
                f"an InterventionResult's provenance must be an interv Provenance; got "
                f"{type(self.provenance).__name__}"
            )
        n = int(self.values.shape[0])
        if not self.status:
            object.__setattr__(self, "status", (EXACT,) * n)
        if len(self.status) != n or not set(self.status) <= set(STATUSES):
            raise IntervError(
                f"status must give one of {STATUSES} per intervention ({n}); got "
                f"{len(self.status)} values {sorted(set(self.status))}"
            )

    @classmethod
    def build(
        cls,
        values: torch.Tensor,
        clean: torch.Tensor,
        corrupted: torch.Tensor,
        *,
        kinds: Sequence[str],
        descriptions: Sequence[str],
        base_runs: Sequence[str],
        sites: Sequence[Site | None],
        params: Sequence[dict[str, Any]],
        metric: MetricInfo | TargetMetric,
        scope: Scope,
        provenance: Provenance,
        recovery_atol: float,
        status: Sequence[str] = (),
        screens: Sequence[ScreenOutcome] = (),
    ) -> InterventionResult:
        """A result from metric values and per-intervention fields; recovery is derived.

        The one constructor of results, for the runner (fields from
        :func:`intervention_fields`) and for sweeps read back from disk.
        """
        return cls(
            values=values,
            clean=clean,
            corrupted=corrupted,
            recovery=normalized_recovery(values, clean, corrupted, recovery_atol),
            n_undefined_recovery=int(((clean - corrupted).abs() <= recovery_atol).sum()),
            recovery_atol=recovery_atol,
            descriptions=tuple(descriptions),
            kinds=tuple(kinds),
            base_runs=tuple(base_runs),
            sites=tuple(sites),
            params=tuple(params),
            metric=MetricInfo(metric.name, metric.unit, metric.definition),
            scope=scope,
            provenance=provenance,
            status=tuple(status),
            screens=tuple(screens),
        )

    @property
    def n_interventions(self) -> int:
        """Number of interventions (rows of :attr:`values`)."""
        return int(self.values.shape[0])

    @property
    def exact(self) -> torch.Tensor:
        """``[n_interventions]`` bool: True where the values come from an intervention,
        False where they are a screen's estimate."""
        return torch.tensor([status != ESTIMATED for status in self.status], dtype=torch.bool)

    @property
    def screened(self) -> bool:
        """True when a screen chose which interventions to run exactly."""
        return bool(self.screens)

    @functools.cached_property
    def _screen_of(self) -> dict[int, ScreenOutcome]:
        """Row -> the screen that covered it (the last one, should several claim a row)."""
        return {index: outcome for outcome in self.screens for index in outcome.indices}

    def estimate_sentence(self, index: int) -> str:
        """How intervention ``index``'s values were estimated, e.g. ``"estimated by
        integrated gradients (5 path points), not intervened"``: the sentence of the screen
        that covered the row (:meth:`~interv.audit.Audit.estimate_sentence`), or
        :data:`~interv.audit.UNRECORDED_ESTIMATE` where the result holds none; ``""`` for an
        exact value."""
        if self.status[index] != ESTIMATED:
            return ""
        outcome = self._screen_of.get(index)
        return UNRECORDED_ESTIMATE if outcome is None else outcome.audit.estimate_sentence()

    def estimate_sentences(self) -> tuple[str, ...]:
        """The distinct :meth:`estimate_sentence` of the estimated values, in row order."""
        return tuple(
            dict.fromkeys(
                self.estimate_sentence(j)
                for j in range(self.n_interventions)
                if self.status[j] == ESTIMATED
            )
        )

    def sentence(self, index: int) -> str:
        """The sentence of intervention ``index``'s values: its intervention's sentence, and
        for an estimate, its :meth:`estimate_sentence` after it."""
        sentence = self.descriptions[index]
        if self.status[index] == ESTIMATED:
            return f"{sentence}; {self.estimate_sentence(index)}"
        return sentence

    def mean(self) -> torch.Tensor:
        """``[n_interventions]`` mean metric over prompts, in the metric's unit."""
        return self.values.mean(-1)

    @property
    def effect(self) -> torch.Tensor:
        """``[n_interventions, n_prompts]`` float64 effect, in the metric's unit: the metric
        under each intervention minus the metric of the run it modified (its ``base_run``:
        clean for ablations, value edits and noising, corrupted for denoising)."""
        runs = torch.stack([self.clean, self.corrupted]).to(torch.float64)
        base = runs[[RUNS.index(run) for run in self.base_runs]]
        return self.values.to(torch.float64) - base

    @property
    def effect_scale(self) -> float:
        """``|mean clean - mean corrupted|`` over prompts (float64), in the metric's unit: the
        size of the behaviour the prompt pairs separate, which flags judge effects against."""
        clean, corrupted = self.clean.to(torch.float64), self.corrupted.to(torch.float64)
        return abs(float(clean.mean() - corrupted.mean()))

    def mean_recovery(self) -> torch.Tensor:
        """``[n_interventions]`` normalized recovery of the prompt-mean metric.

        ``(mean m - mean m_corrupted) / (mean m_clean - mean m_corrupted)``, the usual
        aggregate of patching studies (dimensionless; NaN if the means are within
        ``recovery_atol``). Differs from the mean of per-prompt :attr:`recovery`.
        """
        return normalized_recovery(
            self.mean(), self.clean.mean(), self.corrupted.mean(), self.recovery_atol
        )

    def to_records(self) -> list[dict[str, Any]]:
        """One plain dict per intervention x prompt, for tables and reports.

        Keys: ``intervention`` (index), ``kind``, ``semantics`` (:meth:`sentence`: an
        estimate says so), ``status`` and ``exact`` (False for an estimate), ``base_run``,
        ``component``, ``layer``, ``head``, ``positions`` (the site; None where the
        intervention has no single site), ``prompt`` (index), ``answer_position``,
        ``value``, ``clean``, ``corrupted``, ``recovery``, ``metric``, ``unit``,
        ``metric_definition``, ``model``, ``task``, ``n_prompts``.
        """
        records = []
        for j in range(self.n_interventions):
            site = self.sites[j]
            sentence = self.sentence(j)
            where = (
                dict.fromkeys(("component", "layer", "head", "positions"))
                if site is None
                else site.to_dict()
            )
            for i in range(self.scope.n_prompts):
                records.append(
                    {
                        "intervention": j,
                        "kind": self.kinds[j],
                        "semantics": sentence,
                        "status": self.status[j],
                        "exact": self.status[j] != ESTIMATED,
                        "base_run": self.base_runs[j],
                        **where,
                        "prompt": i,
                        "answer_position": self.scope.answer_positions[i],
                        "value": float(self.values[j, i]),
                        "clean": float(self.clean[i]),
                        "corrupted": float(self.corrupted[i]),
                        "recovery": float(self.recovery[j, i]),
                        "metric": self.metric.name,
                        "unit": self.metric.unit,
                        "metric_definition": self.metric.definition,
                        "model": self.scope.model_name,
                        "task": self.scope.task_name,
                        "n_prompts": self.scope.n_prompts,
                    }
                )
        return records

    def display(self, max_rows: int = 10) -> Display:
        """What :meth:`__repr__` and :meth:`_repr_html_` show: scope, metric and baselines
        with their unit, then the ``max_rows`` interventions with the largest |mean
        effect|, each with its prompt range, recovery, status and semantics sentence."""
        unit = self.metric.unit
        n = self.n_interventions
        effect = self.effect
        mean = effect.mean(-1) if effect.shape[1] else torch.full((n,), torch.nan)
        recovery = self.mean_recovery()
        order = sorted(
            range(n), key=lambda j: (math.isnan(float(mean[j])), -abs(float(mean[j])), j)
        )
        shown = order[:max_rows]
        rows = []
        for j in shown:
            site = self.sites[j]
            estimate = self.status[j] == ESTIMATED
            low, high = (
                (float(effect[j].min()), float(effect[j].max()))
                if effect.shape[1]
                else (
                    math.nan,
                    math.nan,
                )
            )
            rows.append(
                [
                    str(j),
                    self.kinds[j],
                    "-" if site is None else site.label,
                    ("≈ " if estimate else "") + number(float(mean[j])),
                    f"[{number(low)}, {number(high)}]",
                    number(float(recovery[j]), 3),
                    self.status[j],
                ]
            )
        scope = self.scope
        lines = [
            f"model {scope.model_name}; task {scope.task_name!r}, {scope.n_prompts} prompt "
            f"pairs of {scope.n_positions} tokens",
            f"metric {self.metric.name} ({unit}): {self.metric.definition}",
            f"baselines, mean over prompts: clean {number(float(self.clean.mean()))} {unit}, "
            f"corrupted {number(float(self.corrupted.mean()))} {unit} (effect scale "
            f"{number(self.effect_scale)} {unit})",
            "effect: the metric under the intervention minus the metric of the run it "
            "modified (clean for ablations, corrupted for denoising), mean over prompts and "
            "its range over prompts; recovery: (mean m - mean corrupted) / (mean clean - "
            "mean corrupted) of the prompt means, dimensionless (1 = clean, 0 = corrupted)",
        ]
        n_estimated = sum(status == ESTIMATED for status in self.status)
        if n_estimated:
            lines.append(
                f"{n_estimated} of {n} values are estimates (marked ≈, status {ESTIMATED!r}): "
                + "; ".join(self.estimate_sentences())
            )
        lines.append(
            f"largest |mean effect| first ({len(shown)} of {n} shown; every row and prompt: "
            ".to_pandas())"
        )
        return Display(
            title=f"InterventionResult: {n} interventions",
            lines=lines,
            headers=[
                "#",
                "kind",
                "site",
                f"mean effect ({unit})",
                f"range over prompts ({unit})",
                "recovery",
                "status",
            ],
            rows=rows,
            notes=[self.sentence(j) for j in shown],
            left_out=n - len(shown),
        )

    def __repr__(self) -> str:
        return self.display().text()

    def _repr_html_(self) -> str:
        return self.display().html()

    def to_pandas(self) -> pandas.DataFrame:
        """A long ``pandas.DataFrame``, one row per intervention x prompt (the keys of
        :meth:`to_records`), plus ``effect`` = ``value`` minus the value of the run the
        intervention modified (``clean`` or ``corrupted``, per ``base_run``), in ``unit``
        (needs pandas).

        >>> frame = result.to_pandas()
        >>> frame.pivot_table(index=["layer", "head"], columns="kind", values="effect")
        """
        frame = require_pandas().DataFrame.from_records(self.to_records())
        if frame.empty:
            return frame
        frame.insert(frame.columns.get_loc("value") + 1, "effect", self.effect.flatten().numpy())
        frame["positions"] = frame["positions"].map(positions_text)
        return frame
