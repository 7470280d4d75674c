"""Tokenized clean/corrupted prompt pairs: the tensor form every runner consumes.

A :class:`TokenizedPairs` is what :meth:`interv.PromptPairs.tokenize` returns and what
the intervention engine reads. It can also be built directly from token tensors
(for models without a tokenizer, or for hand-made inputs).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from interv.errors import IntervError

__all__ = ["TokenizedPairs"]

PADDING_SIDES = ("right", "left")


@dataclass(frozen=True, eq=False)
class TokenizedPairs:
    """Clean and corrupted token batches with answer positions and targets.

    Attributes:
        clean_tokens: ``[batch, pos]`` int64 token ids of the clean prompts.
        corrupted_tokens: ``[batch, pos]`` int64 ids of the corrupted prompts, same
            shape as ``clean_tokens`` (each pair has equal token length).
        attention_mask: ``[batch, pos]`` bool, True where the token is real (not
            padding). Shared by the clean and corrupted prompt of a pair.
        answer_positions: ``[batch]`` int64; the position whose next-token logits
            are scored (normally the last real token of the prompt).
        target_ids: ``[batch]`` int64 id of the correct next token.
        foil_ids: ``[batch]`` int64 id of the competing token, or None when the
            task has no foil (then logit-difference metrics are unavailable).
        padding_side: ``"right"`` or ``"left"``.
        name: the task's name, carried into the scope of every result.
    """

    clean_tokens: torch.Tensor
    corrupted_tokens: torch.Tensor
    attention_mask: torch.Tensor
    answer_positions: torch.Tensor
    target_ids: torch.Tensor
    foil_ids: torch.Tensor | None = None
    padding_side: str = "right"
    name: str = "custom"

    def __post_init__(self) -> None:
        if self.clean_tokens.ndim != 2:
            raise IntervError(
                f"clean_tokens must be [batch, pos]; got shape {tuple(self.clean_tokens.shape)}"
            )
        batch, pos = self.clean_tokens.shape
        if batch == 0:
            raise IntervError("TokenizedPairs needs at least one prompt pair; got an empty batch")
        for field, expected in (
            ("corrupted_tokens", (batch, pos)),
            ("attention_mask", (batch, pos)),
            ("answer_positions", (batch,)),
            ("target_ids", (batch,)),
        ):
            shape = tuple(getattr(self, field).shape)
            if shape != expected:
                raise IntervError(f"{field} must have shape {expected}; got {shape}")
        if self.foil_ids is not None and tuple(self.foil_ids.shape) != (batch,):
            raise IntervError(
                f"foil_ids must have shape {(batch,)}; got {tuple(self.foil_ids.shape)}"
            )
        if self.attention_mask.dtype != torch.bool:
            raise IntervError(f"attention_mask must be bool; got {self.attention_mask.dtype}")
        if self.padding_side not in PADDING_SIDES:
            raise IntervError(
                f"padding_side must be one of {PADDING_SIDES}; got {self.padding_side!r}"
            )
        bad = (self.answer_positions < 0) | (self.answer_positions >= pos)
        if bool(bad.any()):
            i = int(bad.nonzero()[0, 0])
            raise IntervError(
                f"answer position {int(self.answer_positions[i])} of pair {i} is outside the "
                f"prompt (valid positions 0..{pos - 1})"
            )
        rows = torch.arange(batch)
        if not bool(self.attention_mask[rows, self.answer_positions].all()):
            i = int((~self.attention_mask[rows, self.answer_positions]).nonzero()[0, 0])
            raise IntervError(
                f"answer position {int(self.answer_positions[i])} of pair {i} is a padding token"
            )

    @property
    def n_pairs(self) -> int:
        """Number of prompt pairs (the batch size)."""
        return int(self.clean_tokens.shape[0])

    @property
    def n_positions(self) -> int:
        """Padded sequence length."""
        return int(self.clean_tokens.shape[1])

    def answer_query_positions(self) -> tuple[int, ...]:
        """Query positions (for :func:`interv.concentration`) that are the answer positions.

        Concentration counts query positions from each prompt's first real token, the
        engine counts answer positions in the padded tensor. ``(-1,)`` (the last real
        token) is returned when every answer position is its prompt's last real token;
        ``(p,)`` when every prompt is right-padded and answered at the same position ``p``.

        Raises:
            IntervError: neither holds (then pass explicit query positions).
        """
        rows = torch.arange(self.n_pairs)
        real = self.attention_mask
        last_real = real.shape[1] - 1 - real.flip(-1).int().argmax(-1)
        if bool((self.answer_positions == last_real).all()) and self.padding_side == "right":
            return (-1,)
        first_real = real.int().argmax(-1)
        relative = self.answer_positions - first_real
        if bool((relative == relative[0]).all()) and bool(real[rows, self.answer_positions].all()):
            return (int(relative[0]),)
        raise IntervError(
            "the task's answer positions are neither every prompt's last real token nor one "
            f"common position (answer positions {self.answer_positions.tolist()}); pass "
            "query_positions explicitly"
        )

    def select(self, index: torch.Tensor | slice | list[int]) -> TokenizedPairs:
        """The subset of pairs at ``index`` (along the batch axis)."""
        return TokenizedPairs(
            clean_tokens=self.clean_tokens[index],
            corrupted_tokens=self.corrupted_tokens[index],
            attention_mask=self.attention_mask[index],
            answer_positions=self.answer_positions[index],
            target_ids=self.target_ids[index],
            foil_ids=None if self.foil_ids is None else self.foil_ids[index],
            padding_side=self.padding_side,
            name=self.name,
        )
