"""The exercise checks of the tutorial notebooks."""

from __future__ import annotations

import math

from interv.exercises import check


def test_a_number_within_tolerance_is_correct_and_outside_it_is_not(capsys):
    check("1", 0.69, math.log(2), tolerance=0.01)
    check("1", 0.6, math.log(2), tolerance=0.01, hint="log 2")
    check("1", float("nan"), math.log(2), tolerance=1.0)
    assert capsys.readouterr().out.splitlines() == [
        "exercise 1: correct (0.69)",
        "exercise 1: not yet (0.6); hint: log 2",
        "exercise 1: not yet (nan)",
    ]


def test_labels_must_be_equal_and_a_missing_answer_gives_the_hint(capsys):
    check("2", "L0H2", "L0H2")
    check("2", "L1H2", "L0H2")
    check("2", True, 1)  # a bool is not a number
    check("3", None, 4, hint="count the heads")
    assert capsys.readouterr().out.splitlines() == [
        "exercise 2: correct (L0H2)",
        "exercise 2: not yet ('L1H2')",
        "exercise 2: not yet (True)",
        "exercise 3: no answer yet (hint: count the heads)",
    ]
