"""The one forward primitive: every part of interv that runs a model runs it through here.

>>> out = forward(model, Prompts.of(tokens), capture=[Site("pattern", 0)], readout=None,
...               stop_after=Site("pattern", 0))
>>> out.captured[Site("pattern", 0)].shape      # [batch, head_index, query_pos, key_pos]

:func:`forward` owns what every caller would otherwise write again:

- **device and dtype**: tokens and masks go to the model's device; readouts come back
  in float32 at least (a bfloat16 model's logits are upcast before any metric).
- **the forward mask** for padding on either side (passed only when there is padding).
- **hook names**: callers name activations by :class:`~interv.engine.sites.Site`.
- **readout**: full logits, logits at chosen positions (the final norm and the
  unembedding run on those positions only, then the model's own logit scale and soft cap:
  :meth:`~interv.engine.writes.Writes.finish_logits`), the final residual stream, or nothing.
- **early stop** right after a chosen site fires (nothing after it is computed).
- **prefix reuse**: a base forward can record the inputs of every block
  (:class:`Prefix`); a later forward of copies of the same prompts can start at block
  ``L`` from them (:class:`Suffix`), running only the blocks an edit can change.

Hooks are attached only inside ``model.hooks(...)``, which removes exactly what it
attached, also when a hook or the caller raises, and leaves the user's hooks alone.

Why prefix reuse is exact: an edit whose earliest site is in block ``L`` cannot change
anything block ``L`` reads. The backend's own ``forward(start_at_layer=L)`` still runs
blocks ``0..L-1``, so instead the inputs each block received (hidden states, attention
mask, position ids, rotary tables, as the Hugging Face model computed them) are
recorded during the base forward, and the blocks ``L..`` are called with them. The
blocks are the bridge's own modules, so every hook inside them fires as in a full
forward, including the hook on block ``L``'s input (``resid_pre``), which sees the
injected residual.

Why a write to ``resid_mid`` rebuilds ``resid_post``: transformer-lens's block bridge
hooks ``resid_mid`` at the input of the norm before the MLP, and the block adds the MLP's
output to the residual it held *before* that hook, so a hook's write would reach the MLP
only. Wherever a hook replaces block ``L``'s ``resid_mid``, the block's output is
therefore rebuilt as ``resid_mid + mlp_out`` (both as the hooks left them), the identity
that defines ``resid_post`` in a sequential pre-norm block (checked on the block's own
values; a model whose blocks are otherwise, e.g. BERT's post-norm ones, refuses the
write): the write is then the residual stream between attention and MLP, and gradients
through it take both paths. A hook that only reads ``resid_mid`` changes nothing.
"""

from __future__ import annotations

import itertools
import warnings
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, field
from typing import Any

import torch

from interv.engine.restrictions import KeyRestriction
from interv.engine.rows import (
    ATTENTION_MODES,
    LONG_CONTEXT,
    MAX_PATTERN_BYTES,
    RowRequest,
    outside_hooks,
    pattern_bytes,
    pattern_free,
    rows_refusal,
    verified,
    verify,
)
from interv.engine.sites import Site, block_output_hook, hook_name
from interv.engine.writes import Writes
from interv.errors import IntervError
from interv.tasks.tokenized import check_context, check_token_ids

__all__ = [
    "AUTO",
    "PATTERN",
    "READOUTS",
    "AttentionPath",
    "ForwardOutput",
    "Gradient",
    "HookFn",
    "OwnGradient",
    "Prefix",
    "Prompts",
    "Suffix",
    "choose_attention",
    "forward",
    "model_device",
]

HookFn = Callable[[torch.Tensor, Any], torch.Tensor | None]
"""A transformer-lens hook function: ``fn(activation, hook) -> new activation or None``."""

READOUTS: tuple[str | None, ...] = ("logits", "position_logits", "final_residual", None)
"""What :func:`forward` returns: ``"logits"`` ``[n, pos, d_vocab]``; ``"position_logits"``
``[n, d_vocab]`` at one position per row; ``"final_residual"`` ``[n, pos, d_model]`` (the
last block's output); None: nothing (run for hooks and captures)."""

# Keyword arguments carrying an incremental-decoding cache: a suffix call never uses one.
_CACHE_KWARGS = ("cache", "past_key_values", "past_key_value", "layer_past")


def model_device(model: Any) -> torch.device:
    """The device of ``model``'s parameters (CPU for a model without parameters)."""
    parameter = next(model.parameters(), None)
    return torch.device("cpu") if parameter is None else parameter.device


