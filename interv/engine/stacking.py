"""Many edited copies of the same prompts in one forward: base runs, hooks, the loop.

The engine measures many interventions on the same prompts. It runs

1. the *base runs*, once each: the prompts of every run an intervention modifies or reads
   from (``"clean"``, ``"corrupted"``) and of every :class:`ReferenceSet` it reads from,
   capturing every activation the interventions :meth:`~Intervention.reads`, recording
   each block's inputs for prefix reuse, and reading out the baselines;
2. the *intervened forwards*: each intervention gets its own copy of its base run's
   prompts, copies are stacked along the batch axis (at most ``max_batch_size`` rows per
   forward), and the hooks built by :func:`edit_hooks` let each intervention edit only its
   own rows. With prefix reuse, interventions are grouped by their earliest block and each
   group's forward starts there (:class:`~interv.engine.forward.Suffix`).

Used by :func:`interv.run` and the pruning evaluations. Internal: no stability promise.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch

from interv.engine.forward import ForwardOutput, HookFn, Prefix, Prompts, Suffix, forward
from interv.engine.protocol import (
    EditContext,
    EditedRun,
    Intervention,
    Read,
    ReferenceSet,
    Source,
)
from interv.engine.sites import Site, select_head
from interv.errors import IntervError

if TYPE_CHECKING:
    from interv.tasks.tokenized import TokenizedPairs

__all__ = [
    "BaseRuns",
    "capture_base_runs",
    "edit_hooks",
    "forward_under",
    "intervened_readouts",
    "task_runs",
]


@dataclass(frozen=True, eq=False)
class BaseRuns:
    """The unedited forwards of one set of prompts.

    Attributes:
        prompts: run or reference set -> its prompts.
        prefixes: run -> recorded block inputs (None where a forward could not be recorded).
        readouts: run -> its readout (e.g. ``[n, d_vocab]`` logits at the answer positions).
        captured: (source, site) -> activation (all positions, every head), on the model's
            device.
    """

    prompts: Mapping[Source, Prompts]
    prefixes: Mapping[str, Prefix | None]
    readouts: Mapping[str, torch.Tensor | None]
    captured: Mapping[tuple[Source, Site], torch.Tensor]

    def source_masks(self) -> dict[Source, torch.Tensor]:
        """Run or reference set -> ``[n, pos]`` bool mask of its prompts."""
        return {source: prompts.mask for source, prompts in self.prompts.items()}


def task_runs(task: TokenizedPairs) -> dict[str, Prompts]:
    """The two runs of a task: ``{"clean": Prompts, "corrupted": Prompts}``."""
    return {
        "clean": Prompts.of(task.clean_tokens, task.attention_mask),
        "corrupted": Prompts.of(task.corrupted_tokens, task.attention_mask),
    }


def _wanted_sites(runs: Mapping[str, Prompts], reads: Iterable[Read]) -> dict[Source, set[Site]]:
    """Source -> the sites read from it, following edited runs' own reads."""
    wanted: dict[Source, set[Site]] = {run: set() for run in runs}
    pending = list(reads)
    while pending:
        read = pending.pop()
        source = read.source
        if isinstance(source, str) and source not in runs:
            raise IntervError(
                f"an intervention reads from run {source!r}; available: {tuple(runs)}"
            )
        if isinstance(source, EditedRun) and source not in wanted:
            pending.extend(source.intervention.reads())
        wanted.setdefault(source, set()).add(read.site.without_positions())
    return wanted


def _depth(source: Source) -> int:
    """0 for runs and reference sets; 1 + the depth of what an edited run reads from."""
    if not isinstance(source, EditedRun):
        return 0
    return 1 + max((_depth(read.source) for read in source.intervention.reads()), default=0)


