"""Entropy-change attribution: the identity sums exactly, oracles for pure sink growth and
pure content sharpening, both modes, the zoo checkpoints and the CLI."""

from __future__ import annotations

import argparse
import math

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from interv.analysis._patterns import rows_from_pattern
from interv.analysis.entropy_change import PAIRED, UNPAIRED, entropy_change_attribution
from interv.cli.analysis import register
from interv.errors import IntervError
from interv.metrics import entropy
from interv.zoo import checkpoint_entropy_change

N_KEYS = 6


def _causal_pattern(seed: int, shape=(3, 2, 3), n_keys: int = N_KEYS) -> torch.Tensor:
    """Random causal softmax rows ``[batch, layer, head, query, key]`` (float64)."""
    generator = torch.Generator().manual_seed(seed)
    logits = 3 * torch.randn(*shape, n_keys, n_keys, generator=generator, dtype=torch.float64)
    future = ~torch.ones(n_keys, n_keys, dtype=torch.bool).tril()
    return logits.masked_fill(future, -math.inf).softmax(dim=-1)


@given(seed=st.integers(0, 2**16))
def test_attribution_sums_exactly_per_head_per_prompt_and_overall(seed):
    before = rows_from_pattern(_causal_pattern(seed))
    after = rows_from_pattern(_causal_pattern(seed + 1))
    result = entropy_change_attribution(before, after)
    assert result.mode == PAIRED
    assert torch.allclose(result.total, result.sink_part + result.content_part, atol=1e-12)
    assert torch.allclose(
        result.per_prompt_total,
        result.per_prompt_sink_part + result.per_prompt_content_part,
        atol=1e-12,
    )
    overall = result.overall
    assert overall["total"] == pytest.approx(overall["sink_part"] + overall["content_part"])


def test_total_is_the_change_of_mean_entropy_over_included_rows():
    first, second = _causal_pattern(1), _causal_pattern(2)
    result = entropy_change_attribution(rows_from_pattern(first), rows_from_pattern(second))
    # queries 2..5 have >= 2 content keys; mean over queries, then over the 3 prompts
    key_mask = torch.ones(N_KEYS, N_KEYS, dtype=torch.bool).tril()
    change = entropy(second, key_mask=key_mask) - entropy(first, key_mask=key_mask)
    expected = change[..., 2:].mean(dim=-1).mean(dim=0)  # [layer, head]
    assert torch.allclose(result.total, expected, atol=1e-12)
    assert torch.allclose(result.spread("total"), change[..., 2:].mean(dim=-1).std(dim=0))


def _rows(sink_mass: float, content: torch.Tensor) -> torch.Tensor:
    """Bidirectional pattern ``[2, 1, 1, key, key]``: every row ``[s, (1 - s) q]``."""
    row = torch.cat([torch.tensor([sink_mass], dtype=torch.float64), (1 - sink_mass) * content])
    return row.expand(2, 1, 1, N_KEYS, N_KEYS).clone()


CONTENT = torch.tensor([0.4, 0.3, 0.1, 0.1, 0.1], dtype=torch.float64)
SHARP = torch.tensor([0.9, 0.025, 0.025, 0.025, 0.025], dtype=torch.float64)


def test_pure_sink_growth_is_all_sink_part():
    before = rows_from_pattern(_rows(0.2, CONTENT), causal=False)
    after = rows_from_pattern(_rows(0.8, CONTENT), causal=False)
    result = entropy_change_attribution(before, after)
    assert float(result.total[0, 0]) < 0
    assert float(result.content_part[0, 0]) == pytest.approx(0.0, abs=1e-14)
    assert float(result.sink_share[0, 0]) == pytest.approx(1.0)
    assert float(result.sink_mass_before[0, 0]) == pytest.approx(0.2)
    assert float(result.sink_mass_after[0, 0]) == pytest.approx(0.8)


def test_pure_content_sharpening_is_all_content_part():
    before = rows_from_pattern(_rows(0.5, CONTENT), causal=False)
    after = rows_from_pattern(_rows(0.5, SHARP), causal=False)
    result = entropy_change_attribution(before, after)
    content_entropy_change = float(
        entropy(SHARP.expand(1, 5), key_mask=None) - entropy(CONTENT.expand(1, 5), key_mask=None)
    )
    assert float(result.sink_part[0, 0]) == pytest.approx(0.0, abs=1e-15)
    assert float(result.content_part[0, 0]) == pytest.approx(0.5 * content_entropy_change)
    assert float(result.sink_share[0, 0]) == pytest.approx(0.0, abs=1e-12)


