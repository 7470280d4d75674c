"""Concentration metrics: analytic oracles, bounds, invariances and broadcasting."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from test_metrics_strategies import PROPERTY_SETTINGS, row_batches

from interv import metrics


def causal_mask(n_pos: int) -> torch.Tensor:
    """``[query_pos, key_pos]`` bool, True where key <= query."""
    return torch.ones(n_pos, n_pos, dtype=torch.bool).tril()


def uniform_causal_rows(mask: torch.Tensor) -> torch.Tensor:
    weights = mask.to(torch.float64)
    return weights / weights.sum(dim=-1, keepdim=True)


def test_one_hot_row_has_zero_entropy_and_zero_normalized_entropy():
    row = torch.tensor([0.0, 0.0, 1.0, 0.0])
    assert metrics.entropy(row).item() == 0.0
    assert metrics.normalized_entropy(row).item() == 0.0
    assert metrics.effective_support(row).item() == 1.0
    assert metrics.max_weight(row).item() == 1.0


@pytest.mark.parametrize("k", [2, 3, 7])
def test_uniform_over_k_available_keys_has_entropy_log_k_and_normalized_entropy_one(k):
    mask = torch.arange(10) < k
    row = mask.to(torch.float32) / k
    assert metrics.entropy(row, key_mask=mask).item() == pytest.approx(math.log(k), abs=1e-6)
    assert metrics.entropy(row, key_mask=mask, unit="bits").item() == pytest.approx(
        math.log2(k), abs=1e-6
    )
    assert metrics.normalized_entropy(row, key_mask=mask).item() == pytest.approx(1.0, abs=1e-6)
    assert metrics.effective_support(row, key_mask=mask).item() == pytest.approx(k, rel=1e-6)
    assert metrics.available_keys(row, key_mask=mask).item() == k


def test_mirrored_rows_have_equal_entropy():
    rows = torch.tensor([[0.8, 0.1, 0.1, 0.0], [0.0, 0.1, 0.1, 0.8]])
    expected = -(0.8 * math.log(0.8) + 2 * 0.1 * math.log(0.1))
    entropies = metrics.entropy(rows)
    assert entropies.tolist() == pytest.approx([expected, expected], abs=1e-12)


def test_causal_row_at_query_position_t_has_t_plus_one_available_keys():
    mask = causal_mask(6)
    n = metrics.available_keys(uniform_causal_rows(mask), key_mask=mask)
    assert n.tolist() == [1, 2, 3, 4, 5, 6]


def test_left_padding_reduces_available_keys_by_the_padding_length():
    n_pos, n_pad = 6, 2
    key_is_real = torch.arange(n_pos) >= n_pad
    mask = causal_mask(n_pos) & key_is_real  # [query_pos, key_pos]
    mask[:n_pad] = False  # padding queries have no candidate key
    rows = torch.zeros(n_pos, n_pos, dtype=torch.float64)
    rows[n_pad:] = uniform_causal_rows(mask[n_pad:])
    n = metrics.available_keys(rows, key_mask=mask)
    assert n.tolist() == [0, 0, 1, 2, 3, 4]
    entropies = metrics.entropy(rows, key_mask=mask)
    assert entropies[:n_pad].isnan().all()
    assert entropies[n_pad:].tolist() == pytest.approx([math.log(k) for k in (1, 2, 3, 4)])


def test_normalized_entropy_is_nan_not_zero_with_at_most_one_available_key():
    mask = causal_mask(3)
    normalized = metrics.normalized_entropy(uniform_causal_rows(mask), key_mask=mask)
    assert math.isnan(normalized[0].item())
    assert normalized[1:].tolist() == pytest.approx([1.0, 1.0])


def test_top_k_mass_sums_the_k_largest_available_weights():
    row = torch.tensor([0.1, 0.5, 0.05, 0.35])
    assert metrics.top_k_mass(row, 1).item() == pytest.approx(0.5)
    assert metrics.top_k_mass(row, 2).item() == pytest.approx(0.85)
    assert metrics.top_k_mass(row, 10).item() == pytest.approx(1.0)


def test_masked_keys_do_not_count_even_when_their_weight_is_tiny():
    row = torch.tensor([0.5, 0.5, 1e-30])
    mask = torch.tensor([True, True, False])
    assert metrics.available_keys(row, key_mask=mask).item() == 2
    assert metrics.normalized_entropy(row, key_mask=mask).item() == pytest.approx(1.0)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32])
def test_low_precision_rows_are_computed_in_float64(dtype):
    logits = torch.linspace(-3, 3, 50)
    rows = torch.softmax(logits.to(dtype), dim=-1)
    reference = metrics.entropy(rows.to(torch.float64) / rows.to(torch.float64).sum())
    result = metrics.entropy(rows)
    assert result.dtype == torch.float64
    assert result.item() == pytest.approx(reference.item(), abs=1e-12)


@PROPERTY_SETTINGS
@given(row_batches())
def test_entropy_lies_between_zero_and_log_n(batch):
    mask, (rows,) = batch
    n = mask.sum(dim=-1).to(torch.float64)
    entropies = metrics.entropy(rows, key_mask=mask)
    assert bool((entropies >= -1e-12).all())
    assert bool((entropies <= n.log() + 1e-12).all())
    normalized = metrics.normalized_entropy(rows, key_mask=mask)
    defined = n > 1
    assert bool(normalized[~defined].isnan().all())
    assert bool(((normalized[defined] >= -1e-12) & (normalized[defined] <= 1 + 1e-12)).all())
    support = metrics.effective_support(rows, key_mask=mask)
    assert bool(((support >= 1 - 1e-12) & (support <= n + 1e-9)).all())
    assert bool((metrics.max_weight(rows, key_mask=mask) >= 1 / n - 1e-12).all())


@PROPERTY_SETTINGS
@given(row_batches(), st.integers(0, 2**31 - 1))
def test_metrics_are_invariant_to_permuting_keys_together_with_the_mask(batch, seed):
    mask, (rows,) = batch
    order = torch.randperm(rows.shape[-1], generator=torch.Generator().manual_seed(seed))
    for metric in (
        metrics.entropy,
        metrics.normalized_entropy,
        metrics.max_weight,
    ):
        original = metric(rows, key_mask=mask)
        permuted = metric(rows[..., order], key_mask=mask[..., order])
        torch.testing.assert_close(permuted, original, equal_nan=True, rtol=0, atol=1e-12)
    original = metrics.top_k_mass(rows, 2, key_mask=mask)
    permuted = metrics.top_k_mass(rows[..., order], 2, key_mask=mask[..., order])
    torch.testing.assert_close(permuted, original, rtol=0, atol=1e-12)


@PROPERTY_SETTINGS
@given(row_batches())
def test_metrics_broadcast_over_leading_dims_like_a_loop_over_rows(batch):
    mask, (rows,) = batch
    flat_rows, flat_mask = rows.reshape(-1, rows.shape[-1]), mask.reshape(-1, mask.shape[-1])
    batched = metrics.entropy(rows, key_mask=mask)
    assert batched.shape == rows.shape[:-1]
    looped = torch.stack(
        [metrics.entropy(r, key_mask=m) for r, m in zip(flat_rows, flat_mask, strict=True)]
    )
    torch.testing.assert_close(batched.reshape(-1), looped, rtol=0, atol=1e-12)


def test_a_shared_mask_broadcasts_against_head_and_batch_dims():
    mask = causal_mask(4)  # [query_pos, key_pos]
    rows = uniform_causal_rows(mask).expand(2, 3, 4, 4)  # [batch, head_index, query, key]
    entropies = metrics.entropy(rows, key_mask=mask)
    assert entropies.shape == (2, 3, 4)
    expected = torch.tensor([math.log(k) for k in (1, 2, 3, 4)], dtype=torch.float64)
    torch.testing.assert_close(entropies, expected.expand(2, 3, 4))


def test_off_row_sink_deficit_counts_as_one_more_available_key():
    row = torch.tensor([0.25, 0.25])  # the other half sits on an off-row learned sink
    expected = -(0.5 * math.log(0.5) + 2 * 0.25 * math.log(0.25))
    assert metrics.entropy(row, allow_deficit=True).item() == pytest.approx(expected)
    assert metrics.normalized_entropy(row, allow_deficit=True).item() == pytest.approx(
        expected / math.log(3)
    )
    assert metrics.max_weight(row, allow_deficit=True).item() == pytest.approx(0.5)
