"""What a pruning curve measures: a task metric, a language-model loss, an embedding.

Each evaluation maps sets of mean-ablated heads to one number per set (an empty set
gives the unablated value), in its stated unit, and states the semantics of its
ablation in one sentence. That number is a mean over *items* (prompts, text chunks or
sentences, :attr:`items`), and :meth:`item_values` gives every item's own number, for
intervals over items. All three run through the engine (:mod:`interv.engine.stacking`):
a set is one :class:`~interv.engine.interventions.Combined` of
:class:`~interv.engine.interventions.MeanAblation` parts, and the sets share stacked
forwards that start at their earliest ablated block.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from importlib import resources
from typing import TYPE_CHECKING, Any

import torch

from interv.engine.forward import Prompts
from interv.engine.interventions import Combined, MeanAblation
from interv.engine.runner import run
from interv.engine.stacking import capture_base_runs, intervened_readouts, planned_reads
from interv.engine.targets import METRICS as TARGET_METRICS
from interv.engine.targets import mean_pooled
from interv.errors import IntervError

if TYPE_CHECKING:
    from interv.tasks.tokenized import TokenizedPairs

__all__ = [
    "EmbeddingEvaluation",
    "Evaluation",
    "Head",
    "TaskEvaluation",
    "TextEvaluation",
    "text_sample",
]

Head = tuple[int, int]
"""A query head as ``(layer, head)``."""

_TEXT_PACKAGE = "interv.data"
_TEXT_FILE = "text_sample.txt"


def text_sample() -> str:
    """The text shipped with interv for language-model loss (self-written prose, ~1.5k tokens)."""
    return resources.files(_TEXT_PACKAGE).joinpath(_TEXT_FILE).read_text(encoding="utf-8")


def mean_ablation_of(heads: Sequence[Head], *, pooled: bool) -> Combined:
    """One set of heads mean-ablated together over the base run's own prompts."""
    return Combined(
        tuple(MeanAblation(layer, head, reference="clean", pooled=pooled) for layer, head in heads)
    )


def _set_values(
    model: Any,
    prompts: Prompts,
    ablated: Sequence[Sequence[Head]],
    readout: str,
    reduce: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
    max_batch_size: int,
) -> torch.Tensor:
    """``[n_sets, n_items]``: ``reduce(readout under the set's ablation, unablated readout)``.

    ``reduce`` gives one float64 number per item (prompt row) of ``prompts``. Each head is
    replaced by its mean pooled over every real position of ``prompts`` (the base run);
    an empty set reduces the unablated readout itself. Sets are told apart as *sets*:
    two orderings of the same heads are one ablation, computed once.
    """
    sets = [_canonical(heads) for heads in ablated]
    nonempty = list(dict.fromkeys(heads for heads in sets if heads))
    interventions = [mean_ablation_of(heads, pooled=True) for heads in nonempty]
    reads = planned_reads(model, interventions, reuse_prefix=True)
    base = capture_base_runs(model, {"clean": prompts}, reads, readout=readout)
    unablated = base.readouts["clean"]
    measured: dict[tuple[Head, ...], torch.Tensor] = {(): reduce(unablated, unablated)}
    n = prompts.n
    for indices, out in intervened_readouts(
        model,
        interventions,
        base,
        readout=readout,
        max_batch_size=max_batch_size,
        reuse_prefix=True,
    ):
        for j, index in enumerate(indices):
            measured[nonempty[index]] = reduce(out[j * n : (j + 1) * n], unablated)
    return torch.stack([measured[heads] for heads in sets]).to(torch.float64)


def _canonical(heads: Sequence[Head]) -> tuple[Head, ...]:
    """A set of heads as one sorted tuple of ``(layer, head)`` (the order of ablation is moot)."""
    return tuple(sorted((int(layer), int(head)) for layer, head in heads))


