"""Clean/corrupted prompt pairs with a target and a foil: the text form of a task.

A causal experiment compares a model on a *clean* prompt, where it should produce the
*target* token next, with a *corrupted* prompt that differs in the one piece of
information the behaviour depends on (for indirect-object identification: which name
was repeated). The *foil* is the competing answer, so ``logit(target) - logit(foil)``
measures the behaviour. Clean and corrupted prompts of a pair must have the same token
length, so that activations can be patched position by position.

:class:`PromptPairs` holds the strings; :meth:`PromptPairs.tokenize` turns them into a
:class:`~interv.tasks.tokenized.TokenizedPairs` for one model's tokenizer, which is
where everything that depends on the tokenizer is checked.

JSONL format (:meth:`PromptPairs.from_jsonl`, :meth:`PromptPairs.to_jsonl`): one JSON
object per line, one line per pair; blank lines are skipped::

    {"clean": "When Mary and John went to the store, John gave a drink to",
     "corrupted": "When Mary and John went to the store, Paul gave a drink to",
     "target": " Mary", "foil": " John"}

Keys: ``clean``, ``corrupted``, ``target`` (strings, required); ``foil`` (string,
optional, but then on every line or on none); ``answer_position`` (int, optional,
see :class:`PromptPairs`). Other keys are rejected, so a typo does not go unnoticed.

BOS convention of :meth:`PromptPairs.tokenize`: given a ``TransformerBridge``, each
prompt's tokens are the bridge's own ``to_tokens(prompt, prepend_bos=...)``, so they are
exactly what the bridge would run (all prompts go through one batched call; a row whose
end the padded batch leaves in doubt is tokenized alone). Given a bare Hugging Face tokenizer,
interv tokenizes with ``add_special_tokens=False`` and, when ``prepend_bos=True``,
prepends ``tokenizer.bos_token_id`` itself (the SmolLM2 tokenizer adds no BOS of its
own, the bridge does). Targets and foils are always tokenized without BOS.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from interv._checks import as_path, read_text
from interv._fields import convert, converted
from interv._outputs import claim_file
from interv.errors import IntervError
from interv.tasks.tokenized import PADDING_SIDES, TokenizedPairs

__all__ = ["PromptPairs"]

_REQUIRED_KEYS = ("clean", "corrupted", "target")
_OPTIONAL_KEYS = ("foil", "answer_position")


def _as_tuple(value: Any, field: str) -> tuple[Any, ...]:
    if isinstance(value, str) or not isinstance(value, Sequence):
        raise IntervError(
            f"{field} must be a list or tuple (one entry per pair); got {type(value).__name__} "
            f"{value!r:.80}"
        )
    return tuple(value)


def _as_tuple_or_none(value: Any, field: str) -> tuple[Any, ...] | None:
    return None if value is None else _as_tuple(value, field)


@dataclass(frozen=True)
class PromptPairs:
    """Clean/corrupted prompt pairs, each with a target and optionally a foil token.

    Lists are accepted for the sequence fields and stored as tuples.

    Attributes:
        clean: the clean prompts, one per pair.
        corrupted: the corrupted prompts, same count; each must tokenize to as many
            tokens as its clean prompt (checked by :meth:`tokenize`).
        targets: the correct next token after each clean prompt, as text, usually with
            its leading space (``" Mary"``); must be a single token.
        foils: the competing next token per pair (single token), or None when the task
            has no foil (then logit-difference metrics are unavailable).
        answer_positions: per pair, the index of the prompt token whose next-token
            prediction is scored, counted in the prompt's own tokens (BOS and padding
            excluded); negative values count from the end. None means ``-1`` for every
            pair: the prediction right after the prompt.
        name: the task's name, carried into the scope of every result.
        description: one sentence saying what the task tests.
    """

    clean: tuple[str, ...] = converted(_as_tuple)
    corrupted: tuple[str, ...] = converted(_as_tuple)
    targets: tuple[str, ...] = converted(_as_tuple)
    foils: tuple[str, ...] | None = converted(_as_tuple_or_none, default=None)
    answer_positions: tuple[int, ...] | None = converted(_as_tuple_or_none, default=None)
    name: str = "custom"
    description: str = ""

    def __post_init__(self) -> None:
        convert(self)
        n_pairs = len(self.clean)
        if n_pairs == 0:
            raise IntervError("PromptPairs needs at least one pair; got an empty set")
        for field in ("corrupted", "targets", "foils", "answer_positions"):
            value = getattr(self, field)
            if value is not None and len(value) != n_pairs:
                raise IntervError(
                    f"{field} has {len(value)} entries but clean has {n_pairs}; "
                    "every pair needs one of each"
                )
        for field in ("clean", "corrupted", "targets", "foils"):
            for i, text in enumerate(getattr(self, field) or ()):
                if not isinstance(text, str):
                    raise IntervError(f"{field}[{i}] must be a str; got {text!r}")
        for field in ("targets", "foils"):
            for i, text in enumerate(getattr(self, field) or ()):
                if text == "":
                    raise IntervError(f"{field}[{i}] is the empty string; expected one token")
        for i, position in enumerate(self.answer_positions or ()):
            if isinstance(position, bool) or not isinstance(position, int):
                raise IntervError(f"answer_positions[{i}] must be an int; got {position!r}")
        if self.foils is not None:
            for i, (target, foil) in enumerate(zip(self.targets, self.foils, strict=True)):
                if target == foil:
                    raise IntervError(
                        f"pair {i} has the same target and foil {target!r}; the logit "
                        "difference would be 0 by construction"
                    )

    @property
    def n_pairs(self) -> int:
        """Number of prompt pairs."""
        return len(self.clean)

    def __len__(self) -> int:
        return self.n_pairs

    @classmethod
    def from_jsonl(
        cls, path: str | Path, *, name: str | None = None, description: str = ""
    ) -> PromptPairs:
        """Read pairs from a JSONL file (format in the module docstring).

        ``name`` defaults to the file's stem. A missing or unreadable file, bytes that are
        not UTF-8 and malformed lines raise an :class:`~interv.errors.IntervError` naming
        the file, the line number and the key.
        """
        path = as_path(path, "task file")
        text = read_text(path, "task file")
        records: list[tuple[int, dict[str, Any]]] = []
        for line_number, line in enumerate(text.splitlines(), start=1):
            if line.strip():
                records.append((line_number, _parse_jsonl_line(path, line_number, line)))
        if not records:
            raise IntervError(f"{path} holds no pairs; expected one JSON object per line")
        with_foil = [number for number, record in records if "foil" in record]
        if with_foil and len(with_foil) != len(records):
            without = next(number for number, record in records if "foil" not in record)
            raise IntervError(
                f"{path}: line {with_foil[0]} has a 'foil' but line {without} has none; "
                "give a foil on every line or on none"
            )
        with_position = any("answer_position" in record for _, record in records)
        return cls(
            clean=tuple(record["clean"] for _, record in records),
            corrupted=tuple(record["corrupted"] for _, record in records),
            targets=tuple(record["target"] for _, record in records),
            foils=tuple(record["foil"] for _, record in records) if with_foil else None,
            answer_positions=(
                tuple(record.get("answer_position", -1) for _, record in records)
                if with_position
                else None
            ),
            name=path.stem if name is None else name,
            description=description,
        )

    def to_jsonl(self, path: str | Path, *, overwrite: bool = False) -> Path:
        """Write the pairs as JSONL (format in the module docstring); name and
        description are not stored. Returns the path.

        interv's no-overwrite rule: ``path`` must be new, or a file interv wrote there and
        nobody changed since (listed in its folder's ``.interv-files.json``);
        ``overwrite=True`` replaces any regular file. Never written through a link.
        """
        lines = []
        for i in range(self.n_pairs):
            record: dict[str, Any] = {
                "clean": self.clean[i],
                "corrupted": self.corrupted[i],
                "target": self.targets[i],
            }
            if self.foils is not None:
                record["foil"] = self.foils[i]
            if self.answer_positions is not None:
                record["answer_position"] = self.answer_positions[i]
            lines.append(json.dumps(record, ensure_ascii=False) + "\n")
        with claim_file(path, what="task file", by="interv to_jsonl", overwrite=overwrite) as out:
            return out.write_text(Path(path).expanduser().name, "".join(lines))

    def tokenize(
        self,
        model_or_tokenizer: Any,
        *,
        prepend_bos: bool = True,
        padding_side: str = "right",
        n_ctx: int | None = None,
    ) -> TokenizedPairs:
        """Tokenize every pair, check it, and pad the batch.

        Args:
            model_or_tokenizer: a ``TransformerBridge`` (its ``to_tokens`` and
                ``tokenizer`` are used) or a Hugging Face tokenizer.
            prepend_bos: put the BOS token first in every prompt (see the module
                docstring for how, per input kind).
            padding_side: ``"right"`` or ``"left"``. Padding uses the tokenizer's pad
                token (else its EOS, else its BOS); ``attention_mask`` marks it.
            n_ctx: context limit in tokens (BOS included). Default: ``model.cfg.n_ctx``
                for a model; no limit for a bare tokenizer unless given.

        Returns:
            A :class:`TokenizedPairs` with ``[batch, pos]`` tokens and mask, and the
            ``[batch]`` answer positions moved to the padded layout.

        Raises:
            IntervError: clean and corrupted token lengths differ (the pair, both
                texts and both lengths are named); a target or foil is not exactly
                one token (its tokenization is shown); a prompt exceeds ``n_ctx``;
                an answer position lies outside its prompt.
        """
        if padding_side not in PADDING_SIDES:
            raise IntervError(f"padding_side must be one of {PADDING_SIDES}; got {padding_side!r}")
        tokenizer, encode_prompt = _prompt_encoder(model_or_tokenizer, prepend_bos)
        if n_ctx is None and hasattr(model_or_tokenizer, "to_tokens"):
            n_ctx = int(model_or_tokenizer.cfg.n_ctx)
        n_bos = 1 if prepend_bos else 0

        def encode(i: int, field: str, text: str) -> torch.Tensor:
            try:
                return encode_prompt(text)
            except Exception as error:  # tokenizers raises bare Exceptions
                raise _untokenizable(
                    tokenizer, f"pair {i}: {field}", text, error, self.name
                ) from None

        batch_clean = _batch_encoded(model_or_tokenizer, self.clean, prepend_bos)
        batch_corrupted = _batch_encoded(model_or_tokenizer, self.corrupted, prepend_bos)
        clean_ids, corrupted_ids, answer_positions = [], [], []
        for i in range(self.n_pairs):
            clean = batch_clean[i]
            if clean is None:
                clean = encode(i, "clean prompt", self.clean[i])
            corrupted = batch_corrupted[i]
            if corrupted is None:
                corrupted = encode(i, "corrupted prompt", self.corrupted[i])
            if len(clean) != len(corrupted):
                raise IntervError(
                    f"pair {i}: clean prompt {self.clean[i]!r} has {len(clean)} tokens but "
                    f"corrupted prompt {self.corrupted[i]!r} has {len(corrupted)}; the two "
                    "prompts of a pair must have equal token length"
                )
            if n_ctx is not None and len(clean) > n_ctx:
                raise IntervError(
                    f"pair {i}: prompt {self.clean[i]!r} has {len(clean)} tokens, longer "
                    f"than the model's context of n_ctx={n_ctx} tokens"
                )
            n_prompt_tokens = len(clean) - n_bos
            position = -1 if self.answer_positions is None else self.answer_positions[i]
            if not -n_prompt_tokens <= position < n_prompt_tokens:
                raise IntervError(
                    f"pair {i}: answer position {position} is outside the prompt "
                    f"{self.clean[i]!r}, which has {n_prompt_tokens} tokens (valid "
                    f"{-n_prompt_tokens}..{n_prompt_tokens - 1}, BOS not counted)"
                )
            clean_ids.append(clean)
            corrupted_ids.append(corrupted)
            answer_positions.append(n_bos + position % n_prompt_tokens)

        lengths = torch.tensor([len(ids) for ids in clean_ids])
        n_positions = int(lengths.max())
        if padding_side == "left":
            answer_positions_tensor = torch.tensor(answer_positions) + (n_positions - lengths)
        else:
            answer_positions_tensor = torch.tensor(answer_positions)
        pad_id = _pad_token_id(tokenizer) if bool((lengths < n_positions).any()) else 0
        target_ids = _single_token_ids(tokenizer, self, "target", self.targets)
        foil_ids = None
        if self.foils is not None:
            foil_ids = _single_token_ids(tokenizer, self, "foil", self.foils)
            same = (target_ids == foil_ids).nonzero()
            if len(same):
                i = int(same[0, 0])
                raise IntervError(
                    f"pair {i}: target {self.targets[i]!r} and foil {self.foils[i]!r} are "
                    f"different texts but the same token (id {int(target_ids[i])}); the logit "
                    "difference would be 0 by construction"
                )
        return TokenizedPairs(
            clean_tokens=_pad(clean_ids, pad_id, padding_side),
            corrupted_tokens=_pad(corrupted_ids, pad_id, padding_side),
            attention_mask=_pad(
                [torch.ones(len(ids), dtype=torch.bool) for ids in clean_ids],
                False,
                padding_side,
            ),
            answer_positions=answer_positions_tensor,
            target_ids=target_ids,
            foil_ids=foil_ids,
            padding_side=padding_side,
            name=self.name,
            d_vocab=_model_vocabulary(model_or_tokenizer),
            n_ctx=n_ctx,
        )


def _model_vocabulary(model_or_tokenizer: Any) -> int | None:
    """A model's vocabulary size (``cfg.d_vocab``); None for a bare tokenizer, whose model
    may have a larger embedding than its vocabulary."""
    if not hasattr(model_or_tokenizer, "to_tokens"):
        return None
    d_vocab = getattr(model_or_tokenizer.cfg, "d_vocab", None)
    return int(d_vocab) if isinstance(d_vocab, int) and d_vocab > 0 else None


def _parse_jsonl_line(path: Path, line_number: int, line: str) -> dict[str, Any]:
    where = f"{path}, line {line_number}"
    try:
        record = json.loads(line)
    except json.JSONDecodeError as error:
        raise IntervError(f"{where}: not valid JSON ({error.msg})") from error
    if not isinstance(record, dict):
        raise IntervError(f"{where}: expected a JSON object, got {type(record).__name__}")
    allowed = _REQUIRED_KEYS + _OPTIONAL_KEYS
    for key in record:
        if key not in allowed:
            raise IntervError(f"{where}: unknown key {key!r}; allowed keys are {allowed}")
    for key in _REQUIRED_KEYS:
        if key not in record:
            raise IntervError(f"{where}: missing key {key!r}; required keys are {_REQUIRED_KEYS}")
    for key in ("clean", "corrupted", "target", "foil"):
        if key in record and not isinstance(record[key], str):
            raise IntervError(f"{where}: key {key!r} must be a string; got {record[key]!r}")
    position = record.get("answer_position", -1)
    if isinstance(position, bool) or not isinstance(position, int):
        raise IntervError(f"{where}: key 'answer_position' must be an integer; got {position!r}")
    return record


def _prompt_encoder(model_or_tokenizer: Any, prepend_bos: bool) -> tuple[Any, Any]:
    """The tokenizer, and a function mapping a prompt to its 1-D ``[pos]`` token ids."""
    if hasattr(model_or_tokenizer, "to_tokens"):
        model = model_or_tokenizer
        if model.tokenizer is None:
            raise IntervError(
                "the model has no tokenizer; build a TokenizedPairs from token ids instead"
            )

        def encode_with_model(prompt: str) -> torch.Tensor:
            tokens = model.to_tokens(prompt, prepend_bos=prepend_bos, truncate=False)
            return tokens[0].to("cpu", torch.int64)

        return model.tokenizer, encode_with_model

    tokenizer = model_or_tokenizer
    if not callable(tokenizer) or not hasattr(tokenizer, "decode"):
        raise IntervError(
            "tokenize needs a TransformerBridge or a Hugging Face tokenizer; got "
            f"{type(tokenizer).__name__}"
        )
    if prepend_bos and tokenizer.bos_token_id is None:
        raise IntervError(
            "prepend_bos=True but the tokenizer has no BOS token (bos_token_id is None); "
            "pass prepend_bos=False"
        )

    def encode_with_tokenizer(prompt: str) -> torch.Tensor:
        ids = tokenizer(prompt, add_special_tokens=False)["input_ids"]
        if prepend_bos:
            ids = [tokenizer.bos_token_id, *ids]
        return torch.tensor(ids, dtype=torch.int64)

    return tokenizer, encode_with_tokenizer


def _batch_encoded(
    model_or_tokenizer: Any, texts: Sequence[str], prepend_bos: bool
) -> list[torch.Tensor | None]:
    """Each text's 1-D token ids from one batched tokenizer call (one call per prompt costs
    far more than the model on small tasks), equal to what the one-prompt encoder of
    :func:`_prompt_encoder` gives; None for a text the batch cannot pin down, which is then
    encoded alone (and gets its own error if it cannot be encoded)."""
    texts = list(texts)
    if not texts:
        return []
    try:
        if hasattr(model_or_tokenizer, "to_tokens"):
            return _bridge_batch_encoded(model_or_tokenizer, texts, prepend_bos)
        tokenizer = model_or_tokenizer
        head = [tokenizer.bos_token_id] if prepend_bos else []
        rows = tokenizer(texts, add_special_tokens=False)["input_ids"]
        return [torch.tensor(head + list(row), dtype=torch.int64) for row in rows]
    except Exception:  # a text the tokenizer refuses: each text is encoded alone
        return [None] * len(texts)


def _bridge_batch_encoded(
    model: Any, texts: list[str], prepend_bos: bool
) -> list[torch.Tensor | None]:
    """The bridge's own ``to_tokens`` on all texts at once (right-padded), cut back to each
    text's length. A row is kept only when its cut is certain: the length (the text's
    tokens plus the BOS) leaves nothing but padding after it and ends on a token that is
    not the pad token, and the longest text fills the padded width; else None."""
    padded = model.to_tokens(
        texts, prepend_bos=prepend_bos, padding_side="right", truncate=False
    ).to("cpu", torch.int64)
    pad = model.tokenizer.pad_token_id
    n_bos = 1 if prepend_bos else 0
    content = model.tokenizer(texts, add_special_tokens=False)["input_ids"]
    lengths = [len(row) + n_bos for row in content]
    if pad is None or min(lengths) < 1 or max(lengths) != padded.shape[1]:
        return [None] * len(texts)
    length = torch.tensor(lengths)
    inside = torch.arange(padded.shape[1]) < length[:, None]
    certain = ((padded == pad) | inside).all(1) & (
        padded[torch.arange(len(texts)), length - 1] != pad
    )
    return [
        row[:n] if ok else None
        for row, n, ok in zip(padded, lengths, certain.tolist(), strict=True)
    ]


def _unknown_words(tokenizer: Any, text: str) -> list[str] | None:
    """The words of ``text`` missing from a word-level vocabulary, or None if unknown."""
    backend = getattr(tokenizer, "backend_tokenizer", None)
    vocab = tokenizer.get_vocab() if hasattr(tokenizer, "get_vocab") else None
    if backend is None or vocab is None or backend.pre_tokenizer is None:
        return None
    try:
        words = [word for word, _ in backend.pre_tokenizer.pre_tokenize_str(text)]
    except Exception:
        return None
    return list(dict.fromkeys(word for word in words if word not in vocab))


def check_tokenizable(model_or_tokenizer: Any, texts: Sequence[str], what: str = "prompt") -> None:
    """Raise :class:`IntervError` for the first of ``texts`` that the model's tokenizer
    cannot encode, naming its unknown words (e.g. English text for a zoo model, whose
    word-level tokenizer has no unknown token). No model is run."""
    tokenizer, encode = _prompt_encoder(model_or_tokenizer, prepend_bos=False)
    for i, text in enumerate(texts):
        try:
            encode(text)
        except Exception as error:  # tokenizers raises bare Exceptions
            raise _untokenizable(tokenizer, f"{what} {i}", text, error) from None


def _untokenizable(
    tokenizer: Any, label: str, text: str, error: Exception, task_name: str | None = None
) -> IntervError:
    """The error for a text the model's tokenizer cannot encode (e.g. a word-level
    tokenizer without an unknown token, such as the zoo's, meeting an unknown word)."""
    unknown = _unknown_words(tokenizer, text)
    vocab = tokenizer.get_vocab() if hasattr(tokenizer, "get_vocab") else {}
    if unknown:
        examples = ", ".join(repr(t) for t in sorted(vocab, key=vocab.get)[:12] if t.isprintable())
        what = (
            f"its words {unknown[:8]} are not in the tokenizer's vocabulary of {len(vocab)} "
            f"tokens ({examples}, ...), which has no unknown-token fallback"
        )
    else:
        what = f"the tokenizer refused it ({error})"
    hint = ""
    if task_name in ("ioi", "capitals"):
        hint = (
            f"; the built-in task {task_name!r} is English text for a model with a natural-"
            "language tokenizer (e.g. smollm2-135m); zoo models take the task 'induction'"
        )
    return IntervError(f"{label} {text!r} cannot be tokenized: {what}{hint}")


