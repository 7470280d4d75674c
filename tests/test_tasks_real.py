"""The built-in text tasks against SmolLM2-135M-Instruct's real tokenizer and model.

Tokenizer-only checks use the bare Hugging Face tokenizer saved with the converted
model; the behavioural checks run the model loaded by :func:`interv.load_model`.
"""

from __future__ import annotations

import pytest
import torch

from interv.tasks import TokenizedPairs, load_task
from interv.tasks.builtin import _capital_table, _ioi_name_sets

pytestmark = pytest.mark.real_model


@pytest.fixture(scope="session")
def smollm2(smollm2_bridge):
    return smollm2_bridge


@pytest.fixture(scope="session")
def smollm2_tokenizer(smollm2_bridge):
    """The bare Hugging Face tokenizer (no BOS of its own), as saved with the model."""
    return smollm2_bridge.tokenizer


def _n_tokens(tokenizer, text: str) -> int:
    return len(tokenizer(text, add_special_tokens=False)["input_ids"])


def test_every_ioi_name_is_one_token_with_its_leading_space(smollm2_tokenizer):
    names = _ioi_name_sets()["mixed"]
    assert len(names) == len(set(names)) >= 60
    assert [name for name in names if _n_tokens(smollm2_tokenizer, " " + name) != 1] == []


def test_every_capital_and_country_is_one_token(smollm2_tokenizer):
    table = _capital_table()
    assert [c for _, c in table if _n_tokens(smollm2_tokenizer, " " + c) != 1] == []
    assert [c for c, _ in table if _n_tokens(smollm2_tokenizer, " " + c) != 1] == []


@pytest.mark.parametrize(("name", "n_pairs"), [("ioi", 128), ("capitals", 33)])
def test_builtin_text_tasks_tokenize_with_equal_pair_lengths(smollm2_tokenizer, name, n_pairs):
    tokenized = load_task(name, n_pairs=n_pairs).tokenize(smollm2_tokenizer)
    assert tokenized.n_pairs == n_pairs
    assert tokenized.clean_tokens[:, 0].eq(smollm2_tokenizer.bos_token_id).all()


def test_bridge_and_bare_tokenizer_give_the_same_tokens(smollm2, smollm2_tokenizer):
    pairs = load_task("ioi", n_pairs=8)
    from_model = pairs.tokenize(smollm2)
    from_tokenizer = pairs.tokenize(smollm2_tokenizer)
    for field in ("clean_tokens", "corrupted_tokens", "attention_mask", "answer_positions"):
        assert torch.equal(getattr(from_model, field), getattr(from_tokenizer, field)), field
    assert torch.equal(from_model.target_ids, from_tokenizer.target_ids)


@pytest.mark.parametrize("name", ["ioi", "capitals"])
def test_batched_tokenization_equals_to_tokens_one_prompt_at_a_time(smollm2, name):
    pairs = load_task(name, n_pairs=24, seed=3)
    tokenized = pairs.tokenize(smollm2)
    for row, prompt in enumerate(pairs.clean):
        alone = smollm2.to_tokens(prompt, prepend_bos=True, truncate=False)[0].cpu()
        real = tokenized.clean_tokens[row][tokenized.attention_mask[row]]
        assert real.tolist() == alone.tolist(), prompt


def _answer_logits(model, tokens: torch.Tensor, tokenized: TokenizedPairs) -> torch.Tensor:
    """``[batch, d_vocab]`` logits at each pair's answer position."""
    with torch.no_grad():
        logits = model(tokens, attention_mask=tokenized.attention_mask.long())
    return logits[torch.arange(tokenized.n_pairs), tokenized.answer_positions]


def _logit_difference(model, tokens: torch.Tensor, tokenized: TokenizedPairs) -> torch.Tensor:
    logits = _answer_logits(model, tokens, tokenized)
    rows = torch.arange(tokenized.n_pairs)
    return logits[rows, tokenized.target_ids] - logits[rows, tokenized.foil_ids]


def test_ioi_mean_logit_difference_is_positive_and_drops_when_corrupted(smollm2):
    tokenized = load_task("ioi", n_pairs=16).tokenize(smollm2)
    clean = _logit_difference(smollm2, tokenized.clean_tokens, tokenized)
    corrupted = _logit_difference(smollm2, tokenized.corrupted_tokens, tokenized)
    print(
        "\nSmolLM2-135M, built-in IOI, 16 pairs (seed 0), answer position: logit difference "
        f"target minus foil, mean {clean.mean():.3f} logits (min {clean.min():.3f}, max "
        f"{clean.max():.3f}; {int((clean > 0).sum())}/16 pairs positive); corrupted prompts: "
        f"mean {corrupted.mean():.3f} logits"
    )
    assert clean.mean() > 0
    assert clean.mean() > corrupted.mean()


def test_left_and_right_padding_give_the_same_answer_logits(smollm2):
    pairs = load_task("ioi", n_pairs=6, seed=2)
    right = pairs.tokenize(smollm2)
    left = pairs.tokenize(smollm2, padding_side="left")
    assert right.attention_mask.sum(1).unique().numel() > 1  # mixed lengths, so padding is real
    torch.testing.assert_close(
        _answer_logits(smollm2, left.clean_tokens, left),
        _answer_logits(smollm2, right.clean_tokens, right),
        atol=1e-3,
        rtol=1e-4,
    )


def test_capitals_accuracy_is_reported_and_beats_the_foil(smollm2):
    tokenized = load_task("capitals", n_pairs=33).tokenize(smollm2)
    logits = _answer_logits(smollm2, tokenized.clean_tokens, tokenized)
    top1 = logits.argmax(-1).eq(tokenized.target_ids).float().mean()
    difference = _logit_difference(smollm2, tokenized.clean_tokens, tokenized)
    print(
        f"\nSmolLM2-135M, built-in capitals, 33 pairs (each country once): top-1 accuracy "
        f"{top1:.1%} of pairs; logit difference target minus foil mean {difference.mean():.3f} "
        f"logits, positive in {int((difference > 0).sum())}/33 pairs"
    )
    assert difference.mean() > 0
