"""Screened sweeps: each entry screened, its exact work stored as it is done, resumable.

A config with a ``[sweep.screen]`` table screens every ``[[sweep.interventions]]`` entry
separately (the entry's sites are the candidates of one screen, see
:mod:`interv.engine.screening`). Per entry ``e`` the sweep directory's ``units.jsonl``
gets, in order:

1. ``e{e:03d}``: the entry's interventions (kinds, sentences, base runs, sites, params)
   and the estimate of each on each prompt (by the screen's ``estimator``), with the
   estimates' reliability scores where the estimator gives them (``"hvp"``), written before
   any exact work, so that a resumed screen ranks, audits and reports exactly as the
   interrupted one did;
2. ``x{i:06d}``: the exact work of one forward (at most ``batch_size`` rows, ``i`` the
   smallest sweep index in it), the metric of each intervention on each prompt, as soon as
   the forward is done;
3. ``a{e:03d}``: the screen's outcome (the audit, with sweep indices), once it stopped.

Rerunning the same command after a kill reads these back: finished entries are skipped,
the stored estimates (and reliability scores) are reused and stored exact values are never
recomputed (the screen's ``known=``). The verification is sequential, so a screened sweep
runs in one process: ``--shard`` and the Ray executor refuse it.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping, Sequence
from dataclasses import asdict
from typing import TYPE_CHECKING, Any

import torch

from interv._progress import Progress, show_progress
from interv.audit import Screen, scores_from_json, scores_to_json
from interv.engine.results import (
    InterventionResult,
    MetricInfo,
    Scope,
    ScreenOutcome,
    intervention_fields,
)
from interv.engine.runner import Resume, RunPlan, execute, warm_cache
from interv.engine.sites import Site
from interv.errors import IntervError
from interv.provenance import Provenance

if TYPE_CHECKING:
    from interv.engine.protocol import Intervention
    from interv.sweeps.store import SweepStore

__all__ = [
    "assemble_screened",
    "baselines_of",
    "estimates_id",
    "exact_id",
    "outcome_id",
    "run_screened_entries",
]


def estimates_id(entry: int) -> str:
    """Record id of entry ``entry``'s estimates, e.g. ``"e002"``."""
    return f"e{entry:03d}"


def exact_id(first: int) -> str:
    """Record id of a piece of exact work whose first sweep index is ``first``."""
    return f"x{first:06d}"


def outcome_id(entry: int) -> str:
    """Record id of entry ``entry``'s screen outcome, e.g. ``"a002"``."""
    return f"a{entry:03d}"


def run_screened_entries(
    worker: Any,
    store: SweepStore,
    screen: Screen,
    entries: Sequence[range],
    *,
    progress: Progress,
) -> int:
    """Screen every entry not finished in ``store``; returns the exact evaluations run.

    Args:
        worker: the sweep's :class:`~interv.sweeps.execute.SweepWorker` (model, task,
            config, base-run cache, units).
        store: the open sweep directory.
        screen: the config's screen.
        entries: the sweep indices of each entry's interventions, in entry order.
        progress: show a line per entry on stderr (None: when stderr is a terminal).
    """
    interventions = [iv for unit in worker.units for iv in unit.interventions]
    done = store.completed()
    show = show_progress(progress)
    computed = 0
    for entry, indices in enumerate(entries):
        if outcome_id(entry) in done:
            continue
        if show:
            print(f"screening entry {entry} ({len(indices)} interventions) ...", file=sys.stderr)
        if worker.cache.get(worker.model, worker.task) is None:
            warm_cache(worker.model, worker.task, interventions, worker.cache)
        computed += _screen_entry(worker, store, screen, entry, indices, interventions, done)
    return computed


def _screen_entry(
    worker: Any,
    store: SweepStore,
    screen: Screen,
    entry: int,
    indices: range,
    interventions: Sequence[Intervention],
    done: Mapping[str, Mapping[str, Any]],
) -> int:
    """Screen one entry, resuming from its stored records; returns the exact work run."""
    sweep, config_hash = worker.config.sweep, worker.config.config_hash
    members = [interventions[i] for i in indices]
    first = indices.start
    stored = done.get(estimates_id(entry))
    estimates = None if stored is None else torch.tensor(stored["estimates"])
    scores = None if stored is None else stored.get("reliability")
    reliability = None if scores is None else scores_from_json(scores)
    known = torch.full((len(members), worker.task.n_pairs), torch.nan, dtype=torch.float64)
    for record in done.values():
        if record.get("entry") == entry and "indices" in record:
            for index, row in zip(record["indices"], record["values"], strict=True):
                known[index - first] = torch.tensor(row, dtype=torch.float64)
    computed = 0

    def keep_estimates(values: torch.Tensor, scores: torch.Tensor | None) -> None:
        record = {
            "unit": estimates_id(entry),
            "config_hash": config_hash,
            "entry": entry,
            "start": first,
            **_fields(members),
            "estimates": values.tolist(),
        }
        if scores is not None:  # absent for estimators without one: their records unchanged
            record["reliability"] = scores_to_json(scores)
        store.append(record)

    def keep_exact(local: list[int], values: torch.Tensor) -> None:
        nonlocal computed
        global_indices = [first + i for i in local]
        store.append(
            {
                "unit": exact_id(min(global_indices)),
                "config_hash": config_hash,
                "entry": entry,
                "indices": global_indices,
                "values": values.tolist(),
            }
        )
        computed += len(local)

    plan = RunPlan.build(
        worker.model,
        worker.task,
        members,
        sweep["metric"],
        max_batch_size=sweep["batch_size"],
        recovery_atol=sweep["recovery_atol"],
        screen=screen,
    )
    resume = Resume(known, estimates, reliability, on_estimates=keep_estimates, on_exact=keep_exact)
    result = execute(worker.model, plan, cache=worker.cache, resume=resume)
    store.write_baselines(baselines_of(result, config_hash))
    outcome = result.screens[0]
    shifted = ScreenOutcome(tuple(first + i for i in outcome.indices), outcome.audit, outcome.label)
    store.append(
        {
            "unit": outcome_id(entry),
            "config_hash": config_hash,
            "entry": entry,
            "outcome": shifted.to_dict(),
        }
    )
    return computed