@dataclass(frozen=True, eq=False)
class Prompts:
    """A padded batch of prompts.

    Attributes:
        tokens: ``[n, pos]`` int64 token ids.
        mask: ``[n, pos]`` bool, True at real tokens (padding on either side).
    """

    tokens: torch.Tensor
    mask: torch.Tensor

    @classmethod
    def of(cls, tokens: torch.Tensor, mask: torch.Tensor | None = None) -> Prompts:
        """Prompts from token ids and an optional mask (None = every token is real)."""
        if mask is None:
            mask = torch.ones(tokens.shape, dtype=torch.bool)
        return cls(tokens.to(torch.int64), mask.to(torch.bool))

    @property
    def n(self) -> int:
        """Number of prompts."""
        return int(self.tokens.shape[0])

    def check_fits(self, cfg: Any) -> None:
        """Raise :class:`IntervError` unless every id is in the vocabulary of the model with
        config ``cfg`` and no prompt is longer than its context (``d_vocab``, ``n_ctx``)."""
        d_vocab, n_ctx = getattr(cfg, "d_vocab", None), getattr(cfg, "n_ctx", None)
        check_token_ids(
            self.tokens, d_vocab if isinstance(d_vocab, int) and d_vocab > 0 else None, "tokens"
        )
        check_context(
            self.mask.sum(1), n_ctx if isinstance(n_ctx, int) and n_ctx > 0 else None, "prompt"
        )

    def repeat(self, copies: int) -> Prompts:
        """``copies`` copies stacked along the batch axis."""
        return Prompts(self.tokens.repeat(copies, 1), self.mask.repeat(copies, 1))

    @staticmethod
    def stack(parts: Sequence[Prompts]) -> Prompts:
        """Several batches of the same padded length, stacked along the batch axis."""
        return Prompts(torch.cat([p.tokens for p in parts]), torch.cat([p.mask for p in parts]))


@dataclass(frozen=True, eq=False)
class Prefix:
    """What every block received during one forward of ``n_prompts`` prompts.

    Attributes:
        residuals: per block ``L``, the residual stream entering it, ``[n, pos, d_model]``;
            one more entry at the end: the last block's output.
        kwargs: per block ``L``, the other keyword arguments it was called with
            (attention mask, position ids, position embeddings), cache arguments removed.
        n_prompts: the batch size of the recorded forward.
        mask: ``[n_prompts, pos]`` bool, True at real tokens (None when not recorded).
    """

    residuals: tuple[torch.Tensor, ...]
    kwargs: tuple[dict[str, Any], ...]
    n_prompts: int
    mask: torch.Tensor | None = None

    def rows(self, rows: slice) -> Prefix:
        """The prefix of the prompts in ``rows`` of the recorded batch."""
        n = len(range(*rows.indices(self.n_prompts)))
        return Prefix(
            tuple(residual[rows] for residual in self.residuals),
            tuple(
                {
                    name: _per_head(_slice_batch, name, value, rows, self.n_prompts)
                    for name, value in kw.items()
                }
                for kw in self.kwargs
            ),
            n,
            None if self.mask is None else self.mask[rows],
        )


@dataclass(frozen=True, eq=False)
class Suffix:
    """Run blocks ``start_layer..`` on stacked recorded prefixes, one per copy, in row order.

    All prefixes must come from forwards of prompts with the same mask (so that their
    block keyword arguments agree). ``start_layer`` may be ``n_layers`` (only the final
    norm and the readout run). ``hidden`` replaces the stacked residual stream entering
    ``start_layer`` (``[rows, pos, d_model]``), e.g. with edits already added.

    *Staggered* copies (``starts`` given, one non-decreasing block index per copy, the
    first equal to ``start_layer``): copy ``k`` joins the batch at block ``starts[k]``,
    appended after the copies already running, from ``entries[k]`` (its residual stream
    entering that block; None = its prefix's), so copies that need different suffixes
    share one forward and no block runs for a copy before it can differ from its prefix.
    Copy ``k`` holds rows ``k * n .. (k + 1) * n - 1`` from the block it joins on.
    """

    prefixes: tuple[Prefix, ...]
    start_layer: int
    hidden: torch.Tensor | None = None
    starts: tuple[int, ...] | None = None
    entries: tuple[torch.Tensor | None, ...] | None = None

    def __post_init__(self) -> None:
        if self.starts is None:
            if self.entries is not None:
                raise IntervError("Suffix entries need starts (the block each copy joins at)")
            return
        starts = tuple(self.starts)
        if len(starts) != len(self.prefixes) or starts[0] != self.start_layer:
            raise IntervError(
                f"Suffix starts must give one block per copy ({len(self.prefixes)}), the first "
                f"equal to start_layer ({self.start_layer}); got {starts}"
            )
        if any(later < earlier for earlier, later in itertools.pairwise(starts)):
            raise IntervError(f"Suffix starts must not decrease; got {starts}")
        if self.hidden is not None:
            raise IntervError("a staggered Suffix takes entries per copy, not hidden")
        if self.entries is not None and len(self.entries) != len(starts):
            raise IntervError(
                f"Suffix entries must give one residual (or None) per copy ({len(starts)}); "
                f"got {len(self.entries)}"
            )

    @property
    def n(self) -> int:
        """Number of rows: copies times prompts per copy."""
        return sum(prefix.n_prompts for prefix in self.prefixes)


