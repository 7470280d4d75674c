"""The one effectful runner: forwards with hooks, batched, scored at the answer position.

:func:`run` measures a target metric on a task's prompts under each intervention,
next to the clean and corrupted baselines of the same prompts:

1. One clean and one corrupted forward (plus one per named reference set), which give
   the baselines and capture, once, every activation the interventions take their
   replacements from.
2. One forward per group of interventions: each intervention gets its own copy of
   its base run's prompts, stacked along the batch axis (at most ``max_batch_size``
   rows per forward), and its hooks edit only its rows.

With ``reuse_prefix=True`` (the default) step 2 runs only what an intervention can
change (see :mod:`interv.engine._suffix`): interventions are grouped by their earliest
block ``L``, and each group's forward starts at block ``L`` from the base run's
residual stream (recorded in step 1) and computes logits at the answer positions only.
The results equal the full forwards up to float rounding; ``reuse_prefix=False`` runs
every intervened forward from the embedding (the reference path).

Hooks are attached only inside ``model.hooks(...)``, which removes exactly the hooks
it attached, also when a hook or the caller raises, and leaves hooks the user
attached alone. The runner never prints.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import torch

from interv.engine._suffix import BlockInputs, record_block_inputs, suffix_answer_logits
from interv.engine.forwarding import answer_logits, forward_kwargs, model_device
from interv.engine.hooks import (
    Captured,
    Source,
    build_hooks,
    check_intervention,
    required_activations,
)
from interv.engine.interventions import RUNS, Combined, Intervention, ReferenceSet
from interv.engine.results import InterventionResult, MetricInfo, Scope, normalized_recovery
from interv.engine.targets import TargetMetric, get_metric
from interv.errors import IntervError
from interv.tasks.tokenized import TokenizedPairs

__all__ = ["run"]


def _capture(
    model: Any, tokens: torch.Tensor, mask: torch.Tensor, names: set[str]
) -> tuple[torch.Tensor, dict[str, torch.Tensor], BlockInputs | None]:
    """One forward: full logits, the activations named ``names``, every block's inputs.

    The block inputs are None when the model's forward does not call each of its
    blocks once (then the prefix cannot be reused).
    """
    device = model_device(model)
    with record_block_inputs(model) as recorded:
        logits, cache = model.run_with_cache(
            tokens.to(device),
            names_filter=lambda name: name in names,
            **forward_kwargs(mask.to(device)),
        )
    block_inputs = recorded[0] if len(recorded) == 1 else None
    return logits, {name: cache[name] for name in names}, block_inputs


def run(
    model: Any,
    task: TokenizedPairs,
    interventions: Intervention | Sequence[Intervention],
    metric: str | TargetMetric = "logit_diff",
    *,
    max_batch_size: int = 32,
    recovery_atol: float = 1e-6,
    reuse_prefix: bool = True,
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
        reuse_prefix: run each intervened forward from the earliest block it edits,
            with logits at the answer positions only (exact; see the module
            docstring); models whose forward does not call each block once get
            full forwards. False runs full forwards, the reference path.

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
    if not isinstance(reuse_prefix, bool):
        raise IntervError(f"reuse_prefix must be True or False; got {reuse_prefix!r}")
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
        baseline_logits: dict[str, torch.Tensor] = {}
        block_inputs: dict[str, BlockInputs | None] = {}
        for source, names in needed.items():
            if isinstance(source, ReferenceSet):
                _, activations, _ = _capture(model, source.tokens, source.mask, names)
            else:
                logits, activations, block_inputs[source] = _capture(
                    model, run_tokens[source], task.attention_mask, names
                )
                baseline_logits[source] = answer_logits(logits, task.answer_positions).cpu()
            captured.update({(source, name): act for name, act in activations.items()})

        def score(logits: torch.Tensor) -> torch.Tensor:
            """``[k * n_pairs, d_vocab]`` answer logits -> ``[k, n_pairs]`` metric."""
            n_copies = logits.shape[0] // task.n_pairs
            return target_metric(
                logits,
                task.target_ids.repeat(n_copies),
                None if task.foil_ids is None else task.foil_ids.repeat(n_copies),
                baseline_logits["clean"].repeat(n_copies, 1),
            ).reshape(n_copies, task.n_pairs)

        clean = score(baseline_logits["clean"])[0]
        corrupted = score(baseline_logits["corrupted"])[0]
        prefix = None
        if reuse_prefix and all(block_inputs[run] is not None for run in RUNS):
            prefix = {run: block_inputs[run] for run in RUNS}
        values_tensor = torch.empty(len(interventions), task.n_pairs, dtype=clean.dtype)
        for indices, logits in _intervened_answer_logits(
            model, task, interventions, captured, run_tokens, max_batch_size, prefix
        ):
            values_tensor[indices] = score(logits)

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


def _start_layer(intervention: Intervention) -> int:
    """The earliest block whose computation ``intervention`` edits."""
    parts = intervention.parts if isinstance(intervention, Combined) else (intervention,)
    return min(part.layer for part in parts)


def _intervened_answer_logits(
    model: Any,
    task: TokenizedPairs,
    interventions: tuple[Intervention, ...],
    captured: Captured,
    run_tokens: dict[str, torch.Tensor],
    max_batch_size: int,
    prefix: dict[str, BlockInputs] | None,
) -> Iterator[tuple[list[int], torch.Tensor]]:
    """Per group of ``k`` stacked interventions: their indices and answer logits.

    Yields ``(indices, logits)`` with ``logits`` ``[k * n_pairs, d_vocab]`` (CPU), rows
    ``j * n_pairs .. (j + 1) * n_pairs - 1`` belonging to ``interventions[indices[j]]``.
    With ``prefix`` (the base runs' block inputs), groups share an earliest block and
    run from it; without, every forward starts at the embedding.
    """
    n = task.n_pairs
    per_forward = max(1, max_batch_size // n)
    device = model_device(model)
    by_start: dict[int, list[int]] = {}
    for index, intervention in enumerate(interventions):
        layer = 0 if prefix is None else _start_layer(intervention)
        by_start.setdefault(layer, []).append(index)
    for layer, indices in sorted(by_start.items()):
        for start in range(0, len(indices), per_forward):
            chunk = indices[start : start + per_forward]
            group = [interventions[i] for i in chunk]
            hooks = []
            for k, intervention in enumerate(group):
                rows = slice(k * n, (k + 1) * n)
                hooks.extend(build_hooks(intervention, model.cfg, task, captured, rows))
            answer_positions = task.answer_positions.repeat(len(group))
            with model.hooks(fwd_hooks=hooks):
                if prefix is None:
                    tokens = torch.cat([run_tokens[iv.base_run] for iv in group])
                    mask = task.attention_mask.repeat(len(group), 1)
                    logits = model(tokens.to(device), **forward_kwargs(mask.to(device)))
                    logits = answer_logits(logits, answer_positions)
                else:
                    base = [prefix[iv.base_run] for iv in group]
                    logits = suffix_answer_logits(model, base, layer, answer_positions)
            yield chunk, logits.cpu()
