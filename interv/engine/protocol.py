"""The intervention protocol: what every intervention declares, built-ins and yours alike.

>>> @interv.register("add_one")
... @dataclass(frozen=True)
... class AddOne(interv.Intervention):
...     layer: int
...     def edits(self):
...         return (interv.Site("resid_pre", self.layer),)
...     def edit(self, site, activation, context):
...         return activation + 1
...     def describe(self, task=None):
...         return f"1 added to every coordinate of the residual stream before block {self.layer}"

An intervention is a frozen dataclass (a value: printable, comparable, storable) that
subclasses :class:`Intervention` and declares:

- :meth:`~Intervention.edits`: the sites it writes (component, layer, maybe a head and
  positions). The earliest block among its sites is where an exact forward can start,
  so the runner's prefix reuse applies to it without further work.
- :meth:`~Intervention.edit`: how it writes one site, given that site's activation for
  *its own rows* of the stacked batch (head-sliced when the site names a head) and an
  :class:`EditContext`; it returns the new activation of the same shape.
- :meth:`~Intervention.describe`: its semantics in one plain sentence (required).
- optionally :meth:`~Intervention.reads`: activations it takes from other runs
  (``"clean"``, ``"corrupted"`` or a :class:`ReferenceSet`), captured once per run and
  handed over by :meth:`EditContext.read`; :meth:`~Intervention.observes`: activations of
  the same forward it needs before it writes (:meth:`EditContext.observed`);
  :attr:`~Intervention.base_run`: the run it modifies (default ``"clean"``);
  :meth:`~Intervention.check`: extra validation against the model and the prompts;
  :meth:`~Intervention.sweep_expansions`: how one sweep cell expands into several;
  :meth:`~Intervention.key_restrictions`: for an edit that only changes which keys a
  layer's heads attend to, the same edit as key restrictions, which a forward without the
  pattern applies inside the attention computation (:mod:`interv.engine.restrictions`).

Register a kind with :func:`register` to name it in TOML sweeps (the lookups, built-in
kinds included, are in :mod:`interv.engine.registry`); a sweep can also name an
unregistered class by its import path, ``"package.module:ClassName"``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

import torch

from interv.engine.restrictions import KeyRestriction
from interv.engine.sites import HEAD_COMPONENTS, Site, check_site, select_head
from interv.errors import IntervError

if TYPE_CHECKING:
    from interv.tasks.tokenized import TokenizedPairs

__all__ = [
    "DIRECTIONS",
    "RUNS",
    "SITE_FIELDS",
    "EditContext",
    "EditedRun",
    "Intervention",
    "Kind",
    "Patching",
    "Read",
    "ReferenceSet",
    "Source",
    "patch_runs",
    "register",
    "semantics",
]

RUNS: tuple[str, ...] = ("clean", "corrupted")
"""The two runs of a task that an intervention can modify or take activations from."""

DIRECTIONS: tuple[str, ...] = ("denoise", "noise")
"""Patching directions: ``"denoise"`` = clean into corrupted (is it sufficient?),
``"noise"`` = corrupted into clean (is it necessary?)."""

_PATCH_RUNS = {"denoise": ("clean", "corrupted"), "noise": ("corrupted", "clean")}


def patch_runs(direction: str) -> tuple[str, str]:
    """``(source run, base run)`` of a patching direction."""
    if direction not in _PATCH_RUNS:
        raise IntervError(f"unknown direction {direction!r}; choose one of {DIRECTIONS}")
    return _PATCH_RUNS[direction]


class Patching:
    """Mixin for kinds that move activations between the two runs of a task.

    The kind has a ``direction`` field (one of :data:`DIRECTIONS`); its base run is the
    one it patches into and :attr:`source_run` the one it takes from.
    """

    direction: str

    @property
    def source_run(self) -> str:
        """The run the patched activations come from."""
        return patch_runs(self.direction)[0]

    @property
    def base_run(self) -> str:
        return patch_runs(self.direction)[1]

    @property
    def direction_noun(self) -> str:
        """``"denoising"`` or ``"noising"``."""
        return "denoising" if self.direction == "denoise" else "noising"

    def question(self, subject: str = "it") -> str:
        """What the patch asks: "is it sufficient?" (denoise) or "is it necessary?"."""
        return f"is {subject} {'sufficient' if self.direction == 'denoise' else 'necessary'}?"


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


@dataclass(frozen=True)
class EditedRun:
    """The prompts of a run with an intervention applied: a source other interventions read.

    The engine runs it once per call (shared by every intervention that reads from an
    equal one), captures what is read from it, and stops after the latest such site.
    Path patching reads the receivers' inputs from the run in which only the sender
    changed and everything else stayed frozen.

    Attributes:
        intervention: applied to its own base run's prompts.
    """

    intervention: Intervention

    def __post_init__(self) -> None:
        if not isinstance(self.intervention, Intervention):
            raise IntervError(
                f"EditedRun needs an intervention; got {type(self.intervention).__name__}"
            )

    @property
    def run(self) -> str:
        """The run whose prompts it edits."""
        return self.intervention.base_run


Source = str | ReferenceSet | EditedRun
"""Where activations come from: ``"clean"``, ``"corrupted"``, a :class:`ReferenceSet` or
an :class:`EditedRun`."""


def check_source(source: object, what: str) -> None:
    """Raise :class:`IntervError` unless ``source`` is a run name, a :class:`ReferenceSet`
    or an :class:`EditedRun`."""
    if not isinstance(source, ReferenceSet | EditedRun) and source not in RUNS:
        raise IntervError(f"unknown {what} {source!r}; choose one of {RUNS} or a ReferenceSet")


@dataclass(frozen=True)
class Read:
    """An activation an intervention takes from another run: ``source`` at ``site``."""

    source: Source
    site: Site

    def __post_init__(self) -> None:
        check_source(self.source, "read source")


@dataclass(eq=False)
class EditContext:
    """What an intervention's :meth:`~Intervention.edit` can see, for its own rows.

    Attributes:
        model: the model, for its weights and config (``model.blocks[L].attn.W_O``,
            ``model.cfg.d_model``...); an edit must not run it.
        mask: ``[n, pos]`` bool, the real tokens of the base run's prompts (its rows).
        task: the prompt pairs, when the forward runs on a task; else None.
        state: a scratch dict shared by the sites (and the parts of a
            :class:`~interv.engine.interventions.Combined`) of one intervention within
            one forward.
    """

    model: Any
    mask: torch.Tensor
    task: TokenizedPairs | None
    captured: Mapping[tuple[Source, Site], torch.Tensor]
    source_masks: Mapping[Source, torch.Tensor]
    observed_values: dict[Site, torch.Tensor] = field(default_factory=dict)
    state: dict[Any, Any] = field(default_factory=dict)

    @property
    def cfg(self) -> Any:
        """The model's config (``n_layers``, ``n_heads``, ``d_head``, ``d_model``...)."""
        return self.model.cfg

    def read(self, source: Source, site: Site) -> torch.Tensor:
        """``source``'s activation at ``site`` (all positions; head-sliced), ``[n_source, ...]``.

        The site must be among the intervention's :meth:`~Intervention.reads`.
        """
        key = (source, site.without_positions())
        if key not in self.captured:
            raise IntervError(
                f"{site.label} of the {_source_name(source)} run was not captured; declare "
                "Read(source, site) in the intervention's reads()"
            )
        return select_head(self.captured[key], site, self.cfg)

    def observed(self, site: Site) -> torch.Tensor:
        """This forward's activation at ``site`` for these rows (head-sliced), ``[n, ...]``.

        The site must be among the intervention's :meth:`~Intervention.observes` and fire
        before the site being edited.
        """
        key = site.without_positions()
        if key not in self.observed_values:
            raise IntervError(
                f"{site.label} was not observed before this edit; declare it in the "
                "intervention's observes() (and edit a site that comes later in the forward)"
            )
        return self.observed_values[key]

    def source_mask(self, source: Source) -> torch.Tensor:
        """``[n_source, pos]`` bool, the real tokens of ``source``'s prompts."""
        return self.source_masks[source]