@dataclass(frozen=True, eq=False)
class ForwardOutput:
    """What one :func:`forward` produced.

    Attributes:
        readout: see :data:`READOUTS`; None when no readout was asked for.
        captured: captured site (positions dropped) -> activation, on the model's device,
            detached unless the forward ran with gradients.
        prefix: the recorded block inputs (``record_prefix=True`` on a full forward that
            called every block once), else None.
        gradients: each :class:`Gradient` site -> the gradient of its ``of``'s sum with
            respect to its activation (empty without a gradient).
        attention: how attention was computed: ``"pattern"`` (the model's own, every
            layer's pattern materialized) or ``"rows"`` (without the pattern,
            :mod:`interv.engine.rows`).
    """

    readout: torch.Tensor | None
    captured: dict[Site, torch.Tensor]
    prefix: Prefix | None
    gradients: dict[Site, torch.Tensor] = field(default_factory=dict)
    attention: str = "pattern"


@dataclass(frozen=True, eq=False)
class Gradient:
    """What one :func:`forward` differentiates: the sum of ``of(readout)`` with respect to
    the activations at the sites ``at``, as the forward's hooks left them (which the rest of
    the forward reads, so the full downstream derivative).

    Attributes:
        at: the sites whose gradient :attr:`ForwardOutput.gradients` returns; their
            activations are captured too.
        of: readout -> the values to differentiate (e.g. each prompt's metric: rows are
            independent, so the gradient of the sum holds every prompt's own).

    The model's parameters get no ``.grad``; the readout and captures come back detached.
    """

    at: tuple[Site, ...]
    of: Callable[[torch.Tensor], torch.Tensor]

    def __post_init__(self) -> None:
        object.__setattr__(self, "at", tuple(self.at))
        if not self.at or not all(isinstance(site, Site) for site in self.at):
            raise IntervError(f"a Gradient needs at least one Site in at; got {self.at!r}")
        if not callable(self.of):
            raise IntervError(
                f"a Gradient's of must be callable (readout -> values); got {self.of!r}"
            )


@dataclass(frozen=True, eq=False)
class OwnGradient:
    """A :func:`forward` whose caller differentiates for itself: the forward runs with
    gradients on and calls ``of`` with the live readout (before anything is detached), and
    takes no gradient of its own (:attr:`ForwardOutput.gradients` stays empty).

    For derivatives with respect to tensors that the caller's hooks read (the scale ``t`` of
    a patch, :mod:`interv.circuits.second_order`), where a :class:`Gradient` would add a
    backward to a site nobody reads. Only what depends on such a tensor is recorded.

    Attributes:
        of: readout -> anything; it keeps what it computes (its return value is unused).
    """

    of: Callable[[torch.Tensor], Any]

    def __post_init__(self) -> None:
        if not callable(self.of):
            raise IntervError(
                f"an OwnGradient's of must be callable (readout -> ...); got {self.of!r}"
            )


@dataclass(frozen=True, eq=False)
class AttentionPath:
    """How one :func:`forward` computes attention.

    Attributes:
        mode: one of :data:`~interv.engine.rows.ATTENTION_MODES`: ``"auto"`` (default)
            computes attention without the pattern from
            :data:`~interv.engine.rows.LONG_CONTEXT` positions on, when no hook or capture
            (interv's or the user's own on the model) needs the pattern and the family allows
            it (checked against the model's own rows first), else as the model does;
            ``"pattern"`` as the model does (refused when one layer's pattern would exceed
            :data:`~interv.engine.rows.MAX_PATTERN_BYTES`); ``"rows"`` without the pattern
            (refused in one line where interv cannot).
        rows: what to report about each layer's rows when attention runs without the
            pattern (:class:`~interv.engine.rows.RowRequest`; it asks for that path).
        restrictions: ``(rows, KeyRestriction)`` pairs: the keys the heads of a layer may
            still attend to in the rows ``rows`` of the batch (a stacked copy), ANDed with the
            layer's own rule inside the attention (:mod:`interv.engine.restrictions`); only
            where attention runs without the pattern (refused otherwise: the model's own
            attention runs the z-level edits of :func:`~interv.engine.stacking.edit_hooks`).
    """

    mode: str = "auto"
    rows: RowRequest | None = None
    restrictions: tuple[tuple[slice, KeyRestriction], ...] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "restrictions", tuple(self.restrictions))
        if self.mode not in ATTENTION_MODES:
            raise IntervError(f"attention must be one of {ATTENTION_MODES}; got {self.mode!r}")
        if self.rows is not None and self.mode == "pattern":
            raise IntervError(
                "rows= asks for attention without the pattern; attention='pattern' refuses it"
            )


AUTO = AttentionPath()
"""The default :class:`AttentionPath`: ``"auto"``, nothing reported about the rows."""

PATTERN = AttentionPath("pattern")
"""The model's own attention (its pattern), at any length: :class:`AttentionPath` ``"pattern"``."""


class _Stopped(Exception):
    """Raised by the stop hook: the rest of the forward is not needed."""


