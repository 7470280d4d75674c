"""Running a sweep: load the model once, compute the missing work units, store each at once.

:func:`run_sweep` is the Python form of ``interv sweep CONFIG.toml --out DIR``:

1. Validate the config (no model is loaded for a bad config) and open ``DIR``
   (refused if it holds another config or shard).
2. Load the model (or take the one passed in) and the task, expand the sites into
   interventions and cut them into work units (:mod:`interv.sweeps.plan`).
3. Compute every unit of the shard whose id is not yet stored, one call of
   :func:`interv.engine.runner.run` per unit (the units share their clean and corrupted
   base runs through a :class:`~interv.engine.stacking.BaseRunCache`), and append each
   unit's record as soon as it is computed (:mod:`interv.sweeps.store`).
4. Mark the sweep complete and return the typed result read back from ``DIR``.

Rerunning the same call after an interruption resumes at step 3 without repeating a
stored unit; a complete directory is read back without loading the model (its manifest
then says ``computed_in_last_run: 0``). A run that fails or is interrupted records so in
the manifest (status ``"failed"`` or ``"interrupted"``, with the error).

A progress bar with an ETA is shown where it can be seen (tqdm's widget in a notebook, a bar
on stderr on a terminal), unless ``progress=False``; a callable ``progress(done, total,
label)`` is called instead (see :mod:`interv._progress`).
"""

from __future__ import annotations

import hashlib
import itertools
import json
from collections.abc import Callable, Iterable, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from interv._progress import Progress, counting, stages
from interv.engine.runner import run, warm_cache
from interv.engine.stacking import BaseRunCache
from interv.errors import IntervError
from interv.models.loading import check_model_spec, load_model
from interv.sweeps.collect import load_sweep
from interv.sweeps.config import SweepConfig, load_config, parse_config
from interv.sweeps.plan import Shard, WorkUnit, expand_entries, plan_units
from interv.sweeps.screened import baselines_of, run_screened_entries
from interv.sweeps.store import SweepStore
from interv.tasks.builtin import load_task
from interv.tasks.pairs import PromptPairs

if TYPE_CHECKING:
    from interv.engine.results import InterventionResult
    from interv.tasks.tokenized import TokenizedPairs

__all__ = [
    "SweepWorker",
    "as_config",
    "as_shard",
    "load_model_and_task",
    "run_sweep",
    "store_units",
    "task_fingerprint",
    "task_pairs",
]


def as_config(
    config: SweepConfig | Mapping[str, Any] | str | Path,
    *,
    allow_import: Iterable[str] = (),
    on_import: Callable[[str], None] | None = None,
) -> SweepConfig:
    """A validated config from a :class:`SweepConfig`, parsed TOML data or a TOML path
    (``allow_import``, ``on_import``: see :func:`interv.sweeps.config.parse_config`)."""
    if isinstance(config, SweepConfig):
        return config
    if isinstance(config, Mapping):
        return parse_config(config, allow_import=allow_import, on_import=on_import)
    return load_config(config, allow_import=allow_import, on_import=on_import)


def as_shard(shard: Shard | str | None) -> Shard | None:
    """A :class:`Shard` from ``None`` (all units), a Shard or its text ``"i/n"``."""
    return Shard.parse(shard) if isinstance(shard, str) else shard


def task_pairs(config: SweepConfig) -> PromptPairs:
    """The prompt pairs of ``config``'s task (a built-in task or a JSONL file); no model needed.

    Raises:
        IntervError: an unknown task or task option, or a missing or malformed JSONL file.
    """
    task_spec = config.task
    if "path" not in task_spec:
        return load_task(
            task_spec["name"],
            n_pairs=task_spec["n_pairs"],
            seed=task_spec["seed"],
            **task_spec["options"],
        )
    if not Path(config.task_path).exists():
        raise IntervError(
            f"task.path {task_spec['path']!r} does not exist (looked for {config.task_path})"
        )
    return PromptPairs.from_jsonl(config.task_path)


