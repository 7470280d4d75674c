"""Gated heads (Qwen3-Next): the value-aware numbers include each head's output gate.

A tiny random Qwen3-Next whose layers are all full attention (so every layer has rows;
the real models interleave linear-attention layers) is booted through the bridge offline.
The reference is plain Hugging Face: eager attention weights, forward hooks on ``q_proj``
(the gate is the second half of each head's projection, as the model splits it) and
``v_proj``, and a pre-hook on ``o_proj`` capturing the heads' own outputs, which the
reference reproduces from rows, gates and values before using them.
"""

from __future__ import annotations

import warnings

import pytest
import torch
from _families import _GQA, prompts, save_model

import interv
from interv.engine.architecture import architecture_of

N_HEADS, N_KV, D_HEAD = 4, 2, 8


@pytest.fixture(scope="module")
def gated():
    """(bridge, Hugging Face model) of a 2-layer gated Qwen3-Next, full attention only."""
    import transformers
    from transformer_lens.model_bridge import TransformerBridge

    config = transformers.Qwen3NextConfig(
        **{**_GQA, "num_hidden_layers": 2},
        head_dim=D_HEAD,
        layer_types=["full_attention", "full_attention"],
        num_experts=0,
        mlp_only_layers=[0, 1],
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        hf = transformers.AutoModelForCausalLM.from_config(
            config, attn_implementation="eager"
        ).eval()
    directory = save_model(hf, "qwen3_next_full_attention")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        bridge = TransformerBridge.boot_transformers(str(directory), device="cpu").eval()
    return bridge, hf


def reference_contributions(hf, tokens, real):
    """Per layer ``[batch, head, query, key]`` float64 ``a_tk ||(sigmoid(g_t) * v_k) W_O^h||``,
    the ungated ``a_tk ||v_k W_O^h||`` and ``[batch, query, key]``
    ``||sum_h a_tk (sigmoid(g_t) * v_k) W_O^h||``, from Hugging Face alone."""
    captured: dict[tuple[int, str], torch.Tensor] = {}
    handles = []
    for layer, block in enumerate(hf.model.layers):
        attention = block.self_attn

        def keep(name, layer=layer):
            def hook(module, args, output):
                captured[layer, name] = output.detach()

            return hook

        def keep_input(module, args, layer=layer):
            captured[layer, "o_in"] = args[0].detach()

        handles.append(attention.q_proj.register_forward_hook(keep("q")))
        handles.append(attention.v_proj.register_forward_hook(keep("v")))
        handles.append(attention.o_proj.register_forward_pre_hook(keep_input))
    try:
        with torch.no_grad():
            out = hf(input_ids=tokens, attention_mask=real.long(), output_attentions=True)
    finally:
        for handle in handles:
            handle.remove()
    n_batch, n_pos = tokens.shape
    gated, plain, summed = [], [], []
    for layer, block in enumerate(hf.model.layers):
        a = out.attentions[layer].double()  # [b, h, t, k]
        q = captured[layer, "q"].view(n_batch, n_pos, N_HEADS, 2 * D_HEAD)
        gate = torch.sigmoid(q[..., D_HEAD:].double())  # [b, t, h, d]
        v = captured[layer, "v"].view(n_batch, n_pos, N_KV, D_HEAD).double()
        v = v.repeat_interleave(N_HEADS // N_KV, dim=2)  # [b, k, h, d] per query head
        w_o = block.self_attn.o_proj.weight.double().T.reshape(N_HEADS, D_HEAD, -1)
        # the reference reproduces the heads' own outputs (o_proj's input)
        z = gate * torch.einsum("bhtk,bkhd->bthd", a, v)
        own = captured[layer, "o_in"].double().view(n_batch, n_pos, N_HEADS, D_HEAD)
        assert torch.allclose(z, own, atol=1e-6)
        written = torch.einsum("bthd,bkhd,hdm->bhtkm", gate, v, w_o)  # (g_t * v_k) W_O^h
        gated.append(a * written.norm(dim=-1))
        summed.append((a[..., None] * written).sum(dim=1).norm(dim=-1))  # [b, t, k]
        plain.append(a * torch.einsum("bkhd,hdm->bhkm", v, w_o).norm(dim=-1)[:, :, None])
    return gated, plain, summed


def test_contribution_numbers_include_the_gate_of_each_head(gated):
    bridge, hf = gated
    assert architecture_of(bridge).layer(0).output_gate
    tokens, real = prompts()
    heads = interv.concentration(bridge, tokens, attention_mask=real)
    gated_parts, plain_parts, _ = reference_contributions(hf, tokens, real)
    at_real = real[:, None, :]  # [batch, 1, query]
    for layer, (parts, plain) in enumerate(zip(gated_parts, plain_parts, strict=True)):
        total = parts.sum(dim=-1)  # [batch, head, query]
        share = parts[..., 0] / total
        got_total = heads.contribution_norm[:, layer]
        got_share = heads.sink_contribution_share[:, layer]
        assert torch.allclose(
            got_total[at_real.expand_as(got_total)], total[at_real.expand_as(total)], rtol=1e-5
        )
        assert torch.allclose(
            got_share[at_real.expand_as(got_share)], share[at_real.expand_as(share)], rtol=1e-5
        )
        # rows and values alone give other numbers: the check can fail
        ungated = plain.sum(dim=-1)
        assert not torch.allclose(ungated, total, rtol=1e-2)
    assert "include each head's output gate" in heads.scope
    assert heads.gated_layers == (0, 1)


def test_the_gate_is_read_at_each_requested_query(gated):
    bridge, hf = gated
    tokens, real = prompts()
    last = real.sum(dim=1) - 1  # each prompt's last real token (right padding)
    heads = interv.concentration(bridge, tokens, attention_mask=real, query_positions=[-1, 2])
    gated_parts, _, _ = reference_contributions(hf, tokens, real)
    rows = torch.arange(tokens.shape[0])
    for layer, parts in enumerate(gated_parts):
        total = parts.sum(dim=-1)  # [batch, head, query]
        assert torch.allclose(heads.contribution_norm[:, layer, :, 0], total[rows, :, last])
        assert torch.allclose(heads.contribution_norm[:, layer, :, 1], total[:, :, 2])


def test_token_attention_by_norm_includes_the_gate(gated):
    bridge, hf = gated
    tokens, real = prompts()
    flow = interv.analysis.token_attention(bridge, tokens, attention_mask=real)
    _, _, summed = reference_contributions(hf, tokens, real)
    pairs = real[:, :, None] & real[:, None, :]  # real queries and keys
    for layer, expected in enumerate(summed):
        got = flow.norms[:, layer]
        assert torch.allclose(got[pairs], expected[pairs], rtol=1e-5, atol=1e-12)
    assert "gate" in flow.scope
