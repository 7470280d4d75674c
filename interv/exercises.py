"""Checks for the exercises at the end of the tutorial notebooks.

>>> check("1", 0.693, math.log(2), tolerance=0.01)
exercise 1: correct (0.693)

An exercise's answer is checked against a value the notebook computes itself, so the
check holds on any machine that runs the notebook. Numbers match within ``tolerance``
(absolute); anything else (a head label, a word) must be equal. An unanswered exercise
(``None``) prints a hint instead of the answer.
"""

from __future__ import annotations

import math
from typing import Any

__all__ = ["check"]


def check(name: str, answer: Any, expected: Any, *, tolerance: float = 0.0, hint: str = "") -> None:
    """Print whether ``answer`` to exercise ``name`` matches ``expected``.

    Args:
        name: the exercise's label, e.g. ``"1"``.
        answer: the reader's answer; None = not answered yet.
        expected: the value the notebook computed.
        tolerance: for numbers, the largest accepted ``|answer - expected|``.
        hint: printed when the answer is missing or wrong.
    """
    if answer is None:
        print(f"exercise {name}: no answer yet" + (f" (hint: {hint})" if hint else ""))
        return
    is_number = isinstance(answer, int | float) and not isinstance(answer, bool)
    if isinstance(answer, bool) != isinstance(expected, bool):
        right = False  # True is not the number 1 here
    elif is_number and isinstance(expected, int | float) and not isinstance(expected, bool):
        right = math.isfinite(answer) and abs(float(answer) - float(expected)) <= tolerance
    else:
        right = answer == expected
    if right:
        print(f"exercise {name}: correct ({answer})")
    else:
        print(f"exercise {name}: not yet ({answer!r})" + (f"; hint: {hint}" if hint else ""))
