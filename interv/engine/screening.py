"""Screened runs: an estimate of every site, exact interventions where it matters.

>>> screen = interv.Screen(top_k=5, audit=20)
>>> result = interv.run(model, task, ablations, screen=screen)
>>> result.status[:3]   # "exact (verified)", "exact (audit)" or "estimated"

An exact sweep runs one (suffix of a) forward per intervention. A screen estimates every
intervention's effect at once, from one forward and one backward of each base run, and
:func:`interv.audit.verify_screen` then intervenes exactly on the largest estimates and on a
uniform random audit sample of the rest, and bounds what the screen could have missed.

The estimate. For an intervention that replaces the activation ``a`` of one site in its base
run by ``a'`` (zero, a mean, a resampled or a patched activation), and the target metric
``m_i`` of prompt ``i``::

    m_i(a') - m_i(a)  ~=  sum_{pos, d} (d m_i / d a)[pos, d] * (a' - a)[pos, d]

the first-order Taylor expansion around the base run. ``a'`` is the intervention's own
:meth:`~interv.engine.protocol.Intervention.edit` applied to the base run's activation, so
the estimate and the exact value share one semantics; for patching it is attribution
patching (:func:`interv.engine.attribution_patching.approximate_head_patching_scores`).
Gradients come from one forward and one backward per base run (the clean run for
ablations and noising, the corrupted run for denoising), every site at once. The estimate
is wrong where the metric or an attention pattern saturates or effects cancel: it ranks,
the exact interventions decide.

Other estimators (:data:`~interv.audit.ESTIMATORS`): integrated gradients along the path to
the interventions, GIM's modified backward (no Taylor term), and Zhang & Wang's HVP
correction (:func:`second_order_estimates`: the second-order term along each intervention's
own change added, one stacked copy of the prompts per intervention, with a reliability score
per candidate in :attr:`~interv.audit.Audit.reliability`).

A value that was not intervened on is marked :data:`~interv.audit.ESTIMATED` and carries
its screen's sentence (:meth:`~interv.audit.Screen.estimate_sentence`, recorded in the audit
as :attr:`~interv.audit.Audit.method`), which names the estimator: "estimated by attribution
(first-order), not intervened" for the default one.

Screenable kinds (:data:`SCREENABLE_KINDS`): the head ablations (zero, mean, resample) and
activation patches (denoising, noising), at all positions or at chosen ones. The metric's
gradient must not vanish identically at the base run: ``kl_from_clean`` is minimal (zero
gradient) at the clean run, so it can screen denoising only.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch

from interv.audit import ESTIMATED, Audit, Screen, verify_screen
from interv.engine.answer_metric import answer_gradients, answer_metric
from interv.engine.backward import GIM, check_gim, gradient_scale, modified_backward
from interv.engine.forward import HookFn, Prompts, forward
from interv.engine.interventions import (
    ActivationPatch,
    MeanAblation,
    ResampleAblation,
    ZeroAblation,
)
from interv.engine.protocol import EditContext, Intervention
from interv.engine.registry import kind_of
from interv.engine.second_order import (
    along_patches,
    check_second_order,
    copies_per_forward,
    hvp_estimates,
    reliability,
)
from interv.engine.sites import Site, select_head
from interv.engine.stacking import BaseRuns, intervened_readouts
from interv.engine.targets import TargetMetric
from interv.errors import IntervError

if TYPE_CHECKING:
    from interv.tasks.tokenized import TokenizedPairs

__all__ = [
    "SCREENABLE_KINDS",
    "ExactScoring",
    "Resume",
    "Screened",
    "check_screen",
    "check_screenable",
    "exact_values",
    "first_order_estimates",
    "pool_label",
    "screened_values",
    "second_order_estimates",
]

SCREENABLE_KINDS: tuple[str, ...] = (
    "zero_ablation",
    "mean_ablation",
    "resample_ablation",
    "activation_patch",
    "denoise",
    "noise",
)
"""Kind names a screen accepts: replacements of one site whose first-order change is
``grad . (replacement - activation)``."""

_SCREENABLE_CLASSES = (ZeroAblation, MeanAblation, ResampleAblation, ActivationPatch)

# Metrics whose gradient vanishes at a run: the clean run for kl_from_clean (its minimum).
_ZERO_GRADIENT_AT = {"kl_from_clean": "clean"}


def _kind_name(intervention: Intervention) -> str:
    kind = kind_of(type(intervention))
    return type(intervention).__name__ if kind is None else kind.name


def check_screenable(interventions: Sequence[Intervention], metric: TargetMetric) -> None:
    """Raise :class:`IntervError` unless a screen can estimate every intervention.

    Names the first intervention that cannot be screened and the kinds that can; refuses a
    metric whose gradient is identically zero at an intervention's base run.
    """
    for index, intervention in enumerate(interventions):
        if type(intervention) not in _SCREENABLE_CLASSES:
            raise IntervError(
                f"screen= cannot estimate intervention {index} ({_kind_name(intervention)}: "
                f"{intervention.describe()}); the kinds a screen can estimate are "
                f"{SCREENABLE_KINDS}. Run the others without screen="
            )
        if _ZERO_GRADIENT_AT.get(metric.name) == intervention.base_run:
            raise IntervError(
                f"screen= with metric {metric.name!r} cannot estimate intervention {index} "
                f"({_kind_name(intervention)}): the metric is minimal, its gradient zero, at "
                f"the {intervention.base_run} run it modifies; screen it with another metric "
                "or run it without screen="
            )


def check_screen(
    screen: object,
    interventions: Sequence[Intervention],
    metric: TargetMetric,
    model: Any = None,
) -> None:
    """Raise :class:`IntervError` unless ``screen`` is a :class:`~interv.audit.Screen` that
    can screen ``interventions`` (screenable kinds, ``top_k`` within their number) on
    ``model`` (``estimator="gim"``: a family GIM's backward supports; ``"hvp"``: one whose
    attention the second derivative passes)."""
    if not isinstance(screen, Screen):
        raise IntervError(
            f"screen must be an interv.Screen (e.g. interv.Screen(top_k=20, audit=60)) or "
            f"None; got {type(screen).__name__} ({screen!r})"
        )
    if screen.top_k > len(interventions):
        raise IntervError(
            f"Screen top_k ({screen.top_k}) must be at most the number of interventions "
            f"screened ({len(interventions)})"
        )
    check_screenable(interventions, metric)
    if screen.estimator == "gim" and model is not None:
        check_gim(model, True)
    if screen.estimator == "hvp" and model is not None:
        check_second_order(model)


def pool_label(interventions: Sequence[Intervention]) -> str:
    """The candidates of a screen in words, e.g. ``"270 zero_ablation interventions"``."""
    counts: dict[str, int] = {}
    for intervention in interventions:
        name = _kind_name(intervention)
        counts[name] = counts.get(name, 0) + 1
    return " and ".join(
        f"{count} {name} intervention{'s' if count != 1 else ''}" for name, count in counts.items()
    )


def _all_positions(intervention: Intervention) -> Intervention:
    """The same intervention at every position (the built-in screenable kinds restrict their
    all-position replacement to ``positions``, so one edit serves every position set)."""
    if getattr(intervention, "positions", None) is None:
        return intervention
    return dataclasses.replace(intervention, positions=None)


def _gradients(
    model: Any,
    task: TokenizedPairs,
    run: str,
    sites: Sequence[Site],
    metric: TargetMetric,
    clean_logits: torch.Tensor,
    hooks: Sequence[tuple[Site, Any]] = (),
    gim: GIM | None = None,
) -> tuple[dict[Site, torch.Tensor], dict[Site, torch.Tensor]]:
    """One forward and one backward of ``run`` (with ``hooks``): each site's activation and
    the gradient of each prompt's metric with respect to it (prompts are independent rows,
    so the gradient of the sum over prompts holds every prompt's own gradient). With
    ``gim`` the backward is GIM's (:mod:`interv.engine.backward`), the gradient at a q, k
    or v site scaled as the one flowing into it."""
    hooks = [*hooks, *([] if gim is None else gim.hooks(model.cfg.n_layers))]
    with modified_backward(model, gim):
        out = answer_gradients(model, task, run, sites, metric, clean_logits, hooks=hooks)
    grads = {site: g * gradient_scale(gim, site.component) for site, g in out.gradients.items()}
    return {site: out.captured[site] for site in sites}, grads


def _paths(wholes: Sequence[Intervention]) -> list[list[Intervention]]:
    """The all-position interventions split into groups that edit each site at most once
    (each group is one integration path: its sites move together)."""
    groups: list[list[Intervention]] = []
    for whole in wholes:
        site = whole.edits()[0]
        for group in groups:
            if all(other.edits()[0] != site for other in group):
                group.append(whole)
                break
        else:
            groups.append([whole])
    return groups


def _path_gradients(
    model: Any,
    task: TokenizedPairs,
    run: str,
    group: Sequence[Intervention],
    context: EditContext,
    activations: dict[Site, torch.Tensor],
    first: dict[Site, torch.Tensor],
    metric: TargetMetric,
    clean_logits: torch.Tensor,
    steps: int,
) -> tuple[dict[Site, torch.Tensor], dict[Site, torch.Tensor]]:
    """The group's path ``a + beta (a' - a)``, ``beta = k / steps`` for ``k = 0..steps-1``
    (every site of the group at once; ``a'`` what each intervention writes at its head):
    ``(a' - a, mean gradient along the path)`` per block site. ``first``: the gradient at
    ``beta = 0`` (the base run), already computed."""
    cfg = model.cfg
    change: dict[Site, torch.Tensor] = {}
    for whole in group:
        site = whole.edits()[0]
        block = Site(site.component, site.layer)
        before = activations[block]
        if block not in change:
            change[block] = torch.zeros_like(before)
        head = select_head(before, site, cfg)
        after = whole.edit(site, head.clone(), context).to(before.dtype)
        select_head(change[block], site, cfg).copy_(after - head)
    sites = sorted(change, key=lambda s: s.order)
    total = {site: first[site].clone() for site in sites}

    def along(block: Site, beta: float) -> Any:
        def hook(activation: torch.Tensor, hook: Any) -> torch.Tensor:
            return (activations[block] + beta * change[block]).to(activation)

        return hook

    for k in range(1, steps):
        hooks = [(site, along(site, k / steps)) for site in sites]
        _, grads = _gradients(model, task, run, sites, metric, clean_logits, hooks)
        for site in sites:
            total[site] += grads[site]
    return change, {site: total[site] / steps for site in sites}


def first_order_estimates(
    model: Any,
    task: TokenizedPairs,
    interventions: Sequence[Intervention],
    metric: TargetMetric,
    base: BaseRuns,
    *,
    steps: int = 1,
    gim: GIM | None = None,
) -> torch.Tensor:
    """Every intervention's estimated effect on every prompt (an estimate, not a result).

    ``estimate[j, i] = sum_{pos, d} g_j(a'_j - a)`` at the base run of intervention ``j``,
    with ``a`` its site's activation there, ``a'_j`` what its ``edit`` writes (see the
    module docstring) and ``g_j`` the gradient of ``m_i``: at the base run (``steps=1``,
    attribution: one forward and one backward per base run), or averaged over ``steps``
    points ``a + (k / steps)(a' - a)``, ``k = 0..steps-1``, of the straight path on which
    every screened site moves together toward its intervention (integrated gradients, as
    EAP-IG's activation variant; ``steps`` forwards and backwards per base run and per
    group of interventions that edit each site once).

    Args:
        model: the transformer-lens bridge.
        task: the prompt pairs.
        interventions: screenable interventions (:func:`check_screenable`).
        metric: the target metric.
        base: the base runs of ``interventions`` (their reads captured), as
            :func:`interv.run` computes them.
        steps: path points (1: attribution).
        gim: GIM's backward (:class:`~interv.engine.backward.GIM`) for the gradient at the
            base run (attribution only: ``steps=1``); None: the model's own.

    Returns:
        ``[n_interventions, n_prompts]`` float64 estimated change of each prompt's metric,
        in the metric's unit.
    """
    check_screenable(interventions, metric)
    if gim is not None and steps != 1:
        raise IntervError(f"gim combines with attribution (steps=1) only; got steps={steps}")
    cfg = model.cfg
    clean_logits = base.readouts["clean"]
    estimates = torch.zeros(len(interventions), task.n_pairs, dtype=torch.float64)
    masks = base.source_masks()
    for run in sorted({iv.base_run for iv in interventions}):
        members = [j for j, iv in enumerate(interventions) if iv.base_run == run]
        edited = [interventions[j].edits()[0] for j in members]
        sites = sorted({Site(site.component, site.layer) for site in edited}, key=lambda s: s.order)
        activations, grads = _gradients(model, task, run, sites, metric, clean_logits, gim=gim)
        context = EditContext(
            model=model,
            mask=base.prompts[run].mask,
            task=task,
            captured=base.captured,
            source_masks=masks,
        )
        wholes = list(dict.fromkeys(_all_positions(interventions[j]) for j in members))
        # per all-position intervention: [n_prompts, pos] contributions, summed over d
        per_position: dict[Intervention, torch.Tensor] = {}
        for group in _paths(wholes):
            change, gradient = _path_gradients(
                model, task, run, group, context, activations, grads, metric, clean_logits, steps
            )
            for whole in group:
                site = whole.edits()[0]
                block = Site(site.component, site.layer)
                delta = select_head(change[block], site, cfg)
                product = (select_head(gradient[block], site, cfg) * delta).double()
                per_position[whole] = product.flatten(2).sum(-1)  # [n, pos]
        for j in members:
            intervention = interventions[j]
            contributions = per_position[_all_positions(intervention)]
            positions = getattr(intervention, "positions", None)
            chosen = contributions if positions is None else contributions[:, list(positions)]
            estimates[j] = chosen.sum(-1).cpu()
    return estimates


def second_order_estimates(
    model: Any,
    task: TokenizedPairs,
    interventions: Sequence[Intervention],
    metric: TargetMetric,
    base: BaseRuns,
    *,
    segments: int = 1,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Every intervention's HVP-corrected estimate (Zhang & Wang) and its reliability score.

    For intervention ``j``, ``delta_j = a'_j - a`` its change at its site (at its positions;
    0 elsewhere; ``a'_j`` what its ``edit`` writes) in its base run, and ``f_j(t)`` the
    metric of that run reading ``a + t delta_j`` there, everything downstream live::

        estimate_j = f_j'(0) + f_j''(0) / 2        (segments=1; f_j'(0) is attribution's)
        estimate_j = sum_{s<S} f_j'(s/S) / S + f_j''(s/S) / (2 S^2)   (segments=S)
        reliability_j = |mean f_j''(0)| / (2 |mean f_j'(0)|)   (prompt means)

    ``f_j''(0) = delta_j^T H delta_j``, ``H`` the Hessian of the metric with respect to the
    site's activation (:mod:`interv.engine.second_order`). One no-grad forward of each base
    run for the activations; then each intervention is one copy of the prompts in a stacked
    forward with two backwards, per segment.

    Args:
        model, task, interventions, metric, base: as for :func:`first_order_estimates`.
        segments: the multi-step estimate's segments (1: the single HVP correction).

    Returns:
        ``[n_interventions, n_prompts]`` float64 estimated change of each prompt's metric, and
        ``[n_interventions]`` float64 reliability scores (0 where both terms are 0, inf where
        only the first-order term is 0).
    """
    check_screenable(interventions, metric)
    check_second_order(model)
    n = task.n_pairs
    clean_logits = base.readouts["clean"]
    estimates = torch.zeros(len(interventions), n, dtype=torch.float64)
    first = torch.zeros(len(interventions), n, dtype=torch.float64)
    second = torch.zeros(len(interventions), n, dtype=torch.float64)
    masks = base.source_masks()
    copies = copies_per_forward(model, n, task.n_positions)
    for run in sorted({iv.base_run for iv in interventions}):
        members = [j for j, iv in enumerate(interventions) if iv.base_run == run]
        prompts = base.prompts[run]
        edited = [interventions[j].edits()[0] for j in members]
        blocks = sorted({Site(s.component, s.layer) for s in edited}, key=lambda s: s.order)
        activations = forward(model, prompts, capture=blocks, readout=None).captured
        context = EditContext(
            model=model, mask=prompts.mask, task=task, captured=base.captured, source_masks=masks
        )
        patches = [_change(interventions[j], activations, context) for j in members]
        for start in range(0, len(members), copies):
            chunk = patches[start : start + copies]
            of = answer_metric(metric, task, clean_logits, copies=len(chunk))
            along = functools.partial(_along, model, task, prompts, chunk, of)
            rows = members[start : start + copies]
            estimates[rows], first[rows], second[rows] = hvp_estimates(along, segments)
    return estimates, reliability(first.mean(-1), second.mean(-1))


def _along(
    model: Any,
    task: TokenizedPairs,
    prompts: Prompts,
    patches: Sequence[tuple[Site, torch.Tensor]],
    of: Callable[[torch.Tensor], torch.Tensor],
    at: float,
) -> tuple[torch.Tensor, torch.Tensor]:
    """``f'(at)``, ``f''(at)`` ``[len(patches), n]`` of one stacked forward of the patches."""
    k, n = len(patches), task.n_pairs
    return along_patches(
        model,
        prompts,
        task.answer_positions,
        k,
        lambda t: _patch_hooks(model.cfg, n, patches, t),
        lambda logits: of(logits).reshape(k, n),
        at=at,
    )


def _change(
    intervention: Intervention, activations: Mapping[Site, torch.Tensor], context: EditContext
) -> tuple[Site, torch.Tensor]:
    """``(site, a' - a)``: the change ``intervention`` writes at its site (head-sliced), all
    positions, zero outside its ``positions``."""
    whole = _all_positions(intervention)
    site = whole.edits()[0]
    before = select_head(activations[Site(site.component, site.layer)], site, context.cfg)
    delta = whole.edit(site, before.clone(), context).to(before.dtype) - before
    positions = getattr(intervention, "positions", None)
    if positions is not None:
        keep = torch.zeros(delta.shape[1], dtype=delta.dtype, device=delta.device)
        keep[list(positions)] = 1
        delta = delta * keep.view(1, -1, *([1] * (delta.ndim - 2)))
    return site, delta


def _patch_hooks(
    cfg: Any, n: int, patches: Sequence[tuple[Site, torch.Tensor]], t: torch.Tensor
) -> list[tuple[Site, HookFn]]:
    """Hooks adding ``t[copy] * delta`` of each copy's patch at its site (rows ``copy * n ..``)."""
    by_block: dict[Site, list[tuple[int, Site, torch.Tensor]]] = {}
    for copy, (site, delta) in enumerate(patches):
        by_block.setdefault(Site(site.component, site.layer), []).append((copy, site, delta))

    def adder(entries: list[tuple[int, Site, torch.Tensor]]) -> HookFn:
        def add(activation: torch.Tensor, hook: Any) -> torch.Tensor:
            parts = list(activation.split(n))
            for copy, site, delta in entries:
                scale = t[copy].view(n, *([1] * (delta.ndim - 1))).to(activation)
                part = parts[copy].clone()
                select_head(part, site, cfg).add_(delta.to(activation) * scale)
                parts[copy] = part
            return torch.cat(parts)

        return add

    return [(block, adder(entries)) for block, entries in by_block.items()]


def exact_values(
    model: Any,
    task: TokenizedPairs,
    interventions: Sequence[Intervention],
    base: BaseRuns,
    score: Callable[[torch.Tensor], torch.Tensor],
    *,
    max_batch_size: int,
    reuse_prefix: bool,
    on_forward: Callable[[list[int], torch.Tensor], None] | None = None,
) -> torch.Tensor:
    """``[n_interventions, n_prompts]`` metric under each intervention, by exact forwards
    (stacked, with prefix reuse), scored by ``score`` (answer logits -> ``[k, n_prompts]``),
    in ``score``'s dtype. ``on_forward(indices, values)`` sees each forward's interventions
    (indices into ``interventions``) and values as soon as it is done."""
    values: torch.Tensor | None = None
    for indices, logits in intervened_readouts(
        model,
        interventions,
        base,
        readout="position_logits",
        positions=task.answer_positions,
        max_batch_size=max_batch_size,
        reuse_prefix=reuse_prefix,
        task=task,
    ):
        scored = score(logits.cpu())
        if values is None:
            values = torch.empty(len(interventions), task.n_pairs, dtype=scored.dtype)
        values[indices] = scored
        if on_forward is not None:
            on_forward(list(indices), scored)
    if values is None:
        return torch.empty(0, task.n_pairs)
    return values


@dataclass(frozen=True, eq=False)
class Screened:
    """What a screened run computed, per intervention.

    Attributes:
        values: ``[n_interventions, n_prompts]`` float64 metric values: exact where
            ``status`` says exact, the base run's value plus the estimate elsewhere.
        estimates: ``[n_interventions, n_prompts]`` float64 estimates (the screen's
            estimator's) of each prompt's change (every intervention, checked or not).
        status: per intervention, :data:`~interv.audit.EXACT_VERIFIED`,
            :data:`~interv.audit.EXACT_AUDIT` or :data:`~interv.audit.ESTIMATED`.
        audit: the verification and audit (:class:`~interv.audit.Audit`) of the prompt-mean
            effects.
        n_computed: exact evaluations this call ran (the rest were ``known``).
    """

    values: torch.Tensor
    estimates: torch.Tensor
    status: tuple[str, ...]
    audit: Audit
    n_computed: int


@dataclass(frozen=True)
class ExactScoring:
    """How a screen's exact values are computed and what its effects are measured from.

    Attributes:
        score: answer logits ``[k * n_prompts, d_vocab]`` -> ``[k, n_prompts]`` metric.
        baselines: ``{"clean": [n_prompts], "corrupted": [n_prompts]}`` metric values of
            the base runs (an intervention's effect is its value minus its base run's).
        max_batch_size, reuse_prefix: the exact forwards' batching, as for :func:`interv.run`.
    """

    score: Callable[[torch.Tensor], torch.Tensor]
    baselines: Mapping[str, torch.Tensor]
    max_batch_size: int
    reuse_prefix: bool


@dataclass(frozen=True)
class Resume:
    """Where an interrupted screened run continues, and who keeps its work: what a
    screened sweep hands :func:`interv.engine.runner.execute` (see :func:`screened_values`).

    Attributes:
        known: ``[n, n_prompts]`` exact values computed before (NaN rows where not), never
            recomputed; None: none.
        estimates: ``[n, n_prompts]`` the earlier estimates, so that the ranking and the
            audit sample are the interrupted run's; None: estimate anew.
        reliability: ``[n]`` the earlier estimates' reliability scores (``estimator="hvp"``;
            :attr:`~interv.audit.Audit.reliability`), handed back with ``estimates``; None:
            the estimator gives none.
        on_estimates: called once with the estimates and their reliability scores (None
            unless ``estimator="hvp"``), ``on_estimates(estimates, reliability)``, before any
            exact work.
        on_exact: called with ``(indices, values)`` after each exact forward.
    """

    known: torch.Tensor | None = None
    estimates: torch.Tensor | None = None
    reliability: torch.Tensor | None = None
    on_estimates: Callable[[torch.Tensor, torch.Tensor | None], None] | None = None
    on_exact: Callable[[list[int], torch.Tensor], None] | None = None


def screened_values(
    model: Any,
    task: TokenizedPairs,
    interventions: Sequence[Intervention],
    base: BaseRuns,
    metric: TargetMetric,
    screen: Screen,
    scoring: ExactScoring,
    resume: Resume | None = None,
) -> Screened:
    """Estimate every intervention, verify and audit exactly (:func:`verify_screen`).

    Each look of the verification asks for all its candidates at once; they run in one
    call of stacked exact forwards with prefix reuse, and ``resume.on_exact`` sees each
    forward's values as soon as it is done (a sweep stores them then).

    Args:
        model, task, interventions, base, metric: as for :func:`first_order_estimates`.
        screen: the checking rule.
        scoring: how exact values are computed, and the base runs' values.
        resume: what an interrupted call left (:class:`Resume`): exact values ``known``
            are reused, never recomputed; ``estimates`` of the earlier call make a resumed
            screen rank and audit exactly as the interrupted one did; ``on_estimates`` and
            ``on_exact`` see the new work as it is done. None: a fresh screen.

    Returns:
        A :class:`Screened`.
    """
    resume = resume or Resume()
    known, estimates, on_exact = resume.known, resume.estimates, resume.on_exact
    n = len(interventions)
    check_screen(screen, interventions, metric, model)
    steps = screen.steps if screen.estimator == "integrated" else 1
    gim = GIM() if screen.estimator == "gim" else None
    second_order = screen.estimator == "hvp"
    reliability_scores = None
    if resume.reliability is not None:
        if estimates is None or not second_order:
            raise IntervError(
                "Resume.reliability comes with the stored estimates of an HVP screen "
                f"(estimator='hvp'); got it with estimator={screen.estimator!r} and "
                f"{'no' if estimates is None else 'stored'} estimates"
            )
        reliability_scores = torch.as_tensor(resume.reliability, dtype=torch.float64).flatten()
        if reliability_scores.numel() != n:
            raise IntervError(
                f"Resume.reliability must hold one score per intervention ({n}); got "
                f"{reliability_scores.numel()}"
            )
    if estimates is None:
        if second_order:
            estimates, reliability_scores = second_order_estimates(
                model, task, interventions, metric, base, segments=screen.hvp_steps
            )
        else:
            estimates = first_order_estimates(
                model, task, interventions, metric, base, steps=steps, gim=gim
            )
        if resume.on_estimates is not None:
            resume.on_estimates(estimates, reliability_scores)
    estimates = torch.as_tensor(estimates, dtype=torch.float64)
    if estimates.shape != (n, task.n_pairs):
        raise IntervError(
            f"estimates must have shape {(n, task.n_pairs)} (interventions x prompts); got "
            f"{tuple(estimates.shape)}"
        )
    base_values = torch.stack(
        [scoring.baselines[iv.base_run].double() for iv in interventions]
    )  # [n, n_prompts]
    values = torch.full((n, task.n_pairs), torch.nan, dtype=torch.float64)
    if known is not None:
        known = torch.as_tensor(known, dtype=torch.float64)
        if known.shape != values.shape:
            raise IntervError(
                f"known must have shape {tuple(values.shape)} (interventions x prompts); "
                f"got {tuple(known.shape)}"
            )
        whole = ~known.isnan().any(-1)
        values[whole] = known[whole]
    known_effects = (values - base_values).mean(-1)
    computed = 0

    def evaluate(indices: torch.Tensor) -> torch.Tensor:
        todo = indices.tolist()

        def done(local: list[int], exact: torch.Tensor) -> None:
            nonlocal computed
            picked = [todo[i] for i in local]
            values[picked] = exact.double()
            computed += len(picked)
            if on_exact is not None:
                on_exact(picked, exact)

        exact_values(
            model,
            task,
            [interventions[j] for j in todo],
            base,
            scoring.score,
            max_batch_size=scoring.max_batch_size,
            reuse_prefix=scoring.reuse_prefix,
            on_forward=done,
        )
        return (values[indices] - base_values[indices]).mean(-1)

    audit = verify_screen(
        screen,
        estimates.mean(-1),
        evaluate,
        method=screen.estimate_method(),
        known=known_effects,
    )
    if reliability_scores is not None:
        audit = dataclasses.replace(audit, reliability=reliability_scores)
    estimated = torch.tensor([s == ESTIMATED for s in audit.status])
    values[estimated] = base_values[estimated] + estimates[estimated]
    return Screened(values, estimates, audit.status, audit, computed)
