"""The zoo's catalogue: recipes of the models interv trains, and their measured cards.

A *recipe* (:class:`TrainingRecipe`) is everything needed to train a zoo model from
scratch, deterministically, including its data: induction sequences
(``min_prefix``, :mod:`interv.zoo._data`) or the backcopy language (``backcopy``,
:mod:`interv.zoo._backcopy`); exactly one is set and names the recipe's *task*. A
*card* (:class:`ZooCard`) is what a finished training run measured: task accuracy, the
heads that play known roles (each with the measurement that identified it), the sink
along the checkpoints and, where measured, the entropy change split into sink and
content parts. Cards are shipped as ``data/<name>/card.json`` next to the weights;
fields that are None are left out of the file. Nothing here imports torch.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from interv.errors import IntervError
from interv.zoo._backcopy import BackcopyLanguage

__all__ = [
    "RECIPES",
    "BackcopyAccuracy",
    "EntropyChangeRecord",
    "EntropySplit",
    "HeadRole",
    "HeadSplit",
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


@dataclass(frozen=True, kw_only=True)
class RoleThresholds:
    """A head plays a role when its role score (mean attention weight, 0..1) is at least
    the threshold. Roles a recipe's task does not score are None.

    Roles: ``previous_token`` (attends to the previous token), ``induction`` (to the
    token after the current token's earlier occurrence), ``duplicate_token`` (to the
    current token's earlier occurrences), ``sink`` (to ``<bos>``).
    """

    previous_token: float | None = None
    induction: float | None = None
    duplicate_token: float | None = None
    sink: float | None = None

    def of(self, role: str) -> float:
        """The threshold of ``role``; raises :class:`IntervError` if it has none."""
        thresholds = asdict(self)
        if thresholds.get(role) is None:
            scored = [name for name, value in thresholds.items() if value is not None]
            raise IntervError(f"no threshold for role {role!r}; thresholds: {', '.join(scored)}")
        return thresholds[role]


@dataclass(frozen=True, kw_only=True)
class TrainingRecipe:
    """How a zoo model is trained: architecture, data, optimizer, seeds, measurements.

    Attributes:
        config: keyword arguments of transformer-lens's ``TransformerBridgeConfig``.
        init_seed: seed of the weight initialization.
        data_seed: seed of the ``torch.Generator`` that draws the training batches.
        steps: number of AdamW steps; ``lr``, ``weight_decay``, ``batch_size`` (sequences
            per step) set the optimizer.
        cooldown_steps: the last ``cooldown_steps`` steps decay the learning rate
            linearly from ``lr`` towards 0 (step ``steps - k`` uses ``lr * k /
            cooldown_steps``); None = a constant ``lr`` throughout.
        min_prefix: induction data (``interv.zoo._data``): smallest period ``m``.
        backcopy: backcopy-language data (``interv.zoo._backcopy``): its parameters.
            Exactly one of ``min_prefix`` and ``backcopy`` is set; sequences fill
            ``config["n_ctx"]`` tokens.
        checkpoint_steps: steps after which weights are saved along the run.
        eval_seed: seed of the held-out sequences the card's numbers are measured on.
        n_eval_sequences: number of held-out sequences.
        thresholds: role thresholds the card's roles are decided with.
        entropy_sequences: held-out sequences the card's entropy-change split is
            measured on; None = not measured.
    """

    config: dict[str, Any]
    init_seed: int
    data_seed: int
    steps: int
    lr: float
    weight_decay: float
    batch_size: int
    cooldown_steps: int | None = None
    min_prefix: int | None = None
    backcopy: BackcopyLanguage | None = None
    checkpoint_steps: tuple[int, ...]
    eval_seed: int
    n_eval_sequences: int
    thresholds: RoleThresholds
    entropy_sequences: int | None = None

    def __post_init__(self) -> None:
        if self.cooldown_steps is not None and not 1 <= self.cooldown_steps <= self.steps:
            raise IntervError(
                f"cooldown_steps must be None or in 1..steps ({self.steps}); got "
                f"{self.cooldown_steps!r}"
            )
        data = {"min_prefix": self.min_prefix, "backcopy": self.backcopy}
        given = [name for name, value in data.items() if value is not None]
        if len(given) != 1:
            raise IntervError(
                f"a recipe needs exactly one data field of {list(data)}; got {given or 'none'}"
            )
        if self.backcopy is not None and self.config.get("d_vocab") != self.backcopy.d_vocab:
            raise IntervError(
                f"config d_vocab must be the backcopy vocabulary size {self.backcopy.d_vocab}; "
                f"got {self.config.get('d_vocab')!r}"
            )

    @property
    def task(self) -> str:
        """The kind of data: ``"induction"`` or ``"backcopy"`` (see ``interv.zoo._tasks``)."""
        return "induction" if self.min_prefix is not None else "backcopy"


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
class BackcopyAccuracy:
    """Next-token loss and top-1 accuracy (fractions 0..1) on held-out backcopy text.

    Attributes:
        loss: mean next-token cross-entropy over every position (nats/token).
        optimal_loss: the same for the language's own next-token distribution, the
            lowest achievable loss on this data (nats/token).
        copy: accuracy after copy triggers (answer: the token before the trigger).
        recall: accuracy after a repeated ``#`` (answer: the word bound by the first).
        word: accuracy after words (answer: a bigram draw or a trigger).
        word_optimal: the same for the language's most likely next token, the highest
            achievable accuracy after words.
        n_copy, n_recall, n_word: number of scored positions behind each number.
        measurement: one sentence on the data and the scoring.
    """

    loss: float
    optimal_loss: float
    copy: float
    recall: float
    word: float
    word_optimal: float
    n_copy: int
    n_recall: int
    n_word: int
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


def _share(sink_part: float, total: float, share_atol: float = 1e-3) -> float:
    """``sink_part / total``; NaN where ``|total| < share_atol`` (as
    ``interv.analysis.EntropyAttribution`` defines it)."""
    return sink_part / total if abs(total) >= share_atol else float("nan")


@dataclass(frozen=True)
class EntropySplit:
    """Entropy change from one training step to a later one, mean over all heads.

    ``total = sink_part + content_part`` (nats, after minus before) is the exact split
    of ``interv.entropy_change_attribution``; ``sink_mass_before`` / ``_after`` are the
    mean sink mass (fraction of a row's attention on ``<bos>``).
    """

    before: int
    after: int
    total: float
    sink_part: float
    content_part: float
    sink_mass_before: float
    sink_mass_after: float

    @property
    def sink_share(self) -> float:
        """``sink_part / total`` (fraction; NaN if ``|total| < 1e-3`` nats)."""
        return _share(self.sink_part, self.total)


@dataclass(frozen=True)
class HeadSplit:
    """One head's entropy change between two steps, split as :class:`EntropySplit`."""

    layer: int
    head: int
    total: float
    sink_part: float
    content_part: float
    sink_mass_before: float
    sink_mass_after: float

    @property
    def label(self) -> str:
        """``"L{layer}H{head}"``."""
        return f"L{self.layer}H{self.head}"

    @property
    def sink_share(self) -> float:
        """``sink_part / total`` (fraction; NaN if ``|total| < 1e-3`` nats)."""
        return _share(self.sink_part, self.total)


@dataclass(frozen=True)
class EntropyChangeRecord:
    """How much of the training run's entropy collapse is sink growth, as measured.

    Attributes:
        n_sequences: held-out sequences (the recipe's eval seed) the rows come from.
        measurement: the data, query rule, aggregation, mode and unit (nats).
        along: the change from the first checkpoint to every later checkpoint and to
            the final weights (``after == recipe.steps``), mean over heads.
        heads: every head's change from the first checkpoint to the final weights.
    """

    n_sequences: int
    measurement: str
    along: tuple[EntropySplit, ...]
    heads: tuple[HeadSplit, ...]

    @property
    def overall(self) -> EntropySplit:
        """The change from the first checkpoint to the final weights."""
        return self.along[-1]


@dataclass(frozen=True, kw_only=True)
class ZooCard:
    """The measured metadata of a zoo model.

    Attributes:
        name: the zoo name (``interv.zoo.load(name)``).
        description: what the model is and what it was trained on.
        recipe: the training recipe (seeds, steps, lr, data) that produced it.
        accuracy: task accuracy of the final weights, with how it was measured
            (:class:`TaskAccuracy` for induction data, :class:`BackcopyAccuracy` for
            backcopy data).
        roles: heads that pass a role threshold at the final weights.
        role_scores: role -> ``[n_layers][n_heads]`` scores of every head (final weights).
        checkpoint_sink_mass: ``(step, score)`` pairs: the largest sink score over all
            heads at each shipped checkpoint (mean attention weight on ``<bos>``, 0..1).
        entropy_change: the entropy collapse along training split into sink and content
            parts, when the recipe measures it (``entropy_sequences``), else None.
        training_wall_s: wall-clock seconds the training run took (informative only).
    """

    name: str
    description: str
    recipe: TrainingRecipe
    accuracy: TaskAccuracy | BackcopyAccuracy
    roles: tuple[HeadRole, ...]
    role_scores: dict[str, tuple[tuple[float, ...], ...]]
    checkpoint_sink_mass: tuple[tuple[int, float], ...]
    entropy_change: EntropyChangeRecord | None = None
    training_wall_s: float

    @property
    def checkpoints(self) -> tuple[int, ...]:
        """Training steps of the shipped checkpoints, ascending."""
        return tuple(step for step, _ in self.checkpoint_sink_mass)

    def heads_with_role(self, role: str) -> tuple[tuple[int, int], ...]:
        """``(layer, head)`` of every head with ``role``, in (layer, head) order."""
        return tuple((r.layer, r.head) for r in self.roles if r.role == role)

    def to_json(self) -> str:
        """The card as indented JSON (the format of ``card.json``); None fields are left
        out."""
        return json.dumps(_without_none(asdict(self)), indent=2) + "\n"

    @classmethod
    def from_json(cls, text: str) -> ZooCard:
        """Parse a card written by :meth:`to_json`."""
        raw = json.loads(text)
        recipe_raw = raw["recipe"]
        recipe_raw["thresholds"] = RoleThresholds(**recipe_raw["thresholds"])
        recipe_raw["checkpoint_steps"] = tuple(recipe_raw["checkpoint_steps"])
        if "backcopy" in recipe_raw:
            recipe_raw["backcopy"] = BackcopyLanguage(**recipe_raw["backcopy"])
        recipe = TrainingRecipe(**recipe_raw)
        accuracy_type = TaskAccuracy if recipe.task == "induction" else BackcopyAccuracy
        entropy_raw = raw.get("entropy_change")
        return cls(
            name=raw["name"],
            description=raw["description"],
            recipe=recipe,
            accuracy=accuracy_type(**raw["accuracy"]),
            roles=tuple(HeadRole(**r) for r in raw["roles"]),
            role_scores={
                role: tuple(tuple(row) for row in table)
                for role, table in raw["role_scores"].items()
            },
            checkpoint_sink_mass=tuple((int(s), float(v)) for s, v in raw["checkpoint_sink_mass"]),
            entropy_change=None
            if entropy_raw is None
            else EntropyChangeRecord(
                n_sequences=entropy_raw["n_sequences"],
                measurement=entropy_raw["measurement"],
                along=tuple(EntropySplit(**split) for split in entropy_raw["along"]),
                heads=tuple(HeadSplit(**split) for split in entropy_raw["heads"]),
            ),
            training_wall_s=float(raw["training_wall_s"]),
        )


def _without_none(value: Any) -> Any:
    """``value`` (nested dicts and lists) with every dict entry whose value is None left
    out."""
    if isinstance(value, dict):
        return {key: _without_none(item) for key, item in value.items() if item is not None}
    if isinstance(value, list | tuple):
        return [_without_none(item) for item in value]
    return value


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
    "sink-lm-3l": (
        "3-layer transformer with MLPs (d_model 64, 4 heads of d_head 16, d_mlp 256, GELU, "
        "LayerNorm, learned positions, n_ctx 64, 53-token word-level vocabulary) trained on "
        "the backcopy language: a seeded bigram language over 48 words in which rare copy "
        "triggers (~ *) repeat the word before them and a recall trigger (#) repeats the "
        "word bound by its first occurrence; <bos> first, loss on all positions. Heads "
        "are useful only at the triggers and park their attention on <bos> elsewhere: "
        "strong attention sinks that grow during training. The card splits the entropy "
        "collapse of training into sink growth and content sharpening.",
        TrainingRecipe(
            config={
                "d_model": 64,
                "d_head": 16,
                "n_layers": 3,
                "n_heads": 4,
                "d_mlp": 256,
                "act_fn": "gelu",
                "n_ctx": 64,
                "d_vocab": 53,
                "attn_only": False,
                "normalization_type": "LN",
            },
            init_seed=0,
            data_seed=1,
            steps=1800,
            lr=1e-2,
            weight_decay=0.1,
            batch_size=32,
            cooldown_steps=300,
            backcopy=BackcopyLanguage(
                n_words=48, successors=4, p_copy=0.1, p_recall=0.05, table_seed=0
            ),
            checkpoint_steps=(0, 100, 200, 400, 600, 800, 1000, 1200, 1500),
            eval_seed=12345,
            n_eval_sequences=512,
            thresholds=RoleThresholds(previous_token=0.5, duplicate_token=0.5, sink=0.5),
            entropy_sequences=32,
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
