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
        "exercise 1: not yet (0.6; expected a number); hint: log 2",
        "exercise 1: not yet (nan; expected a number)",
    ]


def test_labels_must_be_equal_and_a_missing_answer_gives_the_hint_and_the_form(capsys):
    check("2", "L0H2", "L0H2", form="label")
    check("2", "L1H2", "L0H2", form="label")
    check("2", True, 1)  # a bool is not a number
    check("3", None, 4, hint="count the heads", form="count")
    assert capsys.readouterr().out.splitlines() == [
        "exercise 2: correct (L0H2)",
        "exercise 2: not yet (L1H2; expected the exact value)",
        "exercise 2: not yet (True; expected a number)",
        "exercise 3: no answer yet; write a whole number; hint: count the heads",
    ]


def test_a_number_of_any_type_is_compared_with_its_tolerance(capsys):
    import numpy as np
    import torch

    check("4", np.float64(0.69), math.log(2), tolerance=0.01)
    check("4", torch.tensor(0.69), math.log(2), tolerance=0.01)
    check("4", np.int64(3), 3)
    check("4", 0.69, torch.tensor(math.log(2)), tolerance=0.01)
    check("4", torch.tensor(0.5), math.log(2), tolerance=0.01)
    assert [line.split(" (")[0] for line in capsys.readouterr().out.splitlines()] == [
        "exercise 4: correct",
        "exercise 4: correct",
        "exercise 4: correct",
        "exercise 4: correct",
        "exercise 4: not yet",
    ]


def test_arrays_are_compared_element_wise_never_raising(capsys):
    import numpy as np
    import torch

    check("5", torch.tensor([0.1, 0.2]), [0.1, 0.2001], tolerance=1e-3)
    check("5", np.array([0.1, 0.2]), torch.tensor([0.1, 0.3]), tolerance=1e-3)
    check("5", torch.tensor([0.1, 0.2]), [0.1, 0.2, 0.3], tolerance=1e-3)  # another shape
    check("5", [True, 1], [True, True])  # True is not 1, inside a list either
    assert [line.split(" (")[0] for line in capsys.readouterr().out.splitlines()] == [
        "exercise 5: correct",
        "exercise 5: not yet",
        "exercise 5: not yet",
        "exercise 5: not yet",
    ]


def verdicts(capsys) -> list[str]:
    """Each printed check as "correct" or "not yet"."""
    return [line.split(": ")[1].split(" (")[0] for line in capsys.readouterr().out.splitlines()]


def test_a_head_is_accepted_in_every_documented_spelling(capsys):
    for spelling in ("L0H2", "l0h2", " L0 H2 ", (0, 2), [0, 2]):
        check("h", spelling, "L0H2", form="head")
    check("h", (0, 2), (0, 2), form="head")  # the expected value in any spelling too
    assert verdicts(capsys) == ["correct"] * 6
    for wrong in ("L2H0", (2, 0), "L0", (0, 2, 1), (True, 2), 2):
        check("h", wrong, "L0H2", form="head")
    lines = capsys.readouterr().out.splitlines()
    assert all("not yet" in line and "a head label such as 'L0H2'" in line for line in lines)


def test_a_choice_is_accepted_with_dashes_underscores_and_any_case(capsys):
    choices = ("keep_sink", "drop_sink")
    for spelling in ("drop_sink", "drop-sink", "Drop-Sink", "drop sink"):
        check("c", spelling, "drop_sink", form="choice", choices=choices)
    check("c", "keep-sink", "drop_sink", form="choice", choices=choices)
    check("c", "sink", "drop_sink", form="choice", choices=choices)
    out = capsys.readouterr().out.splitlines()
    assert [line.split(": ")[1].split(" (")[0] for line in out] == ["correct"] * 4 + ["not yet"] * 2
    assert "not one of the choices; expected one of 'keep_sink', 'drop_sink'" in out[-1]


def test_a_sign_flipped_number_is_rejected_and_told_so(capsys):
    check("s", 0.932, -0.932, tolerance=0.005)
    check("s", [0.1, -0.2], [-0.1, 0.2], tolerance=1e-6)
    check("s", -9.97, -9.969, tolerance=0.005)
    out = capsys.readouterr().out.splitlines()
    assert out[0].endswith("(0.932: the size is right but the sign is wrong; expected a number)")
    assert "sign is wrong" in out[1]
    assert out[2] == "exercise s: correct (-9.97)"


def test_a_percentage_for_a_fraction_is_rejected_with_the_form(capsys):
    check("f", 77, 0.77, tolerance=0.005, form="fraction")
    check("f", 0.77, 0.77, tolerance=0.005, form="fraction")
    out = capsys.readouterr().out.splitlines()
    assert "looks like a percentage: write it as a fraction" in out[0]
    assert out[1] == "exercise f: correct (0.77)"


def test_a_count_accepts_a_whole_float_and_rejects_a_fraction(capsys):
    check("n", 4.0, 4, form="count")
    check("n", 4.5, 4, form="count")
    check("n", 5, 4, form="count")
    assert verdicts(capsys) == ["correct", "not yet", "not yet"]


def test_a_misused_check_is_refused():
    import pytest

    with pytest.raises(ValueError, match="unknown form 'heads'"):
        check("x", 1, 1, form="heads")
    with pytest.raises(ValueError, match="choices= is given exactly when"):
        check("x", "a", "a", form="choice")
    with pytest.raises(ValueError, match="is no head"):
        check("x", "L0H2", "layer 0", form="head")


def test_an_answer_s_own_wording_replaces_the_form_s(capsys):
    check("w", None, True, form="label", written="a row of 4 weights")
    check("w", False, True, form="label", written="a row of 4 weights")
    assert capsys.readouterr().out.splitlines() == [
        "exercise w: no answer yet; write a row of 4 weights",
        "exercise w: not yet (False; expected a row of 4 weights)",
    ]
