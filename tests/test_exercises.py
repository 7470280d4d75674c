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
