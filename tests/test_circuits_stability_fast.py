"""The vectorized stability ranking equals the per-resample sorts it replaced.

- ``stable_top`` is ``torch.sort(-keys, stable=True).indices[:, :k]`` (ties by index, NaN
  last), on keys with many ties.
- ``resampled_tops`` (only the edges that can reach a resample's top) equals the top of
  every edge.
- ``resample_circuits`` equals the one-resample-at-a-time rule: the resample's own top
  ``n_verified`` by ``|estimate|`` and the audited edges ranked by ``|exact|`` first, then
  the rest by ``|estimate|`` (:func:`exact_first` on every edge).
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from interv.circuits.stability import (
    exact_first,
    resample_circuits,
    resampled_tops,
    stable_top,
)
from interv.stats import bootstrap_indices


def _weights(n: int, n_resamples: int, seed: int) -> torch.Tensor:
    draws = bootstrap_indices(n, n_resamples, seed)
    weights = torch.zeros(n_resamples, n, dtype=torch.float64)
    weights.scatter_add_(1, draws, torch.ones_like(draws, dtype=torch.float64))
    return weights / n


@pytest.mark.parametrize("seed", range(6))
def test_stable_top_is_the_stable_sort_prefix(seed):
    generator = torch.Generator().manual_seed(seed)
    width = int(torch.randint(1, 200, (1,), generator=generator))
    keys = torch.randint(0, 4, (5, width), generator=generator).double()  # many ties
    keys[torch.rand(5, width, generator=generator) < 0.1] = torch.nan
    for k in (0, 1, width // 2, width, width + 3):
        expected = torch.sort(-keys, dim=1, stable=True).indices[:, : min(k, width)]
        assert torch.equal(stable_top(keys, k), expected)


def test_resampled_tops_equal_the_top_of_every_edge():
    generator = torch.Generator().manual_seed(0)
    scale = torch.randn(5000, 1, generator=generator, dtype=torch.float64).mul(2).exp()
    per_prompt = torch.randn(5000, 6, generator=generator, dtype=torch.float64) * scale
    weights = _weights(6, 70, 1)
    full = torch.sort(-(per_prompt @ weights.T).T.abs(), dim=1, stable=True).indices[:, :30]
    assert torch.equal(resampled_tops(per_prompt, weights, 30), full)


def _reference(result, weights, exact, size):
    """The per-resample rule, one sort of every edge per resample."""
    rows = []
    for w in weights:
        estimates = result.scores.per_prompt @ w
        verified = torch.sort(-estimates.abs(), stable=True).indices[: result.audit.n_verified]
        checked = torch.zeros(result.graph.n_edges, dtype=torch.bool)
        checked[result.audit.audited] = True
        checked[verified] = True
        rows.append(exact_first(checked, exact @ w, estimates)[:size])
    return torch.stack(rows)


@pytest.mark.parametrize("n_verified, n_audited, size", [(5, 4, 3), (5, 4, 12), (0, 3, 7)])
def test_resample_circuits_equal_the_per_resample_ranking(n_verified, n_audited, size):
    generator = torch.Generator().manual_seed(n_verified + size)
    n_edges, n = 300, 7
    per_prompt = torch.randn(n_edges, n, generator=generator, dtype=torch.float64)
    audited = torch.randperm(n_edges, generator=generator)[:n_audited]
    result = SimpleNamespace(
        graph=SimpleNamespace(n_edges=n_edges),
        audit=SimpleNamespace(audited=audited, n_verified=n_verified),
        scores=SimpleNamespace(per_prompt=per_prompt),
    )
    weights = _weights(n, 40, 2)
    depth = size + n_verified + n_audited
    tops = resampled_tops(per_prompt, weights, depth)
    exact = torch.zeros(n_edges, n, dtype=torch.float64)
    needed = torch.zeros(n_edges, dtype=torch.bool)
    needed[audited] = True
    needed[tops[:, :n_verified].flatten()] = True
    exact[needed] = torch.randn(int(needed.sum()), n, generator=generator, dtype=torch.float64)
    got = resample_circuits(result, tops, exact, weights, size)
    assert torch.equal(got, _reference(result, weights, exact, size))
