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

``baselines.json`` and ``manifest.json`` are written atomically and durably with
:func:`interv._outputs.write_file` (an exclusive temporary, ``fsync``, rename); the unit
log is opened with ``O_APPEND | O_NOFOLLOW``. No file of a sweep directory is read or
written through a link (one there is refused), and every file read is checked against what
interv writes (a damaged field is named, with what to do). A manifest that says complete
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

import contextlib
import datetime
import fcntl
import json
import os
import stat
from collections.abc import Callable, Iterator, Mapping
from importlib import metadata
from pathlib import Path
from typing import Any

from interv._checks import as_path, read_json
from interv._outputs import MARKER, OutputDir, claim_dir, failure, is_scratch, write_file
from interv.errors import IntervError
from interv.sweeps.config import SweepConfig, config_diff
from interv.sweeps.plan import Shard, unit_id

__all__ = [
    "FORMAT",
    "SweepStore",
    "expected_units",
    "now",
    "read_baselines",
    "read_manifest",
    "read_units",
    "rerun_advice",
    "versions",
    "write_json_atomic",
]

FORMAT = "interv-sweep/1"
"""Format tag of the sweep directories this module writes."""

MANIFEST = "manifest.json"
BASELINES = "baselines.json"
UNITS = "units.jsonl"
_LOCK = ".lock"
_FILES = (MANIFEST, BASELINES, UNITS, _LOCK)
_NOFOLLOW = os.O_NOFOLLOW | os.O_CLOEXEC


def now() -> str:
    """The current UTC time, ISO 8601 with seconds (``2026-01-31T12:00:00+00:00``)."""
    return datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")


def versions() -> dict[str, str]:
    """Installed versions of interv, torch and transformer-lens."""
    return {name: metadata.version(name) for name in ("interv", "torch", "transformer-lens")}


def write_json_atomic(path: Path, payload: Mapping[str, Any]) -> None:
    """Write ``payload`` as JSON to ``path`` atomically and durably with
    :func:`interv._outputs.write_file` (an exclusive temporary, fsync, rename over the old
    entry, never through a link)."""
    text = json.dumps(payload, indent=2, sort_keys=True) + "\n"
    write_file(path, text.encode("utf-8"), replace=True, durable=True)


def _no_link(path: Path, what: str) -> bool:
    """Whether ``path`` exists as a regular file; a link or another kind of entry there is
    refused (a sweep directory's files are interv's, and interv never creates links)."""
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        return False
    if stat.S_ISREG(info.st_mode):
        return True
    kind = "a symbolic link" if stat.S_ISLNK(info.st_mode) else "not a regular file"
    raise IntervError(
        f"{what} {str(path)!r} is {kind}; interv reads and writes a sweep directory's files "
        "only as the regular files it wrote (it never follows a link there)"
    )


_MANIFEST_KEYS = (
    "config",
    "config_hash",
    "shard",
    "task_fingerprint",
    "status",
    "resumed",
    "n_units",
    "n_interventions",
)
_BASELINE_KEYS = (
    "config_hash",
    "clean",
    "corrupted",
    "dtype",
    "recovery_atol",
    "metric",
    "scope",
    "provenance",
)


def _as_dir(directory: Any) -> Path:
    return as_path(directory, "sweep directory")


_STATUSES = ("running", "complete", "failed", "interrupted")


def _damaged(path: Path, what: str) -> IntervError:
    return IntervError(
        f"{path} is damaged: {what}; interv wrote it otherwise (rerun the sweep into a new --out, "
        "or restore the file)"
    )


def _check_manifest(path: Path, manifest: Mapping[str, Any]) -> None:
    """The types of the manifest's entries (what interv wrote), or a message naming one."""
    expected: dict[str, tuple[type, ...]] = {
        "config": (dict,),
        "config_hash": (str,),
        "shard": (str, type(None)),
        "task_fingerprint": (str,),
        "status": (str,),
        "resumed": (list,),
        "n_units": (int, type(None)),
        "n_interventions": (int, type(None)),
    }
    for key, types_ in expected.items():
        value = manifest[key]
        if isinstance(value, bool) or not isinstance(value, types_):
            names = " or ".join("null" if t is type(None) else t.__name__ for t in types_)
            raise _damaged(path, f"{key!r} is {value!r}, expected {names}")
    if manifest["status"] not in _STATUSES:
        raise _damaged(path, f"status {manifest['status']!r} is not one of {_STATUSES}")
    for key in ("n_units", "n_interventions"):
        if manifest[key] is not None and manifest[key] < 0:
            raise _damaged(path, f"{key!r} is {manifest[key]}, expected a count >= 0")
    if manifest["shard"] is not None:
        try:
            Shard.parse(manifest["shard"])
        except IntervError as error:
            raise _damaged(path, str(error)) from None


