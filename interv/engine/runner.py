"""The one effectful runner: forwards with hooks, batched, scored at the answer position.

:func:`run` measures a target metric on a task's prompts under each intervention,
next to the clean and corrupted baselines of the same prompts:

1. One clean and one corrupted forward (plus one per named reference set), which give
   the baselines and capture, once, every activation the interventions take their
   replacements from.
2. One forward per group of interventions: each intervention gets its own copy of
   its base run's prompts, stacked along the batch axis (at most ``max_batch_size``
   rows per forward), and its hooks edit only its rows.

Hooks are attached only inside ``model.hooks(...)``, which removes exactly the hooks
it attached, also when a hook or the caller raises, and leaves hooks the user
attached alone. The runner never prints.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from interv.engine.hooks import (
    Captured,
    Source,
    build_hooks,
    check_intervention,
    required_activations,
)
from interv.engine.interventions import RUNS, Intervention, ReferenceSet
from interv.engine.results import InterventionResult, MetricInfo, Scope, normalized_recovery
from interv.engine.targets import TargetMetric, get_metric
from interv.errors import IntervError
from interv.tasks.tokenized import TokenizedPairs

__all__ = ["run"]


def _device(model: Any) -> torch.device:
    parameter = next(model.parameters(), None)
    return torch.device("cpu") if parameter is None else parameter.device


def _forward_kwargs(mask: torch.Tensor) -> dict[str, torch.Tensor]:
    """Pass the attention mask only when there is padding (otherwise the default path)."""
    return {} if bool(mask.all()) else {"attention_mask": mask}


def _answer_logits(logits: torch.Tensor, answer_positions: torch.Tensor) -> torch.Tensor:
    """``[batch, pos, d_vocab]`` -> ``[batch, d_vocab]`` at each row's answer position."""
    rows = torch.arange(logits.shape[0], device=logits.device)
    return logits[rows, answer_positions.to(logits.device)]


