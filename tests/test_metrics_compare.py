"""Row comparison under the keep-sink and drop-sink conventions."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given
from test_metrics_strategies import PROPERTY_SETTINGS, row_batches

from interv import metrics

MIRRORED = torch.tensor([[0.8, 0.1, 0.1, 0.0], [0.0, 0.1, 0.1, 0.8]])


@pytest.mark.parametrize("convention", ["keep_sink", "drop_sink"])
def test_mirrored_rows_with_equal_entropy_compare_as_different(convention):
    x, y = MIRRORED
    assert metrics.entropy(x).item() == pytest.approx(metrics.entropy(y).item())
    cosine = metrics.compare_rows(x, y, measure="cosine", convention=convention)
    js = metrics.compare_rows(x, y, measure="js", convention=convention)
    aitchison = metrics.compare_rows(
        x, y, measure="aitchison", convention=convention, zero_replacement=1e-6
    )
    assert cosine.item() < 0.5
    assert js.item() > 0.1
    assert aitchison.item() > 1.0


def test_identical_rows_have_cosine_one_and_zero_distances():
    x = torch.tensor([0.7, 0.2, 0.1])
    assert metrics.compare_rows(x, x, measure="cosine", convention="keep_sink").item() == (
        pytest.approx(1.0)
    )
    for measure in ("js", "aitchison"):
        for convention in ("keep_sink", "drop_sink"):
            assert metrics.compare_rows(x, x, measure=measure, convention=convention).item() == (
                pytest.approx(0.0, abs=1e-12)
            )


def test_disjoint_rows_reach_the_js_maximum_of_log_2():
    x, y = torch.tensor([1.0, 0.0]), torch.tensor([0.0, 1.0])
    nats = metrics.compare_rows(x, y, measure="js", convention="keep_sink")
    bits = metrics.compare_rows(x, y, measure="js", convention="keep_sink", unit="bits")
    assert nats.item() == pytest.approx(math.log(2))
    assert bits.item() == pytest.approx(1.0)


def test_same_content_with_different_sink_mass_flips_between_conventions():
    x = torch.tensor([0.9, 0.05, 0.05])
    y = torch.tensor([0.1, 0.45, 0.45])
    keep = metrics.compare_rows(x, y, measure="js", convention="keep_sink")
    drop = metrics.compare_rows(x, y, measure="js", convention="drop_sink")
    assert keep.item() > 0.2
    assert drop.item() == pytest.approx(0.0, abs=1e-12)


def test_drop_sink_gives_nan_for_rows_without_content_mass():
    x = torch.tensor([[1.0, 0.0], [0.5, 0.5]])
    result = metrics.compare_rows(x, x, measure="cosine", convention="drop_sink")
    assert math.isnan(result[0].item())
    assert result[1].item() == pytest.approx(1.0)


@PROPERTY_SETTINGS
@given(row_batches(count=2, positive=True))
def test_drop_sink_aitchison_equals_the_content_term_of_the_split(batch):
    mask, (x, y) = batch
    compared = metrics.compare_rows(
        x, y, measure="aitchison", convention="drop_sink", key_mask=mask
    )
    split = metrics.aitchison_split(x, y, key_mask=mask)
    has_content = mask.sum(dim=-1) > 1
    torch.testing.assert_close(
        compared[has_content], split.content_term[has_content], rtol=0, atol=1e-9
    )


@PROPERTY_SETTINGS
@given(row_batches(count=2))
def test_measures_stay_in_their_documented_ranges_and_are_symmetric(batch):
    mask, (x, y) = batch
    for convention in ("keep_sink", "drop_sink"):
        cosine = metrics.compare_rows(x, y, measure="cosine", convention=convention, key_mask=mask)
        js = metrics.compare_rows(x, y, measure="js", convention=convention, key_mask=mask)
        swapped = metrics.compare_rows(y, x, measure="js", convention=convention, key_mask=mask)
        defined = ~cosine.isnan()
        assert bool(((cosine[defined] >= -1e-12) & (cosine[defined] <= 1 + 1e-12)).all())
        assert bool(((js[defined] >= -1e-12) & (js[defined] <= math.log(2) + 1e-12)).all())
        torch.testing.assert_close(js, swapped, equal_nan=True, rtol=0, atol=1e-12)
