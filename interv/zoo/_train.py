"""interv's own training loop for zoo models: plain AdamW on the native model, deterministic.

Determinism: the weights are initialized from the recipe's ``init_seed``, every batch
is drawn (by the recipe's task, :mod:`interv.zoo._tasks`) from one
``torch.Generator(data_seed)``, training runs on one CPU thread with
``torch.use_deterministic_algorithms(True)``; the global settings are restored after.
Two runs of the same recipe on the same machine give bit-identical weights. The loss
is next-token cross-entropy on all positions, so the model also learns what to do
where there is nothing to copy or recall: that is where the attention sink forms.
"""

from __future__ import annotations

import functools
import sys
import time
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

import torch
import torch.nn.functional as F
from safetensors.torch import save_file

from interv._outputs import claim_dir, write_file
from interv.zoo._entropy import measure_entropy_change
from interv.zoo._load import bridge_from_native, load_weights, native_model
from interv.zoo._probes import assign_roles
from interv.zoo._registry import (
    CARD_FILE,
    FINAL_WEIGHTS_FILE,
    TrainingRecipe,
    ZooCard,
    checkpoint_file,
    description,
    recipe,
)
from interv.zoo._roles import measure_roles
from interv.zoo._tasks import task_of

if TYPE_CHECKING:
    from collections.abc import Iterator

    from transformer_lens.model_bridge import TransformerBridge
    from transformer_lens.model_bridge.sources.native import NativeModel

__all__ = ["learning_rate", "measure_card", "train", "train_weights"]

PROGRESS_EVERY = 100  # optimizer steps between progress lines


@contextmanager
def _deterministic_single_thread() -> Iterator[None]:
    """Run on one CPU thread with deterministic algorithms; restore both afterwards."""
    threads = torch.get_num_threads()
    deterministic = torch.are_deterministic_algorithms_enabled()
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    try:
        yield
    finally:
        torch.set_num_threads(threads)
        torch.use_deterministic_algorithms(deterministic)


def learning_rate(training: TrainingRecipe, step: int) -> float:
    """The learning rate of optimizer step ``step`` (0-based): ``lr``, decayed linearly
    over the last ``cooldown_steps`` steps (see :class:`TrainingRecipe`)."""
    if training.cooldown_steps is None:
        return training.lr
    remaining = training.steps - step
    return training.lr * min(1.0, remaining / training.cooldown_steps)


def train_weights(
    training: TrainingRecipe,
    *,
    checkpoint_dir: Path | None = None,
    progress: bool = False,
) -> NativeModel:
    """Train a native model by ``training`` and return it (final weights).

    When ``checkpoint_dir`` is given, the weights after each of
    ``training.checkpoint_steps`` optimizer steps are saved there as safetensors.
    """
    task = task_of(training)
    with _deterministic_single_thread():
        model = native_model(training.config, seed=training.init_seed)
        optimizer = torch.optim.AdamW(
            model.parameters(), lr=training.lr, weight_decay=training.weight_decay
        )
        generator = torch.Generator().manual_seed(training.data_seed)
        started = time.perf_counter()
        for step in range(training.steps):
            if checkpoint_dir is not None and step in training.checkpoint_steps:
                save_file(model.state_dict(), checkpoint_dir / checkpoint_file(step))
            for group in optimizer.param_groups:
                group["lr"] = learning_rate(training, step)
            tokens = task.draw(training, training.batch_size, generator).tokens
            logits = model(tokens)  # [batch, pos, d_vocab]
            loss = F.cross_entropy(logits[:, :-1].flatten(0, 1), tokens[:, 1:].flatten())
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            if progress and (step + 1) % PROGRESS_EVERY == 0:
                print(
                    f"step {step + 1}/{training.steps}: loss {loss.item():.3f} nats/token "
                    "(mean over this batch's positions), "
                    f"{time.perf_counter() - started:.0f} s elapsed",
                    file=sys.stderr,
                    flush=True,
                )
    return model


def train(
    name: str, out_dir: str | Path, *, progress: bool = True, overwrite: bool = False
) -> ZooCard:
    """Train zoo model ``name`` from scratch into ``out_dir`` and return its measured card.

    Writes ``model.safetensors`` (final weights), one ``checkpoint-NNNNN.safetensors``
    per recipe checkpoint step, the tokenizer files and ``card.json`` with the accuracy
    and head roles measured on the recipe's held-out sequences.

    ``out_dir`` is claimed before training (:func:`interv._outputs.claim_dir`): new, empty,
    or holding only files interv wrote there, unchanged (``overwrite=True`` accepts other
    files and replaces those of the same names, never through a link). The files are
    written into a private staging folder and appear only when training and measuring
    succeed; a failed or killed run leaves nothing a rerun would refuse.
    """
    training = recipe(name)
    output = claim_dir(out_dir, what="output directory", by="interv zoo train", overwrite=overwrite)
    with output, output.staging() as folder:
        started = time.perf_counter()
        model = train_weights(training, checkpoint_dir=folder, progress=progress)
        wall_s = time.perf_counter() - started
        save_file(model.state_dict(), folder / FINAL_WEIGHTS_FILE)
        task_of(training).tokenizer(training).save_pretrained(folder)
        return measure_card(name, folder, training_wall_s=wall_s)


def measure_card(name: str, directory: str | Path, *, training_wall_s: float) -> ZooCard:
    """Measure the card of zoo model ``name`` from the files a training run wrote into
    ``directory`` (final weights, checkpoints, tokenizer) and write ``card.json`` there.

    Accuracy and roles are measured on the final weights, the sink score on every
    checkpoint, all on the recipe's held-out sequences; the entropy-change split when
    the recipe asks for it (``entropy_sequences``).
    """
    training = recipe(name)
    task = task_of(training)
    out = Path(directory)
    n_eval, seed = training.n_eval_sequences, training.eval_seed
    batch = task.draw(training, n_eval, torch.Generator().manual_seed(seed))
    data = task.describe(training, n_eval, seed)

    @functools.cache
    def bridge_at(weights_file: str) -> TransformerBridge:
        model = native_model(training.config)
        load_weights(model, out / weights_file)
        return bridge_from_native(model, tokenizer_dir=out, name=name)

    bridge = bridge_at(FINAL_WEIGHTS_FILE)
    scores = measure_roles(bridge, batch, data=data)

    def largest_sink(weights_file: str) -> float:
        sink = measure_roles(bridge_at(weights_file), batch, data=data).sink
        return round(float(sink.max()), 4)

    sink_mass = tuple(
        (step, largest_sink(checkpoint_file(step))) for step in training.checkpoint_steps
    )
    zoo_card = ZooCard(
        name=name,
        description=description(name),
        recipe=training,
        accuracy=task.accuracy(bridge, batch, data),
        roles=assign_roles(scores, training.thresholds),
        role_scores={
            role: tuple(tuple(round(v, 4) for v in row) for row in scores.score(role).tolist())
            for role in scores.roles
        },
        checkpoint_sink_mass=sink_mass,
        entropy_change=None
        if training.entropy_sequences is None
        else measure_entropy_change(name, training, bridge_at),
        training_wall_s=round(training_wall_s, 1),
    )
    write_file(out / CARD_FILE, zoo_card.to_json().encode("utf-8"))  # a new file only
    return zoo_card
