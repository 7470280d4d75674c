"""Interventions: frozen values that say what replaces an activation, and from where.

A causal effect is only meaningful together with the intervention's semantics: what
replaces the activation (zero, a mean, another prompt's activation, an edited
attention pattern), from which data, at which positions, in which direction. Each
intervention here is a small frozen dataclass that holds exactly that and states it in
one sentence (:meth:`Intervention.describe`), which travels into every result row.

Interventions do not know any model: layers, heads and positions are checked against
the model and the task when :func:`interv.engine.runner.run` is called.

Every intervention acts on a *base run*, the forward it modifies: ablations and
value/routing edits act on the clean prompts; patches act on the corrupted run when
denoising (clean activations in: is the component sufficient?) and on the clean run
when noising (corrupted activations in: is it necessary?).

Families:

- Head ablation (``z`` of one head): :class:`ZeroAblation`, :class:`MeanAblation`,
  :class:`ResampleAblation`.
- :class:`ActivationPatch`: one component (head output ``z``, residual stream,
  attention output, MLP output) from the other run of the pair.
- z-level edits of one query head, computed from its pattern ``A`` ``[query_pos,
  key_pos]`` and values ``V`` ``[key_pos, d_head]`` as ``z = A V``: :class:`ValueScale`,
  :class:`ValueReplace` (value vectors at chosen key positions), :class:`AttentionKnockout`
  (routing), :class:`PatternPatch` and :class:`ValuePatch` (pattern-only / value-only
  patches). They never edit the pattern hook, so they work where a model discards
  pattern edits, and under grouped-query attention they leave the other query heads
  that share the value head untouched.
- :class:`Combined`: several interventions applied in the same forward.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import torch

from interv.engine.sites import COMPONENTS, HEAD_COMPONENTS, check_component
from interv.errors import IntervError

if TYPE_CHECKING:
    from interv.tasks.tokenized import TokenizedPairs

__all__ = [
    "DIRECTIONS",
    "RUNS",
    "ActivationPatch",
    "AttentionKnockout",
    "Combined",
    "Intervention",
    "MeanAblation",
    "PatternPatch",
    "ReferenceSet",
    "ResampleAblation",
    "ValuePatch",
    "ValueReplace",
    "ValueScale",
    "ZeroAblation",
]

RUNS: tuple[str, ...] = ("clean", "corrupted")
"""The two runs of a task that an intervention can take activations from."""

DIRECTIONS: tuple[str, ...] = ("denoise", "noise")
"""Patching directions: ``"denoise"`` = clean into corrupted, ``"noise"`` = corrupted into clean."""

_COMPONENT_PHRASES = {
    "resid_pre": "residual stream before block {layer} (resid_pre)",
    "resid_mid": "residual stream between attention and MLP of block {layer} (resid_mid)",
    "resid_post": "residual stream after block {layer} (resid_post)",
    "attn_out": "attention output of block {layer} (attn_out)",
    "mlp_out": "MLP output of block {layer} (mlp_out)",
}


@dataclass(frozen=True, eq=False)
class ReferenceSet:
    """A named set of prompts whose activations serve as a replacement source.

    Attributes:
        tokens: ``[n_ref, pos]`` int64 token ids.
        name: how the set is named in semantics sentences.
        attention_mask: ``[n_ref, pos]`` bool, True on real tokens; None = all real.
    """

    tokens: torch.Tensor
    name: str
    attention_mask: torch.Tensor | None = None

    def __post_init__(self) -> None:
        if self.tokens.ndim != 2 or self.tokens.shape[0] == 0:
            raise IntervError(
                f"reference set {self.name!r} must have tokens of shape [n_ref, pos] with "
                f"n_ref >= 1; got shape {tuple(self.tokens.shape)}"
            )
        if self.attention_mask is not None and (
            self.attention_mask.shape != self.tokens.shape
            or self.attention_mask.dtype != torch.bool
        ):
            raise IntervError(
                f"reference set {self.name!r}: attention_mask must be bool of shape "
                f"{tuple(self.tokens.shape)}; got {self.attention_mask.dtype} of shape "
                f"{tuple(self.attention_mask.shape)}"
            )

    @property
    def mask(self) -> torch.Tensor:
        """``[n_ref, pos]`` bool mask, all True when none was given."""
        if self.attention_mask is None:
            return torch.ones_like(self.tokens, dtype=torch.bool)
        return self.attention_mask


def _check_choice(value: object, allowed: tuple[str, ...], what: str) -> None:
    if value not in allowed:
        raise IntervError(f"unknown {what} {value!r}; choose one of {allowed}")


def _check_source(source: object, what: str) -> None:
    if not isinstance(source, ReferenceSet):
        _check_choice(source, RUNS, what)


def _positions_tuple(positions: Iterable[int] | None, what: str) -> tuple[int, ...] | None:
    if positions is None:
        return None
    values = tuple(int(p) for p in positions)
    if any(p < 0 for p in values):
        raise IntervError(f"{what} must be >= 0 (absolute positions); got {values}")
    if len(set(values)) != len(values):
        raise IntervError(f"{what} must not repeat; got {values}")
    return values


def _at_positions(positions: tuple[int, ...] | None) -> str:
    if positions is None:
        return "at all positions"
    if len(positions) == 1:
        return f"at position {positions[0]}"
    return f"at positions {list(positions)}"


def _at_keys(key_positions: tuple[int, ...]) -> str:
    if not key_positions:
        return "at no key positions"
    if len(key_positions) == 1:
        return f"at key position {key_positions[0]}"
    return f"at key positions {list(key_positions)}"


def _head(layer: int, head: int) -> str:
    return f"L{layer}H{head}"


def _prompts_of(source: str | ReferenceSet, task: TokenizedPairs | None) -> str:
    """Noun phrase for a source set, e.g. "the 16 clean prompts of 'ioi'"."""
    if isinstance(source, ReferenceSet):
        return f"the {source.tokens.shape[0]} prompts of reference set {source.name!r}"
    if task is None:
        return f"the task's {source} prompts"
    return f"the {task.n_pairs} {source} prompts of {task.name!r}"


class Intervention:
    """Base of all interventions: a frozen value with a one-sentence semantics.

    Subclasses are frozen dataclasses; :attr:`base_run` names the forward they modify
    (``"clean"`` or ``"corrupted"``).
    """

    @property
    def base_run(self) -> str:
        """The run this intervention modifies: ``"clean"`` or ``"corrupted"``."""
        return "clean"

    def describe(self, task: TokenizedPairs | None = None) -> str:
        """One plain sentence stating the intervention's semantics.

        With ``task``, reference and source sets are named with their size and the
        task's name.
        """
        raise NotImplementedError


@dataclass(frozen=True)
class _HeadIntervention(Intervention):
    layer: int
    head: int


@dataclass(frozen=True)
class ZeroAblation(_HeadIntervention):
    """Head output ``z`` set to zero, in the clean run.

    Attributes:
        layer, head: the query head.
        positions: query positions to ablate; None = all positions.
    """

    positions: tuple[int, ...] | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "positions", _positions_tuple(self.positions, "positions"))

    def describe(self, task: TokenizedPairs | None = None) -> str:
        where = _at_positions(self.positions)
        return f"{_head(self.layer, self.head)} output (z) set to zero {where}"


@dataclass(frozen=True)
class MeanAblation(_HeadIntervention):
    """Head output ``z`` replaced by its mean over a reference set, in the clean run.

    The mean respects the reference set's attention mask (padding never enters it).
    Per position (``pooled=False``): the mean at the same position over the reference
    prompts that are real there (zero where none is), so the reference prompts must
    have the task's padded length. Pooled (``pooled=True``): one mean over every real
    position of every reference prompt, any length.

    Attributes:
        layer, head: the query head.
        reference: ``"clean"``, ``"corrupted"`` (the task's own prompts) or a
            :class:`ReferenceSet`.
        pooled: pool over positions instead of a mean per position.
        positions: query positions to ablate; None = all positions.
    """

    reference: str | ReferenceSet = "clean"
    pooled: bool = False
    positions: tuple[int, ...] | None = None

    def __post_init__(self) -> None:
        _check_source(self.reference, "reference")
        object.__setattr__(self, "positions", _positions_tuple(self.positions, "positions"))

    def describe(self, task: TokenizedPairs | None = None) -> str:
        where = "pooled over all real positions" if self.pooled else "at the same position"
        return (
            f"{_head(self.layer, self.head)} output (z) replaced by its mean over "
            f"{_prompts_of(self.reference, task)} {where}, {_at_positions(self.positions)}"
        )


@dataclass(frozen=True)
class ResampleAblation(_HeadIntervention):
    """Head output ``z`` replaced by another prompt's ``z``, in the clean run.

    For each clean prompt one source prompt is drawn uniformly (with replacement,
    from a generator seeded with ``seed``) among the source prompts that are real at
    every real position of the clean prompt; its ``z`` at the same positions replaces
    the clean one. Source prompts must have the task's padded length.

    Attributes:
        layer, head: the query head.
        source: ``"clean"``, ``"corrupted"`` or a :class:`ReferenceSet`.
        seed: seed of the draw.
        positions: query positions to ablate; None = all positions.
    """

    source: str | ReferenceSet = "corrupted"
    seed: int = 0
    positions: tuple[int, ...] | None = None

    def __post_init__(self) -> None:
        _check_source(self.source, "source")
        object.__setattr__(self, "positions", _positions_tuple(self.positions, "positions"))

    def describe(self, task: TokenizedPairs | None = None) -> str:
        return (
            f"{_head(self.layer, self.head)} output (z) resampled from "
            f"{_prompts_of(self.source, task)} (seed {self.seed}), same position, "
            f"{_at_positions(self.positions)}"
        )


def _patch_runs(direction: str) -> tuple[str, str]:
    """(source run, base run) of a patching direction."""
    return ("clean", "corrupted") if direction == "denoise" else ("corrupted", "clean")


_QUESTION = {"denoise": "is it sufficient?", "noise": "is it necessary?"}
_DIRECTION_NOUN = {"denoise": "denoising", "noise": "noising"}


@dataclass(frozen=True)
class ActivationPatch(Intervention):
    """One component's activation copied from the other run of each pair.

    ``"denoise"``: clean activation into the corrupted run (is it sufficient to restore
    the clean behaviour?). ``"noise"``: corrupted activation into the clean run (is it
    necessary for it?). Pair ``i`` always receives pair ``i``'s activation.

    Attributes:
        component: one of :data:`interv.engine.sites.COMPONENTS`.
        layer: the block.
        head: the query head; required for ``"z"``, forbidden otherwise.
        direction: ``"denoise"`` or ``"noise"``.
        positions: positions to patch; None = all positions.
    """

    component: str
    layer: int
    head: int | None = None
    direction: str = "denoise"
    positions: tuple[int, ...] | None = None

    def __post_init__(self) -> None:
        check_component(self.component)
        _check_choice(self.direction, DIRECTIONS, "direction")
        if (self.component in HEAD_COMPONENTS) != (self.head is not None):
            raise IntervError(
                f"component {self.component!r} "
                + (
                    "needs a head (head=None given)"
                    if self.component in HEAD_COMPONENTS
                    else f"has no head axis; got head={self.head}. Heads apply only to "
                    f"{HEAD_COMPONENTS}; other components: "
                    f"{tuple(c for c in COMPONENTS if c not in HEAD_COMPONENTS)}"
                )
            )
        object.__setattr__(self, "positions", _positions_tuple(self.positions, "positions"))

    @property
    def source_run(self) -> str:
        """The run the patched activation comes from."""
        return _patch_runs(self.direction)[0]

    @property
    def base_run(self) -> str:
        return _patch_runs(self.direction)[1]

    def describe(self, task: TokenizedPairs | None = None) -> str:
        if self.component == "z":
            what = f"{_head(self.layer, self.head)} output (z)"
        else:
            what = _COMPONENT_PHRASES[self.component].format(layer=self.layer)
        return (
            f"{_DIRECTION_NOUN[self.direction]}: {what} from the {self.source_run} run "
            f"patched into the {self.base_run} run {_at_positions(self.positions)} "
            f"({_QUESTION[self.direction]})"
        )


@dataclass(frozen=True)
class _KeyIntervention(_HeadIntervention):
    key_positions: tuple[int, ...] = field(default=())

    def __post_init__(self) -> None:
        positions = _positions_tuple(self.key_positions, "key_positions")
        object.__setattr__(self, "key_positions", positions)


_SHARED = "other query heads sharing its key/value head untouched"


@dataclass(frozen=True)
class ValueScale(_KeyIntervention):
    """Value vectors read by one query head at chosen key positions scaled, in the clean run.

    Computed at the z level: ``z_h <- z_h + A_h (V' - V)`` with ``V'`` the head's value
    vectors with rows ``key_positions`` multiplied by ``factor``. ``factor=0`` zeroes
    them; ``factor=1`` is the identity.

    Attributes:
        layer, head: the query head.
        key_positions: key positions whose value vectors are scaled (e.g. ``(0,)``, the sink).
        factor: the multiplier (dimensionless).
    """

    factor: float = 0.0

    def describe(self, task: TokenizedPairs | None = None) -> str:
        verb = "set to zero" if self.factor == 0 else f"scaled by {self.factor}"
        return (
            f"{_head(self.layer, self.head)} value vectors {_at_keys(self.key_positions)} "
            f"{verb}, {_SHARED}"
        )


@dataclass(frozen=True)
class ValueReplace(_KeyIntervention):
    """Value vectors read by one query head at chosen key positions taken from another run.

    Computed at the z level: ``z_h <- z_h + A_h (V' - V)``, ``V'`` = the head's values
    with rows ``key_positions`` taken from the same pair's ``source`` run.

    Attributes:
        layer, head: the query head.
        key_positions: key positions whose value vectors are replaced.
        source: ``"corrupted"`` or ``"clean"`` (the same pair's other run).
    """

    source: str = "corrupted"

    def __post_init__(self) -> None:
        super().__post_init__()
        _check_choice(self.source, RUNS, "source")

    def describe(self, task: TokenizedPairs | None = None) -> str:
        return (
            f"{_head(self.layer, self.head)} value vectors {_at_keys(self.key_positions)} "
            f"replaced by those of the {self.source} run of the same pair, {_SHARED}"
        )


@dataclass(frozen=True)
class AttentionKnockout(_KeyIntervention):
    """One query head's attention to chosen keys removed and the rest renormalized.

    Computed at the z level from the head's pattern ``A``: ``A'`` = ``A`` with columns
    ``key_positions`` zeroed and each query row divided by its remaining mass;
    ``z_h <- z_h + (A' - A) V``. A query row with no remaining mass outputs zero.
    Knocking out no keys is the identity.

    Attributes:
        layer, head: the query head.
        key_positions: key positions knocked out.
    """

    def describe(self, task: TokenizedPairs | None = None) -> str:
        return (
            f"{_head(self.layer, self.head)} attention to "
            f"{_at_keys(self.key_positions).removeprefix('at ')} knocked out and each "
            f"query row renormalized over the remaining keys, {_SHARED}"
        )


@dataclass(frozen=True)
class _RoutingPatch(_HeadIntervention):
    direction: str = "denoise"

    def __post_init__(self) -> None:
        _check_choice(self.direction, DIRECTIONS, "direction")

    @property
    def source_run(self) -> str:
        """The run the patched pattern or values come from."""
        return _patch_runs(self.direction)[0]

    @property
    def base_run(self) -> str:
        return _patch_runs(self.direction)[1]


@dataclass(frozen=True)
class PatternPatch(_RoutingPatch):
    """Pattern-only patch: one head reads its own values with the other run's pattern.

    ``z_h = A_source V_own`` (where the head looks is patched, what it reads is not).
    Combined with :class:`ValuePatch` of the same head and direction it equals the
    full head-output patch ``z_h = A_source V_source``.
    """

    def describe(self, task: TokenizedPairs | None = None) -> str:
        return (
            f"{_DIRECTION_NOUN[self.direction]}: {_head(self.layer, self.head)} attention "
            f"pattern from the {self.source_run} run with its own values in the "
            f"{self.base_run} run (pattern-only patch, z = A_{self.source_run} "
            f"V_{self.base_run}), {_SHARED}"
        )


@dataclass(frozen=True)
class ValuePatch(_RoutingPatch):
    """Value-only patch: one head reads the other run's values with its own pattern.

    ``z_h = A_own V_source`` (what the head reads is patched, where it looks is not).
    """

    def describe(self, task: TokenizedPairs | None = None) -> str:
        return (
            f"{_DIRECTION_NOUN[self.direction]}: {_head(self.layer, self.head)} value "
            f"vectors from the {self.source_run} run read with its own pattern in the "
            f"{self.base_run} run (value-only patch, z = A_{self.base_run} "
            f"V_{self.source_run}), {_SHARED}"
        )


@dataclass(frozen=True)
class Combined(Intervention):
    """Several interventions applied together in one forward, in the given order.

    All parts must modify the same base run. z-level edits of the same head compose
    on ``(A, V)`` in order (e.g. :class:`PatternPatch` then :class:`ValuePatch` gives
    ``A_source V_source``); other parts are applied hook after hook.
    """

    parts: tuple[Intervention, ...]

    def __post_init__(self) -> None:
        parts = tuple(self.parts)
        if not parts:
            raise IntervError("Combined needs at least one part; got none")
        for part in parts:
            if not isinstance(part, Intervention) or isinstance(part, Combined):
                raise IntervError(
                    f"Combined parts must be non-combined interventions; got {part!r}"
                )
        runs = sorted({part.base_run for part in parts})
        if len(runs) > 1:
            raise IntervError(
                f"Combined parts must modify the same base run; got parts on runs {runs}"
            )
        object.__setattr__(self, "parts", parts)

    @property
    def base_run(self) -> str:
        return self.parts[0].base_run

    def describe(self, task: TokenizedPairs | None = None) -> str:
        return "; and ".join(part.describe(task) for part in self.parts)