def forward(
    model: Any,
    inputs: Prompts | Suffix,
    *,
    hooks: Sequence[tuple[Site, HookFn]] = (),
    capture: Sequence[Site] = (),
    readout: str | None = "logits",
    positions: torch.Tensor | None = None,
    stop_after: Site | None = None,
    record_prefix: bool = False,
    gradient: Gradient | OwnGradient | None = None,
    attention: AttentionPath = AUTO,
) -> ForwardOutput:
    """Run ``model`` once on ``inputs`` with ``hooks``; capture, read out, maybe stop early.

    Args:
        model: a transformer-lens ``TransformerBridge``.
        inputs: :class:`Prompts` (a full forward from the embedding) or a :class:`Suffix`
            (blocks ``start_layer..`` from recorded prefixes).
        hooks: ``(site, fn)`` pairs; ``fn`` sees the whole batch's activation at the
            site (its ``head`` and ``positions`` are ignored here) and returns a
            replacement or None.
        capture: sites whose activations to return (after the hooks above edited them).
        readout: one of :data:`READOUTS`.
        positions: ``[n]`` int64, the position of each row read out by
            ``"position_logits"``.
        stop_after: end the forward right after this site's hook (readout must be None).
        record_prefix: record every block's inputs (full forwards only).
        gradient: what to differentiate (:class:`Gradient`; :class:`OwnGradient`: the
            caller, with the live readout; None: the forward runs under ``torch.no_grad``).
        attention: how attention is computed (:class:`AttentionPath`).

    Returns:
        A :class:`ForwardOutput`.
    """
    _check_request(model, inputs, readout, positions, stop_after, record_prefix, gradient)
    writes = None
    if readout == "position_logits" or (readout == "logits" and isinstance(inputs, Suffix)):
        writes = Writes.of(model)  # logits from the final residual stream: the model's own
        writes.check_logits()
    grad_at = gradient.at if isinstance(gradient, Gradient) else ()
    sites = [site for site, _ in hooks] + list(capture) + list(grad_at)
    mode = choose_attention(model, inputs, attention.mode, rows=attention.rows, sites=sites)
    real = _attention_mask(inputs)
    if attention.restrictions and (mode != "rows" or real is None):
        raise IntervError(
            "key restrictions are applied inside attention computed without the pattern, but "
            "this forward runs the model's own attention; edit the pattern at the z level "
            "instead (interv.engine.stacking.edit_hooks)"
        )
    device = model_device(model)
    captured: dict[Site, torch.Tensor] = {}
    seen: dict[str, torch.Tensor] = {}
    grad = gradient is not None
    fwd_hooks = _hooks_of(model, hooks, capture, grad_at, captured, grad)
    last_block = block_output_hook(model.cfg.n_layers - 1)
    stop_name = None if stop_after is None else hook_name(stop_after)
    if readout in ("position_logits", "final_residual"):
        stop_name = last_block
        fwd_hooks.append((last_block, _keeper(last_block, seen, grad)))
    if stop_name is not None:
        fwd_hooks.append((stop_name, _stop))
    context = torch.enable_grad() if grad else torch.no_grad()
    recording = _record_prefix(model) if record_prefix else nullcontext(([], []))
    if record_prefix and readout not in ("position_logits", "final_residual"):
        fwd_hooks.append((last_block, _keeper(last_block, seen, grad)))
    logits = None
    # entered after the hooks, so that interv's own hooks run after the caller's
    without_pattern = (
        pattern_free(model, real.to(device), attention.rows or RowRequest(), attention.restrictions)
        if mode == "rows" and real is not None
        else nullcontext()
    )
    with (
        context,
        recording as recorded,
        _scale_edits_expected(),
        model.hooks(fwd_hooks=fwd_hooks),
        without_pattern,
    ):
        try:
            if isinstance(inputs, Suffix):
                hidden = _run_suffix(model, inputs)
                if hidden is not None:  # None: no block ran (every copy starts after the last)
                    seen.setdefault(last_block, hidden)
            else:
                logits = _run_full(model, inputs, device, readout == "logits")
        except _Stopped:
            pass
        if isinstance(inputs, Suffix) and readout is not None:
            _join_after_last_block(inputs, seen, last_block, model.cfg.n_layers)
            if readout == "logits":
                logits = writes.finish_logits(model.unembed(_final_norm(model, seen[last_block])))
        out: torch.Tensor | None = logits
        if readout == "final_residual":
            out = seen[last_block]
        elif readout == "position_logits":
            # the final norm runs here, inside the hooks, so edits of its sites apply
            normed = _final_norm(model, seen[last_block])
            rows = torch.arange(normed.shape[0], device=normed.device)
            at = normed[rows, positions.to(normed.device)].unsqueeze(1)
            out = writes.finish_logits(model.unembed(at).squeeze(1))
        gradients: dict[Site, torch.Tensor] = {}
        if gradient is not None:
            if isinstance(gradient, Gradient):
                gradients = _gradients(gradient, out, captured)
            else:
                gradient.of(out)
            captured = {site: value.detach() for site, value in captured.items()}
            out = out.detach()
    if out is not None and out.is_floating_point() and out.dtype.itemsize < 4:
        out = out.float()
    return ForwardOutput(
        readout=out,
        captured=captured,
        prefix=_prefix_of(model, inputs, recorded, seen, last_block),
        gradients=gradients,
        attention=mode,
    )


