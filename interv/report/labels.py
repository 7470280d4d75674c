"""Point labels that never overlap: greedy placement, thinning what does not fit.

Labels are placed one by one in priority order. For each, candidate boxes are tried
around its point (right, left, above, below and the four diagonals, first close, then
further out with a leader line); the first candidate that lies inside the plot area and
overlaps neither an earlier label, nor a point marker, nor an obstacle (a legend, say)
is taken. A label with no free candidate is left out (thinned) and reported as None.
All coordinates are in one pixel space (x to the right, y up or down, as long as the
caller is consistent). Used by the PNG scatter (sizes measured by matplotlib) and by
the page's SVG scatter (sizes from a monospace font). No stability promise; internal.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from interv.errors import IntervError

__all__ = ["Box", "place_labels"]


@dataclass(frozen=True)
class Box:
    """An axis-aligned box ``[x0, x1] x [y0, y1]`` in pixels."""

    x0: float
    y0: float
    x1: float
    y1: float

    def overlaps(self, other: Box, gap: float = 0.0) -> bool:
        """Whether the boxes intersect, or come closer than ``gap`` pixels."""
        return not (
            self.x1 + gap <= other.x0
            or other.x1 + gap <= self.x0
            or self.y1 + gap <= other.y0
            or other.y1 + gap <= self.y0
        )

    def inside(self, other: Box) -> bool:
        """Whether this box lies within ``other``."""
        return (
            self.x0 >= other.x0
            and self.x1 <= other.x1
            and self.y0 >= other.y0
            and self.y1 <= other.y1
        )


# unit directions: right, left, up, down (y up), then the diagonals
_DIRECTIONS = ((1, 0), (-1, 0), (0, 1), (0, -1), (1, 1), (-1, 1), (1, -1), (-1, -1))


def _candidate(x: float, y: float, w: float, h: float, dx: int, dy: int, r: float) -> Box:
    # the box touches the circle of radius r around the point on the side (dx, dy)
    left = x + r if dx > 0 else x - r - w if dx < 0 else x - w / 2
    bottom = y + r if dy > 0 else y - r - h if dy < 0 else y - h / 2
    return Box(left, bottom, left + w, bottom + h)


def place_labels(
    points: Sequence[tuple[float, float]],
    sizes: Sequence[tuple[float, float]],
    bounds: Box,
    *,
    marker_radius: float = 3.0,
    obstacles: Sequence[Box] = (),
    markers: Sequence[tuple[float, float]] | None = None,
    radii: Sequence[float] = (2.0, 10.0, 20.0),
    gap: float = 1.0,
) -> list[Box | None]:
    """Boxes for labels of ``points`` (in priority order), None where one does not fit.

    Args:
        points: ``(x, y)`` of each labelled point, most important first.
        sizes: ``(width, height)`` of each label, pixels.
        bounds: the plot area every label must stay inside.
        marker_radius: radius of a point marker; labels keep clear of every marker.
        obstacles: more boxes to keep clear of (a legend).
        markers: every point marker drawn (default: ``points``), labelled or not.
        radii: distances from the point to try, nearest first (pixels, beyond the
            marker); beyond the first, the caller should draw a leader line.
        gap: minimum distance between two labels, pixels.

    Returns:
        One box per point: where its label goes, or None (left out).
    """
    if len(points) != len(sizes):
        raise IntervError(
            f"place_labels needs one size per point; got {len(points)} points and "
            f"{len(sizes)} sizes"
        )
    m = marker_radius
    marker_boxes = [
        Box(x - m, y - m, x + m, y + m) for x, y in (points if markers is None else markers)
    ]
    blocked = [*obstacles, *marker_boxes]
    placed: list[Box] = []
    result: list[Box | None] = []
    for (x, y), (w, h) in zip(points, sizes, strict=True):
        chosen = None
        for r in radii:
            for dx, dy in _DIRECTIONS:
                box = _candidate(x, y, w, h, dx, dy, m + r)
                if (
                    box.inside(bounds)
                    and not any(box.overlaps(other, gap) for other in placed)
                    and not any(box.overlaps(other) for other in blocked)
                ):
                    chosen = box
                    break
            if chosen is not None:
                break
        if chosen is not None:
            placed.append(chosen)
        result.append(chosen)
    return result
