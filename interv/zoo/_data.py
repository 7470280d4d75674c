"""The zoo vocabulary and the induction data: repeated random sequences, random offset.

Zoo models share one word-level vocabulary (ids in this order): ``<bos>`` (id 0, the
BOS token), ``<pad>`` (id 1, padding), then the 62 symbols ``A``..``Z``, ``a``..``z``,
``0``..``9`` (ids 2..63); ``d_vocab`` = 64. A prompt is a whitespace-separated string of
symbols such as ``"Q x 7 k Q x"``; the bridge's ``to_tokens`` prepends ``<bos>``.

An induction sequence is ``<bos>`` followed by a random sequence ``r_1 .. r_m`` of
symbols (drawn independently and uniformly from the 62 symbols) repeated periodically
until the context is full: position ``p >= 1`` holds ``r_{(p - 1) mod m + 1}``. The
*prefix* is the first period (positions ``1..m``), the *copy* everything after it.
The period ``m`` (the repeat offset) is random per sequence, so only an induction
mechanism (find the earlier occurrence of the current token, read the token after it,
at position ``p - m + 1``) predicts the copy; with a fixed offset a positional head
would solve the task and no induction head would form. Within the prefix there is
nothing to copy: the next token is a fresh draw.

Everything here is deterministic given a ``torch.Generator``.
"""

from __future__ import annotations

import string
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch

from interv.errors import IntervError

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerFast

__all__ = [
    "BOS_ID",
    "PAD_ID",
    "SYMBOLS",
    "VOCAB",
    "InductionBatch",
    "build_tokenizer",
    "induction_batch",
]

BOS_ID = 0
PAD_ID = 1
SYMBOLS: tuple[str, ...] = tuple(string.ascii_uppercase + string.ascii_lowercase + string.digits)
# token string -> id, in id order
VOCAB: dict[str, int] = {"<bos>": BOS_ID, "<pad>": PAD_ID} | {
    symbol: index + 2 for index, symbol in enumerate(SYMBOLS)
}
FIRST_SYMBOL_ID = 2


def build_tokenizer() -> PreTrainedTokenizerFast:
    """The zoo's word-level tokenizer (``WordLevel`` + ``WhitespaceSplit``), 64 tokens.

    ``<bos>`` doubles as the end-of-sequence token, so the bridge adds no token of its
    own. Symbols outside the vocabulary are rejected by the tokenizer (no ``<unk>``).
    """
    # transformers is heavy and only builds the tokenizer: imported here, on use
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    backend = Tokenizer(models.WordLevel(vocab=VOCAB, unk_token=None))
    backend.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    return PreTrainedTokenizerFast(
        tokenizer_object=backend, bos_token="<bos>", eos_token="<bos>", pad_token="<pad>"
    )


@dataclass(frozen=True, eq=False)
class InductionBatch:
    """A batch of induction sequences and where each of their parts lies.

    Attributes:
        tokens: ``[batch, pos]`` int64 token ids; ``tokens[:, 0]`` is ``<bos>``.
        prefix_length: ``[batch]`` int64 period ``m``; the prefix fills positions
            ``1..m`` and the copy (positions ``m+1..``) repeats it.
    """

    tokens: torch.Tensor
    prefix_length: torch.Tensor

    @property
    def positions(self) -> torch.Tensor:
        """``[1, pos]`` position indices, for broadcasting against ``[batch, pos]``."""
        return torch.arange(self.tokens.shape[1]).unsqueeze(0)

    @property
    def copy_mask(self) -> torch.Tensor:
        """``[batch, pos]`` bool, True at positions of the copy."""
        return self.positions > self.prefix_length[:, None]

    @property
    def induction_key(self) -> torch.Tensor:
        """``[batch, pos]`` int64: for a copy position, the key an induction head reads.

        That is the position right after the token's most recent earlier occurrence,
        ``p - m + 1``; it holds the correct next token. Undefined (-1) outside the copy.
        """
        key = self.positions - self.prefix_length[:, None] + 1
        return torch.where(self.copy_mask, key, torch.full_like(key, -1))

    @property
    def first_occurrence_mask(self) -> torch.Tensor:
        """``[batch, pos]`` bool, True where the token did not occur at any earlier
        position after ``<bos>`` (there is nothing to copy)."""
        tokens = self.tokens
        same = tokens[:, :, None] == tokens[:, None, :]  # [batch, query_pos, key_pos]
        earlier = torch.ones_like(same[0]).tril(diagonal=-1)
        earlier[:, 0] = False
        return ~(same & earlier).any(dim=-1)

    @property
    def determined_mask(self) -> torch.Tensor:
        """``[batch, pos]`` bool, True at query positions whose next token is fixed by the
        earlier occurrence: copy positions that have a successor and whose token occurs
        exactly once in the prefix (so the earlier occurrence is unambiguous)."""
        tokens = self.tokens
        in_prefix = (self.positions >= 1) & (self.positions <= self.prefix_length[:, None])
        same = tokens[:, :, None] == tokens[:, None, :]
        prefix_count = (same & in_prefix[:, None, :]).sum(dim=-1)
        has_successor = self.positions < tokens.shape[1] - 1
        return self.copy_mask & has_successor & (prefix_count == 1)

    @property
    def fresh_mask(self) -> torch.Tensor:
        """``[batch, pos]`` bool, True at prefix query positions ``1..m-1``: the next token
        is a fresh uniform draw, so top-1 accuracy there is chance (1/62)."""
        return (self.positions >= 1) & (self.positions < self.prefix_length[:, None])


def induction_batch(
    n_sequences: int,
    n_ctx: int,
    *,
    min_prefix: int,
    generator: torch.Generator,
) -> InductionBatch:
    """``n_sequences`` induction sequences of ``n_ctx`` tokens (no padding).

    The period ``m`` is uniform in ``min_prefix .. (n_ctx - 1) // 2``, so that every
    sequence repeats its prefix at least once.
    """
    if n_sequences < 1:
        raise IntervError(f"n_sequences must be >= 1; got {n_sequences}")
    max_prefix = (n_ctx - 1) // 2
    if not 1 <= min_prefix <= max_prefix:
        raise IntervError(
            f"min_prefix must be in 1..{max_prefix} for n_ctx={n_ctx} (the prefix must fit "
            f"twice after <bos>); got {min_prefix}"
        )
    draw = torch.rand(n_sequences, generator=generator)
    prefix_length = min_prefix + (draw * (max_prefix - min_prefix + 1)).long()
    symbols = torch.randint(FIRST_SYMBOL_ID, len(VOCAB), (n_sequences, n_ctx), generator=generator)
    positions = torch.arange(n_ctx).unsqueeze(0)
    source = (positions - 1) % prefix_length[:, None] + 1
    tokens = torch.gather(symbols, 1, source)
    tokens[:, 0] = BOS_ID
    return InductionBatch(tokens=tokens, prefix_length=prefix_length)
