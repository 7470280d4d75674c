"""GIM for node screens (``Screen(estimator="gim")``), and the GIM/HVP options of
``discover_in`` and ``interv circuit`` (run identity, refusals before any work).

- A head's node estimate (patching its whole output) is the sum of its outgoing edges'
  estimates to first order (the residual stream's only readers are the graph's readers):
  checked for attribution against EAP and for GIM's backward against ``edge_scores(gim=)``,
  two separate implementations of the same modified backward.
- GIM with every modification off is attribution exactly.
- A screened run with ``Screen(estimator="gim")`` says so and its estimates are GIM's.
- ``discover_in``: a directory written with one estimator refuses a resume with another,
  naming the setting; an unknown family is refused naming the families GIM supports.
- ``interv circuit``: --hvp with --gim or --method eap-ig refused before the model loads.
"""

from __future__ import annotations

import pytest
import torch

import interv
from interv.audit import Screen
from interv.circuits import edge_scores
from interv.circuits.store import circuit_settings, discover_in
from interv.engine.backward import GIM
from interv.engine.interventions import ActivationPatch
from interv.engine.runner import _base_runs
from interv.engine.screening import first_order_estimates
from interv.engine.targets import get_metric
from interv.errors import IntervError

OFF = GIM(temperature=1, q_scale=1, k_scale=1, v_scale=1, freeze_norms=False)
PATCHES = [ActivationPatch("z", layer, head, "noise") for layer in range(2) for head in range(4)]


@pytest.fixture(scope="module")
def zoo():
    model = interv.load_model("induction-2l")
    task = interv.load_task("induction", n_pairs=6, seed=3).tokenize(model)
    return model, task


def _node(model, task, gim=None):
    base = _base_runs(model, task, PATCHES, True, None)
    return first_order_estimates(model, task, PATCHES, get_metric("logit_diff"), base, gim=gim)


def _edge_sums(scores):
    out = []
    for patch in PATCHES:
        rows = [
            i
            for i, e in enumerate(scores.graph.edges)
            if e.sender.kind == "head"
            and (e.sender.layer, e.sender.head) == (patch.layer, patch.head)
        ]
        out.append(scores.scores[rows].sum())
    return torch.stack(out)


@pytest.mark.slow
def test_a_heads_gim_estimate_is_the_sum_of_its_edges_gim_scores(zoo):
    model, task = zoo
    plain = _node(model, task).mean(-1)
    torch.testing.assert_close(plain, _edge_sums(edge_scores(model, task)), rtol=1e-4, atol=1e-5)
    gim = _node(model, task, GIM()).mean(-1)
    expected = _edge_sums(edge_scores(model, task, gim=GIM()))
    torch.testing.assert_close(gim, expected, rtol=1e-4, atol=1e-5)
    assert (gim - plain).abs().max() > 1e-2  # GIM's backward changed them
    assert torch.equal(_node(model, task, OFF), _node(model, task))


def test_a_gim_screen_says_so(zoo):
    model, task = zoo
    screen = Screen(top_k=2, audit=1, alpha=None, estimator="gim")
    result = interv.run(model, task, PATCHES, "logit_diff", screen=screen)
    audit = result.screens[0].audit
    assert "GIM's modified backward" in audit.describe()
    torch.testing.assert_close(
        audit.estimates, _node(model, task, GIM()).mean(-1), rtol=1e-6, atol=1e-9
    )
    assert "GIM-style estimates" in screen.describe()


def test_an_unknown_node_estimator_names_the_choices():
    with pytest.raises(IntervError, match=r"unknown Screen estimator 'taylor'.*'hvp'"):
        Screen(estimator="taylor")


def test_discover_in_refuses_a_resume_with_another_estimator(zoo, tmp_path):
    model, task = zoo
    screen = Screen(top_k=3, audit=2, alpha=None)
    first = discover_in(tmp_path / "c", model, task, screen=screen, gim=True)
    assert "GIM" in first.scores.sentence
    with pytest.raises(IntervError, match="gim"):
        discover_in(tmp_path / "c", model, task, screen=screen)
    with pytest.raises(IntervError, match="hvp"):
        discover_in(tmp_path / "c", model, task, screen=screen, gim=True, hvp=True)
    again = discover_in(tmp_path / "c", model, task, screen=screen, gim=True)
    assert torch.equal(again.scores.scores, first.scores.scores)


def test_estimator_settings_enter_the_identity_and_bad_ones_are_refused():
    screen = Screen(top_k=3, audit=2)
    plain = circuit_settings("eap", 1, False, screen)
    assert "gim" not in plain and "hvp" not in plain
    assert circuit_settings("eap", 1, False, screen, gim=True)["gim"] == GIM().settings()
    hvp = circuit_settings("eap", 1, False, screen, hvp=True, hvp_steps=3, hvp_top=10)
    assert (hvp["hvp"], hvp["hvp_top"]) == (3, 10)
    with pytest.raises(IntervError, match="method='eap-ig'"):
        circuit_settings("eap-ig", 5, False, screen, hvp=True)
    with pytest.raises(IntervError, match="gim must be"):
        circuit_settings("eap", 1, False, screen, gim="yes")


def test_a_gim_screen_on_a_qk_norm_family_is_refused_naming_the_supported_ones(monkeypatch):
    from interv.engine import screening

    def refuse(model, gim):
        raise IntervError("GIM's frozen norms are not built for family X; supported: A, B")

    monkeypatch.setattr(screening, "check_gim", refuse)
    with pytest.raises(IntervError, match="supported"):
        screening.check_screen(
            Screen(top_k=1, audit=0, estimator="gim"),
            PATCHES,
            get_metric("logit_diff"),
            model=object(),
        )


@pytest.mark.parametrize(
    ("extra", "words"),
    [
        (["--hvp", "--gim"], "gim"),
        (["--hvp", "--method", "eap-ig"], "method='eap-ig'"),
        (["--hvp-steps", "2"], "apply with hvp=True only"),
        (["--hvp", "--hvp-top", "0"], "hvp_top"),
    ],
)
def test_the_cli_refuses_bad_estimator_options_before_the_model_loads(
    tmp_path, monkeypatch, capsys, extra, words
):
    from interv.cli import main

    def no_load(*args, **kwargs):
        raise AssertionError("the model loaded")

    monkeypatch.setattr("interv.models.loading.load_model", no_load)
    code = main(["circuit", "induction-2l", "--out", str(tmp_path / "c"), *extra])
    assert code != 0
    assert words in capsys.readouterr().err
