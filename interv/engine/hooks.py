"""Turning an intervention into transformer-lens hook functions.

The runner captures, once per call, the activations that interventions take their
replacements from (:func:`required_activations` lists them), then asks
:func:`build_hooks` for the ``(hook_name, fn)`` pairs of each intervention. Each hook
edits only the rows ``rows`` of the batch, so several interventions can share one
forward by stacking their copies of the prompts along the batch axis.

The hooks are plain closures: attaching and removing them is left to the model's own
context manager (``with model.hooks(fwd_hooks=...)``), which removes exactly what it
attached, also when a hook or the caller raises.

z-level edits (value, knockout, pattern-only and value-only patches) of one query
head ``h`` in layer ``L`` use three hooks: two read-only captures of the head's
pattern ``A`` ``[batch, query_pos, key_pos]`` (``hook_pattern``) and of the values it
reads ``V`` ``[batch, key_pos, d_head]`` (``hook_v``, key/value head ``h // group``), and
one write into ``hook_z`` for head ``h`` only: ``z_h <- z_h + A' V' - A V``. Writing the
difference keeps ``z_h`` bit-identical when the edit is the identity, and never touching
the pattern or value hooks leaves the other query heads (which share ``V`` under
grouped-query attention) untouched.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import torch

from interv.engine.interventions import (
    ActivationPatch,
    AttentionKnockout,
    Combined,
    Intervention,
    MeanAblation,
    PatternPatch,
    ReferenceSet,
    ResampleAblation,
    ValuePatch,
    ValueReplace,
    ValueScale,
    ZeroAblation,
    _KeyIntervention,
)
from interv.engine.sites import (
    check_head,
    check_layer,
    check_positions,
    hook_name,
    kv_head_of,
    pattern_hook,
    value_hook,
)
from interv.errors import IntervError
from interv.tasks.tokenized import TokenizedPairs

__all__ = ["Captured", "Source", "build_hooks", "check_intervention", "required_activations"]

Source = str | ReferenceSet
"""Where captured activations come from: ``"clean"``, ``"corrupted"`` or a reference set."""

Captured = Mapping[tuple[Source, str], torch.Tensor]
"""(source, hook name) -> activation captured on that source's prompts, ``[n, pos, ...]``."""

HookFn = Callable[[torch.Tensor, Any], torch.Tensor]

_HEAD_ABLATIONS = (ZeroAblation, MeanAblation, ResampleAblation)
_Z_EDITS = (ValueScale, ValueReplace, AttentionKnockout, PatternPatch, ValuePatch)
_KNOWN = (*_HEAD_ABLATIONS, ActivationPatch, *_Z_EDITS)


def _parts(intervention: Intervention) -> tuple[Intervention, ...]:
    return intervention.parts if isinstance(intervention, Combined) else (intervention,)


def check_intervention(intervention: Intervention, cfg: Any, task: TokenizedPairs) -> None:
    """Raise :class:`IntervError` unless ``intervention`` fits the model and the task.

    Checks layers and heads against ``cfg`` (``model.cfg``), positions against the
    task's padded length, and reference sets' shapes.
    """
    for part in _parts(intervention):
        if not isinstance(part, _KNOWN):
            raise IntervError(
                f"unknown intervention {part!r}; use one of "
                f"{tuple(kind.__name__ for kind in (*_KNOWN, Combined))}"
            )
        if isinstance(part, ActivationPatch):
            check_layer(cfg, part.layer, part.component)
            if part.head is not None:
                check_head(cfg, part.layer, part.head)
        else:
            check_head(cfg, part.layer, part.head)
        check_positions(getattr(part, "positions", None), task.n_positions, "position")
        if isinstance(part, _KeyIntervention):
            check_positions(part.key_positions, task.n_positions, "key position")
        reference = getattr(part, "reference", None) or getattr(part, "source", None)
        per_position = not (isinstance(part, MeanAblation) and part.pooled)
        if isinstance(reference, ReferenceSet) and per_position:
            n_pos = reference.tokens.shape[1]
            if n_pos != task.n_positions:
                raise IntervError(
                    f"reference set {reference.name!r} has prompts of {n_pos} positions, but "
                    f"{type(part).__name__} replaces activations at the same position, so it "
                    f"needs the task's {task.n_positions} positions (shape [n_ref, "
                    f"{task.n_positions}]); got shape {tuple(reference.tokens.shape)}"
                )


