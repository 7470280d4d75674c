"""Gu et al.'s sink score and sink rate, and attention rollout: constructed rows with known
answers, a hand loop over a zoo model's rows, and bad input."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

import interv
from interv.errors import IntervError
from interv.metrics import GU_EPS, attention_rollout, sink_rate, sink_scores


def causal_uniform(n: int) -> torch.Tensor:
    """``[n, n]`` causal rows, uniform over the keys each query sees."""
    rows = torch.ones(n, n).tril()
    return rows / rows.sum(dim=-1, keepdim=True)


def test_sink_score_of_a_hand_built_head_is_the_mean_over_the_queries_that_see_the_key():
    rows = torch.tensor(
        [
            [1.0, 0.0, 0.0],
            [0.8, 0.2, 0.0],
            [0.5, 0.1, 0.4],
        ]
    )
    # key 0: every query sees it: (1 + 0.8 + 0.5) / 3; key 1: queries 1 and 2: (0.2 + 0.1) / 2
    assert sink_scores(rows, 0).item() == pytest.approx(2.3 / 3)
    assert sink_scores(rows, 1).item() == pytest.approx(0.15)
    assert sink_scores(rows, 2).item() == pytest.approx(0.4)


def test_uniform_causal_attention_gives_the_harmonic_mean_and_gu_et_al_s_divisor():
    n = 64
    # alpha_k = 1/(n - k) sum_{t=k}^{n-1} 1/(t + 1): Gu et al.'s 1/(T - k + 1) sum, 1-based
    for key in (0, 1, 10, 63):
        expected = sum(1 / (t + 1) for t in range(key, n)) / (n - key)
        assert sink_scores(causal_uniform(n), key).item() == pytest.approx(expected, rel=1e-12)


def test_all_mass_on_the_first_token_scores_one_and_counts_every_head():
    heads = torch.zeros(2, 3, 5, 5)  # [layer, head, query, key]
    heads[..., 0] = 1.0
    result = sink_rate(heads, key=0, eps=0.3)
    assert torch.equal(result.scores, torch.ones(2, 3, dtype=torch.float64))
    assert (result.rate, result.n_scores, result.n_undefined) == (1.0, 6, 0)
    assert result.above.all()


def test_the_rate_is_the_share_of_heads_above_eps_over_every_leading_dim():
    sink = torch.zeros(4, 4)
    sink[:, 0] = 1.0
    heads = torch.stack([sink, causal_uniform(4), sink, causal_uniform(4)])  # [head, q, k]
    result = sink_rate(heads[None].expand(3, -1, -1, -1), eps=GU_EPS)  # 3 prompts
    # uniform causal rows over 4 keys: alpha_0 = (1 + 1/2 + 1/3 + 1/4) / 4 = 0.52 > 0.3
    assert result.scores[0].tolist() == pytest.approx([1.0, 25 / 48, 1.0, 25 / 48])
    assert result.rate == 1.0
    assert sink_rate(heads, eps=0.6).rate == 0.5
    assert sink_rate(heads, eps=0.99).rate == 0.5  # a score must *exceed* eps
    assert sink_rate(heads, eps=0.9999999).rate == 0.5


def test_padding_queries_and_keys_are_left_out():
    rows = torch.zeros(1, 4, 4)
    rows[0, :3, 0] = 1.0  # three real tokens, the fourth is padding (an empty row)
    real = torch.tensor([True, True, True, False])
    mask = real[None, :, None] & real[None, None, :]
    assert sink_scores(rows, 0, key_mask=mask).item() == 1.0
    # a key no real query can see has no score
    assert math.isnan(sink_scores(rows, 3, key_mask=mask).item())
    assert sink_rate(rows, key=3, key_mask=mask).n_undefined == 1


def test_bidirectional_rows_average_over_every_query():
    rows = torch.tensor([[0.5, 0.5], [0.1, 0.9]])
    assert sink_scores(rows, 0, causal=False).item() == pytest.approx(0.3)


def test_sink_scores_of_a_zoo_model_equal_a_hand_loop_over_its_rows():
    model = interv.load_model("sink-lm-3l")
    tokens = interv.zoo.held_out_batch("sink-lm-3l", n_sequences=3).tokens[:, :20]
    rows = interv.analysis.attention_rows(model, tokens)
    pattern = rows.pattern.double()  # [batch, layer, head, query, key]
    result = sink_rate(pattern, key=0)
    n = tokens.shape[1]
    for b in range(3):
        for layer in range(model.cfg.n_layers):
            for head in range(model.cfg.n_heads):
                # the metric re-closes each row in float64 (rows sum to 1 within float32)
                by_hand = sum(float(pattern[b, layer, head, t, 0]) for t in range(n)) / n
                assert result.scores[b, layer, head].item() == pytest.approx(by_hand, abs=1e-6)
    above = [float(s) > 0.3 for s in result.scores.flatten()]
    assert result.rate == pytest.approx(sum(above) / len(above))


@pytest.mark.parametrize(
    ("call", "match"),
    [
        (lambda r: sink_rate(r, eps=0.0), r"eps must lie in \(0, 1\).*got 0.0"),
        (lambda r: sink_rate(r, eps=1.0), r"eps must lie in \(0, 1\)"),
        (lambda r: sink_rate(r, eps=-0.2), r"eps must lie in \(0, 1\)"),
        (lambda r: sink_rate(r, eps=float("nan")), "eps must be a finite number"),
        (lambda r: sink_rate(r, eps="0.3"), "eps must be a number"),
        (lambda r: sink_rate(r, key=4), r"key position 4 is beyond the prompt.*0\.\.3"),
        (lambda r: sink_rate(r, key=-1), r"key position -1 is beyond the prompt"),
        (lambda r: sink_scores(r[:, :3]), "a causal mask needs as many queries as keys"),
        (lambda r: sink_scores(r[0, 0]), r"shape \[\.\.\., query, key\]"),
        (lambda r: sink_scores(r * 2), "sums to 2"),
    ],
)
def test_bad_input_is_refused_with_the_value_and_what_is_allowed(call, match):
    rows = causal_uniform(4).expand(2, 4, 4)
    with pytest.raises(IntervError, match=match):
        call(rows)


# ----------------------------------------------------------------------------- rollout


def test_rollout_of_identity_attention_is_the_identity():
    identity = torch.eye(5).expand(3, 5, 5)  # [layer, query, key]
    for residual in (0.0, 0.5, 1.0):
        assert torch.equal(attention_rollout(identity, residual=residual), torch.eye(5).double())


@pytest.mark.parametrize("n_layers", [1, 2, 5])
@pytest.mark.parametrize("residual", [0.0, 0.5, 0.8])
def test_rollout_of_uniform_attention_has_its_closed_form(n_layers, residual):
    # uniform over all n keys: A = J/n is idempotent and commutes with I, so
    # (r I + (1 - r) J/n)^L = r^L I + (1 - r^L) J/n
    n = 6
    uniform = torch.full((n_layers, n, n), 1 / n)
    expected = residual**n_layers * torch.eye(n) + (1 - residual**n_layers) / n
    rollout = attention_rollout(uniform, residual=residual)
    assert torch.allclose(rollout, expected.double(), atol=1e-12)


def test_rollout_of_two_causal_positions_by_hand():
    # A = [[1, 0], [1/2, 1/2]], r = 1/2: A~ = [[1, 0], [1/4, 3/4]], A~^L = [[1, 0], [1 - q, q]]
    # with q = (3/4)^L
    for n_layers in (1, 3):
        rollout = attention_rollout(causal_uniform(2).expand(n_layers, 2, 2))
        q = 0.75**n_layers
        assert rollout.flatten().tolist() == pytest.approx([1.0, 0.0, 1 - q, q])


def test_rollout_multiplies_later_layers_on_the_left():
    first = torch.tensor([[1.0, 0.0], [1.0, 0.0]])  # layer 0: everything reads token 0
    second = torch.eye(2)
    both = attention_rollout(torch.stack([first, second]), residual=0.0)
    assert both.tolist() == [[1.0, 0.0], [1.0, 0.0]]  # R = A_1 @ A_0


@given(
    st.integers(min_value=1, max_value=4),
    st.integers(min_value=2, max_value=6),
    st.floats(min_value=0.0, max_value=1.0),
    st.integers(min_value=0, max_value=2**16),
)
def test_rollout_rows_are_distributions(n_layers, n, residual, seed):
    generator = torch.Generator().manual_seed(seed)
    scores = torch.randn(2, n_layers, n, n, generator=generator)
    causal = torch.ones(n, n, dtype=torch.bool).tril()
    patterns = scores.masked_fill(~causal, float("-inf")).softmax(dim=-1)
    rollout = attention_rollout(patterns, residual=residual, key_mask=causal)
    assert torch.allclose(rollout.sum(dim=-1), torch.ones(2, n, dtype=torch.float64))
    assert bool((rollout >= 0).all()) and bool((rollout.triu(1) == 0).all())


@pytest.mark.parametrize(
    ("call", "match"),
    [
        (lambda p: attention_rollout(p, residual=1.5), r"residual must lie in \[0, 1\]"),
        (lambda p: attention_rollout(p, residual=-0.1), r"residual must lie in \[0, 1\]"),
        (lambda p: attention_rollout(p[0]), r"\[\.\.\., layer, query, key\]"),
        (lambda p: attention_rollout(p[..., :2]), "self-attention matrices"),
        (lambda p: attention_rollout(p * 3), "sums to 3"),
    ],
)
def test_rollout_bad_input_is_refused(call, match):
    patterns = causal_uniform(3).expand(2, 3, 3)
    with pytest.raises(IntervError, match=match):
        call(patterns)
