"""Tests for PromptPairs (validation, JSONL, tokenization, padding) and the built-in tasks.

Tokenization is tested with a stand-in of the zoo's word-level tokenizer, built here
from the shared vocabulary (``<bos>`` 0, ``<pad>`` 1, then the 62 symbols), so these
tests need neither the zoo code nor a real model.
"""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from tokenizers import Tokenizer, models, pre_tokenizers
from transformers import PreTrainedTokenizerFast

import interv
from interv.errors import IntervError
from interv.tasks import PromptPairs, TokenizedPairs, available_tasks, load_task
from interv.tasks.builtin import IOI_TEMPLATES, ZOO_SYMBOLS
from interv.tasks.pairs import _batch_encoded

BOS_ID, PAD_ID = 0, 1


def _zoo_tokenizer() -> PreTrainedTokenizerFast:
    vocab = {"<bos>": BOS_ID, "<pad>": PAD_ID}
    vocab.update({symbol: index + 2 for index, symbol in enumerate(ZOO_SYMBOLS)})
    backend = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<pad>"))
    backend.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    return PreTrainedTokenizerFast(tokenizer_object=backend, bos_token="<bos>", pad_token="<pad>")


ZOO_TOKENIZER = _zoo_tokenizer()


def _symbol_id(symbol: str) -> int:
    return ZOO_SYMBOLS.index(symbol) + 2


def _pairs(**overrides) -> PromptPairs:
    fields = {
        "clean": ("A B C", "D E"),
        "corrupted": ("A X C", "Y E"),
        "targets": ("Q", "R"),
        "foils": ("S", "T"),
    }
    fields.update(overrides)
    return PromptPairs(**fields)


# ---------------------------------------------------------------- construction


def test_lists_are_stored_as_tuples():
    pairs = PromptPairs(clean=["A"], corrupted=["B"], targets=["C"])
    assert pairs.clean == ("A",) and pairs.corrupted == ("B",) and pairs.targets == ("C",)
    assert pairs.foils is None and len(pairs) == pairs.n_pairs == 1


def test_top_level_names_resolve_to_the_tasks_modules():
    assert interv.PromptPairs is PromptPairs
    assert interv.load_task is load_task


def test_empty_set_is_rejected():
    with pytest.raises(IntervError, match="empty set"):
        PromptPairs(clean=(), corrupted=(), targets=())


def test_mismatched_counts_name_the_field_and_both_counts():
    with pytest.raises(IntervError, match=r"targets has 1 entries but clean has 2"):
        _pairs(targets=("Q",))


def test_a_bare_string_is_not_taken_as_a_sequence_of_prompts():
    with pytest.raises(IntervError, match="clean must be a list or tuple"):
        PromptPairs(clean="A B", corrupted=("A C",), targets=("D",))


def test_identical_target_and_foil_is_rejected():
    with pytest.raises(IntervError, match="pair 1 has the same target and foil 'R'"):
        _pairs(foils=("S", "R"))


def test_empty_foil_is_rejected_by_field_and_index():
    with pytest.raises(IntervError, match=r"foils\[1\] is the empty string"):
        _pairs(foils=("S", ""))


def test_non_integer_answer_position_is_rejected():
    with pytest.raises(IntervError, match=r"answer_positions\[0\] must be an int; got 1.5"):
        _pairs(answer_positions=(1.5, -1))


def test_pairs_are_frozen():
    with pytest.raises(AttributeError):
        _pairs().name = "other"  # type: ignore[misc]


# ---------------------------------------------------------------- JSONL


def test_jsonl_round_trip_keeps_every_field(tmp_path):
    pairs = _pairs(answer_positions=(1, -1), name="mine")
    path = tmp_path / "mine.jsonl"
    pairs.to_jsonl(path)
    assert PromptPairs.from_jsonl(path) == pairs


