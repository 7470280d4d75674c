"""Compact displays of results: one table for ``__repr__`` (text) and ``_repr_html_`` (HTML).

A display is a title, a few lines saying what the numbers are (scope, units, semantics),
a small table whose headers name their units, and an optional sentence under each row.
Rows beyond ``max_rows`` are left out and counted ("12 more rows"). All text is escaped in
HTML. Internal to interv; no stability promise.
"""

from __future__ import annotations

import html
import math
from collections.abc import Sequence
from dataclasses import dataclass, field

__all__ = ["Display", "number"]


def number(value: float, digits: int = 4) -> str:
    """``value`` with ``digits`` significant digits; ``nan`` as "n/a"."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "n/a"
    return f"{value:.{digits}g}"


@dataclass(frozen=True)
class Display:
    """What a result shows of itself (see the module docstring)."""

    title: str
    lines: Sequence[str]
    headers: Sequence[str]
    rows: Sequence[Sequence[str]]
    notes: Sequence[str] = field(default=())  # one sentence per row, or none
    left_out: int = 0  # rows not shown

    def text(self) -> str:
        """Plain text, columns aligned; each row's sentence indented under it."""
        widths = [
            max([len(h), *(len(row[k]) for row in self.rows)]) for k, h in enumerate(self.headers)
        ]

        def line(cells: Sequence[str]) -> str:
            return "  ".join(
                cell.ljust(width) for cell, width in zip(cells, widths, strict=True)
            ).rstrip()

        out = [self.title, *(f"  {text}" for text in self.lines)]
        if self.rows:
            out.append("  " + line(self.headers))
            for k, row in enumerate(self.rows):
                out.append("  " + line(row))
                if self.notes:
                    out.append(f"      {self.notes[k]}")
        if self.left_out:
            out.append(f"  ... {self.left_out} more rows")
        return "\n".join(out)

    def html(self) -> str:
        """A small self-contained HTML table (escaped; no script, no external style)."""
        esc = html.escape
        head = "".join(f"<th style='text-align:left'>{esc(h)}</th>" for h in self.headers)
        body = []
        for k, row in enumerate(self.rows):
            cells = "".join(f"<td>{esc(cell)}</td>" for cell in row)
            if self.notes:
                note = f"<td style='color:#555'>{esc(self.notes[k])}</td>"
                cells += note
            body.append(f"<tr>{cells}</tr>")
        if self.notes:
            head += "<th style='text-align:left'>semantics</th>"
        more = f"<p>... {self.left_out} more rows</p>" if self.left_out else ""
        lines = "".join(f"<li>{esc(text)}</li>" for text in self.lines)
        table = (
            f"<table><thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>"
            if self.rows
            else ""
        )
        return (
            f"<div class='interv-result'><strong>{esc(self.title)}</strong>"
            f"<ul style='margin:0.2em 0'>{lines}</ul>{table}{more}</div>"
        )
