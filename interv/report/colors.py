"""Colour scales of the report page, without matplotlib.

- :func:`sequential`: viridis (dark purple = low, yellow = high), for concentration.
- :func:`diverging`: matplotlib's ``RdBu_r`` (blue = negative, white = 0, red =
  positive), for effects, symmetric around 0.

Both take a value already scaled to [0, 1] and return a CSS colour ``#rrggbb``, sampled
from the matplotlib colour maps at evenly spaced anchors and interpolated linearly in
sRGB. :func:`text_color` picks black or white text for a background. No stability
promise; internal to :mod:`interv.report`.
"""

from __future__ import annotations

import math

from interv.errors import IntervError

__all__ = ["css_gradient", "diverging", "sequential", "text_color"]

# matplotlib's viridis and RdBu_r at 0, 1/8, ..., 1
_VIRIDIS = (
    (68, 1, 84),
    (71, 45, 123),
    (59, 82, 139),
    (44, 114, 142),
    (33, 145, 140),
    (40, 174, 128),
    (94, 201, 98),
    (173, 220, 48),
    (253, 231, 37),
)
_RDBU_R = (
    (5, 48, 97),
    (42, 113, 178),
    (107, 172, 209),
    (194, 221, 236),
    (247, 246, 246),
    (251, 204, 180),
    (228, 128, 102),
    (186, 40, 50),
    (103, 0, 31),
)
_MISSING = "#e0e0e0"


def _sample(anchors: tuple[tuple[int, int, int], ...], t: float) -> str:
    if math.isnan(t):
        return _MISSING
    t = min(max(t, 0.0), 1.0) * (len(anchors) - 1)
    i = min(int(t), len(anchors) - 2)
    frac = t - i
    rgb = [round(a + (b - a) * frac) for a, b in zip(anchors[i], anchors[i + 1], strict=True)]
    return "#{:02x}{:02x}{:02x}".format(*rgb)


def sequential(t: float) -> str:
    """Viridis at ``t`` in [0, 1] (clipped); light grey for NaN."""
    return _sample(_VIRIDIS, t)


def diverging(t: float) -> str:
    """``RdBu_r`` at ``t`` in [0, 1] (0.5 = white); light grey for NaN."""
    return _sample(_RDBU_R, t)


def text_color(background: str) -> str:
    """``#000`` or ``#fff``, whichever contrasts more with ``background`` (``#rrggbb``)."""
    r, g, b = (int(background[i : i + 2], 16) / 255 for i in (1, 3, 5))
    luminance = 0.2126 * r + 0.7152 * g + 0.0722 * b
    return "#000" if luminance > 0.45 else "#fff"


def css_gradient(scale: str) -> str:
    """A left-to-right CSS ``linear-gradient`` of ``"sequential"`` or ``"diverging"``."""
    anchors = {"sequential": _VIRIDIS, "diverging": _RDBU_R}.get(scale)
    if anchors is None:
        raise IntervError(f"unknown colour scale {scale!r}; choose 'sequential' or 'diverging'")
    stops = ", ".join("#{:02x}{:02x}{:02x}".format(*rgb) for rgb in anchors)
    return f"linear-gradient(to right, {stops})"
