"""Output safety: interv never overwrites a file it did not write.

Every command that writes files (``interv demo``, ``interv report``, plots of
``similarity`` and ``pruning``, ``interv sweep``, ``interv zoo train``) claims its
output through this module *before* the expensive work:

- :func:`claim_dir` accepts a directory that does not exist yet (it is created), an
  empty directory, or one that holds only files an earlier interv run wrote there.
  Those are listed in the directory's marker, ``.interv-files.json``, with a SHA-256 of
  their content; a listed file whose content changed since (someone edited it) counts
  as the user's. An existing file at the path, a path below a file, a place that
  cannot be written (checked by creating and removing a probe file) and a directory
  holding anyone else's files are refused with :class:`~interv.errors.IntervError`.
- :func:`claim_file` does the same for one output file (a plot): a new path, or a file
  that the marker of its folder lists as interv's own and unchanged.
- :func:`fresh_dir` picks the first claimable directory of ``base``, ``base-2``,
  ``base-3``, ... (for default output directories: say where, never overwrite).

A claim that ends in an exception (the run failed or was interrupted) removes what
this run created: its new files and the directories it made, so a failed run leaves
no partial output. Internal to interv; no stability promise.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import tempfile
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from interv.errors import IntervError

__all__ = ["MARKER", "OutputDir", "claim_dir", "claim_file", "fresh_dir"]

MARKER = ".interv-files.json"
"""Name of the marker file listing what interv wrote in a directory."""

_FORMAT = "interv-files/1"
_CHUNK = 1 << 20


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        while chunk := handle.read(_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def _read_marker(directory: Path) -> dict[str, dict[str, Any]]:
    """Files the marker of ``directory`` lists: name -> {"sha256": hex or None, "by": ...}.
    A missing or unreadable marker lists nothing (then every file counts as the user's)."""
    try:
        data = json.loads((directory / MARKER).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    if not isinstance(data, dict) or data.get("format") != _FORMAT:
        return {}
    files = data.get("files")
    return (
        {k: v for k, v in files.items() if isinstance(v, dict)} if isinstance(files, dict) else {}
    )


def _write_marker(directory: Path, files: dict[str, dict[str, Any]]) -> None:
    payload = {
        "format": _FORMAT,
        "note": "files interv wrote here; interv overwrites only these, and only unchanged",
        "files": dict(sorted(files.items())),
    }
    temporary = directory / f".{MARKER}.tmp"
    temporary.write_text(json.dumps(payload, indent=1) + "\n", encoding="utf-8")
    os.replace(temporary, directory / MARKER)


def _foreign_entries(directory: Path, listed: dict[str, dict[str, Any]]) -> list[str]:
    """Entries of ``directory`` that interv did not write, or that changed since."""
    foreign = []
    for entry in sorted(directory.iterdir()):
        if entry.name in (MARKER, f".{MARKER}.tmp"):
            continue
        record = listed.get(entry.name)
        if record is None:
            foreign.append(entry.name)
        elif record.get("kind") == "dir":
            if not entry.is_dir():
                foreign.append(entry.name)
        elif not entry.is_file():
            foreign.append(entry.name)
        elif record.get("sha256") is not None and _sha256(entry) != record["sha256"]:
            foreign.append(f"{entry.name} (changed since interv wrote it)")
    return foreign


def _shown(names: list[str]) -> str:
    shown = ", ".join(names[:5])
    return shown + (f" and {len(names) - 5} more" if len(names) > 5 else "")


def _check_creatable(path: Path, what: str) -> Path:
    """The nearest existing ancestor of ``path``, which must be a directory."""
    for parent in path.parents:
        if parent.exists():
            if not parent.is_dir():
                raise IntervError(
                    f"{what} {str(path)!r} cannot be created: {str(parent)!r} is a file, not a "
                    "directory"
                )
            return parent
    return Path(path.anchor or ".")


def _make_dirs(path: Path, what: str) -> list[Path]:
    """Create ``path`` and missing parents; returns the directories created, deepest last."""
    missing = []
    for candidate in (path, *path.parents):
        if candidate.exists():
            break
        missing.append(candidate)
    created = []
    for directory in reversed(missing):
        try:
            directory.mkdir()
        except OSError as error:
            _remove_empty(created)
            raise IntervError(
                f"cannot create {what} {str(path)!r}: {error.strerror or error}; choose a "
                "place you can write to"
            ) from None
        created.append(directory)
    return created


def _remove_empty(created: list[Path]) -> None:
    """Remove the directories ``created`` (still empty), deepest first."""
    for made in reversed(created):
        with contextlib.suppress(OSError):
            made.rmdir()


def _probe(directory: Path, what: str, created: list[Path]) -> None:
    try:
        handle, name = tempfile.mkstemp(prefix=".interv-probe-", dir=directory)
        os.close(handle)
        os.unlink(name)
    except OSError as error:
        _remove_empty(created)
        raise IntervError(
            f"cannot write into {what} {str(directory)!r}: {error.strerror or error}; choose "
            "a place you can write to"
        ) from None


class OutputDir:
    """A claimed output directory (see :func:`claim_dir`); a context manager.

    Attributes:
        path: the directory.
        by: the command that writes (recorded in the marker, e.g. ``"interv demo"``).
    """

    def __init__(self, path: Path, by: str, created: list[Path]) -> None:
        self.path = path
        self.by = by
        self._created_dirs = created
        self._listed = _read_marker(path)
        self._before = {entry.name for entry in path.iterdir()}
        self._written: set[str] = set()
        self._done = False

    def target(self, name: str) -> Path:
        """The path of output ``name`` here; refused if a file of someone else's is there
        (one that appeared after the claim, or that the marker does not list)."""
        path = self.path / name
        if path.exists() and name not in self._written and name not in self._listed:
            raise IntervError(
                f"{str(path)!r} exists and interv did not write it; not overwriting it"
            )
        return path

    def write_text(self, name: str, text: str) -> Path:
        """Write ``text`` (UTF-8) to ``name`` atomically and record it as interv's."""
        return self.write_bytes(name, text.encode("utf-8"))

    def write_bytes(self, name: str, data: bytes) -> Path:
        """Write ``data`` to ``name`` atomically and record it as interv's."""
        path = self.target(name)
        temporary = path.with_name(f".{name}.tmp")
        temporary.write_bytes(data)
        os.replace(temporary, path)
        self.record([path])
        return path

    @contextlib.contextmanager
    def staging(self) -> Iterator[Path]:
        """A temporary folder inside the directory for code that writes files itself;
        on success its files move into the directory (each checked with :meth:`target`
        and recorded), on failure it is removed with everything in it."""
        folder = Path(tempfile.mkdtemp(prefix=".interv-staging-", dir=self.path))
        try:
            yield folder
            for entry in sorted(folder.iterdir()):
                if not entry.is_file():
                    raise IntervError(f"interv wrote a non-file {entry.name!r}; expected files")
                self.target(entry.name)
            for entry in sorted(folder.iterdir()):
                os.replace(entry, self.path / entry.name)
                self._written.add(entry.name)
            self.record(self._written)
        finally:
            shutil.rmtree(folder, ignore_errors=True)

    def record(self, paths: Iterable[str | Path], *, managed: bool = False) -> None:
        """List files that interv wrote into this directory in the marker.

        ``managed=True`` lists them without a content hash: files that interv itself
        keeps changing (a sweep's append-only log), guarded by their own checks.
        """
        for path in paths:
            entry = self.path / Path(path).name
            self._written.add(entry.name)
            digest = None if managed or not entry.is_file() else _sha256(entry)
            self._listed[entry.name] = {"sha256": digest, "by": self.by}
        _write_marker(self.path, self._listed)

    def abandon(self) -> None:
        """Undo the claim after a failed run: remove the files this run wrote that did not
        exist before, restore the marker, and remove the directories it created (if
        empty). Files that were there before keep their (possibly rewritten) content."""
        if self._done:
            return
        self._done = True
        if not self.path.is_dir():
            return
        for name in self._written - self._before:
            with contextlib.suppress(OSError):
                (self.path / name).unlink()
        with contextlib.suppress(OSError):
            if MARKER in self._before:
                kept = {k: v for k, v in self._listed.items() if k in self._before}
                _write_marker(self.path, kept)
            else:
                (self.path / MARKER).unlink(missing_ok=True)
        for directory in reversed(self._created_dirs):
            with contextlib.suppress(OSError):
                directory.rmdir()

    def __enter__(self) -> OutputDir:
        return self

    def __exit__(self, exc_type: Any, exc: Any, traceback: Any) -> None:
        if exc_type is not None:
            self.abandon()
        self._done = True


def claim_dir(
    path: str | Path,
    *,
    what: str = "output directory",
    by: str = "interv",
    contents: bool = True,
) -> OutputDir:
    """Claim ``path`` as an output directory before any expensive work (module docstring).

    Args:
        path: the directory.
        what: how messages name it (e.g. ``"--out"``).
        by: the writing command, recorded in the marker.
        contents: refuse a directory holding files interv did not write; False leaves
            that to the caller (a sweep store has rules of its own for its files).

    Raises:
        IntervError: ``path`` is a file or lies below one, cannot be created or written,
            or holds files interv did not write (they are named).
    """
    path = Path(path).expanduser()
    if path.exists() and not path.is_dir():
        raise IntervError(
            f"{what} {str(path)!r} is an existing file; expected a directory (a new one, or one "
            "that interv wrote)"
        )
    created: list[Path] = []
    if path.is_dir():
        foreign = _foreign_entries(path, _read_marker(path)) if contents else []
        if foreign:
            raise IntervError(
                f"{what} {str(path)!r} holds files interv did not write ({_shown(foreign)}); "
                "interv does not overwrite them: choose a new or empty directory"
            )
    else:
        _check_creatable(path, what)
        created = _make_dirs(path, what)
    _probe(path, what, created)
    return OutputDir(path, by, created)


def claim_file(path: str | Path, *, what: str = "output file", by: str = "interv") -> OutputDir:
    """Claim the folder of the output file ``path`` and the file's name in it.

    The file must not exist, or be listed (unchanged) in the folder's marker as a file
    interv wrote. Only the file is checked, not its neighbours. Write it, then
    ``record([path])`` on the returned :class:`OutputDir`.
    """
    path = Path(path).expanduser()
    if path.name in ("", ".", ".."):
        raise IntervError(f"{what} {str(path)!r} is not a file name")
    if path.is_dir():
        raise IntervError(f"{what} {str(path)!r} is a directory; expected a file name")
    folder = path.parent
    if folder.exists() and not folder.is_dir():
        raise IntervError(f"{what} {str(path)!r} cannot be created: {str(folder)!r} is a file")
    created: list[Path] = []
    if not folder.exists():
        _check_creatable(folder, what)
        created = _make_dirs(folder, what)
    if path.exists():
        record = _read_marker(folder).get(path.name)
        if record is None or record.get("sha256") != _sha256(path):
            raise IntervError(
                f"{what} {str(path)!r} exists and interv did not write it (or it changed "
                "since); interv does not overwrite it: choose another name"
            )
    _probe(folder, what, created)
    return OutputDir(folder, by, created)


def fresh_dir(base: str | Path, *, what: str = "output directory", by: str = "interv") -> OutputDir:
    """Claim ``base`` or, if it holds someone else's files, the first claimable
    ``base-2``, ``base-3``, ... (errors other than foreign files are raised)."""
    base = Path(base)
    for k in range(1, 1000):
        candidate = base if k == 1 else base.with_name(f"{base.name}-{k}")
        if candidate.is_dir() and _foreign_entries(candidate, _read_marker(candidate)):
            continue
        return claim_dir(candidate, what=what, by=by)
    raise IntervError(f"no free {what} next to {str(base)!r} ({base.name}-2 .. -999 are taken)")
