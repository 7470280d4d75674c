"""Inert outputs: text from tasks, models and user kinds cannot become markup or formulas.

- :func:`csv_cell`: a CSV cell that a spreadsheet would read as a formula (it starts with
  ``=``, ``+``, ``-``, ``@``, a tab or a carriage return, the characters OWASP's "CSV
  injection" note lists) is prefixed with a single quote, which spreadsheets show as
  text. Numbers stay numbers: an ``int`` or ``float`` value, or a string that is one
  decimal number (``-0.5``, ``+3``, ``-1e-06``, ``nan``, ``-inf``), is written as it is,
  because a spreadsheet reads it as that number and nothing else (so a negative effect
  keeps its sign and sorts as a number). Anything else that starts with one of those
  characters (``-1 -2``, ``=HYPERLINK(...)``, ``-2+3+cmd|...``) is quoted.
- :func:`inert_frame`: the same for every text cell of a pandas DataFrame.
- :func:`markdown_text`: text for a Markdown document, with HTML made inert (``&``,
  ``<``, ``>`` as entities, so no tag, comment or autolink survives), link and image
  brackets and backslashes escaped, and line breaks folded to spaces (a name cannot
  start a heading or end a table row).

No torch, no pandas. Internal to interv; no stability promise.
"""

from __future__ import annotations

import math
import re
from typing import Any

__all__ = ["csv_cell", "inert_frame", "markdown_text"]

_FORMULA_START = ("=", "+", "-", "@", "\t", "\r")
_NUMBER = re.compile(r"^[+-]?(\d+(\.\d*)?|\.\d+)([eE][+-]?\d+)?$|^[+-]?(nan|inf|infinity)$", re.I)
_MARKDOWN_ESCAPES = {"\\": "\\\\", "[": "\\[", "]": "\\]", "`": "\\`", "|": "\\|"}


def csv_cell(value: Any) -> Any:
    """``value`` ready for a CSV writer: numbers unchanged, text that would start a
    formula prefixed with ``'`` (module docstring); None stays None (an empty cell)."""
    if value is None or isinstance(value, bool | int | float):
        return value
    text = str(value)
    if text.startswith(_FORMULA_START) and not _NUMBER.match(text):
        return "'" + text
    return text


def inert_frame(frame: Any) -> Any:
    """A copy of the pandas DataFrame ``frame`` for ``to_csv``: every cell of a column that
    is not numeric (nor boolean, nor a date) and every column name through
    :func:`csv_cell`; numeric columns untouched."""
    out = frame.copy()
    for column in out.columns:
        if out[column].dtype.kind not in "biufcmM":
            out[column] = out[column].map(csv_cell)
    out.columns = [csv_cell(str(name)) for name in out.columns]
    return out


def markdown_text(value: Any) -> str:
    """``value`` as inert Markdown text (module docstring)."""
    if isinstance(value, float) and math.isnan(value):
        return "nan"
    text = str(value).replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    text = "".join(_MARKDOWN_ESCAPES.get(ch, ch) for ch in text)
    return " ".join(text.splitlines())
