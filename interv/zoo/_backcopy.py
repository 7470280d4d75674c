"""The backcopy language: a seeded bigram language with copy and recall triggers.

A sentence of this language is ``<bos>`` followed by *words* (vowels and syllables
``a``, ..., ``u``, ``ba``, ``be``, ..., one token each) and three *trigger* tokens.
Each word has a few likely successors, fixed by a seeded bigram table; after a word
comes

- a copy trigger (``~`` or ``*``, each with probability ``p_copy / 2``), after which
  the word *before* the trigger is repeated: ``... ko pa ~ pa ...``;
- the recall trigger ``#`` (probability ``p_recall``). The first ``#`` of a sequence
  *binds* the word before it and is followed by a bigram draw from that word; every
  later ``#`` is followed by the bound word: ``... gu # fi ... lo # gu ...``;
- otherwise a successor drawn from the bigram table.

The first word after ``<bos>`` is uniform over the words. So the next token after a
word depends on that word alone (attention is of no use there), while after a trigger
it is fixed by an earlier token: the previous one (copy) or the word bound by the first
``#`` (recall). Heads that serve the triggers are useful only at the few trigger
positions; where they have nothing to do they learn to park their attention on
``<bos>``: an attention sink.

Vocabulary (ids in this order): ``<bos>`` (0), ``<pad>`` (1), the ``n_words`` words,
``~``, ``*``, ``#``; ``d_vocab = n_words + 5``. Everything here is deterministic given
a ``torch.Generator``; torch is imported on first use.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import TYPE_CHECKING

from interv.errors import IntervError

if TYPE_CHECKING:
    import torch
    from transformers import PreTrainedTokenizerFast

__all__ = [
    "BOS_ID",
    "COPY_TRIGGERS",
    "RECALL_TRIGGER",
    "WORD_FORMS",
    "BackcopyBatch",
    "BackcopyLanguage",
    "backcopy_batch",
    "bigram_table",
    "build_tokenizer",
    "vocabulary",
]

BOS_ID = 0
PAD_ID = 1
FIRST_WORD_ID = 2
WORD_FORMS: tuple[str, ...] = tuple("aeiou") + tuple(
    c + v for c in "bdfgklmnprstvz" for v in "aeiou"
)
"""The 75 available word forms (vowel, then consonant + vowel), in id order. The first
is ``a``, which transformer-lens encodes to probe a tokenizer."""
COPY_TRIGGERS: tuple[str, ...] = ("~", "*")
RECALL_TRIGGER = "#"


@dataclass(frozen=True)
class BackcopyLanguage:
    """Parameters of the backcopy language (see the module docstring).

    Attributes:
        n_words: number of words, 2..75.
        successors: number of words that may follow each word, 1..n_words.
        p_copy: probability (0..1) that a copy trigger follows a word.
        p_recall: probability (0..1) that the recall trigger follows a word;
            ``p_copy + p_recall < 1``.
        table_seed: seed of the ``torch.Generator`` that draws the bigram table.
    """

    n_words: int
    successors: int
    p_copy: float
    p_recall: float
    table_seed: int

    def __post_init__(self) -> None:
        if not 2 <= self.n_words <= len(WORD_FORMS):
            raise IntervError(f"n_words must be in 2..{len(WORD_FORMS)}; got {self.n_words!r}")
        if not 1 <= self.successors <= self.n_words:
            raise IntervError(
                f"successors must be in 1..n_words ({self.n_words}); got {self.successors!r}"
            )
        if not (self.p_copy >= 0 and self.p_recall >= 0 and self.p_copy + self.p_recall < 1):
            raise IntervError(
                "p_copy and p_recall must be probabilities >= 0 with p_copy + p_recall < 1; got "
                f"p_copy={self.p_copy!r}, p_recall={self.p_recall!r}"
            )

    @property
    def d_vocab(self) -> int:
        """Vocabulary size: ``<bos>``, ``<pad>``, the words and the three triggers."""
        return self.n_words + 2 + len(COPY_TRIGGERS) + 1

    @property
    def copy_ids(self) -> tuple[int, ...]:
        """Token ids of the copy triggers."""
        first = FIRST_WORD_ID + self.n_words
        return tuple(range(first, first + len(COPY_TRIGGERS)))

    @property
    def recall_id(self) -> int:
        """Token id of the recall trigger."""
        return self.d_vocab - 1


def vocabulary(language: BackcopyLanguage) -> dict[str, int]:
    """Token string -> id, in id order (see the module docstring)."""
    tokens = ["<bos>", "<pad>", *WORD_FORMS[: language.n_words], *COPY_TRIGGERS, RECALL_TRIGGER]
    return {token: index for index, token in enumerate(tokens)}


def build_tokenizer(language: BackcopyLanguage) -> PreTrainedTokenizerFast:
    """The language's word-level tokenizer (``WordLevel`` + ``WhitespaceSplit``).

    ``<bos>`` doubles as the end-of-sequence token, so the bridge adds no token of its
    own; tokens outside the vocabulary are rejected (no ``<unk>``).
    """
    # transformers is heavy and only builds the tokenizer: imported here, on use
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    backend = Tokenizer(models.WordLevel(vocab=vocabulary(language), unk_token=None))
    backend.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    return PreTrainedTokenizerFast(
        tokenizer_object=backend, bos_token="<bos>", eos_token="<bos>", pad_token="<pad>"
    )


def bigram_table(language: BackcopyLanguage) -> torch.Tensor:
    """``[n_words, n_words]`` float64 bigram probabilities between words (rows sum to 1).

    Row ``i`` puts weight on ``successors`` words drawn without replacement, each weight
    ``u + 0.2`` (``u`` uniform in [0, 1)) normalized to sum 1; all drawn from
    ``torch.Generator(table_seed)``. A fresh copy on every call (the draw is cached).
    """
    return _bigram_table(language).clone()


@functools.cache
def _bigram_table(language: BackcopyLanguage) -> torch.Tensor:
    import torch  # on use: zoo.card() imports this module and stays torch-free

    generator = torch.Generator().manual_seed(language.table_seed)
    n, k = language.n_words, language.successors
    table = torch.zeros(n, n, dtype=torch.float64)
    for row in range(n):
        successors = torch.randperm(n, generator=generator)[:k]
        weights = torch.rand(k, generator=generator, dtype=torch.float64) + 0.2
        table[row, successors] = weights / weights.sum()
    return table


@dataclass(frozen=True, eq=False)
class BackcopyBatch:
    """A batch of backcopy sequences and the query positions of each kind.

    Query position ``t`` predicts token ``t + 1``.

    Attributes:
        tokens: ``[batch, pos]`` int64 token ids; ``tokens[:, 0]`` is ``<bos>``.
        language: the language the tokens were drawn from.
    """

    tokens: torch.Tensor
    language: BackcopyLanguage

    @property
    def positions(self) -> torch.Tensor:
        """``[1, pos]`` position indices, for broadcasting against ``[batch, pos]``."""
        import torch  # on use: zoo.card() imports this module and stays torch-free

        return torch.arange(self.tokens.shape[1]).unsqueeze(0)

    @property
    def copy_mask(self) -> torch.Tensor:
        """``[batch, pos]`` bool, True at copy triggers: the next token is the previous one."""
        import torch  # on use: zoo.card() imports this module and stays torch-free

        return torch.isin(self.tokens, torch.tensor(self.language.copy_ids))

    @property
    def recall_trigger_mask(self) -> torch.Tensor:
        """``[batch, pos]`` bool, True at every recall trigger ``#``."""
        return self.tokens == self.language.recall_id

    @property
    def recall_mask(self) -> torch.Tensor:
        """``[batch, pos]`` bool, True at a ``#`` after an earlier ``#``: the next token is
        the word bound by the first ``#``."""
        triggers = self.recall_trigger_mask
        return triggers & (triggers.cumsum(dim=1) > 1)

    @property
    def word_mask(self) -> torch.Tensor:
        """``[batch, pos]`` bool, True at words: the next token depends on this word alone."""
        first = FIRST_WORD_ID
        return (self.tokens >= first) & (self.tokens < first + self.language.n_words)

    @property
    def earlier_recall_keys(self) -> torch.Tensor:
        """``[batch, query_pos, key_pos]`` bool, True at the ``#`` keys before each query."""
        import torch  # on use: zoo.card() imports this module and stays torch-free

        n_ctx = self.tokens.shape[1]
        earlier = torch.ones(n_ctx, n_ctx, dtype=torch.bool).tril(diagonal=-1)
        return earlier[None] & self.recall_trigger_mask[:, None, :]

    def next_token_distribution(self) -> torch.Tensor:
        """``[batch, pos, d_vocab]`` float64: the language's distribution of token ``t + 1``
        given tokens ``0..t`` (defined for every ``t``; the last position's is what would
        come next). Its cross-entropy on the sampled tokens is the optimal loss."""
        import torch  # on use: zoo.card() imports this module and stays torch-free

        language = self.language
        tokens = self.tokens
        batch, n_ctx = tokens.shape
        table = bigram_table(language)
        words = slice(FIRST_WORD_ID, FIRST_WORD_ID + language.n_words)
        word_index = (tokens - FIRST_WORD_ID).clamp(0, language.n_words - 1)
        previous = torch.cat([tokens[:, :1], tokens[:, :-1]], dim=1)
        previous_index = (previous - FIRST_WORD_ID).clamp(0, language.n_words - 1)

        after_word = torch.zeros(batch, n_ctx, language.d_vocab, dtype=torch.float64)
        after_word[..., words] = (1 - language.p_copy - language.p_recall) * table[word_index]
        after_word[..., list(language.copy_ids)] = language.p_copy / len(language.copy_ids)
        after_word[..., language.recall_id] = language.p_recall
        first_recall = torch.zeros_like(after_word)
        first_recall[..., words] = table[previous_index]
        bound = torch.gather(
            previous, 1, self.recall_trigger_mask.to(torch.int64).argmax(dim=1)[:, None]
        )
        determined = torch.where(self.copy_mask, previous, bound.expand_as(tokens))
        one_hot = torch.nn.functional.one_hot(determined, language.d_vocab).to(torch.float64)
        start = torch.zeros(language.d_vocab, dtype=torch.float64)
        start[words] = 1 / language.n_words

        distribution = torch.where(self.word_mask[..., None], after_word, one_hot)
        first = self.recall_trigger_mask & ~self.recall_mask
        distribution = torch.where(first[..., None], first_recall, distribution)
        return torch.where((tokens == BOS_ID)[..., None], start, distribution)


