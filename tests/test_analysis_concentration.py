"""interv.concentration: per-head numbers reduced in hooks equal the row metrics on a cache."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from transformer_lens.config import TransformerBridgeConfig
from transformer_lens.model_bridge import TransformerBridge

from interv.analysis.concentration import METRICS, HeadConcentration, concentration
from interv.errors import IntervError
from interv.metrics.concentration import normalized_entropy
from interv.metrics.sink import sink_split
from interv.tasks.tokenized import TokenizedPairs

VOCAB = 50
ROW_METRICS = (
    "entropy", "normalized_entropy", "sink_mass", "content_entropy", "content_normalized_entropy",
)  # fmt: skip


def _native(**overrides: object) -> TransformerBridge:
    settings = dict(
        d_model=64, d_head=16, n_layers=2, n_ctx=32, n_heads=4, d_vocab=VOCAB,
        normalization_type="LN", seed=0,
    )  # fmt: skip
    settings.update(overrides)
    return TransformerBridge.boot_native(TransformerBridgeConfig(**settings)).eval()


@pytest.fixture(scope="module")
def model() -> TransformerBridge:
    """The contract's small native model: 2 layers, 4 heads, learned positions."""
    return _native()


@pytest.fixture(scope="module")
def gqa_model() -> TransformerBridge:
    """Grouped-query attention (4 query heads read 2 value heads) with rotary positions."""
    return _native(n_key_value_heads=2, positional_embedding_type="rotary", seed=1)


def _tokens(batch: int, pos: int, seed: int = 0) -> torch.Tensor:
    generator = torch.Generator().manual_seed(seed)
    return torch.randint(1, VOCAB, (batch, pos), generator=generator)


def _oracle(
    model: TransformerBridge, tokens: torch.Tensor, sink: int | list[int] = 0, first_query: int = 0
) -> dict:
    """Row metrics of interv.metrics on full cached patterns, [batch, layer, head, query].

    Queries start at ``first_query`` (a sink key must be visible to every query).
    """
    _, cache = model.run_with_cache(tokens)
    pos = tokens.shape[1]
    causal = torch.ones(pos, pos, dtype=torch.bool).tril()[first_query:]
    per_layer: dict[str, list[torch.Tensor]] = {name: [] for name in ROW_METRICS}
    for layer in range(model.cfg.n_layers):
        pattern = cache[f"blocks.{layer}.attn.hook_pattern"][:, :, first_query:]
        split = sink_split(pattern, sink=sink, key_mask=causal)
        per_layer["entropy"].append(split.entropy)
        per_layer["normalized_entropy"].append(normalized_entropy(pattern, key_mask=causal))
        per_layer["sink_mass"].append(split.sink_mass)
        per_layer["content_entropy"].append(split.content_entropy)
        per_layer["content_normalized_entropy"].append(split.content_normalized_entropy)
    return {name: torch.stack(values, dim=1) for name, values in per_layer.items()}


def _hand_value_aware(model: TransformerBridge, tokens: torch.Tensor, sink: list[int]) -> tuple:
    """Contribution norm and sink share from explicit a_i * (v_i W_O^h) vectors in d_model."""
    _, cache = model.run_with_cache(tokens)
    totals, shares = [], []
    group = model.cfg.n_heads // (model.cfg.n_key_value_heads or model.cfg.n_heads)
    for layer in range(model.cfg.n_layers):
        pattern = cache[f"blocks.{layer}.attn.hook_pattern"].double()
        values = cache[f"blocks.{layer}.attn.hook_v"].double().repeat_interleave(group, dim=2)
        w_out = model.blocks[layer].attn.W_O.detach().double()
        # [batch, head, query, key, d_model]: every weighted contribution as a vector
        vectors = torch.einsum("bhqk,bkhd,hdm->bhqkm", pattern, values, w_out)
        norms = vectors.norm(dim=-1)
        total = norms.sum(dim=-1)
        totals.append(total)
        shares.append(norms[..., sink].sum(dim=-1) / total)
    return torch.stack(totals, dim=1), torch.stack(shares, dim=1)


