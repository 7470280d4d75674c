"""MIB task files read as MIB's loader reads them (``interv.tasks.from_mib``): MIB's own field
layouts (IOI's names with a leading space, multiple choice by ``answerKey``, arithmetic
labels), the rows MIB's ``filter_dataset`` keeps and drops (worked by hand from its rules,
MIB-circuit-track b759df3 ``dataset.py``), ``n_pairs`` counted after the filter, MIB's right
padding of prompts of different token counts, and clear errors naming the row and the field.

The tokenizer is a word-level one built here (whitespace, punctuation, one token per digit):
a name of two words is two tokens, ``"12"`` is two tokens, ``"7"`` one.
"""

from __future__ import annotations

import json

import pytest
import torch
from tokenizers import Tokenizer, models, pre_tokenizers
from transformers import PreTrainedTokenizerFast

from interv.errors import IntervError
from interv.tasks import MIBTask, from_mib

WORDS = [
    "When",
    "Mary",
    "John",
    "Ann",
    "Paul",
    "Eve",
    "Anna",
    "Tom",
    "Lee",
    "went",
    "to",
    "the",
    "store",
    ",",
    "gave",
    "a",
    "drink",
    "Then",
    "and",
    "had",
    "long",
    "talk",
    ".",
    "book",
    "Q",
    ":",
    "colour",
    "of",
    "grass",
    "?",
    "A",
    "B",
    "X",
    "Y",
    "red",
    "green",
    "Answer",
    "+",
    "-",
    "=",
    "0",
    "1",
    "2",
    "3",
    "4",
    "5",
    "6",
    "7",
    "8",
    "9",
]


def _tokenizer() -> PreTrainedTokenizerFast:
    vocab = {"<bos>": 0, "<pad>": 1, "<unk>": 2}
    vocab.update({word: i + 3 for i, word in enumerate(dict.fromkeys(WORDS))})
    backend = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    backend.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.WhitespaceSplit(),
            pre_tokenizers.Punctuation(),
            pre_tokenizers.Digits(individual_digits=True),
        ]
    )
    return PreTrainedTokenizerFast(tokenizer_object=backend, bos_token="<bos>", pad_token="<pad>")


TOKENIZER = _tokenizer()


def _ioi(io: str, s: str, c: str = "Paul", text: str = "went to the store") -> dict:
    return {
        "prompt": f"When {io} and {s} {text} , {s} gave a drink to",
        "s2_io_flip_counterfactual": {"prompt": f"When {io} and {s} {text} , {io} gave a drink to"},
        "metadata": {"indirect_object": io, "subject": s, "random_c": c},
    }


IOI_ROWS = [
    _ioi("Mary", "John"),
    _ioi("Mary Ann", "John"),  # 2 tokens against 1: MIB drops it
    _ioi("Anna", "Tom", "Eve", "had a long talk"),
    _ioi("Mary Ann", "Tom Lee", "Eve Lee"),  # all three 2 tokens: MIB keeps it (first token)
    _ioi("Anna", "Tom", "Eve Lee"),  # random_c 2 tokens: dropped
]
MCQA_ROW = {
    "prompt": "Q : colour of grass ? A red B green Answer :",
    "choices": {"label": ["A", "B"], "text": ["red", "green"]},
    "answerKey": 1,
    "symbol_counterfactual": {
        "prompt": "Q : colour of grass ? X red Y green Answer :",
        "choices": {"label": ["X", "Y"]},
        "answerKey": 1,
    },
}


def _write(path, rows) -> object:
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


def test_ioi_rows_are_kept_and_dropped_as_mibs_filter_dataset(tmp_path):
    path = _write(tmp_path / "ioi.jsonl", IOI_ROWS)
    task = from_mib(path, TOKENIZER, task="ioi")
    assert isinstance(task, MIBTask)
    # kept: rows 0, 2, 3 (names of equal token counts); dropped: rows 1 and 4
    assert task.pairs.clean == tuple(IOI_ROWS[i]["prompt"] for i in (0, 2, 3))
    assert task.pairs.targets == (" Mary", " Anna", " Mary Ann")
    assert task.pairs.foils == (" John", " Tom", " Tom Lee")
    assert task.n_rows == 5 and task.n_pairs == 3
    assert task.dropped == (("indirect_object, subject and random_c of different token counts", 2),)
    assert "3 prompt pairs from the 5 rows of ioi.jsonl: 2 dropped" in task.sentence
    # n_pairs counts rows after the filter (MIB's num_examples): the first two kept rows
    two = from_mib(path, TOKENIZER, task="ioi", n_pairs=2)
    assert two.pairs.clean == (IOI_ROWS[0]["prompt"], IOI_ROWS[2]["prompt"])
    assert two.n_cut == 1 and "1 more left out by n_pairs" in two.sentence
    # MIB's answer is the first token of " Mary Ann" / " Tom Lee"
    tokens = task.tokenize(TOKENIZER)
    vocab = TOKENIZER.get_vocab()
    assert tokens.target_ids.tolist() == [vocab["Mary"], vocab["Anna"], vocab["Mary"]]
    assert tokens.foil_ids.tolist() == [vocab["John"], vocab["Tom"], vocab["Tom"]]


def test_a_preset_needs_the_tokenizer_mibs_filter_counts_with(tmp_path):
    path = _write(tmp_path / "ioi.jsonl", IOI_ROWS)
    with pytest.raises(IntervError, match="by their token counts"):
        from_mib(path, task="ioi")


def _arithmetic(prompt, label, cf_prompt, cf_label, operator="+", null=False) -> dict:
    cf = None if null else {"prompt": cf_prompt, "label": cf_label}
    return {"prompt": prompt, "label": label, "operator": operator, "random_counterfactual": cf}


