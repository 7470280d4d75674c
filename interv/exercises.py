"""Checks for the exercises at the end of the tutorial notebooks.

>>> check("1", 0.693, math.log(2), tolerance=0.01)
exercise 1: correct (0.693)
>>> check("2", (0, 2), "L0H2", form="head")
exercise 2: correct (L0H2)

An exercise's answer is checked against a value the notebook computes itself, so the
check holds on any machine that runs the notebook. Each exercise states its answer's
*form*, and the check accepts every spelling of that form:

- ``"number"`` (the default): a Python number, a numpy scalar or a 0-d tensor, within
  ``tolerance`` (absolute); arrays, tensors and lists match element-wise. The sign counts:
  an answer with the right size and the wrong sign is told so, never accepted.
- ``"fraction"``: a number between 0 and 1; a percentage (``77`` for 0.77) is told to be
  written as a fraction.
- ``"head"``: a head label, ``"L0H2"``, ``"l0h2"``, ``(0, 2)`` or ``[0, 2]``.
- ``"choice"``: one of ``choices``, spelled with ``-`` or ``_`` and in any case
  (``"drop-sink"`` is ``"drop_sink"``).
- ``"count"``: a whole number (``4`` or ``4.0``).
- ``"label"``: anything else, equal to the expected value (``True`` is not the number 1).

An unanswered exercise (``None``) prints the hint and the expected form instead of the
answer; a wrong one says what form was expected.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from typing import Any, Literal

__all__ = ["check"]

Form = Literal["number", "fraction", "head", "choice", "count", "label"]
FORMS: tuple[str, ...] = ("number", "fraction", "head", "choice", "count", "label")

_HEAD = re.compile(r"^\s*[lL](\d+)\s*[hH](\d+)\s*$")


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


def _negated(value: Any) -> Any:
    """``value`` with every number's sign flipped (None where it holds no number)."""
    if isinstance(value, list):
        items = [_negated(item) for item in value]
        return None if any(item is None for item in items) else items
    return -value if _is_number(value) else None


def _head(value: Any) -> tuple[int, int] | None:
    """A head label in any accepted spelling as ``(layer, head)``; None if it is not one."""
    if isinstance(value, str):
        match = _HEAD.match(value)
        return (int(match[1]), int(match[2])) if match else None
    value = _plain(value)
    if (
        isinstance(value, list)
        and len(value) == 2
        and all(isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in value)
    ):
        return (value[0], value[1])
    return None


def _choice(value: Any) -> str | None:
    return (
        value.strip().lower().replace("-", "_").replace(" ", "_")
        if isinstance(value, str)
        else None
    )


def _describe_form(form: str, choices: Sequence[str]) -> str:
    return {
        "number": "a number",
        "fraction": "a fraction between 0 and 1 (0.77, not 77)",
        "head": "a head label such as 'L0H2' or (0, 2)",
        "choice": "one of " + ", ".join(repr(c) for c in choices),
        "count": "a whole number",
        "label": "the exact value",
    }[form]


def _verdict(
    answer: Any, expected: Any, form: str, tolerance: float, choices: Sequence[str]
) -> tuple[bool, str, str]:
    """(correct, the answer as shown, why it is not, or "")."""
    if form == "head":
        got, want = _head(answer), _head(expected)
        if want is None:
            raise ValueError(f"check(form='head'): the expected value {expected!r} is no head")
        shown = f"L{got[0]}H{got[1]}" if got else repr(answer)
        return got == want, shown, "" if got else "not a head label"
    if form == "choice":
        got, want = _choice(answer), _choice(expected)
        allowed = {_choice(c) for c in choices}
        if want not in allowed:
            raise ValueError(f"check: the expected value {expected!r} is not among {choices!r}")
        if got not in allowed:
            return False, repr(answer), "not one of the choices"
        return got == want, got, ""
    plain = _plain(answer)
    if form == "count":
        if _is_number(plain) and float(plain).is_integer():
            return int(plain) == int(_plain(expected)), str(int(plain)), ""
        return False, repr(plain), "not a whole number"
    if form == "label":
        return _matches(plain, _plain(expected), 0.0), str(plain), ""
    expected = _plain(expected)
    if _matches(plain, expected, tolerance):
        return True, str(plain), ""
    why = ""
    flipped = _negated(plain)
    if flipped is not None and _matches(flipped, expected, tolerance):
        why = "the size is right but the sign is wrong"
    elif (
        form == "fraction"
        and _is_number(plain)
        and 1 < plain <= 100
        and _matches(plain / 100, expected, tolerance)
    ):
        why = "that looks like a percentage: write it as a fraction"
    return False, repr(plain), why


def check(
    name: str,
    answer: Any,
    expected: Any,
    *,
    tolerance: float = 0.0,
    hint: str = "",
    form: Form = "number",
    choices: Sequence[str] = (),
    written: str = "",
) -> None:
    """Print whether ``answer`` to exercise ``name`` matches ``expected``.

    Args:
        name: the exercise's label, e.g. ``"1"``.
        answer: the reader's answer; None = not answered yet.
        expected: the value the notebook computed.
        tolerance: for numbers (of any type, element-wise for arrays), the largest accepted
            ``|answer - expected|``.
        hint: printed when the answer is missing or wrong.
        form: the answer's form (module docstring): ``"number"``, ``"fraction"``,
            ``"head"``, ``"choice"``, ``"count"`` or ``"label"``.
        choices: the allowed answers of a ``"choice"`` exercise.
        written: how to write the answer, where the form's own words do not say it (e.g.
            ``"a row of 4 weights"`` for an answer the cell turns into a label).
    """
    if form not in FORMS:
        raise ValueError(f"check: unknown form {form!r}; choose one of {', '.join(FORMS)}")
    if (form == "choice") != bool(choices):
        raise ValueError("check: choices= is given exactly when form='choice'")
    wanted = written or _describe_form(form, choices)
    if answer is None:
        print(
            f"exercise {name}: no answer yet; write {wanted}" + (f"; hint: {hint}" if hint else "")
        )
        return
    correct, shown, why = _verdict(answer, expected, form, tolerance, choices)
    if correct:
        print(f"exercise {name}: correct ({shown})")
        return
    reason = f": {why}" if why else ""
    print(
        f"exercise {name}: not yet ({shown}{reason}; expected {wanted})"
        + (f"; hint: {hint}" if hint else "")
    )
