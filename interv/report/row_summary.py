"""A plain-text summary of one attention row's concentration metrics.

Used by ``interv metrics``. Every line names its unit; the header says what the
numbers are (how concentrated the weights are) and what they are not (how much the
head matters).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch

from interv.metrics import (
    effective_support,
    entropy,
    max_weight,
    normalized_entropy,
    sink_split,
)

__all__ = ["describe_row"]


def describe_row(
    weights: Sequence[float],
    *,
    sink: Sequence[int] = (0,),
    unit: str = "nats",
    allow_deficit: bool = False,
) -> str:
    """Concentration metrics of one attention row, one per line, with units.

    Args:
        weights: the row ``a_1..a_n`` (non-negative, summing to 1).
        sink: key positions forming the sink (default: position 0, the BOS token).
        unit: ``"nats"`` or ``"bits"`` for every entropy.
        allow_deficit: accept a row summing to less than 1; the rest is an off-row sink
            (one extra key, part of the sink; see :mod:`interv.metrics`).

    Returns:
        A multi-line string; the last line checks the grouping identity
        ``H = h(s) + s H(a_S/s) + (1-s) H(q)`` on this row.
    """
    row = torch.tensor([list(weights)], dtype=torch.float64)
    sink_positions = list(sink)
    options = {"allow_deficit": allow_deficit}
    split = sink_split(row, sink=sink_positions, unit=unit, **options)
    n_keys = row.shape[-1]
    off_row = max(0.0, 1.0 - float(row.sum())) if allow_deficit else 0.0
    n = n_keys + (1 if allow_deficit else 0)
    log_n = math.log(n) / (math.log(2) if unit == "bits" else 1.0)
    h = float(entropy(row, unit=unit, **options)[0])
    identity = float(split.sink_term[0] + split.sink_internal_term[0] + split.content_term[0])
    keys = f"{n_keys} keys"
    if allow_deficit:
        keys += f" + an off-row sink holding {off_row:.4f} (counted as key {n_keys}, in the sink)"
    lines = [
        f"Attention row over {keys}, sink = key position(s) {sink_positions}.",
        "Concentration only: these numbers describe how the weights are spread, "
        "not how much the head matters (that needs an intervention).",
        f"  entropy H                   {h:.4f} {unit}  (0 = one key, log n = {log_n:.4f} {unit})",
        f"  normalized entropy H/log n  {float(normalized_entropy(row, **options)[0]):.4f}"
        "  (unitless, 0..1)",
        f"  effective support exp(H)    {float(effective_support(row, **options)[0]):.3f} keys",
        f"  max weight                  {float(max_weight(row, **options)[0]):.4f}"
        "  (fraction of the row)",
        f"  sink mass s                 {float(split.sink_mass[0]):.4f}  (fraction of the row)",
        f"  sink term h(s)              {float(split.sink_term[0]):.4f} {unit}",
        f"  content entropy H(q)        {float(split.content_entropy[0]):.4f} {unit}"
        "  (non-sink weights renormalized)",
        f"  content normalized entropy  {float(split.content_normalized_entropy[0]):.4f}"
        "  (H(q)/log(n-|S|), unitless)",
        f"  identity h(s) + s H(a_S/s) + (1-s) H(q) = {identity:.4f} {unit} (equals H)",
    ]
    return "\n".join(lines)
