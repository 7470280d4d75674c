"""Resampling statistics: bootstrap intervals and rank correlation (plain torch).

Every interval of interv comes from a percentile bootstrap over *prompts* (or items): the
prompts are resampled with replacement ``n_bootstrap`` times from a generator seeded
with ``seed``, the statistic is recomputed on each resample, and the interval is the
``(1 - level) / 2`` and ``(1 + level) / 2`` quantiles of those recomputations. Rank
correlation is Spearman's rho: the Pearson correlation of average ranks (ties share
the mean of the ranks they span).

Minimums (:data:`MIN_ITEMS`) are the functions' own, never the caller's: no interval from
fewer than 3 prompts (a bootstrap of one prompt repeats it, ``[x, x]``; of two, it has three
possible means) and no rank correlation of fewer than 3 items (two items give rho = +-1
whatever they are): :func:`percentile_interval` needs the number of prompts resampled
(``n_items``, a required argument) and :func:`spearman` counts its items; below the minimum
the value is NaN, shown as n/a, and :data:`TOO_FEW` (or :func:`too_few`) says why. Repeated
prompts are not independent samples: every prompt set interv measures refuses a repeated
prompt (:func:`interv.tasks.tokenized.check_distinct`), so a prompt is counted once.

>>> percentile_interval(torch.tensor([0.9, 0.9, 0.9]), 0.95, n_items=1)
(nan, nan)
>>> too_few(1)
'n/a: 1 prompt, fewer than 3 (no interval)'
"""

from __future__ import annotations

import torch

from interv.errors import IntervError

__all__ = [
    "MIN_ITEMS",
    "TOO_FEW",
    "bootstrap_indices",
    "bootstrap_mean_ci",
    "percentile_interval",
    "spearman",
    "too_few",
]

MIN_ITEMS = 3
"""The fewest prompts an interval, and the fewest items a rank correlation, is computed from."""

TOO_FEW = (
    f"n/a: no interval from fewer than {MIN_ITEMS} prompts, and no rank correlation of fewer "
    f"than {MIN_ITEMS} items"
)
"""Why an interval or a rank correlation is NaN (n/a) for too few prompts or items."""


def too_few(n_items: int, what: str = "prompt", statistic: str = "interval") -> str:
    """Why a ``statistic`` over ``n_items`` ``what``s is n/a ("" when there are enough)."""
    if n_items >= MIN_ITEMS:
        return ""
    plural = "" if n_items == 1 else "s"
    return f"n/a: {n_items} {what}{plural}, fewer than {MIN_ITEMS} (no {statistic})"


def bootstrap_indices(n_prompts: int, n_bootstrap: int, seed: int) -> torch.Tensor:
    """``[n_bootstrap, n_prompts]`` int64 prompt indices drawn with replacement, seeded."""
    if n_bootstrap < 1:
        raise IntervError(f"n_bootstrap must be >= 1; got {n_bootstrap}")
    if n_prompts == 0:
        return torch.zeros(n_bootstrap, 0, dtype=torch.int64)
    generator = torch.Generator().manual_seed(seed)
    return torch.randint(0, n_prompts, (n_bootstrap, n_prompts), generator=generator)


def percentile_interval(
    samples: torch.Tensor, level: float, *, n_items: int
) -> tuple[float, float]:
    """The central ``level`` percentile interval of 1-D ``samples`` (NaN samples ignored).

    ``n_items``: how many prompts (or items) the samples were resampled from (required:
    the minimum is this function's); fewer than :data:`MIN_ITEMS` gives ``(nan, nan)``
    (:func:`too_few` says why).
    """
    if not 0 < level < 1:
        raise IntervError(f"confidence level must lie in (0, 1); got {level}")
    if isinstance(n_items, bool) or not isinstance(n_items, int) or n_items < 0:
        raise IntervError(f"n_items must be a count of resampled items; got {n_items!r}")
    if n_items < MIN_ITEMS:
        return (float("nan"), float("nan"))
    finite = samples[~samples.isnan()].to(torch.float64)
    if finite.numel() == 0:
        return (float("nan"), float("nan"))
    tail = (1 - level) / 2
    quantiles = torch.quantile(finite, torch.tensor([tail, 1 - tail], dtype=torch.float64))
    return (float(quantiles[0]), float(quantiles[1]))


def bootstrap_mean_ci(
    values: torch.Tensor, indices: torch.Tensor, level: float
) -> tuple[float, float]:
    """Percentile bootstrap interval of the mean of ``[n_prompts]`` ``values``.

    Args:
        values: per-prompt values, in any unit (the interval has the same unit).
        indices: ``[n_bootstrap, n_prompts]`` resampled prompt indices.
        level: confidence level in (0, 1), e.g. 0.95.

    Returns ``(nan, nan)`` for fewer than :data:`MIN_ITEMS` prompts (:data:`TOO_FEW`).
    """
    samples = values.to(torch.float64)[indices].mean(dim=-1)
    return percentile_interval(samples, level, n_items=int(values.shape[-1]))


def _average_ranks(x: torch.Tensor) -> torch.Tensor:
    """``[..., n]`` -> average ranks 1..n along the last axis (ties share their mean rank).

    ``rank = (values below) + (values equal + 1) / 2``, counted by binary search in the
    sorted row: ``O(n log n)`` per row.
    """
    ordered = x.sort(dim=-1).values.contiguous()
    below = torch.searchsorted(ordered, x.contiguous(), right=False)
    at_or_below = torch.searchsorted(ordered, x.contiguous(), right=True)
    return below.to(torch.float64) + ((at_or_below - below).to(torch.float64) + 1) / 2


def spearman(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """Spearman rank correlation of ``x`` and ``y`` along the last axis.

    Args:
        x, y: ``[..., n]`` finite values (same shape).

    Returns:
        ``[...]`` float64 rho in [-1, 1]; NaN where either side is constant, and
        everywhere when ``n`` is below :data:`MIN_ITEMS` (:data:`TOO_FEW`).
    """
    if x.shape != y.shape:
        raise IntervError(f"spearman needs equal shapes; got {tuple(x.shape)} and {tuple(y.shape)}")
    if x.shape[-1] < MIN_ITEMS:
        return torch.full(x.shape[:-1], torch.nan, dtype=torch.float64)
    rx = _average_ranks(x)
    ry = _average_ranks(y)
    rx = rx - rx.mean(dim=-1, keepdim=True)
    ry = ry - ry.mean(dim=-1, keepdim=True)
    denominator = (rx.square().sum(dim=-1) * ry.square().sum(dim=-1)).sqrt()
    numerator = (rx * ry).sum(dim=-1)
    return torch.where(denominator > 0, numerator / denominator.clamp(min=1e-300), torch.nan)
