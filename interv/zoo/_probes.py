"""Role scores of attention heads: mean attention weight from chosen queries to chosen keys.

Every head role of a zoo card is one :class:`RoleProbe`: a set of query positions
(where the role matters) and, for each of them, a set of key positions (where a head
playing the role looks). A head's *score* for the role is its attention weight summed
over the probe's keys, averaged over all probed (sequence, query position) pairs: a
fraction 0..1 of the query's attention mass. One forward pass scores every head for
every probe; a head plays the role when its score reaches the recipe's threshold.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch

from interv.engine.forward import Prompts, forward
from interv.engine.sites import Site
from interv.errors import IntervError
from interv.zoo._registry import HeadRole, RoleThresholds

if TYPE_CHECKING:
    from transformer_lens.model_bridge import TransformerBridge

__all__ = ["RoleProbe", "RoleScores", "assign_roles", "measure_probes"]


@dataclass(frozen=True, eq=False)
class RoleProbe:
    """Where a role is scored.

    Attributes:
        role: the role's name, e.g. ``"sink"``.
        queries: ``[batch, query_pos]`` bool, True at the query positions scored.
        keys: ``[batch, query_pos, key_pos]`` bool, True at the keys a head playing the
            role attends to from that query.
        measurement: the score's definition in one sentence (without the data).
    """

    role: str
    queries: torch.Tensor
    keys: torch.Tensor
    measurement: str


@dataclass(frozen=True, eq=False)
class RoleScores:
    """Role scores of every head, each ``[n_layers, n_heads]`` float, mean attention
    weight (0..1).

    Attributes:
        scores: role -> scores, in the order the roles were probed.
        measurements: role -> the score's definition (one sentence).
        n_sequences: number of sequences the scores were averaged over.
        data: one sentence naming the data (generator, seed, length).
    """

    scores: dict[str, torch.Tensor]
    measurements: dict[str, str]
    n_sequences: int
    data: str

    @property
    def roles(self) -> tuple[str, ...]:
        """The roles scored, in probe order."""
        return tuple(self.scores)

    @property
    def sink(self) -> torch.Tensor:
        """``[n_layers, n_heads]`` sink scores (every zoo task scores a sink)."""
        return self.score("sink")

    def score(self, role: str) -> torch.Tensor:
        """``[n_layers, n_heads]`` scores of ``role`` (one of :attr:`roles`)."""
        if role not in self.scores:
            raise IntervError(f"unknown role {role!r}; roles: {', '.join(self.roles)}")
        return self.scores[role]


def _masked_mean(values: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Mean of ``values [batch, head_index, query_pos]`` over ``mask [batch, query_pos]``:
    ``[head_index]``."""
    weights = mask[:, None, :].to(values.dtype)
    return (values * weights).sum(dim=(0, 2)) / weights.sum(dim=(0, 2))


def measure_probes(
    model: TransformerBridge, tokens: torch.Tensor, probes: list[RoleProbe], *, data: str
) -> RoleScores:
    """Score every head of ``model`` for every probe on ``tokens`` (one forward pass).

    Args:
        model: the model, taking ``tokens [batch, pos]`` as they are (no BOS added).
        tokens: the sequences the probes' masks refer to.
        probes: one probe per role; each needs at least one query position.
        data: a sentence naming the data (it travels into the result).
    """
    for probe in probes:
        if not bool(probe.queries.any()):
            raise IntervError(
                f"role {probe.role!r} has no query position in these {tokens.shape[0]} "
                "sequences; score it on more or longer sequences"
            )
    sites = [Site("pattern", layer) for layer in range(model.cfg.n_layers)]
    captured = forward(
        model, Prompts.of(tokens), capture=sites, readout=None, stop_after=sites[-1]
    ).captured
    per_role: dict[str, list[torch.Tensor]] = {probe.role: [] for probe in probes}
    for site in sites:
        pattern = captured[site].cpu()  # [batch, head_index, query_pos, key_pos]
        for probe in probes:
            weight = (pattern * probe.keys[:, None].to(pattern.dtype)).sum(dim=-1)
            per_role[probe.role].append(_masked_mean(weight, probe.queries))
    return RoleScores(
        scores={role: torch.stack(rows) for role, rows in per_role.items()},
        measurements={probe.role: probe.measurement for probe in probes},
        n_sequences=int(tokens.shape[0]),
        data=data,
    )


def assign_roles(scores: RoleScores, thresholds: RoleThresholds) -> tuple[HeadRole, ...]:
    """The heads whose score reaches the threshold, per role, in role then (layer, head)
    order."""
    roles = []
    for role in scores.roles:
        threshold = thresholds.of(role)
        table = scores.score(role)
        for layer, head in (table >= threshold).nonzero().tolist():
            roles.append(
                HeadRole(
                    role=role,
                    layer=layer,
                    head=head,
                    score=round(float(table[layer, head]), 4),
                    threshold=threshold,
                    measurement=f"{scores.measurements[role]}; {scores.data}",
                )
            )
    return tuple(roles)