def test_jsonl_without_foils_gives_no_foils_and_name_from_file_stem(tmp_path):
    path = tmp_path / "plain.jsonl"
    path.write_text('{"clean": "A", "corrupted": "B", "target": "C"}\n\n')
    pairs = PromptPairs.from_jsonl(path)
    assert pairs.foils is None and pairs.answer_positions is None and pairs.name == "plain"


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ('{"clean": "A", "corrupted": "B"}', r"line 2: missing key 'target'"),
        ('{"clean": "A", "corrupted": "B", "target": 3}', r"line 2: key 'target' must be a str"),
        ('{"clean": "A", "corupted": "B", "target": "C"}', r"line 2: unknown key 'corupted'"),
        ('["A", "B", "C"]', r"line 2: expected a JSON object, got list"),
        ('{"clean": "A",', r"line 2: not valid JSON"),
        (
            '{"clean": "A", "corrupted": "B", "target": "C", "answer_position": "last"}',
            r"line 2: key 'answer_position' must be an integer",
        ),
    ],
)
def test_malformed_jsonl_line_names_the_line_and_the_key(tmp_path, line, message):
    path = tmp_path / "bad.jsonl"
    path.write_text('{"clean": "A", "corrupted": "B", "target": "C"}\n' + line + "\n")
    with pytest.raises(IntervError, match=message):
        PromptPairs.from_jsonl(path)


def test_foil_on_some_lines_only_is_rejected(tmp_path):
    path = tmp_path / "mixed.jsonl"
    path.write_text(
        '{"clean": "A", "corrupted": "B", "target": "C", "foil": "D"}\n'
        '{"clean": "A", "corrupted": "B", "target": "C"}\n'
    )
    with pytest.raises(IntervError, match="line 1 has a 'foil' but line 2 has none"):
        PromptPairs.from_jsonl(path)


def test_empty_jsonl_file_is_rejected(tmp_path):
    path = tmp_path / "empty.jsonl"
    path.write_text("\n")
    with pytest.raises(IntervError, match="holds no pairs"):
        PromptPairs.from_jsonl(path)


# ---------------------------------------------------------------- tokenization


def test_right_padding_by_hand():
    tokenized = _pairs().tokenize(ZOO_TOKENIZER)
    a, b, c, d, e, x, y = (_symbol_id(s) for s in "ABCDEXY")
    assert isinstance(tokenized, TokenizedPairs)
    assert tokenized.clean_tokens.tolist() == [[BOS_ID, a, b, c], [BOS_ID, d, e, PAD_ID]]
    assert tokenized.corrupted_tokens.tolist() == [[BOS_ID, a, x, c], [BOS_ID, y, e, PAD_ID]]
    assert tokenized.attention_mask.tolist() == [[True] * 4, [True, True, True, False]]
    assert tokenized.answer_positions.tolist() == [3, 2]
    assert tokenized.target_ids.tolist() == [_symbol_id("Q"), _symbol_id("R")]
    assert tokenized.foil_ids.tolist() == [_symbol_id("S"), _symbol_id("T")]


def test_left_padding_by_hand():
    tokenized = _pairs().tokenize(ZOO_TOKENIZER, padding_side="left")
    d, e = _symbol_id("D"), _symbol_id("E")
    assert tokenized.clean_tokens[1].tolist() == [PAD_ID, BOS_ID, d, e]
    assert tokenized.attention_mask[1].tolist() == [False, True, True, True]
    assert tokenized.answer_positions.tolist() == [3, 3]
    assert tokenized.padding_side == "left"


def test_without_bos_the_prompt_starts_at_position_zero():
    tokenized = _pairs().tokenize(ZOO_TOKENIZER, prepend_bos=False)
    assert tokenized.clean_tokens[:, 0].tolist() == [_symbol_id("A"), _symbol_id("D")]
    assert tokenized.answer_positions.tolist() == [2, 1]


def test_explicit_answer_positions_count_prompt_tokens_without_bos_or_padding():
    pairs = _pairs(answer_positions=(0, -2))
    right = pairs.tokenize(ZOO_TOKENIZER)
    left = pairs.tokenize(ZOO_TOKENIZER, padding_side="left")
    rows = torch.arange(2)
    expected = [_symbol_id("A"), _symbol_id("D")]
    assert right.clean_tokens[rows, right.answer_positions].tolist() == expected
    assert left.clean_tokens[rows, left.answer_positions].tolist() == expected


def test_answer_position_outside_the_prompt_names_pair_and_range():
    with pytest.raises(IntervError, match=r"pair 1: answer position 2 .*valid -2\.\.1"):
        _pairs(answer_positions=(0, 2)).tokenize(ZOO_TOKENIZER)


