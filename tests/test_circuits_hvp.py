"""The HVP correction (interv.circuits.second_order) as an option of edge_scores, against
analytic oracles and references.

- Quadratic oracle: a native attention-only model with linear norms and a squared logit
  difference as the metric: along an edge into the logits or into a last-layer value input
  the metric is exactly quadratic in the patch, so the HVP-corrected estimate (and the
  multi-step one) equals the exact path-patching effect, where EAP does not.
- The correction is EAP's own score plus half the prompt-mean second derivative (EAP's
  first-order term kept); the HVP path's first derivative equals EAP's per-prompt score.
- HVP reference: on the zoo model (LayerNorm), a logits edge's ``delta^T H delta`` equals
  ``torch.autograd.functional.hvp`` of the final norm + unembedding + metric written by
  hand, and a central difference of the first derivative.
- Reliability: ``|f''| / (2 |f'|)`` by hand; stored and read back; refusals before work.
"""

from __future__ import annotations

import pytest
import torch

import interv
from interv.circuits import EdgeScores, edge_effects, edge_scores
from interv.circuits.patching import capture_run, sender_delta
from interv.circuits.second_order import edge_derivatives
from interv.engine.second_order import hvp_estimates, reliability
from interv.engine.targets import get_metric
from interv.errors import IntervError
from tests._quadratic import SQUARED, linear_model


@pytest.fixture(scope="module")
def linear():
    """A native 2-layer attention-only bridge whose norms are linear (a huge epsilon),
    3 random prompt pairs."""
    return linear_model()


@pytest.fixture(scope="module")
def zoo():
    model = interv.load_model("induction-2l")
    task = interv.load_task("induction", n_pairs=4, seed=3).tokenize(model)
    return model, task


@pytest.mark.slow
def test_hvp_is_exact_where_the_metric_is_quadratic_along_the_patch(linear):
    model, task = linear
    eap = edge_scores(model, task, metric=SQUARED)
    hvp = edge_scores(model, task, metric=SQUARED, hvp=True)
    multi = edge_scores(model, task, metric=SQUARED, hvp=True, hvp_steps=3)
    graph = eap.graph
    quadratic = [
        i
        for i, e in enumerate(graph.edges)
        if e.input == "logits" or (e.input == "v" and e.receiver.layer == graph.n_layers - 1)
    ]
    assert len(quadratic) >= 10
    exact = edge_effects(model, task, graph, quadratic, metric=SQUARED)
    scale = exact.abs().max()
    torch.testing.assert_close(hvp.scores[quadratic], exact, rtol=0, atol=1e-4 * scale)
    torch.testing.assert_close(multi.scores[quadratic], exact, rtol=0, atol=1e-4 * scale)
    # the second-order term is what EAP misses there
    assert (eap.scores[quadratic] - exact).abs().max() > 100 * 1e-4 * scale


