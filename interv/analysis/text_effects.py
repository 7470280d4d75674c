"""Next-token loss of a text sample under interventions, chunk by chunk, with intervals.

>>> text = TextEvaluation.from_text(model, chunk_len=127)        # BOS + 127 tokens a chunk
>>> loss = text_loss(model, text, [WindowAttention(32), WindowAttention(32, sink_tokens=4)],
...                  first_position=36)
>>> loss.perplexity(), loss.difference(1)                          # vs full attention

The loss of a chunk is the mean cross-entropy (nats/token) of the model's next-token
predictions at query positions ``first_position .. chunk_len - 2`` (the last position has
no next token); every chunk scores the same positions, so the mean over chunks is the mean
over every scored token. Each intervention runs on its own copy of the chunks, stacked
along the batch axis with the other interventions, in the text's one run (``"clean"``:
there is no corrupted run of a text). Intervals are percentile bootstraps over chunks;
differences between two conditions are paired over chunks.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch

from interv._checks import as_int
from interv.analysis.pruning.evaluations import TextEvaluation
from interv.engine.forward import Prompts
from interv.engine.protocol import Intervention, semantics
from interv.engine.stacking import capture_base_runs, intervened_readouts, planned_reads
from interv.errors import IntervError
from interv.stats import bootstrap_indices, bootstrap_mean_ci

if TYPE_CHECKING:
    from transformer_lens.model_bridge import TransformerBridge

__all__ = ["TextLoss", "text_loss"]


@dataclass(frozen=True, eq=False)
class TextLoss:
    """Next-token loss of every chunk, unedited and under each intervention.

    Attributes:
        clean: ``[n_chunks]`` float64 mean loss of each chunk with the model unedited
            (nats/token).
        values: ``[n_interventions, n_chunks]`` float64 the same under each intervention.
        descriptions: each intervention's semantics sentence.
        first_position, last_position: the first and last query positions scored.
        source: how the text is named.
        chunk_len: tokens per chunk (BOS included where there is one).
        model_name: name of the model (scope).
        unit: ``"nats/token"``.
    """

    clean: torch.Tensor
    values: torch.Tensor
    descriptions: tuple[str, ...]
    first_position: int
    last_position: int
    source: str
    chunk_len: int
    model_name: str
    unit: str = "nats/token"

    @property
    def n_chunks(self) -> int:
        """Number of chunks (the items of every interval)."""
        return int(self.clean.shape[0])

    def _row(self, index: int | None) -> torch.Tensor:
        if index is None:
            return self.clean
        if not isinstance(index, int) or not 0 <= index < self.values.shape[0]:
            raise IntervError(
                f"index must be None (unedited) or an intervention index "
                f"0..{self.values.shape[0] - 1}; got {index!r}"
            )
        return self.values[index]

    def mean(self, index: int | None = None) -> float:
        """Mean loss over chunks (nats/token) of intervention ``index`` (None: unedited)."""
        return float(self._row(index).mean())

    def interval(
        self,
        index: int | None = None,
        *,
        level: float = 0.95,
        n_bootstrap: int = 1000,
        seed: int = 0,
    ) -> tuple[float, float]:
        """Percentile bootstrap interval over chunks of :meth:`mean` (nats/token)."""
        indices = bootstrap_indices(self.n_chunks, n_bootstrap, seed)
        return bootstrap_mean_ci(self._row(index), indices, level)

    def difference(
        self,
        index: int,
        reference: int | None = None,
        *,
        level: float = 0.95,
        n_bootstrap: int = 1000,
        seed: int = 0,
    ) -> tuple[float, float, float]:
        """Mean loss of ``index`` minus that of ``reference`` (None: unedited), nats/token,
        with a paired percentile bootstrap interval over chunks: ``(mean, low, high)``.
        ``exp`` of it is the ratio of the two perplexities."""
        delta = self._row(index) - self._row(reference)
        low, high = bootstrap_mean_ci(
            delta, bootstrap_indices(self.n_chunks, n_bootstrap, seed), level
        )
        return float(delta.mean()), low, high

    def perplexity(self, index: int | None = None) -> float:
        """``exp`` of :meth:`mean`: the perplexity over the scored tokens."""
        return math.exp(self.mean(index))

    @property
    def scope(self) -> str:
        """Model, text, chunks, scored positions and aggregation."""
        scored = self.last_position - self.first_position + 1
        return (
            f"model {self.model_name}; {self.n_chunks} chunks of {self.chunk_len} tokens of "
            f"{self.source}; next-token loss at query positions {self.first_position}.."
            f"{self.last_position} ({scored} per chunk, {scored * self.n_chunks} in all), mean "
            f"over positions then chunks ({self.unit})"
        )


def text_loss(
    model: TransformerBridge,
    text: TextEvaluation | torch.Tensor,
    interventions: Intervention | Sequence[Intervention],
    *,
    first_position: int = 0,
    max_batch_size: int = 16,
    attention: str = "auto",
) -> TextLoss:
    """Next-token loss of every chunk of ``text``, unedited and under each intervention.

    Args:
        model: a transformer-lens ``TransformerBridge`` (a causal language model).
        text: a :class:`~interv.analysis.TextEvaluation` (e.g. ``from_text(model)``: interv's
            text sample) or a ``[n_chunks, chunk_len]`` int token tensor.
        interventions: interventions on the text's one run (``base_run == "clean"``), each
            with its semantics sentence; they may read only from that run.
        first_position: the first query position whose next-token prediction is scored
            (``0 <= first_position <= chunk_len - 2``).
        max_batch_size: most rows (chunk copies) per forward.
        attention: how the forwards compute attention
            (:func:`~interv.engine.forward.choose_attention`): ``"auto"`` (default) without
            the pattern from :data:`~interv.engine.rows.LONG_CONTEXT` positions on, where a
            mask edit (a window with sinks, hidden keys) is applied inside each layer's
            attention and no pattern is materialized; ``"rows"`` so at any length;
            ``"pattern"`` the model's own attention, mask edits written at the z level from
            the observed pattern (refused above
            :data:`~interv.engine.rows.MAX_PATTERN_BYTES` per layer).

    Returns:
        A :class:`TextLoss`.
    """
    tokens = text.tokens if isinstance(text, TextEvaluation) else text
    source = text.source if isinstance(text, TextEvaluation) else "the given chunks"
    if not isinstance(tokens, torch.Tensor) or tokens.ndim != 2 or tokens.is_floating_point():
        raise IntervError(
            "text must be a TextEvaluation or a [n_chunks, chunk_len] int token tensor; got "
            f"{type(tokens).__name__}"
        )
    chunk_len = int(tokens.shape[1])
    first_position = as_int(first_position, "first_position", minimum=0)
    if first_position > chunk_len - 2:
        raise IntervError(
            f"first_position {first_position} is beyond the prompt: chunks of {chunk_len} "
            f"tokens predict next tokens at query positions 0..{chunk_len - 2}"
        )
    as_int(max_batch_size, "max_batch_size", minimum=1)
    given = (interventions,) if isinstance(interventions, Intervention) else tuple(interventions)
    for intervention in given:
        sentence = semantics(intervention)
        if intervention.base_run != "clean":
            raise IntervError(
                f"a text has one run ('clean'); {sentence!r} modifies the "
                f"{intervention.base_run!r} run"
            )
    # each as it applies to this model (a mask edit composed with the model's own window)
    checked = tuple(intervention.for_model(model) for intervention in given)
    for intervention in checked:
        intervention.check(model.cfg, chunk_len)
    prompts = Prompts.of(tokens)
    targets = tokens[:, first_position + 1 :]

    def loss(logits: torch.Tensor) -> torch.Tensor:
        """``[k * n_chunks, pos, d_vocab]`` -> ``[k, n_chunks]`` mean loss per chunk."""
        scored = logits[:, first_position:-1].float().cpu()
        copies = scored.shape[0] // tokens.shape[0]
        losses = torch.nn.functional.cross_entropy(
            scored.flatten(0, 1), targets.repeat(copies, 1).flatten(), reduction="none"
        )
        return losses.reshape(copies, *targets.shape).to(torch.float64).mean(dim=-1)

    reads = planned_reads(model, checked, reuse_prefix=True)
    base = capture_base_runs(
        model, {"clean": prompts}, reads, readout="logits", attention=attention
    )
    clean = loss(base.readouts["clean"])[0]
    values = torch.empty(len(checked), tokens.shape[0], dtype=torch.float64)
    for indices, logits in intervened_readouts(
        model,
        checked,
        base,
        readout="logits",
        max_batch_size=max_batch_size,
        reuse_prefix=True,
        attention=attention,
    ):
        values[indices] = loss(logits)
    return TextLoss(
        clean=clean,
        values=values,
        descriptions=tuple(semantics(intervention) for intervention in checked),
        first_position=first_position,
        last_position=chunk_len - 2,
        source=source,
        chunk_len=chunk_len,
        model_name=str(getattr(model.cfg, "model_name", "unknown")),
    )
