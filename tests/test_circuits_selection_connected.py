"""Connected stability selection (``stability_selection(..., connected=True)``).

- Brute force: each half subsample's ranking rebuilt from the definition (its mean
  per-prompt estimates, its own top ``n_verified`` and the audited edges valued by their
  mean exact effects, checked first), every prefix of it pruned, the first whose connected
  part holds ``q`` edges taken; the frequencies, the selection (pruned again), the edges
  dropped and the circuits' mean size equal the function's.
- Every selected edge lies on a path of selected edges from the embeddings to the logits,
  checked by walking the graph forward and backward (not with the pruning under test).
- MIB's one-circuit ``prune`` equals the batched pruning row by row.
- Refusals before any forward; a stored round trip.
"""

from __future__ import annotations

import json

import pytest
import torch

import interv
from interv.audit import Screen
from interv.circuits import CircuitResult, discover, stability_selection
from interv.circuits.graph import Node
from interv.circuits.mib import prune
from interv.circuits.pruning import connected
from interv.circuits.selection import half_subsamples
from interv.circuits.stability import exact_first
from interv.errors import IntervError
from tests._calls import counting_calls

SCREEN = Screen(top_k=10, audit=5, alpha=None)


@pytest.fixture(scope="module")
def model():
    return interv.load_model("induction-2l")


@pytest.fixture(scope="module")
def found(model):
    task = interv.load_task("induction", n_pairs=12, seed=2).tokenize(model)
    exact: dict[int, torch.Tensor] = {}
    result = discover(model, task, screen=SCREEN, exact_per_prompt=exact)
    return task, result, exact


def brute_force(result, exact, *, q, pi, n_resamples, seed):
    """The connected selection recomputed from its definition, one subsample at a time."""
    graph, audit = result.graph, result.audit
    per_prompt = result.scores.per_prompt.double()
    n, p = per_prompt.shape[1], graph.n_edges
    counts = torch.zeros(p, dtype=torch.float64)
    sizes = []
    for half in half_subsamples(n, n_resamples, seed):
        weight = torch.zeros(n, dtype=torch.float64)
        weight[half] = 1.0 / half.numel()
        estimates = per_prompt @ weight
        checked = torch.zeros(p, dtype=torch.bool)
        checked[torch.sort(-estimates.abs(), stable=True).indices[: audit.n_verified]] = True
        checked[audit.audited] = True
        values = torch.zeros(p, dtype=torch.float64)
        for i in checked.nonzero().flatten().tolist():
            values[i] = exact[i].double() @ weight
        order = exact_first(checked, values, estimates)
        prefixes = torch.zeros(p, p, dtype=torch.bool)  # row k: the top k + 1
        for k in range(p):
            prefixes[k:, order[k]] = True
        parts = connected(graph, prefixes)
        first = int((parts.sum(-1) >= q).nonzero()[0])  # the smallest prefix holding q
        counts += parts[first].double()
        sizes.append(int(parts[first].sum()))
    share = counts / n_resamples
    above = share >= pi
    final = prune(graph, above)
    return share, set(final.nonzero().flatten().tolist()), int((above & ~final).sum()), sizes


def on_paths(graph, selected):
    """The selected edges on a path of selected edges from the embeddings to the logits:
    nodes reached forward from the embeddings, nodes that reach the logits backward (a
    key/value head stands for the query heads of its group)."""
    edges = [graph.edges[i] for i in selected]

    def readers(edge):  # the query heads (or MLP, logits) an edge's receiver feeds
        node = edge.receiver
        if node.kind == "head" and node.kv:
            first = node.head * graph.group_size
            return [Node("head", node.layer, h) for h in range(first, first + graph.group_size)]
        return [node]

    forward = {Node("embed")}
    backward = {Node("logits")}
    for _ in range(len(edges) + 1):
        for edge in edges:
            if edge.sender in forward:
                forward.update(readers(edge))
            if any(r in backward for r in readers(edge)):
                backward.add(edge.sender)
    return {
        i
        for i, edge in zip(selected, edges, strict=True)
        if edge.sender in forward and any(r in backward for r in readers(edge))
    }


@pytest.mark.parametrize(("q", "pi"), [(3, 0.6), (6, 0.8), (10, 1.0), (30, 0.7)])
def test_connected_selection_equals_brute_force(model, found, q, pi):
    task, result, exact = found
    # first: it fills ``exact`` with the edges its subsamples verify (the brute force's too)
    selection = stability_selection(
        model, task, result, pi=pi, n_resamples=40, q=q, seed=3, exact_per_prompt=exact,
        connected=True,
    )  # fmt: skip
    share, chosen, dropped, sizes = brute_force(result, exact, q=q, pi=pi, n_resamples=40, seed=3)
    assert torch.allclose(selection.inclusion, share, rtol=0, atol=1e-12)
    assert set(selection.selected) == chosen
    assert selection.n_pruned == dropped
    assert selection.mean_size == pytest.approx(sum(sizes) / len(sizes))
    assert min(sizes) >= q and selection.connected
    assert selection.bound == pytest.approx(
        selection.mean_size**2 / ((2 * pi - 1) * result.graph.n_edges)
    )
    inclusion = [float(selection.inclusion[i]) for i in selection.selected]
    assert inclusion == sorted(inclusion, reverse=True)


