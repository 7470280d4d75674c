"""What a run is: one identity (provenance and settings), seen by every weight and shared by
``interv circuit`` and ``discover_in``.

- Any in-place weight edit changes the weights' digest (the revision), so results from before
  and after the edit are not joined (``join``, ``build_report``). The three edits are those
  the old 16-sample digest missed: one element of a query weight, a zeroed column, 15 zeroed
  MLP neurons (on the zoo's ``sink-lm-3l``, which has MLPs).
- A circuit directory written by the command resumes under ``discover_in`` and the reverse,
  computing only the exact effects the other did not store.
"""

from __future__ import annotations

import json

import pytest
import torch

import interv
import interv.circuits.discovery as discovery
from interv import Screen
from interv.circuits.store import discover_in
from interv.cli import main
from interv.errors import IntervError
from interv.provenance import (
    Provenance,
    identity_differences,
    join,
    model_identity,
    run_fingerprint,
    run_identity,
)
from interv.report.table import build_report

PREFIX = "layers.0._original_component."
Q = PREFIX + "attn._original_component.q._original_component.weight"
FC_OUT = PREFIX + "mlp._original_component.fc_out._original_component.weight"


def _element(weights):
    weights[Q][5, 3] += 3


def _column(weights):
    weights[Q][:, 3] = 0


def _mlp_neurons(weights):
    weights[FC_OUT][:, 100:115] = 0  # neurons 100..114 write nothing


EDITS = {"element": _element, "column": _column, "mlp neurons": _mlp_neurons}


@pytest.fixture(scope="module")
def sink_lm():
    model = interv.load_model("sink-lm-3l")
    pairs = interv.PromptPairs(
        clean=["ba be bi bo ba be bi", "ka ke ki ko ka ke ki", "da de di do da de di"],
        corrupted=["ba be bi bo ma me mi", "ka ke ki ko na ne ni", "da de di do pa pe pi"],
        targets=["bo", "ko", "do"],
        foils=["ba", "ka", "da"],
        name="repeat",
    )
    return model, pairs.tokenize(model)


@pytest.mark.parametrize("edit", list(EDITS))
def test_an_in_place_weight_edit_changes_the_revision_and_the_pair_is_refused(sink_lm, edit):
    model, task = sink_lm
    weights = dict(model.named_parameters())
    kept = {name: p.detach().clone() for name, p in weights.items()}
    try:
        before = model_identity(model)[1]
        assert model_identity(model)[1] == before  # deterministic, remembered
        effects = interv.run(model, task, [interv.ZeroAblation(0, 0)], progress=False)
        with torch.no_grad():
            EDITS[edit](weights)
        after = model_identity(model)[1]
        assert after != before
        heads = interv.concentration(model, task, query_positions=[-1], progress=False)
        assert heads.provenance.revision == after
        with pytest.raises(IntervError, match="different weights"):
            join(effects, heads)
        with pytest.raises(IntervError, match="different weights"):
            build_report(effects, heads, n_bootstrap=20)
    finally:
        with torch.no_grad():
            for name, p in weights.items():
                p.copy_(kept[name])
    assert model_identity(model)[1] == before  # the same weights again: the same revision


def test_a_replaced_tensor_and_a_restored_value_are_seen(sink_lm):
    model, _ = sink_lm
    before = model_identity(model)[1]
    weight = dict(model.named_parameters())[Q]
    with torch.no_grad():
        old = float(weight[0, 0])
        weight[0, 0] = old + 1
        edited = model_identity(model)[1]
        weight[0, 0] = old
    assert edited != before and model_identity(model)[1] == before


def test_the_fingerprint_is_the_hash_of_the_identity_and_changes_with_any_part():
    a = Provenance("m", revision="r1", dtype="float32", prompts="p", n_prompts=4, metric="ld")
    settings = {"method": "eap", "steps": 1}
    assert run_fingerprint(a, settings) == run_fingerprint(a, dict(settings))
    assert run_fingerprint(a.replace(revision="r2"), settings) != run_fingerprint(a, settings)
    assert run_fingerprint(a, {**settings, "steps": 2}) != run_fingerprint(a, settings)
    early = run_identity({"metric": "ld"}, settings)  # before the model loads
    assert not identity_differences(early, run_identity(a, settings))
    assert identity_differences(run_identity({"metric": "kl"}, settings), run_identity(a, settings))
    with pytest.raises(IntervError, match="provenance fields"):
        run_identity(a, {"metric": "ld"})