def required_activations(intervention: Intervention) -> set[tuple[Source, str]]:
    """The (source, hook name) activations ``intervention`` takes replacements from."""
    needed: set[tuple[Source, str]] = set()
    for part in _parts(intervention):
        if isinstance(part, MeanAblation):
            needed.add((part.reference, hook_name("z", part.layer)))
        elif isinstance(part, ResampleAblation):
            needed.add((part.source, hook_name("z", part.layer)))
        elif isinstance(part, ActivationPatch):
            needed.add((part.source_run, hook_name(part.component, part.layer)))
        elif isinstance(part, ValueReplace):
            needed.add((part.source, value_hook(part.layer)))
        elif isinstance(part, PatternPatch):
            needed.add((part.source_run, pattern_hook(part.layer)))
        elif isinstance(part, ValuePatch):
            needed.add((part.source_run, value_hook(part.layer)))
    return needed


def _source_mask(source: Source, task: TokenizedPairs) -> torch.Tensor:
    return source.mask if isinstance(source, ReferenceSet) else task.attention_mask


def _masked_mean(act: torch.Tensor, mask: torch.Tensor, pooled: bool) -> torch.Tensor:
    """Mean of ``act`` ``[n, pos, d]`` over real tokens: ``[pos, d]``, or ``[d]`` if pooled.

    Positions where no prompt is real get zero.
    """
    weights = mask.to(act).unsqueeze(-1)
    dims = (0, 1) if pooled else (0,)
    total = (act * weights).sum(dims)
    count = weights.sum(dims)
    return total / count.clamp(min=1)


def _resample_index(
    seed: int, run_mask: torch.Tensor, source_mask: torch.Tensor, source_name: str
) -> torch.Tensor:
    """For each run prompt, a source prompt drawn uniformly among those covering it.

    A source prompt covers a run prompt when it is real at every position where the
    run prompt is real. Returns ``[n_run]`` int64 indices into the source prompts.
    """
    generator = torch.Generator().manual_seed(seed)
    covers = (source_mask.unsqueeze(0) | ~run_mask.unsqueeze(1)).all(-1)  # [n_run, n_src]
    index = torch.empty(run_mask.shape[0], dtype=torch.long)
    for i, row in enumerate(covers):
        candidates = row.nonzero().squeeze(-1)
        if candidates.numel() == 0:
            raise IntervError(
                f"no prompt of {source_name} is real at every real position of prompt {i} "
                f"({int(run_mask[i].sum())} real tokens); resampling needs source prompts at "
                f"least as long"
            )
        pick = torch.randint(candidates.numel(), (1,), generator=generator)
        index[i] = candidates[pick]
    return index


def _position_index(positions: tuple[int, ...] | None) -> slice | torch.Tensor:
    return slice(None) if positions is None else torch.tensor(positions, dtype=torch.long)


def _replace_hook(
    rows: slice,
    positions: tuple[int, ...] | None,
    head: int | None,
    replacement: torch.Tensor,
) -> HookFn:
    """Hook writing ``replacement`` ``[n, pos, d]`` into rows ``rows`` at ``positions``.

    With ``head``, the activation is ``[batch, pos, head_index, d_head]`` and only that
    head is written; otherwise it is ``[batch, pos, d_model]``.
    """
    index = _position_index(positions)
    target = (rows, index) if head is None else (rows, index, head)

    def hook(activation: torch.Tensor, hook: Any) -> torch.Tensor:
        activation = activation.clone()
        activation[target] = replacement[:, index].to(activation)
        return activation

    return hook


def _head_ablation_replacement(
    part: Intervention, cfg: Any, task: TokenizedPairs, captured: Captured
) -> torch.Tensor:
    """Replacement ``z`` of the ablated head, ``[n_prompts, pos, d_head]``."""
    shape = (task.n_pairs, task.n_positions, cfg.d_head)
    if isinstance(part, ZeroAblation):
        return torch.zeros(shape)
    if isinstance(part, MeanAblation):
        z = captured[(part.reference, hook_name("z", part.layer))][:, :, part.head]
        mean = _masked_mean(z, _source_mask(part.reference, task), part.pooled)
        return mean.expand(shape)
    z = captured[(part.source, hook_name("z", part.layer))][:, :, part.head]
    name = part.source.name if isinstance(part.source, ReferenceSet) else part.source
    index = _resample_index(
        part.seed, task.attention_mask, _source_mask(part.source, task), repr(name)
    )
    return z[index]


