"""Attention rollout (Abnar & Zuidema, ACL 2020): attention matrices multiplied through the
layers. A summary of attention *weights*, not a causal effect.

>>> identity = torch.eye(3).expand(2, 3, 3)          # [layer, query, key]
>>> attention_rollout(identity)                       # identity attention: rollout = I
tensor([[1., 0., 0.], [0., 1., 0.], [0., 0., 1.]], dtype=torch.float64)

For layers ``1..L`` with head-averaged attention ``A_l`` (``[query, key]``, rows summing
to 1 over the available keys), the residual connection is modelled as attention to the
token itself::

    A~_l = r * I + (1 - r) * A_l          (r = residual, 0.5 in Abnar & Zuidema)
    R    = A~_L  A~_{L-1}  ...  A~_1

``R[t, j]`` (a fraction in [0, 1]; each row sums to 1) is read as "how much of token
``j`` reaches position ``t``" *if* information mixed across positions only by the
attention weights, equally for every dimension and every head, with the residual
stream as a fixed share. None of that holds in a transformer (values, the output
projection, MLPs and norms are ignored), so rollout is a concentration-side number:
compare it with an intervention before reading it as influence. Rows with no available
key (padding queries) keep only the residual (their row of ``A~_l`` is the identity row).
"""

from __future__ import annotations

import torch

from interv._checks import as_finite
from interv.errors import IntervError
from interv.metrics._rows import prepare_rows

__all__ = ["attention_rollout"]


def attention_rollout(
    patterns: torch.Tensor,
    *,
    residual: float = 0.5,
    key_mask: torch.Tensor | None = None,
) -> torch.Tensor:
    """Attention rollout of per-layer attention matrices.

    Args:
        patterns: ``[..., layer, query, key]`` attention weights, one matrix per layer in
            forward order (average the heads of a layer first, as Abnar & Zuidema do);
            ``query == key`` (self-attention).
        residual: ``r`` in [0, 1], the share of each position kept by the residual
            connection (0: a plain product of attention matrices; 1: the identity).
        key_mask: optional bool broadcastable to ``patterns``; True = available key.

    Returns:
        ``[..., query, key]`` float64 rollout ``R`` (each row of a real query sums to 1).

    Raises:
        IntervError: patterns that are not attention rows, fewer than three dims,
            non-square matrices, or ``residual`` outside [0, 1].
    """
    if not isinstance(patterns, torch.Tensor) or patterns.ndim < 3:
        shape = tuple(patterns.shape) if isinstance(patterns, torch.Tensor) else type(patterns)
        raise IntervError(
            f"patterns must be a tensor of shape [..., layer, query, key]; got {shape}"
        )
    n_queries, n_keys = patterns.shape[-2:]
    if n_queries != n_keys:
        raise IntervError(
            f"rollout needs self-attention matrices (as many queries as keys); got patterns "
            f"of shape {tuple(patterns.shape)}"
        )
    residual = as_finite(residual, "residual")
    if not 0 <= residual <= 1:
        raise IntervError(f"residual must lie in [0, 1]; got {residual}")
    rows = prepare_rows(patterns, key_mask)
    eye = torch.eye(n_keys, dtype=torch.float64, device=rows.weights.device)
    # padding queries (no available key) keep only their residual: an identity row
    weights = torch.where(rows.empty.unsqueeze(-1), eye, rows.weights)
    mixed = residual * eye + (1 - residual) * weights  # [..., layer, query, key]
    rollout = mixed[..., 0, :, :]
    for layer in range(1, mixed.shape[-3]):
        rollout = mixed[..., layer, :, :] @ rollout
    return rollout
