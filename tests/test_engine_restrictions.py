"""Key restrictions inside attention computed without the pattern (interv.engine.restrictions):
WindowAttention, KeyKnockout and text_loss's window with sinks equal the pattern path, a long
run builds no ``T x T`` block, and the refusals stay where no pattern-free path exists.

References: the pattern path (each mask edit written at the z level from the model's own
pattern, itself checked against Hugging Face's masked model in tests/test_families_rest.py),
and Hugging Face's eager attention with a per-head 4-D mask (no interv code) for per-head
restrictions.
"""

from __future__ import annotations

import functools

import pytest
import torch
from _families import _attention_modules, _mask_kwarg, build, family
from test_families_rest import masked_logits, pairs_of
from torch.utils._python_dispatch import TorchDispatchMode

import interv.engine.forward as forward_module
import interv.engine.rows as rows_module
from interv.analysis import text_loss
from interv.engine.forward import AttentionPath, Prompts, forward
from interv.engine.interventions import Combined, ZeroAblation
from interv.engine.masks import KeyKnockout, WindowAttention
from interv.engine.restrictions import KeyRestriction
from interv.engine.sites import Site
from interv.engine.stacking import forward_under
from interv.errors import IntervError

EDITS = (
    WindowAttention(8),  # longer than the models' own 4-key windows: changes full layers only
    WindowAttention(3, sink_tokens=1),  # StreamingLLM's mask, inside the models' windows
    KeyKnockout((2,)),
    WindowAttention(2, sink_tokens=2, layers=(1,)),
)


# mistral: its own sliding window composes with the edit, fused kernel; bloom: ALiBi, the
# chunked path; gemma2: soft cap and alternating windows; gpt_oss: a learned sink logit
@pytest.mark.parametrize("name", ["mistral", "bloom", "gemma2", "gpt_oss"])
def test_mask_edits_without_the_pattern_equal_the_pattern_path(name):
    fam = family(name)
    model = fam.bridge
    moved = 0.0
    for tokens, real in ((fam.tokens, fam.real), fam.left_padded()):
        task = pairs_of(tokens, real)
        plain = forward(model, Prompts(tokens, real), attention=AttentionPath("pattern")).readout
        for edit in (edit.for_model(model) for edit in EDITS):
            rows = forward_under(model, task, edit, attention="rows")
            own = forward_under(model, task, edit, attention="pattern")
            assert (rows.attention, own.attention) == ("rows", "pattern")
            torch.testing.assert_close(
                rows.readout[real],
                own.readout[real],
                atol=1e-5,
                rtol=0,
                msg=lambda m, e=edit: f"{e.describe()}: {m}",
            )
            moved = max(moved, float((own.readout[real] - plain[real]).abs().max()))
    assert moved > 1e-3, "no edit changed the logits: the check could not fail"


@pytest.mark.parametrize("name", ["mistral", "gpt_oss"])
def test_text_loss_without_the_pattern_equals_the_pattern_path_on_stacked_copies(name):
    fam = family(name)
    tokens = fam.tokens[:1].repeat(3, 1)
    tokens[1:, 1:] = tokens[1:, 1:].roll(shifts=3, dims=1)  # three different chunks
    # several copies per forward, joining at different blocks (a staggered suffix)
    edits = [*EDITS, Combined((WindowAttention(3, sink_tokens=1), ZeroAblation(2, 1)))]
    rows = text_loss(fam.bridge, tokens, edits, first_position=2, attention="rows")
    own = text_loss(fam.bridge, tokens, edits, first_position=2, attention="pattern")
    torch.testing.assert_close(rows.values, own.values, atol=1e-5, rtol=0)
    assert float((own.values - own.clean).abs().max()) > 1e-3


@functools.cache
def _peaked_gpt_oss():
    """gpt-oss whose rows put almost all their mass on a few keys (queries scaled by 30) and
    little on the learned sink (sink logits lowered by 5), with outputs large enough to show in
    the logits (output projections scaled by 10), up to 4,096 positions."""

    def configure(config):
        config.max_position_embeddings = 4096

    def edit(hf):
        for layer in hf.model.layers:
            layer.self_attn.q_proj.weight.mul_(30.0)
            layer.self_attn.sinks.sub_(5.0)
            layer.self_attn.o_proj.weight.mul_(10.0)

    return build("gpt_oss", edit=edit, tag="-peaked", configure=configure)