def _hooks_left(model: TransformerBridge) -> dict[str, int]:
    """Canonical hook point name -> number of forward hooks on it (aliases counted once)."""
    return {
        point.name: len(point.fwd_hooks) for point in model.hook_dict.values() if point.fwd_hooks
    }


def _assert_close(actual: torch.Tensor, expected: torch.Tensor, atol: float = 1e-6) -> None:
    torch.testing.assert_close(actual, expected, atol=atol, rtol=1e-5, equal_nan=True)


def test_every_row_metric_equals_the_metric_functions_on_cached_patterns(model):
    tokens = _tokens(3, 12)
    result = concentration(model, tokens)
    expected = _oracle(model, tokens)
    for name, value in expected.items():
        _assert_close(result.metric(name), value)
    positions = torch.arange(12)
    assert torch.equal(result.n_available_keys, (positions + 1).expand(3, 2, 12))
    assert result.entropy.shape == (3, 2, 4, 12)
    assert result.entropy.dtype == torch.float64


def test_oracle_holds_under_grouped_query_attention_and_a_two_position_sink(gqa_model):
    tokens = _tokens(2, 10, seed=3)
    result = concentration(gqa_model, tokens, sink=[0, 1], query_positions=list(range(1, 10)))
    expected = _oracle(gqa_model, tokens, sink=[0, 1], first_query=1)
    for name, value in expected.items():
        _assert_close(result.metric(name), value)


def test_value_aware_numbers_equal_a_hand_recomputation_from_cached_v_and_w_o(gqa_model):
    tokens = _tokens(2, 9, seed=4)
    result = concentration(gqa_model, tokens, sink=[0, 2], query_positions=[2, 5, 8])
    total, share = _hand_value_aware(gqa_model, tokens, sink=[0, 2])
    _assert_close(result.contribution_norm, total[..., [2, 5, 8]])
    _assert_close(result.sink_contribution_share, share[..., [2, 5, 8]])
    assert bool((result.sink_contribution_share <= 1 + 1e-12).all())


def test_w_o_per_head_reproduces_the_attention_output_so_norms_are_in_residual_units(gqa_model):
    _, cache = gqa_model.run_with_cache(_tokens(1, 6))
    attn = gqa_model.blocks[1].attn
    rebuilt = torch.einsum("bphd,hdm->bpm", cache["blocks.1.attn.hook_z"], attn.W_O) + attn.b_O
    _assert_close(rebuilt, cache["blocks.1.hook_attn_out"], atol=1e-5)


@pytest.mark.parametrize("side", ["left", "right"])
def test_padding_on_either_side_gives_the_numbers_of_each_prompt_run_alone(gqa_model, side):
    lengths = [9, 5]
    prompts = [_tokens(1, n, seed=10 + n)[0] for n in lengths]
    width = max(lengths)
    tokens = torch.zeros(len(prompts), width, dtype=torch.int64)
    mask = torch.zeros(len(prompts), width, dtype=torch.bool)
    for i, prompt in enumerate(prompts):
        where = slice(width - len(prompt), width) if side == "left" else slice(0, len(prompt))
        tokens[i, where], mask[i, where] = prompt, True
    batched = concentration(gqa_model, tokens, attention_mask=mask, sink=[0, 1])
    for i, prompt in enumerate(prompts):
        alone = concentration(gqa_model, prompt, sink=[0, 1])
        n = len(prompt)
        for name in METRICS:
            _assert_close(batched.metric(name)[i, ..., :n], alone.metric(name)[0], atol=1e-5)
        assert bool(batched.metric("entropy")[i, ..., n:].isnan().all())
        assert torch.equal(batched.n_available_keys[i, :, :n], alone.n_available_keys[0])
        assert bool((batched.n_available_keys[i, :, n:] == 0).all())
    assert batched.prompt_lengths == (9, 5)


