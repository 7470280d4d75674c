"""The on-disk form of a sweep: an append-only unit log, baselines, and a manifest.

A sweep directory holds three files:

- ``units.jsonl``: one JSON line per completed work unit (its id, config hash, first
  intervention index, the kinds, semantics sentences, base runs and the metric values
  ``[n_unit_interventions, n_prompts]``). Each unit is appended with a single
  ``write`` of one complete line, then flushed and ``fsync``-ed, so a kill at any
  moment (SIGKILL included) leaves either the whole line or a torn *last* line.
  Opening the store drops a torn last line (its unit is recomputed); a unit whose id
  is stored is never recomputed, so no record is duplicated. Reading tolerates
  duplicates anyway (dedupes, and refuses if two records of one id differ).
- ``baselines.json``: the clean and corrupted metric values ``[n_prompts]``, the metric
  and the scope, written once.
- ``manifest.json``: the normalized config and its hash, the shard, a fingerprint of
  the task's prompt pairs, the versions of
  interv, torch and transformer-lens, the seed, the start and end times (UTC, ISO
  8601; end is null until done) and the status: ``"running"``, ``"complete"``, or
  ``"failed"`` / ``"interrupted"`` with the ``error`` that stopped the run (a rerun
  resumes any of these; a SIGKILL leaves ``"running"``).

The lifecycle (claim, lock, resume or refuse, torn tail, marker, fail, finish) is the one of
every resumable directory (:mod:`interv._journal`): ``baselines.json`` and ``manifest.json``
are written atomically and durably with the safe write, the unit log is appended with
:func:`interv._outputs.append_line`. No file of a sweep directory is read or written through
a link (one there is refused), and every file read is checked against what interv writes (a
damaged field is named, with what to do). A manifest that says complete
while a unit line or the baselines are gone is completed by rerunning the sweep's command
(:func:`rerun_advice` names it). A directory belongs to one config and one shard: opening it with
another is refused with the differing keys, unless no unit was computed in it yet
(say the model failed to load): then it starts afresh. A run that fails before storing
anything in a directory it created removes that directory again. One process at a time
may write a directory (an advisory lock, released by the kernel when the process dies).
The directory's ``.interv-files.json`` lists these files with the hashes of their content
when the store closes (see :mod:`interv._outputs`), so ``interv report DIR`` may write its
report beside them.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, Literal

from interv._checks import as_path, read_json
from interv._journal import MANIFEST, STATUSES, Journal, Layout, Store, now, resumed, started
from interv._outputs import complete_lines, regular_file
from interv._schema import AtLeast, BeforeProvenance, Finite, NonEmpty, in_file, parse
from interv.audit import StoredScore
from interv.engine.results import MetricInfo, Scope, StoredOutcome
from interv.engine.sites import Site
from interv.errors import IntervError
from interv.provenance import Provenance
from interv.sweeps.config import SweepConfig, config_diff
from interv.sweeps.plan import Shard, unit_id

__all__ = [
    "FORMAT",
    "SweepStore",
    "expected_units",
    "read_baselines",
    "read_manifest",
    "read_units",
    "rerun_advice",
]

FORMAT = "interv-sweep/1"
"""Format tag of the sweep directories this module writes."""

BASELINES = "baselines.json"
UNITS = "units.jsonl"


Count = Annotated[int, AtLeast(0)]
Rows = list[list[float]]
Runs = list[Literal["clean", "corrupted"]]


def _rows(record: Any, n: int) -> None:
    """The per-row lists of a record of ``n`` rows hold one entry per row."""
    for name in ("kinds", "descriptions", "base_runs", "sites", "params"):
        items = getattr(record, name, None)
        if items is not None and len(items) != n:
            raise IntervError(f"'{name}' holds {len(items)} entries for {n} rows of values")


@dataclass(frozen=True)
class SweepManifest:
    """``manifest.json`` of a sweep directory."""

    format: Literal["interv-sweep/1"]
    config: dict[str, Any]
    config_hash: str
    shard: str | None
    task_fingerprint: str
    status: Literal[STATUSES]  # type: ignore[valid-type]
    n_units: Count | None
    n_interventions: Count | None
    resumed: list[str]
    seed: int | None = None
    versions: dict[str, str] = field(default_factory=dict)
    started: str | None = None
    finished: str | None = None
    merged_from: list[str] | None = None
    error: str | None = None
    stopped: str | None = None
    computed_in_last_run: Count | None = None

    def __post_init__(self) -> None:
        if self.shard is not None:
            Shard.parse(self.shard)


@dataclass(frozen=True)
class SweepBaselines:
    """``baselines.json``: the clean and corrupted metric per prompt, and what they are."""

    config_hash: str
    clean: Annotated[list[float], NonEmpty()]
    corrupted: list[float]
    dtype: Literal["float32", "float64", "float16", "bfloat16"]
    recovery_atol: Annotated[float, Finite(), AtLeast(0)]
    metric: MetricInfo
    scope: Scope
    provenance: Provenance

    def __post_init__(self) -> None:
        if len(self.clean) != self.scope.n_prompts:
            raise IntervError(
                f"'clean' holds {len(self.clean)} prompts for scope.n_prompts "
                f"{self.scope.n_prompts}"
            )
        if len(self.corrupted) != len(self.clean):
            raise IntervError(
                f"'clean' and 'corrupted' hold different numbers of prompts ({len(self.clean)} "
                f"and {len(self.corrupted)})"
            )


@dataclass(frozen=True)
class UnitRecord:
    """A line of ``units.jsonl``: one work unit's metric values ``[rows, n_prompts]``."""

    unit: str
    config_hash: str
    start: Count | None
    kinds: list[str]
    descriptions: list[str]
    base_runs: Runs
    values: Rows
    sites: list[Site | None] | None = None
    params: list[dict[str, Any]] | None = None

    def __post_init__(self) -> None:
        _rows(self, len(self.values))


