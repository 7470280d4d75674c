"""What each kind of zoo data needs: tokenizer, sequences, and the card's measurements.

A recipe's data field names its task (:attr:`TrainingRecipe.task`). A :class:`ZooTask`
bundles the task-specific parts that the shared training loop and card measurement
call: the tokenizer, a draw of sequences from a ``torch.Generator``, the sentence naming
held-out data and the accuracy (head roles are measured by
:func:`interv.zoo.measure_roles`, which reads the task from the batch). Training batches
are ``draw(recipe, batch_size, torch.Generator(data_seed))`` step after step; held-out
data is one ``draw`` from ``torch.Generator(seed)``.

    batch = zoo.held_out_batch("induction-2l", n_sequences=64)   # the card's eval seed
    batch.tokens                                                   # [64, n_ctx] int64
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch

from interv.errors import IntervError
from interv.zoo import _backcopy, _backcopy_roles, _data, _roles
from interv.zoo._registry import TrainingRecipe, recipe

if TYPE_CHECKING:
    from transformer_lens.model_bridge import TransformerBridge
    from transformers import PreTrainedTokenizerFast

    from interv.zoo._backcopy import BackcopyBatch
    from interv.zoo._data import InductionBatch
    from interv.zoo._registry import BackcopyAccuracy, TaskAccuracy

__all__ = ["TASKS", "ZooTask", "held_out_batch", "task_of"]


@dataclass(frozen=True)
class ZooTask:
    """The task-specific parts of a zoo model (see the module docstring).

    Attributes:
        tokenizer: ``recipe -> PreTrainedTokenizerFast``.
        draw: ``(recipe, n_sequences, generator) -> batch`` of ``config["n_ctx"]`` tokens
            (``batch.tokens`` is ``[n_sequences, n_ctx]`` int64, ``<bos>`` first).
        describe: ``(recipe, n_sequences, seed) -> str``, the sentence naming held-out data.
        accuracy: ``(model, batch, data) ->`` the card's accuracy value.
    """

    tokenizer: Callable[[TrainingRecipe], PreTrainedTokenizerFast]
    draw: Callable[[TrainingRecipe, int, torch.Generator], Any]
    describe: Callable[[TrainingRecipe, int, int], str]
    accuracy: Callable[[TransformerBridge, Any, str], TaskAccuracy | BackcopyAccuracy]


def _draw_induction(training: TrainingRecipe, n_sequences: int, generator: torch.Generator):
    n_ctx = training.config["n_ctx"]
    return _data.induction_batch(
        n_sequences, n_ctx, min_prefix=training.min_prefix, generator=generator
    )


def _describe_induction(training: TrainingRecipe, n_sequences: int, seed: int) -> str:
    n_ctx = training.config["n_ctx"]
    return (
        f"{n_sequences} held-out induction sequences of {n_ctx} tokens, period "
        f"{training.min_prefix}..{(n_ctx - 1) // 2} (torch.Generator seed {seed})"
    )


def _draw_backcopy(training: TrainingRecipe, n_sequences: int, generator: torch.Generator):
    n_ctx = training.config["n_ctx"]
    return _backcopy.backcopy_batch(training.backcopy, n_sequences, n_ctx, generator=generator)


def _describe_backcopy(training: TrainingRecipe, n_sequences: int, seed: int) -> str:
    language = training.backcopy
    return (
        f"{n_sequences} held-out backcopy sequences of {training.config['n_ctx']} tokens "
        f"({language.n_words} words, {language.successors} successors each, p_copy "
        f"{language.p_copy}, p_recall {language.p_recall}, table seed {language.table_seed}; "
        f"torch.Generator seed {seed})"
    )


TASKS: dict[str, ZooTask] = {  # TrainingRecipe.task -> its parts
    "induction": ZooTask(
        tokenizer=lambda training: _data.build_tokenizer(),
        draw=_draw_induction,
        describe=_describe_induction,
        accuracy=lambda model, batch, data: _roles.task_accuracy(model, batch, data=data),
    ),
    "backcopy": ZooTask(
        tokenizer=lambda training: _backcopy.build_tokenizer(training.backcopy),
        draw=_draw_backcopy,
        describe=_describe_backcopy,
        accuracy=lambda model, batch, data: _backcopy_roles.next_token_accuracy(
            model, batch, data=data
        ),
    ),
}


def task_of(training: TrainingRecipe) -> ZooTask:
    """The :class:`ZooTask` of ``training``'s data."""
    return TASKS[training.task]


def held_out_batch(
    name: str, *, n_sequences: int, seed: int | None = None
) -> InductionBatch | BackcopyBatch:
    """Held-out sequences of zoo model ``name``'s task: ``n_sequences`` drawn from
    ``torch.Generator(seed)``; ``seed=None`` uses the recipe's ``eval_seed`` (the data of
    the card's numbers, when ``n_sequences`` matches)."""
    if isinstance(n_sequences, bool) or not isinstance(n_sequences, int) or n_sequences < 1:
        raise IntervError(f"n_sequences must be an int >= 1; got {n_sequences!r}")
    training = recipe(name)
    generator = torch.Generator().manual_seed(training.eval_seed if seed is None else seed)
    return task_of(training).draw(training, n_sequences, generator)
