"""GIM's backward (interv.engine.backward) as an option of edge_scores, against references.

- Every modification off: the scores equal plain EAP exactly (no hook is attached).
- Frozen norms: the patched norm components' input gradient equals autograd through the
  norm written with its statistic detached (LayerNorm on the zoo model, RMSNorm on a tiny
  Llama); the forward values are unchanged; the patch is gone after the block.
- Softmax temperature: the score gradient through the model's softmax and the tempered
  pattern equals ``s_T * (g - sum s_T g)`` with ``s_T = softmax(scores / T)`` computed from
  the scores (masked keys included); at ``T = 1`` it is the softmax's own gradient.
- By hand: a logits edge's score is the sender's change dotted with the final LayerNorm's
  Jacobian (transposed) applied to the unembedding difference: the full Jacobian for EAP,
  the frozen-deviation one for GIM (the two differ by more than the scores' size).
- q/k/v scales: in a 2-layer model nothing downstream of the last layer's queries is
  scaled, so its query edges score exactly ``q_scale`` times EAP's, its logits edges equal.
- Per-head QK norms (Qwen3, Gemma-3) frozen as the autograd reference.
- Refusals: a QK norm of another form, qk_fix with gim, bad settings.
"""

from __future__ import annotations

import pytest
import torch

import interv
from interv.circuits import edge_scores
from interv.engine.backward import GIM, check_gim, frozen_norm_grad, tempered_softmax_grad
from interv.errors import IntervError
from tests._families import family
from tests._norms import MaxNorm

OFF = GIM(temperature=1, q_scale=1, k_scale=1, v_scale=1, freeze_norms=False)


@pytest.fixture(scope="module")
def zoo():
    model = interv.load_model("induction-2l")
    task = interv.load_task("induction", n_pairs=6, seed=3).tokenize(model)
    return model, task


def test_gim_with_every_modification_off_is_plain_eap_exactly(zoo):
    model, task = zoo
    eap = edge_scores(model, task)
    off = edge_scores(model, task, gim=OFF)
    assert torch.equal(off.scores, eap.scores)
    assert "GIM backward with every modification off" in off.sentence
    assert off.fingerprint != eap.fingerprint
    assert off.provenance.settings != eap.provenance.settings


def test_query_scale_alone_scales_the_last_layers_query_edges(zoo):
    model, task = zoo
    eap = edge_scores(model, task)
    half = edge_scores(
        model, task, gim=GIM(temperature=1, q_scale=0.5, k_scale=1, v_scale=1, freeze_norms=False)
    )
    graph = eap.graph
    last_q = [i for i, e in enumerate(graph.edges) if e.input == "q" and e.receiver.layer == 1]
    logits = [i for i, e in enumerate(graph.edges) if e.receiver.kind == "logits"]
    assert last_q and logits
    torch.testing.assert_close(half.scores[last_q], 0.5 * eap.scores[last_q], rtol=1e-6, atol=1e-9)
    torch.testing.assert_close(half.scores[logits], eap.scores[logits], rtol=0, atol=0)
    # the scale reaches upstream too: layer-0 edges read layer 1's scaled query gradient
    first = [i for i, e in enumerate(graph.edges) if e.receiver.layer == 0 and e.input == "v"]
    assert not torch.allclose(half.scores[first], eap.scores[first])


def _reference_norm(x, weight, bias, rms, eps):
    if rms:
        scale = (x.pow(2).mean(-1, keepdim=True) + eps).sqrt().detach()
        return x / scale * weight
    centered = x - x.mean(-1, keepdim=True)
    scale = (centered.pow(2).mean(-1, keepdim=True) + eps).sqrt().detach()
    out = centered / scale * weight
    return out if bias is None else out + bias


@pytest.mark.parametrize("rms", [False, True])
def test_frozen_norm_grad_equals_autograd_with_the_statistic_detached(rms):
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(3, 5, 16, generator=gen, dtype=torch.float64) * 2 + 0.5
    weight = torch.randn(16, generator=gen, dtype=torch.float64)
    bias = torch.randn(16, generator=gen, dtype=torch.float64)
    g = torch.randn(3, 5, 16, generator=gen, dtype=torch.float64)
    xr = x.clone().requires_grad_(True)
    (want,) = torch.autograd.grad(_reference_norm(xr, weight, bias, rms, 1e-5), xr, g)
    got = frozen_norm_grad(x, g, rms=rms, weight=weight, eps=1e-5)
    torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12)


