"""Pruning curves: mean-ablate heads cumulatively in the order a ranking gives.

A *ranking* orders heads from least to most important under some criterion: an
attention-concentration number (raw entropy, content entropy, sink mass), a
value-aware number (contribution norm), the exact causal effect of ablating the
head alone, a first-order attribution score, or a seeded random order. A *pruning
curve* mean-ablates the first ``k`` heads of an order together (``k = 0 .. K``) and
evaluates the model each time. Pruning removes the least important heads first, so a
ranking that knows which heads matter keeps the curve flat for longer. Comparing the
curves of concentration rankings with the curve of the exact effect shows how far
"concentrated" is from "important".

Evaluations (each states its unit and the reference of the mean ablation):

- :class:`TaskEvaluation`: a target metric of a prompt-pair task at the answer
  position, through :func:`interv.engine.runner.run` with
  ``Combined(parts=(MeanAblation(L, h), ...))``: each ablated head's ``z`` is replaced
  by its mean over the task's clean prompts at the same position. ``metric="loss"`` is
  the cross-entropy of the target token (``-log_prob``, nats).
- :class:`TextEvaluation`: language-model loss on a text sample (by default the one
  shipped in ``interv/data/text_sample.txt``), the mean next-token cross-entropy over
  every predicted position, in nats/token (perplexity = ``exp`` of it). The text is
  one token stream cut into chunks, so the reference is *pooled*: each ablated head's
  ``z`` is replaced at every position by its mean over all positions of all chunks.
- :class:`EmbeddingEvaluation`: for encoders without a trained output head
  (all-MiniLM-L6-v2): the mean over sentences of the cosine similarity between the
  sentence embedding under ablation and the unablated one (unit: cosine, in [-1, 1];
  1 = unchanged). Reference: pooled over the sentences' real tokens.

Text and embedding evaluations need the whole sequence's output under ablation, which
the answer-position runner does not give; they attach one minimal hook per ablated
layer on ``blocks.{L}.attn.hook_z`` (inside ``model.hooks(...)``) that writes each
ablated head's pooled mean ``[d_head]`` at every position. Like the runner, they stack
one copy of the inputs per set of ablated heads along the batch axis, and each set's
hook edits only its own rows.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from importlib import resources
from typing import TYPE_CHECKING, Any

import torch

from interv.engine.forwarding import forward_kwargs, model_device
from interv.engine.hooks import _masked_mean
from interv.engine.interventions import Combined, MeanAblation
from interv.engine.runner import run
from interv.engine.sites import check_head, hook_name
from interv.engine.targets import METRICS as TARGET_METRICS
from interv.errors import IntervError

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

    from interv.tasks.tokenized import TokenizedPairs

__all__ = [
    "RANKINGS",
    "EmbeddingEvaluation",
    "PruningCurves",
    "TaskEvaluation",
    "TextEvaluation",
    "check_rankings",
    "plot_pruning_curves",
    "pruning_curves",
    "rank_heads",
    "text_sample",
]

Head = tuple[int, int]
"""A query head as ``(layer, head)``."""

RANKINGS: dict[str, str] = {
    "entropy": (
        "raw attention entropy (nats), ascending: most concentrated heads removed first. "
        "Tests the reading that a collapsed head (mass parked on one key, often the sink) "
        "is idle; the reverse reading would keep them"
    ),
    "content_entropy": (
        "content entropy H(q) without the sink (nats), ascending: same direction as raw "
        "entropy, so the two curves differ only by the sink split"
    ),
    "sink_mass": (
        "sink mass (fraction), descending: heads that park the most mass on the sink "
        "removed first (the 'dormant head' reading)"
    ),
    "contribution": (
        "value-aware contribution norm sum_i a_i ||v_i W_O|| (residual-stream units), "
        "ascending: heads writing the least removed first"
    ),
    "exact_effect": (
        "|exact effect| of mean-ablating the head alone, under the curve's own "
        "evaluation, ascending: least important removed first"
    ),
    "attribution": (
        "|attribution-patching score| (first-order estimate of the head's denoising effect "
        "on a task, an approximation), ascending: least important removed first"
    ),
    "random": "uniformly random order (seeded)",
}
"""Ranking name -> what it ranks by, its direction and why. NaN scores go last."""

_CONCENTRATION_METRIC = {
    "entropy": "entropy",
    "content_entropy": "content_entropy",
    "sink_mass": "sink_mass",
    "contribution": "contribution_norm",
}
_DESCENDING = frozenset({"sink_mass"})
_TEXT_PACKAGE = "interv.data"
_TEXT_FILE = "text_sample.txt"


def text_sample() -> str:
    """The text shipped with interv for language-model loss (self-written prose, ~1.5k tokens)."""
    return resources.files(_TEXT_PACKAGE).joinpath(_TEXT_FILE).read_text(encoding="utf-8")


def _label(head: Head) -> str:
    return f"L{head[0]}H{head[1]}"


def _stacked_ablation_hooks(
    ablated: Sequence[Sequence[Head]], n_rows: int, means: dict[int, torch.Tensor]
) -> list[tuple[str, Callable[[torch.Tensor, Any], torch.Tensor]]]:
    """Hooks that mean-ablate set ``j`` of ``ablated`` in batch rows ``j * n_rows ..``.

    Set ``j`` owns rows ``j * n_rows`` to ``(j + 1) * n_rows - 1`` of the batch; in
    them, the hook on ``blocks.{L}.attn.hook_z`` (``[batch, pos, head_index, d_head]``)
    writes ``means[L][h]`` (``[d_head]``) at every position for each head ``(L, h)`` of
    the set.
    """
    edits: dict[int, list[tuple[slice, torch.Tensor]]] = {}
    for j, heads in enumerate(ablated):
        rows = slice(j * n_rows, (j + 1) * n_rows)
        by_layer: dict[int, list[int]] = {}
        for layer, head in heads:
            by_layer.setdefault(layer, []).append(head)
        for layer, layer_heads in by_layer.items():
            edits.setdefault(layer, []).append((rows, torch.tensor(layer_heads)))

    def make_hook(layer: int) -> Callable[[torch.Tensor, Any], torch.Tensor]:
        def hook(z: torch.Tensor, hook: Any) -> torch.Tensor:
            z = z.clone()
            for rows, index in edits[layer]:
                z[rows, :, index] = means[layer][index].to(z)
            return z

        return hook

    return [(hook_name("z", layer), make_hook(layer)) for layer in sorted(edits)]


def _set_groups(n_sets: int, n_rows: int, max_batch_size: int) -> list[range]:
    """Consecutive groups of set indices, at most ``max_batch_size`` rows per forward."""
    per_forward = max(1, max_batch_size // n_rows)
    return [range(i, min(i + per_forward, n_sets)) for i in range(0, n_sets, per_forward)]


def _pooled_z_means(
    model: Any, tokens: torch.Tensor, mask: torch.Tensor
) -> dict[int, torch.Tensor]:
    """Per layer, each head's ``z`` averaged over all real positions: ``[head_index, d_head]``."""
    names = {hook_name("z", layer) for layer in range(model.cfg.n_layers)}
    device = model_device(model)
    with torch.no_grad():
        _, cache = model.run_with_cache(
            tokens.to(device),
            names_filter=lambda name: name in names,
            return_type=None,
            **forward_kwargs(mask.to(device)),
        )
    return {
        layer: _masked_mean(cache[hook_name("z", layer)].flatten(2), mask.to(device), True)
        .reshape(model.cfg.n_heads, -1)
        .cpu()
        for layer in range(model.cfg.n_layers)
    }


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

    def values(self, model: Any, ablated: Sequence[Sequence[Head]]) -> torch.Tensor:
        """``[n_sets]`` prompt-mean metric with each set of heads mean-ablated together.

        An empty set gives the unablated (clean) metric.
        """
        nonempty = [tuple(heads) for heads in ablated if heads]
        interventions = [
            Combined(parts=tuple(MeanAblation(layer, head) for layer, head in heads))
            for heads in nonempty
        ]
        result = run(model, self.task, interventions, metric=self.engine_metric)
        means = iter(result.mean().tolist())
        clean = float(result.clean.mean())
        out = torch.tensor(
            [next(means) if heads else clean for heads in ablated], dtype=torch.float64
        )
        return -out if self.metric == "loss" else out


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

    def values(self, model: Any, ablated: Sequence[Sequence[Head]]) -> torch.Tensor:
        """``[n_sets]`` mean next-token loss (nats/token) with each set mean-ablated.

        One forward computes the reference means; the sets then share forwards, each
        with its own copy of the chunks stacked along the batch axis (at most
        :attr:`max_batch_size` rows per forward).
        """
        n_rows = self.tokens.shape[0]
        means = _pooled_z_means(model, self.tokens, torch.ones_like(self.tokens, dtype=torch.bool))
        device = model_device(model)
        out = torch.empty(len(ablated), dtype=torch.float64)
        for group in _set_groups(len(ablated), n_rows, self.max_batch_size):
            sets = [ablated[j] for j in group]
            tokens = self.tokens.repeat(len(sets), 1).to(device)
            hooks = _stacked_ablation_hooks(sets, n_rows, means)
            with torch.no_grad(), model.hooks(fwd_hooks=hooks):
                logits = model(tokens)
            losses = torch.nn.functional.cross_entropy(
                logits[:, :-1].flatten(0, 1).float(), tokens[:, 1:].flatten(), reduction="none"
            )
            out[list(group)] = losses.reshape(len(sets), -1).mean(-1).double().cpu()
        return out


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

    def values(self, model: Any, ablated: Sequence[Sequence[Head]]) -> torch.Tensor:
        """``[n_sets]`` mean cosine similarity to the unablated embeddings.

        One forward computes the reference means; the unablated embeddings are computed
        with the sets, each set with its own copy of the sentences stacked along the batch
        axis (at most :attr:`max_batch_size` rows per forward).
        """
        from interv.models.minilm import sentence_embedding

        n_rows = self.tokens.shape[0]
        means = _pooled_z_means(model, self.tokens, self.attention_mask)
        device = model_device(model)
        sets = [(), *ablated]
        embeddings = []
        for group in _set_groups(len(sets), n_rows, self.max_batch_size):
            hooks = _stacked_ablation_hooks([sets[j] for j in group], n_rows, means)
            with torch.no_grad(), model.hooks(fwd_hooks=hooks):
                embeddings.append(
                    sentence_embedding(
                        model,
                        self.tokens.repeat(len(group), 1).to(device),
                        self.attention_mask.repeat(len(group), 1).to(device),
                    ).cpu()
                )
        embedding = torch.cat(embeddings).reshape(len(sets), n_rows, -1)
        cosine = torch.nn.functional.cosine_similarity(embedding[1:], embedding[:1], dim=-1)
        return cosine.mean(-1).double()


