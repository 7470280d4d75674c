"""Sweep configs: a TOML file that names everything a sweep computes, validated up front.

A sweep config names the model, the task (built-in or a JSONL file), the
interventions with their sites, the target metric, the seed and the batch sizes::

    [model]
    spec = "induction-2l"            # anything interv.load_model accepts

    [task]
    name = "induction"               # a built-in task, or: path = "pairs.jsonl"
    n_pairs = 16
    seed = 0

    [sweep]
    metric = "logit_diff"
    batch_size = 32                  # most rows per intervened forward
    unit_size = 8                    # interventions per work unit (resume/shard grain)
    seed = 0                         # default seed of resample ablations

    [[sweep.interventions]]
    kind = "zero_ablation"
    sites = "all_heads"              # or {layers = [0, 1], heads = [0, 2]}

    [[sweep.interventions]]
    kind = "denoise"
    component = "resid_pre"
    sites = "all_layers"             # or {layers = [0]}
    positions = "each"               # one patch per position; or [3, 5]; default: all

Intervention kinds come from one registry (:func:`interv.engine.registry.kinds`): every
registered name (``zero_ablation``, ``mean_ablation``, ``resample_ablation``,
``activation_patch`` and its fixed-direction forms ``denoise`` / ``noise``,
``value_scale``, ``value_replace``, ``knockout``, ``pattern_patch``, ``value_patch``,
``add_vector``, ``project_out``, ``subspace_patch``, and any kind a user registered), or
a class named by its import path, ``kind = "my_package.kinds:MyIntervention"``: resolved
against the modules already imported, and imported only when the user allows the module
(``allow_import=`` here, ``--allow-import MODULE`` on the command line), never because a
file names it (:func:`interv.engine.registry.get_kind`). An
entry's other keys are the class's fields, with the class's defaults (or the kind's
sweep defaults, e.g. ``component = "z"`` for the patch kinds); ``layer`` and ``head``
come from ``sites``, and ``seed`` defaults to ``sweep.seed``.

``sites``: for a kind that takes a head (``head`` field, and an instance with a head is
valid): ``"all_heads"`` [default] or ``{layers = [...], heads = [...]}`` (an omitted key
means all); otherwise ``"all_layers"`` [default] or ``{layers = [...]}``. ``positions``
(kinds with a ``positions`` field): absent (the class's default, usually all positions at
once), a list (those positions at once) or ``"each"`` (one intervention per position that is a
real token of every prompt: a position that is padding in some prompt is left out, since
there it would average an exact no-effect into the mean).

:func:`parse_config` is pure: it checks every key and value before any model is
loaded, and an :class:`~interv.errors.IntervError` names the offending key path and
the allowed keys or values. Layer, head and position *ranges* depend on the model and
the task; they are checked when the sweep expands its sites against the loaded model
(:mod:`interv.sweeps.plan`), with the engine's messages.

``[sweep.screen]`` (or ``screen = true`` for the defaults) screens every entry instead of
running all its interventions exactly: each entry's sites are the candidates of one
:class:`~interv.audit.Screen`, whose fields are the table's keys, with its defaults and its
checks (``top_k``, ``audit``, ``alpha`` (``false``: one look), ``budget``, ``step``,
``level``, ``seed`` [default ``sweep.seed``], ``bound``, ``estimator`` (``"attribution"``,
``"integrated"``, ``"gim"``, ``"hvp"``), ``steps`` (integrated gradients' points),
``hvp_steps`` (the multi-step HVP's segments); see :mod:`interv.engine.screening` and
:mod:`interv.sweeps.screened`). The estimator is part of the sweep's identity: a directory
screened with one estimator refuses a config that names another. Only screenable kinds are
accepted then (:data:`~interv.engine.screening.SCREENABLE_KINDS`)::

    [sweep.screen]
    top_k = 20
    audit = 60
    alpha = 0.05
    estimator = "hvp"        # default "attribution"
    hvp_steps = 1

The normalized config (:attr:`SweepConfig.normalized`, every default filled in) is
what the manifest stores and what :attr:`SweepConfig.config_hash` hashes, so two
configs that differ only in omitted defaults are the same sweep. A stored config is read
back as data by :func:`stored_config`, which looks up no kind and imports nothing.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import tomllib
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from interv._checks import as_finite, as_int, as_path, read_text
from interv.audit import Screen
from interv.engine.protocol import Intervention, Kind
from interv.engine.registry import get_kind, parse_import_path
from interv.engine.screening import check_screenable
from interv.engine.targets import METRICS
from interv.errors import IntervError

__all__ = [
    "SweepConfig",
    "config_diff",
    "load_config",
    "parse_config",
    "stored_config",
    "with_screen",
]

_TOP_KEYS = ("model", "task", "sweep")
_MODEL_DEFAULTS: dict[str, Any] = {"device": "cpu", "dtype": "float32"}
_TASK_BUILTIN_DEFAULTS: dict[str, Any] = {"n_pairs": 16, "seed": 0, "options": {}}
_TASK_COMMON_DEFAULTS: dict[str, Any] = {"prepend_bos": True, "padding_side": "right"}
_SWEEP_DEFAULTS: dict[str, Any] = {
    "metric": "logit_diff",
    "batch_size": 32,
    "unit_size": 8,
    "seed": 0,
    "recovery_atol": 1e-6,
}
_SWEEP_KEYS = (*_SWEEP_DEFAULTS, "interventions")
_HEAD_SITE_KEYS = ("layers", "heads")
_SCREEN_KEYS = tuple(f.name for f in dataclasses.fields(Screen))  # Screen's fields, no copy


@dataclass(frozen=True)
class SweepConfig:
    """A validated sweep config.

    Attributes:
        normalized: the config as plain TOML-like data with every default filled in
            (``{"model": {...}, "task": {...}, "sweep": {...}}``).
        base_dir: the folder a relative ``task.path`` is resolved against (the config
            file's folder; None = the working directory). Not part of the config's
            identity, so shards run from different folders still merge.
        allowed_imports: modules the user allowed interv to import for this config's
            kinds (``allow_import=``), and the modules of kinds it found already imported
            (so Ray workers, fresh processes, may import them); not part of the identity.
    """

    normalized: Mapping[str, Any]
    base_dir: str | None = field(default=None, compare=False)
    allowed_imports: tuple[str, ...] = field(default=(), compare=False)

    @property
    def config_hash(self) -> str:
        """First 16 hex digits of the SHA-256 of the canonical JSON of :attr:`normalized`."""
        canonical = json.dumps(self.normalized, sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(canonical.encode()).hexdigest()[:16]

    @property
    def task_path(self) -> Path | None:
        """The JSONL file of the task, resolved against :attr:`base_dir`; None for a built-in."""
        path = self.task.get("path")
        if path is None:
            return None
        return Path(self.base_dir or ".") / path

    @property
    def model(self) -> Mapping[str, Any]:
        """The ``[model]`` table."""
        return self.normalized["model"]

    @property
    def task(self) -> Mapping[str, Any]:
        """The ``[task]`` table."""
        return self.normalized["task"]

    @property
    def sweep(self) -> Mapping[str, Any]:
        """The ``[sweep]`` table (interventions included)."""
        return self.normalized["sweep"]

    @property
    def screen(self) -> Screen | None:
        """The ``[sweep.screen]`` table as a :class:`~interv.audit.Screen`; None: no screen."""
        table = self.sweep.get("screen")
        if table is None:
            return None
        values = dict(table)
        if values.get("alpha") is False:
            values["alpha"] = None
        return Screen(**values)


def load_config(
    path: str | Path,
    *,
    allow_import: Iterable[str] = (),
    on_import: Callable[[str], None] | None = None,
) -> SweepConfig:
    """Read and validate a TOML sweep config file (see the module docstring).

    A relative ``task.path`` is resolved against the config file's folder; a UTF-8
    byte-order mark at the start of the file is ignored. ``allow_import`` and
    ``on_import`` as in :func:`parse_config`.
    """
    path = as_path(path, "sweep config")
    try:
        raw = tomllib.loads(read_text(path, "sweep config"))
    except tomllib.TOMLDecodeError as error:
        raise IntervError(f"sweep config {str(path)!r} is not valid TOML: {error}") from None
    return parse_config(
        raw, base_dir=path.parent.resolve(), allow_import=allow_import, on_import=on_import
    )


def parse_config(
    raw: Mapping[str, Any],
    *,
    base_dir: str | Path | None = None,
    allow_import: Iterable[str] = (),
    on_import: Callable[[str], None] | None = None,
) -> SweepConfig:
    """Validate a sweep config given as nested dicts (the parsed TOML); pure, except that
    it imports the modules of ``kind = "module:Class"`` entries that ``allow_import``
    allows (and only those).

    Args:
        raw: the parsed TOML.
        base_dir: the folder a relative ``task.path`` is resolved against (None = the
            working directory).
        allow_import: modules (with their submodules) that kinds named by import path
            may be imported from; a path into any other module resolves only if the
            module is already imported (see :func:`interv.engine.registry.get_kind`).
        on_import: called with a module's name just before interv imports it (the command
            line prints it).

    Raises:
        IntervError: naming the offending key path (e.g. ``sweep.interventions[1].kind``)
            and the allowed keys or values.
    """
    _check_table(raw, "config", _TOP_KEYS, required=_TOP_KEYS)
    allowed = tuple(_module_names(allow_import))
    sweep = _parse_sweep(raw["sweep"], allowed, on_import)
    found = [
        parse_import_path(entry["kind"])[0]
        for entry in sweep["interventions"]
        if ":" in entry["kind"]
    ]
    return SweepConfig(
        normalized={
            "model": _parse_model(raw["model"]),
            "task": _parse_task(raw["task"]),
            "sweep": sweep,
        },
        base_dir=None if base_dir is None else str(base_dir),
        allowed_imports=tuple(dict.fromkeys([*allowed, *found])),
    )


def with_screen(config: SweepConfig, **overrides: Any) -> SweepConfig:
    """``config`` with its ``[sweep.screen]`` set: the stored keys (none if it had no
    screen), then ``overrides`` (any :class:`~interv.audit.Screen` field: ``top_k``,
    ``audit``, ``alpha`` (None: one look), ``budget``, ``step``, ``level``, ``seed``,
    ``bound``, ``estimator``, ``steps``, ``hvp_steps``; a None ``budget`` or ``step`` is
    dropped). Validated like a config file's table."""
    sweep = dict(config.normalized["sweep"])
    table = dict(sweep.get("screen", {}))
    for key, value in overrides.items():
        if key == "alpha":
            table[key] = False if value is None else value
        elif value is None and key in ("budget", "step"):
            table.pop(key, None)
        else:
            table[key] = value
    sweep["screen"] = table
    raw = {**config.normalized, "sweep": sweep}
    return parse_config(raw, base_dir=config.base_dir, allow_import=config.allowed_imports)