def test_token_length_mismatch_names_the_pair_both_texts_and_lengths():
    pairs = _pairs(corrupted=("A X C", "Y E Z"))
    with pytest.raises(
        IntervError,
        match=r"pair 1: clean prompt 'D E' has 3 tokens but corrupted prompt 'Y E Z' has 4",
    ):
        pairs.tokenize(ZOO_TOKENIZER)


def test_multi_token_target_shows_its_tokenization():
    with pytest.raises(
        IntervError,
        match=r"target 'R S' of pair 1 must be a single token; .* 2 tokens \['R', 'S'\]",
    ):
        _pairs(targets=("Q", "R S")).tokenize(ZOO_TOKENIZER)


def test_multi_token_foil_shows_its_tokenization():
    with pytest.raises(IntervError, match=r"foil 'S T' of pair 0 .* \['S', 'T'\]"):
        _pairs(foils=("S T", "T")).tokenize(ZOO_TOKENIZER)


def test_prompt_longer_than_the_context_names_the_limit():
    with pytest.raises(IntervError, match=r"pair 0: prompt 'A B C' has 4 tokens, .* n_ctx=3"):
        _pairs().tokenize(ZOO_TOKENIZER, n_ctx=3)
    assert _pairs().tokenize(ZOO_TOKENIZER, n_ctx=4).n_positions == 4


def test_unknown_padding_side_lists_the_choices():
    with pytest.raises(IntervError, match=r"padding_side must be one of \('right', 'left'\)"):
        _pairs().tokenize(ZOO_TOKENIZER, padding_side="middle")


def test_something_that_is_no_tokenizer_is_rejected_by_type():
    with pytest.raises(IntervError, match="got dict"):
        _pairs().tokenize({})


class _StandInBridge:
    """Duck-typed TransformerBridge: its to_tokens prepends a marker id, not the tokenizer's BOS."""

    MARKER = 63

    def __init__(self, n_ctx: int):
        self.tokenizer = ZOO_TOKENIZER
        self.cfg = type("Cfg", (), {"n_ctx": n_ctx})()

    def to_tokens(self, text: str, prepend_bos: bool, truncate: bool) -> torch.Tensor:
        ids = ZOO_TOKENIZER(text, add_special_tokens=False)["input_ids"]
        return torch.tensor([[self.MARKER, *ids] if prepend_bos else ids])


def test_a_model_is_tokenized_with_its_own_to_tokens_and_context_limit():
    tokenized = _pairs().tokenize(_StandInBridge(n_ctx=8))
    assert tokenized.clean_tokens[:, 0].tolist() == [_StandInBridge.MARKER] * 2
    with pytest.raises(IntervError, match="n_ctx=3"):
        _pairs().tokenize(_StandInBridge(n_ctx=3))


@settings(max_examples=40, deadline=None)
@given(
    lengths=st.lists(st.integers(min_value=1, max_value=6), min_size=1, max_size=5),
    seed=st.integers(min_value=0, max_value=10_000),
)
def test_left_and_right_padding_carry_the_same_real_tokens_and_answers(lengths, seed):
    generator = torch.Generator().manual_seed(seed)
    prompts = [
        " ".join(ZOO_SYMBOLS[int(i)] for i in torch.randint(62, (length,), generator=generator))
        for length in lengths
    ]
    pairs = PromptPairs(clean=prompts, corrupted=prompts, targets=["A"] * len(prompts))
    right = pairs.tokenize(ZOO_TOKENIZER)
    left = pairs.tokenize(ZOO_TOKENIZER, padding_side="left")
    rows = torch.arange(len(prompts))
    for tokenized in (right, left):
        assert tokenized.attention_mask.sum(1).tolist() == [length + 1 for length in lengths]
        assert tokenized.clean_tokens[~tokenized.attention_mask].eq(PAD_ID).all()
        last_symbols = [_symbol_id(prompt.split()[-1]) for prompt in prompts]
        assert tokenized.clean_tokens[rows, tokenized.answer_positions].tolist() == last_symbols
    assert right.clean_tokens[right.attention_mask].tolist() == (
        left.clean_tokens[left.attention_mask].tolist()
    )


@pytest.fixture(scope="module")
def zoo_bridge():
    return interv.load_model("induction-2l")


