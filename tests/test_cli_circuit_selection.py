"""``interv circuit --select stability``: the selection is part of the directory's identity
(a resume with another selection is refused before the model loads) and of its report
(``circuit.md``, ``circuit.html``)."""

from __future__ import annotations

import argparse

import pytest

import interv
from interv._inert import markdown_text
from interv.audit import Screen
from interv.circuits import discover
from interv.circuits.store import CircuitStore
from interv.cli import circuit as cli
from interv.cli import main
from interv.report.circuit import circuit_markdown
from interv.report.circuit_page import circuit_page

ARGS = ["circuit", "induction-2l", "--n-pairs", "8", "--top-k", "6", "--audit", "4"]
SELECT = ["--select", "stability", "--subsamples", "10", "--n-edges", "5"]


def _identity(argv: list[str]) -> dict:
    parser = argparse.ArgumentParser()
    cli.register(parser.add_subparsers(dest="command"))
    args = parser.parse_args(argv)
    return cli._identity(args, cli._checked(args))


def test_the_selection_is_in_the_identity_and_another_one_is_refused(tmp_path, capsys, monkeypatch):
    out = tmp_path / "run"
    identity = _identity([*ARGS, *SELECT, "--out", str(out)])
    assert identity["selection"] == {"select": "stability", "pi": 0.8, "q": 5, "subsamples": 10}
    assert "selection" not in _identity([*ARGS, "--out", str(out)])  # as before: top
    # where the forwards run is not what is discovered: a run resumes with either executor
    assert _identity([*ARGS, *SELECT, "--executor", "ray", "--out", str(out)]) == identity
    assert (
        _identity([*ARGS, *SELECT, "--executor", "ray", "--workers", "3", "--out", str(out)])
        == identity
    )
    with CircuitStore.open(out, identity) as store:
        store.write_scores({"format": "stand-in: the directory holds results"})

    import interv.models.loading as loading

    monkeypatch.setattr(loading, "load_model", pytest.fail)
    for other in (["--pi", "0.9"], ["--subsamples", "12"], ["--n-edges", "4"], None):
        flags = [*SELECT, *other] if other is not None else []
        capsys.readouterr()
        assert main([*ARGS, *flags, "--out", str(out)]) == 2
        error = capsys.readouterr().err
        assert "holds another discovery" in error and "selection" in error


def test_the_report_of_a_circuit_shows_its_stable_circuit():
    model = interv.load_model("induction-2l")
    task = interv.load_task("induction", n_pairs=8, seed=0).tokenize(model)
    screen = Screen(top_k=6, audit=4, alpha=None)
    result = discover(model, task, screen=screen, select="stability", resamples=10, q=5)
    selection = result.selection
    markdown = circuit_markdown(result)
    assert "## Stable circuit (stability selection)" in markdown
    head = f"{len(selection.selected)} edges with inclusion frequency &gt;= 0.8 in the top 5 of 10"
    assert head in markdown
    for i in selection.selected:
        label = markdown_text(result.graph.edges[i].label)
        assert f"| {label} | {float(selection.inclusion[i]):.3g} |" in markdown
    assert "data-part='selection'" in circuit_page(result)
    assert "data-part='selection'" not in circuit_page(discover(model, task, screen=screen))