ARITHMETIC = [
    _arithmetic("3 + 4 =", 7, "1 + 5 =", 6),  # kept
    _arithmetic("3 + 1 =", 4, None, None, null=True),  # counterfactual null: dropped
    _arithmetic("9 - 4 =", 5, "8 - 5 =", 3, operator="-"),  # not '+': dropped from addition
    _arithmetic("9 + 3 =", 12, "2 + 3 =", 5),  # label "12" is two tokens: dropped
    _arithmetic("12 + 3 =", 5, "1 + 1 =", 2),  # kept: clean 5 tokens + BOS, corrupted 4 + BOS
    _arithmetic("2 + 2 =", 4, None, 3),  # counterfactual prompt null: dropped
]


def test_arithmetic_rows_are_kept_and_dropped_as_mibs_filter_dataset(tmp_path):
    path = _write(tmp_path / "add.jsonl", ARITHMETIC)
    task = from_mib(path, TOKENIZER, task="arithmetic_addition")
    assert task.pairs.clean == ("3 + 4 =", "12 + 3 =")
    assert (task.pairs.targets, task.pairs.foils) == (("7", "5"), ("6", "2"))
    assert dict(task.dropped) == {
        "random_counterfactual is null": 1,
        "operator is not '+'": 1,
        "label not one token": 1,
        "random_counterfactual.prompt is null": 1,
    }
    assert from_mib(path, TOKENIZER, task="arithmetic").pairs.clean == task.pairs.clean
    subtraction = from_mib(path, TOKENIZER, task="arithmetic_subtraction")
    assert subtraction.pairs.clean == ("9 - 4 =",) and subtraction.n_pairs == 1


def test_prompts_of_different_token_counts_are_right_padded_as_mib_does(tmp_path):
    path = _write(tmp_path / "add.jsonl", ARITHMETIC)
    tokens = from_mib(path, TOKENIZER, task="arithmetic").tokenize(TOKENIZER)
    vocab = TOKENIZER.get_vocab()
    bos, pad = 0, 1
    # "3 + 4 =" and "1 + 5 =": BOS + 4 tokens; "12 + 3 =": BOS + 5; "1 + 1 =": BOS + 4
    assert tokens.clean_tokens.tolist() == [
        [bos, vocab["3"], vocab["+"], vocab["4"], vocab["="], pad],
        [bos, vocab["1"], vocab["2"], vocab["+"], vocab["3"], vocab["="]],
    ]
    assert tokens.corrupted_tokens.tolist() == [
        [bos, vocab["1"], vocab["+"], vocab["5"], vocab["="], pad],
        [bos, vocab["1"], vocab["+"], vocab["1"], vocab["="], pad],
    ]
    # both runs read with the clean prompt's mask; the answer at the clean prompt's last token
    assert tokens.attention_mask.tolist() == [[True] * 5 + [False], [True] * 6]
    assert tokens.answer_positions.tolist() == [4, 5]
    assert tokens.target_ids.tolist() == [vocab["7"], vocab["5"]]
    assert torch.equal(tokens.foil_ids, torch.tensor([vocab["6"], vocab["2"]]))


def test_multiple_choice_answers_are_indexed_by_their_key_and_a_json_list_is_read(tmp_path):
    path = tmp_path / "mcqa.json"
    other = {**MCQA_ROW, "prompt": "Q : colour of grass ? A red B green"}
    other["symbol_counterfactual"] = {**MCQA_ROW["symbol_counterfactual"], "answerKey": 0}
    other["symbol_counterfactual"]["choices"] = {"label": ["X Y", "Y"]}  # 2 tokens: dropped
    path.write_text(json.dumps([MCQA_ROW, other]))
    task = from_mib(path, TOKENIZER, task="mcqa")
    assert (task.pairs.targets, task.pairs.foils) == (("B",), ("Y",))
    assert task.pairs.corrupted == (MCQA_ROW["symbol_counterfactual"]["prompt"],)
    assert task.dropped == (("answer labels of different token counts", 1),)


def test_explicit_field_paths_override_the_preset(tmp_path):
    path = tmp_path / "rows.jsonl"
    row = _arithmetic("1 + 1 =", 2, "2 + 2 =", 4)
    path.write_text(json.dumps(row) + "\n")
    task = from_mib(path, TOKENIZER, task="arithmetic")
    assert (task.pairs.targets, task.pairs.foils) == (("2",), ("4",))
    custom = from_mib(
        path, clean="prompt", corrupted="random_counterfactual.prompt", target="label"
    )
    assert custom.pairs.foils is None and custom.pairs.name == "rows" and custom.dropped == ()


def test_bad_mib_task_files_get_the_row_and_the_field(tmp_path):
    path = tmp_path / "ioi.jsonl"
    path.write_text(json.dumps({"prompt": "x", "metadata": {}}) + "\n")
    with pytest.raises(IntervError, match=r"line 1: no field 'metadata\.indirect_object'"):
        from_mib(path, TOKENIZER, task="ioi")
    with pytest.raises(IntervError, match="unknown MIB task 'sst2'"):
        from_mib(path, TOKENIZER, task="sst2")
    with pytest.raises(IntervError, match="the clean field path"):
        from_mib(path)
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"prompt": \n')
    with pytest.raises(IntervError, match="line 1 is not valid JSON"):
        from_mib(bad, TOKENIZER, task="ioi")
    dropped = _write(tmp_path / "all.jsonl", [IOI_ROWS[1]])
    with pytest.raises(IntervError, match="every one of its 1 rows is dropped"):
        from_mib(dropped, TOKENIZER, task="ioi")
