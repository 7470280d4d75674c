"""Tokenized clean/corrupted prompt pairs: the tensor form every runner consumes.

A :class:`TokenizedPairs` is what :meth:`interv.PromptPairs.tokenize` returns and what
the intervention engine reads. It can also be built directly from token tensors
(for models without a tokenizer, or for hand-made inputs).

A tokenized task knows what it fits: ``d_vocab`` (ids must be below it) and ``n_ctx``
(no prompt may be longer), set by :meth:`~interv.PromptPairs.tokenize` from the model and
checked when the value is built; padding is its mask and side. A task built by hand
without them is checked against a model by :meth:`TokenizedPairs.fitted` when it meets
one (every run does). :func:`check_token_ids` and :func:`check_context` are the one check
of each kind, also used by the forward primitive for every batch it runs.
"""

from __future__ import annotations

import dataclasses
import hashlib
from dataclasses import dataclass
from typing import Any

import torch

from interv.errors import IntervError

__all__ = [
    "TokenizedPairs",
    "answer_offsets",
    "answer_query_position",
    "check_context",
    "check_distinct",
    "check_token_ids",
    "pairs_fingerprint",
    "prompts_fingerprint",
]

PADDING_SIDES = ("right", "left")


def check_token_ids(tokens: torch.Tensor, d_vocab: int | None, what: str) -> None:
    """Raise :class:`IntervError` unless ``tokens`` are integer ids in ``0..d_vocab - 1``.

    ``d_vocab`` None checks only that the ids are non-negative integers. ``what`` names the
    tensor (``"clean_tokens"``); the message names the first bad id and where it is.
    """
    if not isinstance(tokens, torch.Tensor) or tokens.is_floating_point() or tokens.is_complex():
        kind = tokens.dtype if isinstance(tokens, torch.Tensor) else type(tokens).__name__
        raise IntervError(f"{what} must be an integer tensor of token ids; got {kind}")
    if tokens.dtype == torch.bool:
        raise IntervError(f"{what} must be an integer tensor of token ids; got torch.bool")
    if tokens.numel() == 0:
        return
    bad = tokens < 0
    if d_vocab is not None:
        bad = bad | (tokens >= d_vocab)
    if bool(bad.any()):
        where = tuple(int(i) for i in bad.nonzero()[0])
        at = f" at index {where}" if len(where) > 1 else f" at {where[0]}"
        allowed = "ids are >= 0" if d_vocab is None else f"the vocabulary has ids 0..{d_vocab - 1}"
        raise IntervError(
            f"{what}: token id {int(tokens[where])}{at} is not a token of the model; {allowed}"
        )


def check_context(lengths: torch.Tensor, n_ctx: int | None, what: str) -> None:
    """Raise :class:`IntervError` if a prompt of ``lengths`` (real tokens per prompt,
    ``[batch]``) is longer than the model's context ``n_ctx`` (None: no limit known)."""
    if n_ctx is None or lengths.numel() == 0:
        return
    longest = int(lengths.max())
    if longest > n_ctx:
        i = int(lengths.argmax())
        raise IntervError(
            f"{what} {i} has {longest} tokens, longer than the model's context of "
            f"n_ctx={n_ctx} tokens; shorten it (interv never truncates a prompt)"
        )


def prompts_fingerprint(tokens: torch.Tensor, mask: torch.Tensor) -> str:
    """First 16 hex digits of the SHA-256 of each prompt's real token ids, in order.

    Padding (either side, any pad id) does not enter it, so a task and the concentration
    computed on its clean prompts share it. Results carry it; every join of two results
    compares it.
    """
    digest = hashlib.sha256()
    for row, real in zip(tokens.to("cpu", torch.int64), mask.to("cpu"), strict=True):
        ids = row[real]
        digest.update(len(ids).to_bytes(8, "little"))
        digest.update(ids.numpy().astype("<i8").tobytes())
    return digest.hexdigest()[:16]


def pairs_fingerprint(
    corrupted: torch.Tensor,
    mask: torch.Tensor,
    answer_positions: torch.Tensor,
    target_ids: torch.Tensor,
    foil_ids: torch.Tensor | None,
) -> str:
    """First 16 hex digits of the SHA-256 of each pair's other half, in order: the corrupted
    prompt's real token ids, the answer position counted from the prompt's first real token,
    the target id and the foil id (-1 without foils). Padding does not enter it."""
    digest = hashlib.sha256()
    first_real = mask.to("cpu").int().argmax(-1)
    foils = [-1] * len(target_ids) if foil_ids is None else foil_ids.tolist()
    rows = zip(
        corrupted.to("cpu", torch.int64),
        mask.to("cpu"),
        (answer_positions.to("cpu") - first_real).tolist(),
        target_ids.tolist(),
        foils,
        strict=True,
    )
    for row, real, answer, target, foil in rows:
        ids = row[real]
        digest.update(len(ids).to_bytes(8, "little"))
        digest.update(ids.numpy().astype("<i8").tobytes())
        digest.update(repr((int(answer), int(target), int(foil))).encode())
    return digest.hexdigest()[:16]


