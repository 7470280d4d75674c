"""Running a sweep's work units on Ray workers (optional extra: ``pip install interv[ray]``).

:func:`run_sweep_ray` does what :func:`interv.sweeps.run_sweep` does, but computes the
units on ``n_workers`` Ray actors. Each actor loads the model and the task once
(:class:`~interv.sweeps.execute.SweepWorker`) and computes units by index; the driver
never loads the model: it asks one actor for the plan, keeps every actor busy with one
unit at a time, and appends each record to the same store as soon as it arrives. The
directory is therefore identical in content to a single-process run (record order in
``units.jsonl`` may differ; reading back orders by unit), resumable the same way, and
mergeable with shards run elsewhere.

Without a running Ray instance, a local one is started with ``n_workers`` CPUs and no
dashboard, and shut down at the end.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from interv._ray import dispatch, import_ray, running
from interv.errors import IntervError
from interv.models.loading import check_model_spec
from interv.sweeps.collect import load_sweep
from interv.sweeps.config import SweepConfig
from interv.sweeps.execute import (
    SweepWorker,
    as_config,
    as_shard,
    store_units,
    task_fingerprint,
    task_pairs,
)
from interv.sweeps.plan import Shard, unit_id
from interv.sweeps.store import SweepStore

if TYPE_CHECKING:
    from interv.engine.results import InterventionResult

__all__ = ["run_sweep_ray"]


class _UnitActor:
    """Ray actor body: one loaded :class:`SweepWorker` per worker process."""

    def __init__(self, config: SweepConfig) -> None:
        self.worker = SweepWorker.load(config)

    def plan(self) -> tuple[int, int]:
        """(number of units, number of interventions) of the sweep."""
        return len(self.worker.units), self.worker.n_interventions

    def compute(self, index: int) -> tuple[dict[str, Any], dict[str, Any]]:
        """Record and baselines of unit ``index``."""
        return self.worker.compute(index)


def run_sweep_ray(
    config_or_path: SweepConfig | Mapping[str, Any] | str | Path,
    out_dir: str | Path,
    *,
    n_workers: int = 2,
    shard: Shard | str | None = None,
    progress: bool | None = None,
    allow_import: Iterable[str] = (),
) -> InterventionResult:
    """Run (or resume) a sweep into ``out_dir`` on ``n_workers`` Ray actors.

    Same arguments, directory and result as :func:`interv.sweeps.run_sweep`, plus
    ``n_workers`` (>= 1), the number of actors (each holds one copy of the model). The
    actors may import the modules ``allow_import`` allows and those of kinds this process
    found already imported (:attr:`~interv.sweeps.config.SweepConfig.allowed_imports`).
    """
    if isinstance(n_workers, bool) or not isinstance(n_workers, int) or n_workers < 1:
        raise IntervError(f"n_workers must be an integer >= 1; got {n_workers!r}")
    config = as_config(config_or_path, allow_import=allow_import)
    shard = as_shard(shard)
    if config.screen is not None:
        raise IntervError(
            "a screened sweep ([sweep.screen]) runs in one process (its verification "
            "extends in order); run it with the local executor (interv sweep without "
            "--executor ray, or interv.run_sweep)"
        )
    pairs = task_pairs(config)  # a bad task fails here, before any directory or worker
    check_model_spec(config.model["spec"])
    ray = import_ray()
    with SweepStore.open(out_dir, config, shard, task_fingerprint(pairs)) as store:
        if store.manifest["status"] == "complete" and store.is_whole():
            store.note_no_work()
        else:
            if store.manifest["status"] == "complete":
                store.reopen()  # complete on paper, a unit or the baselines gone
            with running(ray, n_workers):
                # worker processes may start in another working directory: resolve the path
                absolute = replace(config, base_dir=str(Path(config.base_dir or ".").resolve()))
                actor_class = ray.remote(num_cpus=1)(_UnitActor)
                actors = [actor_class.remote(absolute) for _ in range(n_workers)]
                try:
                    _run_on_actors(ray, actors, store, shard, progress)
                finally:
                    for actor in actors:
                        ray.kill(actor)
    return load_sweep(out_dir)


def _run_on_actors(
    ray: Any, actors: list[Any], store: SweepStore, shard: Shard | None, progress: bool | None
) -> None:
    n_units, n_interventions = ray.get(actors[0].plan.remote())
    store.record_plan(n_units, n_interventions)
    done = store.completed()
    mine = [k for k in range(n_units) if shard is None or shard.owns(k)]
    todo = [k for k in mine if unit_id(k) not in done]
    computed = dispatch(ray, actors, todo)
    store_units(store, computed, n_done=len(mine) - len(todo), n_todo=len(todo), progress=progress)
    if store.baselines() is None and mine:  # every unit stored, the baselines lost
        store.write_baselines(ray.get(actors[0].compute.remote(mine[0]))[1])
    store.finish(computed_in_last_run=len(todo))