def _single_token_ids(
    tokenizer: Any, pairs: PromptPairs, field: str, texts: tuple[str, ...]
) -> torch.Tensor:
    """``[batch]`` ids of ``texts``, each of which must be exactly one token (no BOS)."""
    try:  # one call for all texts; on failure each alone, for the failing text's error
        batch = tokenizer(list(texts), add_special_tokens=False)["input_ids"] if texts else []
    except Exception:
        batch = None
    ids = []
    for i, text in enumerate(texts):
        try:
            token_ids = (
                batch[i]
                if batch is not None
                else tokenizer(text, add_special_tokens=False)["input_ids"]
            )
        except Exception as error:  # tokenizers raises bare Exceptions
            raise _untokenizable(tokenizer, f"pair {i}: {field}", text, error, pairs.name) from None
        if len(token_ids) != 1:
            pieces = [tokenizer.decode([token_id]) for token_id in token_ids]
            raise IntervError(
                f"{field} {text!r} of pair {i} must be a single token; it tokenizes to "
                f"{len(token_ids)} tokens {pieces}"
            )
        ids.append(token_ids[0])
    return torch.tensor(ids, dtype=torch.int64)


def _pad_token_id(tokenizer: Any) -> int:
    for attribute in ("pad_token_id", "eos_token_id", "bos_token_id"):
        token_id = getattr(tokenizer, attribute, None)
        if token_id is not None:
            return int(token_id)
    raise IntervError(
        "prompts of different lengths need padding, but the tokenizer has no pad, EOS or "
        "BOS token; give it a pad token (tokenizer.pad_token = ...)"
    )


def _pad(sequences: list[torch.Tensor], value: Any, padding_side: str) -> torch.Tensor:
    return torch.nn.utils.rnn.pad_sequence(
        sequences, batch_first=True, padding_value=value, padding_side=padding_side
    )