# ---- one directory identity: the command and the Python form resume each other ----

SCREEN = Screen(top_k=4, audit=6, alpha=None)
CLI = [
    "circuit",
    "induction-2l",
    "--n-pairs",
    "4",
    "--top-k",
    "4",
    "--audit",
    "6",
    "--alpha",
    "none",
]


@pytest.fixture
def zoo():
    model = interv.load_model("induction-2l")
    return model, interv.load_task("induction", n_pairs=4, seed=0).tokenize(model)


@pytest.fixture
def exact(monkeypatch):
    """The edges each exact evaluation computes; with ``stop_after``, that many, then Ctrl-C."""
    real = discovery.edge_effects
    calls: dict = {"edges": [], "stop_after": None}

    def edge_effects(model, task, graph, edges, *, on_batch=None, **kwargs):
        edges = list(edges)
        stop = calls["stop_after"]
        if stop is not None:
            values = real(model, task, graph, edges[:stop], **{**kwargs, "per_prompt": True})
            calls["edges"] += edges[:stop]
            on_batch(list(range(stop)), values)
            raise KeyboardInterrupt
        calls["edges"] += edges
        return real(model, task, graph, edges, on_batch=on_batch, **kwargs)

    monkeypatch.setattr(discovery, "edge_effects", edge_effects)
    return calls


def _manifest(out):
    return json.loads((out / "manifest.json").read_text())


def test_a_directory_the_command_began_is_finished_by_discover_in(tmp_path, zoo, exact):
    out = tmp_path / "run"
    exact["stop_after"] = 3
    assert main([*CLI, "--out", str(out), "--quiet"]) == 130
    first = list(exact["edges"])
    exact.update(stop_after=None, edges=[])
    result = discover_in(out, *zoo, screen=SCREEN)
    assert len(exact["edges"]) == 10 - 3 and not set(exact["edges"]) & set(first)
    assert sum(s != "estimated" for s in result.status) == 10
    manifest = _manifest(out)
    assert manifest["status"] == "complete" and manifest["identity"]["revision"]
    assert (manifest["stored_before"], manifest["computed_in_last_run"]) == (3, 7)


def test_a_directory_discover_in_began_is_finished_by_the_command(tmp_path, zoo, exact, capsys):
    out = tmp_path / "run"
    exact["stop_after"] = 2
    with pytest.raises(KeyboardInterrupt):
        discover_in(out, *zoo, screen=SCREEN)
    first = list(exact["edges"])
    exact.update(stop_after=None, edges=[])
    assert main([*CLI, "--out", str(out)]) == 0
    assert len(exact["edges"]) == 10 - 2 and not set(exact["edges"]) & set(first)
    assert "8 exact effects computed by this run; 2 stored by an earlier run" in (
        capsys.readouterr().out
    )
    exact["edges"] = []
    again = discover_in(out, *zoo, screen=SCREEN)  # complete: nothing recomputed
    assert exact["edges"] == [] and sum(s != "estimated" for s in again.status) == 10


def test_another_discovery_or_other_weights_are_refused_in_either_form(tmp_path, zoo, exact):
    model, task = zoo
    out = tmp_path / "run"
    discover_in(out, model, task, screen=SCREEN)
    other = r"holds another discovery \(stored -> given: screen.audit: 6 -> 7\)"
    with pytest.raises(IntervError, match=other):
        discover_in(out, model, task, screen=Screen(top_k=4, audit=7, alpha=None))
    assert main([*CLI, "--method", "eap-ig", "--out", str(out)]) == 2  # before the model loads
    with torch.no_grad():
        next(model.parameters())[0, 0] += 1
    with pytest.raises(IntervError, match=r"holds another discovery.*revision"):
        discover_in(out, model, task, screen=SCREEN)