# before the sink-aware edit read the layer's logits: off by 7.9e-5 (300) and 6.6e-4 (2,300) on
# the pattern path, from renormalizing by sum(kept) + (1 - sum(a)) in float32
@pytest.mark.parametrize("n_pos", [300, pytest.param(2300, marks=pytest.mark.slow)])
def test_a_window_under_an_off_row_sink_equals_hugging_face_with_that_mask(n_pos):
    fam = _peaked_gpt_oss()
    generator = torch.Generator().manual_seed(3)
    tokens = torch.randint(2, 64, (1, n_pos), generator=generator)
    tokens[:, 0] = 0
    real = torch.ones(1, n_pos, dtype=torch.bool)
    task = pairs_of(tokens, real)
    edit = WindowAttention(1).for_model(fam.bridge)  # each query keeps itself alone
    expected = masked_logits(fam, tokens, real, edit)
    clean = masked_logits(fam, tokens, real, WindowAttention(n_pos))
    assert float((expected - clean).abs().max()) > 1e-2, "the window changed nothing"
    for attention in ("pattern", "rows"):
        with torch.no_grad():
            out = forward_under(fam.bridge, task, edit, attention=attention)
        assert out.attention == attention
        torch.testing.assert_close(out.readout.float(), expected, atol=1e-5, rtol=0)


def test_a_combined_edit_that_rewrites_the_heads_first_keeps_the_pattern_path():
    ablate_then_window = Combined((ZeroAblation(1, 0), WindowAttention(3, layers=(1,))))
    window_then_ablate = Combined((WindowAttention(3, layers=(1,)), ZeroAblation(1, 0)))
    assert ablate_then_window.key_restrictions() == ()
    assert len(window_then_ablate.key_restrictions()) == 1
    assert window_then_ablate.without_key_restrictions() == ZeroAblation(1, 0)
    assert WindowAttention(3, layers=(1,)).without_key_restrictions() is None


def _hf_logits_with_head_mask(fam, tokens, real, layer, keep):
    """Hugging Face's logits with ``keep`` ``[batch, head, query, key]`` ANDed into layer
    ``layer``'s own mask (eager attention adds a per-head mask as it adds its own)."""
    (module,) = [m for i, m in _attention_modules(fam.hf) if i == layer]

    def narrow(module, args, kwargs):
        own = _mask_kwarg(args, kwargs)
        mask = torch.where(keep, own, torch.finfo(own.dtype).min)
        if "attention_mask" in kwargs:
            return args, {**kwargs, "attention_mask": mask}
        return (args[0], mask, *args[2:]), kwargs

    handle = module.register_forward_pre_hook(narrow, with_kwargs=True)
    try:
        with torch.no_grad():
            return fam.hf(input_ids=tokens, attention_mask=real.long()).logits.float()
    finally:
        handle.remove()


@pytest.mark.parametrize("exact", [False, True])  # the fused kernel, the chunked path
def test_a_per_head_restriction_equals_hugging_face_with_that_head_mask(exact):
    fam = family("llama")
    tokens, real = fam.tokens, fam.real
    n = tokens.shape[1]

    def keep(real_rows, queries, keys):
        query = torch.arange(queries.start, queries.stop)[None, :, None]
        key = torch.arange(keys.start, keys.stop)[None, None, :]
        kept = (key % 3 != 1) | (key == query)  # every third key hidden, the own one kept
        return kept.expand(real_rows.shape[0], -1, -1).clone()

    restriction = KeyRestriction(2, keep, heads=(1, 3))
    out = forward(
        fam.bridge,
        Prompts(tokens, real),
        attention=AttentionPath(
            "rows",
            rows=rows_module.RowRequest(exact=exact) if exact else None,
            restrictions=[(slice(0, 2), restriction)],
        ),
    )
    head_mask = torch.ones(2, 4, n, n, dtype=torch.bool)
    head_mask[:, [1, 3]] = keep(real, slice(0, n), slice(0, n))[:, None]
    expected = _hf_logits_with_head_mask(fam, tokens, real, 2, head_mask)
    torch.testing.assert_close(out.readout[real], expected[real], atol=1e-5, rtol=0)
    plain = forward(fam.bridge, Prompts(tokens, real), attention=AttentionPath("rows")).readout
    assert float((plain[real] - expected[real]).abs().max()) > 1e-3


def test_a_row_a_restriction_empties_gets_no_weight_on_both_paths():
    fam = family("llama")
    prompts = Prompts(fam.tokens, fam.real)

    def keep(real_rows, queries, keys):
        query = torch.arange(queries.start, queries.stop)[None, :, None]
        kept = (query != 5).expand(real_rows.shape[0], -1, keys.stop - keys.start)
        return kept.clone()

    restriction = [(slice(0, 2), KeyRestriction(0, keep))]
    captured = {}
    for exact in (False, True):
        out = forward(
            fam.bridge,
            prompts,
            capture=[Site("z", 0)],
            readout=None,
            attention=AttentionPath(
                "rows",
                rows=rows_module.RowRequest(exact=True) if exact else None,
                restrictions=restriction,
            ),
        )
        captured[exact] = out.captured[Site("z", 0)]
    for z in captured.values():
        assert bool((z[:, 5] == 0).all())
        assert bool((z[:, 4].abs() > 0).any())
    torch.testing.assert_close(captured[False], captured[True], atol=1e-6, rtol=0)


