"""benchmarks/bench_estimators.py: its paired comparison with EAP-IG, on hand-made numbers.

The benchmark itself needs SmolLM2 and an hour; these check the arithmetic it adds to the
library's numbers: the resampled top-k recall, the CPR of resampled prompt means and the
verdict "beats EAP-IG on both" with its paired intervals.
"""

from __future__ import annotations

import pytest
import torch

from tests._benchmarks import imported_benchmark


@pytest.fixture(scope="module")
def bench():
    """The benchmark module, imported with the environment it sets restored afterwards."""
    with imported_benchmark("bench_estimators") as module:
        yield module


def test_top_recall_per_column(bench):
    # column 0: exact top-2 by |effect| {0, 1}, estimated top-2 {0, 2} -> 1/2;
    # column 1: exact top-2 {2, 3}, estimated {2, 3} (signs ignored) -> 1
    exact = torch.tensor([[5.0, 0.0], [-4.0, 0.1], [1.0, 3.0], [0.0, -2.0]])
    estimates = torch.tensor([[9.0, 0.0], [0.5, 0.0], [-3.0, -7.0], [0.0, 6.0]])
    assert bench.top_recall(estimates, exact, 2).tolist() == [0.5, 1.0]


def test_cpr_of_resampled_prompt_means(bench):
    curves = object.__new__(bench.SignedCurves)  # the arithmetic only, no model
    curves.full = torch.tensor([2.0, 4.0, 6.0], dtype=torch.float64)
    curves.empty = torch.tensor([0.0, 1.0, 2.0], dtype=torch.float64)
    draws = torch.tensor([[0, 1, 2], [2, 2, 0]])
    n_fractions = len(bench.MIB_FRACTIONS)
    # every circuit halfway from empty to full per prompt: faithfulness 1/2 at every fraction
    half = ((curves.full + curves.empty) / 2).expand(n_fractions, 3)
    point, boot = curves.cpr(half, draws)
    area = 0.5 * (1.0 - bench.MIB_FRACTIONS[0])  # trapezoids of a constant 1/2
    assert point == pytest.approx(area)
    assert boot.tolist() == pytest.approx([area, area])
    # a ratio of means, not a mean of ratios: prompt 0 at full, the others at empty
    one = torch.tensor([2.0, 1.0, 2.0], dtype=torch.float64).expand(n_fractions, 3)
    point, _ = curves.cpr(one, draws)
    assert point == pytest.approx((2.0 / 9.0) * (1.0 - bench.MIB_FRACTIONS[0]))


def _row(name: str, recall: float, cpr: float, interval: list[float]) -> dict:
    return {"estimator": name, "recall": {100: recall}, "cpr": cpr, "cpr_interval": interval}


def test_verdict_needs_both_and_says_when_established(bench, capsys):
    rows = [
        _row("EAP", 0.99, 2.0, [1.0, 3.0]),
        _row("EAP-IG (5 steps)", 0.80, 4.0, [3.5, 4.5]),
        _row("better", 0.90, 5.0, [4.8, 5.2]),
        _row("noisy", 0.90, 4.1, [0.0, 9.0]),
        _row("shifted", 0.82, 5.0, [4.8, 5.2]),
    ]
    ones = torch.ones(1000, dtype=torch.float64)
    boots = {
        "EAP": {"recall": 0.99 * ones, "cpr": 2.0 * ones},
        "EAP-IG (5 steps)": {"recall": 0.80 * ones, "cpr": 4.0 * ones},
        "better": {"recall": 0.90 * ones, "cpr": 5.0 * ones},
        "noisy": {"recall": 0.90 * ones, "cpr": torch.linspace(-1.0, 9.0, 1000)},
        "shifted": {"recall": 0.90 * ones, "cpr": 5.0 * ones},  # resampled recall off the point
    }
    verdict = {entry["estimator"]: entry for entry in bench.against_reference(rows, boots, 100, 8)}
    assert set(verdict) == {"EAP", "better", "noisy", "shifted"}
    assert verdict["EAP"]["beats"] is False  # higher recall, lower CPR
    assert verdict["EAP"]["cpr"]["difference"] == pytest.approx(-2.0)
    assert verdict["EAP"]["cpr_intervals_overlap"] is False
    assert verdict["better"]["beats"] and verdict["better"]["established"]
    assert verdict["better"]["recall_top_100"]["interval"] == pytest.approx([0.1, 0.1])
    assert verdict["noisy"]["beats"] and not verdict["noisy"]["established"]
    assert verdict["noisy"]["cpr"]["interval"][0] < 0 < verdict["noisy"]["cpr"]["interval"][1]
    shifted = verdict["shifted"]["recall_top_100"]
    assert shifted["biased"] and not verdict["better"]["recall_top_100"]["biased"]
    assert verdict["shifted"]["beats"] and not verdict["shifted"]["established"]
    printed = capsys.readouterr().out
    assert "| shifted | +0.02 [0.10, 0.10] (outside) | +1.000 [1.000, 1.000] |" in printed
    assert '"beats EAP-IG on both" = a higher recall of the exact top-100' in printed
    assert "| noisy | +0.10 [0.10, 0.10] | +0.100 " in printed