def test_sink_share_is_undefined_when_the_entropy_does_not_change():
    rows = rows_from_pattern(_causal_pattern(4))
    result = entropy_change_attribution(rows, rows)
    assert bool((result.total == 0).all())
    assert bool(result.sink_share.isnan().all()) and math.isnan(result.overall["sink_share"])
    assert "share due to the sink undefined" in result.describe()


def test_different_prompt_lengths_use_condition_means_and_still_sum_exactly():
    short = rows_from_pattern(_causal_pattern(5, shape=(3, 2, 3), n_keys=5))
    long = rows_from_pattern(_causal_pattern(6, shape=(2, 2, 3), n_keys=9))
    result = entropy_change_attribution(short, long, before_label="5 tokens", after_label="9")
    assert result.mode == UNPAIRED and result.per_prompt_total is None
    assert torch.allclose(result.total, result.sink_part + result.content_part, atol=1e-12)
    assert bool(result.spread("total").isnan().all())
    # total: change of the mean entropy over all included rows of each head
    short_rows = short.pattern[:, :, :, 2:]
    long_rows = long.pattern[:, :, :, 2:]
    mean_short = entropy(short_rows, key_mask=short.key_mask[0, 0, 2:]).mean(dim=(0, 3))
    mean_long = entropy(long_rows, key_mask=long.key_mask[0, 0, 2:]).mean(dim=(0, 3))
    assert torch.allclose(result.total, mean_long - mean_short, atol=1e-12)
    assert "from 5 tokens" in result.scope and "condition means" in result.scope


def test_overall_share_interval_recomputes_the_share_on_resampled_prompts():
    from interv.stats import bootstrap_indices, percentile_interval

    result = entropy_change_attribution(
        rows_from_pattern(_causal_pattern(7)), rows_from_pattern(_causal_pattern(8))
    )
    low, high = result.overall_share_interval(n_bootstrap=50, seed=2)
    shares = []
    for index in bootstrap_indices(3, 50, 2):
        total = result.per_prompt_total[index].mean()
        sink = result.per_prompt_sink_part[index].mean()
        shares.append(float(sink / total) if abs(float(total)) >= 1e-3 else math.nan)
    expected = percentile_interval(torch.tensor(shares, dtype=torch.float64), 0.95, n_items=3)
    assert (low, high) == pytest.approx(expected)
    short = rows_from_pattern(_causal_pattern(5, shape=(3, 2, 3), n_keys=5))
    long = rows_from_pattern(_causal_pattern(6, shape=(2, 2, 3), n_keys=9))
    unpaired = entropy_change_attribution(short, long).overall_share_interval()
    assert all(math.isnan(end) for end in unpaired)


def test_records_hold_every_head_and_the_overall_mean_with_units():
    result = entropy_change_attribution(
        rows_from_pattern(_causal_pattern(7)), rows_from_pattern(_causal_pattern(8))
    )
    records = result.to_records()
    assert [r["head"] for r in records] == [f"L{i}H{j}" for i in range(2) for j in range(3)] + [
        "overall"
    ]
    assert all(r["unit"] == "nats" and r["n_prompts_before"] == 3 for r in records)
    assert records[-1]["total"] == pytest.approx(float(result.total.mean()))


def test_mismatched_heads_are_rejected_with_both_shapes():
    first = rows_from_pattern(_causal_pattern(1, shape=(2, 2, 3)))
    second = rows_from_pattern(_causal_pattern(1, shape=(2, 2, 4)))
    with pytest.raises(IntervError, match=r"same layers and heads.*\(2, 3\) and \(2, 4\)"):
        entropy_change_attribution(first, second)


def test_zoo_training_grows_the_sink_and_the_split_is_exact():
    result = checkpoint_entropy_change("induction-2l", before=0, after=None, n_sequences=4)
    print(result.describe())
    assert result.mode == PAIRED and result.n_prompts == (4, 4)
    assert torch.allclose(result.total, result.sink_part + result.content_part, atol=1e-12)
    # training concentrates attention and moves mass onto the BOS sink (see the zoo card)
    assert result.overall["total"] < 0
    assert float(result.sink_mass_after.mean()) > float(result.sink_mass_before.mean())


def test_entropy_change_command_prints_per_head_split_with_units(capsys):
    parser = argparse.ArgumentParser(prog="interv")
    register(parser.add_subparsers())
    args = parser.parse_args(
        ["entropy-change", "induction-2l", "--from", "0", "--n-sequences", "2"]
    )
    assert args.handler(args) == 0
    out = capsys.readouterr().out
    assert "final weights" in out and "L1H3: total" in out
    assert "nats" in out and "share due to the sink" in out
