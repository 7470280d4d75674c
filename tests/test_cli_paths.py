"""``interv paths`` and ``interv interactions`` on the zoo model."""

from __future__ import annotations

import re

import pytest

from interv.cli import main
from interv.cli.paths import parse_head
from interv.errors import IntervError


def test_paths_prints_total_direct_and_the_strongest_receivers_with_units(capsys):
    assert (
        main(["paths", "induction-2l", "--sender", "0", "2", "--n-pairs", "8", "--top", "2"]) == 0
    )
    out = capsys.readouterr().out.splitlines()
    assert "effects = mean logit_diff minus the clean run's, in logits" in out[0]
    assert "noising: L0H2 output (z)" in out[1] and "direct effect of L0H2" in out[3]
    cells = [line for line in out if line.startswith("  ")]
    assert len(cells) == 2 and all("logits  path patching (noising): L0H2" in c for c in cells)
    assert all("key input of L1H" in cell for cell in cells)


def test_interactions_prints_the_design_the_rule_and_every_pair(capsys):
    argv = ["interactions", "induction-2l", "--heads", "L1H0", "1:2", "--n-pairs", "8"]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "f(AB) - f(A) - f(B) + f(none)" in out and "compensation:" in out
    assert "L1H0 & L1H2 (mean ablation): alone" in out


def test_a_badly_written_head_fails_before_any_model_loads(capsys, monkeypatch):
    import interv.models.loading

    monkeypatch.setattr(interv.models.loading, "load_model", pytest.fail)
    assert main(["interactions", "induction-2l", "--heads", "L1H0", "one"]) == 2
    assert "--heads: a head is written L1H3 (layer 1, head 3); got 'one'" in capsys.readouterr().err
    with pytest.raises(IntervError):
        parse_head("L1")


def test_interactions_are_printed_largest_first(capsys):
    argv = ["interactions", "induction-2l", "--heads", "L1H0", "L1H2", "L0H2", "--n-pairs", "6"]
    assert main(argv) == 0
    out = capsys.readouterr().out
    values = [float(m) for m in re.findall(r"interaction ([+-][\d.e+-]+) \[", out)]
    assert len(values) == 3 and [abs(v) for v in values] == sorted(map(abs, values), reverse=True)
    assert "pairs by |interaction|, largest first:" in out