@pytest.mark.parametrize("pi", [0.6, 0.8, 0.95, 1.0])
def test_every_selected_edge_lies_on_an_input_to_logits_path(model, found, pi):
    task, result, exact = found
    selection = stability_selection(
        model, task, result, pi=pi, n_resamples=30, q=5, seed=1, exact_per_prompt=exact,
        groups=[0, 1, 2] * 4, bootstrap=3, connected=True,
    )  # fmt: skip
    assert on_paths(result.graph, selection.selected) == set(selection.selected)
    plain = stability_selection(
        model, task, result, pi=pi, n_resamples=30, q=5, seed=1, exact_per_prompt=exact
    )
    assert not plain.connected and plain.mean_size is None and plain.n_pruned == 0


def test_the_whole_graph_is_connected_and_prune_is_one_row(found):
    _, result, _ = found
    graph = result.graph
    assert bool(connected(graph, torch.ones(graph.n_edges, dtype=torch.bool)).all())
    rows = torch.rand(16, graph.n_edges, generator=torch.Generator().manual_seed(0)) < 0.3
    batched = connected(graph, rows)
    assert torch.equal(batched, torch.stack([prune(graph, row) for row in rows]))
    for row, kept in zip(rows, batched, strict=True):
        chosen = row.nonzero().flatten().tolist()
        assert on_paths(graph, chosen) == set(kept.nonzero().flatten().tolist())


def test_connected_selection_survives_a_round_trip(model):
    task = interv.load_task("induction", n_pairs=8, seed=1).tokenize(model)
    result = discover(
        model, task, screen=SCREEN, select="stability", resamples=10, q=4, connected=True
    )
    selection = result.selection
    loaded = CircuitResult.from_dict(json.loads(json.dumps(result.to_dict()))).selection
    assert loaded.connected and loaded.selected == selection.selected
    assert loaded.mean_size == selection.mean_size and loaded.n_pruned == selection.n_pruned
    assert "connected circuit" in loaded.sentence and "mean size" in loaded.sentence
    assert "pruned" in repr(loaded)
    for damage in (float("nan"), 1.0, None):  # mean size undefined, below q, missing
        damaged = result.to_dict()
        damaged["selection"]["mean_size"] = damage
        with pytest.raises(IntervError, match="mean_size"):
            CircuitResult.from_dict(json.loads(json.dumps(damaged)))
    plain = result.to_dict()  # a plain selection that claims pruned edges
    plain["selection"].update(connected=False, mean_size=None, n_pruned=2)
    with pytest.raises(IntervError, match="'n_pruned' is 2 in a plain selection"):
        CircuitResult.from_dict(json.loads(json.dumps(plain)))


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"connected": True}, r"connected applies to select='stability' only"),
        (
            {"select": "stability", "connected": "yes"},
            r"connected must be True or False; got 'yes'",
        ),
    ],
)
def test_bad_connected_input_is_refused_before_any_forward(model, options, message):
    task = interv.load_task("induction", n_pairs=8, seed=1).tokenize(model)
    with counting_calls() as calls, pytest.raises(IntervError, match=message):
        discover(model, task, screen=SCREEN, **options)
    assert calls == []


def test_stability_selection_refuses_a_non_bool_connected(model, found):
    task, result, exact = found
    with counting_calls() as calls, pytest.raises(IntervError, match="connected must be"):
        stability_selection(model, task, result, exact_per_prompt=exact, connected=1)
    assert calls == []


def test_the_report_says_the_circuits_are_connected(model):
    from interv.report.circuit import circuit_markdown

    task = interv.load_task("induction", n_pairs=8, seed=2).tokenize(model)
    screen = Screen(top_k=6, audit=4, alpha=None)
    result = discover(
        model, task, screen=screen, select="stability", resamples=10, q=5, connected=True
    )
    assert result.selection.selected and result.selection.n_pruned == 1  # three edges kept
    markdown = circuit_markdown(result)
    assert "connected circuits (in each, the edges connecting the input to the logits" in markdown
    assert "inclusion (share of the connected circuits)" in markdown
    assert "in the top 5 of 10" not in markdown


def test_the_cli_puts_connected_in_the_identity_and_refuses_it_alone(tmp_path, capsys, monkeypatch):
    import argparse

    import interv.models.loading as loading
    from interv.cli import circuit as cli
    from interv.cli import main

    argv = ["circuit", "induction-2l", "--n-pairs", "8", "--top-k", "6", "--audit", "4"]
    select = ["--select", "stability", "--subsamples", "10", "--n-edges", "5"]
    out = ["--out", str(tmp_path / "out")]

    def identity(flags: list[str]) -> dict:
        parser = argparse.ArgumentParser()
        cli.register(parser.add_subparsers(dest="command"))
        args = parser.parse_args([*argv, *flags, *out])
        return cli._identity(args, cli._checked(args))

    plain = identity(select)["selection"]
    assert plain["select"] == "stability"  # the identity of a plain selection is as before
    assert identity([*select, "--connected"])["selection"] == {
        **plain,
        "select": "stability-connected",
    }
    monkeypatch.setattr(loading, "load_model", pytest.fail)
    assert main([*argv, "--connected", *out]) == 2
    assert "--connected applies to --select stability only" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()