@settings(max_examples=30, deadline=None)
@given(
    lengths=st.lists(st.integers(min_value=1, max_value=6), min_size=1, max_size=6),
    ends_in_pad=st.lists(st.booleans(), min_size=6, max_size=6),
    prepend_bos=st.booleans(),
    padding_side=st.sampled_from(["right", "left"]),
    seed=st.integers(min_value=0, max_value=10_000),
)
def test_batched_tokenization_equals_the_bridges_to_tokens_one_prompt_at_a_time(
    zoo_bridge, lengths, ends_in_pad, prepend_bos, padding_side, seed
):
    """Prompts are tokenized in one batched call; each row must be exactly what
    ``to_tokens`` gives for that prompt alone, including prompts whose last token is the
    pad token itself (their cut is ambiguous in the padded batch)."""
    generator = torch.Generator().manual_seed(seed)
    prompts = [
        " ".join(ZOO_SYMBOLS[int(i)] for i in torch.randint(62, (length,), generator=generator))
        + (" <pad>" if pad else "")
        for length, pad in zip(lengths, ends_in_pad, strict=False)
    ]
    pairs = PromptPairs(clean=prompts, corrupted=prompts, targets=["A"] * len(prompts))
    tokenized = pairs.tokenize(zoo_bridge, prepend_bos=prepend_bos, padding_side=padding_side)
    for row, prompt in enumerate(prompts):
        alone = zoo_bridge.to_tokens(prompt, prepend_bos=prepend_bos, truncate=False)[0]
        real = tokenized.clean_tokens[row][tokenized.attention_mask[row]]
        assert real.tolist() == alone.tolist(), prompt
    # the batch really cuts every row it can (all but those ending in the pad token)
    batch = _batch_encoded(zoo_bridge, prompts, prepend_bos)
    if not any(ends_in_pad[: len(prompts)]):
        assert all(ids is not None for ids in batch)


def test_an_untokenizable_prompt_in_a_batch_is_named_alone(zoo_bridge):
    pairs = PromptPairs(clean=["A B", "A cat"], corrupted=["C D", "C D"], targets=["E", "F"])
    with pytest.raises(IntervError, match=r"pair 1: clean prompt 'A cat' cannot be tokenized"):
        pairs.tokenize(zoo_bridge)


# ---------------------------------------------------------------- built-in tasks


def test_available_tasks_lists_the_three_builtins():
    assert available_tasks() == ("capitals", "induction", "ioi")


def test_unknown_task_lists_the_valid_ones():
    with pytest.raises(
        IntervError, match=r"unknown task 'iol'; .*\('capitals', 'induction', 'ioi'\)"
    ):
        load_task("iol")


def test_unknown_option_lists_the_task_options():
    with pytest.raises(IntervError, match=r"task 'ioi' has no option 'names'; .*\('name_set',\)"):
        load_task("ioi", names="female")


@pytest.mark.parametrize("n_pairs", [0, -3, 2.5, True])
def test_n_pairs_must_be_a_positive_integer(n_pairs):
    with pytest.raises(IntervError, match="n_pairs must be an integer >= 1"):
        load_task("ioi", n_pairs=n_pairs)


@pytest.mark.parametrize("name", ["ioi", "capitals", "induction"])
def test_builtin_tasks_are_deterministic_given_the_seed(name):
    assert load_task(name, n_pairs=12, seed=3) == load_task(name, n_pairs=12, seed=3)
    assert load_task(name, n_pairs=12, seed=3) != load_task(name, n_pairs=12, seed=4)
    assert load_task(name, n_pairs=12).name == name


def test_ioi_pairs_differ_only_in_the_repeated_subject():
    pairs = load_task("ioi", n_pairs=64, seed=1)
    used_templates = set()
    for clean, corrupted, target, foil in zip(
        pairs.clean, pairs.corrupted, pairs.targets, pairs.foils, strict=True
    ):
        clean_words, corrupted_words = clean.split(), corrupted.split()
        differing = [
            i for i, (a, b) in enumerate(zip(clean_words, corrupted_words, strict=True)) if a != b
        ]
        assert len(differing) == 1
        subject = clean_words[differing[0]]
        third = corrupted_words[differing[0]]
        assert foil == " " + subject
        assert clean.count(target.strip()) == 1 and clean.count(subject) == 2
        assert corrupted.count(subject) == 1 and corrupted.count(third) == 1
        # both name orders occur: the indirect object may come first or second
        used_templates.add((clean.index(target.strip()) < clean.index(subject), len(clean_words)))
    assert {first for first, _ in used_templates} == {True, False}
    assert len(IOI_TEMPLATES) >= 5