def _check_bridge_norm(model, norm, rms):
    gen = torch.Generator().manual_seed(1)
    d = model.cfg.d_model
    x = torch.randn(2, 4, d, generator=gen) * 3
    g = torch.randn(2, 4, d, generator=gen)
    with torch.no_grad():
        plain = norm(x)
    original = norm.original_component
    weight = norm.weight.detach().double()
    if getattr(norm, "uses_weight_offset", False):
        weight = 1 + weight
    bias = getattr(original, "bias", None)
    eps = getattr(original, "eps", None) or original.variance_epsilon
    xr = x.double().requires_grad_(True)
    (want,) = torch.autograd.grad(
        _reference_norm(xr, weight, None if bias is None else bias.double(), rms, eps),
        xr,
        g.double(),
    )
    with GIM().applied(model):
        xg = x.clone().requires_grad_(True)
        out = norm(xg)
        (got,) = torch.autograd.grad(out, xg, g)
        xh = x.clone().requires_grad_(True)  # the Hugging Face module alone (the pull-backs)
        (got_hf,) = torch.autograd.grad(original(xh), xh, g)
    assert torch.equal(out.detach(), plain)  # the forward is the model's own
    torch.testing.assert_close(got.double(), want, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(got_hf.double(), want, rtol=1e-5, atol=1e-5)
    xa = x.clone().requires_grad_(True)
    (after,) = torch.autograd.grad(norm(xa), xa, g)  # patch removed: the model's own gradient
    assert not torch.allclose(after, got, atol=1e-4)


def test_frozen_layernorm_of_the_zoo_model_equals_the_autograd_reference(zoo):
    model, _ = zoo
    _check_bridge_norm(model, model.blocks[1].ln1, rms=False)


@pytest.mark.slow
def test_frozen_rmsnorm_of_a_tiny_llama_equals_the_autograd_reference():
    model = family("llama").bridge
    _check_bridge_norm(model, model.blocks[0].ln1, rms=True)


@pytest.mark.parametrize("temperature", [1.0, 2.0, 3.5])
def test_tempered_pattern_gives_gims_score_gradient(temperature):
    from interv.engine.backward import _TemperedPattern

    gen = torch.Generator().manual_seed(2)
    scores = torch.randn(2, 3, 5, 5, generator=gen, dtype=torch.float64) * 3
    causal = torch.ones(5, 5, dtype=torch.bool).tril()
    scores = scores.masked_fill(~causal, float("-inf")).requires_grad_(True)
    g = torch.randn(2, 3, 5, 5, generator=gen, dtype=torch.float64)
    pattern = torch.softmax(scores, dim=-1)
    (got,) = torch.autograd.grad(
        _TemperedPattern.apply(pattern, temperature), scores, g, retain_graph=True
    )
    s_t = torch.softmax(scores.detach() / temperature, dim=-1)
    want = s_t * (g - (s_t * g).sum(-1, keepdim=True))
    torch.testing.assert_close(got, want, rtol=1e-9, atol=1e-12)
    torch.testing.assert_close(tempered_softmax_grad(pattern.detach(), g, temperature), want)
    assert torch.all(got[..., ~causal] == 0)
    if temperature == 1.0:
        (plain,) = torch.autograd.grad(pattern, scores, g)
        torch.testing.assert_close(got, plain, rtol=1e-9, atol=1e-12)


def test_gim_defaults_run_and_say_what_they_modify(zoo):
    model, task = zoo
    eap = edge_scores(model, task)
    gim = edge_scores(model, task, gim=True)
    assert gim.scores.shape == eap.scores.shape and torch.isfinite(gim.scores).all()
    assert not torch.allclose(gim.scores, eap.scores)
    assert "temperature 2" in gim.sentence and "norm statistics frozen" in gim.sentence
    assert gim.provenance.settings != eap.provenance.settings


@pytest.mark.parametrize("name", ["qwen3", "gemma3", "olmo2"])
def test_query_and_key_norms_are_frozen_as_the_autograd_reference(name):
    """QK norms (Qwen3's per-head RMSNorm ``w``, Gemma-3's ``1 + w``, OLMo-2's over all heads, a
    bridge normalization component): within GIM's block the module's input gradient is
    autograd's through the norm written with its root mean square detached; the forward is
    the module's own; after the block, the module's own gradient."""
    from interv.engine.architecture import recipe_of

    model = family(name).bridge
    assert check_gim(model, True) is not None
    recipe = recipe_of(model, 0)
    gen = torch.Generator().manual_seed(2)
    for module in (recipe.q_norm, recipe.k_norm):
        d = module.weight.shape[0]
        x = torch.randn(2, 5, 3, d, generator=gen) * 3 + 0.5
        g = torch.randn(2, 5, 3, d, generator=gen)
        weight = module.weight.detach().double() + (1.0 if name == "gemma3" else 0.0)
        eps = getattr(module, "variance_epsilon", getattr(module, "eps", None))
        xr = x.double().requires_grad_(True)
        (want,) = torch.autograd.grad(_reference_norm(xr, weight, None, True, eps), xr, g.double())
        with torch.no_grad():
            plain = module(x)
        with GIM().applied(model):
            xg = x.clone().requires_grad_(True)
            out = module(xg)
            (got,) = torch.autograd.grad(out, xg, g)
        assert torch.equal(out.detach(), plain)
        torch.testing.assert_close(got.double(), want, rtol=1e-5, atol=1e-5)
        assert "forward" not in vars(module)  # the patch is gone
        xa = x.clone().requires_grad_(True)
        (after,) = torch.autograd.grad(module(xa), xa, g)
        assert not torch.allclose(after, got, atol=1e-4)


def test_gim_is_refused_where_it_cannot_modify_the_backward(zoo):
    from interv.engine.architecture import recipe_of

    qwen3 = family("qwen3").bridge
    inner = recipe_of(qwen3, 1).k_norm
    attention = qwen3.blocks[1].attn.original_component
    assert attention.k_norm is inner
    attention.k_norm = MaxNorm(inner.weight.shape[0])
    try:
        with pytest.raises(
            IntervError,
            match=r"^qwen3: layer 1's key norm \(MaxNorm, weight shape \(8,\)\) is not identified",
        ):
            check_gim(qwen3, True)
        assert check_gim(qwen3, GIM(freeze_norms=False)) is not None
    finally:
        attention.k_norm = inner
    assert check_gim(qwen3, True) is not None
    model, task = zoo
    with pytest.raises(IntervError, match="gim and qk_fix=True cannot be combined"):
        edge_scores(model, task, gim=True, qk_fix=True)
    with pytest.raises(IntervError, match=r"must be an interv\.circuits\.GIM"):
        edge_scores(model, task, gim="yes")
    for bad in ({"temperature": 0}, {"q_scale": -1.0}, {"v_scale": float("nan")}):
        with pytest.raises(IntervError, match="must be a finite number > 0"):
            GIM(**bad)
    with pytest.raises(IntervError, match="freeze_norms must be True or False"):
        GIM(freeze_norms=1)


def test_discover_passes_gim_to_its_screen_and_names_it(zoo):
    from interv.audit import Screen
    from interv.circuits import discover

    model, task = zoo
    result = discover(model, task, gim=True, screen=Screen(top_k=5, audit=5, alpha=None))
    assert "GIM-style backward" in result.scores.sentence
    assert "GIM's backward" in result.audit.method
    torch.testing.assert_close(result.scores.scores, edge_scores(model, task, gim=GIM()).scores)


def test_logits_edges_read_the_final_norms_frozen_gradient_by_hand(zoo):
    """A logits edge's score is ``delta . J^T u`` at the answer position, ``u`` the unembed
    difference (target minus foil) scaled by the final norm's weight: with the model's
    LayerNorm Jacobian ``(I - 11^T/d - xhat xhat^T/d) / s`` for EAP, and without the
    ``xhat xhat^T`` term (the frozen standard deviation) for GIM's frozen norms."""
    from interv.circuits import Graph
    from interv.circuits.patching import capture_run, sender_deltas

    model, task = zoo
    graph = Graph.from_model(model)
    clean = capture_run(model, task, "clean")
    corrupted = capture_run(model, task, "corrupted")
    with torch.no_grad():
        delta = sender_deltas(model, graph, corrupted, clean).double()  # [n, pos, senders, d]
    rows = torch.arange(task.n_pairs)
    at = task.answer_positions
    x = clean.final.double()[rows, at]  # [n, d]
    norm = model.ln_final
    w_u = model.unembed.W_U.double()  # [d, vocab]
    u = (w_u[:, task.target_ids] - w_u[:, task.foil_ids]).T * norm.weight.double()  # [n, d]
    d = x.shape[-1]
    eps = norm.original_component.eps
    centered = x - x.mean(-1, keepdim=True)
    s = (centered.pow(2).mean(-1, keepdim=True) + eps).sqrt()
    xhat = centered / s
    frozen = (u - u.mean(-1, keepdim=True)) / s
    exact = frozen - xhat * (xhat * u).sum(-1, keepdim=True) / d / s
    receiver = next(r for r in graph.receivers if r.node.kind == "logits")
    span = slice(receiver.start, receiver.start + receiver.n_senders)
    moved = delta[rows, at, : receiver.n_senders]  # [n, senders, d]
    norms_only = GIM(temperature=1, q_scale=1, k_scale=1, v_scale=1, freeze_norms=True)
    for gim, grad in ((None, exact), (norms_only, frozen)):
        scores = edge_scores(model, task, gim=gim if gim is not None else False)
        want = torch.einsum("nsd,nd->sn", moved, grad)
        torch.testing.assert_close(scores.per_prompt[span], want, rtol=1e-4, atol=1e-5)
