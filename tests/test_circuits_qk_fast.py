"""The QK fix's fast way (directions dotted with the normed change, :func:`_qk_directions`)
against a plain reference: the QK fix as it was written before, each sender's queries (keys)
projected, rotated and multiplied again (:func:`_reference_qk_fixed_scores`, kept here
verbatim), on tiny random models of several families:

- Llama (grouped-query attention, rotary, RMSNorm, right padding), grouped and ungrouped;
- Gemma-2 (soft cap, sliding windows on every other layer, grouped-query attention);
- Qwen3 (per-head QK norm: the fix recomputes queries and keys there, same numbers);
- GPT-2 (LayerNorm, learned positions, no rotation);
- the per-sender way itself (directions refused by a zero memory budget), and the scores
  ``edge_scores(qk_fix=True)`` writes into each edge (one layer's q and k scored together).

Float tolerance only: both start from the same float32 normed change; the reference projects
it in float64, the fast way dots it with the directions in float32 and reads the score from
the change of the logits without a second softmax in float32 (:class:`_PatternReading`), so
scores agree to about 1e-7 of the largest (asserted: 1e-6) and the per-sender way, all
float64, to 1e-9. The reading itself is checked against the softmax it replaces: random rows,
masks, soft caps, and changes too large for float32's ``expm1`` (the fallback).
"""

from __future__ import annotations

import pytest
import torch

from interv.circuits import Graph, edge_scores
from interv.circuits import screens as screens_module
from interv.circuits.patching import capture_run, reader_weights, sender_deltas
from interv.circuits.screens import (
    QKBase,
    _groups,
    _PatternReading,
    _reader_gradients,
    qk_base,
    qk_fixed_scores,
)
from interv.engine.architecture import AttentionRecipe, KeyRule, LayerAttention
from interv.engine.targets import get_metric
from interv.tasks.tokenized import TokenizedPairs
from tests._families import family
from tests._gpt2 import tiny_gpt2
from tests._norms import norms