def test_ioi_name_sets_restrict_the_names():
    female = load_task("ioi", n_pairs=32, name_set="female")
    male = load_task("ioi", n_pairs=32, name_set="male")
    assert not set(female.targets + female.foils) & set(male.targets + male.foils)
    with pytest.raises(
        IntervError, match=r"unknown IOI name_set 'kids'; .*'mixed', 'female', 'male'"
    ):
        load_task("ioi", name_set="kids")


def test_capitals_corrupt_with_another_country_whose_capital_is_the_foil():
    pairs = load_task("capitals", n_pairs=33)
    assert len(set(pairs.clean)) == 33  # every country once
    with pytest.raises(IntervError, match=r"at most 33 pairs .* n_pairs=34 would repeat prompts"):
        load_task("capitals", n_pairs=34)
    for clean, corrupted, target, foil in zip(
        pairs.clean, pairs.corrupted, pairs.targets, pairs.foils, strict=True
    ):
        assert clean != corrupted and target != foil
        assert clean.startswith("The capital of ") and corrupted.endswith(" is")


@settings(max_examples=40, deadline=None)
@given(
    seed=st.integers(min_value=0, max_value=10_000),
    prefix_len=st.integers(min_value=2, max_value=59),
    data=st.data(),
)
def test_induction_answer_follows_the_previous_occurrence_and_is_absent_when_corrupted(
    seed, prefix_len, data
):
    max_repeat = data.draw(st.integers(1, min(prefix_len - 1, 60 - prefix_len)))
    pairs = load_task(
        "induction", n_pairs=4, seed=seed, prefix_len=prefix_len, max_repeat=max_repeat
    )
    for clean, corrupted, target, foil in zip(
        pairs.clean, pairs.corrupted, pairs.targets, pairs.foils, strict=True
    ):
        symbols, corrupted_symbols = clean.split(), corrupted.split()
        assert len(symbols) == len(corrupted_symbols)
        assert len(set(symbols[:prefix_len])) == prefix_len
        repeat = len(symbols) - prefix_len
        assert 1 <= repeat <= max_repeat
        first = symbols.index(symbols[-1])
        assert symbols[first + 1] == target
        assert symbols[prefix_len:] == symbols[first - repeat + 1 : first + 1]
        assert target not in corrupted_symbols and foil not in symbols + corrupted_symbols
        assert corrupted_symbols[-1] not in corrupted_symbols[:-repeat]
        changed = [
            i for i, (a, b) in enumerate(zip(symbols, corrupted_symbols, strict=True)) if a != b
        ]
        assert changed == list(range(first - repeat + 1, first + 2))


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"prefix_len": 1}, r"prefix_len must be in 2\.\.59 symbols; got 1"),
        ({"prefix_len": 10, "max_repeat": 10}, r"max_repeat must be in 1\.\.9 for prefix_len=10"),
        ({"prefix_len": 50, "max_repeat": 11}, r"max_repeat must be in 1\.\.10 for prefix_len=50"),
    ],
)
def test_induction_options_out_of_range_name_the_range(options, message):
    with pytest.raises(IntervError, match=message):
        load_task("induction", **options)


def test_induction_tokenizes_with_the_zoo_vocabulary():
    tokenized = load_task("induction", n_pairs=16, seed=5).tokenize(ZOO_TOKENIZER)
    rows = torch.arange(16)
    assert tokenized.clean_tokens[:, 0].eq(BOS_ID).all()
    assert tokenized.clean_tokens.max() < 64
    last = tokenized.clean_tokens[rows, tokenized.answer_positions]
    # the token after the first occurrence of the last token is the target
    for row in range(16):
        first = int((tokenized.clean_tokens[row] == last[row]).nonzero()[0, 0])
        assert int(tokenized.clean_tokens[row, first + 1]) == int(tokenized.target_ids[row])
