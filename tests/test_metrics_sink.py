"""Sink split: the grouping identity, NaN content metrics, and exact entropy-change splits."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from test_metrics_strategies import PROPERTY_SETTINGS, row_batches

from interv import metrics
from interv.metrics import mean_entropy_change


def binary_entropy(s: float) -> float:
    return -sum(p * math.log(p) for p in (s, 1 - s) if p > 0)


def test_all_mass_on_the_sink_gives_sink_mass_one_entropy_zero_and_nan_content():
    split = metrics.sink_split(torch.tensor([[1.0, 0.0, 0.0]]))
    assert split.sink_mass.item() == 1.0
    assert split.entropy.item() == 0.0
    assert split.content_term.item() == 0.0
    assert split.content_entropy.isnan().all()
    assert split.content_normalized_entropy.isnan().all()
    assert split.content.isnan().all()
    assert split.n_undefined_content == 1


def test_hand_computed_split_of_a_sink_row():
    split = metrics.sink_split(torch.tensor([0.6, 0.1, 0.3, 0.0]), unit="bits")
    q = [0.25, 0.75]
    content_entropy = -sum(p * math.log2(p) for p in q)
    assert split.sink_mass.item() == pytest.approx(0.6)
    assert split.content.tolist() == pytest.approx([0.0, 0.25, 0.75, 0.0])
    assert split.sink_term.item() == pytest.approx(binary_entropy(0.6) / math.log(2))
    assert split.content_entropy.item() == pytest.approx(content_entropy)
    assert split.content_normalized_entropy.item() == pytest.approx(content_entropy / math.log2(3))
    assert split.n_content.item() == 3


def test_a_multi_position_sink_moves_its_internal_entropy_into_the_sink_part():
    split = metrics.sink_split(torch.tensor([0.3, 0.3, 0.4]), sink=[0, 1])
    assert split.sink_mass.item() == pytest.approx(0.6)
    assert split.sink_internal_term.item() == pytest.approx(0.6 * math.log(2))
    assert split.content_entropy.item() == 0.0
    assert split.content_normalized_entropy.isnan().all()  # one content key left


def test_off_row_sink_deficit_is_sink_mass():
    split = metrics.sink_split(torch.tensor([0.2, 0.1, 0.1]), allow_deficit=True)
    assert split.sink_mass.item() == pytest.approx(0.8)
    assert split.content.shape == (3,)
    assert split.content.tolist() == pytest.approx([0.0, 0.5, 0.5])
    assert split.sink_internal_term.item() == pytest.approx(
        -(0.2 * math.log(0.25) + 0.6 * math.log(0.75))
    )


@PROPERTY_SETTINGS
@given(row_batches(), st.sets(st.integers(0, 7), max_size=3), st.sampled_from(["nats", "bits"]))
def test_grouping_identity_holds_to_1e_9(batch, extra_sinks, unit):
    mask, (rows,) = batch
    positions = torch.arange(rows.shape[-1])
    sink = (positions == 0) | torch.isin(positions, torch.tensor(sorted(extra_sinks)))
    sink = sink & mask  # per-row sink mask: the chosen positions that are available
    split = metrics.sink_split(rows, sink=sink, key_mask=mask, unit=unit)
    reconstructed = split.sink_term + split.sink_internal_term + split.content_term
    torch.testing.assert_close(split.entropy, reconstructed, rtol=0, atol=1e-9)
    torch.testing.assert_close(
        split.entropy, metrics.entropy(rows, key_mask=mask, unit=unit), rtol=0, atol=1e-12
    )
    defined = ~split.content_entropy.isnan()
    torch.testing.assert_close(
        split.content_term[defined],
        ((1 - split.sink_mass) * split.content_entropy)[defined],
        rtol=0,
        atol=1e-12,
    )


@PROPERTY_SETTINGS
@given(row_batches(count=2), st.sampled_from(["nats", "bits"]))
def test_entropy_change_splits_exactly_into_sink_and_content_parts(batch, unit):
    mask, (before, after) = batch
    change = metrics.entropy_change(before, after, key_mask=mask, unit=unit)
    expected_total = metrics.entropy(after, key_mask=mask, unit=unit) - metrics.entropy(
        before, key_mask=mask, unit=unit
    )
    torch.testing.assert_close(change.total, expected_total, rtol=0, atol=1e-12)
    torch.testing.assert_close(
        change.total, change.sink_part + change.content_part, rtol=0, atol=1e-9
    )
    assert not bool(change.sink_part.isnan().any())


def test_entropy_change_components_match_the_hand_split():
    before = torch.tensor([0.2, 0.4, 0.4])  # s = 0.2, H(q) = log 2
    after = torch.tensor([0.6, 0.1, 0.3])  # s = 0.6, H(q) = H(0.25, 0.75)
    content_after = binary_entropy(0.25)
    change = metrics.entropy_change(before, after)
    assert change.sink_term_change.item() == pytest.approx(
        binary_entropy(0.6) - binary_entropy(0.2)
    )
    assert change.sink_growth.item() == pytest.approx(-0.4 * (math.log(2) + content_after) / 2)
    assert change.content_part.item() == pytest.approx((1 - 0.4) * (content_after - math.log(2)))
    assert change.sink_internal_change.item() == 0.0


def test_a_row_that_had_no_content_attributes_its_whole_change_to_the_sink():
    change = metrics.entropy_change(torch.tensor([1.0, 0.0, 0.0]), torch.tensor([0.5, 0.25, 0.25]))
    assert change.content_part.item() == 0.0
    assert change.total.item() == pytest.approx(change.sink_part.item(), abs=1e-15)


def random_rows(shape, seed, sink_bias):
    generator = torch.Generator().manual_seed(seed)
    logits = torch.randn(shape, generator=generator, dtype=torch.float64)
    logits[..., 0] += sink_bias
    return torch.softmax(logits, dim=-1)


@pytest.mark.parametrize("unit", ["nats", "bits"])
def test_mean_entropy_change_is_exact_across_different_row_lengths(unit):
    short = random_rows((5, 3, 8), seed=0, sink_bias=1.0)  # [batch, head, key] at 8 keys
    long_mask = torch.arange(20) < torch.arange(20, 10, -1).unsqueeze(-1)  # ragged right pad
    long = random_rows((10, 20), seed=1, sink_bias=3.0).masked_fill(~long_mask, 0.0)
    long = long / long.sum(dim=-1, keepdim=True)
    before = metrics.sink_split(short, unit=unit)
    after = metrics.sink_split(long, key_mask=long_mask, unit=unit)
    change = mean_entropy_change(before, after)
    assert change.total.shape == ()
    expected_total = after.entropy.mean() - before.entropy.mean()
    torch.testing.assert_close(change.total, expected_total, rtol=0, atol=1e-12)
    torch.testing.assert_close(
        change.total, change.sink_part + change.content_part, rtol=0, atol=1e-12
    )
    assert change.sink_growth.item() < 0  # more sink mass at the longer context


def test_mean_entropy_change_skips_rows_without_available_keys():
    rows = torch.tensor([[0.5, 0.5], [0.0, 0.0]])
    mask = torch.tensor([[True, True], [False, False]])
    split = metrics.sink_split(rows, key_mask=mask)
    change = mean_entropy_change(split, split)
    assert change.total.item() == 0.0
    assert change.sink_part.item() == 0.0
    assert change.content_part.item() == 0.0


def test_sink_split_carries_the_same_normalized_entropy_as_the_function():
    rows = torch.tensor([[0.7, 0.1, 0.1, 0.1], [1.0, 0.0, 0.0, 0.0], [0.25, 0.25, 0.25, 0.25]])
    mask = torch.tensor([[True, True, True, True], [True, False, False, False], [True] * 4])
    split = metrics.sink_split(rows, key_mask=mask)
    torch.testing.assert_close(
        split.normalized_entropy,
        metrics.normalized_entropy(rows, key_mask=mask),
        equal_nan=True,
    )
    assert bool(split.normalized_entropy[1].isnan())  # one available key: undefined
    assert float(split.normalized_entropy[2]) == pytest.approx(1.0)


@PROPERTY_SETTINGS
@given(
    row_batches(),
    st.floats(0.0, 0.95),
    st.sets(st.integers(0, 7), max_size=3),
    st.sampled_from(["nats", "bits"]),
)
def test_an_off_row_sink_as_a_key_keeps_the_grouping_identity_exact(
    batch, deficit, extra_sinks, unit
):
    """Rows scaled to 1 - deficit (a learned sink logit took the rest): with the deficit as
    one more sink key, H(a) = h(s) + s H(a_S / s) + (1 - s) H(q) still holds exactly, the sink
    mass includes the deficit and the entropy is the plain -sum a log a over the extended row."""
    mask, (rows,) = batch
    rows = rows * (1 - deficit)
    positions = torch.arange(rows.shape[-1])
    sink = ((positions == 0) | torch.isin(positions, torch.tensor(sorted(extra_sinks)))) & mask
    split = metrics.sink_split(rows, sink=sink, key_mask=mask, unit=unit, allow_deficit=True)
    reconstructed = split.sink_term + split.sink_internal_term + split.content_term
    torch.testing.assert_close(split.entropy, reconstructed, rtol=0, atol=1e-9)
    real = torch.where(mask, rows.double(), 0.0)
    gap = (1 - real.sum(-1)).clamp(min=0) * mask.any(-1)
    extended = torch.cat([real, gap[..., None]], dim=-1)
    divisor = 1.0 if unit == "nats" else math.log(2)
    by_hand = -torch.special.xlogy(extended, extended).sum(-1) / divisor
    has_keys = mask.any(-1)
    torch.testing.assert_close(split.entropy[has_keys], by_hand[has_keys], rtol=0, atol=1e-9)
    sink_mass = torch.where(sink, real, 0.0).sum(-1) + gap
    torch.testing.assert_close(split.sink_mass[has_keys], sink_mass[has_keys], rtol=0, atol=1e-9)
