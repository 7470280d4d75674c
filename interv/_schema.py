"""The one typed reader of the files interv stores: a dataclass is a file's schema.

>>> @dataclass(frozen=True)
... class Record:
...     indices: list[Annotated[int, AtLeast(0)]]
...     status: Literal["running", "complete"]
>>> parse(Record, {"indices": [3, -1], "status": "running"}, "record")
Traceback (most recent call last):
interv.errors.IntervError: record.indices[1] must be an integer >= 0; got -1

Every JSON file interv writes and reads back (a circuit, its curve and mission link, a
screen's scores, the exact log, a report, a sweep's manifest, baselines and units) has one
schema: a dataclass whose annotations say what each field holds. :func:`parse` checks the
JSON value against it field by field, recursively, and builds the dataclass (whose
``__post_init__`` checks what spans fields, e.g. equal lengths); :func:`read` and
:func:`read_lines` do it for a file and a log, naming the file. A damaged field is named by
its path (``circuit.audit.screen.top_k``) in a one-line :class:`~interv.errors.IntervError`;
nothing that is read imports code or builds anything the schema does not name. A file
from before interv recorded provenance (a required ``provenance`` field missing) is told
apart from a damaged one: :class:`BeforeProvenance`.

Annotations understood: ``int`` (not bool), ``float`` (an int or a float; JSON null is NaN,
the way interv writes NaN: :func:`json_ready`; an infinity, which interv never stores, is
refused everywhere), ``str`` (text that can be written: a lone surrogate, valid in JSON, is
refused), ``bool``, ``Literal[...]``,
``X | None`` (null stays None), ``tuple[X, ...]``, ``tuple[X, Y]``, ``list[X]``,
``dict[str, X]``, nested dataclasses, ``Any``, and ``Annotated[X, rule]`` with the rules
:class:`AtLeast`, :class:`Within`, :class:`Finite`, :class:`Keys` and :class:`NonEmpty`.
Fields whose names start with ``_`` are never read. No torch here. Internal to interv; no
stability promise.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import math
import types
import typing
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal, TypeVar

from interv._checks import read_json, read_text
from interv.errors import IntervError

__all__ = [
    "AtLeast",
    "BeforeProvenance",
    "Finite",
    "Keys",
    "NonEmpty",
    "Within",
    "from_file",
    "in_file",
    "json_ready",
    "parse",
    "read",
    "read_lines",
]

T = TypeVar("T")


@dataclass(frozen=True)
class AtLeast:
    """A number at least ``minimum``."""

    minimum: float

    def check(self, value: Any, where: str) -> None:
        if value is not None and not value >= self.minimum:
            kind = "an integer" if isinstance(value, int) else "a number"
            raise IntervError(f"{where} must be {kind} >= {self.minimum:g}; got {_shown(value)}")


@dataclass(frozen=True)
class Finite:
    """A finite number (null, NaN and the infinities refused); on a list, every item."""

    def check(self, value: Any, where: str) -> None:
        items = value if isinstance(value, list | tuple) else [value]
        for i, item in enumerate(items):
            if isinstance(item, float) and not math.isfinite(item):
                at = f"{where}[{i}]" if isinstance(value, list | tuple) else where
                raise IntervError(f"{at} must be a finite number; got {_shown(item)}")


@dataclass(frozen=True)
class Within:
    """A number in ``[low, high]`` (either bound may be None); NaN (a null the field allows)
    passes: it is "no value", shown as n/a."""

    low: float | None = None
    high: float | None = None

    def check(self, value: Any, where: str) -> None:
        if value is None or (isinstance(value, float) and math.isnan(value)):
            return
        if (self.low is not None and value < self.low) or (
            self.high is not None and value > self.high
        ):
            low = "-inf" if self.low is None else f"{self.low:g}"
            high = "inf" if self.high is None else f"{self.high:g}"
            raise IntervError(f"{where} must lie in [{low}, {high}]; got {_shown(value)}")


@dataclass(frozen=True)
class Keys:
    """A mapping with exactly these keys."""

    names: tuple[str, ...]

    def check(self, value: Any, where: str) -> None:
        if set(value) != set(self.names):
            raise IntervError(
                f"{where} must hold exactly the keys {sorted(self.names)}; got {sorted(value)}"
            )


@dataclass(frozen=True)
class NonEmpty:
    """A list, mapping or text with at least one item."""

    def check(self, value: Any, where: str) -> None:
        if value is not None and len(value) == 0:
            raise IntervError(f"{where} must not be empty")


class BeforeProvenance(IntervError):
    """A stored value written before interv recorded provenance (no ``provenance`` field):
    not damaged, but interv cannot check what it was computed from; it must be redone."""


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def json_ready(value: Any) -> Any:
    """``value`` (nested dicts, lists, tuples and numbers) as strict JSON data: NaN and the
    infinities as null (the way :func:`parse` reads a float's null back as NaN), tuples as
    lists."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: json_ready(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [json_ready(v) for v in value]
    return value


def parse(cls: type[T], data: Any, what: str) -> T:
    """An instance of the dataclass ``cls`` from its JSON form, each field checked against
    its annotation ("parse, don't validate"). A missing field without a default, an unknown
    field or a value of another type or range raises :class:`IntervError` naming the field's
    path from ``what`` (``header.n_prompts``)."""
    if not isinstance(data, dict):
        raise IntervError(f"{what} must be a JSON object; got {type(data).__name__}")
    fields = {
        spec.name: spec
        for spec in dataclasses.fields(cls)  # type: ignore[arg-type]
        if not spec.name.startswith("_")
    }
    hints = typing.get_type_hints(cls, include_extras=True)
    missing = [name for name, spec in fields.items() if name not in data and _required(spec)]
    if "provenance" in missing and len(missing) <= 2:  # the unit came with it
        raise BeforeProvenance(f"{what} has no field 'provenance'")
    values = {}
    for name in fields:  # the fields first: an older file is told by them
        if name not in data:
            if name in missing:
                raise IntervError(f"{what}: missing field {name!r}")
            continue
        values[name] = _value(data[name], hints[name], f"{what}.{name}")
    unknown = sorted(set(data) - set(fields))
    if unknown:
        raise IntervError(f"{what} has unknown fields {unknown[:5]}; expected {sorted(fields)}")
    try:
        return cls(**values)
    except (TypeError, ValueError) as error:  # IntervError (a ValueError) included
        raise IntervError(f"{what}: {error}") from None


def _required(spec: dataclasses.Field) -> bool:
    return spec.default is dataclasses.MISSING and spec.default_factory is dataclasses.MISSING


def read(path: Path, cls: type[T], what: str, *, redo: str = "") -> T:
    """The file ``path`` (JSON) parsed as ``cls``; a damaged field is named with the file
    (:func:`from_file`)."""
    return from_file(path, lambda data: parse(cls, data, what), what, redo=redo)


def from_file(path: Path, reader: Callable[[Any], T], what: str, *, redo: str = "") -> T:
    """``reader`` (a typed reader: ``parse`` or a ``from_dict``) applied to the JSON in the
    file ``path``; its error in one line naming the file (:func:`in_file`)."""
    data = read_json(path, what)
    try:
        return reader(data)
    except IntervError as error:
        raise in_file(path, error, redo) from None


def in_file(path: Path, error: IntervError, redo: str = "") -> IntervError:
    """The reader's ``error`` about the file ``path`` in one line: the file is damaged, or
    (:class:`BeforeProvenance`) it is from before provenance; ``redo`` (how to redo the file,
    e.g. "rerun the interv circuit command into a new --out") is the advice."""
    if isinstance(error, BeforeProvenance):
        return BeforeProvenance(
            f"{str(path)!r} was written by an interv from before provenance ({error}): it is "
            "not damaged, but interv cannot check it against the model and prompts it came "
            f"from; {redo or 'redo it with this interv'}"
        )
    advice = f"; {redo}" if redo else ""
    return IntervError(f"{str(path)!r} is damaged: {error}{advice}")


def read_lines(path: Path, cls: type[T], what: str) -> Iterator[tuple[int, T]]:
    """Each complete line of the log ``path`` parsed as ``cls``, with its number (a torn
    last line, which a kill while appending leaves, is left out)."""
    text = read_text(path, what)
    complete = text[: text.rfind("\n") + 1]
    for number, line in enumerate(complete.splitlines(), start=1):
        if not line.strip():
            continue
        where = f"{str(path)!r}: line {number}"
        try:
            data = json.loads(line)
        except json.JSONDecodeError as error:
            raise IntervError(f"{where} is not JSON ({error.msg})") from None
        try:
            yield number, parse(cls, data, what)
        except IntervError as error:
            raise IntervError(f"{where} is damaged: {error}") from None


_NUMBERS = frozenset((int, float))
_FINITE_ROW = Annotated[list[float], Finite()]


def _floats(value: Any, where: str, *, finite: bool = False) -> list[float]:
    """A list of numbers (null as NaN unless ``finite``; never an infinity), checked in one
    pass: a C-level scan first (every item an int or a float, none infinite, every one finite
    if asked), item by item only when that fails, to name the first bad item."""
    if not isinstance(value, list):
        raise IntervError(f"{where} must be a list; got {_shown(value)}")
    try:
        if all(map(_NUMBERS.__contains__, map(type, value))) and (
            all(map(math.isfinite, value)) if finite else not any(map(math.isinf, value))
        ):
            return value
    except OverflowError:  # an integer beyond any float: named below
        pass
    out = []
    for i, item in enumerate(value):
        kind = type(item)
        if kind is float or kind is int:
            number = _finite(item, f"{where}[{i}]", nan=not finite)
            out.append(number)
        elif item is None and not finite:
            out.append(math.nan)
        else:
            raise IntervError(f"{where}[{i}] must be a number; got {_shown(item)}")
    return out


def _finite(value: int | float, where: str, *, nan: bool) -> float:
    """``value`` as a float: never an infinity (nor an integer beyond every float); NaN only
    where ``nan`` (the field may be null)."""
    try:
        number = float(value)
    except OverflowError:
        number = math.inf
    if math.isinf(number) or (not nan and math.isnan(number)):
        rule = "a finite number or null" if nan else "a finite number"
        raise IntervError(f"{where} must be {rule}; got {_shown(value)}")
    return number


def _text(value: Any, where: str) -> str:
    """A string that can be written (UTF-8): a lone surrogate (``"\\ud83e"``, valid JSON) is
    refused, naming the field."""
    if not isinstance(value, str):
        raise IntervError(f"{where} must be a string; got {_shown(value)}")
    if not value.isascii():
        try:
            value.encode("utf-8")
        except UnicodeEncodeError as error:
            raise IntervError(
                f"{where} holds a lone surrogate {value[error.start]!r} at character "
                f"{error.start}: not text that can be written"
            ) from None
    return value


@functools.cache
def _form(hint: Any) -> tuple[Any, tuple[Any, ...]]:
    """``(origin, args)`` of an annotation (cached: a long list asks for it per item)."""
    return typing.get_origin(hint), typing.get_args(hint)


def _value(value: Any, hint: Any, where: str) -> Any:
    origin, args = _form(hint)
    if origin is Annotated:
        if args[0] == list[float] and args[1:] == (Finite(),):  # long numeric lists
            return _floats(value, where, finite=True)
        checked = _value(value, args[0], where)
        for rule in args[1:]:
            rule.check(checked, where)
        return checked
    if hint is Any:
        return value
    if origin is Literal:
        if value not in args or isinstance(value, bool) != any(isinstance(a, bool) for a in args):
            raise IntervError(f"{where} must be one of {list(args)}; got {_shown(value)}")
        return value
    if origin in (types.UnionType, typing.Union):
        options = [a for a in args if a is not type(None)]
        if value is None and len(options) < len(args):
            return None
        if len(options) != 1:
            return value
        return _value(value, options[0], where)
    if dataclasses.is_dataclass(hint):
        return parse(hint, value, where)
    if hint is bool:
        if not isinstance(value, bool):
            raise IntervError(f"{where} must be true or false; got {_shown(value)}")
        return value
    if hint is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise IntervError(f"{where} must be an integer; got {_shown(value)}")
        return value
    if hint is float:
        if value is None:
            return math.nan
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise IntervError(f"{where} must be a number; got {_shown(value)}")
        return _finite(value, where, nan=True)
    if hint is str:
        return _text(value, where)
    if origin in (tuple, list):
        if not isinstance(value, list | tuple):
            raise IntervError(f"{where} must be a list; got {_shown(value)}")
        if origin is tuple and not (len(args) == 2 and args[1] is Ellipsis):
            if len(value) != len(args):
                raise IntervError(f"{where} must hold {len(args)} values; got {_shown(value)}")
            return tuple(
                _value(v, a, f"{where}[{i}]")
                for i, (v, a) in enumerate(zip(value, args, strict=True))
            )
        item = args[0] if args else Any
        if item is float:  # long numeric lists: one tight pass
            items: list[Any] = _floats(value, where)
        elif item == _FINITE_ROW:  # a matrix of finite numbers: one tight pass per row
            items = [_floats(v, f"{where}[{i}]", finite=True) for i, v in enumerate(value)]
        else:
            items = [_value(v, item, f"{where}[{i}]") for i, v in enumerate(value)]
        return tuple(items) if origin is tuple else items
    if origin is dict:
        if not isinstance(value, dict):
            raise IntervError(f"{where} must be a JSON object; got {_shown(value)}")
        item = args[1] if len(args) == 2 else Any
        return {_text(k, where): _value(v, item, f"{where}.{k}") for k, v in value.items()}
    return value