Evaluation = TaskEvaluation | TextEvaluation | EmbeddingEvaluation
"""What a pruning curve measures."""


def _check_heads(model: Any, heads: Sequence[Head] | None) -> tuple[Head, ...]:
    cfg = model.cfg
    if heads is None:
        return tuple((layer, head) for layer in range(cfg.n_layers) for head in range(cfg.n_heads))
    checked = tuple((int(layer), int(head)) for layer, head in heads)
    for layer, head in checked:
        check_head(cfg, layer, head)
    if not checked or len(set(checked)) != len(checked):
        raise IntervError(f"heads must be a non-empty list of distinct (layer, head); got {heads}")
    return checked


def _order(heads: tuple[Head, ...], scores: torch.Tensor, descending: bool) -> tuple[Head, ...]:
    """Heads sorted by score (ties: by layer, head); NaN scores last."""
    values = [float(s) for s in scores]

    def key(item: tuple[Head, float]) -> tuple[bool, float, Head]:
        head, value = item
        nan = value != value
        return (nan, 0.0 if nan else (-value if descending else value), head)

    return tuple(head for head, _ in sorted(zip(heads, values, strict=True), key=key))


def check_rankings(rankings: Sequence[str]) -> None:
    """Raise :class:`IntervError` unless ``rankings`` is a non-empty list of :data:`RANKINGS`."""
    if isinstance(rankings, str) or not rankings:
        raise IntervError(
            f"rankings must be a non-empty list of {tuple(RANKINGS)}; got {rankings!r}"
        )
    unknown = [name for name in rankings if name not in RANKINGS]
    if unknown:
        raise IntervError(f"unknown rankings {unknown!r}; choose from {tuple(RANKINGS)}")