def _source_name(source: Source) -> str:
    if isinstance(source, ReferenceSet):
        return f"reference set {source.name!r}"
    if isinstance(source, EditedRun):
        return f"edited {source.run}"
    return source


class Intervention:
    """Base of every intervention: a frozen value that edits sites and states its meaning.

    Subclasses are frozen dataclasses. Required: :meth:`edits`, :meth:`edit`,
    :meth:`describe`. See the module docstring for the protocol.

    Class attributes:
        family: what kind of question the intervention asks (``"ablation"``,
            ``"patch"``, ``"value"``, ``"routing"``, ``"steering"``, ``"projection"``,
            ``"combined"`` or ``"other"``); reports use it to group and compare.
        reports_recovery: its results carry a normalized recovery (patches between
            the two runs of a task).
    """

    family: ClassVar[str] = "other"
    reports_recovery: ClassVar[bool] = False

    @property
    def base_run(self) -> str:
        """The run this intervention modifies: ``"clean"`` (default) or ``"corrupted"``."""
        return "clean"

    def edits(self) -> tuple[Site, ...]:
        """The sites this intervention writes."""
        raise NotImplementedError(f"{type(self).__name__} must define edits()")

    def reads(self) -> tuple[Read, ...]:
        """Activations from other runs it needs (default: none)."""
        return ()

    def observes(self) -> tuple[Site, ...]:
        """Activations of the same forward it reads before writing (default: none)."""
        return ()

    def edit(self, site: Site, activation: torch.Tensor, context: EditContext) -> torch.Tensor:
        """The new activation at ``site`` for this intervention's rows.

        Args:
            site: one of :meth:`edits`.
            activation: ``[n, ...]``, the activation of this intervention's rows at
                ``site``, all positions; for a site that names a head, only that head's
                slice (``[n, pos, d_head]``; ``[n, query_pos, key_pos]`` for a pattern).
                It may be modified in place.
            context: what else the edit may use (captured and observed activations,
                masks, the task).

        Returns:
            A tensor of the same shape (cast to the activation's dtype by the engine).
        """
        raise NotImplementedError(f"{type(self).__name__} must define edit()")

    def describe(self, task: TokenizedPairs | None = None) -> str:
        """One plain sentence stating the intervention's semantics (required).

        With ``task``, run and reference sets can be named with their size and the
        task's name.
        """
        raise NotImplementedError(f"{type(self).__name__} must define describe()")

    def key_restrictions(self) -> tuple[KeyRestriction, ...]:
        """This intervention's edit as key restrictions (default: none).

        An intervention whose edit only changes which keys some heads attend to (the mask
        before the softmax) declares it here too. A forward that computes attention without
        the pattern (:mod:`interv.engine.rows`) then applies the restrictions inside each
        layer's attention and installs none of this intervention's hooks; a forward with the
        model's own attention runs :meth:`edit` at the sites of :meth:`edits` as usual. Both
        must mean the same masked softmax (a test's business: the pattern path is the
        reference).
        """
        return ()

    def without_key_restrictions(self) -> Intervention | None:
        """What this intervention still edits at its sites when its
        :meth:`key_restrictions` are applied inside the attention: None (default: nothing,
        when it declares any; itself otherwise)."""
        return None if self.key_restrictions() else self

    def for_model(self, model: Any) -> Intervention:
        """This intervention as it applies to ``model`` (default: itself, unchanged).

        Entry points that run interventions on a model (:func:`interv.run`,
        :func:`interv.analysis.text_loss`) call it first and use what it returns, in the
        run and in the result's sentences. Override where the meaning depends on what the
        model itself computes (a mask edit composed with the model's own sliding window
        says so in its sentence), or to refuse in one line a model it cannot edit exactly.
        Never changes ``self``.
        """
        return self

    def check(self, cfg: Any, n_positions: int) -> None:
        """Raise :class:`IntervError` unless the intervention fits the model and prompts.

        The default checks every edited, observed and read site (layer, head, component
        and positions against ``cfg`` and the prompts' padded length ``n_positions``).
        Override to add checks; call ``super().check(cfg, n_positions)``.
        """
        for site in (*self.edits(), *self.observes(), *(read.site for read in self.reads())):
            check_site(cfg, site, n_positions)

    def prompt_positions(self) -> tuple[tuple[str, tuple[int, ...] | None, bool], ...]:
        """The positions this intervention applies to, as ``(what, positions,
        from_first_real)``: each must be a real token of every prompt (the runner checks them
        with :func:`~interv.engine.sites.check_prompt_positions`). The default: the
        positions of its edited and observed sites, in the padded tensor. Override (calling
        ``super()``) to add positions held in other fields, e.g. key positions.
        """
        return tuple(
            ("position", site.positions, False) for site in (*self.edits(), *self.observes())
        )

    @property
    def site(self) -> Site | None:
        """The site results and reports file this intervention under.

        Default: its single edited site; for several, the one they share when they differ
        only by positions; else None (not one site).
        """
        sites = {site.without_positions() for site in self.edits()}
        if len(sites) != 1:
            return None
        edits = self.edits()
        return edits[0] if len(edits) == 1 else sites.pop()

    @classmethod
    def sweep_expansions(
        cls, options: Mapping[str, Any], *, layer: int, head: int | None, cfg: Any
    ) -> Iterator[dict[str, Any]]:
        """The option sets one sweep cell (``layer``, ``head``) stands for (default: itself).

        Override to turn a special option value into several cells (e.g.
        :class:`~interv.engine.paths.PathPatch`'s ``receivers = "each_later_head"``); with
        ``cfg=None`` (validation before any model is loaded) yield one representative.
        """
        yield dict(options)

    @property
    def start_layer(self) -> int | None:
        """The earliest block this intervention edits or observes (prefix reuse starts there);
        None when it touches only sites after the last block."""
        layers = [s.layer for s in (*self.edits(), *self.observes()) if s.layer is not None]
        return min(layers, default=None)


