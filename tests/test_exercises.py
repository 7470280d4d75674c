"""The exercise checks of the tutorial notebooks."""

from __future__ import annotations

import math

from interv.exercises import check


def test_a_number_within_tolerance_is_correct_and_outside_it_is_not(capsys):
    assert check("1", 0.69, math.log(2), tolerance=0.01)
    assert not check("1", 0.6, math.log(2), tolerance=0.01, hint="log 2")
    assert not check("1", float("nan"), math.log(2), tolerance=1.0)
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "exercise 1: correct (0.69)"
    assert out[1] == "exercise 1: not yet (0.6); hint: log 2"


def test_labels_must_be_equal_and_a_missing_answer_gives_the_hint(capsys):
    assert check("2", "L0H2", "L0H2")
    assert not check("2", "L1H2", "L0H2")
    assert not check("2", True, 1)  # a bool is not a number
    assert not check("3", None, 4, hint="count the heads")
    assert capsys.readouterr().out.splitlines()[-1] == (
        "exercise 3: no answer yet (hint: count the heads)"
    )
