"""MIB's task files, read from a local file as MIB's own loader reads them.

>>> task = from_mib("ioi_test.jsonl", model, task="ioi")           # doctest: +SKIP
>>> task.sentence                                                  # doctest: +SKIP
>>> pairs = task.tokenize(model)                                   # doctest: +SKIP

MIB's circuit-track datasets (the ``mib-bench`` tasks, exported as JSON lines or a JSON
list of rows) hold a clean prompt, counterfactual prompts and the answers in nested fields.
Nothing is downloaded: the file is local and read as data. Field paths are dotted
(``"s2_io_flip_counterfactual.prompt"``); a path may index a list by another field of the
same row (``"choices.label[answerKey]"``, as MIB's multiple-choice tasks store the answer).
Each task's preset says which fields MIB's own loader (``HFEAPDataset``) reads:

- ``ioi``: ``prompt``; ``s2_io_flip_counterfactual.prompt``; target ``" " +
  metadata.indirect_object``, foil ``" " + metadata.subject``;
- ``mcqa``, ``arc-easy``, ``arc-challenge``: ``prompt``; ``symbol_counterfactual.prompt``;
  the answer's label ``choices.label[answerKey]`` and the counterfactual's;
- ``arithmetic`` / ``arithmetic_addition`` (operator ``+``) and ``arithmetic_subtraction``
  (operator ``-``): ``prompt``; ``random_counterfactual.prompt``; ``label`` and
  ``random_counterfactual.label`` (as text).

Rows are kept exactly as MIB's ``filter_dataset`` keeps them, before ``n_pairs`` (MIB's
``num_examples``) takes the first rows: IOI rows whose `` indirect_object``, `` subject``
and `` random_c`` have the same token count; multiple-choice rows whose two answer labels
have the same token count; arithmetic rows whose counterfactual and its prompt are not null,
whose operator is the task's, and whose two labels are one token each. The result
(:class:`MIBTask`) counts the rows dropped, per reason. :meth:`MIBTask.tokenize` tokenizes as
MIB does: BOS first, right padding, the answer at the clean prompt's last token, the first
token of each answer; a clean and a corrupted prompt of different token counts are both
right-padded and the corrupted one is read with the clean prompt's attention mask (MIB's
``evaluate_graph`` runs the corrupted batch with the clean batch's mask). Explicit field
paths override a preset's fields (MIB's filter still reads its own).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from interv._checks import as_path, read_text
from interv.errors import IntervError
from interv.tasks.pairs import PromptPairs, _model_vocabulary, _pad, _pad_token_id, _prompt_encoder
from interv.tasks.tokenized import TokenizedPairs

__all__ = ["MIB_TASKS", "MIBTask", "from_mib"]

# task -> (clean, corrupted, target, foil, prefix added to target and foil)
MIB_TASKS: dict[str, tuple[str, str, str, str, str]] = {
    "ioi": (
        "prompt",
        "s2_io_flip_counterfactual.prompt",
        "metadata.indirect_object",
        "metadata.subject",
        " ",
    ),
    "mcqa": (
        "prompt",
        "symbol_counterfactual.prompt",
        "choices.label[answerKey]",
        "symbol_counterfactual.choices.label[symbol_counterfactual.answerKey]",
        "",
    ),
    "arithmetic": (
        "prompt",
        "random_counterfactual.prompt",
        "label",
        "random_counterfactual.label",
        "",
    ),
}
MIB_TASKS["arc-easy"] = MIB_TASKS["arc-challenge"] = MIB_TASKS["mcqa"]
MIB_TASKS["arithmetic_addition"] = MIB_TASKS["arithmetic_subtraction"] = MIB_TASKS["arithmetic"]

_STEP = re.compile(r"^([^.\[\]]+)(?:\[([^\[\]]+)\])?$")


def _get(row: Mapping[str, Any], path: str, where: str) -> Any:
    """The value at a dotted ``path`` of ``row`` (a ``[field]`` step indexes by another
    field of the row, itself a dotted path)."""
    value: Any = row
    for step in _split(path):
        match = _STEP.match(step)
        if match is None:
            raise IntervError(f"bad field path {path!r} (step {step!r})")
        key, index = match[1], match[2]
        if not isinstance(value, Mapping) or key not in value:
            raise IntervError(f"{where}: no field {path!r} (missing {key!r})")
        value = value[key]
        if index is not None:
            position = _get(row, index, where)
            if isinstance(position, str) and isinstance(value, list) and position.isdigit():
                position = int(position)
            if isinstance(position, bool) or not isinstance(position, int | str):
                raise IntervError(f"{where}: {index!r} must be an index; got {position!r}")
            try:
                value = value[position]
            except (IndexError, KeyError, TypeError):
                raise IntervError(
                    f"{where}: {path!r}: {position!r} is not an index of {value!r}"
                ) from None
    return value


def _split(path: str) -> list[str]:
    """Dotted steps, dots inside ``[...]`` kept."""
    steps, depth, current = [], 0, ""
    for char in path:
        depth += {"[": 1, "]": -1}.get(char, 0)
        if char == "." and depth == 0:
            steps.append(current)
            current = ""
        else:
            current += char
    return [*steps, current]


def _rows(path: Path) -> list[tuple[str, Any]]:
    text = read_text(path, "MIB task file")
    stripped = text.lstrip()
    if stripped.startswith("["):
        try:
            data = json.loads(text)
        except json.JSONDecodeError as error:
            raise IntervError(f"{path}: not valid JSON ({error})") from None
        return [(f"{path}: row {i}", row) for i, row in enumerate(data)]
    rows = []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            rows.append((f"{path}: line {number}", json.loads(line)))
        except json.JSONDecodeError as error:
            raise IntervError(f"{path}: line {number} is not valid JSON ({error})") from None
    return rows


def _n_tokens(tokenizer: Any, text: str) -> int:
    return len(tokenizer(text, add_special_tokens=False)["input_ids"])


def _mib_drop(task: str, row: Mapping[str, Any], tokenizer: Any, where: str) -> str | None:
    """Why MIB's ``filter_dataset`` drops ``row`` (None: kept)."""
    if task == "ioi":
        counts = {
            _n_tokens(tokenizer, f" {_get(row, f'metadata.{key}', where)}")
            for key in ("indirect_object", "subject", "random_c")
        }
        if len(counts) > 1:
            return "indirect_object, subject and random_c of different token counts"
        return None
    if task in ("mcqa", "arc-easy", "arc-challenge"):
        answer = str(_get(row, "choices.label[answerKey]", where))
        other = str(
            _get(row, "symbol_counterfactual.choices.label[symbol_counterfactual.answerKey]", where)
        )
        if _n_tokens(tokenizer, answer) != _n_tokens(tokenizer, other):
            return "answer labels of different token counts"
        return None
    operator = "-" if task == "arithmetic_subtraction" else "+"
    if _n_tokens(tokenizer, str(_get(row, "label", where))) != 1:
        return "label not one token"
    counterfactual = _get(row, "random_counterfactual", where)
    if counterfactual is None:
        return "random_counterfactual is null"
    if _get(row, "random_counterfactual.prompt", where) is None:
        return "random_counterfactual.prompt is null"
    if _get(row, "operator", where) != operator:
        return f"operator is not {operator!r}"
    if _n_tokens(tokenizer, str(_get(row, "random_counterfactual.label", where))) != 1:
        return "random_counterfactual.label not one token"
    return None