class _Shapes(TorchDispatchMode):
    """Records whether any operation produced a tensor ending in ``[n, n]``."""

    def __init__(self, n):
        super().__init__()
        self.n = n
        self.square = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for value in out if isinstance(out, tuple | list) else (out,):
            if isinstance(value, torch.Tensor) and tuple(value.shape[-2:]) == (self.n, self.n):
                self.square.append((str(func), tuple(value.shape)))
        return out


def test_a_long_window_with_sinks_runs_without_any_pattern_where_the_pattern_is_refused(
    monkeypatch,
):
    fam = family("mistral")  # its own 4-key window composes with the edit
    n = 48  # no other size of the model is 48 (vocabulary 64, d_model 32)
    tokens = torch.randint(2, 64, (2, n), generator=torch.Generator().manual_seed(3))
    streaming = [WindowAttention(6, sink_tokens=2), KeyKnockout((0, 1))]
    monkeypatch.setattr(forward_module, "LONG_CONTEXT", 32)
    # chunks of a few queries (at 48 tokens one chunk would hold every query)
    monkeypatch.setattr(rows_module, "_ROW_ELEMENTS", 64)
    monkeypatch.setattr(rows_module, "_MASK_ELEMENTS", 64)
    # the pattern path at the same size: one layer's pattern, 4 heads x 48^2 per row
    with _Shapes(n) as seen:
        own = text_loss(fam.bridge, tokens, streaming, attention="pattern")
    assert seen.square, "the reference run built no [T, T] block: the check could not fail"
    # the one-time check of the model's rows (its own 32-position pattern) runs first
    forward(fam.bridge, Prompts.of(tokens[:1, :8]), readout=None, attention=AttentionPath("rows"))
    monkeypatch.setattr(forward_module, "MAX_PATTERN_BYTES", 4 * n * n)  # below 2 rows' pattern
    with _Shapes(n) as seen:
        loss = text_loss(fam.bridge, tokens, streaming)  # auto: without the pattern from 32 on
    assert seen.square == []
    torch.testing.assert_close(loss.values, own.values, atol=1e-5, rtol=0)
    with pytest.raises(IntervError, match=r"would hold .* GiB \(2 rows x 4 heads x 48\^2") as error:
        text_loss(fam.bridge, tokens, streaming, attention="pattern")
    assert "\n" not in str(error.value)


def test_where_no_pattern_free_path_exists_a_long_mask_edit_is_refused_in_one_line(monkeypatch):
    monkeypatch.setattr(forward_module, "LONG_CONTEXT", 8)
    monkeypatch.setattr(forward_module, "MAX_PATTERN_BYTES", 1000)
    fam = family("qwen3_next")  # linear-attention layers: no pattern-free path
    tokens = fam.tokens[:1]
    with pytest.raises(IntervError, match=r"would hold .*qwen3_next: layer 0 is linear") as error:
        text_loss(fam.bridge, tokens, WindowAttention(3, layers=(1,)))
    assert "\n" not in str(error.value)
    with pytest.raises(IntervError, match=r"^gpt_neo: ") as error:  # refused at any length
        text_loss(family("gpt_neo").bridge, family("gpt_neo").tokens[:1], WindowAttention(3))
    assert "\n" not in str(error.value)


def test_restrictions_are_refused_outside_attention_without_the_pattern():
    fam = family("llama")
    restriction = KeyRestriction(0, lambda real, q, k: torch.ones(1, 1, 1, dtype=torch.bool))
    with pytest.raises(IntervError, match="applied inside attention computed without the"):
        forward(
            fam.bridge,
            Prompts(fam.tokens, fam.real),
            attention=AttentionPath("pattern", restrictions=[(slice(0, 2), restriction)]),
        )
    with pytest.raises(IntervError, match=r"must keep a \[2, 13, 13\] bool tensor"):
        forward(
            fam.bridge,
            Prompts(fam.tokens, fam.real),
            attention=AttentionPath("rows", restrictions=[(slice(0, 2), restriction)]),
        )
    with pytest.raises(IntervError, match="heads must be None or a non-empty tuple"):
        KeyRestriction(0, restriction.keep, heads=())