@dataclass(frozen=True)
class EstimatesRecord:
    """A screened entry's estimates (id ``e...``), with their reliability scores where the
    screen's estimator gives them (``"hvp"``; written and read by
    :func:`~interv.audit.scores_to_json` / :func:`~interv.audit.scores_from_json`, as in
    :class:`~interv.audit.StoredAudit`)."""

    unit: str
    config_hash: str
    entry: Count
    start: Count | None
    kinds: list[str]
    descriptions: list[str]
    base_runs: Runs
    estimates: Rows
    sites: list[Site | None] | None = None
    params: list[dict[str, Any]] | None = None
    reliability: list[StoredScore] | None = None  # HVP screens only

    def __post_init__(self) -> None:
        _rows(self, len(self.estimates))
        if self.reliability is not None and len(self.reliability) != len(self.estimates):
            raise IntervError(
                f"'reliability' holds {len(self.reliability)} scores for "
                f"{len(self.estimates)} rows of estimates"
            )


@dataclass(frozen=True)
class ExactValuesRecord:
    """One stacked forward's exact values of a screened entry (id ``x...``)."""

    unit: str
    config_hash: str
    entry: Count
    indices: list[Count]
    values: Rows

    def __post_init__(self) -> None:
        if len(self.values) != len(self.indices):
            raise IntervError(
                f"'values' holds {len(self.values)} rows for {len(self.indices)} indices"
            )


@dataclass(frozen=True)
class OutcomeRecord:
    """A screened entry's audit (id ``a...``)."""

    unit: str
    config_hash: str
    entry: Count
    outcome: StoredOutcome


RECORDS: dict[str, type] = {
    "u": UnitRecord,
    "e": EstimatesRecord,
    "x": ExactValuesRecord,
    "a": OutcomeRecord,
}
"""The schema of a unit record, by the first letter of its id."""


def _as_dir(directory: Any) -> Path:
    return as_path(directory, "sweep directory")


_REDO = "rerun the sweep into a new --out to redo it"


def _damaged(path: Path, error: IntervError) -> IntervError:
    if isinstance(error, BeforeProvenance):
        return in_file(path, error, _REDO)
    return in_file(path, error, f"interv wrote it otherwise ({_REDO}, or restore the file)")


def read_manifest(directory: str | Path) -> dict[str, Any]:
    """The manifest of a sweep directory, checked against its schema
    (:class:`SweepManifest`).

    Raises:
        IntervError: no manifest, a manifest that is not JSON (truncated), another format,
            or a damaged field (named).
    """
    path = _as_dir(directory) / MANIFEST
    if not regular_file(path, "sweep manifest"):
        raise IntervError(f"{str(directory)!r} is not a sweep directory: it has no {MANIFEST}")
    manifest = read_json(path, "sweep manifest")
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        found = manifest.get("format") if isinstance(manifest, dict) else type(manifest).__name__
        raise IntervError(f"{path} has format {found!r}; this interv reads {FORMAT!r}")
    try:
        return dataclasses.asdict(parse(SweepManifest, manifest, "sweep manifest"))
    except IntervError as error:
        raise _damaged(path, error) from None


