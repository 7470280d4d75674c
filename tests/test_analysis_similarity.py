"""Head similarity under keep-sink and drop-sink: oracles on constructed rows, a tiny model,
and SmolLM2 / MiniLM end to end."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from interv.analysis._patterns import QUERY_RULE, attention_rows, rows_from_pattern
from interv.analysis.entropy_change import UNPAIRED, entropy_change_attribution
from interv.analysis.similarity import FlipRate, flip_counts, head_similarity
from interv.errors import IntervError
from interv.metrics import aitchison_split, compare_rows

N_KEYS = 6


def _content(generator: torch.Generator, n_heads: int, n_prompts: int) -> torch.Tensor:
    """``[batch, 1, head, query, key - 1]`` random positive content distributions."""
    logits = 2 * torch.randn(n_prompts, 1, n_heads, N_KEYS, N_KEYS - 1, generator=generator)
    return logits.double().softmax(dim=-1)


def _with_sink(content: torch.Tensor, sink_mass: torch.Tensor) -> torch.Tensor:
    """Rows ``[s, (1 - s) q]`` over ``N_KEYS`` keys (sink at key 0)."""
    return torch.cat([sink_mass[..., None], (1 - sink_mass[..., None]) * content], dim=-1)


def _bidirectional(pattern: torch.Tensor):
    return rows_from_pattern(pattern, causal=False, sink=0)


@given(seed=st.integers(0, 2**16), n_heads=st.integers(3, 6))
def test_flip_rate_is_zero_when_no_head_attends_to_the_sink(seed, n_heads):
    generator = torch.Generator().manual_seed(seed)
    content = _content(generator, n_heads, n_prompts=2)
    pattern = _with_sink(content, torch.zeros(content.shape[:-1], dtype=torch.float64))
    result = head_similarity(_bidirectional(pattern), measures=("cosine", "js"), n_resamples=5)
    for flip in result.flips:
        assert flip.n_flips == 0
        assert flip.rate == 0.0


@given(seed=st.integers(0, 2**16), balance=st.floats(-3.0, 1.0))
def test_aitchison_flip_rate_is_zero_when_every_row_has_the_same_sink_balance(seed, balance):
    # Aitchison keep-sink distance^2 = balance term^2 + content term^2: with the balance
    # log(s) - mean log((1 - s) q) equal in every row, keep-sink verdicts are drop-sink ones.
    generator = torch.Generator().manual_seed(seed)
    content = _content(generator, 5, n_prompts=2)
    sink_mass = torch.sigmoid(balance + content.log().mean(dim=-1))
    result = head_similarity(
        _bidirectional(_with_sink(content, sink_mass)), measures=("aitchison",), n_resamples=5
    )
    assert result.flips[0].n_flips == 0
    assert torch.allclose(
        result.distance("aitchison", "keep_sink"), result.distance("aitchison", "drop_sink")
    )


def _sink_confounded_pattern() -> torch.Tensor:
    """Heads A, B park 0.9 on the sink and read different content; head C parks 0.1 and
    reads A's content (slightly perturbed). Keep-sink: A is closer to B; drop-sink: to C."""
    first = torch.tensor([0.6, 0.1, 0.1, 0.1, 0.1], dtype=torch.float64)
    second = torch.tensor([0.1, 0.1, 0.1, 0.1, 0.6], dtype=torch.float64)
    near_first = torch.tensor([0.55, 0.15, 0.1, 0.1, 0.1], dtype=torch.float64)
    contents = torch.stack([first, second, near_first])  # [head, key - 1]
    sink_mass = torch.tensor([0.9, 0.9, 0.1], dtype=torch.float64)
    rows = _with_sink(contents, sink_mass)  # [head, key]
    return rows[None, None, :, None, :].expand(2, 1, 3, N_KEYS, N_KEYS).clone()


@pytest.mark.parametrize("measure", ["cosine", "js", "aitchison"])
def test_flip_rate_is_positive_when_sink_mass_varies(measure):
    result = head_similarity(
        _bidirectional(_sink_confounded_pattern()), measures=(measure,), n_resamples=5
    )
    keep = result.distance(measure, "keep_sink")
    drop = result.distance(measure, "drop_sink")
    assert keep[0, 1] < keep[0, 2]  # keep-sink: A closer to B
    assert drop[0, 1] > drop[0, 2]  # drop-sink: A closer to C
    assert result.flips[0].n_flips >= 1
    assert 0 < result.flips[0].rate <= 1