def _capture(
    model: Any, tokens: torch.Tensor, mask: torch.Tensor, names: set[str]
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """One forward: full logits and the activations named ``names``."""
    device = _device(model)
    logits, cache = model.run_with_cache(
        tokens.to(device),
        names_filter=lambda name: name in names,
        **_forward_kwargs(mask.to(device)),
    )
    return logits, {name: cache[name] for name in names}


def run(
    model: Any,
    task: TokenizedPairs,
    interventions: Intervention | Sequence[Intervention],
    metric: str | TargetMetric = "logit_diff",
    *,
    max_batch_size: int = 32,
    recovery_atol: float = 1e-6,
) -> InterventionResult:
    """Measure ``metric`` on ``task`` under each intervention, with both baselines.

    Args:
        model: a transformer-lens ``TransformerBridge`` (in eval mode for
            deterministic results).
        task: clean/corrupted prompt pairs with answer positions and target ids.
        interventions: one intervention or a sequence of them.
        metric: a name in :data:`interv.engine.targets.METRICS` or a
            :class:`~interv.engine.targets.TargetMetric`.
        max_batch_size: most rows per intervened forward; interventions are stacked
            along the batch axis up to this many rows (at least one intervention's
            ``task.n_pairs`` rows per forward).
        recovery_atol: tolerance on ``|clean - corrupted|`` below which normalized
            recovery is NaN, in the metric's unit.

    Returns:
        An :class:`~interv.engine.results.InterventionResult` with ``values``
        ``[n_interventions, n_prompts]``.

    Raises:
        IntervError: unknown metric, a metric needing a foil on a task without one,
            an intervention that does not fit the model or the task, or a bad
            ``max_batch_size``.
    """
    if isinstance(interventions, Intervention):
        interventions = (interventions,)
    interventions = tuple(interventions)
    target_metric = get_metric(metric)
    target_metric.check_foil(task.foil_ids)
    if isinstance(max_batch_size, bool) or not isinstance(max_batch_size, int):
        raise IntervError(f"max_batch_size must be an int >= 1; got {max_batch_size!r}")
    if max_batch_size < 1:
        raise IntervError(f"max_batch_size must be >= 1; got {max_batch_size}")
    cfg = model.cfg
    for intervention in interventions:
        check_intervention(intervention, cfg, task)

    needed: dict[Source, set[str]] = {run: set() for run in RUNS}
    for intervention in interventions:
        for source, name in required_activations(intervention):
            needed.setdefault(source, set()).add(name)

    run_tokens = {"clean": task.clean_tokens, "corrupted": task.corrupted_tokens}
    with torch.no_grad():
        captured: dict[tuple[Source, str], torch.Tensor] = {}
        answer_logits: dict[str, torch.Tensor] = {}
        for source, names in needed.items():
            if isinstance(source, ReferenceSet):
                _, activations = _capture(model, source.tokens, source.mask, names)
            else:
                logits, activations = _capture(
                    model, run_tokens[source], task.attention_mask, names
                )
                answer_logits[source] = _answer_logits(logits, task.answer_positions).cpu()
            captured.update({(source, name): act for name, act in activations.items()})

        def score(logits: torch.Tensor, n_copies: int) -> torch.Tensor:
            return target_metric(
                logits,
                task.target_ids.repeat(n_copies),
                None if task.foil_ids is None else task.foil_ids.repeat(n_copies),
                answer_logits["clean"].repeat(n_copies, 1),
            ).reshape(n_copies, task.n_pairs)

        clean = score(answer_logits["clean"], 1)[0]
        corrupted = score(answer_logits["corrupted"], 1)[0]
        values = [
            score(logits, logits.shape[0] // task.n_pairs)
            for logits in _intervened_answer_logits(
                model, task, interventions, captured, run_tokens, max_batch_size
            )
        ]

    values_tensor = torch.cat(values) if values else torch.empty(0, task.n_pairs)
    recovery = normalized_recovery(values_tensor, clean, corrupted, recovery_atol)
    return InterventionResult(
        values=values_tensor,
        clean=clean,
        corrupted=corrupted,
        recovery=recovery,
        n_undefined_recovery=int(((clean - corrupted).abs() <= recovery_atol).sum()),
        recovery_atol=recovery_atol,
        descriptions=tuple(iv.describe(task) for iv in interventions),
        kinds=tuple(type(iv).__name__ for iv in interventions),
        base_runs=tuple(iv.base_run for iv in interventions),
        metric=MetricInfo(target_metric.name, target_metric.unit, target_metric.definition),
        scope=Scope(
            model_name=str(getattr(cfg, "model_name", type(model).__name__)),
            task_name=task.name,
            n_prompts=task.n_pairs,
            n_positions=task.n_positions,
            answer_positions=tuple(int(p) for p in task.answer_positions),
            padding_side=task.padding_side,
        ),
    )


def _intervened_answer_logits(
    model: Any,
    task: TokenizedPairs,
    interventions: tuple[Intervention, ...],
    captured: Captured,
    run_tokens: dict[str, torch.Tensor],
    max_batch_size: int,
) -> list[torch.Tensor]:
    """Answer logits ``[k * n_pairs, d_vocab]`` of each group of ``k`` stacked interventions."""
    n = task.n_pairs
    per_forward = max(1, max_batch_size // n)
    device = _device(model)
    outputs = []
    for start in range(0, len(interventions), per_forward):
        group = interventions[start : start + per_forward]
        hooks = []
        for k, intervention in enumerate(group):
            rows = slice(k * n, (k + 1) * n)
            hooks.extend(build_hooks(intervention, model.cfg, task, captured, rows))
        tokens = torch.cat([run_tokens[iv.base_run] for iv in group])
        mask = task.attention_mask.repeat(len(group), 1)
        with model.hooks(fwd_hooks=hooks):
            logits = model(tokens.to(device), **_forward_kwargs(mask.to(device)))
        outputs.append(_answer_logits(logits, task.answer_positions.repeat(len(group))).cpu())
    return outputs
