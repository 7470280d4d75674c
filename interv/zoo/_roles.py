"""Head roles and task accuracy of the induction zoo model, measured from attention patterns.

Three roles, each scored per head as a *mean attention weight* (0..1, a fraction of
the query's attention mass; see :mod:`interv.zoo._probes`) on held-out induction
sequences (see :mod:`interv.zoo._data`):

- previous-token: weight from query position ``p`` to key ``p - 1``, averaged over
  prefix positions ``p = 2..m`` (random tokens, nothing repeated by construction);
- induction: weight from a copy position ``p`` to ``source(p) + 1``, the position after
  the token's earlier occurrence (the token to copy), averaged over all copy positions;
- sink: weight on position 0 (``<bos>``) from prefix positions ``p >= 2`` whose token
  has no earlier occurrence, i.e. where there is nothing to copy.

A head plays a role when its score reaches the recipe's threshold.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from interv.engine.forward import Prompts, forward
from interv.zoo._backcopy import BackcopyBatch
from interv.zoo._backcopy_roles import backcopy_probes
from interv.zoo._data import InductionBatch, induction_batch
from interv.zoo._probes import RoleProbe, RoleScores, measure_probes
from interv.zoo._registry import TaskAccuracy

if TYPE_CHECKING:
    from transformer_lens.model_bridge import TransformerBridge

__all__ = [
    "MEASUREMENTS",
    "ROLES",
    "eval_batch",
    "induction_probes",
    "measure_roles",
    "task_accuracy",
]

ROLES = ("previous_token", "induction", "sink")

MEASUREMENTS = {
    "previous_token": (
        "mean attention weight from query position p to key p-1 over prefix positions "
        "p = 2..m (random symbols)"
    ),
    "induction": (
        "mean attention weight from each copy position to the position right after the "
        "token's earlier occurrence in the prefix"
    ),
    "sink": (
        "mean attention weight on position 0 (<bos>) from prefix positions p >= 2 whose "
        "token has no earlier occurrence (nothing to copy)"
    ),
}


def eval_batch(n_ctx: int, min_prefix: int, *, n_sequences: int, seed: int) -> InductionBatch:
    """Held-out induction sequences drawn with their own ``torch.Generator(seed)``."""
    generator = torch.Generator().manual_seed(seed)
    return induction_batch(n_sequences, n_ctx, min_prefix=min_prefix, generator=generator)


def induction_probes(batch: InductionBatch) -> list[RoleProbe]:
    """The three induction-task probes of ``batch`` (definitions in the module docstring)."""
    positions = batch.positions
    n_ctx = batch.tokens.shape[1]
    in_prefix = (positions >= 1) & (positions <= batch.prefix_length[:, None])
    previous_mask = in_prefix & (positions >= 2)
    keys = torch.arange(n_ctx)[None, None, :]  # [1, 1, key_pos]
    previous_keys = (keys == positions[..., None] - 1).expand(len(batch.tokens), -1, -1)
    masks = {
        "previous_token": (previous_mask, previous_keys),
        "induction": (batch.copy_mask, keys == batch.induction_key[..., None]),
        "sink": (previous_mask & batch.first_occurrence_mask, (keys == 0).expand_as(previous_keys)),
    }
    return [
        RoleProbe(role=role, queries=queries, keys=key_mask, measurement=MEASUREMENTS[role])
        for role, (queries, key_mask) in masks.items()
    ]


def measure_roles(
    model: TransformerBridge, batch: InductionBatch | BackcopyBatch, *, data: str
) -> RoleScores:
    """Score every head of ``model`` for each role of the batch's task on ``batch`` (one
    forward pass): the induction roles above, or the backcopy roles of
    :mod:`interv.zoo._backcopy_roles`.

    ``data`` is a sentence naming the batch (it travels into the result). The model
    must take ``batch.tokens`` as they are (``<bos>`` already at position 0).
    """
    backcopy = isinstance(batch, BackcopyBatch)
    probes = backcopy_probes(batch) if backcopy else induction_probes(batch)
    return measure_probes(model, batch.tokens, probes, data=data)


def task_accuracy(model: TransformerBridge, batch: InductionBatch, *, data: str) -> TaskAccuracy:
    """Top-1 next-token accuracy at determined copy positions and at fresh prefix
    positions (the chance reference), fractions 0..1."""
    logits = forward(model, Prompts.of(batch.tokens)).readout.cpu()  # [batch, pos, d_vocab]
    correct = torch.zeros_like(batch.tokens, dtype=torch.bool)
    correct[:, :-1] = logits[:, :-1].argmax(dim=-1) == batch.tokens[:, 1:]
    repeated, fresh = batch.determined_mask, batch.fresh_mask
    return TaskAccuracy(
        repeated=round(float(correct[repeated].float().mean()), 4),
        fresh=round(float(correct[fresh].float().mean()), 4),
        n_repeated=int(repeated.sum()),
        n_fresh=int(fresh.sum()),
        measurement=(
            "top-1 next-token accuracy; 'repeated' over copy positions whose token occurs "
            "exactly once in the prefix (answer fixed by that occurrence), 'fresh' over "
            f"prefix positions 1..m-1 (answer a fresh uniform draw, chance 1/62); {data}"
        ),
    )