def test_tokenized_pairs_use_their_clean_tokens_and_mask(model):
    clean = _tokens(2, 7, seed=5)
    mask = torch.tensor([[True] * 7, [False, False] + [True] * 5])
    pairs = TokenizedPairs(
        clean_tokens=clean,
        corrupted_tokens=_tokens(2, 7, seed=6),
        attention_mask=mask,
        answer_positions=torch.tensor([6, 6]),
        target_ids=torch.tensor([1, 2]),
        padding_side="left",
    )
    from_pairs = concentration(model, pairs)
    from_tensor = concentration(model, clean, attention_mask=mask)
    for name in METRICS:
        _assert_close(from_pairs.metric(name), from_tensor.metric(name), atol=1e-12)


def test_negative_query_positions_count_from_each_prompts_last_real_token(model):
    tokens = _tokens(2, 8, seed=7)
    mask = torch.tensor([[True] * 8, [True] * 6 + [False] * 2])
    result = concentration(model, tokens, attention_mask=mask, query_positions=[-1, 0])
    assert result.query_index.tolist() == [[7, 0], [5, 0]]
    full = concentration(model, tokens, attention_mask=mask)
    _assert_close(result.entropy[0, ..., 0], full.entropy[0, ..., 7], atol=1e-12)
    _assert_close(result.entropy[1, ..., 0], full.entropy[1, ..., 5], atol=1e-12)
    assert result.n_available_keys.tolist() == [[[8, 1]] * 2, [[6, 1]] * 2]


@settings(max_examples=15)
@given(
    queries=st.lists(st.integers(-8, 7), min_size=1, max_size=5, unique=True),
    sink=st.lists(st.integers(0, 2), min_size=1, max_size=2, unique=True),
)
def test_any_query_selection_is_the_matching_slice_of_the_all_queries_run(model, queries, sink):
    tokens = _tokens(1, 8, seed=11)
    selected = concentration(model, tokens, sink=sink, query_positions=queries)
    everything = concentration(model, tokens, sink=sink)
    columns = [q % 8 for q in queries]  # negative positions count back from the last token
    for name in METRICS:
        _assert_close(selected.metric(name), everything.metric(name)[..., columns], atol=1e-12)


def test_undefined_entries_are_nan_and_counted_at_real_queries_only(model):
    tokens = _tokens(2, 6, seed=8)
    mask = torch.tensor([[True] * 6, [True] * 4 + [False] * 2])
    result = concentration(model, tokens, attention_mask=mask)
    n_cells = 2 * 4  # layers x heads
    # query 0 sees one key: normalized entropy undefined; with the sink at 0 the content
    # mass there is 0 and at query 1 only one content key is left.
    assert result.n_undefined["normalized_entropy"] == 2 * n_cells
    assert result.n_undefined["content_entropy"] == 2 * n_cells
    assert result.n_undefined["content_normalized_entropy"] == 2 * 2 * n_cells
    assert result.n_undefined["entropy"] == 0
    assert result.n_undefined["sink_mass"] == 0


def test_per_head_reducers_weigh_each_prompt_equally_and_report_the_spread(model):
    tokens = _tokens(3, 6, seed=9)
    mask = torch.tensor([[True] * 6, [True] * 3 + [False] * 3, [True] * 6])
    result = concentration(model, tokens, attention_mask=mask)
    per_prompt = torch.stack(
        [result.entropy[i, ..., : int(mask[i].sum())].mean(dim=-1) for i in range(3)]
    )
    _assert_close(result.per_prompt("entropy"), per_prompt)
    _assert_close(result.per_head("entropy"), per_prompt.mean(dim=0))
    _assert_close(result.per_head("entropy", reduce="median"), per_prompt.median(dim=0).values)
    _assert_close(result.per_head_spread("entropy"), per_prompt.std(dim=0))
    assert result.per_head("sink_mass").shape == (2, 4)