def _check_baselines(path: Path, baselines: Mapping[str, Any]) -> None:
    for key in ("clean", "corrupted"):
        values = baselines[key]
        if not isinstance(values, list) or not values or not all(_is_number(v) for v in values):
            raise _damaged(path, f"{key!r} is not a non-empty list of numbers")
    if len(baselines["clean"]) != len(baselines["corrupted"]):
        raise _damaged(path, "'clean' and 'corrupted' hold different numbers of prompts")
    if baselines["dtype"] not in _DTYPES:
        raise _damaged(path, f"dtype {baselines['dtype']!r} is not one of {_DTYPES}")
    if not _is_number(baselines["recovery_atol"]) or not baselines["recovery_atol"] >= 0:
        raise _damaged(path, f"recovery_atol {baselines['recovery_atol']!r} is not a number >= 0")
    for key in ("metric", "scope", "provenance"):
        if not isinstance(baselines[key], dict):
            raise _damaged(path, f"{key!r} is not a JSON object")


_DTYPES = ("float32", "float64", "float16", "bfloat16")
_RECORD_LISTS = ("kinds", "descriptions", "base_runs")


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _is_table(rows: Any) -> bool:
    """A list of lists of numbers (``[n, n_prompts]`` metric values or estimates)."""
    return isinstance(rows, list) and all(
        isinstance(row, list) and all(_is_number(v) for v in row) for row in rows
    )


def _record_problem(record: Mapping[str, Any]) -> str | None:
    """What is wrong with a unit record's structure (None: nothing).

    A screened sweep's records (:mod:`interv.sweeps.screened`: ids ``e...`` estimates,
    ``x...`` one forward's exact values, ``a...`` an entry's audit) have their own shapes.
    """
    unit = str(record.get("unit", ""))
    if unit[:1] in ("e", "x", "a"):
        return _screened_record_problem(unit[0], record)
    values = record.get("values")
    if not _is_table(values):
        return "its 'values' are not a list of lists of numbers"
    return _fields_problem(record, len(values))


def _screened_record_problem(kind: str, record: Mapping[str, Any]) -> str | None:
    if not isinstance(record.get("entry"), int) or isinstance(record.get("entry"), bool):
        return "its 'entry' is not an integer"
    if kind == "a":
        return None if isinstance(record.get("outcome"), dict) else "its 'outcome' is no table"
    if kind == "x":
        indices, values = record.get("indices"), record.get("values")
        if not isinstance(indices, list) or not all(
            isinstance(i, int) and not isinstance(i, bool) for i in indices
        ):
            return "its 'indices' are not a list of integers"
        if not _is_table(values) or len(values) != len(indices):
            return f"its 'values' are not {len(indices)} lists of numbers (one per index)"
        return None
    estimates = record.get("estimates")
    if not _is_table(estimates):
        return "its 'estimates' are not a list of lists of numbers"
    return _fields_problem(record, len(estimates))


def _fields_problem(record: Mapping[str, Any], n: int) -> str | None:
    """The per-row fields of a record of ``n`` rows."""
    for key in _RECORD_LISTS:
        items = record.get(key)
        if not isinstance(items, list) or len(items) != n:
            return f"its {key!r} are not a list of {n} entries (one per row of values)"
        if not all(isinstance(item, str) for item in items):
            return f"its {key!r} are not strings"
    for key in ("sites", "params"):
        if key in record and (not isinstance(record[key], list) or len(record[key]) != n):
            return f"its {key!r} are not a list of {n} entries"
    if not isinstance(record.get("start"), int | None):
        return "its 'start' is not an integer"
    return None