def semantics(intervention: Intervention, task: TokenizedPairs | None = None) -> str:
    """The intervention's semantics sentence, or :class:`IntervError` if it has none."""
    if not isinstance(intervention, Intervention):
        raise IntervError(
            f"interventions must be interv.Intervention values; got {type(intervention).__name__} "
            f"({intervention!r})"
        )
    try:
        sentence = intervention.describe(task)
    except NotImplementedError:
        sentence = None
    if not isinstance(sentence, str) or not sentence.strip():
        raise IntervError(
            f"intervention {type(intervention).__name__} has no semantics sentence (describe() "
            f"returned {sentence!r}); every intervention must state what it does in one "
            "sentence, e.g. 'L1H2 output (z) set to zero at all positions'"
        )
    return sentence


# --- the registry: kind name -> class ----------------------------------------------------


@dataclass(frozen=True)
class Kind:
    """A registered intervention kind.

    Attributes:
        name: the kind's name (``"zero_ablation"``), as TOML sweeps write it.
        cls: the intervention class.
        fixed: field values the kind fixes (e.g. ``{"direction": "denoise"}`` for the
            ``"denoise"`` kind of :class:`~interv.engine.interventions.ActivationPatch`).
        defaults: defaults a sweep config uses for fields the class requires (e.g.
            ``{"component": "z"}`` for the patch kinds).
    """

    name: str
    cls: type[Intervention]
    fixed: Mapping[str, Any] = field(default_factory=dict)
    defaults: Mapping[str, Any] = field(default_factory=dict)

    @property
    def fields(self) -> dict[str, dataclasses.Field]:
        """The class's dataclass fields, by name."""
        return {spec.name: spec for spec in dataclasses.fields(self.cls)}

    @property
    def options(self) -> tuple[str, ...]:
        """The fields a sweep entry sets: all but :data:`SITE_FIELDS` and the fixed ones."""
        return tuple(n for n in self.fields if n not in SITE_FIELDS and n not in self.fixed)

    def takes_head(self, options: Mapping[str, Any]) -> bool:
        """Whether the kind with ``options`` is swept over heads, read from its fields.

        A required ``head`` field: yes; no ``head`` field: no; an optional one (e.g.
        :class:`~interv.engine.interventions.ActivationPatch`): yes unless the entry's
        ``component`` has no head axis (a residual-stream component).
        """
        head = self.fields.get("head")
        if head is None:
            return False
        if head.default is dataclasses.MISSING and head.default_factory is dataclasses.MISSING:
            return True
        component = self.fixed.get("component", options.get("component"))
        return component is None or component in HEAD_COMPONENTS

    def expand(
        self, options: Mapping[str, Any], *, layer: int, head: int | None, cfg: Any
    ) -> list[dict[str, Any]]:
        """The option sets one sweep cell stands for (:meth:`Intervention.sweep_expansions`)."""
        return list(self.cls.sweep_expansions(options, layer=layer, head=head, cfg=cfg))

    def build(self, **values: Any) -> Intervention:
        """An instance of the kind with ``values`` and the fixed fields."""
        return self.cls(**{**values, **self.fixed})

    def at(
        self, options: Mapping[str, Any], *, layer: int, head: int | None = None
    ) -> Intervention:
        """An instance at ``layer`` (and ``head``) with a sweep entry's ``options``.

        ``options`` may hold ``kind`` and ``sites`` (ignored); ``positions``, when present,
        must already be concrete (not ``"each"``).
        """
        values = {key: value for key, value in options.items() if key not in ("kind", "sites")}
        sites: dict[str, Any] = {"layer": layer} if head is None else {"layer": layer, "head": head}
        try:
            return self.build(**sites, **values)
        except TypeError as error:  # a user class whose __init__ disagrees with its fields
            raise IntervError(
                f"kind {self.name!r} cannot be built from {values}: {error}"
            ) from error