@pytest.mark.slow
def test_the_correction_adds_half_the_second_derivative_to_eaps_own_score(zoo):
    model, task = zoo
    eap = edge_scores(model, task)
    hvp = edge_scores(model, task, hvp=True)
    graph = eap.graph
    base = capture_run(model, task, "clean")
    other = capture_run(model, task, "corrupted")
    every = list(range(graph.n_edges))
    d1, d2 = edge_derivatives(
        model, task, graph, base, other, every, "clean", get_metric("logit_diff"), base.logits
    )
    torch.testing.assert_close(d1, eap.per_prompt, rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(hvp.per_prompt - eap.per_prompt, d2 / 2, rtol=1e-5, atol=1e-6)
    assert d2.abs().max() > 0.1  # not a linear model: the term matters
    moved = d1.mean(-1).abs() > 1e-6
    assert moved.sum() > 60
    torch.testing.assert_close(
        hvp.reliability[moved],
        (d2.mean(-1)[moved] / 2).abs() / d1.mean(-1)[moved].abs(),
        rtol=1e-3,
        atol=1e-6,
    )
    assert hvp.hvp == 1 and eap.hvp == 0 and eap.reliability is None
    assert "second-order" in hvp.sentence and hvp.fingerprint != eap.fingerprint
    assert "hvp" in hvp.provenance.settings and "hvp" not in eap.provenance.settings


def test_a_logits_edges_second_derivative_equals_autograd_hvp_by_hand(zoo):
    model, task = zoo
    graph = interv.circuits.Graph.from_model(model)
    index = next(i for i, e in enumerate(graph.edges) if e.input == "logits")
    receiver = graph.receiver_of(index)
    base = capture_run(model, task, "clean")
    other = capture_run(model, task, "corrupted")
    metric = get_metric("logit_diff")
    _, d2 = edge_derivatives(model, task, graph, base, other, [index], "clean", metric, base.logits)
    delta = sender_delta(model, graph, other, base, index - receiver.start)
    final = interv.engine.forward.forward(
        model,
        interv.engine.forward.Prompts.of(task.clean_tokens, task.attention_mask),
        capture=[interv.engine.sites.Site("final_resid")],
        readout=None,
    ).captured[interv.engine.sites.Site("final_resid")]
    rows = torch.arange(task.n_pairs)
    pos = task.answer_positions

    def m(x: torch.Tensor) -> torch.Tensor:
        logits = model.unembed(model.ln_final(x.unsqueeze(1))).squeeze(1)
        return metric(logits, task.target_ids, task.foil_ids, base.logits).sum()

    for i in range(task.n_pairs):
        x = final[rows, pos].clone()
        v = torch.zeros_like(x)
        v[i] = delta[i, pos[i]]
        _, hv = torch.autograd.functional.hvp(m, x, v)
        assert torch.isclose(d2[0, i], (v * hv).sum().double(), rtol=1e-3, atol=1e-6)
    h = 1e-2
    up, _ = edge_derivatives(
        model, task, graph, base, other, [index], "clean", metric, base.logits, at=h
    )
    down, _ = edge_derivatives(
        model, task, graph, base, other, [index], "clean", metric, base.logits, at=-h
    )
    torch.testing.assert_close((up - down) / (2 * h), d2, rtol=2e-2, atol=1e-4)


def test_multi_step_and_reliability_by_hand():
    # f(t) = 2t + 3t^2 - t^3: f' = 2 + 6t - 3t^2, f'' = 6 - 6t; exact f(1) - f(0) = 4
    def derivatives(t: float) -> tuple[torch.Tensor, torch.Tensor]:
        return (
            torch.tensor([[2 + 6 * t - 3 * t * t]], dtype=torch.float64),
            torch.tensor([[6 - 6 * t]], dtype=torch.float64),
        )

    one, d1, d2 = hvp_estimates(derivatives, 1)
    assert one.item() == pytest.approx(5.0)  # 2 + 6 / 2
    two, _, _ = hvp_estimates(derivatives, 2)
    # segments at 0 and 1/2: (2/2 + 6/8) + (4.25/2 + 3/8) = 1.75 + 2.5, against 4 exact
    assert two.item() == pytest.approx(4.25)
    assert d1.item() == 2 and d2.item() == 6
    r = reliability(torch.tensor([2.0, 0.0, 0.0, -1.0]), torch.tensor([6.0, 0.0, 1.0, 1.0]))
    assert r[0].item() == pytest.approx(1.5) and r[1].item() == 0 and r[2].item() == float("inf")
    assert r[3].item() == pytest.approx(0.5)


def test_hvp_top_corrects_only_the_screens_top_edges_and_round_trips(zoo):
    model, task = zoo
    eap = edge_scores(model, task)
    top = edge_scores(model, task, hvp=True, hvp_top=5)
    chosen = set(torch.sort(-eap.scores.abs(), stable=True).indices[:5].tolist())
    rest = [i for i in range(eap.graph.n_edges) if i not in chosen]
    assert torch.equal(top.scores[rest], eap.scores[rest])
    assert torch.isnan(top.reliability[rest]).all()
    assert torch.isfinite(top.reliability[sorted(chosen)]).all()
    back = EdgeScores.from_dict(top.to_dict())
    assert back.hvp == 1 and torch.equal(back.scores, top.scores)
    torch.testing.assert_close(back.reliability, top.reliability, equal_nan=True)


@pytest.mark.parametrize(
    ("kwargs", "words"),
    [
        ({"hvp": 1}, "hvp must be True or False"),
        ({"hvp": True, "hvp_steps": 0}, "hvp_steps"),
        ({"hvp_steps": 2}, "apply with hvp=True only"),
        ({"hvp": True, "hvp_top": 0}, "hvp_top"),
        ({"hvp": True, "hvp_top": 10**6}, "at most the graph's 81 edges"),
        ({"hvp": True, "method": "eap-ig"}, "method='eap-ig'"),
        ({"hvp": True, "qk_fix": True}, "qk_fix=True"),
        ({"hvp": True, "gim": True}, "gim"),
    ],
)
def test_bad_hvp_settings_are_refused_before_any_forward(zoo, kwargs, words, monkeypatch):
    model, task = zoo

    def no_forward(*args, **kw):
        raise AssertionError("a forward ran")

    monkeypatch.setattr(interv.circuits.screens, "capture_run", no_forward)
    with pytest.raises(IntervError, match=words.replace("(", r"\(").replace(")", r"\)")):
        edge_scores(model, task, **kwargs)


def test_the_report_shows_the_reliability_beside_each_estimate(zoo):
    from interv.audit import Screen
    from interv.circuits import discover
    from interv.report.circuit import circuit_markdown

    model, task = zoo
    result = discover(model, task, screen=Screen(top_k=3, audit=0, alpha=None), hvp=True, hvp_top=4)
    assert "with the HVP correction" in result.audit.method
    text = circuit_markdown(result, top=6)
    assert "reliability \\|2nd\\| / \\|1st\\|" in text
    assert "not computed" in text  # edges 5 and 6 were not corrected
    shown = next(line for line in text.splitlines() if line.startswith("| 1 |"))
    first = int(result.ranking()[0])
    assert f"{float(result.scores.reliability[first]):.3g}" in shown
