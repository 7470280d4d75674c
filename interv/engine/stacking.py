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

Used by :func:`interv.run` and the pruning evaluations. Internal (no stability promise)
except :class:`BaseRunCache`, which :func:`interv.run` takes as ``cache=``, and
:func:`auto_batch_rows`, the rule behind ``max_batch_size=None``.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch

from interv.engine.forward import (
    AttentionPath,
    ForwardOutput,
    HookFn,
    Prefix,
    Prompts,
    Suffix,
    choose_attention,
    forward,
    model_device,
)
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
    "AUTO_BATCH_TOKENS",
    "BaseRunCache",
    "BaseRuns",
    "auto_batch_rows",
    "capture_base_runs",
    "edit_hooks",
    "edited_forward",
    "forward_under",
    "head_output_layer",
    "intervened_readouts",
    "planned_reads",
    "task_runs",
]


#: tokens per intervened forward that ``max_batch_size=None`` aims at, per device type:
#: enough for the matrix products to run near full speed (on 2 CPU cores, 27 SmolLM2 head
#: ablations on 8 prompts of 15 tokens took 16.7 s at 32 rows, 11.2 s at 144), few enough
#: that a forward's activations stay small next to the model
AUTO_BATCH_TOKENS = {"cpu": 4096, "cuda": 32768}
_AUTO_TOKENS_OTHER = 8192  # mps and other accelerators
_AUTO_MEMORY_SHARE = 0.25  # of the memory available when the run starts
_AUTO_MAX_ROWS = 8192
_FALLBACK_MEMORY = 4 * 2**30  # bytes, where the available memory cannot be read


def _available_memory(device: torch.device) -> int:
    """Bytes free on ``device`` now: ``torch.cuda.mem_get_info`` on CUDA, the available
    physical pages (``os.sysconf``) on CPU, else a 4 GiB guess."""
    if device.type == "cuda":
        try:
            return int(torch.cuda.mem_get_info(device)[0])
        except (RuntimeError, AssertionError):
            return _FALLBACK_MEMORY
    if device.type == "cpu":
        try:
            return int(os.sysconf("SC_AVPHYS_PAGES")) * int(os.sysconf("SC_PAGE_SIZE"))
        except (AttributeError, OSError, ValueError):
            return _FALLBACK_MEMORY
    return _FALLBACK_MEMORY


