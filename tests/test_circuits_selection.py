"""Stability selection (``discover(..., select="stability")``, ``stability_selection``).

- Hand-worked: stubbed per-prompt effects of three edges make each subsample's top 2
  computable by hand (an edge on every top, one on the tops of the subsamples without prompt
  0, one on those with it), so the inclusion frequencies, the selected set, the
  leave-one-group-out Jaccards and the bound are known; no forward runs.
- Oracle: the inclusion frequencies equal those of discoveries rerun from scratch on each
  half subsample of the prompts (screen rescored, top verified exactly).
- Refusals before any forward (a call counter on the model); a stored round trip.
"""

from __future__ import annotations

import json
from dataclasses import replace

import pytest
import torch

import interv
from interv.audit import Screen
from interv.circuits import CircuitResult, discover, stability_selection
from interv.circuits.selection import false_edge_bound, half_subsamples
from interv.errors import IntervError
from tests._calls import counting_calls

SCREEN = Screen(top_k=10, audit=0, alpha=None)


@pytest.fixture(scope="module")
def model():
    return interv.load_model("induction-2l")


def test_hand_worked_inclusion_selection_and_bound(model):
    task = interv.load_task("induction", n_pairs=4, seed=1).tokenize(model)
    found = discover(model, task, screen=Screen(top_k=2, audit=0, alpha=None))
    p = found.graph.n_edges
    a, b, c = 5, 17, 40  # always in the top 2; in it without prompt 0; in it with prompt 0
    stub = torch.zeros(p, 4, dtype=torch.float64)
    stub[a] = 10.0
    stub[b] = 5.0
    stub[c] = torch.tensor([12.0, 0.0, 0.0, 0.0])  # mean 6 > 5 on a half holding prompt 0
    result = replace(found, scores=replace(found.scores, per_prompt=stub))
    exact = {i: stub[i] for i in range(p)}  # every edge's exact effects given: no forward
    with counting_calls() as calls:
        selection = stability_selection(
            model, task, result, pi=0.8, n_resamples=50, q=2, groups=[0, 0, 1, 1],
            exact_per_prompt=exact, seed=7,
        )  # fmt: skip
    assert calls == []
    with_zero = (half_subsamples(4, 50, 7) == 0).any(-1).double().mean().item()
    assert 0.2 < with_zero < 0.8  # so b and c are not selected at pi = 0.8
    expected = torch.zeros(p, dtype=torch.float64)
    expected[a], expected[b], expected[c] = 1.0, 1 - with_zero, with_zero
    assert torch.allclose(selection.inclusion, expected)
    assert selection.selected == (a,)
    assert selection.subsample == 2 and selection.q == 2 and selection.pi == 0.8
    assert selection.bound == pytest.approx(2**2 / ((2 * 0.8 - 1) * p))
    assert false_edge_bound(2, 0.8, p) == selection.bound
    # without group 0 (prompts 0 and 1) c never enters: {a, b}, Jaccard 1/2 with {a};
    # without group 1 each half is one of prompts 0, 1: c in about half of them: {a}
    assert selection.groups == ("0", "1") and selection.group_pairs == (2, 2)
    assert selection.group_jaccard == pytest.approx((0.5, 1.0))
    assert "E[V] <= q^2 / ((2 pi - 1) p)" in selection.sentence
    assert "exchangeabl" in selection.sentence and "without replacement" in selection.sentence


def test_inclusion_equals_discoveries_rerun_on_each_half_subsample(model):
    task = interv.load_task("induction", n_pairs=8, seed=1).tokenize(model)
    result = discover(model, task, screen=SCREEN, select="stability", resamples=6, pi=0.6)
    selection = result.selection
    counts = torch.zeros(result.graph.n_edges, dtype=torch.float64)
    for positions in half_subsamples(8, 6, 0):
        rerun = discover(model, task.select(positions.tolist()), screen=SCREEN)
        counts[result.graph.indices(rerun.circuit(SCREEN.top_k))] += 1
    assert torch.allclose(selection.inclusion, counts / 6)
    chosen = set((counts / 6 >= 0.6).nonzero().flatten().tolist())
    assert set(selection.selected) == chosen
    shares = [selection.inclusion[i].item() for i in selection.selected]
    assert shares == sorted(shares, reverse=True)
    assert selection.ranking(result)[: len(chosen)] == list(selection.selected)
    assert sorted(selection.ranking(result)) == list(range(result.graph.n_edges))


