"""The zoo: small models that interv trains itself and ships inside the package.

Each zoo model is trained by interv's own deterministic training loop
(``interv zoo train NAME``) on a synthetic task, and ships with its final weights,
checkpoints from along the training run (to study how attention entropy and sinks
evolve), its tokenizer and a *card*: the training recipe, the measured task accuracy
and the heads that play known roles (previous-token, induction, duplicate-token, sink),
each with the measurement that identified it.

- ``induction-2l``: attention-only, induction on repeated random symbols;
- ``sink-lm-3l``: with MLPs, the backcopy language (:mod:`interv.zoo._backcopy`), whose
  heads are useful only at rare trigger tokens and grow strong sinks on ``<bos>``; its
  card also splits the entropy collapse of training into sink and content parts.

    from interv import zoo

    zoo.available()                                    # ('induction-2l', 'sink-lm-3l')
    model = zoo.load("induction-2l")                   # TransformerBridge, eval mode
    early = zoo.load("induction-2l", checkpoint=200)   # weights after 200 AdamW steps
    zoo.card("induction-2l").heads_with_role("induction")   # (layer, head) pairs
    batch = zoo.held_out_batch("sink-lm-3l", n_sequences=64)   # the card's eval seed
    zoo.measure_roles(zoo.load("sink-lm-3l"), batch, data="64 held-out").sink  # [layer, head]

Importing this package is cheap: torch and transformer-lens are imported on first use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from interv._lazy import lazy_exports

# public name -> private module that owns it
_EXPORTS: dict[str, str] = {
    "BackcopyAccuracy": "interv.zoo._registry",
    "EntropyChangeRecord": "interv.zoo._registry",
    "EntropySplit": "interv.zoo._registry",
    "HeadRole": "interv.zoo._registry",
    "HeadSplit": "interv.zoo._registry",
    "RoleThresholds": "interv.zoo._registry",
    "TaskAccuracy": "interv.zoo._registry",
    "TrainingRecipe": "interv.zoo._registry",
    "ZooCard": "interv.zoo._registry",
    "available": "interv.zoo._registry",
    "card": "interv.zoo._registry",
    "checkpoints": "interv.zoo._registry",
    "BackcopyBatch": "interv.zoo._backcopy",
    "BackcopyLanguage": "interv.zoo._backcopy",
    "backcopy_batch": "interv.zoo._backcopy",
    "next_token_accuracy": "interv.zoo._backcopy_roles",
    "InductionBatch": "interv.zoo._data",
    "induction_batch": "interv.zoo._data",
    "RoleScores": "interv.zoo._probes",
    "eval_batch": "interv.zoo._roles",
    "measure_roles": "interv.zoo._roles",
    "task_accuracy": "interv.zoo._roles",
    "held_out_batch": "interv.zoo._tasks",
    "checkpoint_entropy_change": "interv.zoo._entropy",
    "load": "interv.zoo._load",
    "train": "interv.zoo._train",
}


__all__ = sorted(_EXPORTS)

__getattr__, __dir__ = lazy_exports("interv.zoo", _EXPORTS, globals())


if TYPE_CHECKING:  # pragma: no cover - static analysers see the real names
    from interv.zoo._backcopy import BackcopyBatch, BackcopyLanguage, backcopy_batch
    from interv.zoo._backcopy_roles import next_token_accuracy
    from interv.zoo._data import InductionBatch, induction_batch
    from interv.zoo._entropy import checkpoint_entropy_change
    from interv.zoo._load import load
    from interv.zoo._probes import RoleScores
    from interv.zoo._registry import (
        BackcopyAccuracy,
        EntropyChangeRecord,
        EntropySplit,
        HeadRole,
        HeadSplit,
        RoleThresholds,
        TaskAccuracy,
        TrainingRecipe,
        ZooCard,
        available,
        card,
        checkpoints,
    )
    from interv.zoo._roles import eval_batch, measure_roles, task_accuracy
    from interv.zoo._tasks import held_out_batch
    from interv.zoo._train import train