def _check_request(
    model: Any,
    inputs: Prompts | Suffix,
    readout: str | None,
    positions: torch.Tensor | None,
    stop_after: Site | None,
    record_prefix: bool,
    gradient: Gradient | OwnGradient | None,
) -> None:
    """Refuse, in one line, a :func:`forward` whose arguments do not go together."""
    if readout not in READOUTS:
        raise IntervError(f"unknown readout {readout!r}; choose one of {READOUTS}")
    if stop_after is not None and readout is not None:
        raise IntervError(
            f"stop_after ends the forward early, so readout must be None; got {readout!r}"
        )
    if (readout == "position_logits") != (positions is not None):
        raise IntervError("positions are needed by, and only by, readout='position_logits'")
    if gradient is not None and readout is None:
        raise IntervError("a gradient needs a readout to differentiate; got readout=None")
    if gradient is not None and not isinstance(gradient, Gradient | OwnGradient):
        raise IntervError(
            f"gradient must be an interv.engine.forward.Gradient or OwnGradient; got {gradient!r}"
        )
    if record_prefix and isinstance(inputs, Suffix):
        raise IntervError("record_prefix needs a full forward (Prompts), not a Suffix")
    if isinstance(inputs, Prompts):
        inputs.check_fits(model.cfg)


def _hooks_of(
    model: Any,
    hooks: Sequence[tuple[Site, HookFn]],
    capture: Sequence[Site],
    grad_at: Sequence[Site],
    captured: dict[Site, torch.Tensor],
    grad: bool,
) -> list[tuple[str, HookFn]]:
    """The forward's hooks by hook name: the caller's, the gradient sites' copies, the
    ``resid_mid`` rebuilds and the captures, in that order."""
    # a gradient site returns its own copy of the activation, which replaces it: at resid_mid
    # that copy must become the residual stream too, as an edit's does
    fwd_hooks = [(hook_name(site), fn) for site, fn in hooks] + [
        (hook_name(site), _differentiable(site.without_positions(), captured)) for site in grad_at
    ]
    fwd_hooks = _with_mid_rebuilds(
        fwd_hooks,
        {s.layer for s in (*(site for site, _ in hooks), *grad_at) if s.component == "resid_mid"},
    )
    return fwd_hooks + [
        (hook_name(site), _keeper(site.without_positions(), captured, grad)) for site in capture
    ]


def _gradients(
    gradient: Gradient, out: torch.Tensor, captured: dict[Site, torch.Tensor]
) -> dict[Site, torch.Tensor]:
    """The gradient of ``gradient.of(out)``'s sum at each of its sites (see :class:`Gradient`)."""
    sites = list(dict.fromkeys(site.without_positions() for site in gradient.at))
    found = torch.autograd.grad(
        gradient.of(out).sum(), [captured[s] for s in sites], allow_unused=True
    )
    unused = [hook_name(s) for s, g in zip(sites, found, strict=True) if g is None]
    if unused:
        raise IntervError(
            f"no gradient at {unused}: this model does not read what those hooks return "
            "(it discards their edits), so nothing downstream depends on them"
        )
    return dict(zip(sites, found, strict=True))


def _prefix_of(
    model: Any,
    inputs: Prompts | Suffix,
    recorded: tuple[list[torch.Tensor], list[dict[str, Any]]],
    seen: dict[str, torch.Tensor],
    last_block: str,
) -> Prefix | None:
    """The recorded block inputs as a :class:`Prefix`, when every block ran once."""
    residuals, block_kwargs = recorded
    if len(residuals) != model.cfg.n_layers or last_block not in seen:
        return None
    return Prefix(
        (*residuals, seen[last_block].detach()),
        tuple(block_kwargs),
        len(residuals[0]),
        inputs.mask if isinstance(inputs, Prompts) else None,
    )


def _attention_mask(inputs: Prompts | Suffix) -> torch.Tensor | None:
    """``[n_prompts, pos]`` real tokens of the prompts (of one copy for a suffix), if known."""
    if isinstance(inputs, Prompts):
        return inputs.mask
    return inputs.prefixes[0].mask


