"""Progress of long command-line work: a tqdm bar on stderr when stderr is a terminal.

:func:`stages` gives a bar over named stages (``2/5 concentration``) whose elapsed time
keeps ticking while a stage runs, with an optional detail (``64/186 interventions``).
Nothing is drawn when ``enabled`` is False, or when it is None and stderr is not a
terminal (piped or redirected output stays clean). stdout is never touched. Internal to
interv; no stability promise.
"""

from __future__ import annotations

import contextlib
import os
import sys
import threading
from collections.abc import Iterator, Sequence
from typing import Any

__all__ = ["Stages", "show_progress", "stages"]

_TICK_S = 0.5


def _terminal_width() -> int:
    """Columns of the terminal on stderr; 0 when unknown."""
    try:
        return os.get_terminal_size(sys.stderr.fileno()).columns
    except (AttributeError, OSError, ValueError):
        return 0


def show_progress(enabled: bool | None) -> bool:
    """``enabled``, or (None) whether stderr is a terminal."""
    if enabled is None:
        isatty = getattr(sys.stderr, "isatty", None)
        return bool(isatty and isatty())
    return bool(enabled)


class Stages:
    """Advance with :meth:`start` (next stage) and :meth:`detail`; no-ops when disabled."""

    def __init__(self, names: Sequence[str], bar: Any) -> None:
        self._names = tuple(names)
        self._bar = bar
        self._index = -1
        self._stop = threading.Event()
        self._ticker: threading.Thread | None = None
        if bar is not None:
            self._ticker = threading.Thread(target=self._tick, name="interv-progress", daemon=True)
            self._ticker.start()

    def _tick(self) -> None:
        while not self._stop.wait(_TICK_S):
            with contextlib.suppress(Exception):
                self._bar.refresh()

    def start(self, name: str) -> None:
        """Finish the current stage and start stage ``name`` (one of the declared names)."""
        if self._bar is None:
            return
        if self._index >= 0:
            self._bar.update(1)
        self._index = self._names.index(name)
        self._bar.set_description_str(name, refresh=False)
        self._bar.set_postfix_str("", refresh=True)

    def detail(self, text: str) -> None:
        """Show ``text`` (e.g. ``"64/186 interventions"``) beside the current stage."""
        if self._bar is not None:
            self._bar.set_postfix_str(text, refresh=True)

    def close(self) -> None:
        """Stop the bar (called by :func:`stages`)."""
        self._stop.set()
        if self._ticker is not None:
            self._ticker.join()
        if self._bar is not None:
            self._bar.close()


@contextlib.contextmanager
def stages(names: Sequence[str], *, enabled: bool | None = None) -> Iterator[Stages]:
    """A progress bar over ``names`` on stderr (see the module docstring)."""
    bar = None
    if show_progress(enabled):
        from tqdm import tqdm  # on use: the CLI imports this module at start-up

        # a terminal that reports no width (a bare pseudo-terminal) would get an empty bar
        width = {"dynamic_ncols": True} if _terminal_width() > 0 else {"ncols": 100, "nrows": 20}
        bar = tqdm(
            total=len(names),
            file=sys.stderr,
            unit="stage",
            leave=False,
            **width,
            bar_format="{desc}: {n_fmt}/{total_fmt} stages |{bar}| {elapsed} elapsed{postfix}",
        )
    progress = Stages(names, bar)
    try:
        yield progress
    finally:
        progress.close()
