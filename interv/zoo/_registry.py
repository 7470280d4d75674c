"""The zoo's catalogue: recipes of the models interv trains, and their measured cards.

A *recipe* (:class:`TrainingRecipe`) is everything needed to train a zoo model from
scratch, deterministically. A *card* (:class:`ZooCard`) is what a finished training run
measured: task accuracy and the heads that play known roles, each with the measurement
that identified it. Cards are shipped as ``data/<name>/card.json`` next to the weights.
Nothing here imports torch.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from interv.errors import IntervError

__all__ = [
    "RECIPES",
    "HeadRole",
    "RoleThresholds",
    "TaskAccuracy",
    "TrainingRecipe",
    "ZooCard",
    "available",
    "card",
    "checkpoints",
    "data_dir",
    "recipe",
]

DATA_ROOT = Path(__file__).parent / "data"
CARD_FILE = "card.json"
FINAL_WEIGHTS_FILE = "model.safetensors"


def checkpoint_file(step: int) -> str:
    """File name of the checkpoint saved after ``step`` optimizer steps."""
    return f"checkpoint-{step:05d}.safetensors"


@dataclass(frozen=True)
class RoleThresholds:
    """A head plays a role when its role score (mean attention weight, 0..1) is at least
    the threshold."""

    previous_token: float
    induction: float
    sink: float


@dataclass(frozen=True)
class TrainingRecipe:
    """How a zoo model is trained: architecture, data, optimizer, seeds, measurements.

    Attributes:
        config: keyword arguments of transformer-lens's ``TransformerBridgeConfig``.
        init_seed: seed of the weight initialization.
        data_seed: seed of the ``torch.Generator`` that draws the training batches.
        steps: number of AdamW steps; ``lr`` (constant), ``weight_decay``, ``batch_size``
            (sequences per step) set the optimizer.
        min_prefix: smallest period ``m`` of the induction data (see
            ``interv.zoo._data``); sequences fill ``config["n_ctx"]`` tokens.
        checkpoint_steps: steps after which weights are saved along the run.
        eval_seed: seed of the held-out sequences the card's numbers are measured on.
        n_eval_sequences: number of held-out sequences.
        thresholds: role thresholds the card's roles are decided with.
    """

    config: dict[str, Any]
    init_seed: int
    data_seed: int
    steps: int
    lr: float
    weight_decay: float
    batch_size: int
    min_prefix: int
    checkpoint_steps: tuple[int, ...]
    eval_seed: int
    n_eval_sequences: int
    thresholds: RoleThresholds


@dataclass(frozen=True)
class TaskAccuracy:
    """Top-1 next-token accuracy (fraction 0..1) measured on held-out induction data.

    Attributes:
        repeated: accuracy at *determined* copy positions (the next token is fixed by
            the token's unique earlier occurrence).
        fresh: accuracy at prefix positions (the next token is a fresh uniform draw),
            the chance reference (1/62 = 0.016).
        n_repeated, n_fresh: number of scored positions behind each number.
        measurement: one sentence on the data and the scoring.
    """

    repeated: float
    fresh: float
    n_repeated: int
    n_fresh: int
    measurement: str


@dataclass(frozen=True)
class HeadRole:
    """One head that plays a known role, with the measurement that identified it.

    Attributes:
        role: ``"previous_token"``, ``"induction"`` or ``"sink"``.
        layer, head: the head (``blocks.{layer}.attn``, head index ``head``).
        score: its role score, mean attention weight (0..1).
        threshold: the score a head needed to get the role.
        measurement: the score's definition and the data it was measured on.
    """

    role: str
    layer: int
    head: int
    score: float
    threshold: float
    measurement: str

    @property
    def label(self) -> str:
        """``"L{layer}H{head}"``."""
        return f"L{self.layer}H{self.head}"


@dataclass(frozen=True)
class ZooCard:
    """The measured metadata of a zoo model.

    Attributes:
        name: the zoo name (``interv.zoo.load(name)``).
        description: what the model is and what it was trained on.
        recipe: the training recipe (seeds, steps, lr, data) that produced it.
        accuracy: task accuracy of the final weights, with how it was measured.
        roles: heads that pass a role threshold at the final weights.
        role_scores: role -> ``[n_layers][n_heads]`` scores of every head (final weights).
        checkpoint_sink_mass: ``(step, score)`` pairs: the largest sink score over all
            heads at each shipped checkpoint (mean attention weight on ``<bos>``, 0..1).
        training_wall_s: wall-clock seconds the training run took (informative only).
    """

    name: str
    description: str
    recipe: TrainingRecipe
    accuracy: TaskAccuracy
    roles: tuple[HeadRole, ...]
    role_scores: dict[str, tuple[tuple[float, ...], ...]]
    checkpoint_sink_mass: tuple[tuple[int, float], ...]
    training_wall_s: float

    @property
    def checkpoints(self) -> tuple[int, ...]:
        """Training steps of the shipped checkpoints, ascending."""
        return tuple(step for step, _ in self.checkpoint_sink_mass)

    def heads_with_role(self, role: str) -> tuple[tuple[int, int], ...]:
        """``(layer, head)`` of every head with ``role``, in (layer, head) order."""
        return tuple((r.layer, r.head) for r in self.roles if r.role == role)

    def to_json(self) -> str:
        """The card as indented JSON (the format of ``card.json``)."""
        return json.dumps(asdict(self), indent=2) + "\n"

    @classmethod
    def from_json(cls, text: str) -> ZooCard:
        """Parse a card written by :meth:`to_json`."""
        raw = json.loads(text)
        recipe_raw = raw["recipe"]
        recipe_raw["thresholds"] = RoleThresholds(**recipe_raw["thresholds"])
        recipe_raw["checkpoint_steps"] = tuple(recipe_raw["checkpoint_steps"])
        return cls(
            name=raw["name"],
            description=raw["description"],
            recipe=TrainingRecipe(**recipe_raw),
            accuracy=TaskAccuracy(**raw["accuracy"]),
            roles=tuple(HeadRole(**r) for r in raw["roles"]),
            role_scores={
                role: tuple(tuple(row) for row in table)
                for role, table in raw["role_scores"].items()
            },
            checkpoint_sink_mass=tuple((int(s), float(v)) for s, v in raw["checkpoint_sink_mass"]),
            training_wall_s=float(raw["training_wall_s"]),
        )


RECIPES: dict[str, tuple[str, TrainingRecipe]] = {
    "induction-2l": (
        "2-layer attention-only transformer (d_model 64, 4 heads of d_head 16, LayerNorm, "
        "learned positions, n_ctx 48, 64-token word-level vocabulary) trained on repeated "
        "random symbol sequences with a random repeat offset (period 6..23) and a <bos> "
        "token, loss on all positions. Meant to form previous-token and induction "
        "heads and an attention sink on <bos>; the card lists the heads measured.",
        TrainingRecipe(
            config={
                "d_model": 64,
                "d_head": 16,
                "n_layers": 2,
                "n_heads": 4,
                "n_ctx": 48,
                "d_vocab": 64,
                "attn_only": True,
                "normalization_type": "LN",
            },
            init_seed=0,
            data_seed=1,
            steps=1600,
            lr=3e-3,
            weight_decay=0.01,
            batch_size=64,
            min_prefix=6,
            checkpoint_steps=(0, 50, 100, 200, 400, 800),
            eval_seed=12345,
            n_eval_sequences=1024,
            thresholds=RoleThresholds(previous_token=0.5, induction=0.4, sink=0.4),
        ),
    ),
}


def available() -> tuple[str, ...]:
    """Names of the zoo models, sorted."""
    return tuple(sorted(RECIPES))


def _check_name(name: str) -> None:
    if name not in RECIPES:
        raise IntervError(f"unknown zoo model {name!r}; available: {', '.join(available())}")


def recipe(name: str) -> TrainingRecipe:
    """The training recipe of zoo model ``name``."""
    _check_name(name)
    return RECIPES[name][1]


def description(name: str) -> str:
    """One-paragraph description of zoo model ``name``."""
    _check_name(name)
    return RECIPES[name][0]


def data_dir(name: str) -> Path:
    """The shipped directory of zoo model ``name`` (weights, checkpoints, card, tokenizer)."""
    _check_name(name)
    return DATA_ROOT / name


def card(name: str) -> ZooCard:
    """The measured card shipped with zoo model ``name``."""
    path = data_dir(name) / CARD_FILE
    if not path.is_file():
        raise IntervError(
            f"zoo model {name!r} has no shipped card at {path}; train it with "
            f"`interv zoo train {name}`"
        )
    return ZooCard.from_json(path.read_text())


def checkpoints(name: str) -> tuple[int, ...]:
    """Training steps of the shipped checkpoints of zoo model ``name``, ascending."""
    return card(name).checkpoints
