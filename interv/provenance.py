"""Where a number came from: one frozen value every result carries, and the one join.

>>> a = Provenance("induction-2l", dtype="float32", prompts="1f2e", n_prompts=8)
>>> join(a, a).prompts
'1f2e'
>>> join(a, Provenance("induction-2l", dtype="float32", prompts="9abc", n_prompts=8))
Traceback (most recent call last):
interv.errors.IntervError: the first and the second come from different prompts (...)

A :class:`Provenance` names the model (name, revision, dtype), the prompts (a fingerprint of
the clean prompts' real token ids and their number), the prompt pairs where a result has
them (corrupted prompts, answer positions, targets, foils), and the metric, the direction
and the settings where they apply. A field that does not apply to a value is None: a head's
concentration has no metric, a circuit's screen has settings, an effect has no direction of
its own. Every result type of interv carries one (``result.provenance``), and every function
that combines two results, or a result with the model and prompts it is given, goes through
:func:`join`: it returns the joined value or refuses, naming the field that differs.

A function that compares two *conditions* on purpose (two checkpoints, two context lengths)
declares the fields it compares across with :func:`compares`; those may differ, every other
field must agree. ``tests/test_provenance.py`` finds every public function that takes two
results by its signature and checks that it refuses a pair that differs anywhere else.

The revision is a digest of the weights (each parameter's name, shape, dtype and every byte of
its values, remembered per tensor until its version counter moves), so two checkpoints of one
model, or a model with any weight edited in place, differ; no file or hub is consulted.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import weakref
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, TypeVar

from interv.errors import IntervError

__all__ = [
    "FIELDS",
    "Provenance",
    "compared_across",
    "compares",
    "identity_differences",
    "join",
    "model_identity",
    "provenance_of",
    "run_fingerprint",
    "run_identity",
    "tensor_digest",
]

FIELDS: dict[str, str] = {
    "model": "models",
    "dtype": "dtypes",
    "revision": "weights (revision: a digest of the parameters)",
    "n_prompts": "numbers of prompts",
    "prompts": "prompts (fingerprint of the clean prompts' real token ids)",
    "pairs": "prompt pairs (fingerprint of the corrupted prompts, answer positions, targets "
    "and foils)",
    "metric": "metrics",
    "direction": "directions",
    "settings": "settings",
}
"""Every field of a :class:`Provenance` in the order :func:`join` compares them, with the
words its refusal uses ("... come from different prompts")."""

F = TypeVar("F", bound=Callable[..., Any])


@dataclass(frozen=True)
class Provenance:
    """Where a result came from (module docstring). None: the field does not apply.

    Attributes:
        model: the model's name (``model.cfg.model_name``).
        revision: a digest of the model's weights (:func:`model_identity`).
        dtype: the dtype the model ran in (``"float32"``).
        prompts: fingerprint of the clean prompts' real token ids
            (:func:`interv.tasks.tokenized.prompts_fingerprint`).
        n_prompts: how many prompts.
        pairs: fingerprint of the prompt pairs' other half: corrupted prompts, answer
            positions (counted from each prompt's first real token), targets and foils.
        metric: the target metric's name.
        direction: ``"noise"`` or ``"denoise"`` where a result has one direction.
        settings: the settings of the computation others derive from (a circuit's screen),
            as ``key=value`` text.
    """

    model: str
    revision: str | None = None
    dtype: str | None = None
    prompts: str | None = None
    n_prompts: int | None = None
    pairs: str | None = None
    metric: str | None = None
    direction: str | None = None
    settings: str | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.model, str) or not self.model:
            raise IntervError(f"a provenance's model must be a non-empty name; got {self.model!r}")
        for name in FIELDS:
            value = getattr(self, name)
            if name == "n_prompts":
                if value is not None and (
                    isinstance(value, bool) or not isinstance(value, int) or value < 0
                ):
                    raise IntervError(f"a provenance's n_prompts must be a count; got {value!r}")
            elif value is not None and not isinstance(value, str):
                raise IntervError(f"a provenance's {name} must be text or None; got {value!r}")

    @classmethod
    def of(
        cls,
        model: Any,
        task: Any = None,
        *,
        metric: str | None = None,
        direction: str | None = None,
        settings: Mapping[str, Any] | None = None,
        prompts: str | None = None,
        n_prompts: int | None = None,
    ) -> Provenance:
        """The provenance of a run of ``model`` on ``task`` (a
        :class:`~interv.TokenizedPairs`: its prompts and pairs), or on prompts given by their
        fingerprint and number."""
        name, revision, dtype = model_identity(model)
        pairs = None
        if task is not None:
            prompts = task.prompts_fingerprint
            n_prompts = task.n_pairs
            pairs = task.pairs_fingerprint
        return cls(
            model=name,
            revision=revision,
            dtype=dtype,
            prompts=prompts,
            n_prompts=n_prompts,
            pairs=pairs,
            metric=metric,
            direction=direction,
            settings=None if settings is None else settings_text(settings),
        )

    def replace(self, **changes: Any) -> Provenance:
        """This provenance with ``changes`` (e.g. ``metric=None`` for a value without one)."""
        return dataclasses.replace(self, **changes)

    def describe(self) -> str:
        """One line: model (dtype, revision), prompts and the fields that apply."""
        parts = [f"model {self.model}"]
        detail = ", ".join(
            x for x in (self.dtype, self.revision and f"weights {self.revision}") if x
        )
        if detail:
            parts[0] += f" ({detail})"
        if self.n_prompts is not None or self.prompts is not None:
            parts.append(f"{self.n_prompts} prompts (fingerprint {self.prompts})")
        if self.pairs is not None:
            parts.append(f"pairs {self.pairs}")
        for name in ("metric", "direction", "settings"):
            if getattr(self, name) is not None:
                parts.append(f"{name} {getattr(self, name)}")
        return "; ".join(parts)

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-ready data (every field, None where it does not apply)."""
        return dataclasses.asdict(self)


def run_identity(
    provenance: Provenance | Mapping[str, Any], settings: Mapping[str, Any]
) -> dict[str, Any]:
    """What a run is, as one flat JSON-ready mapping: every field of its provenance and its
    settings (names other than :data:`FIELDS`: a screen's method and steps, a curve's
    complement, ...). The one identity of interv: resumable directories compare it
    (:func:`identity_differences`), results carry its hash (:func:`run_fingerprint`).

    ``provenance`` may be a mapping of the fields known so far (a command that claims its
    directory before its model loads); the others are None, compared once known.
    """
    if isinstance(provenance, Provenance):
        fields = provenance.to_dict()
    else:
        unknown = sorted(set(provenance) - set(FIELDS))
        if unknown:
            raise IntervError(f"unknown provenance fields {unknown}; choose from {tuple(FIELDS)}")
        fields = {name: provenance.get(name) for name in FIELDS}
    clash = sorted(set(settings) & set(FIELDS))
    if clash:
        raise IntervError(f"settings {clash} are provenance fields; pass them in the provenance")
    return json.loads(json.dumps({**fields, **settings}, sort_keys=True))


def run_fingerprint(provenance: Provenance, settings: Mapping[str, Any] | None = None) -> str:
    """16 hex digits of the SHA-256 of :func:`run_identity` (canonical JSON): a run's short
    name, which changes with any field of its provenance (any weight, any prompt) or setting."""
    identity = run_identity(provenance, settings or {})
    text = json.dumps(identity, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def identity_differences(
    stored: Mapping[str, Any], given: Mapping[str, Any]
) -> list[tuple[str, Any, Any]]:
    """``(key, stored value, given value)`` for every key where two :func:`run_identity`
    mappings differ, sorted by key; a nested setting is named by its path
    (``"screen.audit"``). A provenance field that one of them does not know yet (None or
    absent: a run claimed before its model loaded) does not differ."""
    stored, given = _flat(stored), _flat(given)
    found = []
    for key in sorted(set(stored) | set(given)):
        mine, theirs = stored.get(key), given.get(key)
        if key in FIELDS and (mine is None or theirs is None):
            continue
        if mine != theirs:
            found.append((key, mine, theirs))
    return found


def _flat(mapping: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    flat: dict[str, Any] = {}
    for key, value in mapping.items():
        if isinstance(value, Mapping) and value:
            flat.update(_flat(value, f"{prefix}{key}."))
        else:
            flat[f"{prefix}{key}"] = value
    return flat


def settings_text(settings: Mapping[str, Any]) -> str:
    """``key=value`` pairs, sorted by key, joined by ``", "``: settings as comparable text."""
    return ", ".join(f"{key}={settings[key]!r}" for key in sorted(settings))


def model_identity(model: Any) -> tuple[str, str, str | None]:
    """``(name, revision, dtype)`` of a model: ``cfg.model_name``, a 16-hex digest of its
    parameters (each one's name, shape, dtype and the digest of its every byte:
    :func:`tensor_digest`, the tensors not remembered hashed on several threads), and
    ``cfg.dtype`` without ``torch.`` (None if unknown)."""
    cfg = getattr(model, "cfg", None)
    name = str(getattr(cfg, "model_name", "") or type(model).__name__)
    dtype = getattr(cfg, "dtype", None)
    named = getattr(model, "named_parameters", None)
    parameters = sorted(named() if named is not None else (), key=lambda kv: kv[0])
    stale = [p for _, p in parameters if _remembered(p) is None]
    if len(stale) > 1:  # hashlib releases the GIL: the first call reads on every core
        with ThreadPoolExecutor(min(len(stale), os.cpu_count() or 1, 8)) as pool:
            list(pool.map(tensor_digest, stale))
    digest = hashlib.sha256()
    for key, parameter in parameters:
        digest.update(f"{key}:{tuple(parameter.shape)}:{parameter.dtype}:".encode())
        digest.update(tensor_digest(parameter))
        if dtype is None:
            dtype = parameter.dtype
    dtype_text = None if dtype is None else str(dtype).removeprefix("torch.")
    return name, digest.hexdigest()[:16], dtype_text


_DIGESTS: dict[int, tuple[weakref.ref, tuple[Any, ...], bytes]] = {}
"""id(tensor) -> (a weak reference to it, its storage address and version, its digest);
an entry leaves when its tensor is freed (a tensor's ``==`` is elementwise, so tensors are
not dictionary keys)."""


def _state(tensor: Any) -> tuple[Any, ...]:
    return (
        tensor.data_ptr(),
        tensor._version,
        tuple(tensor.shape),
        tuple(tensor.stride()),
        tensor.storage_offset(),
        str(tensor.dtype),
        str(tensor.device),
    )


def _remembered(tensor: Any) -> bytes | None:
    known = _DIGESTS.get(id(tensor))
    if known is not None and known[0]() is tensor and known[1] == _state(tensor):
        return known[2]
    return None


def tensor_digest(tensor: Any) -> bytes:
    """The SHA-256 digest of every byte of ``tensor``'s values, in row-major order.

    Remembered per tensor with its storage address and its version counter (``_version``,
    which PyTorch bumps at every in-place change: ``p[5, 3] += 3`` under ``torch.no_grad()``,
    ``p.zero_()``, ``p.copy_(...)``, ``load_state_dict``), so unchanged weights are not read
    again; a changed or replaced tensor is hashed whole. Writes through ``p.data``, which
    PyTorch hides from the version counter, are not seen until the tensor is hashed anew.
    """
    known = _remembered(tensor)
    if known is not None:
        return known
    import torch  # loaded already (a tensor was given); importing this module loads no torch

    state = _state(tensor)
    # the bytes as they are stored (bfloat16 has no numpy type: read as bytes)
    flat = tensor.detach().reshape(-1).contiguous().cpu().view(torch.uint8)
    found = hashlib.sha256(flat.numpy().data).digest()
    ident = id(tensor)
    _DIGESTS[ident] = (weakref.ref(tensor, lambda _: _DIGESTS.pop(ident, None)), state, found)
    return found


def provenance_of(value: Any) -> Provenance:
    """``value`` itself if it is a :class:`Provenance`, else its ``provenance``."""
    if isinstance(value, Provenance):
        return value
    found = getattr(value, "provenance", None)
    if not isinstance(found, Provenance):
        raise IntervError(
            f"a {type(value).__name__} carries no provenance; join interv results (from "
            "interv.run, interv.concentration, interv.circuits, ...) only"
        )
    return found


def join(
    first: Any,
    second: Any,
    *,
    what: tuple[str, str] = ("the first", "the second"),
    across: tuple[str, ...] = (),
) -> Provenance:
    """The provenance of a value made from ``first`` and ``second`` (results or
    :class:`Provenance` values), or an :class:`~interv.errors.IntervError` naming the first
    field (in :data:`FIELDS` order) where both are known and differ.

    Args:
        first, second: the two values joined.
        what: how the message names them (``("the circuit", "the concentration")``).
        across: fields the caller compares across on purpose (two checkpoints: ``revision``);
            they may differ, and the joined value has None there.

    The joined value keeps every field both agree on, and a field only one of them has.
    """
    unknown = [name for name in across if name not in FIELDS]
    if unknown:
        raise IntervError(f"unknown provenance fields {unknown}; choose from {tuple(FIELDS)}")
    a, b = provenance_of(first), provenance_of(second)
    joined: dict[str, Any] = {}
    for name, noun in FIELDS.items():
        mine, theirs = getattr(a, name), getattr(b, name)
        if mine is not None and theirs is not None and mine != theirs:
            if name in across:
                joined[name] = None
                continue
            raise IntervError(
                f"{what[0]} and {what[1]} come from different {noun} ({_shown(mine)} and "
                f"{_shown(theirs)}); join results of the same model and prompts only: "
                f"recompute one of them"
            )
        joined[name] = mine if mine is not None else theirs
    if joined["model"] is None:
        joined["model"] = f"{a.model} vs {b.model}"
    return Provenance(**joined)


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def compares(*fields: str) -> Callable[[F], F]:
    """Declare that the decorated function compares two results across ``fields`` on
    purpose (it joins them with ``join(..., across=fields)``); read by
    :func:`compared_across`."""
    unknown = [name for name in fields if name not in FIELDS]
    if unknown:
        raise IntervError(f"unknown provenance fields {unknown}; choose from {tuple(FIELDS)}")

    def mark(function: F) -> F:
        function.__interv_compares__ = tuple(fields)  # type: ignore[attr-defined]
        return function

    return mark


def compared_across(function: Callable[..., Any]) -> tuple[str, ...]:
    """The fields ``function`` declared with :func:`compares` (empty: it joins like with
    like)."""
    return tuple(getattr(function, "__interv_compares__", ()))
