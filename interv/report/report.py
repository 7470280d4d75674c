"""The report users hold: :class:`Report`, a report's data
(:class:`~interv.report.data.ReportData`) that displays itself.

>>> report = interv.build_report(result, concentration)  # doctest: +SKIP
>>> report.save("out/")                                  # doctest: +SKIP

``_repr_html_`` / ``_repr_markdown_`` give rich display in notebooks; :meth:`Report.save`
writes the files. The renderers are imported when called (they import matplotlib on use, and
``import interv`` stays cheap); they are typed with the data, never with this class.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from interv.report.data import ReportData

if TYPE_CHECKING:
    from matplotlib.figure import Figure

__all__ = ["Report"]


@dataclass(frozen=True)
class Report(ReportData):
    """A typed report: scope header, rows, flag rules, agreement, and the sections that join
    rows (direct/indirect decomposition, path patches, pairwise interactions, see
    :mod:`interv.report.sections`). Renders itself.

    Its fields and queries are :class:`~interv.report.data.ReportData`'s; ``provenance`` is
    the join (:func:`interv.provenance.join`) of the effects' and the concentration's: the
    model, its weights and dtype, the prompts, the pairs and the metric every number is
    about. ``_repr_html_`` / ``_repr_markdown_`` give rich display in notebooks; see
    :mod:`interv.report.render` for Markdown, HTML, JSON and CSV.
    """

    def save(
        self,
        directory: str | Path,
        *,
        figures: dict[str, Figure] | None = None,
        overwrite: bool = False,
    ) -> dict[str, Path]:
        """Write the report's files into ``directory``: :func:`interv.report.render.save_report`
        (each file new or interv's own unchanged one; ``overwrite=True`` replaces them)."""
        from interv.report.render import save_report  # the renderer, on use

        return save_report(self, directory, figures=figures, overwrite=overwrite)

    def _repr_markdown_(self) -> str:
        from interv.report.render import to_markdown  # the renderer, on use

        return to_markdown(self)

    def _repr_html_(self) -> str:
        from interv.report.page import page_fragment  # the renderer, on use

        return page_fragment(self)
