"""The built-in interventions: frozen values that say what replaces an activation, and from where.

A causal effect is only meaningful together with the intervention's semantics: what
replaces the activation (zero, a mean, another prompt's activation, an edited
attention pattern), from which data, at which positions, in which direction. Each
intervention here is a frozen dataclass that holds exactly that, states it in one
sentence (``describe``), and follows the same protocol as a user's own kind
(:mod:`interv.engine.protocol`): it declares the sites it edits, what it reads from
other runs, and how it writes.

Every intervention acts on a *base run*, the forward it modifies: ablations and
value/routing edits act on the clean prompts; patches act on the corrupted run when
denoising (clean activations in: is the component sufficient?) and on the clean run
when noising (corrupted activations in: is it necessary?).

Families (registered kind names in brackets):

- Head ablation of ``z`` [``zero_ablation``, ``mean_ablation``, ``resample_ablation``].
- :class:`ActivationPatch`: one component from the other run of the pair
  [``activation_patch``; ``denoise`` and ``noise`` fix the direction].
- z-level edits of one query head, computed from its pattern ``A`` ``[query_pos,
  key_pos]`` and values ``V`` ``[key_pos, d_head]`` as ``z = A V``: :class:`ValueScale`,
  :class:`ValueReplace` [``value_scale``, ``value_replace``], :class:`AttentionKnockout`
  [``knockout``], :class:`PatternPatch` and :class:`ValuePatch` [``pattern_patch``,
  ``value_patch``]. They write ``z_h + A'V' - AV`` into the head's output ``z`` (head
  ``h`` only) and never edit the pattern or value hooks, so they work where a model
  discards pattern edits, and under grouped-query attention they leave the other query
  heads that share the value head untouched.
- :class:`Combined`: several interventions in the same forward.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch

from interv._checks import as_finite, as_positions
from interv._fields import convert, converted
from interv.engine.protocol import (
    DIRECTIONS,
    RUNS,
    EditContext,
    Intervention,
    Patching,
    Read,
    ReferenceSet,
    Source,
    check_source,
    patch_runs,
    register,
)
from interv.engine.restrictions import KeyRestriction
from interv.engine.sites import (
    HEAD_COMPONENTS,
    RESIDUAL_COMPONENTS,
    Site,
    as_site_positions,
    at_positions,
    check_positions,
    head_label,
)
from interv.errors import IntervError

if TYPE_CHECKING:
    from interv.tasks.tokenized import TokenizedPairs

__all__ = [
    "BASELINES",
    "DIRECTIONS",
    "PATCH_COMPONENTS",
    "RUNS",
    "ActivationPatch",
    "AttentionKnockout",
    "Combined",
    "Intervention",
    "MeanAblation",
    "PairAblation",
    "PatternPatch",
    "ReferenceSet",
    "ResampleAblation",
    "ValuePatch",
    "ValueReplace",
    "ValueScale",
    "ZeroAblation",
    "head_ablation",
    "masked_mean",
    "position_index",
    "resample_index",
]


PATCH_COMPONENTS: tuple[str, ...] = ("z", *RESIDUAL_COMPONENTS)
"""Components :class:`ActivationPatch` copies between runs."""

_SHARED = "other query heads sharing its key/value head untouched"


def _check_choice(value: object, allowed: tuple[str, ...], what: str) -> None:
    if value not in allowed:
        raise IntervError(f"unknown {what} {value!r}; choose one of {allowed}")


def position_index(positions: tuple[int, ...] | None) -> slice | list[int]:
    """An index over the position axis: every position (None) or the given ones."""
    return slice(None) if positions is None else list(positions)


def _at_keys(key_positions: tuple[int, ...]) -> str:
    if not key_positions:
        return "at no key positions"
    if len(key_positions) == 1:
        return f"at key position {key_positions[0]}"
    return f"at key positions {list(key_positions)}"


def prompts_of(source: Source, task: TokenizedPairs | None) -> str:
    """Noun phrase for a source set, e.g. "the 16 clean prompts of 'ioi'"."""
    if isinstance(source, ReferenceSet):
        return f"the {source.tokens.shape[0]} prompts of reference set {source.name!r}"
    if task is None:
        return f"the task's {source} prompts"
    return f"the {task.n_pairs} {source} prompts of {task.name!r}"


def masked_mean(act: torch.Tensor, mask: torch.Tensor, pooled: bool) -> torch.Tensor:
    """Mean of ``act`` ``[n, pos, d]`` over real tokens: ``[pos, d]``, or ``[d]`` if pooled.

    ``mask`` is ``[n, pos]`` bool (True = real token). Positions where no prompt is real
    get zero. Accumulated in float32 at least; returned in ``act``'s dtype.
    """
    values = act.float() if act.dtype.itemsize < 4 else act
    weights = mask.to(values).unsqueeze(-1)
    dims = (0, 1) if pooled else (0,)
    total = (values * weights).sum(dims)
    count = weights.sum(dims)
    return (total / count.clamp(min=1)).to(act.dtype)


def resample_index(
    seed: int, run_mask: torch.Tensor, source_mask: torch.Tensor, source_name: str
) -> torch.Tensor:
    """For each run prompt, a source prompt drawn uniformly among those covering it.

    A source prompt covers a run prompt when it is real at every position where the
    run prompt is real. Returns ``[n_run]`` int64 indices into the source prompts.
    """
    generator = torch.Generator().manual_seed(seed)
    covers = (source_mask.cpu().unsqueeze(0) | ~run_mask.cpu().unsqueeze(1)).all(-1)
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


def _check_reference_length(source: Source, n_positions: int, kind: str) -> None:
    """Per-position replacements need reference prompts of the task's padded length."""
    if isinstance(source, ReferenceSet) and source.tokens.shape[1] != n_positions:
        raise IntervError(
            f"reference set {source.name!r} has prompts of {source.tokens.shape[1]} positions, "
            f"but {kind} replaces activations at the same position, so it needs the task's "
            f"{n_positions} positions (shape [n_ref, {n_positions}]); got shape "
            f"{tuple(source.tokens.shape)}"
        )