def test_hooks_are_removed_afterwards_and_user_hooks_stay(model):
    calls: list[str] = []

    def user_hook(activation: torch.Tensor, hook: object) -> None:
        calls.append("user")

    user_point = "blocks.1.attn.hook_pattern"
    model.add_hook(user_point, user_hook)
    try:
        concentration(model, _tokens(1, 5))
        assert calls == ["user"]
        assert _hooks_left(model) == {user_point: 1}
    finally:
        model.reset_hooks()


def test_hooks_are_removed_when_the_forward_raises(model):
    def failing_hook(activation: torch.Tensor, hook: object) -> None:
        raise RuntimeError("boom")

    model.add_hook("blocks.1.hook_in", failing_hook)
    try:
        with pytest.raises(RuntimeError, match="boom"):
            concentration(model, _tokens(1, 5))
        assert _hooks_left(model) == {"blocks.1.hook_in": 1}
    finally:
        model.reset_hooks()


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"sink": -1}, r"sink must be >= 0.*got -1"),
        ({"sink": []}, r"sink must name at least one position"),
        ({"query_positions": [1, 1]}, r"must not repeat a position; got \[1, 1\]"),
        ({"query_positions": ["a"]}, r"must contain ints; got 'a'"),
        ({"query_positions": [0, 4]}, r"query position 4 lies outside.*-4\.\.3"),
        (
            {"attention_mask": torch.tensor([[True, False, True, True]])},
            r"padding between real tokens.*left or the right",
        ),
        ({"attention_mask": torch.ones(1, 4)}, r"must be a bool tensor.*torch.float32"),
        ({"attention_mask": torch.ones(1, 3, dtype=torch.bool)}, r"shape \(1, 4\); got \(1, 3\)"),
    ],
)
def test_bad_input_is_refused_with_the_value_and_the_allowed_choices(model, kwargs, message):
    with pytest.raises(IntervError, match=message):
        concentration(model, _tokens(1, 4), **kwargs)


def test_unknown_metric_and_reduction_are_refused_with_the_choices(model):
    result = concentration(model, _tokens(1, 4))
    with pytest.raises(IntervError, match=r"unknown metric 'mass'; choose one of \('entropy'"):
        result.metric("mass")
    with pytest.raises(IntervError, match=r"reduce must be one of \('mean', 'median'\)"):
        result.per_head("entropy", reduce="max")
    with pytest.raises(IntervError, match=r"must be a string, a non-empty list of strings"):
        concentration(model, 3.0)
    assert isinstance(result, HeadConcentration)


@pytest.mark.real_model
def test_smollm2_numbers_equal_the_metric_functions_on_cached_patterns(smollm2_bridge):
    smollm = smollm2_bridge
    tokens = smollm.to_tokens("The cat sat on the mat because it was warm.")
    layers = [0, 5, 29]
    result = concentration(smollm, tokens)
    from_string = concentration(smollm, "The cat sat on the mat because it was warm.")
    _assert_close(from_string.entropy, result.entropy, atol=1e-12)
    expected = _oracle(smollm, tokens)
    for name, value in expected.items():
        _assert_close(result.metric(name)[:, layers], value[:, layers], atol=1e-5)
    total, share = _hand_value_aware(smollm, tokens, sink=[0])
    _assert_close(result.contribution_norm[:, layers], total[:, layers], atol=1e-4)
    _assert_close(result.sink_contribution_share[:, layers], share[:, layers], atol=1e-5)
    assert result.entropy.shape[1:3] == (30, 9)


def test_the_model_computes_the_same_logits_after_an_early_stopped_run(model):
    tokens = _tokens(2, 6)
    with torch.no_grad():
        before = model(tokens)
        concentration(model, tokens)
        after = model(tokens)
    assert torch.equal(before, after)
    assert _hooks_left(model) == {}
