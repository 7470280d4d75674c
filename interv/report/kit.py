"""The small kit every renderer of interv shares: escaped text, numbers, tables, assets.

>>> escape("<b>")
'&lt;b&gt;'
>>> number(float("nan")), number(0.123456, 3)
('n/a', '0.123')
>>> md_table(["head", "value"], [["L0H1", "0.5"]])
['| head | value |', '| --- | --- |', '| L0H1 | 0.5 |']

One place for the HTML escape (every text from data goes through :func:`escape`), the
number format (``n/a`` for a missing or undefined value), the inlined assets of the pages
(``interv/report/assets``), and the two table forms (HTML with every cell escaped; Markdown
with every cell made inert by :func:`interv._inert.markdown_text`). Internal to interv.
"""

from __future__ import annotations

import html
from collections.abc import Sequence
from functools import cache
from importlib import resources
from typing import Any

from interv._display import number  # interv's one number format, re-exported here
from interv._inert import markdown_text

__all__ = ["asset", "escape", "html_table", "md_table", "number"]


@cache
def asset(name: str) -> str:
    """The text of ``interv/report/assets/<name>`` (a page's inlined style or script)."""
    return resources.files("interv.report").joinpath("assets", name).read_text(encoding="utf-8")


def escape(text: Any) -> str:
    """``text`` as HTML text or attribute value (quotes escaped too)."""
    return html.escape(str(text), quote=True)


def html_table(columns: Sequence[str], rows: Sequence[Sequence[str]], *, cls: str = "") -> str:
    """A ``<table>`` of escaped cells inside a scrolling ``<div class=cls>``."""
    head = "".join(f"<th>{escape(c)}</th>" for c in columns)
    body = "".join("<tr>" + "".join(f"<td>{escape(c)}</td>" for c in row) + "</tr>" for row in rows)
    return (
        f"<div class='{escape(cls)}'><table><thead><tr>{head}</tr></thead>"
        f"<tbody>{body}</tbody></table></div>"
    )


def md_table(columns: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    """A Markdown table, one line per list item, every cell inert."""
    lines = ["| " + " | ".join(markdown_text(c) for c in columns) + " |"]
    lines.append("| " + " | ".join(["---"] * len(columns)) + " |")
    lines += ["| " + " | ".join(markdown_text(c) for c in row) + " |" for row in rows]
    return lines