@dataclass(frozen=True)
class _HeadIntervention(Intervention):
    """An intervention on query head ``head`` of block ``layer``."""

    layer: int
    head: int

    def __post_init__(self) -> None:
        convert(self)  # the fields made with converted(), in every subclass
        Site("z", self.layer, self.head)  # validates layer and head


@dataclass(frozen=True)
class _HeadAblation(_HeadIntervention):
    """Head output ``z`` replaced at ``positions`` (None = all), in the clean run.

    Subclasses declare ``positions`` as their last field (so that positional arguments
    keep the order layer, head, options..., positions).
    """

    family = "ablation"

    def edits(self) -> tuple[Site, ...]:
        return (Site("z", self.layer, self.head, self.positions),)


@register("zero_ablation")
@dataclass(frozen=True)
class ZeroAblation(_HeadAblation):
    """Head output ``z`` set to zero, in the clean run.

    Attributes:
        layer, head: the query head.
        positions: query positions to ablate; None = all positions.
    """

    positions: tuple[int, ...] | None = converted(as_site_positions, default=None)

    def edit(self, site: Site, activation: torch.Tensor, context: EditContext) -> torch.Tensor:
        activation[:, position_index(self.positions)] = 0
        return activation

    def describe(self, task: TokenizedPairs | None = None) -> str:
        where = at_positions(self.positions)
        return f"{head_label(self.layer, self.head)} output (z) set to zero {where}"