def read_manifest(directory: str | Path) -> dict[str, Any]:
    """The manifest of a sweep directory.

    Raises:
        IntervError: no manifest, a manifest that is not JSON (truncated) or lacks keys,
            or another format.
    """
    path = _as_dir(directory) / MANIFEST
    if not _no_link(path, "sweep manifest"):
        raise IntervError(f"{str(directory)!r} is not a sweep directory: it has no {MANIFEST}")
    manifest = read_json(path, "sweep manifest")
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        found = manifest.get("format") if isinstance(manifest, dict) else type(manifest).__name__
        raise IntervError(f"{path} has format {found!r}; this interv reads {FORMAT!r}")
    missing = [key for key in _MANIFEST_KEYS if key not in manifest]
    if missing:
        raise IntervError(
            f"sweep manifest {str(path)!r} is incomplete: it lacks {missing}; the directory is "
            "damaged (rerun the sweep into a new --out)"
        )
    _check_manifest(path, manifest)
    return manifest


def read_baselines(directory: str | Path) -> dict[str, Any] | None:
    """The stored baselines of a sweep directory, or None before the first unit.

    Raises:
        IntervError: a baselines file that is not JSON or lacks keys.
    """
    path = _as_dir(directory) / BASELINES
    if not _no_link(path, "sweep baselines"):
        return None
    baselines = read_json(path, "sweep baselines")
    missing = [
        key for key in _BASELINE_KEYS if not isinstance(baselines, dict) or key not in baselines
    ]
    if missing:
        raise IntervError(
            f"sweep baselines {str(path)!r} are incomplete: they lack {missing}; the directory "
            "is damaged (rerun the sweep into a new --out)"
        )
    _check_baselines(path, baselines)
    return baselines


