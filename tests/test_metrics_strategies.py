"""Hypothesis strategies for attention rows, shared by the tests/test_metrics_*.py files.

The tests here pin the strategies' own contract (valid rows, position 0 available),
so a broken generator cannot make the property tests pass vacuously.
"""

from __future__ import annotations

import math

import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from interv.metrics._rows import prepare_rows

PROPERTY_SETTINGS = settings(max_examples=60, deadline=None)


@st.composite
def row_batches(draw, *, count: int = 1, positive: bool = False, max_keys: int = 8):
    """``(key_mask, [rows, ...])``: ``count`` float64 row tensors sharing one mask.

    Shapes are ``[*lead, key]`` with 0-2 leading dims; key 0 is always available (the
    default sink); masked keys hold exactly 0; every row sums to 1 over available keys.
    With ``positive=True`` available weights are > 0 (for log-ratios).
    """
    n_keys = draw(st.integers(1, max_keys))
    lead = draw(st.lists(st.integers(1, 3), max_size=2))
    shape = (*lead, n_keys)
    size = math.prod(shape)
    mask = torch.tensor(draw(st.lists(st.booleans(), min_size=size, max_size=size)))
    mask = mask.reshape(shape)
    mask[..., 0] = True
    weight = st.floats(1e-4, 1.0) if positive else st.one_of(st.just(0.0), st.floats(1e-6, 1.0))
    one_hot = torch.zeros(shape, dtype=torch.float64)
    one_hot[..., 0] = 1.0
    batches = []
    for _ in range(count):
        raw = torch.tensor(draw(st.lists(weight, min_size=size, max_size=size)))
        raw = torch.where(mask, raw.reshape(shape).to(torch.float64), 0.0)
        total = raw.sum(dim=-1, keepdim=True)
        batches.append(torch.where(total > 0, raw / torch.where(total > 0, total, 1.0), one_hot))
    return mask, batches


@PROPERTY_SETTINGS
@given(row_batches(count=2))
def test_generated_rows_pass_validation_and_keep_key_zero_available(batch):
    mask, batches = batch
    assert bool(mask[..., 0].all())
    for rows in batches:
        prepared = prepare_rows(rows, mask)
        assert torch.equal(prepared.n, mask.sum(dim=-1))
        assert bool((rows[~mask] == 0).all())


@PROPERTY_SETTINGS
@given(row_batches(positive=True))
def test_positive_rows_have_no_zero_among_available_keys(batch):
    mask, (rows,) = batch
    assert bool((rows[mask] > 0).all())