def test_head_distance_is_the_prompt_mean_of_compare_rows_over_included_queries():
    generator = torch.Generator().manual_seed(3)
    logits = torch.randn(3, 2, 2, 7, 7, generator=generator)
    pattern = logits.masked_fill(~torch.ones(7, 7, dtype=torch.bool).tril(), -math.inf).softmax(-1)
    rows = rows_from_pattern(pattern, causal=True)
    result = head_similarity(rows, measures=("js", "cosine"), n_resamples=5)
    # causal, sink 0: query t has t content keys, so queries 2..6 are included
    assert rows.included[:, :2].sum() == 0 and bool(rows.included[:, 2:].all())
    a, b = pattern[:, 0, 1, 2:], pattern[:, 1, 0, 2:]  # L0H1 and L1H0, [batch, query, key]
    key_mask = torch.ones(7, 7, dtype=torch.bool).tril()[2:]
    for convention in ("keep_sink", "drop_sink"):
        js = compare_rows(a, b, measure="js", convention=convention, key_mask=key_mask)
        cosine = compare_rows(a, b, measure="cosine", convention=convention, key_mask=key_mask)
        assert float(result.distance("js", convention)[1, 2]) == pytest.approx(
            float(js.mean(dim=1).mean()), rel=1e-12
        )
        assert float(result.distance("cosine", convention)[2, 1]) == pytest.approx(
            float((1 - cosine).mean(dim=1).mean()), rel=1e-12
        )


def test_aitchison_content_term_is_the_drop_sink_distance_and_terms_recompose():
    generator = torch.Generator().manual_seed(5)
    pattern = torch.randn(2, 1, 4, N_KEYS, N_KEYS, generator=generator).softmax(dim=-1)
    result = head_similarity(_bidirectional(pattern), measures=("aitchison",), n_resamples=5)
    drop = result.distance("aitchison", "drop_sink")
    assert torch.allclose(result.aitchison_content_term.mean(dim=0), drop, atol=1e-9)
    share = result.aitchison_sink_share
    off_diagonal = ~torch.eye(4, dtype=torch.bool)
    assert bool(((share[off_diagonal] >= 0) & (share[off_diagonal] <= 1)).all())
    assert bool(share.diagonal().isnan().all())
    # one row per prompt and query here, so the share recomputes from the terms' squares
    rows = pattern[:, 0]  # [batch, head, query, key]
    split = aitchison_split(rows[:, 0], rows[:, 1], sink=0)
    expected = split.sink_term.square().sum() / split.distance.square().sum()
    assert float(share[0, 1]) == pytest.approx(float(expected), rel=1e-9)


def test_flip_counts_counts_flips_and_excludes_ties():
    keep = torch.tensor([[0.0, 1.0, 2.0, 1.0], [1, 0, 1, 1], [2, 1, 0, 1], [1, 1, 1, 0]]).double()
    drop = torch.tensor([[0.0, 2.0, 1.0, 1.0], [2, 0, 1, 1], [1, 1, 0, 1], [1, 1, 1, 0]]).double()
    triples = torch.tensor([[0, 1, 2], [0, 1, 3], [1, 0, 2], [3, 0, 1]])
    # (0;1,2): keep -1, drop +1 -> flip. (0;1,3): keep 0 -> tie. (1;0,2): keep 0 -> tie.
    # (3;0,1): 0 in both -> tie.
    assert flip_counts(keep, drop, triples) == (1, 3)


def test_triples_are_sampled_with_a_seed_when_there_are_too_many():
    generator = torch.Generator().manual_seed(0)
    pattern = torch.randn(3, 1, 8, N_KEYS, N_KEYS, generator=generator).softmax(dim=-1)
    rows = _bidirectional(pattern)
    full = head_similarity(rows, measures=("js",), n_resamples=20, seed=1).flips[0]
    sampled = head_similarity(rows, measures=("js",), n_resamples=20, max_triples=50, seed=1)
    again = head_similarity(rows, measures=("js",), n_resamples=20, max_triples=50, seed=1)
    assert not full.sampled and full.n_triples == full.n_triples_total == 8 * 7 * 6 // 2
    flip = sampled.flips[0]
    assert flip.sampled and flip.n_triples == 50
    assert flip == again.flips[0]  # seeded: the same sample, the same bootstrap
    assert 0 <= flip.ci_low <= flip.ci_high <= 1


