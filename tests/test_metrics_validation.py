"""Bad input to the concentration metrics: each case gets an IntervError naming the
offending value and what was expected."""

from __future__ import annotations

import pytest
import torch
from hypothesis import assume, given
from hypothesis import strategies as st

import interv
from interv import metrics
from interv.metrics import mean_entropy_change
from interv.metrics._rows import sum_tolerance

ROW = torch.tensor([0.5, 0.25, 0.25])


@pytest.mark.parametrize(
    ("rows", "key_mask", "message"),
    [
        (torch.tensor([0.5, -0.1, 0.6]), None, r"rows has negative weight -0\.1 at key 1"),
        (torch.tensor([[0.5, 0.5], [float("nan"), 1.0]]), None, r"rows\[1\] has weight nan"),
        (torch.tensor([0.5, float("inf")]), None, r"weight inf at key 1; expected finite"),
        (torch.tensor([[1.0, 0.0], [0.3, 0.3]]), None, r"rows\[1\] sums to 0\.6 .*expected 1"),
        (
            torch.tensor([0.5, 0.25, 0.25]),
            torch.tensor([True, True, False]),
            r"puts mass 0\.25 on masked keys",
        ),
        (ROW, torch.ones(2, dtype=torch.bool), r"key_mask of shape \(2,\) does not broadcast"),
        (ROW, torch.ones(3), r"key_mask must be a bool tensor"),
        (torch.tensor([1, 0, 0]), None, r"floating dtype .* got torch\.int64"),
        (torch.tensor(1.0), None, r"shape \[\.\.\., key\] with at least one key; got \(\)"),
        ([0.5, 0.5], None, r"must be a torch\.Tensor"),
    ],
)
def test_invalid_rows_raise_an_interv_error_naming_the_value(rows, key_mask, message):
    with pytest.raises(interv.IntervError, match=message):
        metrics.entropy(rows, key_mask=key_mask)


def test_interv_error_is_a_value_error():
    with pytest.raises(ValueError, match="negative weight"):
        metrics.normalized_entropy(torch.tensor([1.5, -0.5]))


def test_a_mask_that_would_stretch_the_key_dim_is_refused():
    with pytest.raises(interv.IntervError, match="its last dim must be 1"):
        metrics.entropy(torch.ones(4, 1), key_mask=torch.ones(4, 3, dtype=torch.bool))


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (
            lambda: metrics.entropy(ROW, unit="dits"),
            r"unit must be one of \('nats', 'bits'\); got 'dits'",
        ),
        (
            lambda: metrics.compare_rows(ROW, ROW, measure="kl", convention="keep_sink"),
            r"measure must be one of \('cosine', 'js', 'aitchison'\); got 'kl'",
        ),
        (
            lambda: metrics.compare_rows(ROW, ROW, measure="js", convention="raw"),
            r"convention must be one of \('keep_sink', 'drop_sink'\); got 'raw'",
        ),
        (
            lambda: metrics.sink_split(ROW, sink=3),
            r"sink position 3 is out of range; .*0\.\.2",
        ),
        (lambda: metrics.sink_split(ROW, sink=-1), r"sink position -1 is out of range"),
        (lambda: metrics.sink_split(ROW, sink=[]), r"at least one key position"),
        (lambda: metrics.sink_split(ROW, sink="bos"), r"got 'bos'"),
        (
            lambda: metrics.sink_split(ROW, sink=torch.ones(2, dtype=torch.bool)),
            r"sink mask of shape \(2,\) does not broadcast",
        ),
        (lambda: metrics.top_k_mass(ROW, 0), r"k must be an int >= 1 .*got 0"),
        (
            lambda: metrics.aitchison_distance(ROW, ROW, zero_replacement=2.0),
            r"zero_replacement must be a float in \(0, 1\) .*got 2\.0",
        ),
    ],
)
def test_unknown_choices_and_out_of_range_options_raise_naming_the_choices(call, message):
    with pytest.raises(interv.IntervError, match=message):
        call()


def test_a_masked_sink_position_is_refused_with_the_row_that_masks_it():
    rows = torch.tensor([[1.0, 0.0, 0.0], [0.0, 0.5, 0.5]])
    mask = torch.tensor([[True, True, True], [False, True, True]])  # left padding in row 1
    with pytest.raises(interv.IntervError, match=r"sink position 0 is masked in rows\[1\]"):
        metrics.sink_split(rows, key_mask=mask)
    per_row_sink = torch.tensor([[True, False, False], [False, True, False]])
    split = metrics.sink_split(rows, key_mask=mask, sink=per_row_sink)
    assert split.sink_mass.tolist() == [1.0, 0.5]


def test_bf16_softmax_rows_pass_but_a_one_percent_float32_error_does_not():
    logits = torch.randn(4, 3, 64, generator=torch.Generator().manual_seed(0)) * 4
    rows = torch.softmax(logits, dim=-1)
    metrics.entropy(rows.to(torch.bfloat16))
    metrics.entropy(rows.to(torch.float16))
    with pytest.raises(interv.IntervError, match="float32 tolerance"):
        metrics.entropy(rows * 0.99)


