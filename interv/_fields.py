"""Frozen values that normalise their inputs declaratively: a field says how.

equinox's ``field(converter=...)`` is the model. A field made with :func:`converted` carries
its converter, ``converter(value, name)`` (the ``interv._checks`` helpers have that shape);
the value's ``__post_init__`` calls :func:`convert` once, which replaces every such field by
its converted value, in declaration order, before the checks that relate fields:

>>> from dataclasses import dataclass
>>> from interv._checks import as_positions
>>> @dataclass(frozen=True)
... class Span:
...     positions: tuple[int, ...] | None = converted(as_positions, default=None)
...
...     def __post_init__(self) -> None:
...         convert(self)
>>> Span([3, 1]).positions
(3, 1)

No stability promise; internal to interv.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

__all__ = ["convert", "converted"]


def converted(converter: Callable[[Any, str], Any], **field_options: Any) -> Any:
    """A dataclass field whose value :func:`convert` replaces by ``converter(value, name)``.

    ``field_options`` are :func:`dataclasses.field`'s (``default=...``, ...).
    """
    return dataclasses.field(metadata={"converter": converter}, **field_options)


def convert(value: Any) -> None:
    """Replace each converted field of the (frozen) dataclass ``value`` by its converter's
    result, in declaration order; a converter raises on input it refuses."""
    for field in dataclasses.fields(value):
        converter = field.metadata.get("converter")
        if converter is not None:
            object.__setattr__(value, field.name, converter(getattr(value, field.name), field.name))
