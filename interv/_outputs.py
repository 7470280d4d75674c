"""Output safety: every file interv writes goes through one primitive, :func:`write_file`,
and interv never replaces a file it did not write.

The primitive writes ``data`` to ``path`` in three steps:

1. a temporary file is created *exclusively* in the target's own folder
   (``O_CREAT | O_EXCL | O_NOFOLLOW``, a new random name ``.interv-tmp-<hex>``, so a
   link or a file planted at any name is never opened), locked (``flock``) while it is
   written, and ``fsync``-ed when the caller asks for durability;
2. it is published under the final name: a *new* name by a hard link, which fails if
   anything (a file, a link) appeared there meanwhile, so nothing is replaced; a file
   interv may replace by an atomic rename, which replaces the directory entry itself and
   never writes through a link;
3. a failure (a full disk included) removes the temporary file and raises
   :class:`~interv.errors.IntervError` naming the path and saying what to do.

Every command and every Python writer (``save_report`` / ``Report.save``, the attention
viewer's ``save`` / ``to_png`` / ``to_svg``, ``PromptPairs.to_jsonl``, ``interv.zoo.train``)
claims its output through this module *before* the expensive work:

- :func:`claim_dir` accepts a directory that does not exist yet (it is created), an
  empty directory, or one that holds only files an earlier interv run wrote there.
  Those are listed in the directory's marker, ``.interv-files.json``, each with the
  SHA-256 of the bytes interv wrote: the hash is the proof. A listed file whose content
  changed since (someone edited it), an entry without a hash (a marker that proves
  nothing), a symbolic link (interv never creates one), an existing file at the path, a
  path below a file, a place that cannot be written (checked by creating and removing a
  probe file) and a directory holding anyone else's files are refused with
  :class:`~interv.errors.IntervError`.
- :func:`claim_files` / :func:`claim_file` do the same for chosen names in a folder (a
  plot, a saved report): each must be new, or listed as interv's and unchanged; their
  neighbours are not checked. ``overwrite=True`` (Python only) replaces whatever regular
  file is at those names, still never through a link.
- :func:`fresh_dir` picks the first claimable directory of ``base``, ``base-2``,
  ``base-3``, ... (for default output directories: say where, never overwrite).

The same module owns the other ways interv changes a file: :func:`append_line` (one
complete line appended to a log, without following links, ``fsync``-ed), :func:`lock_file`
(an advisory lock held on a file that is never followed), :func:`publish_dir` (a directory
built in scratch and renamed into place) and :func:`truncate_torn_tail`. Each write passes
named *boundaries* (:func:`boundary`): a kill at any of them leaves the disk as it is at that
instant, and every reader and rerun copes with each such state; tests inject the kill there
(:func:`fault_injection`), not by timing.

A marker entry is written *before* the file it proves (its hash as ``pending``, beside the
hash of the content still there), and confirmed after: whatever instant a kill lands, the
file on disk is one the marker proves, so a rerun never refuses the file its own run wrote.

Names starting with ``.interv-tmp-`` are interv's scratch (temporary files, staging
folders). A run killed while writing leaves one behind; the next claim of the directory
removes it once its lock is free (a live writer holds it), and it never counts as
someone else's file, so every rerun after a kill works. A claim that ends in an exception
(the run failed or was interrupted) removes what this run created: its new files and
the directories it made, so a failed run leaves no partial output. POSIX only (``flock``,
``O_NOFOLLOW``). Internal to interv; no stability promise.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import json
import os
import re
import secrets
import shutil
import stat
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

from interv._checks import as_path
from interv.errors import IntervError

__all__ = [
    "MARKER",
    "SCRATCH_PREFIX",
    "OutputDir",
    "append_line",
    "boundary",
    "claim_dir",
    "claim_file",
    "claim_files",
    "complete_lines",
    "failure",
    "fault_injection",
    "fresh_dir",
    "is_scratch",
    "lock_file",
    "publish_dir",
    "regular_file",
    "remove_stale_scratch",
    "truncate_torn_tail",
    "write_file",
]

MARKER = ".interv-files.json"
"""Name of the marker file listing what interv wrote in a directory."""

SCRATCH_PREFIX = ".interv-tmp-"
"""Prefix of interv's temporary files and staging folders (see the module docstring)."""