def task_fingerprint(pairs: PromptPairs) -> str:
    """First 16 hex digits of the SHA-256 of the pairs' canonical JSON (all their fields)."""
    canonical = json.dumps(asdict(pairs), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()[:16]


def load_model_and_task(
    config: SweepConfig, model: Any = None, pairs: PromptPairs | None = None
) -> tuple[Any, TokenizedPairs]:
    """The model of ``config`` (unless ``model`` is given) and its task tokenized for it
    (from ``pairs`` if given, else :func:`task_pairs`). Needs no intervention kind, so it
    serves a config read as data (:func:`interv.sweeps.config.stored_config`)."""
    if pairs is None:
        pairs = task_pairs(config)
    model_spec, task_spec = config.model, config.task
    if model is None:
        model = load_model(
            model_spec["spec"], device=model_spec["device"], dtype=model_spec["dtype"]
        )
    task = pairs.tokenize(
        model, prepend_bos=task_spec["prepend_bos"], padding_side=task_spec["padding_side"]
    )
    return model, task


@dataclass(frozen=True, eq=False)
class SweepWorker:
    """A loaded model and task with the sweep's plan: computes unit records by index.

    Attributes:
        config: the validated config.
        model: the transformer-lens bridge named by ``config.model``.
        task: the tokenized task named by ``config.task``.
        units: every work unit of the sweep, in order.
        entries: the sweep indices of each ``[[sweep.interventions]]`` entry's
            interventions (a screened sweep screens each entry separately).
    """

    config: SweepConfig
    model: Any
    task: TokenizedPairs
    units: tuple[WorkUnit, ...]
    cache: BaseRunCache = field(default_factory=BaseRunCache)
    entries: tuple[range, ...] = ()

    @classmethod
    def load(
        cls, config: SweepConfig, model: Any = None, pairs: PromptPairs | None = None
    ) -> SweepWorker:
        """Load the model (unless ``model`` is given) and the task of ``config`` (unless its
        ``pairs`` are given, from :func:`task_pairs`); plan its units."""
        model, task = load_model_and_task(config, model, pairs)
        per_entry = expand_entries(config, model.cfg, task.n_positions, task.shared_positions)
        interventions = tuple(iv for entry in per_entry for iv in entry)
        starts = [0]
        for entry in per_entry:
            starts.append(starts[-1] + len(entry))
        entries = tuple(range(a, b) for a, b in itertools.pairwise(starts))
        units = plan_units(interventions, config.sweep["unit_size"])
        return cls(config, model, task, units, entries=entries)

    @property
    def n_interventions(self) -> int:
        """Number of interventions in the whole sweep."""
        return sum(len(unit.interventions) for unit in self.units)

    def compute(self, index: int) -> tuple[dict[str, Any], dict[str, Any]]:
        """Run unit ``index``; returns its store record and the baselines (JSON-ready).

        The first call captures the base runs every unit needs, once (see
        :func:`interv.engine.runner.warm_cache`).
        """
        unit = self.units[index]
        sweep = self.config.sweep
        if self.cache.get(self.model, self.task) is None:
            everything = [iv for each in self.units for iv in each.interventions]
            warm_cache(self.model, self.task, everything, self.cache)
        result = run(
            self.model,
            self.task,
            unit.interventions,
            sweep["metric"],
            max_batch_size=sweep["batch_size"],
            recovery_atol=sweep["recovery_atol"],
            cache=self.cache,
        )
        record = {
            "unit": unit.id,
            "config_hash": self.config.config_hash,
            "start": unit.start,
            "kinds": list(result.kinds),
            "descriptions": list(result.descriptions),
            "base_runs": list(result.base_runs),
            "sites": [None if site is None else site.to_dict() for site in result.sites],
            "params": list(result.params),
            "values": result.values.tolist(),
        }
        baselines = baselines_of(result, self.config.config_hash)
        return record, baselines


def store_units(
    store: SweepStore,
    computed: Iterable[tuple[dict[str, Any], dict[str, Any]]],
    *,
    n_done: int,
    n_todo: int,
    progress: Progress,
) -> None:
    """Append each ``(record, baselines)`` of ``computed`` to ``store`` as it arrives.

    ``n_done`` units are already stored and ``n_todo`` are coming: they size the
    progress bar (tqdm with an ETA: the notebook widget in Jupyter, on stderr on a
    terminal), shown when ``progress`` is True, or when it is None and a bar can be seen;
    a callable ``progress(done, total, label)`` is called instead.
    """
    with counting(
        n_done + n_todo, "sweep units", progress=progress, unit="unit", initial=n_done
    ) as count:
        for record, baselines in computed:
            store.write_baselines(baselines)
            store.append(record)
            count.advance()


def run_sweep(
    config_or_path: SweepConfig | Mapping[str, Any] | str | Path,
    out_dir: str | Path,
    *,
    shard: Shard | str | None = None,
    progress: Progress = None,
    model: Any = None,
    allow_import: Iterable[str] = (),
    on_import: Callable[[str], None] | None = None,
) -> InterventionResult:
    """Run (or resume) a sweep into ``out_dir`` and return its typed result.

    Args:
        config_or_path: a TOML config path, its parsed data, or a :class:`SweepConfig`.
        out_dir: the sweep directory (created if missing; resumed if it holds the same
            sweep; refused if it holds another).
        shard: ``"i/n"`` or a :class:`Shard` to compute only units with index
            ``% n == i``; None = every unit.
        progress: a bar over the sweep's units: None (default) where one can be seen
            (tqdm's widget in a notebook, stderr on a terminal, nothing when piped); True /
            False; or a callable ``progress(done, total, label)`` called instead.
        model: the already loaded model named by the config's ``model.spec`` (skips
            loading it again; the caller vouches that it is that model, in eval mode).
        allow_import: modules that kinds named by import path (``"module:Class"``) may
            be imported from; any other module must be imported by your own code first
            (see :func:`interv.engine.registry.get_kind`).
        on_import: called with a module's name before interv imports it.

    Returns:
        The :class:`~interv.engine.results.InterventionResult` of the directory's units
        (for a shard, only its interventions, in sweep order; merge the shards with
        :func:`interv.sweeps.merge_sweeps` for the whole sweep).

    Raises:
        IntervError: an invalid config, task or model spec, or an output directory that
            is a file or cannot be written (all before any model is loaded), a directory
            of another sweep, or sites outside the model or the task.
    """
    config = as_config(config_or_path, allow_import=allow_import, on_import=on_import)
    shard = as_shard(shard)
    screen = config.screen
    if screen is not None and shard is not None and shard.count > 1:
        raise IntervError(
            f"a screened sweep ([sweep.screen]) cannot be sharded (--shard {shard}): its "
            "verification extends in order and its audit draws from every site, so it runs in "
            "one process; drop --shard (it resumes after an interruption all the same)"
        )
    pairs = task_pairs(config)  # a bad task fails here, before any directory or model
    check_model_spec(config.model["spec"])  # so does a model that cannot exist
    with SweepStore.open(out_dir, config, shard, task_fingerprint(pairs)) as store:
        if store.manifest["status"] == "complete" and store.is_whole():
            store.note_no_work()
        else:
            if store.manifest["status"] == "complete":
                store.reopen()  # complete on paper, a unit or the baselines gone
            with stages(("loading the model and the task",), enabled=progress) as bar:
                bar.start("loading the model and the task")
                worker = SweepWorker.load(config, model, pairs)
            if screen is not None:
                store.record_plan(len(worker.entries), worker.n_interventions)
                computed = run_screened_entries(
                    worker, store, screen, worker.entries, progress=progress
                )
                store.finish(computed_in_last_run=computed)
                return load_sweep(out_dir)
            store.record_plan(len(worker.units), worker.n_interventions)
            done = store.completed()
            mine = [u for u in worker.units if shard is None or shard.owns(u.index)]
            todo = [unit for unit in mine if unit.id not in done]
            computed = (worker.compute(unit.index) for unit in todo)
            store_units(
                store, computed, n_done=len(mine) - len(todo), n_todo=len(todo), progress=progress
            )
            if store.baselines() is None and mine:  # every unit stored, the baselines lost
                store.write_baselines(worker.compute(mine[0].index)[1])
            store.finish(computed_in_last_run=len(todo))
    return load_sweep(out_dir)