@dataclass(frozen=True)
class MIBTask:
    """A MIB task file's rows kept as MIB's loader keeps them.

    Attributes:
        pairs: the kept rows as :class:`~interv.tasks.PromptPairs` (answers as text; MIB
            scores their first token: :meth:`tokenize`).
        n_rows: the rows the file holds.
        dropped: ``(reason, count)`` per reason MIB's ``filter_dataset`` dropped rows for.
        n_cut: kept rows left out by ``n_pairs`` (MIB's ``num_examples``).
        source: the file's name.
    """

    pairs: PromptPairs
    n_rows: int
    dropped: tuple[tuple[str, int], ...]
    n_cut: int
    source: str

    @property
    def n_pairs(self) -> int:
        """The prompt pairs kept (after the filter and ``n_pairs``)."""
        return self.pairs.n_pairs

    @property
    def sentence(self) -> str:
        """How many rows were kept, dropped and why."""
        n_dropped = sum(count for _, count in self.dropped)
        reasons = "; ".join(f"{count}: {reason}" for reason, count in self.dropped)
        text = (
            f"{self.n_pairs} prompt pairs from the {self.n_rows} rows of {self.source}: "
            f"{n_dropped} dropped as MIB's filter_dataset drops them"
            + (f" ({reasons})" if reasons else "")
        )
        if self.n_cut:
            text += f", {self.n_cut} more left out by n_pairs (MIB's num_examples)"
        return text

    def tokenize(self, model_or_tokenizer: Any) -> TokenizedPairs:
        """The pairs as MIB's evaluation tokenizes them (module docstring): BOS first, right
        padding to the longest prompt, both runs read with the clean prompt's attention
        mask, the answer at the clean prompt's last token, each answer's first token.

        Where a corrupted prompt is longer than its clean one, its tokens past the clean
        prompt's length are masked (as MIB's clean mask masks them; MIB's own run fails where
        a batch's corrupted width exceeds its clean width).
        """
        tokenizer, encode = _prompt_encoder(model_or_tokenizer, prepend_bos=True)
        clean = [encode(text) for text in self.pairs.clean]
        corrupted = [encode(text) for text in self.pairs.corrupted]
        width = max(len(ids) for ids in (*clean, *corrupted))
        pad = _pad_token_id(tokenizer)
        lengths = torch.tensor([len(ids) for ids in clean])

        def padded(rows: list[torch.Tensor]) -> torch.Tensor:
            out = _pad(rows, pad, "right")
            extra = torch.full((len(rows), width - out.shape[1]), pad, dtype=out.dtype)
            return torch.cat([out, extra], 1)

        def first_ids(field: str, texts: tuple[str, ...]) -> torch.Tensor:
            ids = []
            for i, text in enumerate(texts):
                tokens = tokenizer(text, add_special_tokens=False)["input_ids"]
                if not tokens:
                    raise IntervError(f"pair {i}: {field} {text!r} has no token")
                ids.append(tokens[0])
            return torch.tensor(ids, dtype=torch.int64)

        n_ctx = (
            int(model_or_tokenizer.cfg.n_ctx) if hasattr(model_or_tokenizer, "to_tokens") else None
        )
        foils = self.pairs.foils
        return TokenizedPairs(
            clean_tokens=padded(clean),
            corrupted_tokens=padded(corrupted),
            attention_mask=torch.arange(width)[None, :] < lengths[:, None],
            answer_positions=lengths - 1,
            target_ids=first_ids("target", self.pairs.targets),
            foil_ids=None if foils is None else first_ids("foil", foils),
            padding_side="right",
            name=self.pairs.name,
            d_vocab=_model_vocabulary(model_or_tokenizer),
            n_ctx=n_ctx,
        )