def choose_attention(
    model: Any,
    inputs: Prompts | Suffix,
    attention: str = "auto",
    *,
    rows: RowRequest | None = None,
    sites: Sequence[Site] = (),
    pattern_sites: Sequence[Site] = (),
) -> str:
    """How :func:`forward` computes attention for ``inputs``: ``"pattern"`` or ``"rows"``
    (see its ``attention``; ``sites`` are the hooked and captured sites, ``pattern_sites``
    those hooked only where the model's own attention runs: the z-level form of key
    restrictions), after the checks (a pattern-free forward is verified against the model's
    own rows first). Hooks added to the model itself at the points attention without the
    pattern never fires (:func:`~interv.engine.rows.outside_hooks`: a user's
    ``model.add_hook("blocks.0.attn.hook_pattern", fn)``) are read at every call, never
    remembered: ``"auto"`` then runs the model's own attention, so they fire, and ``"rows"``
    refuses in one line naming the hook point.

    Raises:
        IntervError: ``attention="rows"`` where interv cannot compute attention without the
            pattern, or a forward whose pattern would exceed
            :data:`~interv.engine.rows.MAX_PATTERN_BYTES` (both in one line, with the reason).
    """
    real = _attention_mask(inputs)
    if attention not in ATTENTION_MODES:
        raise IntervError(f"attention must be one of {ATTENTION_MODES}; got {attention!r}")
    if rows is not None and attention == "pattern":
        raise IntervError(
            "rows= asks for attention without the pattern; attention='pattern' refuses it"
        )
    if isinstance(inputs, Prompts):
        n_rows, n_pos = inputs.tokens.shape
    else:
        n_rows, n_pos = inputs.n, int(inputs.prefixes[0].residuals[0].shape[1])
    needs = [site for site in sites if site.component == "pattern"]
    held = outside_hooks(model)  # the user's own hooks, read at every call
    fallback = ""
    if (
        attention == "rows"
        or rows is not None
        or (attention == "auto" and n_pos >= LONG_CONTEXT and not needs and not held)
    ):
        reason = _rows_unavailable(model, inputs, real, needs, held)
        if reason is None:
            return "rows"
        if attention == "rows" or rows is not None:
            raise IntervError(reason)
        fallback = f" ({reason})"
    needs += [site for site in pattern_sites if site.component == "pattern"]
    size = pattern_bytes(model, n_rows, n_pos)
    if size > MAX_PATTERN_BYTES:
        if needs:
            why = (
                f"a hook or capture of block {needs[0].layer}'s attention pattern (pattern "
                "patching, a pattern-level edit, rollout) needs it"
            )
        elif held:
            why = f"the hook added to the model at {held[0]} needs it"
        else:
            why = "the model's own attention materializes it"
        raise IntervError(
            f"one layer's attention pattern would hold {size / 2**30:.1f} GiB ({n_rows} rows x "
            f"{model.cfg.n_heads} heads x {n_pos}^2 positions), above interv's limit of "
            f"{MAX_PATTERN_BYTES / 2**30:.0f} GiB; {why}{fallback}: use fewer or shorter "
            "prompts, or computations that need no pattern (attention='rows')"
        )
    return "pattern"


def _rows_unavailable(
    model: Any,
    inputs: Prompts | Suffix,
    real: torch.Tensor | None,
    needs: list[Site],
    held: list[str],
) -> str | None:
    """Why this forward cannot run without the pattern (one line), or None after
    :func:`~interv.engine.rows.verify` accepted the model."""
    if needs:
        return (
            f"the {needs[0].phrase} is hooked or captured, which needs the full pattern "
            "(attention='pattern')"
        )
    if held:
        return (
            f"{held[0]} carries a hook added to the model (model.add_hook or model.hooks; "
            f"{len(held)} such hook point{'s' if len(held) > 1 else ''}), which attention "
            "without the pattern would skip; remove it (model.reset_hooks()) or use "
            "attention='pattern'"
        )
    if real is None:
        return "prefixes recorded without their mask (a suffix) cannot run without the pattern"
    reason = rows_refusal(model)
    if reason is not None:
        return reason + "; attention without the pattern is not available"
    if isinstance(inputs, Suffix):  # checked when the model last ran a full pattern-free forward
        return None if verified(model) else "the model's pattern-free attention is not verified yet"
    tokens = inputs.tokens
    try:
        verify(
            model,
            tokens,
            real,
            lambda prefix, capture, attention, rows=None: forward(
                model,
                Prompts.of(prefix),
                capture=capture,
                readout=None,
                attention=AttentionPath(attention, rows),
            ),
        )
    except IntervError as error:
        return str(error)
    return None


def _final_norm(model: Any, x: torch.Tensor) -> torch.Tensor:
    """``model.ln_final(x)``; a final norm without parameters (OLMo's LayerNorm) runs here,
    as the backend's own from-scratch path with the same hooks (``hook_in``, ``hook_scale``,
    ``hook_normalized``, ``hook_out``): transformer-lens 4.3 rebuilds an edited norm (a
    frozen scale) with a weight such a norm does not have."""
    norm = model.ln_final
    original = getattr(norm, "original_component", None)
    if original is None or any(True for _ in original.parameters()):
        return norm(x)
    eps = next(
        (getattr(original, n) for n in ("eps", "variance_epsilon") if hasattr(original, n)),
        getattr(model.cfg, "eps", 1e-5),
    )
    x = norm.hook_in(x)
    work = x.float() if x.dtype not in (torch.float32, torch.float64) else x
    if not getattr(norm, "uses_rms_norm", False):
        work = work - work.mean(-1, keepdim=True)
    scale = norm.hook_scale((work.pow(2).mean(-1, keepdim=True) + float(eps)).sqrt())
    return norm.hook_out(norm.hook_normalized(work / scale).to(x.dtype))


def _with_mid_rebuilds(
    fwd_hooks: list[tuple[str, HookFn]], layers: set[int]
) -> list[tuple[str, HookFn]]:
    """``fwd_hooks`` with, for each block of ``layers``, ``resid_post`` rebuilt first as
    ``resid_mid + mlp_out`` from the values the other hooks left at those two sites, when a
    hook replaced ``resid_mid``.

    Hooks at one hook point run in list order, so the first keeper at ``resid_mid`` sees
    the block's own value, the others go after the given hooks, and the rebuild comes
    before any hook at ``resid_post``.
    """
    if not layers:
        return fwd_hooks
    kept: dict[tuple[str, int], torch.Tensor] = {}
    front, back = [], []
    for layer in sorted(layers):
        front.append((hook_name("resid_mid", layer), _keeper(("own", layer), kept, True)))
        back.append((hook_name("resid_mid", layer), _keeper(("mid", layer), kept, True)))
        back.append((hook_name("mlp_out", layer), _keeper(("mlp", layer), kept, True)))
        front.append((hook_name("resid_post", layer), _rebuild(layer, kept)))
    return [*front, *fwd_hooks, *back]


