"""The ``interv`` command line: numbers with units, clear errors, exit codes."""

from __future__ import annotations

import math

from interv.cli import main


def test_metrics_prints_each_number_with_its_unit(capsys):
    assert main(["metrics", "0.7", "0.1", "0.1", "0.1"]) == 0
    out = capsys.readouterr().out
    h = -(0.7 * math.log(0.7) + 3 * 0.1 * math.log(0.1))
    assert f"entropy H                   {h:.4f} nats" in out
    assert "sink mass s                 0.7000" in out
    # three equal content weights: content entropy log 3, normalized 1
    assert f"content entropy H(q)        {math.log(3):.4f} nats" in out
    assert "content normalized entropy  1.0000" in out
    assert "not how much the head matters" in out


def test_metrics_in_bits(capsys):
    assert main(["metrics", "0.5", "0.5", "--unit", "bits"]) == 0
    assert "entropy H                   1.0000 bits" in capsys.readouterr().out


def test_metrics_rejects_a_row_that_does_not_sum_to_one(capsys):
    assert main(["metrics", "0.7", "0.1", "0.1", "0.2"]) == 2
    err = capsys.readouterr().err
    assert "sum to 1.1" in err and "expected 1" in err