@register("mean_ablation")
@dataclass(frozen=True)
class MeanAblation(_HeadAblation):
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

    reference: Source = "clean"
    pooled: bool = False
    positions: tuple[int, ...] | None = converted(as_site_positions, default=None)

    def __post_init__(self) -> None:
        super().__post_init__()
        check_source(self.reference, "reference")

    def reads(self) -> tuple[Read, ...]:
        return (Read(self.reference, Site("z", self.layer, self.head)),)

    def check(self, cfg: Any, n_positions: int) -> None:
        super().check(cfg, n_positions)
        if not self.pooled:
            _check_reference_length(self.reference, n_positions, "MeanAblation")

    def edit(self, site: Site, activation: torch.Tensor, context: EditContext) -> torch.Tensor:
        source = context.read(self.reference, site)
        mean = masked_mean(source, context.source_mask(self.reference), self.pooled)
        index = position_index(self.positions)
        activation[:, index] = mean if self.pooled else mean[index]
        return activation

    def describe(self, task: TokenizedPairs | None = None) -> str:
        where = "pooled over all real positions" if self.pooled else "at the same position"
        return (
            f"{head_label(self.layer, self.head)} output (z) replaced by its mean over "
            f"{prompts_of(self.reference, task)} {where}, {at_positions(self.positions)}"
        )


@register("resample_ablation")
@dataclass(frozen=True)
class ResampleAblation(_HeadAblation):
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

    source: Source = "corrupted"
    seed: int = 0
    positions: tuple[int, ...] | None = converted(as_site_positions, default=None)

    def __post_init__(self) -> None:
        super().__post_init__()
        check_source(self.source, "source")

    def reads(self) -> tuple[Read, ...]:
        return (Read(self.source, Site("z", self.layer, self.head)),)

    def check(self, cfg: Any, n_positions: int) -> None:
        super().check(cfg, n_positions)
        _check_reference_length(self.source, n_positions, "ResampleAblation")

    def edit(self, site: Site, activation: torch.Tensor, context: EditContext) -> torch.Tensor:
        source = context.read(self.source, site)
        name = self.source.name if isinstance(self.source, ReferenceSet) else self.source
        index = resample_index(
            self.seed, context.mask, context.source_mask(self.source), repr(name)
        )
        positions = position_index(self.positions)
        activation[:, positions] = source[index.to(source.device)][:, positions]
        return activation

    def describe(self, task: TokenizedPairs | None = None) -> str:
        return (
            f"{head_label(self.layer, self.head)} output (z) resampled from "
            f"{prompts_of(self.source, task)} (seed {self.seed}), same position, "
            f"{at_positions(self.positions)}"
        )


BASELINES: tuple[str, ...] = ("zero", "mean", "resample")
"""Ablation baselines by name: zero, mean over the clean prompts (same position), resample
from the corrupted prompts (seeded)."""


def head_ablation(baseline: str, layer: int, head: int, seed: int = 0) -> Intervention:
    """The ablation of head ``(layer, head)`` with ``baseline`` (one of :data:`BASELINES`)."""
    if baseline == "zero":
        return ZeroAblation(layer, head)
    if baseline == "mean":
        return MeanAblation(layer, head, reference="clean")
    if baseline == "resample":
        return ResampleAblation(layer, head, source="corrupted", seed=seed)
    raise IntervError(f"unknown baseline {baseline!r}; choose one of {BASELINES}")


