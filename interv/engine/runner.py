"""``interv.run``: measure a target metric under each intervention, next to both baselines.

1. One clean and one corrupted forward (plus one per named reference set) give the
   baselines and capture, once, every activation the interventions read.
2. The interventions run stacked along the batch axis, each on its own copy of its base
   run's prompts (see :mod:`interv.engine.stacking`), and are scored at each prompt's
   answer position.

Plan, then execute: :meth:`RunPlan.build` checks every input and decides the run (the
interventions, the metric, the batch size, prefix reuse, progress) as one frozen value
before any forward; :func:`execute` runs a plan, and a screened sweep hands it a
:class:`Resume` as well.

>>> plan = RunPlan.build(model, task, [ZeroAblation(1, 0)], "logit_diff")
>>> result = execute(model, plan)  # the same as run(model, task, [ZeroAblation(1, 0)])

With ``reuse_prefix=True`` (the default) each intervened forward starts at the earliest
block its interventions touch, from the base run's recorded block inputs, and computes
logits at the answer positions only; the results equal full forwards up to float
rounding. ``reuse_prefix=False`` runs every intervened forward from the embedding (the
reference path). The runner never prints; hooks never outlive a call.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch

from interv._checks import as_finite, as_int
from interv._progress import Progress, check_progress, counting
from interv.audit import Screen
from interv.engine.answer_metric import answer_metric
from interv.engine.protocol import RUNS, Intervention, semantics
from interv.engine.results import InterventionResult, Scope, ScreenOutcome, intervention_fields
from interv.engine.screening import (
    ExactScoring,
    Resume,
    check_screen,
    exact_values,
    pool_label,
    screened_values,
)
from interv.engine.sites import check_prompt_positions
from interv.engine.stacking import (
    BaseRunCache,
    BaseRuns,
    auto_batch_rows,
    capture_base_runs,
    planned_reads,
    task_runs,
)
from interv.engine.targets import TargetMetric, get_metric
from interv.errors import IntervError
from interv.provenance import Provenance
from interv.tasks.tokenized import TokenizedPairs

__all__ = ["Resume", "RunPlan", "check_task", "execute", "run", "warm_cache"]


def _checked_interventions(
    interventions: Intervention | Sequence[Intervention], model: Any, task: TokenizedPairs
) -> tuple[Intervention, ...]:
    """Each intervention as it applies to ``model`` (:meth:`~Intervention.for_model`), with
    its sentence, base run, sites and positions checked against the model and the task."""
    if isinstance(interventions, Intervention):
        interventions = (interventions,)
    if isinstance(interventions, str) or not isinstance(interventions, Sequence):
        raise IntervError(
            "interventions must be an intervention or a sequence of them; got "
            f"{type(interventions).__name__}"
        )
    for intervention in interventions:
        semantics(intervention, task)
    checked = tuple(intervention.for_model(model) for intervention in interventions)
    cfg = model.cfg
    for intervention in checked:
        if intervention.base_run not in RUNS:
            raise IntervError(
                f"{type(intervention).__name__}.base_run must be one of {RUNS}; got "
                f"{intervention.base_run!r}"
            )
        intervention.check(cfg, task.n_positions)
        for what, positions, from_first_real in intervention.prompt_positions():
            check_prompt_positions(
                positions,
                task.attention_mask,
                f"{type(intervention).__name__} {what}",
                from_first_real=from_first_real,
            )
    return checked


def _base_runs(
    model: Any,
    task: TokenizedPairs,
    interventions: Sequence[Intervention],
    reuse_prefix: bool,
    cache: BaseRunCache | None,
) -> BaseRuns:
    base = capture_base_runs(
        model,
        task_runs(task),
        planned_reads(model, interventions, reuse_prefix=reuse_prefix),
        readout="position_logits",
        positions=task.answer_positions,
        task=task,
        reuse=None if cache is None else cache.get(model, task),
    )
    if cache is not None:
        cache.put(model, task, base)
    return base


def warm_cache(
    model: Any,
    task: TokenizedPairs,
    interventions: Sequence[Intervention],
    cache: BaseRunCache,
    *,
    reuse_prefix: bool = True,
) -> None:
    """Fill ``cache`` with the base runs every one of ``interventions`` needs, in one go.

    A sweep does this before its first unit, so that its units (which call :func:`run`
    with the same cache) never rerun the clean and corrupted forwards for an activation
    an earlier unit did not need.
    """
    checked = _checked_interventions(interventions, model, check_task(task, model))
    _base_runs(model, task, checked, reuse_prefix, cache)


def check_task(task: Any, model: Any = None) -> TokenizedPairs:
    """``task`` if it is a :class:`TokenizedPairs` (checked against ``model``'s vocabulary
    and context when given: :meth:`TokenizedPairs.fitted`), else a clear error saying how
    to get one."""
    if isinstance(task, TokenizedPairs):
        return task if model is None else task.fitted(model.cfg)
    hint = (
        "; call .tokenize(model) on it first"
        if type(task).__name__ == "PromptPairs"
        else " (interv.load_task(name).tokenize(model), or PromptPairs(...).tokenize(model))"
    )
    raise IntervError(f"task must be a TokenizedPairs; got {type(task).__name__}{hint}")


def run(
    model: Any,
    task: TokenizedPairs,
    interventions: Intervention | Sequence[Intervention],
    metric: str | TargetMetric = "logit_diff",
    *,
    max_batch_size: int | None = None,
    recovery_atol: float = 1e-6,
    reuse_prefix: bool = True,
    cache: BaseRunCache | None = None,
    screen: Screen | None = None,
    progress: Progress = None,
) -> InterventionResult:
    """Measure ``metric`` on ``task`` under each intervention, with both baselines.

    With ``screen``, the interventions are candidates of one screen
    (:mod:`interv.engine.screening`): every one is estimated by the screen's estimator
    (``Screen.estimator``: attribution, to first order from one forward and one backward per
    base run, by default), and only the screen's verified top and its audit sample are run
    exactly; the others' values are estimates, marked so in
    :attr:`~interv.engine.results.InterventionResult.status` and described by the screen's
    :meth:`~interv.audit.Screen.estimate_sentence`
    (:meth:`~interv.engine.results.InterventionResult.sentence`), and the audit travels in
    :attr:`~interv.engine.results.InterventionResult.screens`.

    ``run`` is :meth:`RunPlan.build` (every check, before any forward) then
    :func:`execute`.

    Args:
        model: a transformer-lens ``TransformerBridge`` (in eval mode for
            deterministic results).
        task: clean/corrupted prompt pairs with answer positions and target ids.
        interventions: one intervention or a sequence of them (built-in kinds or your own,
            see :mod:`interv.engine.protocol`).
        metric: a name in :data:`interv.engine.targets.METRICS` or a
            :class:`~interv.engine.targets.TargetMetric`.
        max_batch_size: most rows per intervened forward; interventions are stacked
            along the batch axis up to this many rows (at least one intervention's
            ``task.n_pairs`` rows per forward). None (default): chosen from the model, the
            prompts' length and the free memory by
            :func:`~interv.engine.stacking.auto_batch_rows` (about 4096 tokens per forward
            on CPU, 32768 on CUDA, within a quarter of the free memory).
        recovery_atol: tolerance on ``|clean - corrupted|`` below which normalized
            recovery is NaN, in the metric's unit (finite, >= 0).
        reuse_prefix: run each intervened forward from the earliest block it edits,
            with logits at the answer positions only (exact up to float rounding);
            models whose forward does not call each block once get full forwards.
            False runs full forwards, the reference path.
        cache: a :class:`~interv.engine.stacking.BaseRunCache` shared by several calls on
            the same model and task: their clean and corrupted forwards (and captured
            activations) are computed once.
        screen: an :class:`~interv.audit.Screen` (how many to verify, audit, the miss-rate
            target) to screen the interventions instead of running all of them; None
            (default) runs every one exactly. Screenable kinds:
            :data:`~interv.engine.screening.SCREENABLE_KINDS`.
        progress: a bar over the interventions as their forwards finish: None (default)
            draws tqdm's widget in a notebook and a bar on a terminal, nothing when stderr
            is piped or inside another bar of interv; True / False always / never; a
            callable ``progress(done, total, label)`` is called instead of drawing (``done``
            interventions of ``total`` computed; with ``screen``, the estimated ones count
            as done when the screen ends).

    Returns:
        An :class:`~interv.engine.results.InterventionResult` with ``values``
        ``[n_interventions, n_prompts]``.

    Raises:
        IntervError: a task that is not tokenized, an unknown metric, a metric needing a
            foil on a task without one, an intervention without a semantics sentence or
            that does not fit the model or the task, a bad ``max_batch_size``, or a
            ``screen`` that is not a Screen, on a kind it cannot estimate, or with a
            ``top_k`` beyond the interventions, or a ``progress`` that is none of the above;
            a model that is not a transformer-lens bridge (None, a name).
    """
    plan = RunPlan.build(
        model,
        task,
        interventions,
        metric,
        max_batch_size=max_batch_size,
        recovery_atol=recovery_atol,
        reuse_prefix=reuse_prefix,
        screen=screen,
        progress=progress,
    )
    return execute(model, plan, cache=cache)


@dataclass(frozen=True, eq=False)
class RunPlan:
    """One run of :func:`run`, decided and checked before any forward: what
    :func:`execute` does, as a value.

    Build it with :meth:`build`, which checks every input; a plan is never partly valid.

    Attributes:
        task: the tokenized task, checked against the model.
        interventions: the interventions, each checked against the model and the task.
        metric: the target metric (its foil checked against the task).
        max_batch_size: most rows per intervened forward (resolved: never None).
        recovery_atol: tolerance of normalized recovery, in the metric's unit.
        reuse_prefix: start each intervened forward at its earliest edited block.
        screen: the screen the interventions are candidates of, or None (all exact).
        progress: the progress setting of the run (see :func:`run`).
    """

    task: TokenizedPairs
    interventions: tuple[Intervention, ...]
    metric: TargetMetric
    max_batch_size: int
    recovery_atol: float
    reuse_prefix: bool
    screen: Screen | None
    progress: Progress

    @classmethod
    def build(
        cls,
        model: Any,
        task: TokenizedPairs,
        interventions: Intervention | Sequence[Intervention],
        metric: str | TargetMetric,
        *,
        max_batch_size: int | None = None,
        recovery_atol: float = 1e-6,
        reuse_prefix: bool = True,
        screen: Screen | None = None,
        progress: Progress = None,
    ) -> RunPlan:
        """The checked plan of :func:`run`'s arguments (see there); raises
        :class:`~interv.errors.IntervError` on any bad input, before any forward."""
        if not hasattr(model, "cfg") or not hasattr(model, "hooks"):
            raise IntervError(
                f"model must be a transformer-lens bridge (interv.load_model(spec)); got "
                f"{type(model).__name__}"
            )
        task = check_task(task, model)
        target_metric = get_metric(metric)
        target_metric.check_foil(task.foil_ids)
        progress = check_progress(progress)
        if max_batch_size is not None:
            as_int(max_batch_size, "max_batch_size", minimum=1)
        recovery_atol = as_finite(recovery_atol, "recovery_atol", minimum=0)
        if not isinstance(reuse_prefix, bool):
            raise IntervError(f"reuse_prefix must be True or False; got {reuse_prefix!r}")
        checked = _checked_interventions(interventions, model, task)
        if screen is not None:
            check_screen(screen, checked, target_metric, model)
        if max_batch_size is None:
            max_batch_size = auto_batch_rows(model, task.n_positions, task.n_pairs)
        return cls(
            task,
            checked,
            target_metric,
            max_batch_size,
            recovery_atol,
            reuse_prefix,
            screen,
            progress,
        )

    @property
    def label(self) -> str:
        """What the progress bar says: ``interv.run: 27 interventions (screened)``."""
        n = len(self.interventions)
        screened = " (screened)" if self.screen is not None else ""
        return f"interv.run: {n} intervention{'' if n == 1 else 's'}{screened}"


def execute(
    model: Any, plan: RunPlan, *, cache: BaseRunCache | None = None, resume: Resume | None = None
) -> InterventionResult:
    """Run ``plan`` on ``model``: the base runs, then every intervention exactly or screened.

    ``cache`` shares base runs across calls on the same model and task (see :func:`run`);
    ``resume`` continues an interrupted screened run (only with ``plan.screen``).
    """
    if resume is not None and plan.screen is None:
        raise IntervError("resume= continues a screened run; the plan has no screen")
    task, checked = plan.task, plan.interventions
    with counting(len(checked), plan.label, progress=plan.progress, unit="intervention") as count:
        base = _base_runs(model, task, checked, plan.reuse_prefix, cache)
        clean_logits = base.readouts["clean"].cpu()

        def score(logits: torch.Tensor) -> torch.Tensor:
            """``[k * n_pairs, d_vocab]`` answer logits -> ``[k, n_pairs]`` metric."""
            copies = logits.shape[0] // task.n_pairs
            of = answer_metric(plan.metric, task, clean_logits, copies=copies)
            return of(logits).reshape(copies, task.n_pairs)

        clean = score(clean_logits)[0]
        corrupted = score(base.readouts["corrupted"].cpu())[0]
        status: tuple[str, ...] = ()
        screens: tuple[ScreenOutcome, ...] = ()
        if plan.screen is None:
            values = exact_values(
                model,
                task,
                checked,
                base,
                score,
                max_batch_size=plan.max_batch_size,
                reuse_prefix=plan.reuse_prefix,
                on_forward=lambda indices, _values: count.advance(len(indices)),
            )
        else:
            resume = resume or Resume()

            def on_exact(indices: list[int], exact: torch.Tensor) -> None:
                count.advance(len(indices))
                if resume.on_exact is not None:
                    resume.on_exact(indices, exact)

            scoring = ExactScoring(
                score,
                {"clean": clean, "corrupted": corrupted},
                max_batch_size=plan.max_batch_size,
                reuse_prefix=plan.reuse_prefix,
            )
            screened = screened_values(
                model,
                task,
                checked,
                base,
                plan.metric,
                plan.screen,
                scoring,
                dataclasses.replace(resume, on_exact=on_exact),
            )
            count.advance(len(checked))  # the rest are estimates, done too
            values = screened.values.to(clean.dtype)
            status = screened.status
            screens = (
                ScreenOutcome(tuple(range(len(checked))), screened.audit, pool_label(checked)),
            )
    return InterventionResult.build(
        values,
        clean,
        corrupted,
        **intervention_fields(checked, task),
        metric=plan.metric,
        scope=Scope.of(model, task),
        provenance=Provenance.of(model, task, metric=plan.metric.name),
        recovery_atol=plan.recovery_atol,
        status=status,
        screens=screens,
    )
