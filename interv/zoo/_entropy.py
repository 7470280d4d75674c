"""The entropy collapse of a zoo training run, split into sink growth and content sharpening.

:func:`checkpoint_entropy_change` compares two shipped checkpoints of a zoo model on the same
held-out sequences. For a card: every head's attention rows on the recipe's
``entropy_sequences`` (drawn with its ``eval_seed``) at the first checkpoint, at every
later checkpoint and at the final weights, compared with
:func:`interv.analysis.entropy_change_attribution` in paired mode: the numbers of
``checkpoint_entropy_change(name, before=first, after=step, n_sequences=entropy_sequences)``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import torch

from interv.analysis._patterns import attention_rows
from interv.analysis.entropy_change import EntropyAttribution, entropy_change_attribution
from interv.zoo._load import load
from interv.zoo._registry import (
    FINAL_WEIGHTS_FILE,
    EntropyChangeRecord,
    EntropySplit,
    HeadSplit,
    TrainingRecipe,
    checkpoint_file,
)
from interv.zoo._tasks import held_out_batch, task_of

if TYPE_CHECKING:
    from transformer_lens.model_bridge import TransformerBridge

__all__ = ["checkpoint_entropy_change", "measure_entropy_change"]

DIGITS = 6  # decimals kept in the card (nats)


def measure_entropy_change(
    name: str, training: TrainingRecipe, bridge_at: Callable[[str], TransformerBridge]
) -> EntropyChangeRecord:
    """Split the entropy change from the first checkpoint to every later checkpoint and
    to the final weights of zoo model ``name``.

    Args:
        name: the zoo name (labels the conditions as ``checkpoint_entropy_change`` does).
        training: its recipe, with ``entropy_sequences`` set.
        bridge_at: weights file name -> the model with those weights.
    """
    task = task_of(training)
    n_sequences, seed = training.entropy_sequences, training.eval_seed
    tokens = task.draw(training, n_sequences, torch.Generator().manual_seed(seed)).tokens
    first, *later = training.checkpoint_steps
    before = attention_rows(bridge_at(checkpoint_file(first)), tokens)
    along = []
    for step in [*later, None]:
        weights = FINAL_WEIGHTS_FILE if step is None else checkpoint_file(step)
        result = entropy_change_attribution(
            before,
            attention_rows(bridge_at(weights), tokens),
            before_label=f"{name} step {first}",
            after_label=f"{name} {'final weights' if step is None else f'step {step}'}",
        )
        overall = result.overall
        along.append(
            EntropySplit(
                before=first,
                after=training.steps if step is None else step,
                total=round(overall["total"], DIGITS),
                sink_part=round(overall["sink_part"], DIGITS),
                content_part=round(overall["content_part"], DIGITS),
                sink_mass_before=round(float(result.sink_mass_before.mean()), DIGITS),
                sink_mass_after=round(float(result.sink_mass_after.mean()), DIGITS),
            )
        )
    n_layers, n_heads = result.total.shape
    heads = tuple(
        HeadSplit(
            layer=layer,
            head=head,
            **{
                field: round(float(getattr(result, field)[layer, head]), DIGITS)
                for field in (
                    "total",
                    "sink_part",
                    "content_part",
                    "sink_mass_before",
                    "sink_mass_after",
                )
            },
        )
        for layer in range(n_layers)
        for head in range(n_heads)
    )
    return EntropyChangeRecord(
        n_sequences=n_sequences,
        measurement=(
            f"{task.describe(training, n_sequences, seed)}; {result.scope}; 'along' compares "
            f"step {first} with every later checkpoint on the same rows; overall = mean over "
            "heads"
        ),
        along=tuple(along),
        heads=heads,
    )


def checkpoint_entropy_change(
    name: str,
    *,
    before: int,
    after: int | None = None,
    n_sequences: int = 16,
    unit: str = "nats",
    share_atol: float = 1e-3,
) -> EntropyAttribution:
    """Entropy-change attribution between two training checkpoints of a zoo model.

    Both checkpoints read the same held-out sequences of the model's task:
    ``interv.zoo.held_out_batch(name, n_sequences=n_sequences)``, drawn with the recipe's
    ``eval_seed``, so the attribution runs in paired mode.

    Args:
        name: a zoo model (see ``interv.zoo.available()``).
        before: training step of the earlier checkpoint (``interv.zoo.checkpoints(name)``).
        after: training step of the later checkpoint; None = the final weights.
        n_sequences: held-out sequences (prompts), each ``n_ctx`` tokens long.
        unit: ``"nats"`` or ``"bits"``.
        share_atol: ``|total|`` below which the sink share is NaN.

    Returns:
        The paired :class:`EntropyAttribution` from step ``before`` to ``after``.
    """
    batch = held_out_batch(name, n_sequences=n_sequences)
    rows = [attention_rows(load(name, checkpoint=step), batch.tokens) for step in (before, after)]
    return entropy_change_attribution(
        *rows,
        unit=unit,
        share_atol=share_atol,
        before_label=f"{name} step {before}",
        after_label=f"{name} {'final weights' if after is None else f'step {after}'}",
    )
