"""Gated heads (Qwen3-Next, Qwen3.5): what a head writes when its output is gated.

A gated head multiplies ``a . V`` by ``sigmoid(g_t)`` (one factor per ``d_head`` component,
computed from the query's own input) before the output projection: head ``h`` writes
``(sigmoid(g_t) * sum_i a_ti v_i) W_O^h`` at query ``t``. Key ``i``'s part of it is
``a_ti (sigmoid(g_t) * v_i) W_O^h``, whose norm depends on the query as well as the key: the
attention row and the value vectors alone do not give the head's output. The value-aware
numbers of :func:`interv.concentration` and :func:`interv.analysis.token_attention` use these
gated contributions on such layers (``LayerAttention.output_gate``).

>>> gates = gate_factors(gate_logits, n_heads)            # [batch, pos, head_index, d_head]
>>> norms = gated_value_norms(gates[:, queries], values, gram)  # [batch, head, query, key]
"""

from __future__ import annotations

import torch

__all__ = ["gate_factors", "gated_value_norms"]

_BLOCK_ELEMENTS = 1 << 22
"""Most float64 elements of one block of ``[batch, query, key, head, d_head]`` products."""


def gate_factors(gate_logits: torch.Tensor, n_heads: int) -> torch.Tensor:
    """``sigmoid`` of the gate logits (site ``gate``, ``[batch, pos, head_index * d_head]``)
    as ``[batch, pos, head_index, d_head]`` float64 factors."""
    n_batch, n_pos, width = gate_logits.shape
    factors = torch.sigmoid(gate_logits.detach().to(torch.float64))
    return factors.reshape(n_batch, n_pos, n_heads, width // n_heads)


def gated_value_norms(
    gates: torch.Tensor, values: torch.Tensor, gram: torch.Tensor
) -> torch.Tensor:
    """``||(gate_t * v_i) W_O^h||`` for every query ``t`` and key ``i``, ``[batch, head_index,
    query, key]`` float64 (residual-stream units).

    Args:
        gates: ``[batch, query, head_index, d_head]`` gate factors at the queries
            (:func:`gate_factors`).
        values: ``[batch, key, head_index, d_head]`` each query head's value vectors.
        gram: ``[head_index, d_head, d_head]`` ``W_O^h (W_O^h)^T``, so that
            ``||x W_O^h||^2 = x gram_h x^T``.

    Computed in blocks of queries (at most :data:`_BLOCK_ELEMENTS` products at a time).
    """
    gates, values, gram = (x.to(torch.float64) for x in (gates, values, gram))
    n_batch, n_query, n_heads, d_head = gates.shape
    n_keys = values.shape[1]
    block = max(1, _BLOCK_ELEMENTS // max(1, n_batch * n_keys * n_heads * d_head))
    norms = torch.empty(n_batch, n_heads, n_query, n_keys, dtype=torch.float64, device=gates.device)
    for start in range(0, n_query, block):
        gated = gates[:, start : start + block, None] * values[:, None]  # [b, q, k, h, d]
        squared = torch.einsum("bqkhd,hde,bqkhe->bhqk", gated, gram, gated)
        norms[:, :, start : start + block] = squared.clamp(min=0).sqrt()
    return norms