def backcopy_batch(
    language: BackcopyLanguage, n_sequences: int, n_ctx: int, *, generator: torch.Generator
) -> BackcopyBatch:
    """``n_sequences`` sequences of ``n_ctx`` tokens (no padding) drawn from ``language``.

    Per position, in this order, every sequence draws from ``generator``: the bigram
    successor of its current word, a uniform number deciding on a trigger, the copy
    trigger's kind, and a bigram successor of the previous word (used after a first
    ``#``); draws that a sequence does not need are discarded, so the stream of draws
    depends only on ``n_sequences`` and ``n_ctx``.
    """
    import torch  # on use: zoo.card() imports this module and stays torch-free

    if n_sequences < 1:
        raise IntervError(f"n_sequences must be >= 1; got {n_sequences}")
    if n_ctx < 3:
        raise IntervError(f"n_ctx must be >= 3 (<bos>, a word, a successor); got {n_ctx}")
    table = bigram_table(language)
    n_words = language.n_words
    copy_ids = torch.tensor(language.copy_ids)
    tokens = torch.zeros(n_sequences, n_ctx, dtype=torch.int64)
    tokens[:, 0] = BOS_ID
    tokens[:, 1] = FIRST_WORD_ID + torch.randint(n_words, (n_sequences,), generator=generator)
    bound = torch.full((n_sequences,), -1, dtype=torch.int64)  # word bound by the first '#'
    for t in range(1, n_ctx - 1):
        current, previous = tokens[:, t], tokens[:, t - 1]
        is_word = (current >= FIRST_WORD_ID) & (current < FIRST_WORD_ID + n_words)
        successor = FIRST_WORD_ID + torch.multinomial(
            table[(current - FIRST_WORD_ID).clamp(0, n_words - 1)], 1, generator=generator
        ).squeeze(1)
        draw = torch.rand(n_sequences, generator=generator, dtype=torch.float64)
        copy_kind = copy_ids[torch.randint(len(copy_ids), (n_sequences,), generator=generator)]
        after_previous = FIRST_WORD_ID + torch.multinomial(
            table[(previous - FIRST_WORD_ID).clamp(0, n_words - 1)], 1, generator=generator
        ).squeeze(1)

        is_copy = torch.isin(current, copy_ids)
        is_recall = current == language.recall_id
        following = successor
        following = torch.where(is_word & (draw < language.p_copy), copy_kind, following)
        recall_drawn = (draw >= language.p_copy) & (draw < language.p_copy + language.p_recall)
        following = torch.where(is_word & recall_drawn, language.recall_id, following)
        following = torch.where(is_copy, previous, following)
        following = torch.where(is_recall & (bound < 0), after_previous, following)
        following = torch.where(is_recall & (bound >= 0), bound, following)
        bound = torch.where(is_recall & (bound < 0), previous, bound)
        tokens[:, t + 1] = following
    return BackcopyBatch(tokens=tokens, language=language)