def read_units(directory: str | Path, config_hash: str) -> dict[str, dict[str, Any]]:
    """Completed unit records by id, from ``units.jsonl``; a torn last line is ignored.

    Raises:
        IntervError: a complete line that is not JSON, a record of another config,
            or two different records with the same id.
    """
    path = _as_dir(directory) / UNITS
    if not _no_link(path, "sweep units"):
        return {}
    records: dict[str, dict[str, Any]] = {}
    for line_number, line in _complete_lines(path.read_bytes()):
        try:
            record = json.loads(line)
        except json.JSONDecodeError as error:
            raise IntervError(
                f"{path}: line {line_number} is not a JSON record ({error}); the directory is "
                "damaged: delete that line and rerun the same command to recompute its unit"
            ) from None
        if not isinstance(record, dict) or not isinstance(record.get("unit"), str):
            raise IntervError(
                f"{path}: line {line_number} is not a unit record (a JSON object with 'unit'); "
                "the directory is damaged"
            )
        problem = _record_problem(record)
        if problem is not None:
            raise IntervError(
                f"{path}: line {line_number} (unit {record['unit']}) is damaged: {problem}; "
                "delete that line and rerun the same command to recompute the unit"
            )
        if record.get("config_hash") != config_hash:
            raise IntervError(
                f"{path}: line {line_number} belongs to config {record.get('config_hash')!r}, "
                f"not to this sweep's config {config_hash!r}"
            )
        previous = records.setdefault(record["unit"], record)
        if previous != record:
            raise IntervError(
                f"{path}: unit {record['unit']} is stored twice with different values "
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


def _complete_lines(data: bytes) -> Iterator[tuple[int, bytes]]:
    """Numbered newline-terminated lines of ``data`` (a torn last line is dropped)."""
    complete = data[: data.rfind(b"\n") + 1]
    for number, line in enumerate(complete.splitlines(), start=1):
        if line.strip():
            yield number, line


def open_locked(
    directory: str | Path,
    *,
    what: str,
    by: str,
    files: tuple[str, ...],
    log: str,
    reopen: Callable[[Path], dict[str, Any]],
    links: tuple[str, ...] = (),
) -> tuple[Path, dict[str, Any], int, OutputDir]:
    """Claim ``directory`` for ``by``, take its lock and reopen (or create) its manifest.

    The one way a resumable store (a sweep, a circuit discovery) opens its directory: an
    existing file, a path below a file or an unwritable place is refused by the claim; a
    link at any of ``files`` or ``links`` is refused; the lock (``.lock``, never followed)
    is taken without waiting, so a directory another process is writing is refused;
    ``reopen(path)`` returns the manifest (and refuses another job's directory); a torn
    last line of ``log`` is dropped. Everything is undone when any step fails. Returns the
    directory, the manifest, the lock's descriptor and the claim.
    """
    kind = what.split()[0]
    output = claim_dir(directory, what=what, by=by, contents=False)
    path = output.path
    try:
        for name in (*files, *links):
            _no_link(path / name, f"{kind} file")
        new_lock = not (path / _LOCK).exists()
        lock_fd = os.open(path / _LOCK, os.O_WRONLY | os.O_CREAT | _NOFOLLOW, 0o644)
    except (IntervError, OSError) as error:
        output.abandon()
        if isinstance(error, OSError):
            raise failure(error, path / _LOCK) from None
        raise
    try:
        fcntl.flock(lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError as error:
        os.close(lock_fd)
        output.abandon()
        raise IntervError(
            f"{what} {str(path)!r} is being written by another process; wait for it or "
            "choose another --out"
        ) from error
    try:
        manifest = reopen(path)
        _truncate_torn_tail(path / log)
        output.record(files)
    except BaseException:
        os.close(lock_fd)
        if new_lock:
            (path / _LOCK).unlink(missing_ok=True)
        output.abandon()
        raise
    return path, manifest, lock_fd, output


class SweepStore:
    """Writer of one sweep directory; create it with :meth:`open`.

    Holds the directory's lock until :meth:`close`; use it as a context manager.
    """

    def __init__(
        self,
        directory: Path,
        manifest: dict[str, Any],
        lock_fd: int,
        output: OutputDir | None = None,
    ) -> None:
        self.directory = directory
        self.manifest = manifest
        self._lock_fd = lock_fd
        self._output = output

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
        path, manifest, lock_fd, output = open_locked(
            directory,
            what="sweep directory",
            by="interv sweep",
            files=_FILES,
            log=UNITS,
            reopen=lambda path: cls._reopen_or_create(path, config, shard, task_fingerprint),
        )
        return cls(path, manifest, lock_fd, output)

    @staticmethod
    def _reopen_or_create(
        directory: Path, config: SweepConfig, shard: Shard | None, task_fingerprint: str
    ) -> dict[str, Any]:
        shard_text = None if shard is None or shard.count == 1 else str(shard)
        if (directory / MANIFEST).is_file():
            manifest = read_manifest(directory)
            identity = (config.config_hash, shard_text, task_fingerprint)
            stored = (manifest["config_hash"], manifest["shard"], manifest["task_fingerprint"])
            if stored == identity:
                if manifest["status"] != "complete":
                    manifest["resumed"].append(now())
                return manifest
            if _holds_results(directory):
                _refuse_other_sweep(directory, manifest, config, shard_text, task_fingerprint)
            # nothing was computed under the stored config (e.g. its model failed to
            # load): the directory starts afresh with the given one
        else:
            leftovers = [
                p.name
                for p in directory.iterdir()
                if p.name not in (_LOCK, MARKER) and not is_scratch(p.name)
            ]
            if leftovers:
                raise IntervError(
                    f"--out {str(directory)!r} is neither empty nor a sweep directory (it "
                    f"holds {sorted(leftovers)[:5]}); choose an empty or new directory"
                )
        manifest = {
            "format": FORMAT,
            "config": config.normalized,
            "config_hash": config.config_hash,
            "seed": config.sweep["seed"],
            "shard": shard_text,
            "task_fingerprint": task_fingerprint,
            "versions": versions(),
            "started": now(),
            "resumed": [],
            "finished": None,
            "status": "running",
            "n_units": None,
            "n_interventions": None,
            "merged_from": None,
        }
        write_json_atomic(directory / MANIFEST, manifest)
        return manifest

    def __enter__(self) -> SweepStore:
        return self

    def __exit__(self, exc_type: Any, exc: Any, traceback: Any) -> None:
        try:
            if exc_type is not None and self.manifest.get("status") != "complete":
                self.fail(exc)
        finally:
            self.close()

    def fail(self, error: BaseException | None) -> None:
        """Record that the run stopped on ``error``: status ``"interrupted"`` (Ctrl-C) or
        ``"failed"`` with the error, kept until a rerun resumes. A directory this run
        created that holds no result yet is removed instead (no partial output)."""
        if self._output is not None and not _holds_results(self.directory):
            self._output.abandon()
            if not (self.directory / MANIFEST).is_file():
                return  # the directory is as it was before this run
        interrupted = isinstance(error, KeyboardInterrupt)
        self.manifest.update(
            status="interrupted" if interrupted else "failed",
            error=None if error is None else f"{type(error).__name__}: {error}",
            stopped=now(),
        )
        # on a full disk this write fails too: the error that stopped the run is the one
        # to show, and the stored status ("running") is resumed by a rerun all the same
        with contextlib.suppress(IntervError):
            write_json_atomic(self.directory / MANIFEST, self.manifest)

    def close(self) -> None:
        """List the directory's files in its marker with the hashes of their present
        content (so ``interv report DIR`` may write beside them), then release the lock."""
        if self._lock_fd < 0:
            return
        try:
            if self._output is not None and (self.directory / MANIFEST).is_file():
                with contextlib.suppress(IntervError, OSError):  # e.g. a full disk
                    self._output.record(_FILES)
        finally:
            os.close(self._lock_fd)
            self._lock_fd = -1

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
        write_json_atomic(self.directory / MANIFEST, self.manifest)

    def completed(self) -> dict[str, dict[str, Any]]:
        """Records of the units already stored, by id."""
        return read_units(self.directory, self.manifest["config_hash"])

    def baselines(self) -> dict[str, Any] | None:
        """The stored baselines, or None if none are stored yet."""
        return read_baselines(self.directory)

    def write_baselines(self, baselines: Mapping[str, Any]) -> None:
        """Store the baselines (once: later calls are ignored)."""
        if not (self.directory / BASELINES).is_file():
            write_json_atomic(self.directory / BASELINES, baselines)

    def append(self, record: Mapping[str, Any]) -> None:
        """Append one unit record as one complete line, flushed and fsync-ed."""
        data = (json.dumps(record, sort_keys=True) + "\n").encode()
        path = self.directory / UNITS
        try:
            fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | _NOFOLLOW, 0o644)
            try:
                _only_name(fd, path)
                view = memoryview(data)
                while view:
                    view = view[os.write(fd, view) :]
                os.fsync(fd)
            finally:
                os.close(fd)
        except OSError as error:  # a torn line is cut off when the directory is reopened
            raise failure(error, path) from None

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
        write_json_atomic(self.directory / MANIFEST, self.manifest)

    def note_no_work(self) -> None:
        """Record that a rerun found the sweep complete and computed nothing."""
        if self.manifest.get("computed_in_last_run") != 0:
            self.manifest["computed_in_last_run"] = 0
            write_json_atomic(self.directory / MANIFEST, self.manifest)

    def finish(self, **extra: Any) -> None:
        """Mark the sweep complete, with its end time (and ``extra`` manifest entries)."""
        self.manifest.update(extra, status="complete", finished=now())
        write_json_atomic(self.directory / MANIFEST, self.manifest)


def _holds_results(directory: Path) -> bool:
    units = directory / UNITS
    return (directory / BASELINES).is_file() or (units.is_file() and units.stat().st_size > 0)


def _refuse_other_sweep(
    directory: Path,
    manifest: Mapping[str, Any],
    config: SweepConfig,
    shard_text: str | None,
    task_fingerprint: str,
) -> None:
    if manifest["config_hash"] != config.config_hash:
        differences = "\n  ".join(config_diff(manifest["config"], config.normalized))
        raise IntervError(
            f"sweep directory {str(directory)!r} holds results of another config "
            f"(hash {manifest['config_hash']}, this config {config.config_hash}); "
            f"differing keys (stored -> given):\n  {differences}\n"
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


def _only_name(fd: int, path: Path) -> None:
    """The unit log is changed in place, so it must have no other name: a hard link
    planted there (to a file elsewhere) would be written through as a symbolic link would."""
    if os.fstat(fd).st_nlink > 1:
        raise IntervError(
            f"sweep units {str(path)!r} has other hard links; interv changes it in place and "
            "writes only a file that is nowhere else (copy the directory without hard links)"
        )


def _truncate_torn_tail(path: Path) -> None:
    """Cut a torn last line (no trailing newline) off ``path``, so appends start clean."""
    try:
        fd = os.open(path, os.O_RDWR | _NOFOLLOW)
    except FileNotFoundError:
        return
    except OSError as error:
        raise failure(error, path) from None
    with os.fdopen(fd, "rb+") as handle:
        _only_name(handle.fileno(), path)
        data = handle.read()
        keep = data.rfind(b"\n") + 1
        if keep != len(data):
            handle.truncate(keep)
            handle.flush()
            os.fsync(handle.fileno())
