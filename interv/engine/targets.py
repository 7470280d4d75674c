"""Target metrics: what a causal effect is measured on, read at the answer position.

Every metric is a pure batched function of the next-token logits at each prompt's
answer position, ``[batch, d_vocab]``, returning one value per prompt, ``[batch]``.
A :class:`TargetMetric` bundles the function with its name, unit and a one-sentence
definition that travels into every result.

Available metrics (:data:`METRICS`):

- ``"target_logit"``: the target token's logit, in logits.
- ``"logit_diff"``: target logit minus foil logit, in logits (needs a foil).
- ``"log_prob"``: log-probability of the target token, in nats, range ``(-inf, 0]``.
- ``"prob"``: probability of the target token, range ``[0, 1]``.
- ``"kl_from_clean"``: ``KL(p_clean || p)`` of the full next-token distribution, in
  nats, range ``[0, inf)``; 0 on the clean run itself.

For encoders without a trained output head, :func:`mean_pooled` is the embedding-based target.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from interv.errors import IntervError

__all__ = [
    "METRICS",
    "TargetMetric",
    "get_metric",
    "kl_from_clean",
    "log_prob",
    "logit_diff",
    "mean_pooled",
    "prob",
    "target_logit",
]


def _pick(logits: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
    return logits.gather(-1, ids.unsqueeze(-1)).squeeze(-1)


def target_logit(logits: torch.Tensor, target_ids: torch.Tensor) -> torch.Tensor:
    """Logit of the target token: ``logits[b, target_ids[b]]``.

    Args:
        logits: ``[batch, d_vocab]`` next-token logits at the answer position.
        target_ids: ``[batch]`` int64 token ids.

    Returns:
        ``[batch]``, in logits (unbounded).
    """
    return _pick(logits, target_ids)


def logit_diff(
    logits: torch.Tensor, target_ids: torch.Tensor, foil_ids: torch.Tensor
) -> torch.Tensor:
    """Target logit minus foil logit, ``[batch]``, in logits (unbounded)."""
    return _pick(logits, target_ids) - _pick(logits, foil_ids)


def log_prob(logits: torch.Tensor, target_ids: torch.Tensor) -> torch.Tensor:
    """Log-probability of the target token under softmax, ``[batch]``, nats, in ``(-inf, 0]``."""
    return _pick(torch.log_softmax(logits, dim=-1), target_ids)


def prob(logits: torch.Tensor, target_ids: torch.Tensor) -> torch.Tensor:
    """Probability of the target token under softmax, ``[batch]``, in ``[0, 1]``."""
    return _pick(torch.softmax(logits, dim=-1), target_ids)


def kl_from_clean(logits: torch.Tensor, clean_logits: torch.Tensor) -> torch.Tensor:
    """``KL(p_clean || p) = sum_v p_clean(v) (log p_clean(v) - log p(v))``.

    Args:
        logits: ``[batch, d_vocab]`` logits of the run being scored.
        clean_logits: ``[batch, d_vocab]`` logits of the clean run, same prompts.

    Returns:
        ``[batch]``, in nats, in ``[0, inf)``.
    """
    return F.kl_div(
        torch.log_softmax(logits, dim=-1),
        torch.log_softmax(clean_logits, dim=-1),
        reduction="none",
        log_target=True,
    ).sum(-1)


@dataclass(frozen=True)
class TargetMetric:
    """A named target metric with its unit and definition.

    Attributes:
        name: key in :data:`METRICS`.
        unit: unit of the values (``"logits"``, ``"nats"``, ``"probability"``).
        definition: one sentence, carried into results.
        needs_foil: True when the task must provide foil ids.
        needs_clean: True when the metric compares with the clean run's logits.
        fn: the metric function; takes ``(logits, clean_logits)`` when ``needs_clean``,
            else ``(logits, target_ids)`` plus ``foil_ids`` when ``needs_foil``.
    """

    name: str
    unit: str
    definition: str
    fn: Callable[..., torch.Tensor]
    needs_foil: bool = False
    needs_clean: bool = False

    def check_foil(self, foil_ids: torch.Tensor | None) -> None:
        """Raise :class:`IntervError` if this metric needs a foil and ``foil_ids`` is None."""
        if self.needs_foil and foil_ids is None:
            raise IntervError(
                f"metric {self.name!r} needs foil ids, but the task has none; "
                f"choose a metric without a foil: "
                f"{tuple(n for n, m in METRICS.items() if not m.needs_foil)}"
            )

    def __call__(
        self,
        logits: torch.Tensor,
        target_ids: torch.Tensor,
        foil_ids: torch.Tensor | None,
        clean_logits: torch.Tensor,
    ) -> torch.Tensor:
        """Score ``logits`` ``[batch, d_vocab]`` at the answer position; returns ``[batch]``.

        ``clean_logits`` (``[batch, d_vocab]``, clean run, same prompts) is used by
        ``kl_from_clean`` only.
        """
        if self.needs_clean:
            return self.fn(logits, clean_logits)
        self.check_foil(foil_ids)
        if self.needs_foil:
            return self.fn(logits, target_ids, foil_ids)
        return self.fn(logits, target_ids)


METRICS: dict[str, TargetMetric] = {
    m.name: m
    for m in (
        TargetMetric(
            "target_logit",
            "logits",
            "logit of the target token at the answer position, in logits",
            target_logit,
        ),
        TargetMetric(
            "logit_diff",
            "logits",
            "logit difference target minus foil at the answer position, in logits",
            logit_diff,
            needs_foil=True,
        ),
        TargetMetric(
            "log_prob",
            "nats",
            "log-probability of the target token at the answer position, in nats",
            log_prob,
        ),
        TargetMetric(
            "prob",
            "probability",
            "probability of the target token at the answer position, in [0, 1]",
            prob,
        ),
        TargetMetric(
            "kl_from_clean",
            "nats",
            "KL divergence KL(p_clean || p) of the next-token distribution at the answer "
            "position from the clean run's, in nats",
            kl_from_clean,
            needs_clean=True,
        ),
    )
}
"""All target metrics by name."""


def get_metric(metric: str | TargetMetric) -> TargetMetric:
    """The :class:`TargetMetric` named ``metric`` (a TargetMetric passes through)."""
    if isinstance(metric, TargetMetric):
        return metric
    if metric not in METRICS:
        raise IntervError(f"unknown metric {metric!r}; choose one of {tuple(METRICS)}")
    return METRICS[metric]


def mean_pooled(hidden: torch.Tensor, real: torch.Tensor) -> torch.Tensor:
    """An embedding-based target: the mean of hidden states over real tokens, L2 normalized.

    The pooling of :func:`interv.models.minilm.sentence_embedding`.

    Args:
        hidden: ``[batch, pos, d_model]`` final hidden states.
        real: ``[batch, pos]`` bool, True at real tokens.

    Returns:
        ``[batch, d_model]``, unit L2 norm per row.
    """
    weights = real.to(hidden).unsqueeze(-1)
    mean = (hidden * weights).sum(dim=1) / weights.sum(dim=1)
    return torch.nn.functional.normalize(mean, dim=-1)