@register("pair_ablation")
@dataclass(frozen=True)
class PairAblation(Intervention):
    """Two heads ablated together with the same baseline, in the clean run.

    The fourth run of a pairwise design (none, A, B, both): with the single ablations
    ``f(A)``, ``f(B)`` and the clean ``f(none)``, the interaction term is
    ``f(AB) - f(A) - f(B) + f(none)`` (:mod:`interv.analysis.pairwise`).

    Attributes:
        layer, head: the first head.
        other_layer, other_head: the second head (a different one).
        baseline: one of :data:`BASELINES`.
        seed: seed of the resample draw.
    """

    layer: int
    head: int
    other_layer: int
    other_head: int
    baseline: str = "mean"
    seed: int = 0
    family = "interaction"

    def __post_init__(self) -> None:
        if (self.layer, self.head) == (self.other_layer, self.other_head):
            raise IntervError(
                f"a pair ablation needs two different heads; got "
                f"{head_label(self.layer, self.head)} twice"
            )
        for part in self.parts:  # validates the heads and the baseline
            Site("z", part.layer, part.head)

    @property
    def parts(self) -> tuple[Intervention, Intervention]:
        """The two single ablations."""
        return (
            head_ablation(self.baseline, self.layer, self.head, self.seed),
            head_ablation(self.baseline, self.other_layer, self.other_head, self.seed),
        )

    @property
    def site(self) -> None:
        return None

    def edits(self) -> tuple[Site, ...]:
        return tuple(site for part in self.parts for site in part.edits())

    def reads(self) -> tuple[Read, ...]:
        return tuple(dict.fromkeys(read for part in self.parts for read in part.reads()))

    def check(self, cfg: Any, n_positions: int) -> None:
        for part in self.parts:
            part.check(cfg, n_positions)

    def edit(self, site: Site, activation: torch.Tensor, context: EditContext) -> torch.Tensor:
        part = next(part for part in self.parts if site in part.edits())
        return part.edit(site, activation, context)

    def describe(self, task: TokenizedPairs | None = None) -> str:
        first, second = (part.describe(task) for part in self.parts)
        return f"pair ablation: {first}; and, in the same forward, {second}"


@register("noise", fixed={"direction": "noise"}, defaults={"component": "z"})
@register("denoise", fixed={"direction": "denoise"}, defaults={"component": "z"})
@register("activation_patch", defaults={"component": "z"})
@dataclass(frozen=True)
class ActivationPatch(Patching, Intervention):
    """One component's activation copied from the other run of each pair.

    ``"denoise"``: clean activation into the corrupted run (is it sufficient to restore
    the clean behaviour?). ``"noise"``: corrupted activation into the clean run (is it
    necessary for it?). Pair ``i`` always receives pair ``i``'s activation.

    Attributes:
        component: one of :data:`PATCH_COMPONENTS`.
        layer: the block.
        head: the query head; required for ``"z"``, forbidden otherwise.
        direction: ``"denoise"`` or ``"noise"``.
        positions: positions to patch; None = all positions.
    """

    component: str
    layer: int
    head: int | None = None
    direction: str = "denoise"
    positions: tuple[int, ...] | None = converted(as_site_positions, default=None)
    family = "patch"
    reports_recovery = True

    def __post_init__(self) -> None:
        convert(self)
        _check_choice(self.component, PATCH_COMPONENTS, "component")
        patch_runs(self.direction)
        if (self.component in HEAD_COMPONENTS) != (self.head is not None):
            raise IntervError(
                f"component {self.component!r} "
                + (
                    "needs a head (head=None given)"
                    if self.component in HEAD_COMPONENTS
                    else f"has no head axis; got head={self.head}. Heads apply only to "
                    f"{HEAD_COMPONENTS}; other components: {RESIDUAL_COMPONENTS}"
                )
            )
        Site(self.component, self.layer, self.head)  # validates layer and head

    def edits(self) -> tuple[Site, ...]:
        return (Site(self.component, self.layer, self.head, self.positions),)

    def reads(self) -> tuple[Read, ...]:
        return (Read(self.source_run, Site(self.component, self.layer, self.head)),)

    def edit(self, site: Site, activation: torch.Tensor, context: EditContext) -> torch.Tensor:
        index = position_index(self.positions)
        activation[:, index] = context.read(self.source_run, site)[:, index]
        return activation

    def describe(self, task: TokenizedPairs | None = None) -> str:
        what = Site(self.component, self.layer, self.head).phrase
        return (
            f"{self.direction_noun}: {what} from the {self.source_run} run "
            f"patched into the {self.base_run} run {at_positions(self.positions)} "
            f"({self.question()})"
        )


