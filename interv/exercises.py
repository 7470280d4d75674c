"""Checks for the exercises at the end of the tutorial notebooks.

>>> check("1", 0.693, math.log(2), tolerance=0.01)
exercise 1: correct (0.693)

An exercise's answer is checked against a value the notebook computes itself, so the
check holds on any machine that runs the notebook. Numbers match within ``tolerance``
(absolute), whatever their type: a Python number, a numpy scalar or a 0-d tensor; arrays,
tensors and lists match element-wise (same shape, every element within ``tolerance``).
Anything else (a head label, a word) must be equal, and ``True`` is not the number 1. An
unanswered exercise (``None``) prints a hint instead of the answer.
"""

from __future__ import annotations

import math
from typing import Any

__all__ = ["check"]


def _plain(value: Any) -> Any:
    """``value`` as plain Python data: numpy scalars and arrays and torch tensors (anything
    with ``tolist``) as numbers and nested lists; tuples as lists."""
    if hasattr(value, "tolist") and not isinstance(value, str | bytes):
        value = value.tolist()
    if isinstance(value, list | tuple):
        return [_plain(item) for item in value]
    return value


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _matches(answer: Any, expected: Any, tolerance: float) -> bool:
    if isinstance(answer, list) or isinstance(expected, list):
        return (
            isinstance(answer, list)
            and isinstance(expected, list)
            and len(answer) == len(expected)
            and all(_matches(a, e, tolerance) for a, e in zip(answer, expected, strict=True))
        )
    if isinstance(answer, bool) or isinstance(expected, bool):
        return isinstance(answer, bool) and isinstance(expected, bool) and answer == expected
    if _is_number(answer) and _is_number(expected):
        return math.isfinite(answer) and abs(float(answer) - float(expected)) <= tolerance
    return bool(answer == expected)


def check(name: str, answer: Any, expected: Any, *, tolerance: float = 0.0, hint: str = "") -> None:
    """Print whether ``answer`` to exercise ``name`` matches ``expected``.

    Args:
        name: the exercise's label, e.g. ``"1"``.
        answer: the reader's answer; None = not answered yet.
        expected: the value the notebook computed.
        tolerance: for numbers (of any type, element-wise for arrays), the largest accepted
            ``|answer - expected|``.
        hint: printed when the answer is missing or wrong.
    """
    if answer is None:
        print(f"exercise {name}: no answer yet" + (f" (hint: {hint})" if hint else ""))
        return
    plain = _plain(answer)
    if _matches(plain, _plain(expected), tolerance):
        print(f"exercise {name}: correct ({plain})")
    else:
        print(f"exercise {name}: not yet ({plain!r})" + (f"; hint: {hint}" if hint else ""))