@dataclass(frozen=True, eq=False)
class TaskEvaluation:
    """A task's target metric at the answer position, heads mean-ablated via the runner.

    Attributes:
        task: the prompt pairs; the ablation reference is their clean prompts.
        metric: ``"loss"`` (cross-entropy of the target token = ``-log_prob``, nats) or
            a name in :data:`interv.engine.targets.METRICS`.
    """

    task: TokenizedPairs
    metric: str = "loss"

    def __post_init__(self) -> None:
        allowed = ("loss", *TARGET_METRICS)
        if self.metric not in allowed:
            raise IntervError(f"unknown metric {self.metric!r}; choose one of {allowed}")

    @property
    def engine_metric(self) -> str:
        """The runner's metric: ``"log_prob"`` for ``"loss"`` (negated afterwards)."""
        return "log_prob" if self.metric == "loss" else self.metric

    @property
    def name(self) -> str:
        """What is measured, e.g. "answer-position loss on task 'induction'"."""
        return f"answer-position {self.metric} on task {self.task.name!r}"

    @property
    def unit(self) -> str:
        """The metric's unit."""
        if self.metric == "loss":
            return "nats"
        return TARGET_METRICS[self.metric].unit

    @property
    def lower_is_better(self) -> bool:
        """True for losses and divergences, False for logits and probabilities."""
        return self.metric in ("loss", "kl_from_clean")

    @property
    def ablation(self) -> str:
        """The semantics of the ablation, one sentence."""
        return (
            "heads mean-ablated cumulatively: each ablated head's output (z) replaced by its "
            f"mean over the {self.task.n_pairs} clean prompts of {self.task.name!r} at the "
            "same position, at all positions"
        )

    @property
    def scope(self) -> str:
        """Model-independent scope: prompts, length, aggregation."""
        return (
            f"{self.task.n_pairs} prompts of {self.task.n_positions} positions (padded), "
            "scored at each prompt's answer position, mean over prompts"
        )

    def concentration_input(self) -> dict[str, Any]:
        """What :func:`interv.concentration` reads: the task's clean prompts."""
        return {"prompts_or_tokens": self.task}

    @property
    def items(self) -> str:
        """What one item of :meth:`item_values` is: a prompt of the task."""
        return "prompts"

    def item_values(self, model: Any, ablated: Sequence[Sequence[Head]]) -> torch.Tensor:
        """``[n_sets, n_prompts]`` float64 metric of each prompt, each set mean-ablated.

        An empty set gives the unablated (clean) metric. Two orderings of the same heads
        are one ablation, run once.
        """
        sets = [_canonical(heads) for heads in ablated]
        nonempty = list(dict.fromkeys(heads for heads in sets if heads))
        interventions = [mean_ablation_of(heads, pooled=False) for heads in nonempty]
        result = run(model, self.task, interventions, metric=self.engine_metric)
        per_set = dict(zip(nonempty, result.values.to(torch.float64), strict=True))
        per_set[()] = result.clean.to(torch.float64)
        out = torch.stack([per_set[heads] for heads in sets])
        return -out if self.metric == "loss" else out

    def values(self, model: Any, ablated: Sequence[Sequence[Head]]) -> torch.Tensor:
        """``[n_sets]`` prompt-mean metric with each set of heads mean-ablated together
        (the mean over prompts of :meth:`item_values`)."""
        return self.item_values(model, ablated).mean(dim=-1)


