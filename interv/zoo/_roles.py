"""Head roles and task accuracy of zoo models, measured from attention patterns.

Three roles, each scored per head as a *mean attention weight* (0..1, a fraction of
the query's attention mass) on held-out induction sequences (see
``interv.zoo._data``):

- previous-token: weight from query position ``p`` to key ``p - 1``, averaged over
  prefix positions ``p = 2..m`` (random tokens, nothing repeated by construction);
- induction: weight from a copy position ``p`` to ``source(p) + 1``, the position after
  the token's earlier occurrence (the token to copy), averaged over all copy positions;
- sink: weight on position 0 (``<bos>``) from prefix positions ``p >= 2`` whose token
  has no earlier occurrence, i.e. where there is nothing to copy.

A head plays a role when its score reaches the recipe's threshold. Scores are means
over all scored (sequence, position) pairs of the batch.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from interv.errors import IntervError
from interv.zoo._data import InductionBatch, induction_batch
from interv.zoo._registry import HeadRole, RoleThresholds, TaskAccuracy

if TYPE_CHECKING:
    import torch
    from transformer_lens.model_bridge import TransformerBridge

__all__ = [
    "ROLES",
    "RoleScores",
    "assign_roles",
    "eval_batch",
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


@dataclass(frozen=True, eq=False)
class RoleScores:
    """Role scores of every head, each ``[n_layers, n_heads]`` float, mean attention
    weight (0..1).

    Attributes:
        previous_token, induction, sink: the scores (definitions in the module docstring).
        n_sequences: number of sequences they were averaged over.
        data: one sentence naming the data (generator, seed, length).
    """

    previous_token: torch.Tensor
    induction: torch.Tensor
    sink: torch.Tensor
    n_sequences: int
    data: str

    def score(self, role: str) -> torch.Tensor:
        """``[n_layers, n_heads]`` scores of ``role`` (one of :data:`ROLES`)."""
        if role not in ROLES:
            raise IntervError(f"unknown role {role!r}; roles: {', '.join(ROLES)}")
        return getattr(self, role)


def eval_batch(n_ctx: int, min_prefix: int, *, n_sequences: int, seed: int) -> InductionBatch:
    """Held-out induction sequences drawn with their own ``torch.Generator(seed)``."""
    import torch

    generator = torch.Generator().manual_seed(seed)
    return induction_batch(n_sequences, n_ctx, min_prefix=min_prefix, generator=generator)


def _masked_mean(values: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Mean of ``values [batch, head_index, query_pos]`` over ``mask [batch, query_pos]``:
    ``[head_index]``."""
    weights = mask[:, None, :].to(values.dtype)
    return (values * weights).sum(dim=(0, 2)) / weights.sum(dim=(0, 2))


def measure_roles(model: TransformerBridge, batch: InductionBatch, *, data: str) -> RoleScores:
    """Score every head of ``model`` for each role on ``batch`` (one forward pass).

    ``data`` is a sentence naming the batch (it travels into the result). The model
    must take ``batch.tokens`` as they are (``<bos>`` already at position 0).
    """
    import torch

    from interv.engine.forward import Prompts, forward
    from interv.engine.sites import Site

    tokens = batch.tokens
    n_ctx = tokens.shape[1]
    sites = [Site("pattern", layer) for layer in range(model.cfg.n_layers)]
    captured = forward(
        model, Prompts.of(tokens), capture=sites, readout=None, stop_after=sites[-1]
    ).captured
    positions = batch.positions
    in_prefix = (positions >= 1) & (positions <= batch.prefix_length[:, None])
    previous_mask = in_prefix & (positions >= 2)
    sink_mask = previous_mask & batch.first_occurrence_mask
    induction_key = batch.induction_key.clamp(min=0)
    previous_key = (positions - 1).clamp(min=0).expand_as(tokens)

    per_layer: dict[str, list[torch.Tensor]] = {role: [] for role in ROLES}
    for site in sites:
        pattern = captured[site].cpu()  # [batch, head, query, key]
        n_heads = pattern.shape[1]

        def weight_on(key: torch.Tensor, pattern: torch.Tensor = pattern, h: int = n_heads):
            """``[batch, head, query]`` weight on ``key[batch, query]``."""
            index = key[:, None, :, None].expand(-1, h, n_ctx, 1)
            return pattern.gather(-1, index).squeeze(-1)

        per_layer["previous_token"].append(_masked_mean(weight_on(previous_key), previous_mask))
        per_layer["induction"].append(_masked_mean(weight_on(induction_key), batch.copy_mask))
        per_layer["sink"].append(_masked_mean(pattern[..., 0], sink_mask))
    return RoleScores(
        **{role: torch.stack(rows) for role, rows in per_layer.items()},
        n_sequences=int(tokens.shape[0]),
        data=data,
    )


def assign_roles(scores: RoleScores, thresholds: RoleThresholds) -> tuple[HeadRole, ...]:
    """The heads whose score reaches the threshold, per role, in role then (layer, head)
    order."""
    roles = []
    for role in ROLES:
        threshold = getattr(thresholds, role)
        table = scores.score(role)
        for layer, head in (table >= threshold).nonzero().tolist():
            roles.append(
                HeadRole(
                    role=role,
                    layer=layer,
                    head=head,
                    score=round(float(table[layer, head]), 4),
                    threshold=threshold,
                    measurement=f"{MEASUREMENTS[role]}; {scores.data}",
                )
            )
    return tuple(roles)


def task_accuracy(model: TransformerBridge, batch: InductionBatch, *, data: str) -> TaskAccuracy:
    """Top-1 next-token accuracy at determined copy positions and at fresh prefix
    positions (the chance reference), fractions 0..1."""
    import torch

    from interv.engine.forward import Prompts, forward

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