def _rebuild(layer: int, kept: dict[tuple[str, int], torch.Tensor]) -> HookFn:
    def rebuild(activation: torch.Tensor, hook: Any) -> torch.Tensor | None:
        own = kept.pop(("own", layer), None)
        mid, mlp = kept.pop(("mid", layer), None), kept.pop(("mlp", layer), None)
        if mid is None or mlp is None or own is None or mid.shape != activation.shape:
            raise IntervError(
                f"block {layer} ran without both its resid_mid and mlp_out hooks firing, so a "
                "write to resid_mid cannot reach the residual stream; interv supports "
                "resid_mid only in sequential blocks (resid_post = resid_mid + mlp_out)"
            )
        if mid is own:  # nothing replaced resid_mid (an edit in place reaches the residual)
            return None
        # the block added the MLP's output to its own resid_mid: check that it is such a
        # block (pre-norm, sequential) before adding the write to the residual stream
        gap = (activation - own - mlp).detach().abs().max()
        scale = activation.detach().abs().max() + 1
        if float(gap) > 16 * torch.finfo(activation.dtype).eps * float(scale):
            raise IntervError(
                f"block {layer}'s output is not its resid_mid plus its mlp_out (they differ by "
                f"{float(gap):.3g}; e.g. a post-norm block such as BERT's), so a write to "
                "resid_mid cannot be made the residual stream between attention and MLP in "
                "this model; write attn_out, mlp_out or resid_post instead"
            )
        return mid + mlp

    return rebuild


@contextmanager
def _scale_edits_expected() -> Iterator[None]:
    """Silence the backend's notice that an edited norm scale takes its reconstructed path.

    interv edits the final norm's scale only on purpose (a frozen norm, stated in the
    intervention's sentence) and checks the result against hand computations.
    """
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="A forward hook edited hook_scale")
        yield


def _keeper(key: Any, store: dict, grad: bool) -> HookFn:
    def keep(activation: torch.Tensor, hook: Any) -> None:
        store[key] = activation if grad else activation.detach()

    return keep


def _differentiable(site: Site, store: dict[Site, torch.Tensor]) -> HookFn:
    """A hook that makes its copy of the activation the one the rest of the forward reads,
    so that the gradient with respect to the copy is the full downstream derivative."""

    def keep(activation: torch.Tensor, hook: Any) -> torch.Tensor:
        copy = activation.clone()
        # a hook upstream may have written a constant: the copy is a leaf of the graph then
        store[site] = copy if copy.requires_grad else copy.requires_grad_(True)
        return store[site]

    return keep


def _stop(activation: torch.Tensor, hook: Any) -> None:
    raise _Stopped


def _run_full(model: Any, prompts: Prompts, device: torch.device, want_logits: bool) -> Any:
    kwargs = {} if bool(prompts.mask.all()) else {"attention_mask": prompts.mask.to(device)}
    tokens = prompts.tokens.to(device)
    if want_logits:
        return model(tokens, **kwargs)
    model(tokens, return_type=None, **kwargs)
    return None


def _run_suffix(model: Any, suffix: Suffix) -> torch.Tensor | None:
    """Blocks ``start_layer..`` on the stacked prefixes; returns the last block's output
    (of the copies that ran a block; None when none did)."""
    if suffix.starts is not None:
        return _run_staggered(model, suffix)
    first = suffix.prefixes[0]
    copies = len(suffix.prefixes)
    if suffix.start_layer >= len(model.blocks):
        return None
    hidden = suffix.hidden
    if hidden is None:
        hidden = torch.cat([prefix.residuals[suffix.start_layer] for prefix in suffix.prefixes])
    for layer in range(suffix.start_layer, len(model.blocks)):
        hidden = _block(model, layer, hidden, first, copies)
    return hidden


def _block(model: Any, layer: int, hidden: torch.Tensor, first: Prefix, copies: int) -> Any:
    kwargs = {
        name: _per_head(_repeat_batch, name, value, copies, first.n_prompts)
        for name, value in first.kwargs[layer].items()
    }
    output = model.blocks[layer](hidden, **kwargs)
    return output[0] if isinstance(output, tuple) else output


def _run_staggered(model: Any, suffix: Suffix) -> torch.Tensor | None:
    """A staggered suffix: each copy joins at its own block (see :class:`Suffix`)."""
    first = suffix.prefixes[0]
    entries = suffix.entries or (None,) * len(suffix.prefixes)
    hidden: torch.Tensor | None = None
    active = 0

    def join(layer: int) -> None:
        nonlocal hidden, active
        joining = []
        while active < len(suffix.starts) and suffix.starts[active] == layer:
            entry = entries[active]
            joining.append(suffix.prefixes[active].residuals[layer] if entry is None else entry)
            active += 1
        if joining:
            hidden = torch.cat(joining if hidden is None else [hidden, *joining])

    for layer in range(suffix.start_layer, len(model.blocks)):
        join(layer)
        hidden = _block(model, layer, hidden, first, active)
    return hidden