SITE_FIELDS: tuple[str, ...] = ("layer", "head")
"""Fields of an intervention class that a sweep fills from its ``sites``."""

_KINDS: dict[str, Kind] = {}


def register(
    name: str,
    *,
    fixed: Mapping[str, Any] | None = None,
    defaults: Mapping[str, Any] | None = None,
) -> Callable[[type], type]:
    """Class decorator: register an intervention class as kind ``name``.

    The class must be a frozen dataclass subclassing :class:`Intervention` with its own
    :meth:`~Intervention.edits`, :meth:`~Intervention.edit` and
    :meth:`~Intervention.describe`. ``fixed`` pins field values for this kind name (one
    class can be registered under several names); ``defaults`` gives sweep configs a
    default for fields the class requires.

    Raises:
        IntervError: the class breaks the protocol, or ``name`` is taken by another class.
    """

    def decorate(cls: type) -> type:
        _check_kind_class(cls, name)
        kind = Kind(name, cls, dict(fixed or {}), dict(defaults or {}))
        known = _KINDS.get(name)
        if known is not None and (known.cls.__qualname__, known.cls.__module__) != (
            cls.__qualname__,
            cls.__module__,
        ):
            raise IntervError(
                f"intervention kind {name!r} is already registered for "
                f"{known.cls.__module__}.{known.cls.__qualname__}; choose another name"
            )
        _KINDS[name] = kind
        return cls

    return decorate


def _check_kind_class(cls: type, name: str) -> None:
    if not (isinstance(cls, type) and issubclass(cls, Intervention)):
        raise IntervError(f"kind {name!r}: {cls!r} is not a subclass of interv.Intervention")
    if not dataclasses.is_dataclass(cls) or not cls.__dataclass_params__.frozen:
        raise IntervError(
            f"kind {name!r}: {cls.__name__} must be a frozen dataclass "
            "(@dataclass(frozen=True)), so that its values can be stored and compared"
        )
    for method in ("edits", "edit", "describe"):
        if getattr(cls, method) is getattr(Intervention, method):
            raise IntervError(
                f"kind {name!r}: {cls.__name__} does not define {method}()"
                + (
                    "; every intervention must state its semantics in one sentence"
                    if method == "describe"
                    else ""
                )
            )