def _per_head_concentration(
    model: Any, evaluation: Evaluation, rankings: Sequence[str]
) -> dict[str, torch.Tensor]:
    """Per ranking, its concentration number per head, ``[layer, head_index]``.

    Mean over each prompt's query rows, then over prompts, sink = position 0. Causal
    models use :func:`interv.concentration` (reduced inside hooks). Bidirectional
    encoders (``cfg.attention_dir == "bidirectional"``, e.g. MiniLM), which
    :func:`interv.concentration` does not cover yet, use their full patterns from
    :func:`interv.attention_rows` and :func:`interv.sink_split` (no ``"contribution"``).
    """
    inputs = evaluation.concentration_input()
    if getattr(model.cfg, "attention_dir", "causal") != "bidirectional":
        from interv.analysis.concentration import concentration

        with torch.no_grad():
            heads = concentration(model, **inputs)
        return {name: heads.per_head(_CONCENTRATION_METRIC[name]) for name in rankings}
    if "contribution" in rankings:
        allowed = tuple(name for name in RANKINGS if name != "contribution")
        raise IntervError(
            "ranking 'contribution' needs interv.concentration, which covers causal models "
            f"only; for this bidirectional model choose from {allowed}"
        )
    from interv.analysis._patterns import attention_rows
    from interv.metrics.sink import sink_split

    rows = attention_rows(model, **inputs)
    split = sink_split(
        rows.pattern,
        sink=rows.sink_mask[:, None, None, None, :],
        key_mask=rows.key_mask[:, None, None],
    )
    included = rows.included[:, None, None, :]
    return {
        name: getattr(split, _CONCENTRATION_METRIC[name])
        .where(included, torch.nan)
        .nanmean(-1)
        .nanmean(0)
        for name in rankings
    }