def _module_names(allow_import: Iterable[str]) -> list[str]:
    if isinstance(allow_import, str):
        allow_import = (allow_import,)
    names = []
    for name in allow_import:
        if not isinstance(name, str) or not all(part.isidentifier() for part in name.split(".")):
            raise IntervError(f"allow_import names modules ('package.module'); got {name!r}")
        names.append(name)
    return names


def stored_config(normalized: Any, config_hash: str | None = None) -> SweepConfig:
    """A config interv stored (a sweep manifest's), read as *data*.

    Its model and task tables are checked like a config file's; its interventions only
    for their shape (tables with a string ``kind``): no kind is looked up, so no module a
    received manifest names is ever imported. With ``config_hash``, the stored config
    must hash to it (an edited manifest is refused).

    Raises:
        IntervError: a malformed config, or one that does not hash to ``config_hash``.
    """
    _check_table(normalized, "config", _TOP_KEYS, required=_TOP_KEYS)
    _parse_model(normalized["model"])
    _parse_task(normalized["task"])
    sweep = normalized["sweep"]
    _check_table(
        sweep, "sweep", (*_SWEEP_DEFAULTS, "interventions", "screen"), required=_SWEEP_KEYS
    )
    entries = sweep["interventions"]
    if not isinstance(entries, list) or not all(
        isinstance(entry, Mapping) and isinstance(entry.get("kind"), str) for entry in entries
    ):
        raise IntervError(
            "sweep.interventions of a stored config must be a list of tables with a string "
            f"'kind'; got {entries!r}"
        )
    config = SweepConfig(normalized=normalized)
    if config_hash is not None and config.config_hash != config_hash:
        raise IntervError(
            f"the stored config hashes to {config.config_hash}, not to the stored hash "
            f"{config_hash}: the manifest was edited"
        )
    return config


