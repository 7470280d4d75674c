"""A circuit discovery that resumes after a kill: its exact work stored as it is done.

A long discovery (EAP or EAP-IG on every edge, then exact path patching of the verified
top and the audit) writes into one directory:

- ``manifest.json``: what is being discovered (model, task fingerprint, method, steps,
  QK fix, metric, the screen's rule), the versions, the start time and the status
  (``"running"``, ``"complete"``, ``"failed"``/``"interrupted"`` with the error);
- ``scores.json``: the screen's scores of every edge (``EdgeScores.to_dict()``), written
  before any exact work, so that a resumed run ranks and audits exactly as the
  interrupted one did (the scores are not recomputed);
- ``exact.jsonl``: one line per batch of exact edge effects, ``{"indices": [...],
  "values": [...]}``, appended as one complete line, flushed and ``fsync``-ed as soon as
  the batch is computed (a kill leaves at most a torn last line, dropped on reopening).

From Python, :func:`discover_in` does the same in one call:

>>> result = discover_in("circuit-run", model, task, method="eap-ig", steps=5)  # doctest: +SKIP

Rerunning the same command (or call) reads them back and passes the stored exact values to
``discover(known=...)``: nothing exact is computed twice. Another discovery (other
method, screen, prompts or model) into the same directory is refused with the keys that
differ. Files are written with :func:`interv._outputs.write_file` (the manifest and the
scores) or appended without following links (the log), as the sweep store does
(:mod:`interv.sweeps.store`); the directory's marker lists them when the store closes.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

import torch

from interv._checks import read_json
from interv._outputs import MARKER, OutputDir, failure, is_scratch
from interv.audit import Screen
from interv.circuits import EdgeScores, discover, edge_scores
from interv.circuits.screens import fingerprint
from interv.errors import IntervError
from interv.sweeps.store import (
    _complete_lines,
    _no_link,
    _only_name,
    now,
    open_locked,
    versions,
    write_json_atomic,
)

__all__ = [
    "FORMAT",
    "OUTPUTS",
    "CircuitStore",
    "discover_in",
    "discover_resumable",
    "read_exact",
]

FORMAT = "interv-circuit-run/1"
"""Format tag of the manifest of a circuit directory."""

MANIFEST = "manifest.json"
SCORES = "scores.json"
EXACT = "exact.jsonl"
_LOCK = ".lock"
_FILES = (MANIFEST, SCORES, EXACT, _LOCK)
OUTPUTS = (
    "circuit.json",
    "faithfulness.json",
    "mission.json",
    "circuit.md",
    "circuit.html",
)
"""The result files ``interv circuit`` writes beside the store's own files."""
_NOFOLLOW = os.O_NOFOLLOW | os.O_CLOEXEC


def read_exact(directory: str | Path) -> dict[int, float]:
    """The stored exact edge effects of a circuit directory, edge index -> value.

    A torn last line (a kill while appending) is ignored; a complete line that is not a
    record, or two different values for one edge, is refused naming the line.
    """
    path = Path(directory) / EXACT
    if not _no_link(path, "circuit exact log"):
        return {}
    known: dict[int, float] = {}
    for number, line in _complete_lines(path.read_bytes()):
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            record = None
        indices = record.get("indices") if isinstance(record, dict) else None
        values = record.get("values") if isinstance(record, dict) else None
        if (
            not isinstance(indices, list)
            or not isinstance(values, list)
            or len(indices) != len(values)
            or not all(isinstance(i, int) and not isinstance(i, bool) and i >= 0 for i in indices)
            or not all(
                isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v)
                for v in values
            )
        ):
            raise IntervError(
                f"{path}: line {number} is not a record of exact edge effects "
                "({'indices': [...], 'values': [...]}); the directory is damaged: delete that "
                "line and rerun the same command to recompute its edges"
            )
        for index, value in zip(indices, values, strict=True):
            if known.setdefault(index, float(value)) != float(value):
                raise IntervError(
                    f"{path}: edge {index} is stored twice with different exact values "
                    f"(line {number}); the directory is corrupt"
                )
    return known


def _differences(stored: Mapping[str, Any], given: Mapping[str, Any]) -> list[str]:
    return [
        f"{key}: {stored.get(key)!r} -> {given.get(key)!r}"
        for key in sorted(set(stored) | set(given))
        if stored.get(key) != given.get(key)
    ]


