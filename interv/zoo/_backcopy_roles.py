"""Head roles and next-token accuracy of a zoo model trained on the backcopy language.

Three roles, each scored per head as a *mean attention weight* (0..1, a fraction of
the query's attention mass; see :mod:`interv.zoo._probes`) on held-out backcopy
sequences (see :mod:`interv.zoo._backcopy`):

- previous-token: weight from a copy trigger at position ``p`` to key ``p - 1`` (the
  token to copy), averaged over all copy triggers;
- duplicate-token: weight from a repeated ``#`` to all earlier ``#`` (where the bound
  word was stored), averaged over all repeated ``#``;
- sink: weight on position 0 (``<bos>``) from words at positions ``p >= 2``: there the
  next token depends on the current word alone, so attending anywhere is of no use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch
import torch.nn.functional as F

from interv.engine.forward import Prompts, forward
from interv.zoo._backcopy import BackcopyBatch
from interv.zoo._probes import RoleProbe
from interv.zoo._registry import BackcopyAccuracy

if TYPE_CHECKING:
    from transformer_lens.model_bridge import TransformerBridge

__all__ = ["MEASUREMENTS", "ROLES", "backcopy_probes", "next_token_accuracy"]

ROLES = ("previous_token", "duplicate_token", "sink")

MEASUREMENTS = {
    "previous_token": (
        "mean attention weight from each copy trigger (~ or *) at position p to key p-1, "
        "the token it copies"
    ),
    "duplicate_token": (
        "mean attention weight from each repeated recall trigger (#) to all earlier #"
    ),
    "sink": (
        "mean attention weight on position 0 (<bos>) from words at positions p >= 2 "
        "(the next token depends on the current word alone: nothing to attend to)"
    ),
}


def backcopy_probes(batch: BackcopyBatch) -> list[RoleProbe]:
    """The three backcopy probes of ``batch`` (definitions in the module docstring)."""
    positions = batch.positions
    n_ctx = batch.tokens.shape[1]
    keys = torch.arange(n_ctx)[None, None, :]  # [1, 1, key_pos]
    previous_keys = (keys == positions[..., None] - 1).expand(len(batch.tokens), -1, -1)
    masks = {
        "previous_token": (batch.copy_mask, previous_keys),
        "duplicate_token": (batch.recall_mask, batch.earlier_recall_keys),
        "sink": (batch.word_mask & (positions >= 2), (keys == 0).expand_as(previous_keys)),
    }
    return [
        RoleProbe(role=role, queries=queries, keys=key_mask, measurement=MEASUREMENTS[role])
        for role, (queries, key_mask) in masks.items()
    ]


def next_token_accuracy(
    model: TransformerBridge, batch: BackcopyBatch, *, data: str
) -> BackcopyAccuracy:
    """Loss against the optimum, and top-1 accuracy after copy triggers, repeated ``#``
    and words, on ``batch`` (every position but the last predicts the next token)."""
    tokens = batch.tokens
    logits = forward(model, Prompts.of(tokens)).readout.cpu()[:, :-1]  # [batch, pos - 1, vocab]
    targets = tokens[:, 1:]
    optimum = batch.next_token_distribution()[:, :-1]
    optimal_loss = -torch.log(optimum.gather(-1, targets[..., None])).mean()
    correct = logits.argmax(dim=-1) == targets
    optimal_correct = optimum.argmax(dim=-1) == targets

    def fraction(hits: torch.Tensor, mask: torch.Tensor) -> float:
        return round(float(hits[mask[:, :-1]].float().mean()), 4)

    copy, recall, word = batch.copy_mask, batch.recall_mask, batch.word_mask
    return BackcopyAccuracy(
        loss=round(float(F.cross_entropy(logits.flatten(0, 1), targets.flatten())), 4),
        optimal_loss=round(float(optimal_loss), 4),
        copy=fraction(correct, copy),
        recall=fraction(correct, recall),
        word=fraction(correct, word),
        word_optimal=fraction(optimal_correct, word),
        n_copy=int(copy[:, :-1].sum()),
        n_recall=int(recall[:, :-1].sum()),
        n_word=int(word[:, :-1].sum()),
        measurement=(
            "next-token cross-entropy (nats/token) over every position, against the "
            "language's own next-token distribution (optimal_loss); top-1 accuracy after "
            "copy triggers, after repeated # and after words (word_optimal: the language's "
            f"most likely next token); {data}"
        ),
    )
