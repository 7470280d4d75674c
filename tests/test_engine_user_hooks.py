"""A hook the user adds to the model's attention pattern is honoured or refused, on every call.

Attention without the pattern (:mod:`interv.engine.rows`) never fires ``hook_pattern`` or
``hook_attn_scores``; the forward reads those hook points at every choice of the path, so a
hook added after the model already ran pattern-free (and was verified) still takes the
pattern path under ``attention="auto"``, and ``attention="rows"`` refuses it in one line.
Long context is :data:`~interv.engine.rows.LONG_CONTEXT` lowered to 8 positions on a tiny
random Llama (13 positions), as in ``tests/test_engine_rows.py``.
"""

from __future__ import annotations

import pytest
import torch
from _families import family

import interv.engine.forward as forward_module
import interv.engine.rows as rows_module
from interv import concentration
from interv.engine.forward import AttentionPath, Prompts, forward
from interv.engine.sites import Site
from interv.errors import IntervError

HOOK = "blocks.0.attn.hook_pattern"


def _all_on_first_key(pattern: torch.Tensor, hook) -> torch.Tensor:
    """Every row's whole mass on key 0 (<bos>): entropy 0 by hand."""
    out = torch.zeros_like(pattern)
    out[..., 0] = 1
    return out


@pytest.fixture
def llama(monkeypatch):
    fam = family("llama")
    monkeypatch.setattr(forward_module, "LONG_CONTEXT", 8)
    fam.bridge.reset_hooks()
    yield fam
    fam.bridge.reset_hooks()


def _layer0_entropy(fam) -> float:
    heads = concentration(fam.bridge, fam.tokens, attention_mask=fam.real)
    return float(heads.entropy[:, 0].nanmean())


def _check_hook_honoured(fam, prompts: Prompts) -> None:
    reference = forward(
        fam.bridge,
        prompts,
        hooks=[(Site("pattern", 0), _all_on_first_key)],
        attention=AttentionPath("pattern"),
    )
    fam.bridge.add_hook(HOOK, _all_on_first_key)
    out = forward(fam.bridge, prompts)
    assert out.attention == "pattern"
    torch.testing.assert_close(out.readout, reference.readout, atol=0, rtol=0)
    assert _layer0_entropy(fam) == pytest.approx(0.0, abs=1e-12)
    with pytest.raises(IntervError, match=rf"^{HOOK} carries a hook added to the model"):
        forward(fam.bridge, prompts, readout=None, attention=AttentionPath("rows"))
    with pytest.raises(IntervError, match="carries a hook added to the model"):
        concentration(fam.bridge, fam.tokens, attention_mask=fam.real, attention="rows")


def test_a_hook_added_after_a_pattern_free_run_is_honoured(llama):
    prompts = Prompts(llama.tokens, llama.real)
    plain = forward(llama.bridge, prompts)
    assert plain.attention == "rows"  # verified and pattern-free
    free_entropy = _layer0_entropy(llama)
    assert free_entropy > 0.5
    _check_hook_honoured(llama, prompts)
    llama.bridge.reset_hooks()
    again = forward(llama.bridge, prompts)
    assert again.attention == "rows"
    torch.testing.assert_close(again.readout, plain.readout, atol=1e-5, rtol=0)
    assert _layer0_entropy(llama) == pytest.approx(free_entropy, abs=1e-9)


def test_a_hook_added_before_any_pattern_free_run_is_honoured(llama):
    rows_module._VERIFIED.pop(llama.bridge, None)  # a model that has not run pattern-free
    prompts = Prompts(llama.tokens, llama.real)
    _check_hook_honoured(llama, prompts)
    assert not rows_module.verified(llama.bridge)  # nothing ran without the pattern
    llama.bridge.reset_hooks()
    assert forward(llama.bridge, prompts).attention == "rows"


def test_a_hook_inside_the_models_hooks_context_is_seen_and_other_hooks_keep_the_rows(llama):
    prompts = Prompts(llama.tokens, llama.real)
    assert forward(llama.bridge, prompts).attention == "rows"
    with llama.bridge.hooks(fwd_hooks=[("blocks.1.attn.hook_attn_scores", lambda a, hook: a)]):
        assert forward(llama.bridge, prompts).attention == "pattern"
    # a hook on a point the pattern-free path fires (the values) keeps it
    with llama.bridge.hooks(fwd_hooks=[("blocks.0.attn.hook_v", lambda a, hook: a)]):
        assert forward(llama.bridge, prompts).attention == "rows"
    assert rows_module.outside_hooks(llama.bridge) == []