class CircuitStore:
    """Writer of one circuit directory; create it with :meth:`open`, use it as a context
    manager (it holds the directory's lock until it closes)."""

    def __init__(self, directory: Path, manifest: dict[str, Any], lock_fd: int, output: OutputDir):
        self.directory = directory
        self.manifest = manifest
        self.output = output
        self._lock_fd = lock_fd

    @classmethod
    def open(cls, directory: str | Path, identity: Mapping[str, Any]) -> CircuitStore:
        """Create ``directory`` for the discovery ``identity`` (a JSON-ready mapping: model,
        task fingerprint, method, steps, ...), or reopen it to resume the same discovery.

        Refuses a directory holding another discovery (naming the differing keys), a
        non-empty directory that is not a circuit directory, a link among its files, and a
        directory another process is writing.
        """
        identity = json.loads(json.dumps(dict(identity), sort_keys=True))
        path, manifest, lock_fd, output = open_locked(
            directory,
            what="circuit directory",
            by="interv circuit",
            files=_FILES,
            links=OUTPUTS,
            log=EXACT,
            reopen=lambda path: cls._reopen_or_create(path, identity),
        )
        return cls(path, manifest, lock_fd, output)

    @staticmethod
    def _reopen_or_create(path: Path, identity: dict[str, Any]) -> dict[str, Any]:
        if (path / MANIFEST).is_file():
            manifest = read_json(path / MANIFEST, "circuit manifest")
            if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
                raise IntervError(
                    f"{str(path / MANIFEST)!r} is not the manifest of a circuit directory "
                    f"(format {FORMAT!r}); choose another --out"
                )
            if manifest.get("identity") == identity:
                if manifest.get("status") != "complete":
                    manifest.setdefault("resumed", []).append(now())
                return manifest
            if _holds_results(path):
                differences = "\n  ".join(_differences(manifest.get("identity") or {}, identity))
                raise IntervError(
                    f"circuit directory {str(path)!r} holds another discovery; differing keys "
                    f"(stored -> given):\n  {differences}\nrerun with the stored settings to "
                    "resume, or choose another --out"
                )
        else:
            mine = {*_FILES, MARKER}
            leftovers = [
                p.name for p in path.iterdir() if p.name not in mine and not is_scratch(p.name)
            ]
            if leftovers:
                raise IntervError(
                    f"--out {str(path)!r} is neither empty nor a circuit directory (it holds "
                    f"{sorted(leftovers)[:5]}); choose an empty or new directory"
                )
        manifest = {
            "format": FORMAT,
            "identity": identity,
            "versions": versions(),
            "started": now(),
            "resumed": [],
            "finished": None,
            "status": "running",
        }
        write_json_atomic(path / MANIFEST, manifest)
        return manifest

    def __enter__(self) -> CircuitStore:
        return self

    def __exit__(self, exc_type: Any, exc: Any, traceback: Any) -> None:
        try:
            if exc_type is not None and self.manifest.get("status") != "complete":
                self.fail(exc)
        finally:
            self.close()

    def fail(self, error: BaseException | None) -> None:
        """Record that the run stopped on ``error`` (``"interrupted"`` on Ctrl-C, else
        ``"failed"``); a directory this run created that holds no result is removed."""
        if not _holds_results(self.directory):
            self.output.abandon()
            if not (self.directory / MANIFEST).is_file():
                return
        self.manifest.update(
            status="interrupted" if isinstance(error, KeyboardInterrupt) else "failed",
            error=None if error is None else f"{type(error).__name__}: {error}",
            stopped=now(),
        )
        with contextlib.suppress(IntervError):
            write_json_atomic(self.directory / MANIFEST, self.manifest)

    def close(self) -> None:
        """List the store's files in the directory's marker, then release the lock."""
        if self._lock_fd < 0:
            return
        try:
            if (self.directory / MANIFEST).is_file():
                with contextlib.suppress(IntervError, OSError):
                    self.output.record(_FILES)
        finally:
            os.close(self._lock_fd)
            self._lock_fd = -1

    def scores(self) -> dict[str, Any] | None:
        """The stored ``EdgeScores.to_dict()``, or None before any is stored."""
        path = self.directory / SCORES
        if not _no_link(path, "circuit scores"):
            return None
        data = read_json(path, "circuit scores")
        if not isinstance(data, dict):
            raise IntervError(f"{path} is damaged: not a JSON object; rerun into a new --out")
        return data

    def write_scores(self, scores: Mapping[str, Any]) -> None:
        """Store the screen's scores (once; before any exact work)."""
        if not (self.directory / SCORES).is_file():
            write_json_atomic(self.directory / SCORES, scores)

    def known(self) -> dict[int, float]:
        """The exact edge effects stored so far (edge index -> value)."""
        return read_exact(self.directory)

    def append_exact(self, indices: Iterable[int], values: Any) -> None:
        """Append one batch of exact effects as one complete line, flushed and fsync-ed."""
        indices = [int(i) for i in indices]
        values = [float(v) for v in torch.as_tensor(values, dtype=torch.float64).flatten()]
        if len(indices) != len(values):
            raise IntervError(f"{len(values)} exact values for {len(indices)} edges")
        data = (json.dumps({"indices": indices, "values": values}) + "\n").encode()
        path = self.directory / EXACT
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
        except OSError as error:
            raise failure(error, path) from None

    def write_output(self, name: str, text: str) -> Path:
        """Write one of :data:`OUTPUTS` beside the store's files (safe write, recorded)."""
        if name not in OUTPUTS:
            raise IntervError(f"{name!r} is not one of the circuit outputs {OUTPUTS}")
        return self.output.write_text(name, text)

    def finish(self, **extra: Any) -> None:
        """Mark the discovery complete (with ``extra`` manifest entries)."""
        self.manifest.update(extra, status="complete", finished=now())
        write_json_atomic(self.directory / MANIFEST, self.manifest)


