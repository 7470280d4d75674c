"""Reading sweeps back: one directory, or the shards of one sweep merged.

:func:`load_sweep` turns a sweep directory into the engine's typed result,
:class:`~interv.engine.results.InterventionResult`: ``values`` ``[n_interventions,
n_prompts]`` in sweep order (unit by unit), the stored clean and corrupted baselines,
the normalized recovery recomputed from them, and each intervention's kind, semantics
sentence and base run. It never touches a model.

:func:`merge_sweeps` combines the directories of the shards of one sweep (same config
hash) into a new sweep directory that holds every unit once, and reads it back: the
same result as a single run of the sweep.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import torch

from interv._schema import parse
from interv.engine.results import InterventionResult, MetricInfo, Scope
from interv.engine.sites import Site
from interv.errors import IntervError
from interv.provenance import Provenance, join
from interv.sweeps.config import config_diff, stored_config
from interv.sweeps.plan import unit_id
from interv.sweeps.screened import assemble_screened
from interv.sweeps.store import (
    SweepStore,
    expected_units,
    read_baselines,
    read_manifest,
    read_units,
    rerun_advice,
)

__all__ = ["load_sweep", "merge_sweeps"]


def load_sweep(directory: str | Path) -> InterventionResult:
    """The typed result stored in a sweep directory.

    For a shard's directory, the result holds that shard's interventions only (in
    sweep order).

    Raises:
        IntervError: not a sweep directory, or units of the directory's share missing
            (an interrupted sweep: rerun the same command to resume it).
    """
    manifest = read_manifest(directory)
    expected = expected_units(manifest)
    if expected is None:
        raise IntervError(
            f"sweep directory {str(directory)!r} has no planned units yet (interrupted before "
            f"the model was loaded); {rerun_advice(directory, manifest)}"
        )
    if "screen" in manifest["config"]["sweep"]:
        baselines = read_baselines(directory)
        records = read_units(directory, manifest["config_hash"])
        if baselines is None:
            raise IntervError(
                f"screened sweep directory {str(directory)!r} has no finished entry yet; "
                f"{rerun_advice(directory, manifest)}"
            )
        return assemble_screened(records, manifest["n_units"], baselines)
    records = read_units(directory, manifest["config_hash"])
    missing = [uid for uid in expected if uid not in records]
    baselines = read_baselines(directory)
    if missing or baselines is None:
        lacks = (
            f"misses {len(missing)} of its {len(expected)} units (first: {missing[:3]})"
            if missing
            else "has its units but no baselines.json"
        )
        why = (
            " although its manifest says the sweep completed (a file was cut short, edited or "
            "removed)"
            if manifest["status"] == "complete"
            else f" (status {manifest['status']!r}: the sweep was stopped)"
        )
        raise IntervError(
            f"sweep directory {str(directory)!r} {lacks}{why}; {rerun_advice(directory, manifest)}"
        )
    return _assemble([records[uid] for uid in expected], baselines, Path(directory))


def merge_sweeps(directories: Sequence[str | Path], out_dir: str | Path) -> InterventionResult:
    """Merge the shard directories of one sweep into ``out_dir`` and read it back.

    Every directory must hold the same config (same hash) on the same prompt pairs
    (same task fingerprint); together they must hold
    every unit of the sweep. Units present in several directories must agree exactly.
    ``out_dir`` becomes a complete, unsharded sweep directory; merging again into it
    is a no-op. The baselines of the first directory that has them are kept.

    Raises:
        IntervError: no directories, different configs (the differing keys are
            listed), disagreeing duplicates, or missing units.
    """
    if not directories:
        raise IntervError("merge_sweeps needs at least one sweep directory; got none")
    manifests = [read_manifest(directory) for directory in directories]
    first = manifests[0]
    if "screen" in first["config"]["sweep"]:
        raise IntervError(
            f"{str(directories[0])!r} is a screened sweep ([sweep.screen]): it runs unsharded, "
            "in one directory, so there is nothing to merge; read it with load_sweep"
        )
    for directory, manifest in zip(directories[1:], manifests[1:], strict=True):
        if manifest["config_hash"] != first["config_hash"]:
            differences = "\n  ".join(config_diff(first["config"], manifest["config"]))
            raise IntervError(
                f"cannot merge {str(directory)!r} with {str(directories[0])!r}: their configs "
                f"differ ({directories[0]} -> {directory}):\n  {differences}"
            )
        if manifest["task_fingerprint"] != first["task_fingerprint"]:
            raise IntervError(
                f"cannot merge {str(directory)!r} with {str(directories[0])!r}: same config "
                f"but other prompt pairs (task fingerprints {manifest['task_fingerprint']} "
                f"and {first['task_fingerprint']})"
            )
    n_units = next((m["n_units"] for m in manifests if m["n_units"] is not None), None)
    records: dict[str, dict[str, Any]] = {}
    baselines = None
    for directory in directories:
        for uid, record in read_units(directory, first["config_hash"]).items():
            if records.setdefault(uid, record) != record:
                raise IntervError(
                    f"unit {uid} of {str(directory)!r} differs from the same unit in another "
                    "directory; the shards were not computed from the same model and task"
                )
        found = read_baselines(directory)
        if baselines is None:
            baselines, origin = found, directory
        elif found is not None:
            join(
                _provenance(baselines, origin),
                _provenance(found, directory),
                what=(f"the shard {str(origin)!r}", f"the shard {str(directory)!r}"),
            )
    expected = [] if n_units is None else [unit_id(k) for k in range(n_units)]
    missing = [uid for uid in expected if uid not in records]
    if n_units is None or missing or baselines is None:
        raise IntervError(
            f"the directories {[str(d) for d in directories]} do not cover the sweep: "
            f"missing units {missing[:5] if missing else 'unknown (no plan stored)'}; "
            "run the missing shards first"
        )
    config = stored_config(first["config"], first["config_hash"])  # data: imports nothing
    with SweepStore.open(out_dir, config, None, first["task_fingerprint"]) as store:
        stored = store.completed()
        store.write_baselines(baselines)
        for uid in expected:
            if uid not in stored:
                store.append(records[uid])
        store.record_plan(n_units, sum(len(records[uid]["values"]) for uid in expected))
        store.finish(merged_from=[str(Path(d).resolve()) for d in directories])
    return load_sweep(out_dir)


def _provenance(baselines: Mapping[str, Any], directory: str | Path) -> Provenance:
    """The provenance stored in a sweep directory's baselines (damage named)."""
    try:
        return parse(Provenance, baselines["provenance"], "provenance")
    except IntervError as error:
        raise IntervError(
            f"sweep directory {str(directory)!r} is damaged: {error}; rerun the sweep into a "
            "new --out"
        ) from None


