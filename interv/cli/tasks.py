"""The prompt pairs of a command: a built-in ``--task`` or the user's own ``--pairs FILE``.

Every command that runs a task takes either ``--task NAME`` (a built-in task, see
:func:`interv.tasks.builtin.load_task`) or ``--pairs FILE.jsonl`` (the user's pairs in
:meth:`interv.PromptPairs.from_jsonl`'s format), never both. :func:`command_pairs` reads
them before any model loads, so a missing or malformed file fails at once with the path
and the line; the length of each prompt against the model's context is checked when the
pairs are tokenized (the pair, the prompt and ``n_ctx`` are named).
"""

from __future__ import annotations

import argparse
import dataclasses
from typing import TYPE_CHECKING

from interv._checks import as_int
from interv.errors import IntervError

if TYPE_CHECKING:
    from interv.tasks.pairs import PromptPairs

__all__ = [
    "PAIRS_FILE_HELP",
    "PAIRS_HELP",
    "add_task_options",
    "command_pairs",
    "first_pairs",
    "read_pairs",
]

PAIRS_FILE_HELP = (
    "your own prompt pairs: a JSONL file, one object a line with keys clean, corrupted, "
    "target (strings), optional foil and answer_position (see the README, 'Models and tasks')"
)
PAIRS_HELP = PAIRS_FILE_HELP + "; instead of --task"


def add_task_options(
    parser: argparse.ArgumentParser,
    *,
    group: argparse._MutuallyExclusiveGroup | None = None,
    default_task: str | None = "induction",
    n_pairs_default: int = 16,
) -> None:
    """Add ``--task`` and ``--pairs`` (mutually exclusive) and ``--n-pairs`` to ``parser``.

    ``group``: an existing mutually exclusive group of ``parser`` to add the two to
    (``interv pruning`` shares one with ``--text``). ``--n-pairs`` defaults to None:
    ``n_pairs_default`` for a built-in task, every pair of a ``--pairs`` file.
    """
    group = parser.add_mutually_exclusive_group() if group is None else group
    default_text = f" (default: {default_task})" if default_task else ""
    group.add_argument("--task", default=None, help=f"built-in task{default_text}")
    group.add_argument("--pairs", default=None, metavar="FILE.jsonl", help=PAIRS_HELP)
    parser.add_argument(
        "--n-pairs",
        type=int,
        default=None,
        help=f"prompt pairs (default: {n_pairs_default} of a built-in task; every pair of a "
        "--pairs file, or its first N_PAIRS)",
    )
    parser.set_defaults(_task_default=default_task, _n_pairs_default=n_pairs_default)


def read_pairs(path: str) -> PromptPairs:
    """The pairs of a ``--pairs`` file; a missing, unreadable or malformed file is an
    :class:`IntervError` starting ``--pairs:`` and naming the path (and the line)."""
    from interv.tasks.pairs import PromptPairs  # torch: on use (CLI start-up)

    try:
        return PromptPairs.from_jsonl(path)
    except IntervError as error:
        raise IntervError(f"--pairs: {error}") from None


def first_pairs(
    pairs: PromptPairs, n_pairs: int | None, source: str, option: str = "--n-pairs"
) -> PromptPairs:
    """The first ``n_pairs`` pairs of ``pairs`` (all when None); more than it holds is an
    error naming ``source``, its count and ``option``."""
    if n_pairs is None:
        return pairs
    as_int(n_pairs, option, minimum=1)
    if n_pairs > pairs.n_pairs:
        raise IntervError(
            f"{option} {n_pairs}: {source} holds only {pairs.n_pairs} pairs; pass {option} "
            f"{pairs.n_pairs} or less, or leave it out to use every pair"
        )
    if n_pairs == pairs.n_pairs:
        return pairs
    cut = {
        field: None if getattr(pairs, field) is None else getattr(pairs, field)[:n_pairs]
        for field in ("clean", "corrupted", "targets", "foils", "answer_positions")
    }
    return dataclasses.replace(pairs, **cut)


def command_pairs(args: argparse.Namespace, *, metric: str | None = None) -> PromptPairs:
    """The command's prompt pairs: ``--pairs FILE`` read and checked, or ``--task``'s.

    Nothing loads a model here. With ``metric`` (a target metric name), a file without
    foils is refused for a metric that needs one.

    Raises:
        IntervError: a missing, unreadable or malformed file (the path and the line), an
            unknown task, ``--n-pairs`` below 1 or beyond the file's pairs, or a metric
            that needs a foil the file does not give.
    """
    from interv.engine.targets import METRICS  # torch: on use (CLI start-up)
    from interv.tasks.builtin import load_task  # torch: on use (CLI start-up)

    n_pairs = getattr(args, "n_pairs", None)
    if getattr(args, "pairs", None) is not None:
        pairs = first_pairs(read_pairs(args.pairs), n_pairs, f"--pairs {args.pairs}")
        target = METRICS.get(metric) if metric is not None else None
        if target is not None and target.needs_foil and pairs.foils is None:
            choices = tuple(name for name, m in METRICS.items() if not m.needs_foil)
            raise IntervError(
                f"--pairs {args.pairs}: its lines have no 'foil', but metric {metric!r} needs "
                f"one; add a foil to every line or choose a metric without a foil: {choices}"
            )
        return pairs
    task = args.task if getattr(args, "task", None) is not None else args._task_default
    if task is None:
        raise IntervError("give --task NAME (a built-in task) or --pairs FILE.jsonl")
    count = args._n_pairs_default if n_pairs is None else as_int(n_pairs, "--n-pairs", minimum=1)
    return load_task(task, n_pairs=count, seed=getattr(args, "seed", 0))
