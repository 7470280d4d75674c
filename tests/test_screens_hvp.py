"""The HVP correction for node screens (``Screen(estimator="hvp")``), against an analytic
oracle and a second implementation.

- Quadratic oracle: a native attention-only model with linear norms and a squared logit
  difference as the metric: patching (or zeroing) a last-layer head's output moves the metric
  exactly quadratically, so the HVP-corrected estimate (and the multi-step one) equals the
  exact effect that ``interv.run`` measures, where attribution does not; at chosen positions
  too.
- Second implementation: on the zoo model (LayerNorm, a downstream attention layer) a
  layer-0 head's correction is half of ``delta^T H delta`` from
  ``torch.autograd.functional.hvp`` of a forward written with transformer-lens's own hooks,
  and the estimate minus the correction is attribution's estimate.
- A screened run says so, carries a reliability score per candidate (the estimator's own)
  that survives the audit's round trip; bad settings, and a family without softmax
  attention rows (node and edge HVP alike), are refused before any forward.
"""

from __future__ import annotations

import dataclasses

import pytest
import torch

import interv
from interv.audit import Audit, Screen
from interv.engine.interventions import ActivationPatch, ZeroAblation
from interv.engine.runner import _base_runs
from interv.engine.screening import first_order_estimates, second_order_estimates
from interv.engine.sites import Site, hook_name
from interv.engine.targets import get_metric
from interv.errors import IntervError
from tests._quadratic import SQUARED, linear_model


@pytest.fixture(scope="module")
def linear():
    """A native 2-layer attention-only float64 bridge whose norms are linear (a huge
    epsilon), 3 random prompt pairs."""
    return linear_model(loud_values=True, float64=True)


@pytest.fixture(scope="module")
def zoo():
    model = interv.load_model("induction-2l")
    task = interv.load_task("induction", n_pairs=4, seed=3).tokenize(model)
    return model, task


def test_node_hvp_is_exact_where_the_metric_is_quadratic_along_the_patch(linear):
    model, task = linear
    last = [ActivationPatch("z", 1, h, "noise") for h in range(4)]
    last += [ZeroAblation(1, 2), ActivationPatch("z", 1, 3, "noise", positions=(2, 4, 5))]
    patches = last
    exact = interv.run(model, task, patches, SQUARED).effect
    base = _base_runs(model, task, patches, True, None)
    hvp, _ = second_order_estimates(model, task, patches, SQUARED, base)
    multi, _ = second_order_estimates(model, task, patches, SQUARED, base, segments=3)
    eap = first_order_estimates(model, task, patches, SQUARED, base)
    q = len(last)
    scale = exact[:q].abs().max()
    torch.testing.assert_close(hvp[:q], exact[:q], rtol=0, atol=1e-4 * scale)
    torch.testing.assert_close(multi[:q], exact[:q], rtol=0, atol=1e-4 * scale)
    assert (eap[:q] - exact[:q]).abs().max() > 100 * 1e-4 * scale  # what attribution misses


def test_a_heads_correction_equals_autograd_hvp_through_transformer_lens_hooks(zoo):
    model, task = zoo
    metric = get_metric("logit_diff")
    patch = ActivationPatch("z", 0, 1, "noise")
    base = _base_runs(model, task, [patch], True, None)
    hvp, rel = second_order_estimates(model, task, [patch], metric, base)
    eap = first_order_estimates(model, task, [patch], metric, base)
    clean_logits = base.readouts["clean"]
    name = hook_name(Site("z", 0))
    captured = {}

    def keep(activation, hook):
        captured["z"] = activation.detach().clone()

    with torch.no_grad():
        for tokens, key in ((task.clean_tokens, "clean"), (task.corrupted_tokens, "corrupted")):
            with model.hooks(fwd_hooks=[(name, keep)]):
                model(tokens)
            captured[key] = captured.pop("z")[:, :, 1]
    delta = captured["corrupted"] - captured["clean"]
    rows = torch.arange(task.n_pairs)
    pos = task.answer_positions

    def m(x: torch.Tensor) -> torch.Tensor:
        def put(activation, hook):
            activation = activation.clone()
            activation[:, :, 1] = x
            return activation

        with model.hooks(fwd_hooks=[(name, put)]):
            logits = model(task.clean_tokens)[rows, pos]
        return metric(logits, task.target_ids, task.foil_ids, clean_logits).sum()

    d2 = torch.zeros(task.n_pairs, dtype=torch.float64)
    for i in range(task.n_pairs):
        v = torch.zeros_like(delta)
        v[i] = delta[i]
        _, hv = torch.autograd.functional.hvp(m, captured["clean"], v)
        d2[i] = (v * hv).sum().double()
    assert d2.abs().max() > 0.05  # a real second-order term on this model
    torch.testing.assert_close(hvp[0] - eap[0], d2 / 2, rtol=2e-3, atol=1e-5)
    expected = (d2.mean() / 2).abs() / eap[0].mean().abs()
    torch.testing.assert_close(rel[0], expected, rtol=2e-3, atol=1e-6)