def _edit_pattern_and_values(
    part: Intervention, pattern: torch.Tensor, values: torch.Tensor, cfg: Any, captured: Captured
) -> tuple[torch.Tensor, torch.Tensor]:
    """Apply one z-level edit to a head's ``(A [n, q, k], V [n, k, d_head])``."""
    kv = kv_head_of(cfg, part.head)
    if isinstance(part, PatternPatch):
        source_pattern = captured[(part.source_run, pattern_hook(part.layer))][:, part.head]
        return source_pattern.to(pattern), values
    if isinstance(part, ValuePatch):
        return pattern, captured[(part.source_run, value_hook(part.layer))][:, :, kv].to(values)
    keys = list(part.key_positions)
    if isinstance(part, AttentionKnockout):
        pattern = pattern.clone()
        pattern[:, :, keys] = 0
        remaining = pattern.sum(-1, keepdim=True)
        return torch.where(remaining > 0, pattern / remaining, torch.zeros_like(pattern)), values
    values = values.clone()
    if isinstance(part, ValueScale):
        values[:, keys] = values[:, keys] * part.factor
    else:
        values[:, keys] = captured[(part.source, value_hook(part.layer))][:, keys, kv].to(values)
    return pattern, values


def _z_edit_hooks(
    layer: int, head: int, edits: list[Intervention], rows: slice, cfg: Any, captured: Captured
) -> list[tuple[str, HookFn]]:
    """Capture ``A`` and ``V`` of one head, write ``z_h + A'V' - AV`` into ``hook_z``."""
    kv = kv_head_of(cfg, head)
    seen: dict[str, torch.Tensor] = {}

    def capture_pattern(activation: torch.Tensor, hook: Any) -> None:
        seen["pattern"] = activation[rows, head]

    def capture_values(activation: torch.Tensor, hook: Any) -> None:
        seen["values"] = activation[rows, :, kv]

    def write_z(activation: torch.Tensor, hook: Any) -> torch.Tensor:
        pattern, values = seen.pop("pattern"), seen.pop("values")
        new_pattern, new_values = pattern, values
        for edit in edits:
            new_pattern, new_values = _edit_pattern_and_values(
                edit, new_pattern, new_values, cfg, captured
            )
        delta = torch.einsum("bqk,bkd->bqd", new_pattern, new_values) - torch.einsum(
            "bqk,bkd->bqd", pattern, values
        )
        activation = activation.clone()
        activation[rows, :, head] = activation[rows, :, head] + delta.to(activation.dtype)
        return activation

    return [
        (pattern_hook(layer), capture_pattern),
        (value_hook(layer), capture_values),
        (hook_name("z", layer), write_z),
    ]


def build_hooks(
    intervention: Intervention,
    cfg: Any,
    task: TokenizedPairs,
    captured: Captured,
    rows: slice,
) -> list[tuple[str, HookFn]]:
    """The ``(hook_name, fn)`` pairs that apply ``intervention`` to batch rows ``rows``.

    Args:
        intervention: a checked intervention (see :func:`check_intervention`).
        cfg: the model's config.
        task: the task; rows ``rows`` of the batch hold its ``n_pairs`` prompts of the
            intervention's base run, in order.
        captured: at least :func:`required_activations` of the intervention.
        rows: the batch rows to edit, a slice of length ``task.n_pairs``.
    """
    hooks: list[tuple[str, HookFn]] = []
    z_edits: dict[tuple[int, int], list[Intervention]] = {}
    for part in _parts(intervention):
        if isinstance(part, _Z_EDITS):
            z_edits.setdefault((part.layer, part.head), []).append(part)
        elif isinstance(part, ActivationPatch):
            name = hook_name(part.component, part.layer)
            source = captured[(part.source_run, name)]
            if part.head is not None:
                source = source[:, :, part.head]
            hooks.append((name, _replace_hook(rows, part.positions, part.head, source)))
        else:
            replacement = _head_ablation_replacement(part, cfg, task, captured)
            name = hook_name("z", part.layer)
            hooks.append((name, _replace_hook(rows, part.positions, part.head, replacement)))
    for (layer, head), edits in z_edits.items():
        hooks.extend(_z_edit_hooks(layer, head, edits, rows, cfg, captured))
    return hooks
