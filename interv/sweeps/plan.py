"""Planning a sweep: sites expanded into interventions, chunked into work units, sharded.

A sweep's interventions are the config's ``[[sweep.interventions]]`` entries expanded
over their sites, in a fixed order (entry, then layer, then head, then position). The
list is cut into consecutive *work units* of ``unit_size`` interventions; unit ``k``
has the id ``u{k:05d}`` (``u00017``). The unit is the grain of everything that makes
a sweep safe to interrupt and to spread: a unit's result is computed by one call of
:func:`interv.engine.runner.run`, written as one record, skipped on resume when its id
is already stored, and assigned to one shard.

Sharding ``i/n`` (``0 <= i < n``) takes the units whose index ``k`` has ``k % n == i``;
the ``n`` shards of a sweep are disjoint and together cover every unit.

Expansion needs the model's config (number of layers and heads) and the task's
padded length (``positions = "each"``); it is deterministic given those and the
validated :class:`~interv.sweeps.config.SweepConfig`.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from interv.engine.protocol import Intervention
from interv.engine.registry import get_kind
from interv.engine.results import intervention_params
from interv.errors import IntervError
from interv.sweeps.config import SweepConfig

__all__ = ["Shard", "WorkUnit", "expand_entries", "expand_interventions", "plan_units", "unit_id"]


def unit_id(index: int) -> str:
    """The id of work unit ``index``: ``"u"`` and five digits, e.g. ``unit_id(17) == "u00017"``."""
    return f"u{index:05d}"


@dataclass(frozen=True)
class WorkUnit:
    """Consecutive interventions of a sweep, computed and stored together.

    Attributes:
        index: position of the unit in the sweep (0-based).
        start: index of its first intervention in the sweep's intervention list.
        interventions: its interventions, in sweep order.
    """

    index: int
    start: int
    interventions: tuple[Intervention, ...]

    @property
    def id(self) -> str:
        """The unit's id, :func:`unit_id` of its index."""
        return unit_id(self.index)


@dataclass(frozen=True)
class Shard:
    """Share ``index`` of ``count`` of a sweep's work units (units with ``k % count == index``)."""

    index: int
    count: int

    def __post_init__(self) -> None:
        for name in ("index", "count"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int):
                raise IntervError(f"shard {name} must be an integer; got {value!r}")
        if self.count < 1 or not 0 <= self.index < self.count:
            raise IntervError(
                f"shard {self.index}/{self.count} does not exist; a sweep split into n >= 1 "
                f"shards has shards 0/n..(n-1)/n"
            )

    @classmethod
    def parse(cls, text: str) -> Shard:
        """Parse ``"i/n"`` (e.g. ``"0/4"``)."""
        parts = text.split("/")
        if len(parts) != 2 or not all(part.strip().isdigit() for part in parts):
            raise IntervError(f"shard must be written i/n with integers 0 <= i < n; got {text!r}")
        return cls(int(parts[0]), int(parts[1]))

    def __str__(self) -> str:
        return f"{self.index}/{self.count}"

    def owns(self, unit_index: int) -> bool:
        """True when unit ``unit_index`` belongs to this shard."""
        return unit_index % self.count == self.index


def plan_units(interventions: Sequence[Intervention], unit_size: int) -> tuple[WorkUnit, ...]:
    """Cut ``interventions`` into consecutive units of ``unit_size`` (the last may be shorter)."""
    if isinstance(unit_size, bool) or not isinstance(unit_size, int) or unit_size < 1:
        raise IntervError(f"unit_size must be an integer >= 1; got {unit_size!r}")
    return tuple(
        WorkUnit(
            index=k, start=start, interventions=tuple(interventions[start : start + unit_size])
        )
        for k, start in enumerate(range(0, len(interventions), unit_size))
    )


def expand_interventions(
    config: SweepConfig,
    model_cfg: Any,
    n_positions: int,
    each: Sequence[int] | None = None,
) -> tuple[Intervention, ...]:
    """Every intervention of the sweep, in order (entry, layer, head, position).

    Args:
        config: the validated sweep config.
        model_cfg: the loaded model's config (``model.cfg``: ``n_layers``, ``n_heads``).
        n_positions: the task's padded length in tokens (for range checks).
        each: the positions ``positions = "each"`` stands for: the positions that are a
            real token of every prompt (:attr:`TokenizedPairs.shared_positions`); None =
            ``0..n_positions - 1``.

    Raises:
        IntervError: a layer, head or position outside the model or the task, with the
            entry's key path and the valid range.
    """
    entries = expand_entries(config, model_cfg, n_positions, each)
    return tuple(iv for entry in entries for iv in entry)


def expand_entries(
    config: SweepConfig, model_cfg: Any, n_positions: int, each: Sequence[int] | None = None
) -> tuple[tuple[Intervention, ...], ...]:
    """The interventions of each ``[[sweep.interventions]]`` entry (see
    :func:`expand_interventions`, which concatenates them)."""
    expanded: list[tuple[Intervention, ...]] = []
    for i, entry in enumerate(config.sweep["interventions"]):
        path = f"sweep.interventions[{i}]"
        try:
            cells = _expand_entry(entry, model_cfg, n_positions, config.allowed_imports, each)
            expanded.append(tuple(cells))
        except IntervError as error:
            raise IntervError(f"{path} (kind {entry['kind']!r}): {error}") from error
    _refuse_duplicates(expanded)
    return tuple(expanded)


def _refuse_duplicates(expanded: Sequence[tuple[Intervention, ...]]) -> None:
    """Refuse an intervention that two cells of the sweep expand to: it would be measured
    twice and count twice in a report's agreement and rankings."""
    seen: dict[str, tuple[int, Intervention]] = {}
    for i, cells in enumerate(expanded):
        for intervention in cells:
            key = json.dumps(intervention_params(intervention), sort_keys=True, default=repr)
            if key in seen:
                j, _ = seen[key]
                raise IntervError(
                    f"sweep.interventions[{j}] and sweep.interventions[{i}] both hold "
                    f"{intervention.describe()!r}; a sweep measures each intervention once "
                    "(remove it from one entry, e.g. with sites = {layers = [...]})"
                )
            seen[key] = (i, intervention)


def _expand_entry(
    entry: Mapping[str, Any],
    model_cfg: Any,
    n_positions: int,
    allow_import: Sequence[str],
    each: Sequence[int] | None,
) -> Iterator[Intervention]:
    kind = get_kind(entry["kind"], allow_import=allow_import)
    positions = entry.get("positions")
    concrete = None if positions == "each" else positions
    per_head = kind.takes_head(entry)
    sites = entry["sites"]
    every = not isinstance(sites, Mapping)
    layers = range(model_cfg.n_layers) if every or "layers" not in sites else sites["layers"]
    heads = range(model_cfg.n_heads) if every or "heads" not in sites else sites["heads"]
    every_position = range(n_positions) if each is None else each
    choices = [[p] for p in every_position] if positions == "each" else [concrete]
    for layer in layers:
        for head in heads if per_head else (None,):
            for chosen in choices:
                options = {**entry, "positions": chosen} if "positions" in entry else entry
                for expanded in kind.expand(options, layer=layer, head=head, cfg=model_cfg):
                    intervention = kind.at(expanded, layer=layer, head=head)
                    intervention.check(model_cfg, n_positions)
                    yield intervention