def _fields(members: Sequence[Intervention]) -> dict[str, Any]:
    fields = intervention_fields(members, None)
    return {
        "kinds": list(fields["kinds"]),
        "descriptions": list(fields["descriptions"]),
        "base_runs": list(fields["base_runs"]),
        "sites": [None if site is None else site.to_dict() for site in fields["sites"]],
        "params": list(fields["params"]),
    }


def baselines_of(result: InterventionResult, config_hash: str) -> dict[str, Any]:
    """The ``baselines.json`` record of a sweep's result (:mod:`interv.sweeps.store`)."""
    return {
        "config_hash": config_hash,
        "clean": result.clean.tolist(),
        "corrupted": result.corrupted.tolist(),
        "dtype": str(result.values.dtype).removeprefix("torch."),
        "recovery_atol": result.recovery_atol,
        "metric": asdict(result.metric),
        "scope": asdict(result.scope),
        "provenance": result.provenance.to_dict(),
    }


def assemble_screened(
    records: Mapping[str, Mapping[str, Any]], n_entries: int, baselines: Mapping[str, Any]
) -> InterventionResult:
    """The typed result of a finished screened sweep from its records (no model).

    Rows are the sweep's interventions in order; exact rows hold the stored exact values,
    the others the base run's value plus the stored estimate, each marked by
    its status, and every entry's :class:`~interv.engine.results.ScreenOutcome` travels
    in ``screens``.

    Raises:
        IntervError: an entry not finished yet (an interrupted sweep: rerun the command).
    """
    unfinished = [e for e in range(n_entries) if outcome_id(e) not in records]
    if unfinished:
        raise IntervError(
            f"the screened sweep has {len(unfinished)} of its {n_entries} entries unfinished "
            f"(first: entry {unfinished[0]}); rerun the same command to resume it"
        )
    dtype = getattr(torch, baselines["dtype"])
    clean = torch.tensor(baselines["clean"], dtype=torch.float64)
    corrupted = torch.tensor(baselines["corrupted"], dtype=torch.float64)
    runs = {"clean": clean, "corrupted": corrupted}
    fields: dict[str, list] = {
        k: [] for k in ("kinds", "descriptions", "base_runs", "sites", "params")
    }
    blocks, status, screens = [], [], []
    exact: dict[int, list[float]] = {}
    for record in records.values():
        if "indices" in record:
            exact.update(zip(record["indices"], record["values"], strict=True))
    for entry in range(n_entries):
        est = records[estimates_id(entry)]
        outcome = ScreenOutcome.from_dict(records[outcome_id(entry)]["outcome"])
        for key in fields:
            fields[key].extend(est[key])
        estimates = torch.tensor(est["estimates"], dtype=torch.float64)
        values = torch.stack([runs[run] for run in est["base_runs"]]) + estimates
        for local, index in enumerate(outcome.indices):
            state = outcome.audit.status[local]
            if state != "estimated":
                values[local] = torch.tensor(exact[index], dtype=torch.float64)
            status.append(state)
        blocks.append(values)
        screens.append(outcome)
    scope = dict(baselines["scope"])
    scope["answer_positions"] = tuple(scope["answer_positions"])
    return InterventionResult.build(
        torch.cat(blocks).to(dtype),
        clean.to(dtype),
        corrupted.to(dtype),
        kinds=fields["kinds"],
        descriptions=fields["descriptions"],
        base_runs=fields["base_runs"],
        sites=[None if site is None else Site.from_dict(site) for site in fields["sites"]],
        params=fields["params"],
        metric=MetricInfo(**baselines["metric"]),
        scope=Scope(**scope),
        provenance=Provenance(**baselines["provenance"]),
        recovery_atol=float(baselines["recovery_atol"]),
        status=status,
        screens=screens,
    )