@dataclass(frozen=True)
class _ZLevelEdit(_HeadIntervention):
    """An edit of one head's ``(A, V)``, written as ``z_h <- z_h + A'V' - AV``.

    Subclasses define :meth:`edit_pattern_values`. Several z-level edits of the same
    head in one forward (parts of a :class:`Combined`) compose on ``(A, V)`` in order:
    each writes the difference from the previous part's ``(A', V')``, so the sum
    telescopes to ``A_last V_last - A V``.
    """

    def edits(self) -> tuple[Site, ...]:
        return (Site("z", self.layer, self.head),)

    def observes(self) -> tuple[Site, ...]:
        return (Site("pattern", self.layer, self.head), Site("v", self.layer, self.head))

    def edit_pattern_values(
        self, pattern: torch.Tensor, values: torch.Tensor, context: EditContext
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """The edited ``(A' [n, query, key], V' [n, key, d_head])``; inputs stay unchanged."""
        raise NotImplementedError

    def edit(self, site: Site, activation: torch.Tensor, context: EditContext) -> torch.Tensor:
        key = ("z-level", self.layer, self.head)
        pattern, values = context.state.get(
            key,
            (
                context.observed(Site("pattern", self.layer, self.head)),
                context.observed(Site("v", self.layer, self.head)),
            ),
        )
        new_pattern, new_values = self.edit_pattern_values(pattern, values, context)
        context.state[key] = (new_pattern, new_values)
        delta = torch.einsum("bqk,bkd->bqd", new_pattern, new_values) - torch.einsum(
            "bqk,bkd->bqd", pattern, values
        )
        return activation + delta.to(activation.dtype)


@dataclass(frozen=True)
class _KeyEdit(_ZLevelEdit):
    """A z-level edit at chosen key positions (default ``(0,)``: the first token, the sink)."""

    key_positions: tuple[int, ...] = converted(as_positions, default=(0,))

    def check(self, cfg: Any, n_positions: int) -> None:
        super().check(cfg, n_positions)
        check_positions(self.key_positions, n_positions, "key position")

    def prompt_positions(self) -> tuple[tuple[str, tuple[int, ...] | None, bool], ...]:
        return (*super().prompt_positions(), ("key position", self.key_positions, False))


@register("value_scale")
@dataclass(frozen=True)
class ValueScale(_KeyEdit):
    """Value vectors read by one query head at chosen key positions scaled, in the clean run.

    Computed at the z level: ``z_h <- z_h + A_h (V' - V)`` with ``V'`` the head's value
    vectors with rows ``key_positions`` multiplied by ``factor``. ``factor=0`` zeroes
    them; ``factor=1`` is the identity.

    Attributes:
        layer, head: the query head.
        key_positions: key positions whose value vectors are scaled (default ``(0,)``,
            the sink).
        factor: the multiplier (dimensionless, finite).
    """

    factor: float = converted(as_finite, default=0.0)
    family = "value"

    def edit_pattern_values(
        self, pattern: torch.Tensor, values: torch.Tensor, context: EditContext
    ) -> tuple[torch.Tensor, torch.Tensor]:
        keys = list(self.key_positions)
        values = values.clone()
        values[:, keys] = values[:, keys] * self.factor
        return pattern, values

    def describe(self, task: TokenizedPairs | None = None) -> str:
        verb = "set to zero" if self.factor == 0 else f"scaled by {self.factor}"
        return (
            f"{head_label(self.layer, self.head)} value vectors {_at_keys(self.key_positions)} "
            f"{verb}, {_SHARED}"
        )


@register("value_replace")
@dataclass(frozen=True)
class ValueReplace(_KeyEdit):
    """Value vectors read by one query head at chosen key positions taken from another run.

    Computed at the z level: ``z_h <- z_h + A_h (V' - V)``, ``V'`` = the head's values
    with rows ``key_positions`` taken from the same pair's ``source`` run.

    Attributes:
        layer, head: the query head.
        key_positions: key positions whose value vectors are replaced (default ``(0,)``).
        source: ``"corrupted"`` or ``"clean"`` (the same pair's other run).
    """

    source: str = "corrupted"
    family = "value"

    def __post_init__(self) -> None:
        super().__post_init__()
        _check_choice(self.source, RUNS, "source")

    def reads(self) -> tuple[Read, ...]:
        return (Read(self.source, Site("v", self.layer, self.head)),)

    def edit_pattern_values(
        self, pattern: torch.Tensor, values: torch.Tensor, context: EditContext
    ) -> tuple[torch.Tensor, torch.Tensor]:
        keys = list(self.key_positions)
        source = context.read(self.source, Site("v", self.layer, self.head))
        values = values.clone()
        values[:, keys] = source[:, keys].to(values)
        return pattern, values

    def describe(self, task: TokenizedPairs | None = None) -> str:
        return (
            f"{head_label(self.layer, self.head)} value vectors {_at_keys(self.key_positions)} "
            f"replaced by those of the {self.source} run of the same pair, {_SHARED}"
        )


@register("knockout")
@dataclass(frozen=True)
class AttentionKnockout(_KeyEdit):
    """One query head's attention to chosen keys removed and the rest renormalized.

    Computed at the z level from the head's pattern ``A``: ``A'`` = ``A`` with columns
    ``key_positions`` zeroed and each query row divided by its remaining mass;
    ``z_h <- z_h + (A' - A) V``. A query row with no remaining mass outputs zero.
    Knocking out no keys is the identity.

    Attributes:
        layer, head: the query head.
        key_positions: key positions knocked out (default ``(0,)``).
    """

    family = "routing"

    def edit_pattern_values(
        self, pattern: torch.Tensor, values: torch.Tensor, context: EditContext
    ) -> tuple[torch.Tensor, torch.Tensor]:
        pattern = pattern.clone()
        pattern[:, :, list(self.key_positions)] = 0
        remaining = pattern.sum(-1, keepdim=True)
        return torch.where(remaining > 0, pattern / remaining, torch.zeros_like(pattern)), values

    def describe(self, task: TokenizedPairs | None = None) -> str:
        return (
            f"{head_label(self.layer, self.head)} attention to "
            f"{_at_keys(self.key_positions).removeprefix('at ')} knocked out and each "
            f"query row renormalized over the remaining keys, {_SHARED}"
        )


@dataclass(frozen=True)
class _RoutingPatch(Patching, _ZLevelEdit):
    direction: str = "denoise"
    family = "routing"
    reports_recovery = True

    def __post_init__(self) -> None:
        super().__post_init__()
        patch_runs(self.direction)


@register("pattern_patch")
@dataclass(frozen=True)
class PatternPatch(_RoutingPatch):
    """Pattern-only patch: one head reads its own values with the other run's pattern.

    ``z_h = A_source V_own`` (where the head looks is patched, what it reads is not).
    Combined with :class:`ValuePatch` of the same head and direction it equals the
    full head-output patch ``z_h = A_source V_source``.
    """

    def reads(self) -> tuple[Read, ...]:
        return (Read(self.source_run, Site("pattern", self.layer, self.head)),)

    def edit_pattern_values(
        self, pattern: torch.Tensor, values: torch.Tensor, context: EditContext
    ) -> tuple[torch.Tensor, torch.Tensor]:
        source = context.read(self.source_run, Site("pattern", self.layer, self.head))
        return source.to(pattern), values

    def describe(self, task: TokenizedPairs | None = None) -> str:
        return (
            f"{self.direction_noun}: {head_label(self.layer, self.head)} attention "
            f"pattern from the {self.source_run} run with its own values in the "
            f"{self.base_run} run (pattern-only patch, z = A_{self.source_run} "
            f"V_{self.base_run}), {_SHARED}"
        )


@register("value_patch")
@dataclass(frozen=True)
class ValuePatch(_RoutingPatch):
    """Value-only patch: one head reads the other run's values with its own pattern.

    ``z_h = A_own V_source`` (what the head reads is patched, where it looks is not).
    """

    def reads(self) -> tuple[Read, ...]:
        return (Read(self.source_run, Site("v", self.layer, self.head)),)

    def edit_pattern_values(
        self, pattern: torch.Tensor, values: torch.Tensor, context: EditContext
    ) -> tuple[torch.Tensor, torch.Tensor]:
        source = context.read(self.source_run, Site("v", self.layer, self.head))
        return pattern, source.to(values)

    def describe(self, task: TokenizedPairs | None = None) -> str:
        return (
            f"{self.direction_noun}: {head_label(self.layer, self.head)} value "
            f"vectors from the {self.source_run} run read with its own pattern in the "
            f"{self.base_run} run (value-only patch, z = A_{self.base_run} "
            f"V_{self.source_run}), {_SHARED}"
        )


@register("combined")
@dataclass(frozen=True)
class Combined(Intervention):
    """Several interventions applied together in one forward, in the given order.

    All parts must modify the same base run. Parts that edit the same site apply one
    after the other (z-level edits of the same head compose on ``(A, V)``, e.g.
    :class:`PatternPatch` then :class:`ValuePatch` gives ``A_source V_source``).
    """

    parts: tuple[Intervention, ...] = converted(lambda parts, what: tuple(parts))
    family = "combined"

    def __post_init__(self) -> None:
        convert(self)
        parts = self.parts
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

    @property
    def base_run(self) -> str:
        return self.parts[0].base_run

    def edits(self) -> tuple[Site, ...]:
        return tuple(dict.fromkeys(site for part in self.parts for site in part.edits()))

    def reads(self) -> tuple[Read, ...]:
        return tuple(dict.fromkeys(read for part in self.parts for read in part.reads()))

    def observes(self) -> tuple[Site, ...]:
        return tuple(dict.fromkeys(site for part in self.parts for site in part.observes()))

    def prompt_positions(self) -> tuple[tuple[str, tuple[int, ...] | None, bool], ...]:
        return tuple(entry for part in self.parts for entry in part.prompt_positions())

    def for_model(self, model: Any) -> Combined:
        return Combined(tuple(part.for_model(model) for part in self.parts))

    def key_restrictions(self) -> tuple[KeyRestriction, ...]:
        """The parts' restrictions, where applying them inside the attention keeps the
        parts' order: none (the pattern path) when an earlier part rewrites the pattern or
        the head outputs of a layer a later part restricts (inside the attention, the
        restriction would come first)."""
        found: list[KeyRestriction] = []
        for index, part in enumerate(self.parts):
            own = part.key_restrictions()
            layers = {restriction.layer for restriction in own}
            earlier = {
                site.layer
                for before in self.parts[:index]
                for site in before.edits()
                if site.component in ("pattern", "z")
            }
            if layers & earlier:
                return ()
            found.extend(own)
        return tuple(found)

    def without_key_restrictions(self) -> Intervention | None:
        rest = [
            kept for part in self.parts if (kept := part.without_key_restrictions()) is not None
        ]
        if not rest:
            return None
        return rest[0] if len(rest) == 1 else Combined(tuple(rest))

    def check(self, cfg: Any, n_positions: int) -> None:
        for part in self.parts:
            part.check(cfg, n_positions)

    def edit(self, site: Site, activation: torch.Tensor, context: EditContext) -> torch.Tensor:
        for part in self.parts:
            if site in part.edits():
                activation = part.edit(site, activation, context)
        return activation

    def describe(self, task: TokenizedPairs | None = None) -> str:
        return "; and ".join(part.describe(task) for part in self.parts)