def test_an_hvp_screen_says_so_and_keeps_its_reliability(zoo):
    model, task = zoo
    patches = [ActivationPatch("z", layer, head, "noise") for layer in range(2) for head in (0, 1)]
    screen = Screen(top_k=2, audit=1, alpha=None, estimator="hvp")
    assert "HVP-corrected estimates" in screen.describe()
    assert "2 segments" in Screen(estimator="hvp", hvp_steps=2).describe()
    result = interv.run(model, task, patches, "logit_diff", screen=screen)
    audit = result.screens[0].audit
    assert "HVP correction" in audit.describe()
    base = _base_runs(model, task, patches, True, None)
    hvp, rel = second_order_estimates(model, task, patches, get_metric("logit_diff"), base)
    torch.testing.assert_close(audit.estimates, hvp.mean(-1), rtol=1e-6, atol=1e-9)
    torch.testing.assert_close(audit.reliability, rel)
    assert audit.reliability.shape == (len(patches),) and bool((audit.reliability >= 0).all())
    back = Audit.from_dict(audit.to_dict())
    torch.testing.assert_close(back.reliability, audit.reliability)
    plain = interv.run(
        model,
        task,
        patches,
        "logit_diff",
        screen=dataclasses.replace(screen, estimator="attribution"),
    )
    assert plain.screens[0].audit.reliability is None
    assert Audit.from_dict(plain.screens[0].audit.to_dict()).reliability is None


@pytest.mark.parametrize(
    ("kwargs", "words"),
    [
        ({"estimator": "taylor"}, "unknown Screen estimator 'taylor'; choose one of"),
        ({"hvp_steps": 2}, "hvp_steps (2) applies with estimator='hvp' only"),
        ({"estimator": "hvp", "hvp_steps": 0}, "hvp_steps"),
    ],
)
def test_bad_hvp_screens_are_refused(kwargs, words):
    with pytest.raises(IntervError, match=words.replace("(", r"\(").replace(")", r"\)")):
        Screen(**kwargs)


def test_a_family_without_softmax_rows_is_refused_before_any_forward(zoo, monkeypatch):
    from interv.engine import runner, second_order
    from interv.engine.architecture import architecture_of

    model, task = zoo
    arch = architecture_of(model)
    hybrid = dataclasses.replace(
        arch,
        layers=(None, *arch.layers[1:]),
        layer_kinds=("linear_attention", *arch.layer_kinds[1:]),
    )
    monkeypatch.setattr(second_order, "architecture_of", lambda m: hybrid)

    def no_forward(*args, **kw):
        raise AssertionError("a forward ran")

    monkeypatch.setattr(runner, "_base_runs", no_forward)
    monkeypatch.setattr(interv.circuits.screens, "capture_run", no_forward)
    screen = Screen(top_k=1, audit=0, estimator="hvp")
    with pytest.raises(IntervError, match=r"linear_attention.*HVP correction"):
        interv.run(model, task, [ActivationPatch("z", 1, 0, "noise")], screen=screen)
    with pytest.raises(IntervError, match=r"linear_attention.*HVP correction"):
        interv.circuits.edge_scores(model, task, hvp=True)  # the edge version alike