def auto_batch_rows(model: Any, n_positions: int, n_prompts: int) -> int:
    """Rows per intervened forward for ``max_batch_size=None``: fast, and safe in memory.

    The rule, from the model's config and the memory free when the run starts:

    - compute: ``AUTO_BATCH_TOKENS[device]`` tokens per forward (4096 on CPU, 32768 on
      CUDA), i.e. ``tokens // n_positions`` rows;
    - memory: a quarter of the available memory (``torch.cuda.mem_get_info`` on CUDA, the
      available physical pages from ``os.sysconf`` on CPU) divided by the bytes one row
      may hold at once: ``itemsize * n_positions * (8 d_model + 2 d_mlp + 2 n_heads
      n_positions + d_vocab)`` (one layer's activations, their edited copies, the
      attention scores, and full logits for the forwards that compute them all);
    - the smaller of the two, rounded down to whole copies of the ``n_prompts`` prompts,
      at least one copy and at most 8192 rows.

    ``d_mlp`` defaults to ``4 d_model`` where the config has none. On SmolLM2-135M with 8
    IOI pairs of 15 tokens on CPU this gives 272 rows (34 copies).
    """
    cfg = model.cfg
    n_positions, n_prompts = max(1, int(n_positions)), max(1, int(n_prompts))
    device = model_device(model)
    tokens = AUTO_BATCH_TOKENS.get(device.type, _AUTO_TOKENS_OTHER)
    d_model = int(cfg.d_model)
    d_mlp = int(getattr(cfg, "d_mlp", None) or 4 * d_model)
    itemsize = torch.empty(0, dtype=getattr(cfg, "dtype", None) or torch.float32).element_size()
    per_row = (
        itemsize
        * n_positions
        * (8 * d_model + 2 * d_mlp + 2 * int(cfg.n_heads) * n_positions + int(cfg.d_vocab))
    )
    by_memory = int(_AUTO_MEMORY_SHARE * _available_memory(device)) // max(1, per_row)
    rows = min(tokens // n_positions, by_memory, _AUTO_MAX_ROWS)
    return max(n_prompts, rows // n_prompts * n_prompts)


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


class BaseRunCache:
    """Base runs kept across calls of :func:`interv.run` on one model and one task.

    Pass the same cache to several ``run`` calls (a sweep does, for its units): the clean
    and corrupted forwards and the captured activations are computed once and extended
    when a later call reads something new. The cache answers only for the model object,
    weights and prompts it was filled with: a call with another model or task, or after
    the model's parameters changed in place (their version counters moved), recomputes.
    Hooks a user attaches to the model between calls are not detected: clear the cache
    (``cache.clear()``) after changing the model in any other way.
    """

    def __init__(self) -> None:
        self._key: tuple | None = None
        self._task: TokenizedPairs | None = None
        self._base: BaseRuns | None = None

    @staticmethod
    def _model_key(model: Any) -> tuple[int, int]:
        return (id(model), sum(p._version for p in model.parameters()))

    def get(self, model: Any, task: TokenizedPairs) -> BaseRuns | None:
        """The base runs of ``model`` on ``task``, if this cache holds them."""
        if self._base is None or self._key != self._model_key(model):
            return None
        held = self._task
        same = held is task or all(
            torch.equal(getattr(held, name), getattr(task, name))
            for name in ("clean_tokens", "corrupted_tokens", "attention_mask", "answer_positions")
        )
        return self._base if same else None

    def put(self, model: Any, task: TokenizedPairs, base: BaseRuns) -> None:
        """Keep ``base`` as the base runs of ``model`` on ``task``."""
        self._key, self._task, self._base = self._model_key(model), task, base

    def clear(self) -> None:
        """Forget the held base runs."""
        self._key = self._task = self._base = None


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
    reuse: BaseRuns | None = None,
    attention: str = "auto",
) -> BaseRuns:
    """The base forwards: every run of ``runs``, reference set and edited run in ``reads``.

    The runs share one forward, stacked along the batch axis; they read out ``readout``
    (at ``positions``) and record their prefix. Reference sets and edited runs only capture
    what is read from them and stop after their latest site (an edited run starts at its
    intervention's earliest block when its run's prefix is recorded), after everything they
    read from. With ``reuse`` (earlier base runs of the same model and prompts), only what
    it does not hold is computed. ``attention``: how the runs' forward computes attention
    (:func:`~interv.engine.forward.choose_attention`; a suffix of their prefixes runs without
    the pattern only once a full forward has checked the model's rows).
    """
    wanted = _wanted_sites(runs, reads)
    prompts: dict[Source, Prompts] = dict(runs)
    prefixes: dict[str, Prefix | None] = {}
    readouts: dict[str, torch.Tensor | None] = {}
    captured: dict[tuple[Source, Site], torch.Tensor] = {}
    if reuse is not None:
        prompts.update(reuse.prompts)
        prefixes.update(reuse.prefixes)
        readouts.update(reuse.readouts)
        captured.update(reuse.captured)
    missing = {
        source: sorted((s for s in sites if (source, s) not in captured), key=lambda s: s.order)
        for source, sites in wanted.items()
    }
    stale = [run for run in runs if missing[run] or run not in readouts]
    if stale:
        out = _stacked_runs(
            model,
            [runs[run] for run in stale],
            [missing[run] for run in stale],
            readout,
            positions,
            record_prefix,
            attention,
        )
        for run, (prefix, value, acts) in zip(stale, out, strict=True):
            prefixes[run], readouts[run] = prefix, value
            captured.update({(run, site): act for site, act in acts.items()})
    for source in sorted(wanted, key=_depth):
        sites = missing[source]
        if isinstance(source, str) or not sites:
            continue
        if isinstance(source, ReferenceSet):
            prompts[source] = Prompts.of(source.tokens, source.mask)
            done = forward(
                model, prompts[source], capture=sites, readout=None, stop_after=sites[-1]
            )
        else:
            done = _edited_run(model, source, runs, prefixes, captured, prompts, sites, task)
        captured.update({(source, site): value for site, value in done.captured.items()})
    return BaseRuns(prompts, prefixes, readouts, captured)


def _stacked_runs(
    model: Any,
    prompts: Sequence[Prompts],
    sites: Sequence[Sequence[Site]],
    readout: str | None,
    positions: torch.Tensor | None,
    record_prefix: bool,
    attention: str = "auto",
) -> list[tuple[Prefix | None, torch.Tensor | None, dict[Site, torch.Tensor]]]:
    """One forward of several runs of the same padded shape, split back per run.

    Returns ``(prefix, readout, captured)`` per run; each run gets the sites it asked for.
    """
    n = prompts[0].n
    union = sorted({site for run_sites in sites for site in run_sites}, key=lambda s: s.order)
    out = forward(
        model,
        Prompts.stack(prompts),
        capture=union,
        readout=readout,
        positions=None if positions is None else positions.repeat(len(prompts)),
        record_prefix=record_prefix,
        attention=AttentionPath(attention),
    )
    split = []
    for k, run_sites in enumerate(sites):
        rows = slice(k * n, (k + 1) * n)
        prefix = None if out.prefix is None else out.prefix.rows(rows)
        value = None if out.readout is None else out.readout[rows]
        split.append((prefix, value, {site: out.captured[site][rows] for site in run_sites}))
    return split


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
    return edited_forward(
        model,
        inputs,
        [(slice(0, base.n), intervention, context)],
        capture=sites,
        readout=None,
        stop_after=sites[-1],
    )


def edited_forward(
    model: Any,
    inputs: Prompts | Suffix,
    copies: Sequence[tuple[slice, Intervention, EditContext]],
    *,
    attention: str = "auto",
    capture: Sequence[Site] = (),
    **kwargs: Any,
) -> ForwardOutput:
    """One :func:`~interv.engine.forward.forward` of ``inputs`` with each copy's intervention
    applied to its rows (``(rows, intervention, context)``, see :func:`edit_hooks`).

    Interventions that declare :meth:`~interv.engine.protocol.Intervention.key_restrictions`
    take one of two equal forms, chosen with the attention (``attention``, see
    :func:`~interv.engine.forward.choose_attention`): without the pattern, their
    restrictions go into the attention of their own rows and only what they still edit
    (:meth:`~interv.engine.protocol.Intervention.without_key_restrictions`) is hooked; with
    the model's own attention, their z-level edits from the observed pattern run, and a
    pattern above :data:`~interv.engine.rows.MAX_PATTERN_BYTES` is refused in one line.
    ``kwargs`` go to the forward (readout, positions, stop_after).
    """
    restricted = [
        (rows, restriction)
        for rows, intervention, _ in copies
        for restriction in intervention.key_restrictions()
    ]
    hooks = edit_hooks(model.cfg, copies)
    if not restricted:
        return forward(
            model,
            inputs,
            hooks=hooks,
            capture=capture,
            attention=AttentionPath(attention),
            **kwargs,
        )
    rest = [
        (rows, kept, context)
        for rows, intervention, context in copies
        if (kept := intervention.without_key_restrictions()) is not None
    ]
    rest_hooks = edit_hooks(model.cfg, rest)
    mode = choose_attention(
        model,
        inputs,
        attention,
        sites=[site for site, _ in rest_hooks] + list(capture),
        pattern_sites=[site for site, _ in hooks],
    )
    if mode == "rows":
        return forward(
            model,
            inputs,
            hooks=rest_hooks,
            capture=capture,
            attention=AttentionPath("rows", restrictions=restricted),
            **kwargs,
        )
    return forward(
        model, inputs, hooks=hooks, capture=capture, attention=AttentionPath("pattern"), **kwargs
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
            _apply_edit(intervention, site, select_head(activation[rows], site, cfg), context)
        return activation

    return hook


def _apply_edit(
    intervention: Intervention, site: Site, view: torch.Tensor, context: EditContext
) -> None:
    """Let ``intervention`` edit ``view`` (its rows at ``site``) and write the result into it."""
    new = intervention.edit(site, view, context)
    if new is view:
        return
    if not isinstance(new, torch.Tensor) or new.shape != view.shape:
        shape = tuple(new.shape) if isinstance(new, torch.Tensor) else type(new)
        raise IntervError(
            f"{type(intervention).__name__}.edit at {site.label} must return a tensor of "
            f"shape {tuple(view.shape)}; got {shape}"
        )
    view.copy_(new)


def head_output_layer(model: Any, intervention: Intervention) -> int | None:
    """The layer ``L`` when the edit can skip block ``L``: else None.

    In an attention-only model, a block's output is its input plus ``sum_h z_h W_O^h``
    (plus a bias). An intervention that only rewrites head outputs ``z`` of one layer
    ``L`` and observes nothing else in the forward therefore changes the residual stream
    entering block ``L + 1`` by exactly ``sum_h (z'_h - z_h) W_O^h``, with ``z`` the base
    run's own head outputs; the exact forward can start at block ``L + 1`` from that.
    """
    if not getattr(model.cfg, "attn_only", False) or intervention.observes():
        return None
    edits = intervention.edits()
    if not edits or any(site.component != "z" for site in edits):
        return None
    layers = {site.layer for site in edits}
    return layers.pop() if len(layers) == 1 else None


def planned_reads(
    model: Any, interventions: Sequence[Intervention], *, reuse_prefix: bool
) -> list[Read]:
    """What the base runs must capture for ``interventions`` (their reads, plus the head
    outputs that :func:`head_output_layer` shortcuts start from)."""
    reads = [read for intervention in interventions for read in intervention.reads()]
    if reuse_prefix:
        for intervention in interventions:
            layer = head_output_layer(model, intervention)
            if layer is not None:
                reads.append(Read(intervention.base_run, Site("z", layer)))
    return reads


def _shortcut_hidden(
    model: Any, intervention: Intervention, layer: int, base: BaseRuns, context: EditContext
) -> torch.Tensor:
    """The residual stream entering block ``layer + 1`` under a head-output edit of ``layer``."""
    run = intervention.base_run
    before = base.captured[(run, Site("z", layer))]  # [n, pos, head_index, d_head]
    after = before.clone()
    edits = intervention.edits()
    for site in edits:
        _apply_edit(intervention, site, select_head(after, site, model.cfg), context)
    w_out = model.blocks[layer].attn.W_O  # [head_index, d_head, d_model]
    heads = {site.head for site in edits}
    if None not in heads:  # only the edited heads' outputs changed
        heads = sorted(heads)
        after, before, w_out = after[:, :, heads], before[:, :, heads], w_out[heads]
    change = (after - before).flatten(2) @ w_out.flatten(0, 1).to(after)
    return base.prefixes[run].residuals[layer + 1] + change.to(before.dtype)


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
    attention: str = "auto",
) -> Iterator[tuple[list[int], torch.Tensor]]:
    """Per group of ``k`` stacked interventions: their indices and readout.

    Yields ``(indices, readout)`` where rows ``j * n .. (j + 1) * n - 1`` of ``readout``
    belong to ``interventions[indices[j]]`` (``n`` prompts per copy). ``positions``
    (``[n]``, for ``readout="position_logits"``) applies to every copy. With
    ``reuse_prefix`` and recorded prefixes, each copy starts at the earliest block it
    touches: the interventions are taken in order of that block, ``max_batch_size`` rows
    per forward, and each copy joins its forward at its own block (a staggered
    :class:`~interv.engine.forward.Suffix`); otherwise every forward starts at the
    embedding. ``attention``: how each forward computes attention
    (:func:`edited_forward`).
    """
    n = next(iter(base.prompts.values())).n
    per_forward = max(1, max_batch_size // n)
    use_prefix = reuse_prefix and all(base.prefixes.get(iv.base_run) for iv in interventions)
    masks = base.source_masks()
    starts: list[int] = []
    shortcut: dict[int, int] = {}  # intervention index -> the head-output layer it skips
    last = model.cfg.n_layers - 1
    for index, intervention in enumerate(interventions):
        start = intervention.start_layer
        layer = (last if start is None else start) if use_prefix else 0
        skipped = head_output_layer(model, intervention) if use_prefix else None
        if skipped is not None:
            shortcut[index], layer = skipped, skipped + 1
        starts.append(layer)
    # by the block each starts at; one forward takes consecutive ones (staggered: each
    # copy joins at its own block), so forwards stay full whatever the mix of layers
    ordered = sorted(range(len(interventions)), key=lambda i: starts[i])
    for begin in range(0, len(ordered), per_forward):
        chunk = ordered[begin : begin + per_forward]
        contexts = [
            EditContext(
                model=model,
                mask=base.prompts[interventions[i].base_run].mask,
                task=task,
                captured=base.captured,
                source_masks=masks,
            )
            for i in chunk
        ]
        copies = [
            (slice(k * n, (k + 1) * n), interventions[i], context)
            for k, (i, context) in enumerate(zip(chunk, contexts, strict=True))
            if i not in shortcut
        ]
        group = [interventions[i] for i in chunk]
        if use_prefix:
            entries = tuple(
                _shortcut_hidden(model, interventions[i], shortcut[i], base, context)
                if i in shortcut
                else None
                for i, context in zip(chunk, contexts, strict=True)
            )
            inputs: Prompts | Suffix = Suffix(
                tuple(base.prefixes[iv.base_run] for iv in group),
                starts[chunk[0]],
                starts=tuple(starts[i] for i in chunk),
                entries=entries,
            )
        else:
            inputs = Prompts.stack([base.prompts[iv.base_run] for iv in group])
        out = edited_forward(
            model,
            inputs,
            copies,
            attention=attention,
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
    attention: str = "auto",
) -> ForwardOutput:
    """One full forward of ``intervention``'s base run of ``task``, with it applied.

    ``capture`` sees the activations after the intervention edited them; ``attention``: how
    attention is computed (:func:`edited_forward`). For inspection and reference tests;
    :func:`interv.run` is the measuring entry point.
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
    return edited_forward(
        model,
        runs[intervention.base_run],
        [(slice(0, task.n_pairs), intervention, context)],
        attention=attention,
        capture=capture,
        readout=readout,
    )