def config_diff(old: Mapping[str, Any], new: Mapping[str, Any]) -> list[str]:
    """Lines ``"key.path: old -> new"`` for every leaf where two normalized configs differ."""
    old_flat, new_flat = _flatten(old), _flatten(new)
    absent = object()

    def show(value: Any) -> str:
        return "(absent)" if value is absent else json.dumps(value)

    return [
        f"{key}: {show(old_flat.get(key, absent))} -> {show(new_flat.get(key, absent))}"
        for key in sorted(set(old_flat) | set(new_flat))
        if old_flat.get(key, absent) != new_flat.get(key, absent)
    ]


def _flatten(value: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(value, Mapping):
        items = value.items()
    elif isinstance(value, list) and value and all(isinstance(v, Mapping) for v in value):
        items = ((f"[{i}]", v) for i, v in enumerate(value))
    else:
        return {prefix: value}
    flat: dict[str, Any] = {}
    for key, item in items:
        path = f"{prefix}{key}" if str(key).startswith("[") or not prefix else f"{prefix}.{key}"
        flat.update(_flatten(item, path))
    return flat


def _check_table(
    table: Any, path: str, allowed: tuple[str, ...], required: tuple[str, ...] = ()
) -> None:
    if not isinstance(table, Mapping):
        raise IntervError(f"{path} must be a table with keys {allowed}; got {table!r}")
    for key in table:
        if key not in allowed:
            raise IntervError(f"unknown key {path}.{key}; allowed keys of {path}: {allowed}")
    for key in required:
        if key not in table:
            raise IntervError(f"missing key {path}.{key}; {path} needs {required}")


def _int(value: Any, path: str, minimum: int | None = None) -> int:
    if not isinstance(value, int):  # TOML integers only (as_int would take any integer-like)
        raise IntervError(f"{path} must be an integer; got {value!r}")
    return as_int(value, path, minimum=minimum)


def _float(value: Any, path: str) -> float:
    return as_finite(value, path)


def _bool(value: Any, path: str) -> bool:
    if not isinstance(value, bool):
        raise IntervError(f"{path} must be true or false; got {value!r}")
    return value


def _str(value: Any, path: str) -> str:
    if not isinstance(value, str) or not value:
        raise IntervError(f"{path} must be a non-empty string; got {value!r}")
    return value


def _choice(value: Any, path: str, allowed: tuple[str, ...]) -> str:
    if value not in allowed:
        raise IntervError(f"{path} must be one of {allowed}; got {value!r}")
    return value


def _int_list(value: Any, path: str, *, allow_empty: bool = False) -> list[int]:
    if not isinstance(value, list) or (not value and not allow_empty):
        kind = "a list" if allow_empty else "a non-empty list"
        raise IntervError(f"{path} must be {kind} of integers >= 0; got {value!r}")
    items = [_int(item, f"{path}[{i}]", minimum=0) for i, item in enumerate(value)]
    if len(set(items)) != len(items):
        raise IntervError(f"{path} must not repeat values; got {items}")
    return items


def _parse_model(table: Any) -> dict[str, Any]:
    _check_table(table, "model", ("spec", *_MODEL_DEFAULTS), required=("spec",))
    merged = {**_MODEL_DEFAULTS, **table}
    return {
        "spec": _str(merged["spec"], "model.spec"),
        "device": _str(merged["device"], "model.device"),
        "dtype": _choice(merged["dtype"], "model.dtype", ("float32", "bfloat16", "float16")),
    }


def _parse_task(table: Any) -> dict[str, Any]:
    common = tuple(_TASK_COMMON_DEFAULTS)
    if isinstance(table, Mapping) and "path" in table:
        if "name" in table:
            raise IntervError("task has both 'name' and 'path'; give one of them")
        _check_table(table, "task", ("path", *common))
        merged = {**_TASK_COMMON_DEFAULTS, **table}
        task: dict[str, Any] = {"path": _str(merged["path"], "task.path")}
    else:
        _check_table(table, "task", ("name", *_TASK_BUILTIN_DEFAULTS, *common), required=("name",))
        merged = {**_TASK_BUILTIN_DEFAULTS, **_TASK_COMMON_DEFAULTS, **table}
        options = merged["options"]
        if not isinstance(options, Mapping):
            raise IntervError(f"task.options must be a table; got {options!r}")
        task = {
            "name": _str(merged["name"], "task.name"),
            "n_pairs": _int(merged["n_pairs"], "task.n_pairs", minimum=1),
            "seed": _int(merged["seed"], "task.seed"),
            "options": dict(options),
        }
    task["prepend_bos"] = _bool(merged["prepend_bos"], "task.prepend_bos")
    task["padding_side"] = _choice(merged["padding_side"], "task.padding_side", ("right", "left"))
    return task


def _parse_sweep(
    table: Any, allow_import: tuple[str, ...], on_import: Callable[[str], None] | None
) -> dict[str, Any]:
    _check_table(
        table, "sweep", (*_SWEEP_DEFAULTS, "interventions", "screen"), required=("interventions",)
    )
    merged = {**_SWEEP_DEFAULTS, **table}
    sweep = {
        "metric": _choice(merged["metric"], "sweep.metric", tuple(METRICS)),
        "batch_size": _int(merged["batch_size"], "sweep.batch_size", minimum=1),
        "unit_size": _int(merged["unit_size"], "sweep.unit_size", minimum=1),
        "seed": _int(merged["seed"], "sweep.seed"),
        "recovery_atol": _float(merged["recovery_atol"], "sweep.recovery_atol"),
    }
    if sweep["recovery_atol"] < 0:
        raise IntervError(f"sweep.recovery_atol must be >= 0; got {sweep['recovery_atol']}")
    entries = merged["interventions"]
    if not isinstance(entries, list) or not entries:
        raise IntervError(
            "sweep.interventions must be a non-empty array of tables ([[sweep.interventions]]); "
            f"got {entries!r}"
        )
    sweep["interventions"] = [
        _parse_intervention(
            entry, f"sweep.interventions[{i}]", sweep["seed"], allow_import, on_import
        )
        for i, entry in enumerate(entries)
    ]
    if "screen" in table:  # absent: no key, so configs without a screen keep their hash
        sweep["screen"] = _parse_screen(table["screen"], sweep["seed"])
        metric = METRICS[sweep["metric"]]
        for i, entry in enumerate(sweep["interventions"]):
            try:
                kind = get_kind(entry["kind"], allow_import=allow_import, on_import=on_import)
                check_screenable([_representative(kind, entry)], metric)
            except IntervError as error:
                raise IntervError(f"sweep.interventions[{i}] with sweep.screen: {error}") from None
    return sweep


def _parse_screen(value: Any, sweep_seed: int) -> dict[str, Any]:
    """``[sweep.screen]`` (or ``true``) as its normalized table; checked by building the
    :class:`~interv.audit.Screen` (its keys are the Screen's fields, its checks the Screen's).

    ``top_k``, ``audit``, ``alpha``, ``level`` and ``seed`` are stored with their defaults
    filled in; ``budget`` and ``step`` when given; the other fields (``estimator``,
    ``steps``, ``hvp_steps``, ``bound``) only where they differ from the Screen's default, so
    that a table that leaves them out (every config stored before they were keys) keeps its
    hash, and one that names another estimator is another sweep."""
    if value is True:
        value = {}
    if not isinstance(value, Mapping):
        raise IntervError(
            f"sweep.screen must be a table with keys {_SCREEN_KEYS} or true (the defaults); "
            f"got {value!r}"
        )
    _check_table(value, "sweep.screen", _SCREEN_KEYS)
    defaults = Screen()
    table: dict[str, Any] = {
        "top_k": _int(value.get("top_k", defaults.top_k), "sweep.screen.top_k", minimum=1),
        "audit": _int(value.get("audit", defaults.audit), "sweep.screen.audit", minimum=0),
        "level": _float(value.get("level", defaults.level), "sweep.screen.level"),
        "seed": _int(value.get("seed", sweep_seed), "sweep.screen.seed"),
    }
    alpha = value.get("alpha", defaults.alpha)
    table["alpha"] = False if alpha is False else _float(alpha, "sweep.screen.alpha")
    for key in ("budget", "step"):
        if key in value:
            table[key] = _int(value[key], f"sweep.screen.{key}", minimum=1)
    others = {key: value[key] for key in _SCREEN_KEYS if key in value and key not in table}
    try:
        Screen(**{**table, **others, "alpha": None if table["alpha"] is False else table["alpha"]})
    except IntervError as error:
        raise IntervError(f"sweep.screen: {error}") from None
    table.update((k, v) for k, v in others.items() if v != getattr(defaults, k))
    return table


def _representative(kind: Kind, parsed: Mapping[str, Any]) -> Intervention:
    """One value of an entry at layer 0 (head 0 if it takes one), for checks before any
    model is loaded."""
    probe = dict(parsed)
    if probe.get("positions") == "each":
        probe["positions"] = None
    head = 0 if kind.takes_head(probe) else None
    return kind.at(kind.expand(probe, layer=0, head=head, cfg=None)[0], layer=0, head=head)


def _plain(value: Any) -> Any:
    """A default value as TOML-like data: tuples become lists."""
    if isinstance(value, tuple | list):
        return [_plain(item) for item in value]
    return value


def _parse_intervention(
    entry: Any,
    path: str,
    sweep_seed: int,
    allow_import: tuple[str, ...],
    on_import: Callable[[str], None] | None,
) -> dict[str, Any]:
    if not isinstance(entry, Mapping) or "kind" not in entry:
        raise IntervError(
            f"{path} must be a table with a 'kind' (a registered kind name or "
            "'module:Class'); see interv.engine.registry.kinds()"
        )
    name = _str(entry["kind"], f"{path}.kind")
    try:
        kind = get_kind(name, allow_import=allow_import, on_import=on_import)
    except IntervError as error:
        raise IntervError(f"{path}.kind: {error}") from error
    fields = kind.fields
    if "layer" not in fields:
        raise IntervError(
            f"{path}.kind: kind {name!r} ({kind.cls.__name__}) has no 'layer' field, so a "
            "sweep cannot expand it over sites; run it with interv.run instead"
        )
    options = kind.options
    where = f"{path} (kind {name!r})"
    _check_table(entry, where, ("kind", "sites", *options))
    parsed: dict[str, Any] = {"kind": name}
    for key in options:
        spec = fields[key]
        if key in entry:
            parsed[key] = entry[key]
        elif key == "seed":
            parsed[key] = sweep_seed
        elif key in kind.defaults:
            parsed[key] = _plain(kind.defaults[key])
        elif spec.default is not dataclasses.MISSING:
            parsed[key] = _plain(spec.default)
        elif spec.default_factory is not dataclasses.MISSING:
            parsed[key] = _plain(spec.default_factory())
        else:
            raise IntervError(f"missing key {path}.{key}; kind {name!r} needs it")
    probe = dict(parsed)
    if "positions" in parsed:
        parsed["positions"] = _parse_positions(parsed["positions"], f"{path}.positions")
        probe["positions"] = None if parsed["positions"] == "each" else parsed["positions"]
    per_head = kind.takes_head(probe)
    try:  # builds one representative value, so every option is checked before a model loads
        _representative(kind, probe)
    except IntervError as error:
        raise IntervError(f"{where}: {error}") from error
    parsed["sites"] = _parse_sites(
        entry.get("sites", "all_heads" if per_head else "all_layers"), f"{path}.sites", per_head
    )
    return parsed


def _parse_sites(value: Any, path: str, per_head: bool) -> Any:
    every = "all_heads" if per_head else "all_layers"
    if isinstance(value, str):
        return _choice(value, path, (every,))
    allowed = _HEAD_SITE_KEYS if per_head else ("layers",)
    if not isinstance(value, Mapping):
        raise IntervError(f"{path} must be {every!r} or a table with keys {allowed}; got {value!r}")
    _check_table(value, path, allowed)
    return {key: _int_list(value[key], f"{path}.{key}") for key in allowed if key in value}


def _parse_positions(value: Any, path: str) -> Any:
    if value is None or value == "each":
        return value
    if isinstance(value, str):
        raise IntervError(
            f"{path} must be 'each' (one intervention per position), a list of positions "
            f"or absent (all positions at once); got {value!r}"
        )
    return _int_list(value, path)