def rank_heads(
    model: Any,
    evaluation: Evaluation,
    *,
    rankings: Sequence[str] = tuple(RANKINGS),
    heads: Sequence[Head] | None = None,
    attribution_task: TokenizedPairs | None = None,
    seed: int = 0,
) -> dict[str, tuple[Head, ...]]:
    """Orders of ``heads``, least important first, under each ranking of :data:`RANKINGS`.

    Concentration rankings average the head's numbers over every query position of
    the evaluation's inputs, then over prompts (sink = position 0; see
    :func:`_per_head_concentration` for bidirectional encoders).
    ``"exact_effect"`` mean-ablates each head alone under ``evaluation`` (one
    evaluation per head). ``"attribution"`` uses
    :func:`interv.engine.attribution.approximate_head_patching_scores` on
    ``attribution_task`` (default: the evaluation's task), an approximation.

    Args:
        model: a transformer-lens ``TransformerBridge``.
        evaluation: what the pruning curve will measure.
        rankings: names in :data:`RANKINGS`.
        heads: candidate heads ``(layer, head)``; default every head.
        attribution_task: prompt pairs for ``"attribution"``.
        seed: seed of ``"random"``.

    Returns:
        Ranking name -> every candidate head, least important first.

    Raises:
        IntervError: unknown ranking, bad heads, or ``"attribution"`` without a task.
    """
    check_rankings(rankings)
    candidates = _check_heads(model, heads)
    rows = torch.tensor([c[0] for c in candidates])
    cols = torch.tensor([c[1] for c in candidates])
    orders: dict[str, tuple[Head, ...]] = {}
    needs_concentration = [name for name in rankings if name in _CONCENTRATION_METRIC]
    if needs_concentration:
        per_head = _per_head_concentration(model, evaluation, needs_concentration)
        for name in needs_concentration:
            orders[name] = _order(candidates, per_head[name][rows, cols], name in _DESCENDING)
    if "exact_effect" in rankings:
        values = evaluation.values(model, [(), *((head,) for head in candidates)])
        orders["exact_effect"] = _order(candidates, (values[1:] - values[0]).abs(), False)
    if "attribution" in rankings:
        task = attribution_task
        if task is None and isinstance(evaluation, TaskEvaluation):
            task = evaluation.task
        if task is None:
            raise IntervError(
                "ranking 'attribution' needs prompt pairs: pass attribution_task=, or use a "
                "TaskEvaluation, or leave 'attribution' out of rankings"
            )
        from interv.engine.attribution import approximate_head_patching_scores

        metric = evaluation.engine_metric if isinstance(evaluation, TaskEvaluation) else "log_prob"
        scores = approximate_head_patching_scores(model, task, metric)
        orders["attribution"] = _order(candidates, scores[rows, cols].abs(), False)
    if "random" in rankings:
        generator = torch.Generator().manual_seed(seed)
        permutation = torch.randperm(len(candidates), generator=generator)
        orders["random"] = tuple(candidates[i] for i in permutation.tolist())
    return {name: orders[name] for name in rankings}