def _holds_results(path: Path) -> bool:
    exact = path / EXACT
    return (path / SCORES).is_file() or (exact.is_file() and exact.stat().st_size > 0)


def discover_resumable(
    store: CircuitStore,
    *,
    scores: Callable[[], Any],
    discover: Callable[..., Any],
    from_dict: Callable[[Mapping[str, Any]], Any],
    finish: bool = True,
) -> tuple[Any, int]:
    """Run (or resume) one discovery through ``store``; returns ``(result, n_exact_run)``.

    Args:
        store: the open circuit directory.
        scores: computes the screen's scores (an ``EdgeScores``), called only when none
            are stored; they are stored before any exact work.
        discover: ``discover(scores=..., known=..., on_exact=...)`` -> the result (the
            caller binds model, task, method, screen, metric; see
            :func:`interv.circuits.discover`).
        from_dict: ``EdgeScores.from_dict``.
        finish: mark the directory complete afterwards (False: the caller does, once its
            own outputs are written).
    """
    stored = store.scores()
    if stored is None:
        computed = scores()
        store.write_scores(computed.to_dict())
        edge_scores = computed
    else:
        edge_scores = from_dict(stored)
    known = store.known()
    ran = 0

    def keep(indices: Any, values: Any) -> None:
        nonlocal ran
        indices = [int(i) for i in torch.as_tensor(indices).flatten()]
        store.append_exact(indices, values)
        ran += len(indices)

    result = discover(scores=edge_scores, known=known or None, on_exact=keep)
    store.manifest.update(computed_in_last_run=ran, stored_before=len(known))
    if finish:
        store.finish()
    return result, ran


def discover_in(
    directory: str | Path,
    model: Any,
    task: Any,
    *,
    method: str = "eap",
    steps: int = 5,
    qk_fix: bool = False,
    screen: Screen | None = None,
    metric: str = "logit_diff",
    batch_size: int | None = None,
    progress: Callable[[str], None] | None = None,
) -> Any:
    """:func:`interv.circuits.discover`, resumable: its scores and exact effects are stored
    in ``directory`` as they are computed, and a call with the same arguments after a kill
    (or an exception) reuses them and recomputes no exact effect.

    The directory is identified by a fingerprint of the model, the prompts and the
    screen's settings; another discovery into it is refused naming what differs.
    Returns the ``CircuitResult``.
    """
    screen = Screen(top_k=200, audit=200, alpha=0.05) if screen is None else screen
    if not isinstance(screen, Screen):
        raise IntervError(f"screen must be an interv.Screen; got {screen!r}")
    if not isinstance(metric, str):
        raise IntervError(f"metric must be a metric name (a string) here; got {metric!r}")
    settings = {"method": method, "steps": steps, "qk_fix": qk_fix, "metric": metric}
    identity = {
        "model": str(getattr(model.cfg, "model_name", "unknown")),
        "fingerprint": fingerprint(model, task, **settings),
        **settings,
        "screen": {k: getattr(screen, k) for k in screen.__dataclass_fields__},
    }
    with CircuitStore.open(directory, identity) as store:

        def scores() -> Any:
            return edge_scores(
                model, task, method=method, steps=steps, qk_fix=qk_fix, metric=metric
            )

        def run(**resume: Any) -> Any:
            return discover(
                model,
                task,
                method=method,
                steps=steps,
                qk_fix=qk_fix,
                screen=screen,
                metric=metric,
                batch_size=batch_size,
                progress=progress,
                **resume,
            )

        result, _ = discover_resumable(
            store, scores=scores, discover=run, from_dict=EdgeScores.from_dict
        )
    return result