def test_selection_with_bootstrap_survives_a_round_trip(model):
    task = interv.load_task("induction", n_pairs=8, seed=1).tokenize(model)
    result = discover(
        model, task, screen=SCREEN, select="stability", resamples=10, stability=5,
        groups=[0, 1, 2, 3] * 2,
    )  # fmt: skip
    selection = result.selection
    assert len(selection.jaccard) == 5 and len(selection.group_jaccard) == 4
    assert selection.jaccard_low <= selection.jaccard_mean <= selection.jaccard_high
    loaded = CircuitResult.from_dict(json.loads(json.dumps(result.to_dict()))).selection
    assert loaded.selected == selection.selected
    assert torch.equal(loaded.inclusion, selection.inclusion)
    assert loaded.jaccard == selection.jaccard and loaded.group_jaccard == selection.group_jaccard
    assert loaded.bound == selection.bound and loaded.sentence == selection.sentence
    damaged = result.to_dict()
    damaged["selection"]["pi"] = 0.4
    with pytest.raises(IntervError, match="pi"):
        CircuitResult.from_dict(damaged)


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"select": "stability", "pi": 0.5}, r"pi must be a number in \(0.5, 1\] .*; got 0.5"),
        ({"select": "stability", "pi": 1.2}, r"pi must be a number in \(0.5, 1\] .*; got 1.2"),
        ({"select": "stability", "resamples": 1}, "resamples"),
        (
            {"select": "stability", "resamples": 10**6},
            r"exceeds the maximum of 10000 .* [kMGT]B of memory",
        ),
        ({"select": "bogus"}, r"unknown select 'bogus'; choose one of \('top', 'stability'\)"),
        ({"pi": 0.9}, "pi applies to select='stability' only"),
        ({"select": "stability", "q": 10**6}, "exceeds the graph's"),
        ({"select": "stability", "groups": [0] * 8}, "at least two labels"),
        ({"select": "stability", "groups": [0, 1]}, "one label per prompt pair"),
    ],
)
def test_bad_selection_input_is_refused_before_any_forward(model, options, message):
    task = interv.load_task("induction", n_pairs=8, seed=1).tokenize(model)
    with counting_calls() as calls, pytest.raises(IntervError, match=message):
        discover(model, task, screen=SCREEN, **options)
    assert calls == []


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--select", "bogus"], "unknown --select 'bogus'; choose one of ('top', 'stability')"),
        (["--select", "stability", "--pi", "0.5"], "--pi must be a number in (0.5, 1]"),
        (["--select", "stability", "--subsamples", "1000000"], "exceeds the maximum of 10000"),
        (["--pi", "0.9"], "--pi applies to --select stability only"),
    ],
)
def test_the_cli_refuses_bad_selection_flags_before_loading(
    tmp_path, capsys, monkeypatch, flags, message
):
    import interv.models.loading as loading
    from interv.cli import main

    monkeypatch.setattr(loading, "load_model", pytest.fail)
    argv = ["circuit", "induction-2l", "--n-pairs", "8", "--out", str(tmp_path / "out")]
    assert main([*argv, *flags]) == 2
    assert message in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def test_ioi_templates_name_each_pairs_template():
    from interv.tasks import PromptPairs
    from interv.tasks.builtin import IOI_TEMPLATES, ioi_templates

    pairs = interv.load_task("ioi", n_pairs=40, seed=3)
    templates = ioi_templates(pairs)
    assert len(templates) == 40 and len(set(templates)) > 1
    for prompt, t in zip(pairs.clean, templates, strict=True):
        head, tail = IOI_TEMPLATES[t].split("{")[0], IOI_TEMPLATES[t].rsplit("}", 1)[1]
        assert prompt.startswith(head) and prompt.endswith(tail)
    other = PromptPairs(clean=["a b c"], corrupted=["a b d"], targets=[" e"])
    with pytest.raises(IntervError, match="fits 0 of the 8 IOI templates"):
        ioi_templates(other)