@dataclass(frozen=True, eq=False)
class TextEvaluation:
    """Mean next-token cross-entropy on a text sample cut into chunks (nats/token).

    Build it with :meth:`from_text`. Attributes:
        tokens: ``[n_chunks, chunk_len]`` int64 token ids (each chunk starts with BOS
            when the model prepends one).
        source: how the text is named in the scope.
        max_batch_size: most rows (chunk copies) per forward.
    """

    tokens: torch.Tensor
    source: str = "interv's text sample"
    max_batch_size: int = 16

    @classmethod
    def from_text(
        cls,
        model: Any,
        text: str | None = None,
        *,
        n_tokens: int = 1024,
        chunk_len: int = 128,
    ) -> TextEvaluation:
        """Tokenize ``text`` (default :func:`text_sample`) and cut it into chunks.

        The text is tokenized once, as one stream without BOS; its first ``n_tokens``
        tokens are cut into chunks of ``chunk_len`` tokens (a shorter last chunk is
        dropped), and each chunk gets the model's BOS token in front when it has one.

        Raises:
            IntervError: ``n_tokens`` or ``chunk_len`` < 2, or a text shorter than one
                chunk, or a model that cannot tokenize the text.
        """
        for what, value in (("n_tokens", n_tokens), ("chunk_len", chunk_len)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 2:
                raise IntervError(f"{what} must be an int >= 2; got {value!r}")
        source = "interv's text sample" if text is None else "the given text"
        text = text_sample() if text is None else text
        try:
            stream = model.to_tokens(text, prepend_bos=False, truncate=False)[0].cpu()
        except Exception as error:  # tokenizers raise bare Exception subclasses
            raise IntervError(
                f"model {model.cfg.model_name!r} cannot tokenize the text ({error}); use a "
                "task evaluation instead"
            ) from error
        stream = stream[:n_tokens]
        n_chunks = stream.numel() // chunk_len
        if n_chunks == 0:
            raise IntervError(
                f"the text has {stream.numel()} tokens (after n_tokens={n_tokens}), fewer "
                f"than one chunk of chunk_len={chunk_len}"
            )
        chunks = stream[: n_chunks * chunk_len].reshape(n_chunks, chunk_len)
        bos = getattr(model.tokenizer, "bos_token_id", None)
        if bos is not None:
            chunks = torch.cat([torch.full((n_chunks, 1), bos), chunks], dim=1)
        return cls(tokens=chunks, source=source)

    @property
    def name(self) -> str:
        """What is measured."""
        return f"next-token loss on {self.source}"

    @property
    def unit(self) -> str:
        """nats per predicted token."""
        return "nats/token"

    @property
    def lower_is_better(self) -> bool:
        """A loss: lower is better."""
        return True

    @property
    def ablation(self) -> str:
        """The semantics of the ablation, one sentence."""
        return (
            "heads mean-ablated cumulatively: each ablated head's output (z) replaced at "
            f"every position by its mean pooled over all {self.tokens.numel()} positions of "
            f"the {self.tokens.shape[0]} chunks of {self.source} (pooled: the text is one "
            "stream, positions within a chunk are not comparable across chunks)"
        )

    @property
    def scope(self) -> str:
        """Chunks, length and aggregation."""
        n_chunks, length = self.tokens.shape
        return (
            f"{n_chunks} chunks of {length} tokens of {self.source}, mean over all "
            f"{n_chunks * (length - 1)} predicted positions"
        )

    def concentration_input(self) -> dict[str, Any]:
        """What :func:`interv.concentration` reads: the chunks."""
        return {"prompts_or_tokens": self.tokens}

    @property
    def items(self) -> str:
        """What one item of :meth:`item_values` is: a chunk of the text."""
        return "chunks"

    def item_values(self, model: Any, ablated: Sequence[Sequence[Head]]) -> torch.Tensor:
        """``[n_sets, n_chunks]`` float64 mean next-token loss (nats/token) of each chunk,
        each set of heads mean-ablated together.

        One forward of the chunks gives the reference means and the unablated loss; the
        sets then share forwards, each with its own copy of the chunks stacked along the
        batch axis (at most :attr:`max_batch_size` rows per forward). Every chunk predicts
        the same number of tokens, so the mean over chunks is the mean over all predicted
        positions.
        """
        targets = self.tokens[:, 1:]

        def loss(logits: torch.Tensor, unablated: torch.Tensor) -> torch.Tensor:
            losses = torch.nn.functional.cross_entropy(
                logits[:, :-1].flatten(0, 1).float().cpu(), targets.flatten(), reduction="none"
            )
            return losses.reshape(targets.shape).to(torch.float64).mean(dim=-1)

        return _set_values(
            model, Prompts.of(self.tokens), ablated, "logits", loss, self.max_batch_size
        )

    def values(self, model: Any, ablated: Sequence[Sequence[Head]]) -> torch.Tensor:
        """``[n_sets]`` mean next-token loss (nats/token) over all predicted positions, with
        each set mean-ablated (the mean over chunks of :meth:`item_values`)."""
        return self.item_values(model, ablated).mean(dim=-1)


@dataclass(frozen=True, eq=False)
class EmbeddingEvaluation:
    """Mean cosine similarity of sentence embeddings to the unablated ones.

    For all-MiniLM-L6-v2 (its output logits are meaningless). Build with
    :meth:`from_sentences`. Attributes:
        tokens: ``[n_sentences, pos]`` int64 token ids (with [CLS] and [SEP]).
        attention_mask: ``[n_sentences, pos]`` bool, True on real tokens.
        max_batch_size: most rows (sentence copies) per forward.
    """

    tokens: torch.Tensor
    attention_mask: torch.Tensor
    max_batch_size: int = 64

    @classmethod
    def from_sentences(cls, model: Any, sentences: Sequence[str]) -> EmbeddingEvaluation:
        """Tokenize ``sentences`` with the model's tokenizer, right-padded."""
        if isinstance(sentences, str) or not sentences:
            raise IntervError(f"sentences must be a non-empty list of strings; got {sentences!r}")
        encoded = model.tokenizer(list(sentences), padding=True, return_tensors="pt")
        return cls(tokens=encoded["input_ids"], attention_mask=encoded["attention_mask"].bool())

    @property
    def name(self) -> str:
        """What is measured."""
        return "cosine similarity of the sentence embedding to the unablated one"

    @property
    def unit(self) -> str:
        """cosine, in [-1, 1]."""
        return "cosine"

    @property
    def lower_is_better(self) -> bool:
        """A similarity: higher is better."""
        return False

    @property
    def ablation(self) -> str:
        """The semantics of the ablation, one sentence."""
        return (
            "heads mean-ablated cumulatively: each ablated head's output (z) replaced at "
            f"every position by its mean pooled over the {int(self.attention_mask.sum())} "
            f"real tokens of the {self.tokens.shape[0]} sentences"
        )

    @property
    def scope(self) -> str:
        """Sentences and aggregation."""
        return f"{self.tokens.shape[0]} sentences, mean over sentences"

    def concentration_input(self) -> dict[str, Any]:
        """What :func:`interv.concentration` reads: the sentences and their mask."""
        return {"prompts_or_tokens": self.tokens, "attention_mask": self.attention_mask}

    @property
    def items(self) -> str:
        """What one item of :meth:`item_values` is: a sentence."""
        return "sentences"

    def item_values(self, model: Any, ablated: Sequence[Sequence[Head]]) -> torch.Tensor:
        """``[n_sets, n_sentences]`` float64 cosine similarity of each sentence's embedding to
        its unablated one, each set of heads mean-ablated together.

        One forward of the sentences gives the reference means and the unablated
        embeddings; the sets then share forwards, each with its own copy of the sentences
        stacked along the batch axis (at most :attr:`max_batch_size` rows per forward).
        """
        real = self.attention_mask

        def similarity(hidden: torch.Tensor, unablated: torch.Tensor) -> torch.Tensor:
            embedding = mean_pooled(hidden.cpu(), real)
            reference = mean_pooled(unablated.cpu(), real)
            cosine = torch.nn.functional.cosine_similarity(embedding, reference)
            return cosine.to(torch.float64)

        prompts = Prompts.of(self.tokens, real)
        return _set_values(
            model, prompts, ablated, "final_residual", similarity, self.max_batch_size
        )

    def values(self, model: Any, ablated: Sequence[Sequence[Head]]) -> torch.Tensor:
        """``[n_sets]`` mean over sentences of the cosine similarity to the unablated
        embeddings (the mean of :meth:`item_values`)."""
        return self.item_values(model, ablated).mean(dim=-1)


Evaluation = TaskEvaluation | TextEvaluation | EmbeddingEvaluation
"""What a pruning curve measures."""