def test_bootstrap_interval_is_undefined_with_a_single_prompt():
    pattern = torch.randn(1, 1, 4, N_KEYS, N_KEYS).softmax(dim=-1)
    flip = head_similarity(_bidirectional(pattern), measures=("cosine",)).flips[0]
    assert isinstance(flip, FlipRate)
    assert math.isnan(flip.ci_low) and math.isnan(flip.ci_high) and flip.n_resamples == 0


def test_exact_zeros_are_replaced_for_aitchison_and_counted():
    pattern = _with_sink(
        _content(torch.Generator().manual_seed(1), 3, 2),
        torch.full((2, 1, 3, N_KEYS), 0.5, dtype=torch.float64),
    )
    pattern[:, :, 0, :, 3] = 0.0  # head 0 never looks at key 3
    pattern = pattern / pattern.sum(dim=-1, keepdim=True)
    result = head_similarity(_bidirectional(pattern), measures=("aitchison",), n_resamples=5)
    assert result.n_zeros_replaced == {"keep_sink": 2 * N_KEYS, "drop_sink": 2 * N_KEYS}
    assert bool(result.distance("aitchison", "keep_sink").isfinite().all())


def test_rows_with_fewer_than_two_content_keys_are_excluded_under_both_conventions():
    pattern = torch.ones(2, 1, 3, 5, 5).tril() / torch.arange(1, 6)[:, None]
    rows = rows_from_pattern(pattern, causal=True)
    assert rows.included.sum(dim=1).tolist() == [3, 3]
    result = head_similarity(rows, n_resamples=5)
    assert result.n_rows == 6 and result.query_rule == QUERY_RULE
    # identical heads: every distance 0, every triple a tie
    for flip in result.flips:
        assert flip.n_ties == flip.n_triples and math.isnan(flip.rate)


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"measures": ("cosine", "euclid")}, "measures must be distinct names among"),
        ({"zero_replacement": 0.0}, "zero_replacement must be in"),
        ({"confidence": 1.5}, "confidence must be in"),
        ({"n_resamples": 0}, "n_resamples must be an int >= 1"),
    ],
)
def test_bad_options_name_the_value_and_the_choices(options, message):
    pattern = torch.randn(2, 1, 3, N_KEYS, N_KEYS).softmax(dim=-1)
    with pytest.raises(IntervError, match=message):
        head_similarity(_bidirectional(pattern), **options)


def test_too_short_prompts_are_rejected_with_their_lengths():
    with pytest.raises(IntervError, match="at least 3 tokens"):
        rows_from_pattern(torch.ones(1, 1, 3, 2, 2).tril() / torch.tensor([1.0, 2.0])[:, None])