def capture_base_runs(
    model: Any,
    runs: Mapping[str, Prompts],
    reads: Iterable[Read],
    *,
    readout: str | None,
    positions: torch.Tensor | None = None,
    record_prefix: bool = True,
    task: TokenizedPairs | None = None,
) -> BaseRuns:
    """One forward per run of ``runs``, per reference set and per edited run in ``reads``.

    Runs read out ``readout`` (at ``positions``) and record their prefix; reference sets
    and edited runs only capture what is read from them and stop after their latest site
    (an edited run starts at its intervention's earliest block when its run's prefix is
    recorded). Edited runs go after everything they read from.
    """
    wanted = _wanted_sites(runs, reads)
    prompts: dict[Source, Prompts] = dict(runs)
    prefixes: dict[str, Prefix | None] = {}
    readouts: dict[str, torch.Tensor | None] = {}
    captured: dict[tuple[Source, Site], torch.Tensor] = {}
    for source in sorted(wanted, key=_depth):
        ordered = sorted(wanted[source], key=lambda site: site.order)
        if isinstance(source, str):
            out: ForwardOutput = forward(
                model,
                runs[source],
                capture=ordered,
                readout=readout,
                positions=positions,
                record_prefix=record_prefix,
            )
            prefixes[source], readouts[source] = out.prefix, out.readout
        elif isinstance(source, ReferenceSet):
            prompts[source] = Prompts.of(source.tokens, source.mask)
            out = forward(
                model, prompts[source], capture=ordered, readout=None, stop_after=ordered[-1]
            )
        else:
            out = _edited_run(model, source, runs, prefixes, captured, prompts, ordered, task)
        captured.update({(source, site): value for site, value in out.captured.items()})
    return BaseRuns(prompts, prefixes, readouts, captured)


def _edited_run(
    model: Any,
    source: EditedRun,
    runs: Mapping[str, Prompts],
    prefixes: Mapping[str, Prefix | None],
    captured: Mapping[tuple[Source, Site], torch.Tensor],
    prompts: Mapping[Source, Prompts],
    sites: list[Site],
    task: TokenizedPairs | None,
) -> ForwardOutput:
    intervention, base = source.intervention, runs[source.run]
    context = EditContext(
        model=model,
        mask=base.mask,
        task=task,
        captured=captured,
        source_masks={key: value.mask for key, value in prompts.items()},
    )
    start, prefix = intervention.start_layer, prefixes.get(source.run)
    inputs: Prompts | Suffix = base
    if prefix is not None and start is not None and start <= sites[0].order[0]:
        inputs = Suffix((prefix,), start)
    return forward(
        model,
        inputs,
        hooks=edit_hooks(model.cfg, [(slice(0, base.n), intervention, context)]),
        capture=sites,
        readout=None,
        stop_after=sites[-1],
    )


def edit_hooks(
    cfg: Any, copies: Sequence[tuple[slice, Intervention, EditContext]]
) -> list[tuple[Site, HookFn]]:
    """Hooks that let each intervention edit only its own rows of a stacked batch.

    Args:
        cfg: the model's config.
        copies: ``(rows, intervention, context)`` per copy; ``rows`` is the slice of the
            batch holding that copy's prompts.

    Returns:
        One ``(site, fn)`` per hook point: ``fn`` first records what the interventions
        observe there, then (on a copy of the activation) lets each intervention edit its
        rows, in order.
    """
    points: dict[tuple[int, str], tuple[list, list]] = {}
    for rows, intervention, context in copies:
        for site in intervention.observes():
            points.setdefault((site.layer, site.component), ([], []))[0].append(
                (rows, site, context)
            )
        for site in intervention.edits():
            points.setdefault((site.layer, site.component), ([], []))[1].append(
                (rows, intervention, site, context)
            )
    return [
        (Site(component, layer), _point_hook(cfg, observers, editors))
        for (layer, component), (observers, editors) in points.items()
    ]