def read_baselines(directory: str | Path) -> dict[str, Any] | None:
    """The stored baselines of a sweep directory (:class:`SweepBaselines`), or None before
    the first unit.

    Raises:
        IntervError: a baselines file that is not JSON, or a damaged field (named).
    """
    path = _as_dir(directory) / BASELINES
    if not regular_file(path, "sweep baselines"):
        return None
    baselines = read_json(path, "sweep baselines")
    try:
        parse(SweepBaselines, baselines, "sweep baselines")
    except IntervError as error:
        raise _damaged(path, error) from None
    return baselines


def read_units(directory: str | Path, config_hash: str) -> dict[str, dict[str, Any]]:
    """Completed unit records by id, from ``units.jsonl``, each checked against its schema
    (:data:`RECORDS`); a torn last line is ignored.

    Raises:
        IntervError: a complete line that is not JSON or not a record (the damaged field
            named), a record of another config, or two different records with the same id.
    """
    path = _as_dir(directory) / UNITS
    if not regular_file(path, "sweep units"):
        return {}
    records: dict[str, dict[str, Any]] = {}
    for line_number, line in complete_lines(path.read_bytes()):
        where = f"{path}: line {line_number}"
        try:
            record = json.loads(line)
        except json.JSONDecodeError as error:
            raise IntervError(
                f"{where} is not a JSON record ({error}); the directory is damaged: delete "
                "that line and rerun the same command to recompute its unit"
            ) from None
        unit = record.get("unit") if isinstance(record, dict) else None
        schema = RECORDS.get(unit[:1]) if isinstance(unit, str) else None
        if schema is None:
            raise IntervError(
                f"{where} is not a unit record (a JSON object whose 'unit' id starts with one "
                f"of {sorted(RECORDS)}); the directory is damaged"
            )
        try:
            parse(schema, record, f"unit {unit}")
        except IntervError as error:
            raise IntervError(
                f"{where} is damaged: {error}; delete that line and rerun the same command "
                "to recompute the unit"
            ) from None
        if record["config_hash"] != config_hash:
            raise IntervError(
                f"{where} belongs to config {record['config_hash']!r}, not to this sweep's "
                f"config {config_hash!r}"
            )
        previous = records.setdefault(unit, record)
        if previous != record:
            raise IntervError(
                f"{path}: unit {unit} is stored twice with different values "
                f"(line {line_number}); the directory is corrupt"
            )
    return records


def expected_units(manifest: Mapping[str, Any]) -> list[str] | None:
    """Ids of the units a sweep directory holds when whole (its shard's share of the
    planned units), or None before the plan is stored."""
    if manifest["n_units"] is None:
        return None
    shard = None if manifest["shard"] is None else Shard.parse(manifest["shard"])
    return [unit_id(k) for k in range(manifest["n_units"]) if shard is None or shard.owns(k)]


def rerun_advice(directory: str | Path, manifest: Mapping[str, Any]) -> str:
    """The command that completes a sweep directory: the sweep's own command (it computes
    only what is missing), or for a merged directory the merge."""
    merged = manifest.get("merged_from")
    shard = "" if manifest["shard"] is None else f" --shard {manifest['shard']}"
    command = f"interv sweep CONFIG.toml --out {directory}{shard}"
    advice = f"rerun the command that wrote it, `{command}` with the same config"
    if isinstance(merged, list) and merged and all(isinstance(d, str) for d in merged):
        advice += f", or the merge, `interv sweep-merge {' '.join(merged)} --out {directory}`"
    return advice + ": it computes only what is missing"


LAYOUT = Layout("sweep directory", "interv sweep", read_manifest, once=(BASELINES,), log=UNITS)
"""The files of a sweep directory (:mod:`interv._journal`)."""


