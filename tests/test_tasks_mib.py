"""MIB task files read as prompt pairs (``interv.tasks.from_mib``): MIB's own field layouts
(IOI's names with a leading space, multiple choice by ``answerKey``, arithmetic labels),
explicit field paths, and clear errors naming the row and the field."""

from __future__ import annotations

import json

import pytest

from interv.errors import IntervError
from interv.tasks import from_mib

IOI_ROWS = [
    {
        "prompt": "When Mary and John went to the store, John gave a drink to",
        "s2_io_flip_counterfactual": {
            "prompt": "When Mary and John went to the store, Mary gave a drink to"
        },
        "metadata": {"indirect_object": "Mary", "subject": "John", "random_c": "Paul"},
    },
    {
        "prompt": "Then Anna and Tom had a long talk. Tom gave a book to",
        "s2_io_flip_counterfactual": {
            "prompt": "Then Anna and Tom had a long talk. Anna gave a book to"
        },
        "metadata": {"indirect_object": "Anna", "subject": "Tom", "random_c": "Eve"},
    },
]
MCQA_ROW = {
    "prompt": "Q: colour of grass? A. red B. green Answer:",
    "choices": {"label": ["A", "B"], "text": ["red", "green"]},
    "answerKey": 1,
    "symbol_counterfactual": {
        "prompt": "Q: colour of grass? X. red Y. green Answer:",
        "choices": {"label": ["X", "Y"]},
        "answerKey": 1,
    },
}


def test_mibs_ioi_rows_give_the_pairs_mibs_loader_reads(tmp_path):
    path = tmp_path / "ioi.jsonl"
    path.write_text("".join(json.dumps(row) + "\n" for row in IOI_ROWS))
    pairs = from_mib(path, task="ioi")
    assert pairs.clean == (IOI_ROWS[0]["prompt"], IOI_ROWS[1]["prompt"])
    assert pairs.corrupted[1] == IOI_ROWS[1]["s2_io_flip_counterfactual"]["prompt"]
    assert pairs.targets == (" Mary", " Anna") and pairs.foils == (" John", " Tom")
    assert pairs.name == "ioi" and from_mib(path, task="ioi", n_pairs=1).n_pairs == 1


def test_multiple_choice_answers_are_indexed_by_their_key_and_a_json_list_is_read(tmp_path):
    path = tmp_path / "mcqa.json"
    path.write_text(json.dumps([MCQA_ROW]))
    pairs = from_mib(path, task="mcqa")
    assert (pairs.targets, pairs.foils) == (("B",), ("Y",))
    assert pairs.corrupted == (MCQA_ROW["symbol_counterfactual"]["prompt"],)


def test_explicit_field_paths_override_the_preset(tmp_path):
    path = tmp_path / "rows.jsonl"
    row = {"prompt": "1+1=", "random_counterfactual": {"prompt": "2+2=", "label": 4}, "label": 2}
    path.write_text(json.dumps(row) + "\n")
    pairs = from_mib(path, task="arithmetic")
    assert (pairs.targets, pairs.foils) == (("2",), ("4",))
    custom = from_mib(
        path, clean="prompt", corrupted="random_counterfactual.prompt", target="label"
    )
    assert custom.foils is None and custom.name == "rows"


def test_bad_mib_task_files_get_the_row_and_the_field(tmp_path):
    path = tmp_path / "ioi.jsonl"
    path.write_text(json.dumps({"prompt": "x", "metadata": {}}) + "\n")
    with pytest.raises(IntervError, match=r"line 1: no field 's2_io_flip_counterfactual\.prompt'"):
        from_mib(path, task="ioi")
    with pytest.raises(IntervError, match="unknown MIB task 'sst2'"):
        from_mib(path, task="sst2")
    with pytest.raises(IntervError, match="the clean field path"):
        from_mib(path)
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"prompt": \n')
    with pytest.raises(IntervError, match="line 1 is not valid JSON"):
        from_mib(bad, task="ioi")