def _reference_qk_fixed_scores(model, graph, base: QKBase, x, layer, component, delta, g_pattern):
    """The QK fix before its fast way (interv 2026-12-05), unchanged: per chunk of senders,
    the normed change projected into every position's query (key), prepared, multiplied with
    the keys (queries) and the softmax taken."""
    block = model.blocks[layer]
    weight = reader_weights(model, graph, layer, component).double()
    n, n_pos, n_senders, _ = delta.shape
    heads = graph.n_heads
    q, k, pattern = base.q[layer], base.k[layer], base.pattern[layer]
    profile = base.layers[layer]
    queries = profile.queries(q).unsqueeze(1)
    keys = _groups(profile.keys(k), heads).unsqueeze(1)
    per_sender = (
        n * heads * n_pos * n_pos * 8 * 4 + n * n_pos * weight.shape[0] * weight.shape[2] * 8
    )
    chunk = max(1, min(n_senders, (64 << 20) // max(per_sender, 1)))
    out = torch.zeros(n, weight.shape[0], n_senders, dtype=torch.float64, device=q.device)
    with torch.no_grad():
        normed = block.ln1(x).unsqueeze(2)
        for first in range(0, n_senders, chunk):
            part = delta[:, :, first : first + chunk].to(x)
            change = (block.ln1(x.unsqueeze(2) + part) - normed).double()
            moved = torch.einsum("bpcd,rdk->bcprk", change, weight.to(change.device))
            if component == "q":
                new = profile.pattern(profile.queries(q.unsqueeze(1) + moved), keys)
            elif graph.ungrouped:
                new = profile.pattern(queries, profile.keys(_groups(k, heads).unsqueeze(1) + moved))
            else:
                new = profile.pattern(queries, _groups(profile.keys(k.unsqueeze(1) + moved), heads))
            terms = torch.einsum("bchqk,bhqk->bch", new - pattern.unsqueeze(1), g_pattern)
            if component == "k" and not graph.ungrouped:
                terms = terms.view(n, terms.shape[1], weight.shape[0], -1).sum(-1)
            out[:, :, first : first + chunk] = terms.transpose(1, 2)
    return out


def _family_task(name: str, first: int = 1):
    """The family's prompts against random tokens from position ``first`` on."""
    fam = family(name)
    generator = torch.Generator().manual_seed(4)
    corrupted = fam.tokens.clone()
    shape = corrupted[:, first:].shape
    corrupted[:, first:] = torch.randint(2, 60, shape, generator=generator)
    corrupted[~fam.real] = fam.tokens[~fam.real]  # the same padding
    task = TokenizedPairs(
        fam.tokens,
        corrupted,
        fam.real,
        fam.real.sum(1) - 1,
        torch.tensor([5, 9]),
        torch.tensor([7, 3]),
        name="random pairs",
    )
    return fam.bridge, task


@pytest.fixture(scope="module")
def gpt2(tmp_path_factory):
    return tiny_gpt2(tmp_path_factory.mktemp("gpt2"), n_pairs=3)


def _inputs(model, task, kv: str = "grouped"):
    graph = Graph.from_model(model, kv=kv)
    base = capture_run(model, task, "clean")
    other = capture_run(model, task, "corrupted")
    with torch.no_grad():
        delta = sender_deltas(model, graph, other, base)
    qk = qk_base(model, graph, task, "clean")
    patterns: dict[int, torch.Tensor] = {}
    for _ in _reader_gradients(
        model, graph, task, "clean", get_metric("logit_diff"), base.logits, None, patterns
    ):
        pass
    return graph, base, delta, qk, patterns


def _compare(model, task, kv: str = "grouped", tolerance: float = 1e-6) -> int:
    """Every layer's q and k scores against the reference, to ``tolerance`` of the largest;
    the number of comparisons."""
    graph, base, delta, qk, patterns = _inputs(model, task, kv)
    checked = 0
    for layer in range(graph.n_layers):
        n_senders = max(r.n_senders for r in graph.receivers if r.node.layer == layer)
        part = delta[:, :, :n_senders]
        x = base.resid_pre[layer]
        for component in ("q", "k"):
            args = (model, graph, qk, x, layer, component, part, patterns[layer])
            got = qk_fixed_scores(*args)
            want = _reference_qk_fixed_scores(*args)
            assert got.shape == want.shape
            scale = want.abs().max().item()
            assert scale > 0, (layer, component)
            torch.testing.assert_close(got, want, rtol=0, atol=tolerance * scale)
            checked += 1
    return checked


@pytest.mark.parametrize(
    ("name", "kv"),
    [("llama", "grouped"), ("llama", "ungrouped"), ("gemma2", "grouped"), ("qwen3", "grouped")],
)
def test_the_fast_fix_equals_the_plain_reference_on_rotary_families(name, kv, monkeypatch):
    model, task = _family_task(name)
    calls = _count_directions(monkeypatch)
    assert _compare(model, task, kv) == 2 * model.cfg.n_layers
    # directions on every layer and component, none under a QK norm (recomputed there)
    assert len(calls) == (0 if name == "qwen3" else 2 * model.cfg.n_layers)


def _count_directions(monkeypatch) -> list[str]:
    calls: list[str] = []
    original = screens_module._qk_directions

    def counted(profile, component, *rest):
        calls.append(component)
        return original(profile, component, *rest)

    monkeypatch.setattr(screens_module, "_qk_directions", counted)
    return calls


def test_the_fast_fix_equals_the_plain_reference_on_gpt2(gpt2, monkeypatch):
    model, task = gpt2
    calls = _count_directions(monkeypatch)
    assert _compare(model, task) == 2 * model.cfg.n_layers
    assert len(calls) == 2 * model.cfg.n_layers


def test_the_per_sender_way_equals_the_reference_when_directions_do_not_fit(monkeypatch):
    model, task = _family_task("llama")
    calls = _count_directions(monkeypatch)
    monkeypatch.setattr(screens_module, "QK_DIRECTIONS_BYTES", 0)
    _compare(model, task, tolerance=1e-9)
    assert not calls  # the directions were never built


def test_the_directions_equal_the_reference_where_the_norm_is_called(gpt2, monkeypatch):
    """Where the block's norm is not taken apart (a norm of another form, or a hooked one),
    the directions are dotted with the module's own normed change, chunk by chunk of
    senders: the same scores."""
    model, task = gpt2
    calls = _count_directions(monkeypatch)
    monkeypatch.setattr(screens_module._NormChange, "of", classmethod(lambda cls, m, x: None))
    monkeypatch.setattr(screens_module, "QK_CHUNK_BYTES", 100_000)  # a few senders a chunk
    assert _compare(model, task) == 2 * model.cfg.n_layers
    assert len(calls) == 2 * model.cfg.n_layers


def test_positions_no_sender_changes_are_left_out_with_the_same_scores(monkeypatch):
    """Pairs that first differ at position 6: no block moves a position before it (every
    change there is 0), and the scores still equal the reference (whose last layer also
    reads rows without a gradient, left out of the directions)."""
    model, task = _family_task("llama", first=6)
    starts: list[int] = []
    original = screens_module._qk_directions

    def recorded(*args):
        plan = original(*args)
        starts.extend(moving.start for moving, _, _ in plan)
        return plan

    monkeypatch.setattr(screens_module, "_qk_directions", recorded)
    assert _compare(model, task) == 2 * model.cfg.n_layers
    assert starts and min(starts) == 6


def test_edge_scores_write_each_query_and_key_edge_as_the_reference(monkeypatch):
    """``edge_scores(qk_fix=True)`` with one layer's q and k scored together equals the
    scores with each component scored alone by the reference."""
    model, task = _family_task("llama")
    fast = edge_scores(model, task, qk_fix=True)

    def reference(model, graph, base, x, layer, components, senders, g_pattern):
        delta = senders.changes()  # the layout the blocks read, as the reference reads it
        return {
            c: _reference_qk_fixed_scores(model, graph, base, x, layer, c, delta, g_pattern)
            for c in components
        }

    monkeypatch.setattr(screens_module, "_qk_layer_scores", reference)
    plain = edge_scores(model, task, qk_fix=True)
    scale = plain.per_prompt.abs().max().item()
    torch.testing.assert_close(fast.per_prompt, plain.per_prompt, rtol=0, atol=1e-6 * scale)


def _reading(softcap, seed=0, n=2, heads=3, n_pos=6):
    """A random layer: causal rows with the first prompt's last two keys padded out."""
    gen = torch.Generator().manual_seed(seed)
    allowed = torch.ones(n_pos, n_pos).tril().bool().expand(n, 1, n_pos, n_pos).clone()
    allowed[0, :, :, -2:] = False
    products = torch.randn(n, heads, n_pos, n_pos, generator=gen, dtype=torch.float64) * 3
    recipe = _recipe(softcap)
    pattern = recipe.rows(recipe.finish(products, allowed))
    g = torch.randn(n, heads, n_pos, n_pos, generator=gen, dtype=torch.float64)
    return _PatternReading.of(recipe, products, pattern, g, allowed), allowed, gen


def _recipe(softcap):
    attention = LayerAttention(KeyRule(causal=True), "none", scale=1.0, softcap=softcap)
    return AttentionRecipe(0, "test", attention, "handoff", True)


def _plain_terms(reading, allowed, moved):
    """The score the way the fix computed it before: softmax of the changed logits, minus the
    pattern, dotted with the gradient (float64, plain torch)."""
    products = reading.products.unsqueeze(3) + moved.double()
    if reading.recipe.softcap is not None:
        products = torch.tanh(products / reading.recipe.softcap) * reading.recipe.softcap
    products = products.masked_fill(~allowed.unsqueeze(3), float("-inf"))
    new = torch.softmax(products, dim=-1).nan_to_num(0.0)
    change = new - reading.pattern.unsqueeze(3)
    return (change * reading.g.unsqueeze(3)).sum((2, 4))


@pytest.mark.parametrize("softcap", [None, 5.0])
@pytest.mark.parametrize("size", [1e-4, 0.3, 4.0])
def test_the_pattern_reading_equals_the_softmax_it_replaces(softcap, size):
    reading, allowed, gen = _reading(softcap, seed=int(size * 10))
    n, heads, n_pos, _ = reading.products.shape
    moved = torch.randn(n, heads, n_pos, 5, n_pos, generator=gen, dtype=torch.float64) * size
    moved = moved.masked_fill(~allowed.any(0).view(1, 1, n_pos, 1, n_pos), 0.0)
    want = _plain_terms(reading, allowed, moved)
    scale = want.abs().max().item()
    assert scale > 0
    # the plain difference of two softmaxes carries ~1e-16 of cancellation itself
    exact = 1e-12 * scale + 1e-15
    torch.testing.assert_close(reading.terms(moved.clone()), want, rtol=0, atol=exact)
    torch.testing.assert_close(reading.terms(moved.float()), want, rtol=0, atol=1e-5 * scale)
    torch.testing.assert_close(reading.softmax_terms(moved), want, rtol=0, atol=exact)


def test_a_change_too_large_for_float32_falls_back_to_the_softmax():
    reading, allowed, _ = _reading(None, seed=3)
    n, heads, n_pos, _ = reading.products.shape
    moved = torch.zeros(n, heads, n_pos, 2, n_pos, dtype=torch.float32)
    moved[0, 1, 3, 0, 1] = 120.0  # expm1 overflows float32 (and the old softmax did not care)
    assert not bool(torch.isfinite(reading.terms(moved.clone())).all())
    got = reading.softmax_terms(moved)
    want = _plain_terms(reading, allowed, moved)
    assert bool(torch.isfinite(got).all())
    torch.testing.assert_close(got, want, rtol=0, atol=1e-12)


def test_a_layer_whose_reading_overflows_takes_the_softmax(monkeypatch):
    """Wherever the reading gives a non-finite score (a change too large for ``expm1``: the
    blocks' :func:`_block_terms`, or :meth:`_PatternReading.terms` on the per-sender way),
    the layer's scores come from :meth:`~_PatternReading.softmax_terms`: with every reading
    made to overflow, the scores still equal the reference, both ways."""
    model, task = _family_task("llama")
    overflowed: list[str] = []

    def overflowing(self, moved):
        overflowed.append("terms")
        return torch.full(moved.shape[:2] + moved.shape[3:4], float("inf"), dtype=torch.float64)

    def blocks_overflowing(blocks, reading, rows, norm):
        overflowed.append("blocks")
        got = screens_module._block_terms_unpatched(blocks, reading, rows, norm)
        return {component: torch.full_like(terms, float("nan")) for component, terms in got.items()}

    monkeypatch.setattr(_PatternReading, "terms", overflowing)
    monkeypatch.setattr(
        screens_module, "_block_terms_unpatched", screens_module._block_terms, raising=False
    )
    monkeypatch.setattr(screens_module, "_block_terms", blocks_overflowing)
    _compare(model, task)
    assert "blocks" in overflowed
    monkeypatch.setattr(screens_module, "QK_DIRECTIONS_BYTES", 0)  # the per-sender way
    _compare(model, task)
    assert "terms" in overflowed


@pytest.mark.parametrize("name", ["llama", "gemma", "layernorm", "max"])
def test_the_norm_change_is_the_modules_own(name):
    """Where the norm is identified (RMSNorm with ``w`` or ``1 + w``, LayerNorm), ``r' * (U *
    gain) . delta~ + (r' - r) * (U * gain) . x~`` equals ``U . (norm(x + delta) - norm(x))``
    for small and large changes; a norm of another form is not identified."""
    from interv.circuits.screens import _NormChange, _Senders

    torch.manual_seed(5)
    module = norms()[name].double()
    x = torch.randn(2, 3, 16, dtype=torch.float64) * 2
    change = _NormChange.of(module, x)
    if name == "max":
        assert change is None
        return
    assert change is not None and change.centered == (name == "layernorm")
    u = torch.randn(5, 16, 4, dtype=torch.float64)  # [directions, d_model, d_head]
    folded = change.fold(u)
    for size in (1e-4, 1.0):
        delta = torch.randn(2, 3, 7, 16, dtype=torch.float64) * size
        normed_change = module(x.unsqueeze(2) + delta) - module(x).unsqueeze(2)
        want = torch.einsum("bpcd,rdk->bpcrk", normed_change, u)
        senders = _Senders.of(delta, torch.float64)
        cross = torch.einsum("bpd,bpcd->pbc", change.x.double(), delta)
        scales = change.scales(cross, change.square(senders))
        moved, grown = (part.transpose(0, 1)[..., None, None] for part in scales)
        at_delta = torch.einsum("bpcd,rdk->bpcrk", delta, folded)
        at_x = torch.einsum("bpd,rdk->bprk", change.x.double(), folded).unsqueeze(2)
        got = moved * at_delta + grown * at_x
        scale = want.abs().max().item()
        # Llama's module normalizes in float32 whatever its input: its difference of two
        # normed inputs carries float32's cancellation (~1e-7 of the normed input's size)
        floor = 1e-6 * module(x).abs().max().item() * u.abs().sum(1).max().item()
        torch.testing.assert_close(got, want, rtol=0, atol=1e-5 * scale + floor)


def test_a_norm_is_identified_again_after_a_hook_or_an_edit():
    """The form is remembered per module, and looked at again when a hook is added (a hook
    that changes the output makes the norm unidentified: the module is then called)."""
    from interv.circuits.screens import _NormChange

    module = norms()["llama"]
    x = torch.randn(2, 3, 16)
    assert _NormChange.of(module, x) is not None
    handle = module.register_forward_hook(lambda mod, args, out: out * 2)
    assert _NormChange.of(module, x) is None
    handle.remove()
    assert _NormChange.of(module, x) is not None
    with torch.no_grad():
        module.weight.mul_(3)  # an edit in place: identified again, the gain read live
    change = _NormChange.of(module, x)
    torch.testing.assert_close(change.gain, module.weight.detach().double())
