"""The zoo: small models that interv trains itself and ships inside the package.

Each zoo model is trained by interv's own deterministic training loop
(``interv zoo train NAME``) on a synthetic task, and ships with its final weights, a
handful of checkpoints from along the training run (to study how attention entropy
and sinks evolve), its tokenizer and a *card*: the training recipe, the measured task
accuracy and the heads that play known roles (previous-token, induction, sink), each
with the measurement that identified it.

    from interv import zoo

    zoo.available()                                    # ('induction-2l',)
    model = zoo.load("induction-2l")                   # TransformerBridge, eval mode
    early = zoo.load("induction-2l", checkpoint=200)   # weights after 200 AdamW steps
    zoo.card("induction-2l").heads_with_role("induction")   # (layer, head) pairs

Importing this package is cheap: torch and transformer-lens are imported on first use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from interv._lazy import lazy_exports

__all__ = [
    "HeadRole",
    "InductionBatch",
    "RoleScores",
    "RoleThresholds",
    "TaskAccuracy",
    "TrainingRecipe",
    "ZooCard",
    "available",
    "card",
    "checkpoints",
    "eval_batch",
    "induction_batch",
    "load",
    "measure_roles",
    "task_accuracy",
    "train",
]

# public name -> private module that owns it
_EXPORTS: dict[str, str] = {
    "HeadRole": "interv.zoo._registry",
    "RoleThresholds": "interv.zoo._registry",
    "TaskAccuracy": "interv.zoo._registry",
    "TrainingRecipe": "interv.zoo._registry",
    "ZooCard": "interv.zoo._registry",
    "available": "interv.zoo._registry",
    "card": "interv.zoo._registry",
    "checkpoints": "interv.zoo._registry",
    "InductionBatch": "interv.zoo._data",
    "induction_batch": "interv.zoo._data",
    "RoleScores": "interv.zoo._roles",
    "eval_batch": "interv.zoo._roles",
    "measure_roles": "interv.zoo._roles",
    "task_accuracy": "interv.zoo._roles",
    "load": "interv.zoo._load",
    "train": "interv.zoo._train",
}


__getattr__, __dir__ = lazy_exports("interv.zoo", _EXPORTS, globals())


if TYPE_CHECKING:  # pragma: no cover - static analysers see the real names
    from interv.zoo._data import InductionBatch, induction_batch
    from interv.zoo._load import load
    from interv.zoo._registry import (
        HeadRole,
        RoleThresholds,
        TaskAccuracy,
        TrainingRecipe,
        ZooCard,
        available,
        card,
        checkpoints,
    )
    from interv.zoo._roles import RoleScores, eval_batch, measure_roles, task_accuracy
    from interv.zoo._train import train