def test_native_model_rows_and_records_carry_scope(tiny_model):
    tokens = torch.randint(1, 50, (3, 10), generator=torch.Generator().manual_seed(0))
    rows = attention_rows(tiny_model, tokens, layers=[1])
    assert rows.pattern.shape == (3, 1, 4, 10, 10)
    assert rows.head_labels == ("L1H0", "L1H1", "L1H2", "L1H3")
    result = head_similarity(rows, n_resamples=20)
    records = result.to_records()
    assert len(records) == 3 * 2 * (4 * 3 // 2)
    assert {r["unit"] for r in records if r["measure"] == "js"} == {
        "Jensen-Shannon divergence in nats (0..log 2)"
    }
    assert all(r["n_prompts"] == 3 and r["query_rule"] == QUERY_RULE for r in records)
    assert [r["measure"] for r in result.flip_records()] == ["cosine", "js", "aitchison"]
    assert "3 prompts of 10..10 tokens" in result.scope


def test_right_padding_gives_the_numbers_of_the_unpadded_prompts(tiny_model):
    tokens = torch.randint(1, 50, (2, 9), generator=torch.Generator().manual_seed(1))
    mask = torch.ones(2, 9, dtype=torch.bool)
    mask[1, 6:] = False
    padded = head_similarity(attention_rows(tiny_model, tokens, attention_mask=mask))
    alone = [
        head_similarity(attention_rows(tiny_model, tokens[i : i + 1, :n]))
        for i, n in enumerate((9, 6))
    ]
    for i in range(2):
        assert torch.allclose(padded.per_prompt[:, :, i], alone[i].per_prompt[:, :, 0], atol=1e-6)


@pytest.fixture(scope="module")
def tiny_model():
    from transformer_lens.config import TransformerBridgeConfig
    from transformer_lens.model_bridge import TransformerBridge

    config = TransformerBridgeConfig(
        d_model=64,
        d_head=16,
        n_layers=2,
        n_ctx=32,
        n_heads=4,
        d_vocab=50,
        normalization_type="LN",
        seed=0,
    )
    return TransformerBridge.boot_native(config).eval()


PROMPTS = (
    "The cat sat on the mat and looked out of the window.",
    "When Mary and John went to the store, John gave a drink",
    "The capital of France is Paris and the capital of Italy",
    "In 1969 the first humans walked on the Moon with",
)


@pytest.mark.real_model
def test_smollm2_similarity_and_flip_rates_end_to_end(smollm2_bridge):
    rows = attention_rows(smollm2_bridge, list(PROMPTS), layers=(0, 10, 20, 29))
    assert rows.causal and rows.pattern.shape[1:3] == (4, 9)
    result = head_similarity(rows, n_resamples=50)
    for flip in result.flips:
        print(f"SmolLM2 (layers 0, 10, 20, 29; 4 prompts): {flip.describe()}")
        assert 0 < flip.rate < 1 and flip.ci_low <= flip.ci_high
    keep = result.distance("js", "keep_sink")
    assert bool(keep.isfinite().all()) and float(keep.max()) <= math.log(2)
    # two context lengths: the first five words of each prompt, then the whole prompt
    short_prompts = [" ".join(prompt.split()[:5]) for prompt in PROMPTS]
    short = attention_rows(smollm2_bridge, short_prompts, layers=(0, 10, 20, 29))
    change = entropy_change_attribution(short, rows, before_label="5 words", after_label="full")
    print(f"SmolLM2 (layers 0, 10, 20, 29), 5 words -> full prompts: {change.describe()}")
    assert change.mode == UNPAIRED
    assert torch.allclose(change.total, change.sink_part + change.content_part, atol=1e-12)


@pytest.mark.real_model
def test_minilm_similarity_uses_no_causal_mask_end_to_end(minilm_bridge):
    rows = attention_rows(minilm_bridge, list(PROMPTS), layers=(0, 2, 5))
    assert not rows.causal and bool(rows.key_mask[0, 0, 1].sum() == rows.prompt_lengths[0])
    result = head_similarity(rows, n_resamples=50)
    for flip in result.flips:
        print(f"MiniLM (layers 0, 2, 5; 4 prompts): {flip.describe()}")
        assert 0 < flip.rate < 1


def test_similarity_command_prints_flip_rates_agreement_and_saves_plots(tmp_path, capsys):
    import argparse

    from interv.cli.analysis import register

    prompts = tmp_path / "prompts.txt"
    prompts.write_text("D E F G H I D E F G\n\nK L M N O P K L M N\nA B C A B C A B\n")
    parser = argparse.ArgumentParser(prog="interv")
    register(parser.add_subparsers())
    args = parser.parse_args(
        [
            "similarity",
            "induction-2l",
            "--prompts",
            str(prompts),
            "--resamples",
            "10",
            "--k",
            "2",
            "--plot",
            str(tmp_path / "heads.png"),
        ]
    )
    assert args.handler(args) == 0
    out = capsys.readouterr().out
    assert "3 prompts of 9..11 tokens" in out
    for measure in ("cosine", "js", "aitchison"):
        assert f"{measure}: " in out and (tmp_path / f"heads-{measure}.png").is_file()
    assert "adjusted Rand index" in out and "bootstrap CI over prompts" in out
    assert "sink term's share of the squared distance" in out


def test_similarity_command_rejects_an_empty_prompts_file(tmp_path):
    from interv.cli.analysis import _read_prompts

    empty = tmp_path / "empty.txt"
    empty.write_text("\n  \n")
    with pytest.raises(IntervError, match="no non-empty line"):
        _read_prompts(empty)