def test_tolerance_follows_the_production_precision_and_grows_slowly_with_n():
    n = torch.tensor([1, 4096])
    bf16, fp32 = sum_tolerance(torch.bfloat16, n), sum_tolerance(torch.float32, n)
    # bf16: one eps (7.8e-3) covers the rounding of every stored weight (at most eps / 2
    # of the mass), and stays below a percent
    assert bool((bf16 > 7e-3).all()) and bool((bf16 < 1e-2).all())
    assert bool((fp32 < 1e-4).all())
    # float64 storage does not tell the production precision: float32 rounding is accepted
    assert torch.equal(sum_tolerance(torch.float64, n), fp32)


def _softmax_rows(seed: int, n_rows: int, n_keys: int, scale: float) -> torch.Tensor:
    generator = torch.Generator().manual_seed(seed)
    return torch.softmax(torch.randn(n_rows, n_keys, generator=generator) * scale, dim=-1)


KEYS = st.integers(1, 512)
SCALES = st.floats(0.01, 30.0)
SEEDS = st.integers(0, 2**31 - 1)


@given(
    seed=SEEDS, n_keys=KEYS, scale=SCALES, stored=st.sampled_from([torch.float32, torch.float64])
)
def test_float32_softmax_rows_pass_in_any_lossless_storage(seed, n_keys, scale, stored):
    rows = _softmax_rows(seed, 3, n_keys, scale)  # float32, as a model produces them
    metrics.entropy(rows.to(stored))


@given(
    seed=SEEDS,
    n_keys=KEYS,
    scale=SCALES,
    produced=st.sampled_from([torch.bfloat16, torch.float16]),
    stored=st.sampled_from([None, torch.float32, torch.float64]),
    native=st.booleans(),
)
def test_half_precision_rows_pass_as_stored_or_converted(
    seed, n_keys, scale, produced, stored, native
):
    if native:  # the softmax itself in half precision
        generator = torch.Generator().manual_seed(seed)
        logits = torch.randn(3, n_keys, generator=generator) * scale
        rows = torch.softmax(logits.to(produced), dim=-1)
    else:  # a float32 softmax rounded to half precision
        rows = _softmax_rows(seed, 3, n_keys, scale).to(produced)
    metrics.entropy(rows if stored is None else rows.to(stored))


@given(
    seed=SEEDS,
    n_keys=KEYS,
    scale=SCALES,
    off=st.floats(1e-4, 0.5),
    sign=st.sampled_from([-1, 1]),
    stored=st.sampled_from([torch.float32, torch.float64]),
)
def test_float32_rows_off_by_1e_4_or_more_are_refused(seed, n_keys, scale, off, sign, stored):
    rows = (_softmax_rows(seed, 3, n_keys, scale) * (1 + sign * off)).to(stored)
    assume(float((rows.double().sum(-1) - 1).abs().max()) >= 1e-4)
    with pytest.raises(interv.IntervError, match="sums to"):
        metrics.entropy(rows, allow_deficit=False)


@given(
    seed=SEEDS,
    n_keys=KEYS,
    scale=SCALES,
    off=st.floats(0.01, 0.5),
    sign=st.sampled_from([-1, 1]),
    stored=st.sampled_from([None, torch.float32, torch.float64]),
)
def test_bf16_rows_off_by_a_percent_or_more_are_refused(seed, n_keys, scale, off, sign, stored):
    rows = (_softmax_rows(seed, 3, n_keys, scale) * (1 + sign * off)).to(torch.bfloat16)
    assume(float((rows.double().sum(-1) - 1).abs().max()) >= 0.01)
    with pytest.raises(interv.IntervError, match="sums to"):
        metrics.entropy(rows if stored is None else rows.to(stored))


def test_long_float32_rows_off_by_1e_4_are_refused_up_to_16k_keys():
    rows = _softmax_rows(0, 2, 16384, 3.0)
    metrics.entropy(rows.double())
    with pytest.raises(interv.IntervError, match=r"float32 tolerance: weights stored as float64"):
        metrics.entropy((rows * (1 - 1e-4)).double())


def test_the_issue_row_a_float32_softmax_converted_to_float64_is_accepted():
    x = torch.randn(4, 7, generator=torch.Generator().manual_seed(1))
    assert bool(metrics.entropy(torch.softmax(x, -1).double()).isfinite().all())


def test_rows_summing_below_one_need_allow_deficit():
    row = torch.tensor([0.3, 0.2])
    with pytest.raises(interv.IntervError, match="allow_deficit=True"):
        metrics.entropy(row)
    metrics.entropy(row, allow_deficit=True)
    with pytest.raises(interv.IntervError, match=r"expected at most 1"):
        metrics.entropy(torch.tensor([0.7, 0.7]), allow_deficit=True)


def test_exact_zeros_in_log_ratio_metrics_raise_unless_a_replacement_is_given():
    rows = torch.tensor([0.8, 0.2, 0.0])
    with pytest.raises(
        interv.IntervError, match=r"exact zero at available key 2.*zero_replacement"
    ):
        metrics.clr(rows)
    metrics.clr(rows, zero_replacement=1e-9)


def test_two_splits_in_different_units_cannot_be_compared():
    before = metrics.sink_split(ROW, unit="nats")
    after = metrics.sink_split(ROW, unit="bits")
    with pytest.raises(interv.IntervError, match="same unit"):
        mean_entropy_change(before, after)