@dataclass(frozen=True, eq=False)
class PruningCurves:
    """One evaluation per number of heads removed, for each order.

    Attributes:
        orders: order name -> the heads removed, in order (length ``max_heads``).
        values: order name -> ``[max_heads + 1]`` float64; entry ``k`` is the
            evaluation with the first ``k`` heads mean-ablated together (``k = 0``:
            unablated), in :attr:`unit`.
        evaluation: what is measured.
        unit: the unit of every value.
        lower_is_better: True for losses, False for similarities and logit scores.
        ablation: the semantics sentence of the ablation.
        scope: model, inputs and aggregation.
        rules: order name -> what the ranking ranks by and its direction ("given" for
            orders passed in).
    """

    orders: dict[str, tuple[Head, ...]]
    values: dict[str, torch.Tensor]
    evaluation: str
    unit: str
    lower_is_better: bool
    ablation: str
    scope: str
    rules: dict[str, str]

    @property
    def max_heads(self) -> int:
        """Most heads removed on any curve."""
        return max(len(order) for order in self.orders.values())

    def describe(self, name: str) -> str:
        """One line: the curve of order ``name`` with its unit."""
        if name not in self.orders:
            raise IntervError(f"unknown order {name!r}; choose one of {tuple(self.orders)}")
        points = ", ".join(f"{float(v):.4g}" for v in self.values[name])
        return (
            f"{name}: {self.evaluation} ({self.unit}) at k = 0..{len(self.orders[name])}: {points}"
        )

    def to_records(self) -> list[dict[str, Any]]:
        """One plain dict per order and ``k``, for tables and reports.

        Keys: ``order``, ``rule``, ``k`` (heads removed), ``removed`` (the k-th head,
        e.g. ``"L1H2"``; None at ``k = 0``), ``heads_removed`` (all k), ``value``,
        ``unit``, ``evaluation``, ``semantics``, ``scope``.
        """
        records = []
        for name, order in self.orders.items():
            for k, value in enumerate(self.values[name].tolist()):
                records.append(
                    {
                        "order": name,
                        "rule": self.rules[name],
                        "k": k,
                        "removed": None if k == 0 else _label(order[k - 1]),
                        "heads_removed": [_label(head) for head in order[:k]],
                        "value": value,
                        "unit": self.unit,
                        "evaluation": self.evaluation,
                        "semantics": self.ablation,
                        "scope": self.scope,
                    }
                )
        return records