class SweepStore(Store):
    """Writer of one sweep directory; create it with :meth:`open`, use it as a context
    manager (it holds the directory's lock until it closes)."""

    @classmethod
    def open(
        cls, directory: str | Path, config: SweepConfig, shard: Shard | None, task_fingerprint: str
    ) -> SweepStore:
        """Create ``directory`` for a new sweep, or reopen it to resume the same sweep.

        ``task_fingerprint`` identifies the task's prompt pairs (a JSONL file edited
        between two runs, or a built-in task that changed, is not the same sweep).
        Drops a torn last line of ``units.jsonl``. Refuses (with
        :class:`IntervError`) a directory holding results of another config, shard or
        task, a non-empty directory that is not a sweep, and a directory another process
        is writing.
        """
        shard_text = None if shard is None or shard.count == 1 else str(shard)
        identity = (config.config_hash, shard_text, task_fingerprint)

        def decide(path: Path, stored: dict[str, Any] | None, holds: bool) -> dict[str, Any]:
            if stored is not None:
                if (stored["config_hash"], stored["shard"], stored["task_fingerprint"]) == identity:
                    return resumed(stored)
                if holds:
                    _refuse_other_sweep(path, stored, config, shard_text, task_fingerprint)
                # nothing was computed under the stored config (e.g. its model failed to
                # load): the directory starts afresh with the given one
            return started(
                FORMAT,
                config=config.normalized,
                config_hash=config.config_hash,
                seed=config.sweep["seed"],
                shard=shard_text,
                task_fingerprint=task_fingerprint,
                n_units=None,
                n_interventions=None,
                merged_from=None,
            )

        return cls(Journal.open(directory, LAYOUT, decide))

    def record_plan(self, n_units: int, n_interventions: int) -> None:
        """Store the size of the planned sweep in the manifest."""
        for key, value in (("n_units", n_units), ("n_interventions", n_interventions)):
            if self.manifest[key] not in (None, value):
                raise IntervError(
                    f"sweep directory {str(self.directory)!r} was planned with {key}="
                    f"{self.manifest[key]}, now {value}: the model or the task changed "
                    "under the same config; choose another --out"
                )
            self.manifest[key] = value
        self.journal.write_manifest()

    def completed(self) -> dict[str, dict[str, Any]]:
        """Records of the units already stored, by id."""
        return read_units(self.directory, self.manifest["config_hash"])

    def baselines(self) -> dict[str, Any] | None:
        """The stored baselines, or None if none are stored yet."""
        return read_baselines(self.directory)

    def write_baselines(self, baselines: Mapping[str, Any]) -> None:
        """Store the baselines (once: later calls are ignored)."""
        self.journal.write_once(BASELINES, baselines)

    def append(self, record: Mapping[str, Any]) -> None:
        """Append one unit record as one complete line, flushed and fsync-ed."""
        self.journal.append(record)

    def is_whole(self) -> bool:
        """Whether every unit of the plan (this shard's share) and the baselines are stored."""
        expected = expected_units(self.manifest)
        if expected is None or self.baselines() is None:
            return False
        done = self.completed()
        return all(uid in done for uid in expected)

    def reopen(self) -> None:
        """Mark a directory whose manifest says complete but that misses units or its
        baselines (a file cut or edited) as running again, so the rerun completes it."""
        self.manifest["resumed"].append(now())
        self.manifest.update(status="running", finished=None)
        self.journal.write_manifest()

    def note_no_work(self) -> None:
        """Record that a rerun found the sweep complete and computed nothing."""
        if self.manifest.get("computed_in_last_run") != 0:
            self.manifest["computed_in_last_run"] = 0
            self.journal.write_manifest()


def _refuse_other_sweep(
    directory: Path,
    manifest: Mapping[str, Any],
    config: SweepConfig,
    shard_text: str | None,
    task_fingerprint: str,
) -> None:
    if manifest["config_hash"] != config.config_hash:
        differences = "; ".join(config_diff(manifest["config"], config.normalized))
        raise IntervError(  # one line, as every error of the command line
            f"sweep directory {str(directory)!r} holds results of another config "
            f"(hash {manifest['config_hash']}, this config {config.config_hash}); "
            f"differing keys (stored -> given): {differences}; "
            "rerun with the stored config to resume, or choose another --out"
        )
    if manifest["task_fingerprint"] != task_fingerprint:
        raise IntervError(
            f"sweep directory {str(directory)!r} holds results of the same config on other "
            f"prompt pairs (task fingerprint {manifest['task_fingerprint']}, now "
            f"{task_fingerprint}): the task's JSONL file or interv's built-in task changed; "
            "restore the task to resume, or choose another --out"
        )
    raise IntervError(
        f"sweep directory {str(directory)!r} holds results of shard {manifest['shard']} "
        f"(None = all units), not {shard_text}; rerun with --shard "
        f"{manifest['shard']} to resume, or choose another --out"
    )
