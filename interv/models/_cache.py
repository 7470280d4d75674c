"""Where interv keeps files it derives from installed packages, and how it writes them.

Some models ship in a form the backend cannot boot directly (SmolLM2 comes as a
quantized GGUF file). interv converts such a model once and keeps the result in a
cache directory: ``$INTERV_CACHE`` when set, else ``interv`` under the user's cache
directory (``$XDG_CACHE_HOME``, default ``~/.cache``).

An entry is built in a scratch folder beside it and renamed into place only when complete
(:func:`interv._outputs.publish_dir`): a run killed half-way leaves at most a scratch folder,
never an entry that later loads would trust, and the next build removes it once no live
process holds it. A lock (:func:`interv._outputs.lock_file`, never through a link) makes
concurrent processes wait for the one that is building instead of building again.
"""

from __future__ import annotations

import os
import shutil
import sys
from collections.abc import Callable
from pathlib import Path

from interv._outputs import lock_file, publish_dir, remove_stale_scratch
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
    lock = target.parent / f".{name}.lock"
    try:
        with lock_file(lock, what="the cache entry", wait=False):
            return _build(target, build)
    except IntervError as error:
        if "being written by another process" not in str(error):
            raise IntervError(
                f"{error}; remove it or set {CACHE_ENV_VAR} to another directory"
            ) from None
    report_progress(f"waiting for another process to finish the cache entry {name}")
    with lock_file(lock, what="the cache entry", wait=True):
        return _build(target, build)


def _build(target: Path, build: Callable[[Path], None]) -> tuple[Path, bool]:
    """Build ``target`` under the lock (unless the process that held it did)."""
    if target.is_dir():
        return target, False
    remove_stale_scratch(target.parent)
    # staging folders of interv 0.2's cache, which a kill left behind
    for stale in target.parent.glob(f".partial-{target.name}-*"):
        shutil.rmtree(stale, ignore_errors=True)
    return target, publish_dir(target, build)


def report_progress(message: str) -> None:
    """One plain status line on stderr, for slow first-use work."""
    print(f"[interv] {message}", file=sys.stderr, flush=True)
