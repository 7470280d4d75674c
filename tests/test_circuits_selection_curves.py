"""The faithfulness of a stability run is the stable circuit's (``faithfulness(result)`` with
``result.selection`` set ranks the selected edges first, ``selection=False`` the result's
ranking alone).

A selection of three edges outside the result's top three (the next three, whose circuit's
value is not the top three's) is attached by hand, so the curve's circuits are known:
at the selection's own size both orders (CMD's by absolute value, CPR's by signed value) are
exactly the three edges, so the curve equals the curve of those edges given as a list, and
the top three of the result's ranking give another circuit.
"""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch

import interv
from interv.audit import Screen
from interv.circuits import discover, faithfulness
from interv.circuits.curves import _first, _rankings
from interv.circuits.mib import mib_order, mib_scores
from interv.errors import IntervError


@pytest.fixture(scope="module")
def setting():
    model = interv.load_model("induction-2l")
    task = interv.load_task("induction", n_pairs=4, seed=1).tokenize(model)
    found = discover(
        model, task, screen=Screen(top_k=4, audit=0, alpha=None), select="stability",
        resamples=4, pi=0.75,
    )  # fmt: skip
    order = found.ranking().tolist()
    chosen = (order[5], order[3], order[4])  # none of the result's top three
    result = replace(found, selection=replace(found.selection, selected=chosen))
    return model, task, result, chosen


def test_first_moves_the_given_edges_to_the_front_and_keeps_the_rest_in_order():
    order = torch.tensor([4, 0, 3, 1, 2])
    assert _first(torch.tensor([2, 0]), order).tolist() == [2, 0, 4, 3, 1]
    assert _first(torch.tensor([], dtype=torch.long), order).tolist() == [4, 0, 3, 1, 2]


def test_both_orders_put_the_selected_edges_first(setting):
    _, _, result, chosen = setting
    absolute, signed, what = _rankings(result, result.graph)
    rest = [i for i in result.ranking().tolist() if i not in chosen]
    assert absolute.tolist() == [*chosen, *rest]
    signed_rest = [i for i in mib_order(mib_scores(result), absolute=False).tolist()]
    assert signed.tolist() == [*chosen, *(i for i in signed_rest if i not in chosen)]
    assert "stability selection's 3 edges first" in what
    plain, plain_signed, _ = _rankings(result, result.graph, selection=False)
    assert plain.tolist() == result.ranking().tolist()
    assert plain_signed.tolist() == signed_rest


def test_the_curve_of_a_stability_run_is_the_selected_circuits(setting):
    model, task, result, chosen = setting
    n = result.graph.n_edges
    fractions = [3 / n, 1.0]
    own = faithfulness(model, task, result, fractions=fractions, n_bootstrap=10)
    given = faithfulness(model, task, list(chosen), fractions=fractions, n_bootstrap=10)
    plain = faithfulness(model, task, result, fractions=fractions, n_bootstrap=10, selection=False)
    top = faithfulness(
        model, task, result.ranking().tolist()[:3], fractions=fractions, n_bootstrap=10
    )
    assert own.n_edges_kept == [3, n]
    assert own.mean == pytest.approx(given.mean, abs=1e-9)
    assert own.signed_mean[0] == pytest.approx(own.mean[0], abs=1e-12)  # the same circuit
    assert plain.mean == pytest.approx(top.mean, abs=1e-9)
    assert abs(own.mean[0] - plain.mean[0]) > 1e-3  # another circuit, another value
    assert own.fingerprint != plain.fingerprint
    assert "stability selection's 3 edges first" in own.sentence
    assert "stability selection" not in plain.sentence


def test_mib_convention_ranks_the_values_and_says_so(setting):
    model, task, result, _ = setting
    absolute, _, what = _rankings(result, result.graph, "mib")
    assert absolute.tolist() == mib_order(mib_scores(result), absolute=True).tolist()
    assert "not the stability selection's order" in what
    n = result.graph.n_edges
    curve = faithfulness(
        model, task, result, fractions=[3 / n, 1.0], n_bootstrap=10, convention="mib"
    )
    assert "not the stability selection's order" in curve.sentence
    with pytest.raises(IntervError, match="selection must be True or False; got 'yes'"):
        faithfulness(model, task, result, selection="yes")


def test_the_cli_counts_the_selected_edges_that_connect_the_input_to_the_logits(setting):
    from interv.circuits.mib import prune
    from interv.cli.circuit import _connected

    graph = setting[2].graph
    path = tuple(graph.indices(["embed->L1H3.v", "L1H3->logits"]))
    dangling = tuple(graph.indices(["L0H2->L1H1.k", "embed->L1H2.v"]))  # L1H1, L1H2: no exit
    assert _connected(graph, path) == 2
    assert _connected(graph, dangling) == 0
    assert _connected(graph, path + dangling) == 2
    kept = torch.zeros(graph.n_edges, dtype=torch.bool)
    kept[list(path + dangling)] = True
    assert prune(graph, kept).nonzero().flatten().tolist() == sorted(path)


@pytest.mark.slow
def test_the_cli_reports_the_stable_circuits_own_faithfulness(tmp_path, capsys):
    import json

    from interv.cli import main

    out = tmp_path / "run"
    argv = [
        "circuit", "induction-2l", "--n-pairs", "4", "--top-k", "4", "--audit", "0",
        "--alpha", "none", "--select", "stability", "--subsamples", "4", "--pi", "0.75",
        "--n-edges", "4", "--out", str(out),
    ]  # fmt: skip
    assert main(argv) == 0
    printed = capsys.readouterr().out
    curve = json.loads((out / "faithfulness.json").read_text())
    assert "stability selection's" in curve["sentence"]
    circuit = json.loads((out / "circuit.json").read_text())
    k = len(circuit["selection"]["selected"])
    assert k > 0
    assert f"faithfulness of the stable circuit's {k} edges: " in printed
    assert "connect the input to the logits through selected edges" in printed


@pytest.mark.parametrize(
    ("mean", "low", "says"),
    [
        (0.86, 0.67, "the mean meets the bar of 0.8, the 95% interval's lower end does not"),
        (0.9, 0.82, "its 95% interval above the bar of 0.8"),
        (0.7, 0.5, "below the bar of 0.8"),
    ],
)
def test_the_report_claims_the_bar_only_as_far_as_the_interval_does(setting, mean, low, says):
    from interv.report.circuit import selection_lines

    selection = replace(
        setting[2].selection, jaccard=(mean,), jaccard_mean=mean, jaccard_low=low, jaccard_high=1.0
    )
    line = next(line for line in selection_lines(selection) if "bootstrap Jaccard" in line)
    assert line.endswith(f"({says})")