def _join_after_last_block(
    suffix: Suffix, seen: dict[str, torch.Tensor], last_block: str, n_layers: int
) -> None:
    """Append the copies that start after the last block (their residual stream is the
    last block's output already) to what the last block produced, or start from them."""
    if suffix.starts is None:
        if last_block not in seen:  # start_layer == n_layers: no block ran
            seen[last_block] = (
                suffix.hidden
                if suffix.hidden is not None
                else torch.cat([prefix.residuals[n_layers] for prefix in suffix.prefixes])
            )
        return
    entries = suffix.entries or (None,) * len(suffix.prefixes)
    late = [
        prefix.residuals[n_layers] if entry is None else entry
        for start, prefix, entry in zip(suffix.starts, suffix.prefixes, entries, strict=True)
        if start >= n_layers
    ]
    if late:
        ran = [seen[last_block]] if last_block in seen else []
        seen[last_block] = torch.cat([*ran, *late])


# Block keyword arguments laid out [batch * heads, ...], batch-major (BLOOM's ALiBi bias).
_PER_HEAD_KWARGS = ("alibi",)


def _per_head(apply: Any, name: str, value: Any, how: Any, n_prompts: int) -> Any:
    """``apply(value, how, n_prompts)`` (:func:`_repeat_batch` or :func:`_slice_batch`), with
    a ``[batch * heads, ...]`` keyword argument viewed as ``[batch, heads, ...]`` around it."""
    if (
        name not in _PER_HEAD_KWARGS
        or not isinstance(value, torch.Tensor)
        or value.ndim < 2
        or value.shape[0] % n_prompts
    ):
        return apply(value, how, n_prompts)
    grouped = value.reshape(n_prompts, value.shape[0] // n_prompts, *value.shape[1:])
    return apply(grouped, how, n_prompts).flatten(0, 1)


def _repeat_batch(value: Any, copies: int, n_prompts: int) -> Any:
    """Stack ``copies`` copies of every batch-leading tensor (``[n_prompts, ...]``, ndim >= 2).

    Other tensors (e.g. rotary tables ``[1, pos, d]``, broadcast over the batch) pass
    unchanged. Tuples and lists are handled element-wise.
    """
    if isinstance(value, torch.Tensor):
        if value.ndim >= 2 and value.shape[0] == n_prompts and copies > 1:
            return value.repeat(copies, *([1] * (value.ndim - 1)))
        return value
    if isinstance(value, tuple | list):
        return type(value)(_repeat_batch(item, copies, n_prompts) for item in value)
    return value


def _slice_batch(value: Any, rows: slice, n_prompts: int) -> Any:
    """Rows ``rows`` of every batch-leading tensor (``[n_prompts, ...]``, ndim >= 2); the
    inverse of :func:`_repeat_batch`."""
    if isinstance(value, torch.Tensor):
        return value[rows] if value.ndim >= 2 and value.shape[0] == n_prompts else value
    if isinstance(value, tuple | list):
        return type(value)(_slice_batch(item, rows, n_prompts) for item in value)
    return value


@contextmanager
def _record_prefix(model: Any) -> Iterator[tuple[list[torch.Tensor], list[dict[str, Any]]]]:
    """Record the inputs of every block during the forward run inside the context.

    Yields ``(residuals, kwargs)``, lists that hold one entry per block once a forward
    called every block once (a forward that passes extra positional inputs to a block is
    not recorded). The recording hooks are plain torch forward pre-hooks on the blocks,
    removed in ``finally``.
    """
    residuals: list[torch.Tensor] = []
    kwargs: list[dict[str, Any]] = []

    def make_hook(layer: int) -> Any:
        def hook(module: Any, args: tuple, block_kwargs: dict[str, Any]) -> None:
            if layer == 0 or len(args) > 1:
                # a new forward; extra positional inputs are not replayed, so a forward
                # that passes any stays incomplete and is not recorded
                residuals.clear()
                kwargs.clear()
            if len(args) > 1:
                return
            hidden = args[0] if args else block_kwargs["hidden_states"]
            rest = {k: v for k, v in block_kwargs.items() if k != "hidden_states"}
            residuals.append(hidden.detach())
            kwargs.append(_without_cache(rest))

        return hook

    handles = [
        block.register_forward_pre_hook(make_hook(layer), with_kwargs=True)
        for layer, block in enumerate(model.blocks)
    ]
    try:
        yield residuals, kwargs
    finally:
        for handle in handles:
            handle.remove()


def _without_cache(block_kwargs: dict[str, Any]) -> dict[str, Any]:
    kwargs = {k: (None if k in _CACHE_KWARGS else v) for k, v in block_kwargs.items()}
    if "use_cache" in kwargs:
        kwargs["use_cache"] = False
    return kwargs
