"""The report of a saved sweep: its stored effects beside freshly computed concentration."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from interv._checks import as_path
from interv.analysis.concentration import concentration
from interv.errors import IntervError
from interv.report.report import Report
from interv.report.table import build_report
from interv.sweeps.collect import load_sweep
from interv.sweeps.config import SweepConfig, stored_config
from interv.sweeps.execute import load_model_and_task, task_fingerprint, task_pairs
from interv.sweeps.store import read_manifest
from interv.tasks.pairs import PromptPairs

__all__ = ["report_from_sweep"]


def report_from_sweep(directory: str | Path, *, n_bootstrap: int = 1000, seed: int = 0) -> Report:
    """A report of a saved sweep: its stored effects beside freshly computed concentration.

    Loads the sweep's result with :func:`interv.sweeps.load_sweep` (each row's site comes
    from the stored records), then the sweep's model and task named by its manifest, read
    as data (:func:`interv.sweeps.config.stored_config`: no intervention kind is looked
    up, so no module the manifest names is imported), to compute concentration at the
    answer positions of the same prompts.

    The task must be the one the sweep ran: a JSONL task's relative ``path`` is looked up
    in the sweep directory first, then in the working directory, and a file is used only
    when its fingerprint is the one the manifest stored (a built-in task is rebuilt and
    checked the same way); otherwise :class:`IntervError` names where it looked.
    """
    effects = load_sweep(directory)
    manifest = read_manifest(directory)
    config = stored_config(manifest["config"], manifest["config_hash"])
    pairs = _stored_pairs(config, as_path(directory, "sweep directory"), manifest)
    model, task = load_model_and_task(config, pairs=pairs)
    heads_conc = concentration(model, task, sink=0, query_positions=task.answer_query_positions())
    return build_report(effects, heads_conc, n_bootstrap=n_bootstrap, seed=seed)


def _stored_pairs(config: SweepConfig, directory: Path, manifest: dict) -> PromptPairs:
    """The sweep's prompt pairs, whose fingerprint is the manifest's (see
    :func:`report_from_sweep`)."""
    stored = manifest["task_fingerprint"]
    path = config.task.get("path")
    if path is None:
        pairs = task_pairs(config)
        if task_fingerprint(pairs) != stored:
            raise IntervError(
                f"the built-in task {config.task['name']!r} now gives other prompt pairs than "
                f"the sweep in {directory} ran on (task fingerprint {task_fingerprint(pairs)}, "
                f"stored {stored}): interv's built-in task changed; rerun the sweep"
            )
        return pairs
    bases = [None] if Path(path).is_absolute() else [str(directory), None]
    looked = []
    for base in bases:
        located = dataclasses.replace(config, base_dir=base)
        if not located.task_path.is_file():
            looked.append(f"{located.task_path} (absent)")
            continue
        pairs = task_pairs(located)
        found = task_fingerprint(pairs)
        if found == stored:
            return pairs
        looked.append(f"{located.task_path} (other pairs, fingerprint {found})")
    raise IntervError(
        f"cannot find the task file the sweep in {directory} ran on (task.path {path!r}, task "
        f"fingerprint {stored}); looked at: {'; '.join(looked)}. Copy the task's JSONL file into "
        "the sweep directory"
    )
