"""Compositional view: clr, Aitchison distance, its orthogonal sink/content split, zeros."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import assume, given
from hypothesis import strategies as st
from test_metrics_strategies import PROPERTY_SETTINGS, row_batches

from interv import metrics


def test_clr_matches_the_hand_computation_and_is_zero_at_masked_keys():
    rows = torch.tensor([0.5, 0.25, 0.25, 0.0])
    mask = torch.tensor([True, True, True, False])
    logs = [math.log(0.5), math.log(0.25), math.log(0.25)]
    centre = sum(logs) / 3
    expected = [value - centre for value in logs] + [0.0]
    assert metrics.clr(rows, key_mask=mask).tolist() == pytest.approx(expected, abs=1e-12)


def test_aitchison_distance_matches_the_hand_computation():
    x = torch.tensor([0.5, 0.25, 0.25])
    y = torch.tensor([0.25, 0.25, 0.5])
    # clr(x) - clr(y) = log(x / y) centred: log 2, 0, -log 2 (already centred)
    expected = math.sqrt(2) * math.log(2)
    assert metrics.aitchison_distance(x, y).item() == pytest.approx(expected, abs=1e-12)


def test_ragged_masks_centre_each_row_over_its_own_keys():
    rows = torch.tensor([[0.5, 0.5, 0.0], [0.2, 0.3, 0.5]])
    mask = torch.tensor([[True, True, False], [True, True, True]])
    values = metrics.clr(rows, key_mask=mask)
    torch.testing.assert_close(values.sum(dim=-1), torch.zeros(2, dtype=torch.float64))
    assert values[0].tolist() == [0.0, 0.0, 0.0]


def test_zero_replacement_replaces_zeros_recloses_and_reports_the_count():
    x = torch.tensor([0.7, 0.3, 0.0], dtype=torch.float64)
    y = torch.tensor([0.5, 0.0, 0.5], dtype=torch.float64)
    split = metrics.aitchison_split(x, y, zero_replacement=1e-6)
    assert split.n_zeros_replaced.item() == 2
    replaced_x = torch.tensor([0.7, 0.3, 1e-6], dtype=torch.float64)
    replaced_y = torch.tensor([0.5, 1e-6, 0.5], dtype=torch.float64)
    expected = metrics.aitchison_distance(
        replaced_x / replaced_x.sum(), replaced_y / replaced_y.sum()
    )
    torch.testing.assert_close(split.distance, expected, rtol=0, atol=1e-12)


def test_a_masked_zero_needs_no_replacement():
    rows = torch.tensor([0.6, 0.4, 0.0])
    mask = torch.tensor([True, True, False])
    assert metrics.clr(rows, key_mask=mask)[2].item() == 0.0


@PROPERTY_SETTINGS
@given(row_batches(count=2, positive=True), st.sets(st.integers(0, 7), max_size=3))
def test_aitchison_split_is_orthogonal(batch, extra_sinks):
    mask, (x, y) = batch
    positions = torch.arange(x.shape[-1])
    sink = ((positions == 0) | torch.isin(positions, torch.tensor(sorted(extra_sinks)))) & mask
    split = metrics.aitchison_split(x, y, sink=sink, key_mask=mask)
    torch.testing.assert_close(
        split.distance.square(),
        split.sink_term.square() + split.content_term.square(),
        rtol=0,
        atol=1e-9,
    )
    torch.testing.assert_close(split.distance, metrics.aitchison_distance(x, y, key_mask=mask))
    assert bool((split.n_zeros_replaced == 0).all())


@PROPERTY_SETTINGS
@given(row_batches(count=2, positive=True))
def test_content_distance_is_unchanged_by_renormalizing_after_dropping_the_sink(batch):
    mask, (x, y) = batch
    content_mask = mask.clone()
    content_mask[..., 0] = False
    has_content = content_mask.any(dim=-1)
    assume(bool(has_content.any()))
    x, y, mask, content_mask = (
        x[has_content],
        y[has_content],
        mask[has_content],
        content_mask[has_content],
    )
    split = metrics.aitchison_split(x, y, key_mask=mask)
    content_x = metrics.sink_split(x, key_mask=mask).content
    content_y = metrics.sink_split(y, key_mask=mask).content
    renormalized = metrics.aitchison_distance(content_x, content_y, key_mask=content_mask)
    torch.testing.assert_close(split.content_term, renormalized, rtol=0, atol=1e-9)


@PROPERTY_SETTINGS
@given(row_batches(positive=True), st.floats(0.1, 10.0))
def test_clr_sums_to_zero_and_ignores_the_scale_of_the_row(batch, scale):
    mask, (rows,) = batch
    values = metrics.clr(rows, key_mask=mask)
    torch.testing.assert_close(
        values.sum(dim=-1), torch.zeros(values.shape[:-1], dtype=torch.float64)
    )
    powered = rows.pow(scale) * mask
    powered = powered / powered.sum(dim=-1, keepdim=True)  # power transform scales clr
    torch.testing.assert_close(
        metrics.clr(powered, key_mask=mask), scale * values, rtol=1e-9, atol=1e-9
    )