def from_mib(
    path: str | Path,
    model: Any = None,
    *,
    task: str | None = None,
    clean: str | None = None,
    corrupted: str | None = None,
    target: str | None = None,
    foil: str | None = None,
    prefix: str | None = None,
    n_pairs: int | None = None,
    name: str | None = None,
) -> MIBTask:
    """Read a local MIB task file (JSON lines, or a JSON list of rows) as MIB's loader does.

    Args:
        path: the file.
        model: the model (a ``TransformerBridge``) or its Hugging Face tokenizer: MIB's
            filter keeps rows by their token counts. Needed with a ``task`` preset.
        task: a preset of :data:`MIB_TASKS` (``"ioi"``, ``"mcqa"``, ``"arc-easy"``,
            ``"arc-challenge"``, ``"arithmetic"``, ``"arithmetic_addition"``,
            ``"arithmetic_subtraction"``), or None to give every field path (no filter).
        clean, corrupted, target, foil: dotted field paths (module docstring); each
            overrides the preset's.
        prefix: text put before the target and the foil (``" "`` for IOI's names).
        n_pairs: the first ``n_pairs`` rows kept by the filter (MIB's ``num_examples``).
        name: the task's name (default: the preset, else the file's stem).

    Returns:
        :class:`MIBTask`: the kept pairs, the rows dropped per reason, and
        :meth:`MIBTask.tokenize`.
    """
    path = as_path(path, "MIB task file")
    if task is not None and task not in MIB_TASKS:
        raise IntervError(f"unknown MIB task {task!r}; presets: {sorted(MIB_TASKS)}")
    preset = MIB_TASKS[task] if task is not None else (None,) * 5
    given = (clean, corrupted, target, foil, prefix)
    fields = [g if g is not None else default for g, default in zip(given, preset, strict=True)]
    for label, value in zip(("clean", "corrupted", "target"), fields[:3], strict=True):
        if value is None:
            raise IntervError(f"give task= (one of {sorted(MIB_TASKS)}) or the {label} field path")
    clean_path, corrupted_path, target_path, foil_path, lead = fields
    lead = lead or ""
    bad_count = isinstance(n_pairs, bool) or not isinstance(n_pairs, int) or n_pairs < 1
    if n_pairs is not None and bad_count:
        raise IntervError(f"n_pairs must be a positive int; got {n_pairs!r}")
    tokenizer = None
    if task is not None:
        if model is None:
            raise IntervError(
                f"MIB's loader keeps {task} rows by their token counts (filter_dataset): give "
                "the model or its tokenizer, from_mib(path, model, task=...)"
            )
        tokenizer, _ = _prompt_encoder(model, prepend_bos=False)
    rows = _rows(path)
    if not rows:
        raise IntervError(f"{path} holds no rows")
    dropped: dict[str, int] = {}
    kept = []
    for where, row in rows:
        if not isinstance(row, Mapping):
            raise IntervError(f"{where} is not a JSON object")
        reason = None if task is None else _mib_drop(task, row, tokenizer, where)
        if reason is None:
            kept.append((where, row))
        else:
            dropped[reason] = dropped.get(reason, 0) + 1
    n_cut = 0
    if n_pairs is not None:
        n_cut = max(0, len(kept) - n_pairs)
        kept = kept[:n_pairs]
    if not kept:
        raise IntervError(
            f"{path}: every one of its {len(rows)} rows is dropped by MIB's filter "
            f"({'; '.join(f'{n}: {r}' for r, n in dropped.items())})"
        )
    cleans, corrupteds, targets, foils = [], [], [], []
    for where, row in kept:
        for store, field in ((cleans, clean_path), (corrupteds, corrupted_path)):
            text = _get(row, field, where)
            if not isinstance(text, str):
                raise IntervError(f"{where}: {field!r} must be text; got {text!r}")
            store.append(text)
        targets.append(lead + str(_get(row, target_path, where)))
        if foil_path is not None:
            foils.append(lead + str(_get(row, foil_path, where)))
    pairs = PromptPairs(
        clean=cleans,
        corrupted=corrupteds,
        targets=targets,
        foils=foils if foil_path is not None else None,
        name=name or task or path.stem,
        description=f"MIB task file {path.name}" + (f" ({task} fields)" if task else ""),
    )
    return MIBTask(pairs, len(rows), tuple(dropped.items()), n_cut, path.name)
