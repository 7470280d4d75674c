"""Where interv keeps files it derives from installed packages, and how it writes them.

Some models ship in a form the backend cannot boot directly (SmolLM2 comes as a
quantized GGUF file). interv converts such a model once and keeps the result in a
cache directory: ``$INTERV_CACHE`` when set, else ``interv`` under the user's cache
directory (``$XDG_CACHE_HOME``, default ``~/.cache``).

Entries are written atomically: the content is built in a temporary directory next
to the final one and renamed into place only when complete. A run killed half-way
leaves at most a stray ``.partial-*`` directory, never an entry that later loads
would trust; the next build removes such leftovers. Where the platform has
``fcntl`` (Linux, macOS), a lock file also makes concurrent processes wait for the
one that is building instead of building again.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from interv.errors import IntervError

__all__ = ["cache_root", "ensure_cached_dir", "report_progress"]

CACHE_ENV_VAR = "INTERV_CACHE"


def cache_root() -> Path:
    """The directory holding interv's cache entries (not created here)."""
    explicit = os.environ.get(CACHE_ENV_VAR)
    if explicit:
        return Path(explicit).expanduser()
    user_cache = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(user_cache).expanduser() / "interv"


def ensure_cached_dir(name: str, build: Callable[[Path], None]) -> tuple[Path, bool]:
    """The cache entry ``name``, built by ``build(empty_dir)`` if it is not there yet.

    Args:
        name: directory name of the entry under :func:`cache_root`.
        build: fills the empty directory it is given; if it raises, nothing is kept.

    Returns:
        ``(path, built)``: the entry's path and whether this call built it.
    """
    target = cache_root() / name
    if target.is_dir():
        return target, False
    target.parent.mkdir(parents=True, exist_ok=True)
    with _exclusive(target.parent / f".{name}.lock", waiting_for=name) as locked:
        if target.is_dir():
            return target, False
        if locked:  # every builder holds the lock, so partial dirs left now are stale
            for stale in target.parent.glob(f".partial-{name}-*"):
                shutil.rmtree(stale, ignore_errors=True)
        return _build_atomically(target, build)


def report_progress(message: str) -> None:
    """One plain status line on stderr, for slow first-use work."""
    print(f"[interv] {message}", file=sys.stderr, flush=True)


@contextmanager
def _exclusive(lock_path: Path, *, waiting_for: str) -> Iterator[bool]:
    """Hold an exclusive lock on ``lock_path``; yields whether a lock could be taken."""
    try:
        import fcntl
    except ImportError:  # no advisory locks here; the atomic rename still protects
        yield False
        return
    # never through a link: a link planted at the lock's name would otherwise be opened
    # (and, dangling, create its target)
    flags = os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW | os.O_CLOEXEC
    try:
        descriptor = os.open(lock_path, flags, 0o644)
    except OSError as error:
        raise IntervError(
            f"cannot open the cache lock {str(lock_path)!r}: {error.strerror or error} (a "
            f"symbolic link there is refused); remove it or set {CACHE_ENV_VAR} to another "
            "directory"
        ) from None
    with os.fdopen(descriptor, "a") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            report_progress(f"waiting for another process to finish the cache entry {waiting_for}")
            fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield True
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _build_atomically(target: Path, build: Callable[[Path], None]) -> tuple[Path, bool]:
    name = target.name
    partial = Path(tempfile.mkdtemp(prefix=f".partial-{name}-", dir=target.parent))
    try:
        build(partial)
        partial.chmod(0o755)  # mkdtemp makes it private; a cache entry is shareable
        try:
            partial.rename(target)
        except OSError:
            # Another process finished the same entry first; its copy is complete.
            if not target.is_dir():
                raise
            shutil.rmtree(partial)
            return target, False
    except BaseException:
        shutil.rmtree(partial, ignore_errors=True)
        raise
    return target, True