def _assemble(
    records: Sequence[Mapping[str, Any]], baselines: Mapping[str, Any], directory: Path
) -> InterventionResult:
    """The typed result of checked records and baselines (:mod:`interv.sweeps.store`); a
    value that does not fit the rest (a row of another length, a malformed site, scope or
    metric) is named as damage, not met as a traceback."""
    dtype = getattr(torch, baselines["dtype"])
    clean = torch.tensor(baselines["clean"], dtype=dtype)
    corrupted = torch.tensor(baselines["corrupted"], dtype=dtype)
    n_prompts = clean.shape[0]
    for record in records:
        if any(len(row) != n_prompts for row in record["values"]):
            raise IntervError(
                f"sweep directory {str(directory)!r} is damaged: unit {record['unit']} holds "
                f"values for another number of prompts than the baselines' {n_prompts}; "
                "rerun the sweep into a new --out"
            )
    rows = [row for record in records for row in record["values"]]
    values = torch.tensor(rows, dtype=dtype).reshape(len(rows), n_prompts)
    try:
        metric = parse(MetricInfo, baselines["metric"], "metric")
        scope = parse(Scope, baselines["scope"], "scope")
        sites = [
            None if site is None else parse(Site, site, f"unit {record['unit']} site")
            for record in records
            for site in record.get("sites", [None] * len(record["kinds"]))
        ]
    except IntervError as error:
        raise IntervError(
            f"sweep directory {str(directory)!r} is damaged: {error}; rerun the sweep into a "
            "new --out"
        ) from None
    return InterventionResult.build(
        values,
        clean,
        corrupted,
        kinds=[k for record in records for k in record["kinds"]],
        descriptions=[d for record in records for d in record["descriptions"]],
        base_runs=[b for record in records for b in record["base_runs"]],
        sites=sites,
        params=[
            params
            for record in records
            for params in record.get("params", [{"kind": k} for k in record["kinds"]])
        ],
        metric=metric,
        scope=scope,
        provenance=_provenance(baselines, directory),
        recovery_atol=float(baselines["recovery_atol"]),
    )