def _point_hook(cfg: Any, observers: list, editors: list) -> HookFn:
    def hook(activation: torch.Tensor, hook: Any) -> torch.Tensor | None:
        for rows, site, context in observers:
            context.observed_values[site.without_positions()] = select_head(
                activation[rows], site, cfg
            )
        if not editors:
            return None
        activation = activation.clone()
        for rows, intervention, site, context in editors:
            view = select_head(activation[rows], site, cfg)
            new = intervention.edit(site, view, context)
            if new is not view:
                if not isinstance(new, torch.Tensor) or new.shape != view.shape:
                    shape = tuple(new.shape) if isinstance(new, torch.Tensor) else type(new)
                    raise IntervError(
                        f"{type(intervention).__name__}.edit at {site.label} must return a "
                        f"tensor of shape {tuple(view.shape)}; got {shape}"
                    )
                view.copy_(new)
        return activation

    return hook


def intervened_readouts(
    model: Any,
    interventions: Sequence[Intervention],
    base: BaseRuns,
    *,
    readout: str,
    positions: torch.Tensor | None = None,
    max_batch_size: int,
    reuse_prefix: bool,
    task: TokenizedPairs | None = None,
) -> Iterator[tuple[list[int], torch.Tensor]]:
    """Per group of ``k`` stacked interventions: their indices and readout.

    Yields ``(indices, readout)`` where rows ``j * n .. (j + 1) * n - 1`` of ``readout``
    belong to ``interventions[indices[j]]`` (``n`` prompts per copy). ``positions``
    (``[n]``, for ``readout="position_logits"``) applies to every copy. With
    ``reuse_prefix`` and recorded prefixes, groups that share an earliest block start
    there; otherwise every forward starts at the embedding.
    """
    n = next(iter(base.prompts.values())).n
    per_forward = max(1, max_batch_size // n)
    use_prefix = reuse_prefix and all(base.prefixes.get(iv.base_run) for iv in interventions)
    masks = base.source_masks()
    by_start: dict[int, list[int]] = {}
    last = model.cfg.n_layers - 1
    for index, intervention in enumerate(interventions):
        start = intervention.start_layer
        layer = (last if start is None else start) if use_prefix else 0
        by_start.setdefault(layer, []).append(index)
    for layer, indices in sorted(by_start.items()):
        for start in range(0, len(indices), per_forward):
            chunk = indices[start : start + per_forward]
            group = [interventions[i] for i in chunk]
            copies = [
                (
                    slice(k * n, (k + 1) * n),
                    intervention,
                    EditContext(
                        model=model,
                        mask=base.prompts[intervention.base_run].mask,
                        task=task,
                        captured=base.captured,
                        source_masks=masks,
                    ),
                )
                for k, intervention in enumerate(group)
            ]
            if use_prefix:
                inputs: Prompts | Suffix = Suffix(
                    tuple(base.prefixes[iv.base_run] for iv in group), layer
                )
            else:
                inputs = Prompts.stack([base.prompts[iv.base_run] for iv in group])
            out = forward(
                model,
                inputs,
                hooks=edit_hooks(model.cfg, copies),
                readout=readout,
                positions=None if positions is None else positions.repeat(len(group)),
            )
            yield chunk, out.readout


def forward_under(
    model: Any,
    task: TokenizedPairs,
    intervention: Intervention,
    *,
    readout: str | None = "logits",
    capture: Sequence[Site] = (),
) -> ForwardOutput:
    """One full forward of ``intervention``'s base run of ``task``, with it applied.

    ``capture`` sees the activations after the intervention edited them. For
    inspection and reference tests; :func:`interv.run` is the measuring entry point.
    """
    runs = task_runs(task)
    base = capture_base_runs(model, runs, intervention.reads(), readout=None, record_prefix=False)
    context = EditContext(
        model=model,
        mask=task.attention_mask,
        task=task,
        captured=base.captured,
        source_masks=base.source_masks(),
    )
    return forward(
        model,
        runs[intervention.base_run],
        hooks=edit_hooks(model.cfg, [(slice(0, task.n_pairs), intervention, context)]),
        capture=capture,
        readout=readout,
    )
