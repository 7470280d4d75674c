"""A resumable directory's lifecycle, once: what a sweep and a circuit discovery share.

>>> layout = Layout("circuit directory", "interv circuit", once=("scores.json",), log="exact.jsonl")
>>> with Journal.open("run", layout, decide) as journal:  # doctest: +SKIP
...     journal.write_once("scores.json", scores)
...     journal.append({"indices": [3, 7], "values": [0.5, -0.1]})
...     journal.finish()

A resumable directory holds a ``manifest.json`` (what is computed, the versions, the times
and the status: ``"running"``, ``"complete"``, ``"failed"`` / ``"interrupted"`` with the
error), files written *once* before the work they order (a sweep's baselines, a circuit's
scores), one append-only *log* of the work as it is done (one complete line per record;
further logs where a directory keeps other work apart, a circuit's faithfulness curves),
the outputs written beside them, the ``.lock`` and interv's marker
(:mod:`interv._outputs`).

The lifecycle: :meth:`Journal.open` claims the directory (its own files excepted from the
claim's check), refuses a link among its files, takes the lock without waiting (a directory
another process writes is refused; the kernel frees the lock of a killed process), reads the
stored manifest (the layout's reader checks it) and lets the caller decide (``decide``: the
same job resumes, another job is refused naming what differs, a directory holding nothing
computed starts afresh), cuts a torn last line off the log and lists the files in the marker.
Every file is written with the safe write and recorded (the marker names a file's content
before it is published); the log takes :func:`~interv._outputs.append_line`. :meth:`finish`
lists the log in the marker, then marks the manifest complete; :meth:`fail` records the error
(a directory this run created that holds nothing computed is removed); :meth:`close` lists the
files and releases the lock.

Whatever instant a kill lands, the directory holds a manifest that says ``"running"`` (or
``"complete"`` once everything is stored), once-files whole or absent, a log with at most a
torn last line, and outputs the marker proves: the same command, rerun, repairs it and
computes only what is missing (``tests/test_journal.py`` kills at every write boundary).
Internal to interv; no stability promise.
"""

from __future__ import annotations

import contextlib
import datetime
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any

from interv._outputs import (
    MARKER,
    OutputDir,
    append_line,
    claim_dir,
    is_scratch,
    lock_file,
    regular_file,
    truncate_torn_tail,
)
from interv.errors import IntervError

__all__ = [
    "LOCK",
    "MANIFEST",
    "STATUSES",
    "Journal",
    "Layout",
    "Store",
    "now",
    "resumed",
    "started",
    "versions",
]

MANIFEST = "manifest.json"
LOCK = ".lock"
STATUSES = ("running", "complete", "failed", "interrupted")
"""Every status a manifest can hold."""


def now() -> str:
    """The current UTC time, ISO 8601 with seconds (``2026-01-31T12:00:00+00:00``)."""
    return datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")


def versions() -> dict[str, str]:
    """Installed versions of interv, torch and transformer-lens."""
    return {name: metadata.version(name) for name in ("interv", "torch", "transformer-lens")}


def started(format: str, **fields: Any) -> dict[str, Any]:
    """A new manifest of ``format``: ``fields`` (what is computed), the versions, the start
    time, no resumption yet, status ``"running"``."""
    return {
        "format": format,
        **fields,
        "versions": versions(),
        "started": now(),
        "resumed": [],
        "finished": None,
        "status": "running",
    }


def resumed(manifest: dict[str, Any]) -> dict[str, Any]:
    """``manifest`` reopened by a rerun: the time appended to ``resumed`` unless complete."""
    if manifest.get("status") == "complete":
        return manifest
    return {**manifest, "resumed": [*manifest.get("resumed", []), now()]}