def pruning_curves(
    model: Any,
    evaluation: Evaluation,
    *,
    orders: dict[str, Sequence[Head]] | Sequence[str] = tuple(RANKINGS),
    max_heads: int | None = None,
    heads: Sequence[Head] | None = None,
    attribution_task: TokenizedPairs | None = None,
    seed: int = 0,
) -> PruningCurves:
    """Mean-ablate the first ``k`` heads of each order together, ``k = 0 .. max_heads``.

    Args:
        model: a transformer-lens ``TransformerBridge`` in eval mode.
        evaluation: a :class:`TaskEvaluation`, :class:`TextEvaluation` or
            :class:`EmbeddingEvaluation`.
        orders: explicit orders (name -> heads, least important first), or ranking
            names of :data:`RANKINGS` computed with :func:`rank_heads`.
        max_heads: most heads removed; default the length of the longest order.
        heads: candidate heads for ranking names; default every head.
        attribution_task, seed: passed to :func:`rank_heads`.

    Returns:
        :class:`PruningCurves`.

    Raises:
        IntervError: unknown rankings, bad heads, or ``max_heads`` outside
            ``[0, shortest order length]``.
    """
    if isinstance(orders, dict):
        given = {name: _check_heads(model, order) for name, order in orders.items()}
        rules = dict.fromkeys(given, "given")
    else:
        given = rank_heads(
            model,
            evaluation,
            rankings=tuple(orders),
            heads=heads,
            attribution_task=attribution_task,
            seed=seed,
        )
        rules = {name: RANKINGS[name] for name in given}
    shortest = min(len(order) for order in given.values())
    if max_heads is None:
        max_heads = shortest
    if (
        isinstance(max_heads, bool)
        or not isinstance(max_heads, int)
        or not (0 <= max_heads <= shortest)
    ):
        raise IntervError(f"max_heads must be an int in [0, {shortest}]; got {max_heads!r}")
    kept = {name: order[:max_heads] for name, order in given.items()}
    # One evaluation call for every distinct set of heads (k = 0 is shared by all orders).
    distinct = list(
        dict.fromkeys(order[:k] for order in kept.values() for k in range(max_heads + 1))
    )
    measured = dict(zip(distinct, evaluation.values(model, distinct).tolist(), strict=True))
    values = {
        name: torch.tensor([measured[order[:k]] for k in range(max_heads + 1)], dtype=torch.float64)
        for name, order in kept.items()
    }
    return PruningCurves(
        orders=kept,
        values=values,
        evaluation=evaluation.name,
        unit=evaluation.unit,
        lower_is_better=evaluation.lower_is_better,
        ablation=evaluation.ablation,
        scope=f"model {getattr(model.cfg, 'model_name', 'unknown')}; {evaluation.scope}",
        rules=rules,
    )


def plot_pruning_curves(curves: PruningCurves, ax: Axes | None = None) -> Figure:
    """One line per order: the evaluation against the number of heads removed.

    Draws into ``ax`` when given (and returns its figure); otherwise makes a new
    ``matplotlib.figure.Figure``. Shows and saves nothing.
    """
    if ax is None:
        from matplotlib.figure import Figure

        figure = Figure(figsize=(6.4, 4.2))
        ax = figure.add_subplot()
    for name, values in curves.values.items():
        ax.plot(range(len(values)), values.tolist(), marker="o", markersize=3, label=name)
    ax.set_xlabel("heads mean-ablated (count, least important first)")
    ax.set_ylabel(f"{curves.evaluation} ({curves.unit})")
    ax.set_title(curves.scope, fontsize=8)
    ax.legend(fontsize=7)
    return ax.figure
