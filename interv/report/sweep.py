"""The report of a saved sweep: its stored effects beside freshly computed concentration."""

from __future__ import annotations

from pathlib import Path

from interv.analysis.concentration import concentration
from interv.report.table import Report, build_report
from interv.sweeps.collect import load_sweep
from interv.sweeps.config import stored_config
from interv.sweeps.execute import load_model_and_task
from interv.sweeps.store import read_manifest

__all__ = ["report_from_sweep"]


def report_from_sweep(directory: str | Path, *, n_bootstrap: int = 1000, seed: int = 0) -> Report:
    """A report of a saved sweep: its stored effects beside freshly computed concentration.

    Loads the sweep's result with :func:`interv.sweeps.load_sweep` (each row's site comes
    from the stored records), then the sweep's model and task named by its manifest, read
    as data (:func:`interv.sweeps.config.stored_config`: no intervention kind is looked
    up, so no module the manifest names is imported), to compute concentration at the
    answer positions of the same prompts.
    """
    effects = load_sweep(directory)
    manifest = read_manifest(directory)
    config = stored_config(manifest["config"], manifest["config_hash"])
    model, task = load_model_and_task(config)
    heads_conc = concentration(model, task, sink=0, query_positions=task.answer_query_positions())
    return build_report(effects, heads_conc, n_bootstrap=n_bootstrap, seed=seed)
