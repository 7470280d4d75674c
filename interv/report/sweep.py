"""The report of a saved sweep: its stored effects beside freshly computed concentration."""

from __future__ import annotations

from pathlib import Path

from interv.analysis.concentration import concentration
from interv.report.table import Report, build_report
from interv.sweeps.collect import load_sweep
from interv.sweeps.execute import SweepWorker, as_config
from interv.sweeps.plan import Shard
from interv.sweeps.store import read_manifest

__all__ = ["report_from_sweep"]


def report_from_sweep(directory: str | Path, *, n_bootstrap: int = 1000, seed: int = 0) -> Report:
    """A report of a saved sweep: its stored effects beside freshly computed concentration.

    Loads the sweep's result with :func:`interv.sweeps.load_sweep`, then the sweep's
    model and task (from its manifest) to compute concentration at the answer positions
    of the same prompts; sites come from the sweep's own intervention list.
    """
    effects = load_sweep(directory)
    manifest = read_manifest(directory)
    worker = SweepWorker.load(as_config(manifest["config"]))
    shard = None if manifest["shard"] is None else Shard.parse(manifest["shard"])
    interventions = [
        iv
        for unit in worker.units
        if shard is None or shard.owns(unit.index)
        for iv in unit.interventions
    ]
    heads_conc = concentration(
        worker.model, worker.task, sink=0, query_positions=worker.task.answer_query_positions()
    )
    return build_report(
        effects, heads_conc, interventions=interventions, n_bootstrap=n_bootstrap, seed=seed
    )