_FORMAT = "interv-files/1"
_CHUNK = 1 << 20
_HEX64 = re.compile(r"^[0-9a-f]{64}$")
_FULL_DISK = (errno.ENOSPC, errno.EDQUOT, errno.EFBIG)


def is_scratch(name: str) -> bool:
    """Whether ``name`` is one of interv's scratch names (temporary files, staging folders)."""
    return name.startswith(SCRATCH_PREFIX)


def failure(error: OSError, path: Path | str, verb: str = "write") -> IntervError:
    """An IntervError for an OSError while writing ``path``, with what to do about it."""
    reason = error.strerror or str(error)
    if error.errno in _FULL_DISK:
        advice = (
            "the disk is full: free some space and run the same command again (a sweep "
            "resumes where it stopped; nothing half-written is kept)"
        )
    else:
        advice = "choose a place you can write to"
    return IntervError(f"cannot {verb} {str(path)!r}: {reason}; {advice}")


# ---- write boundaries (fault injection) ----

_hook: Callable[[str, Path], None] | None = None


def boundary(event: str, path: Path) -> None:
    """A write boundary: ``event`` (e.g. ``"write_file:published"``) just happened to
    ``path``. A kill here leaves the disk exactly as it is now. Calls the hook installed by
    :func:`fault_injection` (none outside tests)."""
    if _hook is not None:
        _hook(event, path)


@contextlib.contextmanager
def fault_injection(hook: Callable[[str, Path], None]) -> Iterator[None]:
    """Call ``hook(event, path)`` at every write boundary while the block runs (tests copy
    the directory there, or raise, to stand for a kill at that instant)."""
    global _hook
    previous, _hook = _hook, hook
    try:
        yield
    finally:
        _hook = previous


# ---- the primitive ----


