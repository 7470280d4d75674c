"""The small input checks every layer of interv shares: ints, positions, ranges.

Each check raises :class:`~interv.errors.IntervError` with a message that names the
value and what is allowed, and returns the normalized value. No torch, no model.
Internal to interv; no stability promise.
"""

from __future__ import annotations

import json
import math
import operator
import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from interv.errors import IntervError

__all__ = [
    "as_finite",
    "as_int",
    "as_path",
    "as_positions",
    "check_index",
    "read_json",
    "read_text",
]


def as_int(value: Any, what: str, *, minimum: int | None = None) -> int:
    """``value`` as an int: any integer-like value (numpy ints, integer 0-d tensors); bools
    and floats are refused."""
    if isinstance(value, bool):
        raise IntervError(f"{what} must be an integer; got {value!r}")
    try:
        value = operator.index(value)
    except TypeError:
        raise IntervError(f"{what} must be an integer; got {value!r}") from None
    if minimum is not None and value < minimum:
        raise IntervError(f"{what} must be >= {minimum}; got {value}")
    return value


def as_finite(value: Any, what: str, *, minimum: float | None = None) -> float:
    """``value`` as a finite float (NaN and infinities refused)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise IntervError(f"{what} must be a number; got {value!r}")
    if not math.isfinite(value):
        raise IntervError(f"{what} must be a finite number; got {value!r}")
    if minimum is not None and value < minimum:
        raise IntervError(f"{what} must be >= {minimum}; got {value}")
    return float(value)


def as_positions(
    positions: Iterable[int] | int | None,
    what: str,
    *,
    allow_negative: bool = False,
    allow_empty: bool = True,
    meaning: str = "absolute positions",
) -> tuple[int, ...] | None:
    """Distinct integer positions as a tuple; ``None`` (all positions) passes through.

    Args:
        positions: an int, an iterable of ints, or None.
        what: the argument's name, for messages (e.g. ``"key_positions"``).
        allow_negative: accept negative positions (counted from the end).
        allow_empty: accept an empty collection.
        meaning: how the positions are counted, for the message about negative ones.
    """
    if positions is None:
        return None
    if isinstance(positions, str | bytes):
        raise IntervError(f"{what} must be an int or a sequence of ints; got {positions!r}")
    try:
        items = [positions] if isinstance(positions, int) else list(positions)
    except TypeError as error:
        raise IntervError(
            f"{what} must be an int or a sequence of ints; got {positions!r}"
        ) from error
    values = []
    for item in items:
        try:
            values.append(as_int(item, what))
        except IntervError:
            raise IntervError(f"{what} must contain ints; got {item!r} in {positions!r}") from None
    if not values and not allow_empty:
        raise IntervError(f"{what} must name at least one position; got an empty sequence")
    negative = [p for p in values if p < 0]
    if negative and not allow_negative:
        raise IntervError(f"{what} must be >= 0 ({meaning}); got {negative[0]} in {tuple(values)}")
    if len(set(values)) != len(values):
        raise IntervError(f"{what} must not repeat a position; got {values}")
    return tuple(values)


def check_index(value: Any, count: int, noun: str, owner: str) -> int:
    """``value`` as an int in ``0..count - 1``; the message names ``noun`` and its range.

    Example: ``check_index(2, 2, "layer", "the model has 2 layers")`` raises
    "layer 2 is out of range; the model has 2 layers (valid layers 0..1)".
    """
    value = as_int(value, noun)
    if not 0 <= value < count:
        raise IntervError(f"{noun} {value} is out of range; {owner} (valid {noun}s 0..{count - 1})")
    return value


def as_path(path: Any, what: str) -> Path:
    """``path`` (a ``str`` or ``os.PathLike``) as a :class:`~pathlib.Path`; anything else
    (None, a number, bytes, an open file) is refused naming ``what``."""
    if isinstance(path, bytes) or not isinstance(path, str | os.PathLike):
        raise IntervError(f"{what} must be a path (a str or a pathlib.Path); got {path!r}")
    return Path(path)


def read_text(path: str | Path, what: str) -> str:
    """The UTF-8 text of the file ``path``; ``what`` names it in messages (e.g. ``"task file"``).

    A missing file, a directory, an unreadable file, a path that is not a str or
    ``os.PathLike``, or bytes that are not UTF-8 raise :class:`IntervError` naming the
    path and what was expected. A leading UTF-8 byte-order mark (which some editors on
    Windows write) is dropped.
    """
    path = as_path(path, what)
    where = f"{what} {str(path)!r}"
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise IntervError(f"{where} does not exist") from None
    except IsADirectoryError:
        raise IntervError(f"{where} is a directory; expected a file") from None
    except OSError as error:
        raise IntervError(f"cannot read {where}: {error.strerror or error}") from None
    try:
        return data.decode("utf-8").removeprefix("\ufeff")
    except UnicodeDecodeError as error:
        line = data[: error.start].count(b"\n") + 1
        raise IntervError(
            f"{where} is not UTF-8 text: byte 0x{data[error.start]:02x} at offset {error.start} "
            f"(line {line}) is not valid UTF-8; save the file as UTF-8"
        ) from None


def read_json(path: str | Path, what: str) -> Any:
    """The JSON value in the file ``path`` (see :func:`read_text` for file errors).

    Invalid JSON (for example a file cut short by an interrupted write) raises
    :class:`IntervError` naming the path, the line and the column.
    """
    text = read_text(path, what)
    try:
        return json.loads(text)
    except json.JSONDecodeError as error:
        raise IntervError(
            f"{what} {str(Path(path))!r} is not valid JSON ({error.msg}: line {error.lineno}, "
            f"column {error.colno}); it may be cut short (an interrupted write) or edited"
        ) from None