def answer_offsets(
    answer_positions: torch.Tensor | tuple[int, ...],
    lengths: torch.Tensor | tuple[int, ...],
    n_positions: int,
    padding_side: str,
) -> tuple[int, ...]:
    """Answer positions of the padded tensor (``answer_positions``) counted from each prompt's
    first real token instead: prompts of ``lengths`` real tokens, padded on ``padding_side``
    to ``n_positions`` (a right-padded prompt starts at 0, a left-padded one at
    ``n_positions - length``). The one translation between the engine's positions and
    concentration's, used by the task and by a report that has only a result's scope."""
    firsts = (
        (0,) * len(lengths) if padding_side == "right" else (n_positions - int(n) for n in lengths)
    )
    return tuple(int(p) - first for p, first in zip(answer_positions, firsts, strict=True))


def answer_query_position(offsets: tuple[int, ...], lengths: tuple[int, ...]) -> int | None:
    """The one concentration query position that is every prompt's answer position: -1 when
    each answer (``offsets``, from the first real token) is its prompt's last real token,
    ``p`` when every answer is ``p`` tokens after the first; None when neither holds."""
    if all(offset == int(n) - 1 for offset, n in zip(offsets, lengths, strict=True)):
        return -1
    if all(offset == offsets[0] for offset in offsets):
        return offsets[0]
    return None


