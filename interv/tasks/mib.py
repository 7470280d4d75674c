"""MIB's task files, read from a local file as :class:`~interv.tasks.PromptPairs`.

>>> pairs = from_mib("ioi_test.jsonl", task="ioi")               # doctest: +SKIP
>>> pairs = from_mib("rows.json", clean="prompt", corrupted="cf.prompt",
...                  target="label", foil="cf.label")            # doctest: +SKIP

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
- ``arithmetic`` (addition or subtraction): ``prompt``; ``random_counterfactual.prompt``;
  ``label`` and ``random_counterfactual.label`` (as text).

MIB scores the first token of a multi-token answer; interv needs single-token targets and
says so when it tokenizes. Explicit field paths override a preset's.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from interv._checks import as_path, read_text
from interv.errors import IntervError
from interv.tasks.pairs import PromptPairs

__all__ = ["MIB_TASKS", "from_mib"]

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


def from_mib(
    path: str | Path,
    *,
    task: str | None = None,
    clean: str | None = None,
    corrupted: str | None = None,
    target: str | None = None,
    foil: str | None = None,
    prefix: str | None = None,
    n_pairs: int | None = None,
    name: str | None = None,
) -> PromptPairs:
    """Read a local MIB task file (JSON lines, or a JSON list of rows) as prompt pairs.

    Args:
        path: the file.
        task: a preset of :data:`MIB_TASKS` (``"ioi"``, ``"mcqa"``, ``"arc-easy"``,
            ``"arc-challenge"``, ``"arithmetic"``), or None to give every field path.
        clean, corrupted, target, foil: dotted field paths (module docstring); each
            overrides the preset's.
        prefix: text put before the target and the foil (``" "`` for IOI's names).
        n_pairs: the first ``n_pairs`` rows only (as MIB's ``num_examples``).
        name: the task's name (default: the preset, else the file's stem).
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
    rows = _rows(path)
    if n_pairs is not None:
        if isinstance(n_pairs, bool) or not isinstance(n_pairs, int) or n_pairs < 1:
            raise IntervError(f"n_pairs must be a positive int; got {n_pairs!r}")
        rows = rows[:n_pairs]
    if not rows:
        raise IntervError(f"{path} holds no rows")
    cleans, corrupteds, targets, foils = [], [], [], []
    for where, row in rows:
        if not isinstance(row, Mapping):
            raise IntervError(f"{where} is not a JSON object")
        for store, field in ((cleans, clean_path), (corrupteds, corrupted_path)):
            text = _get(row, field, where)
            if not isinstance(text, str):
                raise IntervError(f"{where}: {field!r} must be text; got {text!r}")
            store.append(text)
        targets.append(lead + str(_get(row, target_path, where)))
        if foil_path is not None:
            foils.append(lead + str(_get(row, foil_path, where)))
    return PromptPairs(
        clean=cleans,
        corrupted=corrupteds,
        targets=targets,
        foils=foils if foil_path is not None else None,
        name=name or task or path.stem,
        description=f"MIB task file {path.name}" + (f" ({task} fields)" if task else ""),
    )