@dataclass(frozen=True)
class Layout:
    """The files of one kind of resumable directory.

    Attributes:
        what: how messages name the directory (``"sweep directory"``).
        by: the command that writes it, recorded in the marker (``"interv sweep"``).
        read_manifest: reads and checks a stored manifest (the directory's path in), or
            raises naming the damage.
        once: files written once, before the work they order.
        log: the append-only log.
        outputs: result files written beside the store's own.
        logs: further append-only logs (other work kept beside the log's), each kept as the
            log is (a torn last line cut off on reopening).
    """

    what: str
    by: str
    read_manifest: Callable[[Path], dict[str, Any]]
    once: tuple[str, ...]
    log: str
    outputs: tuple[str, ...] = ()
    logs: tuple[str, ...] = ()

    @property
    def files(self) -> tuple[str, ...]:
        """The store's own files (manifest, once-files, logs, lock)."""
        return (MANIFEST, *self.once, self.log, *self.logs, LOCK)


Decide = Callable[[Path, "dict[str, Any] | None", bool], "dict[str, Any]"]
"""``decide(directory, stored manifest or None, holds results) -> the manifest to use``."""


class Journal:
    """One open resumable directory (module docstring); a context manager that holds the
    directory's lock until it closes."""

    def __init__(
        self,
        directory: Path,
        layout: Layout,
        manifest: dict[str, Any],
        output: OutputDir,
        held: contextlib.ExitStack,
        created_lock: bool,
    ) -> None:
        self.directory = directory
        self.layout = layout
        self.manifest = manifest
        self.output = output
        self._held: contextlib.ExitStack | None = held
        self._created_lock = created_lock

    @classmethod
    def open(cls, directory: str | Path, layout: Layout, decide: Decide) -> Journal:
        """Claim, lock and reopen (or create) ``directory`` (module docstring).

        ``decide(path, stored, holds_results)`` gets the stored manifest (None when there is
        none) and whether anything was computed there; it returns the manifest to use (the
        stored one to resume, a new one to start) or raises. Everything is undone when a
        step fails.
        """
        output = claim_dir(directory, what=layout.what, by=layout.by, contents=False)
        path = output.path
        held = contextlib.ExitStack()
        created_lock = False
        try:
            for name in (*layout.files, *layout.outputs):
                regular_file(path / name, f"{layout.what.split()[0]} file")
            created_lock = held.enter_context(lock_file(path / LOCK, what=layout.what))
            journal = cls(path, layout, {}, output, held, created_lock)
            stored = layout.read_manifest(path) if (path / MANIFEST).is_file() else None
            if stored is None:
                journal._refuse_leftovers()
            manifest = decide(path, stored, journal.holds_results())
            for log in (layout.log, *layout.logs):
                truncate_torn_tail(path / log)
            journal.manifest = manifest
            if stored is None or manifest != stored:
                journal.write_manifest()
            output.record([p for p in layout.files if (path / p).is_file()])
        except BaseException:
            if created_lock:
                (path / LOCK).unlink(missing_ok=True)
            held.close()
            output.abandon()
            raise
        return journal

    def _refuse_leftovers(self) -> None:
        mine = {*self.layout.files, MARKER}
        leftovers = [
            p.name
            for p in self.directory.iterdir()
            if p.name not in mine and not is_scratch(p.name)
        ]
        if leftovers:
            raise IntervError(
                f"--out {str(self.directory)!r} is neither empty nor a {self.layout.what} (it "
                f"holds {sorted(leftovers)[:5]}); choose an empty or new directory"
            )

    # ---- the files ----

    def holds_results(self) -> bool:
        """Whether anything computed is stored: a once-file or a non-empty log."""
        logs = [self.directory / name for name in (self.layout.log, *self.layout.logs)]
        return any((self.directory / name).is_file() for name in self.layout.once) or any(
            log.is_file() and log.stat().st_size > 0 for log in logs
        )

    def _write_json(self, name: str, payload: Mapping[str, Any], *, indent: int | None) -> None:
        text = json.dumps(payload, indent=indent, sort_keys=True) + "\n"
        self.output.write_bytes(name, text.encode("utf-8"), durable=True, own=True)

    def write_manifest(self) -> None:
        """Write the manifest (atomically, durably, recorded)."""
        self._write_json(MANIFEST, self.manifest, indent=2)

    def has(self, name: str) -> bool:
        """Whether the once-file ``name`` is stored (a link there is refused)."""
        return regular_file(self.directory / name, f"{self.layout.what.split()[0]} file")

    def write_once(self, name: str, payload: Mapping[str, Any], *, indent: int | None = 2) -> None:
        """Store the once-file ``name`` (a later call is ignored: the first one stands)."""
        if name not in self.layout.once:
            raise IntervError(f"{name!r} is not one of the files {self.layout.once} stored once")
        if not self.has(name):
            self._write_json(name, payload, indent=indent)

    def append(self, record: Mapping[str, Any], log: str | None = None) -> None:
        """Append one record to the log (or to one of the layout's further ``logs``) as one
        complete line, ``fsync``-ed."""
        log = self.layout.log if log is None else log
        if log not in (self.layout.log, *self.layout.logs):
            raise IntervError(
                f"{log!r} is not one of the logs {(self.layout.log, *self.layout.logs)}"
            )
        line = json.dumps(record, sort_keys=True) + "\n"
        append_line(self.directory / log, line.encode("utf-8"))

    def write_output(self, name: str, text: str) -> Path:
        """Write one of the layout's outputs beside the store's files (safe write, recorded)."""
        if name not in self.layout.outputs:
            raise IntervError(f"{name!r} is not one of the outputs {self.layout.outputs}")
        return self.output.write_text(name, text)

    # ---- the lifecycle ----

    def finish(self, **extra: Any) -> None:
        """Mark the work complete (with ``extra`` manifest entries): the log is listed in the
        marker first, so a complete manifest always has its files proven."""
        self._record()
        self.manifest.update(extra, status="complete", finished=now())
        self.write_manifest()

    def fail(self, error: BaseException | None) -> None:
        """Record that the run stopped on ``error`` (``"interrupted"`` on Ctrl-C, else
        ``"failed"``), kept until a rerun resumes; a directory this run created that holds
        nothing computed is removed instead (no partial output)."""
        if not self.holds_results():
            if self._created_lock:
                (self.directory / LOCK).unlink(missing_ok=True)
            self.output.abandon()
            if not (self.directory / MANIFEST).is_file():
                return  # the directory is as it was before this run
        self.manifest.update(
            status="interrupted" if isinstance(error, KeyboardInterrupt) else "failed",
            error=None if error is None else f"{type(error).__name__}: {error}",
            stopped=now(),
        )
        # on a full disk this write fails too: the error that stopped the run is the one to
        # show, and the stored status ("running") is resumed by a rerun all the same
        with contextlib.suppress(IntervError):
            self.write_manifest()

    def _record(self) -> None:
        names = [n for n in self.layout.files if (self.directory / n).is_file()]
        self.output.record(names)

    def close(self) -> None:
        """List the store's files in the marker with the hashes of their present content,
        then release the lock."""
        if self._held is None:
            return
        try:
            if (self.directory / MANIFEST).is_file():
                with contextlib.suppress(IntervError, OSError):  # e.g. a full disk
                    self._record()
        finally:
            self._held.close()
            self._held = None

    def __enter__(self) -> Journal:
        return self

    def __exit__(self, exc_type: Any, exc: Any, traceback: Any) -> None:
        try:
            if exc_type is not None and self.manifest.get("status") != "complete":
                self.fail(exc)
        finally:
            self.close()


class Store:
    """A resumable directory's writer: a :class:`Journal` with the store's own rules; a
    context manager (the journal's lifecycle)."""

    def __init__(self, journal: Journal) -> None:
        self.journal = journal
        self.directory = journal.directory

    @property
    def manifest(self) -> dict[str, Any]:
        """The directory's manifest (as stored, with this run's changes)."""
        return self.journal.manifest

    def fail(self, error: BaseException | None) -> None:
        """Record that the run stopped on ``error`` (:meth:`Journal.fail`)."""
        self.journal.fail(error)

    def close(self) -> None:
        """List the store's files in the directory's marker, then release the lock."""
        self.journal.close()

    def finish(self, **extra: Any) -> None:
        """Mark the work complete, with its end time (and ``extra`` manifest entries)."""
        self.journal.finish(**extra)

    def __enter__(self) -> Store:
        return self

    def __exit__(self, exc_type: Any, exc: Any, traceback: Any) -> None:
        self.journal.__exit__(exc_type, exc, traceback)