def check_distinct(tokens: torch.Tensor, mask: torch.Tensor, what: str) -> None:
    """Refuse a repeated prompt (the same real token ids twice): repeated prompts are not
    independent samples, and every bootstrap over prompts would count them as such. The
    message names the first repeat and what it repeats."""
    seen: dict[bytes, int] = {}
    for i, (row, real) in enumerate(
        zip(tokens.to("cpu", torch.int64), mask.to("cpu"), strict=True)
    ):
        key = row[real].numpy().tobytes()
        first = seen.setdefault(key, i)
        if first != i:
            raise IntervError(
                f"{what} {i} repeats {what} {first} (the same tokens): repeated prompts are not "
                "independent samples, and every interval over prompts would count them as if "
                "they were; drop the repeats"
            )


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
        resampled: True for a bootstrap resample of a task (:meth:`resample`), whose
            repeated prompts are its point; every other task repeats no prompt.
        d_vocab: the vocabulary size of the model the ids are for (every id is below
            it), or None when not known (a hand-built task; checked by :meth:`fitted`).
        n_ctx: the context length of that model (no prompt is longer), or None.
    """

    clean_tokens: torch.Tensor
    corrupted_tokens: torch.Tensor
    attention_mask: torch.Tensor
    answer_positions: torch.Tensor
    target_ids: torch.Tensor
    foil_ids: torch.Tensor | None = None
    padding_side: str = "right"
    name: str = "custom"
    d_vocab: int | None = None
    n_ctx: int | None = None
    resampled: bool = False

    def __post_init__(self) -> None:
        for field in (
            "clean_tokens",
            "corrupted_tokens",
            "attention_mask",
            "answer_positions",
            "target_ids",
            "foil_ids",
        ):
            value = getattr(self, field)
            if not isinstance(value, torch.Tensor) and not (field == "foil_ids" and value is None):
                raise IntervError(
                    f"{field} must be a torch.Tensor; got {type(value).__name__} (convert it "
                    "with torch.tensor(...))"
                )
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
        if self.answer_positions.is_floating_point() or self.answer_positions.dtype == torch.bool:
            raise IntervError(
                f"answer_positions must be an integer tensor; got {self.answer_positions.dtype}"
            )
        _check_padding(self.attention_mask, self.padding_side)
        for field in ("d_vocab", "n_ctx"):
            value = getattr(self, field)
            if value is not None and (isinstance(value, bool) or not isinstance(value, int)):
                raise IntervError(f"{field} must be an int or None; got {value!r}")
            if value is not None and value < 1:
                raise IntervError(f"{field} must be at least 1; got {value}")
        for field in ("clean_tokens", "corrupted_tokens", "target_ids", "foil_ids"):
            if getattr(self, field) is not None:
                check_token_ids(getattr(self, field), self.d_vocab, field)
        check_context(self.attention_mask.sum(1), self.n_ctx, "prompt pair")
        if not self.resampled:
            check_distinct(self.clean_tokens, self.attention_mask, "clean prompt")
        if self.foil_ids is not None and bool((self.target_ids == self.foil_ids).any()):
            i = int((self.target_ids == self.foil_ids).nonzero()[0, 0])
            raise IntervError(
                f"pair {i} has the same target and foil token (id {int(self.target_ids[i])}); "
                "the logit difference would be 0 by construction"
            )
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
    def shared_positions(self) -> tuple[int, ...]:
        """The positions (of the padded tensor) that are a real token of every prompt."""
        return tuple(int(p) for p in self.attention_mask.all(0).nonzero()[:, 0])

    @property
    def prompts_fingerprint(self) -> str:
        """The fingerprint of the clean prompts (:func:`prompts_fingerprint`)."""
        return prompts_fingerprint(self.clean_tokens, self.attention_mask)

    @property
    def pairs_fingerprint(self) -> str:
        """The fingerprint of the pairs' other half (:func:`pairs_fingerprint`)."""
        return pairs_fingerprint(
            self.corrupted_tokens,
            self.attention_mask,
            self.answer_positions,
            self.target_ids,
            self.foil_ids,
        )

    @property
    def n_positions(self) -> int:
        """Padded sequence length."""
        return int(self.clean_tokens.shape[1])

    @property
    def answer_offsets(self) -> tuple[int, ...]:
        """Each prompt's answer position counted from its first real token (the way
        :func:`interv.concentration` counts query positions), either padding side."""
        return answer_offsets(
            self.answer_positions, self.attention_mask.sum(1), self.n_positions, self.padding_side
        )

    def answer_query_positions(self) -> tuple[int, ...]:
        """Query positions (for :func:`interv.concentration`) that are the answer positions.

        Concentration counts query positions from each prompt's first real token (negative
        ones from its last), the engine counts answer positions in the padded tensor.
        ``(-1,)`` (the last real token) is returned when every answer position is its
        prompt's last real token, either padding side; ``(p,)`` when every prompt is
        answered ``p`` tokens after its first real token.

        Raises:
            IntervError: neither holds (no one query position is every prompt's answer).
        """
        lengths = tuple(int(n) for n in self.attention_mask.sum(1))
        found = answer_query_position(self.answer_offsets, lengths)
        if found is None:
            raise IntervError(
                f"task {self.name!r}: its answer positions, counted from each prompt's first "
                f"real token ({list(self.answer_offsets)}; prompt lengths {list(lengths)}), are "
                "neither every prompt's last real token nor one common position, so no one "
                "concentration query position is every prompt's answer; choose the query "
                "positions yourself: interv.build_report(result, interv.concentration(model, "
                "task, query_positions=[...]))"
            )
        return (found,)

    def resample(self, index: torch.Tensor | list[int]) -> TokenizedPairs:
        """The pairs at ``index``, drawn with replacement (a bootstrap resample): repeated
        prompts are allowed, and the task says so (:attr:`resampled`)."""
        return self.select(index, resampled=True)

    def select(
        self, index: torch.Tensor | slice | list[int], *, resampled: bool = False
    ) -> TokenizedPairs:
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
            d_vocab=self.d_vocab,
            n_ctx=self.n_ctx,
            resampled=resampled or self.resampled,
        )

    def fitted(self, cfg: Any) -> TokenizedPairs:
        """This task, checked against a model's config (``model.cfg``): every id below its
        ``d_vocab``, no prompt longer than its ``n_ctx``, and a task tokenized for another
        vocabulary size refused. Returns the task knowing the model's vocabulary and
        context (itself when it already did).

        Raises:
            IntervError: an id or a prompt that does not fit, or a task tokenized for a
                model with another vocabulary size.
        """
        d_vocab = _config_int(cfg, "d_vocab")
        n_ctx = _config_int(cfg, "n_ctx")
        if self.d_vocab is not None and d_vocab is not None and self.d_vocab != d_vocab:
            raise IntervError(
                f"task {self.name!r} was tokenized for a model with a vocabulary of "
                f"{self.d_vocab} ids, but this model has {d_vocab}; tokenize it for this model"
            )
        if self.n_ctx is not None and n_ctx is not None:
            n_ctx = min(n_ctx, self.n_ctx)
        if (self.d_vocab or d_vocab, self.n_ctx or n_ctx) == (self.d_vocab, self.n_ctx):
            return self
        return dataclasses.replace(self, d_vocab=self.d_vocab or d_vocab, n_ctx=n_ctx)


def _config_int(cfg: Any, name: str) -> int | None:
    value = getattr(cfg, name, None)
    return (
        int(value) if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None
    )


def _check_padding(mask: torch.Tensor, side: str) -> None:
    """Each prompt's real tokens are one run at the ``side`` it is not padded on."""
    lengths = mask.sum(1)
    if bool((lengths == 0).any()):
        i = int((lengths == 0).nonzero()[0, 0])
        raise IntervError(f"prompt pair {i} has no real token; every prompt needs one")
    positions = torch.arange(mask.shape[1])[None, :]
    if side == "right":
        expected = positions < lengths[:, None]
    else:
        expected = positions >= mask.shape[1] - lengths[:, None]
    if not bool((expected == mask).all()):
        i = int((expected != mask).any(1).nonzero()[0, 0])
        raise IntervError(
            f"attention_mask of pair {i} ({mask[i].int().tolist()}) is not {side}-padded: with "
            f"padding_side={side!r} each prompt's real tokens must be one run starting at the "
            + ("first position" if side == "right" else "last position, counted backwards")
        )