def _create_exclusive(folder: Path) -> tuple[int, Path]:
    """A new, empty, locked scratch file in ``folder``: ``(fd, path)``. Its mode follows
    the umask (as ``open`` would give), unlike ``mkstemp``'s 0600."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    for _ in range(100):
        path = folder / f"{SCRATCH_PREFIX}{secrets.token_hex(8)}"
        try:
            fd = os.open(path, flags, 0o666)
        except FileExistsError:
            continue
        fcntl.flock(fd, fcntl.LOCK_EX)
        return fd, path
    raise IntervError(f"cannot create a temporary file in {str(folder)!r}: every name was taken")


def _publish(source: Path, path: Path, *, replace: bool) -> None:
    """Give the file ``source`` (in ``path``'s folder) the name ``path``.

    ``replace=False``: only if nothing is at ``path`` (a hard link, atomic: it fails on an
    existing file or link; where the file system has no hard links, a rename after a
    check). ``replace=True``: an atomic rename over what is there (a link at ``path`` is
    replaced, never followed).
    """
    if replace:
        os.replace(source, path)
        return
    try:
        os.link(source, path, follow_symlinks=False)
        boundary("publish:linked", path)
    except FileExistsError:
        raise IntervError(
            f"{str(path)!r} appeared while interv was writing it; interv does not replace it"
        ) from None
    except OSError as error:
        if error.errno not in (errno.EPERM, errno.ENOTSUP, errno.EOPNOTSUPP, errno.EMLINK):
            raise
        if os.path.lexists(path):
            raise IntervError(
                f"{str(path)!r} appeared while interv was writing it; interv does not replace it"
            ) from None
        os.rename(source, path)
        return
    os.unlink(source)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def _fsync_dir(folder: Path) -> None:
    fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_file(
    path: str | Path, data: bytes, *, replace: bool = False, durable: bool = False
) -> Path:
    """Write ``data`` to ``path`` through a temporary created exclusively beside it, then
    publish it atomically (module docstring). The one way interv writes a file.

    Args:
        path: the file; its folder must exist.
        data: the bytes.
        replace: False = ``path`` must be free (anything that appears there, a link
            included, is left alone and the write refused); True = replace the entry at
            ``path`` (the caller has checked that interv may: its own file, or
            ``overwrite=True``).
        durable: ``fsync`` the file and its folder before returning (sweep records).

    Raises:
        IntervError: the write failed (a full disk says so, and what to do); nothing is
            left behind.
    """
    path = Path(path)
    folder = path.parent
    try:
        fd, temporary = _create_exclusive(folder)
    except OSError as error:
        raise failure(error, path) from None
    try:
        try:
            boundary("write_file:created", temporary)
            _write_all(fd, data)
            if durable:
                os.fsync(fd)
            boundary("write_file:written", temporary)
            _publish(temporary, path, replace=replace)
            if durable:
                _fsync_dir(folder)
            boundary("write_file:published", path)
        finally:
            os.close(fd)
    except BaseException as error:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        if isinstance(error, OSError):
            raise failure(error, path) from None
        raise
    return path


_NOFOLLOW = os.O_NOFOLLOW | os.O_CLOEXEC


def regular_file(path: Path, what: str) -> bool:
    """Whether ``path`` exists as a regular file; a link or another kind of entry there is
    refused (the files of interv's directories are its own, and interv never creates a
    link), naming ``what``."""
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        return False
    if stat.S_ISREG(info.st_mode):
        return True
    kind = "a symbolic link" if stat.S_ISLNK(info.st_mode) else "not a regular file"
    raise IntervError(
        f"{what} {str(path)!r} is {kind}; interv reads and writes its directories' files "
        "only as the regular files it wrote (it never follows a link there)"
    )


def _only_name(fd: int, path: Path) -> None:
    """A log is changed in place, so it must have no other name: a hard link planted there
    (to a file elsewhere) would be written through as a symbolic link would."""
    if os.fstat(fd).st_nlink > 1:
        raise IntervError(
            f"{str(path)!r} has other hard links; interv changes it in place and writes only "
            "a file that is nowhere else (copy the directory without hard links)"
        )


def append_line(path: Path, line: bytes) -> None:
    """Append ``line`` (one complete line, ending in a newline) to the log ``path`` in one
    write, never through a link, and ``fsync`` it. A kill leaves the whole line or a torn
    last line, which :func:`truncate_torn_tail` cuts off (and :func:`complete_lines` skips)."""
    if not line.endswith(b"\n") or b"\n" in line[:-1]:
        raise IntervError("a log record must be exactly one line ending in a newline")
    try:
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | _NOFOLLOW, 0o644)
        try:
            _only_name(fd, path)
            _write_all(fd, line)
            boundary("append_line:written", path)
            os.fsync(fd)
            boundary("append_line:synced", path)
        finally:
            os.close(fd)
    except OSError as error:
        raise failure(error, path) from None


def complete_lines(data: bytes) -> Iterator[tuple[int, bytes]]:
    """Numbered newline-terminated, non-blank lines of ``data`` (a torn last line is left
    out)."""
    complete = data[: data.rfind(b"\n") + 1]
    for number, line in enumerate(complete.splitlines(), start=1):
        if line.strip():
            yield number, line


def truncate_torn_tail(path: Path) -> None:
    """Cut a torn last line (no trailing newline) off the log ``path``, so appends start on
    a line of their own."""
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
            boundary("truncate:cut", path)


@contextlib.contextmanager
def lock_file(path: Path, *, what: str, wait: bool = False) -> Iterator[bool]:
    """Hold an exclusive advisory lock on ``path`` (created if missing, never through a link)
    while the block runs; the kernel releases it when the process dies. ``wait=False``: a
    lock another process holds is refused (naming ``what``); ``wait=True``: wait for it.
    Yields whether the lock file was created here."""
    created = not os.path.lexists(path)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | _NOFOLLOW, 0o644)
    except OSError as error:
        raise IntervError(
            f"cannot open the lock {str(path)!r} of {what}: {error.strerror or error} (a "
            "symbolic link there is refused)"
        ) from None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            if not wait:
                raise IntervError(
                    f"{what} {str(path.parent)!r} is being written by another process; wait "
                    "for it or choose another --out"
                ) from None
            fcntl.flock(fd, fcntl.LOCK_EX)
        boundary("lock:held", path)
        yield created
    finally:
        os.close(fd)


def publish_dir(target: Path, build: Callable[[Path], None], *, mode: int = 0o755) -> bool:
    """Build the directory ``target`` in a private scratch folder beside it (``build(folder)``
    fills it) and rename it into place: a reader sees the whole directory or none. Returns
    False when another process published ``target`` first (its copy is kept, this one
    dropped). A kill leaves at most a scratch folder, which the next claim of the parent
    removes once no live process holds it."""
    with _scratch_folder(target.parent) as folder:
        boundary("publish_dir:created", folder)
        build(folder)
        boundary("publish_dir:built", folder)
        folder.chmod(mode)
        try:
            os.rename(folder, target)
        except OSError:
            if not target.is_dir():
                raise
            return False
        boundary("publish_dir:renamed", target)
        return True


def remove_stale_scratch(directory: Path) -> None:
    """Remove interv's scratch entries in ``directory`` that no live process holds (a kill
    left them)."""
    _remove_stale_scratch(directory)


@contextlib.contextmanager
def _scratch_folder(folder: Path) -> Iterator[Path]:
    """A new private folder ``.interv-tmp-<hex>`` in ``folder``, locked while it is used
    and removed afterwards with everything in it."""
    for _ in range(100):
        path = folder / f"{SCRATCH_PREFIX}{secrets.token_hex(8)}"
        try:
            os.mkdir(path, 0o700)
            break
        except FileExistsError:
            continue
        except OSError as error:
            raise failure(error, path, "create") from None
    else:  # pragma: no cover - 100 random collisions
        raise IntervError(f"cannot create a staging folder in {str(folder)!r}")
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)
        os.close(fd)


def _remove_stale_scratch(directory: Path) -> None:
    """Remove interv's scratch entries in ``directory`` that no live process holds (left by
    a run that was killed); a link with such a name is left alone (it is not interv's)."""
    try:
        entries = [e for e in os.scandir(directory) if is_scratch(e.name)]
    except OSError:
        return
    for entry in entries:
        is_dir = entry.is_dir(follow_symlinks=False)
        if not is_dir and not entry.is_file(follow_symlinks=False):
            continue
        flags = os.O_RDONLY | os.O_NOFOLLOW | (os.O_DIRECTORY if is_dir else 0)
        try:
            fd = os.open(entry.path, flags)
        except OSError:
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            opened, named = os.fstat(fd), os.lstat(entry.path)
            if (opened.st_dev, opened.st_ino) != (named.st_dev, named.st_ino):
                continue
            if is_dir:
                shutil.rmtree(entry.path, ignore_errors=True)
            else:
                os.unlink(entry.path)
        except OSError:  # a live writer holds it (or it went away): leave it
            continue
        finally:
            os.close(fd)


# ---- the marker ----


def _sha256(path: Path) -> str | None:
    """SHA-256 of the regular file ``path`` (never through a link); None if it is not one."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return None
    with os.fdopen(fd, "rb") as handle:
        if not stat.S_ISREG(os.fstat(handle.fileno()).st_mode):
            return None
        digest = hashlib.sha256()
        while chunk := handle.read(_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def _marker_problem(directory: Path) -> str | None:
    """Why the marker of ``directory`` is not interv's (None: absent, or a valid marker)."""
    path = directory / MARKER
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        return None
    if stat.S_ISLNK(info.st_mode):
        return f"{MARKER} (a symbolic link, not interv's marker)"
    if not stat.S_ISREG(info.st_mode):
        return f"{MARKER} (not a file)"
    if _read_marker(directory) is None:
        return f"{MARKER} (not a marker interv wrote)"
    return None


def _read_marker(directory: Path) -> dict[str, dict[str, Any]] | None:
    """Files the marker of ``directory`` lists: name -> {"sha256": hex, "by": ...}; {} when
    there is no marker, None when the file there is not an interv marker (a link, a
    directory, other JSON)."""
    path = directory / MARKER
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except FileNotFoundError:
        return {}
    except OSError:
        return None
    try:
        with os.fdopen(fd, "rb") as handle:
            data = json.loads(handle.read().decode("utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict) or data.get("format") != _FORMAT:
        return None
    files = data.get("files")
    if not isinstance(files, dict):
        return None
    return {k: v for k, v in files.items() if isinstance(k, str) and isinstance(v, dict)}


def _proofs(record: dict[str, Any] | None) -> set[str]:
    """The SHA-256 digests a marker entry proves: the content interv wrote (``sha256``) and
    the content it was about to write when the entry was made (``pending``); empty for no
    entry or no well-formed hash."""
    if record is None:
        return set()
    found = (record.get("sha256"), record.get("pending"))
    return {d for d in found if isinstance(d, str) and _HEX64.match(d)}


def _write_marker(directory: Path, files: dict[str, dict[str, Any]]) -> None:
    payload = {
        "format": _FORMAT,
        "note": "files interv wrote here, each with the SHA-256 of what it wrote; interv "
        "replaces only these, and only while unchanged",
        "files": dict(sorted(files.items())),
    }
    write_file(directory / MARKER, (json.dumps(payload, indent=1) + "\n").encode(), replace=True)


def _foreign_entries(directory: Path, listed: dict[str, dict[str, Any]]) -> list[str]:
    """Entries of ``directory`` that interv did not write, or that changed since."""
    foreign = []
    problem = _marker_problem(directory)
    if problem is not None:
        foreign.append(problem)
    for entry in sorted(os.scandir(directory), key=lambda e: e.name):
        name = entry.name
        if name == MARKER:
            continue
        if entry.is_symlink():
            foreign.append(f"{name} (a symbolic link)")
        elif is_scratch(name):
            continue  # interv's scratch, removed once no live run holds it
        elif name not in listed:
            foreign.append(name)
        elif not entry.is_file(follow_symlinks=False):
            foreign.append(f"{name} (not a file)")
        elif not _proofs(listed[name]):
            foreign.append(
                f"{name} (listed without a hash of its content: no proof interv wrote it)"
            )
        elif _sha256(Path(entry.path)) not in _proofs(listed[name]):
            foreign.append(f"{name} (changed since interv wrote it)")
    return foreign


def _shown(names: list[str]) -> str:
    shown = ", ".join(names[:5])
    return shown + (f" and {len(names) - 5} more" if len(names) > 5 else "")


def _check_name(name: str) -> None:
    """``name`` must be a plain file name interv may give an output."""
    if (
        not isinstance(name, str)
        or name in ("", ".", "..", MARKER)
        or "/" in name
        or "\0" in name
        or is_scratch(name)
    ):
        raise IntervError(
            f"output name {name!r} is not a plain file name interv may write (no '/', not "
            f"{MARKER!r}, not starting with {SCRATCH_PREFIX!r})"
        )


# ---- directories ----


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
        if candidate.is_symlink():  # a dangling link: mkdir would fail; say why
            raise IntervError(
                f"cannot create {what} {str(path)!r}: {str(candidate)!r} is a symbolic link to "
                "nothing; remove it or choose another place"
            )
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
        fd, name = _create_exclusive(directory)
        os.close(fd)
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
        overwrite: True = any regular file may be replaced (``overwrite=True`` in Python);
            False = only files this run wrote or the marker proves interv's.
    """

    def __init__(
        self, path: Path, by: str, created: list[Path], *, overwrite: bool = False
    ) -> None:
        self.path = path
        self.by = by
        self.overwrite = overwrite
        self._created_dirs = created
        self._listed = _read_marker(path) or {}
        self._before = set(os.listdir(path))
        self._written: set[str] = set()
        self._done = False

    def target(self, name: str, *, own: bool = False) -> Path:
        """The path of output ``name`` here; refused if something of someone else's is
        there: a link, a directory, or a file that is neither this run's, nor proven
        interv's and unchanged by the marker (unless :attr:`overwrite`, or ``own``: a
        resumable store's own file, which it reads and checks itself)."""
        _check_name(name)
        path = self.path / name
        if name in self._written:
            return path
        try:
            info = os.lstat(path)
        except FileNotFoundError:
            return path
        if stat.S_ISLNK(info.st_mode):
            raise IntervError(
                f"{str(path)!r} is a symbolic link; interv never writes through a link (remove "
                "it or choose another place)"
            )
        if not stat.S_ISREG(info.st_mode):
            raise IntervError(f"{str(path)!r} exists and is not a file; not replacing it")
        if self.overwrite or own:
            return path
        if _sha256(path) not in _proofs(self._listed.get(name)):
            raise IntervError(
                f"{str(path)!r} exists and interv did not write it (or it changed since); "
                "interv does not overwrite it"
            )
        return path

    def write_text(self, name: str, text: str) -> Path:
        """Write ``text`` (UTF-8) to ``name`` atomically and record it as interv's."""
        return self.write_bytes(name, text.encode("utf-8"))

    def write_bytes(
        self, name: str, data: bytes, *, durable: bool = False, own: bool = False
    ) -> Path:
        """Write ``data`` to ``name`` with :func:`write_file` and record it as interv's: the
        marker names the new content (pending) before it is published, and confirms it
        after (module docstring). ``own``: see :meth:`target`."""
        path = self.target(name, own=own)
        digest = hashlib.sha256(data).hexdigest()
        self._intend(name, digest)
        write_file(path, data, replace=os.path.lexists(path), durable=durable)
        self._note(name, digest)
        return path

    @contextlib.contextmanager
    def staging(self) -> Iterator[Path]:
        """A new private folder inside the directory for code that writes files itself
        (safetensors, tokenizers); on success its files move into the directory (each
        checked with :meth:`target`, published like :func:`write_file` and recorded), on
        failure it is removed with everything in it."""
        with _scratch_folder(self.path) as folder:
            yield folder
            entries = sorted(os.scandir(folder), key=lambda e: e.name)
            for entry in entries:
                if not entry.is_file(follow_symlinks=False):
                    raise IntervError(f"interv wrote a non-file {entry.name!r}; expected files")
                self.target(entry.name)
            for entry in entries:
                digest = _sha256(Path(entry.path))
                target = self.path / entry.name
                self._intend(entry.name, digest)
                try:
                    _publish(Path(entry.path), target, replace=os.path.lexists(target))
                except OSError as error:
                    raise failure(error, target) from None
                self._note(entry.name, digest)

    def record(self, paths: Iterable[str | Path]) -> None:
        """List files that interv wrote into this directory in the marker, each with the
        SHA-256 of its present content (names of missing files are dropped, links never
        listed)."""
        for path in paths:
            name = Path(path).name
            digest = _sha256(self.path / name)
            if digest is None:
                self._listed.pop(name, None)
            else:
                self._written.add(name)
                self._listed[name] = {"sha256": digest, "by": self.by}
        _write_marker(self.path, self._listed)

    def _intend(self, name: str, digest: str | None) -> None:
        """List ``digest`` as the pending content of ``name`` (beside the proven content
        still there) before ``name`` is published."""
        entry = {"by": self.by, "pending": digest}
        present = _sha256(self.path / name)
        if present is not None and present in _proofs(self._listed.get(name)):
            entry["sha256"] = present
        self._listed[name] = entry
        _write_marker(self.path, self._listed)

    def _note(self, name: str, digest: str | None) -> None:
        self._written.add(name)
        self._listed[name] = {"sha256": digest, "by": self.by}
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
        with contextlib.suppress(OSError, IntervError):
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


def _existing_dir(path: Path, what: str) -> bool:
    """Whether ``path`` is an existing directory; a file there is refused."""
    if path.exists() and not path.is_dir():
        raise IntervError(
            f"{what} {str(path)!r} is an existing file; expected a directory (a new one, or one "
            "that interv wrote)"
        )
    return path.is_dir()


def claim_dir(
    path: str | Path,
    *,
    what: str = "output directory",
    by: str = "interv",
    contents: bool = True,
    overwrite: bool = False,
) -> OutputDir:
    """Claim ``path`` as an output directory before any expensive work (module docstring).

    Args:
        path: the directory.
        what: how messages name it (e.g. ``"--out"``).
        by: the writing command, recorded in the marker.
        contents: refuse a directory holding files interv did not write; False leaves
            that to the caller (a sweep store has rules of its own for its files; a
            marker that is not interv's is refused either way).
        overwrite: (Python only) accept a directory holding other files and let the
            returned :class:`OutputDir` replace any regular file (never a link).

    Raises:
        IntervError: ``path`` is a file or lies below one, cannot be created or written,
            or holds files interv did not write (they are named).
    """
    path = as_path(path, what).expanduser()
    created: list[Path] = []
    if _existing_dir(path, what):
        foreign = (
            _foreign_entries(path, _read_marker(path) or {})
            if contents and not overwrite
            else [p for p in [_marker_problem(path)] if p is not None]
        )
        if foreign:
            raise IntervError(
                f"{what} {str(path)!r} holds files interv did not write ({_shown(foreign)}); "
                "interv does not overwrite them: choose a new or empty directory"
            )
        _remove_stale_scratch(path)
    else:
        _check_creatable(path, what)
        created = _make_dirs(path, what)
    _probe(path, what, created)
    return OutputDir(path, by, created, overwrite=overwrite)


def claim_files(
    folder: str | Path,
    names: Iterable[str],
    *,
    what: str = "output file",
    by: str = "interv",
    overwrite: bool = False,
) -> OutputDir:
    """Claim the files ``names`` in ``folder`` (created if missing): each must be new, or
    listed (unchanged) in the folder's marker as interv's; ``overwrite=True`` accepts any
    regular file there. Links and directories at those names are refused either way; the
    folder's other entries are not checked. Write them with the returned
    :class:`OutputDir`'s :meth:`~OutputDir.write_bytes`.
    """
    folder = as_path(folder, what).expanduser()
    names = list(names)
    for name in names:
        _check_name(name)
    created: list[Path] = []
    if _existing_dir(folder, f"the folder of {what}"):
        problem = _marker_problem(folder)
        if problem is not None:
            raise IntervError(
                f"{what} cannot be written into {str(folder)!r}: it holds {problem}; interv "
                "does not replace it"
            )
        _remove_stale_scratch(folder)
    else:
        _check_creatable(folder, what)
        created = _make_dirs(folder, what)
    output = OutputDir(folder, by, created, overwrite=overwrite)
    for name in names:
        try:
            output.target(name)
        except IntervError as error:
            _remove_empty(created)
            raise IntervError(f"{what}: {error}; choose another name") from None
    _probe(folder, what, created)
    return output


def claim_file(
    path: str | Path, *, what: str = "output file", by: str = "interv", overwrite: bool = False
) -> OutputDir:
    """Claim the folder of the output file ``path`` and the file's name in it
    (:func:`claim_files` with one name). Write it with ``write_bytes(path.name, ...)``."""
    path = as_path(path, what).expanduser()
    if path.name in ("", ".", ".."):
        raise IntervError(f"{what} {str(path)!r} is not a file name")
    if path.is_dir() and not path.is_symlink():
        raise IntervError(f"{what} {str(path)!r} is a directory; expected a file name")
    folder = path.parent
    if folder.exists() and not folder.is_dir():
        raise IntervError(f"{what} {str(path)!r} cannot be created: {str(folder)!r} is a file")
    return claim_files(folder, [path.name], what=what, by=by, overwrite=overwrite)


def fresh_dir(base: str | Path, *, what: str = "output directory", by: str = "interv") -> OutputDir:
    """Claim ``base`` or, if it holds someone else's files, the first claimable
    ``base-2``, ``base-3``, ... (errors other than foreign files are raised)."""
    base = Path(base)
    for k in range(1, 1000):
        candidate = base if k == 1 else base.with_name(f"{base.name}-{k}")
        if candidate.is_dir() and _foreign_entries(candidate, _read_marker(candidate) or {}):
            continue
        return claim_dir(candidate, what=what, by=by)
    raise IntervError(f"no free {what} next to {str(base)!r} ({base.name}-2 .. -999 are taken)")
