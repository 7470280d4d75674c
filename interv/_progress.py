"""Progress of long work: tqdm's widget in Jupyter, a bar on a terminal, nothing when piped.

Every long entry point (``interv.run``, ``concentration``, the analyses, sweeps, the CLI)
takes ``progress=``, checked by :func:`check_progress`:

- ``None`` (default): a bar when one can be seen, i.e. tqdm's notebook widget inside a
  Jupyter (or VS Code) kernel where ``ipywidgets`` is installed (tqdm's text bar on the
  cell's stderr where it is not, never tqdm's "IProgress not found" warning), a bar on
  stderr when stderr is a terminal, and nothing otherwise (piped or redirected output stays
  clean). Inside another bar of interv (a sweep's units, the demo's stages) it stays quiet:
  one bar per job;
- ``True`` / ``False``: always / never a bar;
- a callable ``progress(done, total, label)``: called with ``done = 0`` first and then
  after every step, ``done`` rising to ``total``, with no bar drawn (for programs).

:func:`counting` gives a bar over ``total`` steps; :func:`stages` a bar over named stages
(``2/5 concentration``) whose elapsed time keeps ticking while a stage runs, with an
optional detail (``64/186 interventions``). stdout is never touched outside a notebook.
Internal to interv; no stability promise.
"""

from __future__ import annotations

import contextlib
import contextvars
import os
import sys
import threading
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from interv.errors import IntervError

__all__ = [
    "Count",
    "Progress",
    "Stages",
    "check_progress",
    "counting",
    "in_notebook",
    "show_progress",
    "silenced",
    "stages",
]

_TICK_S = 0.5

#: what ``progress=`` accepts: None (auto), True, False, or ``callback(done, total, label)``
Progress = bool | None | Callable[[int, int, str], object]

# set while a bar (or a callback) of interv is running: inner work with progress=None stays
# quiet, so a sweep's units or the demo's stages are not overdrawn by each run's own bar
_ACTIVE: contextvars.ContextVar[bool] = contextvars.ContextVar("interv_progress", default=False)
# set by `interv ... --quiet`: progress=None draws nothing
_SILENT: contextvars.ContextVar[bool] = contextvars.ContextVar("interv_silent", default=False)


def check_progress(progress: Any, name: str = "progress") -> Progress:
    """``progress`` if it is None, True, False or a callable, else a clear error naming it."""
    if progress is None or isinstance(progress, bool) or callable(progress):
        return progress
    raise IntervError(
        f"{name} must be None (a bar where one can be seen), True, False or a callable "
        f"progress(done, total, label); got {progress!r}"
    )


def in_notebook() -> bool:
    """Whether this process is a Jupyter kernel (notebook, JupyterLab, VS Code).

    Looks only at an IPython that is already imported (never imports it): its shell has a
    ``kernel`` in a kernel, not in a terminal IPython.
    """
    ipython = sys.modules.get("IPython")
    get_ipython = getattr(ipython, "get_ipython", None)
    if get_ipython is None:
        return False
    try:
        shell = get_ipython()
    except Exception:
        return False
    return shell is not None and getattr(shell, "kernel", None) is not None


def _terminal_width() -> int:
    """Columns of the terminal on stderr; 0 when unknown."""
    try:
        return os.get_terminal_size(sys.stderr.fileno()).columns
    except (AttributeError, OSError, ValueError):
        return 0


def _stderr_is_terminal() -> bool:
    isatty = getattr(sys.stderr, "isatty", None)
    try:
        return bool(isatty and isatty())
    except (OSError, ValueError):
        return False


@contextlib.contextmanager
def silenced() -> Iterator[None]:
    """Inside it, ``progress=None`` draws no bar (the command line's ``--quiet``)."""
    token = _SILENT.set(True)
    try:
        yield
    finally:
        _SILENT.reset(token)


def show_progress(enabled: Progress) -> bool:
    """``enabled``, or (None) whether stderr is a terminal; False for a callback (it is
    called instead of drawing)."""
    if enabled is None:
        return not _SILENT.get() and _stderr_is_terminal()
    return enabled is True


def _notebook_bar() -> Any:
    """tqdm's notebook bar class, or None where ipywidgets is missing (no warning then)."""
    from tqdm import notebook  # on use: tqdm imports IPython pieces for it

    return notebook.tqdm if getattr(notebook, "IProgress", None) is not None else None


def bar_class(enabled: bool | None) -> Any:
    """The tqdm class to draw with (None: no bar). ``enabled`` as in :func:`show_progress`,
    except that None also draws inside a Jupyter kernel, and stays quiet inside another
    bar of interv."""
    notebook = in_notebook()
    if enabled is None:
        if _ACTIVE.get() or _SILENT.get() or not (notebook or _stderr_is_terminal()):
            return None
    elif not enabled:
        return None
    if notebook:
        widget = _notebook_bar()
        if widget is not None:
            return widget
    from tqdm import std  # on use: the CLI imports this module at start-up

    return std.tqdm


class Count:
    """Advance with :meth:`advance`; draws a bar, calls a callback, or does nothing."""

    def __init__(
        self,
        total: int,
        label: str,
        bar: Any,
        callback: Callable[[int, int, str], object] | None,
        initial: int = 0,
    ) -> None:
        self.total, self.label, self.done = int(total), label, int(initial)
        self._bar, self._callback = bar, callback
        if callback is not None:
            callback(self.done, self.total, label)

    def advance(self, steps: int = 1) -> None:
        """``steps`` more steps are done."""
        if steps <= 0:
            return
        self.done = min(self.total, self.done + int(steps))
        if self._bar is not None:
            self._bar.update(steps)
        if self._callback is not None:
            self._callback(self.done, self.total, self.label)

    def close(self) -> None:
        """Stop the bar (called by :func:`counting`), drawing its final count first (tqdm
        redraws at most every 0.1 s, so a fast last step would otherwise never show)."""
        if self._bar is not None:
            self._bar.refresh()
            self._bar.close()


@contextlib.contextmanager
def counting(
    total: int, label: str, *, progress: Progress = None, unit: str = "it", initial: int = 0
) -> Iterator[Count]:
    """A bar over ``total`` steps labelled ``label`` (see the module docstring).

    ``initial`` steps are done already (a resumed sweep).
    """
    progress = check_progress(progress)
    callback = progress if callable(progress) and not isinstance(progress, bool) else None
    cls = None if callback is not None or total <= 0 else bar_class(progress)
    bar = None
    if cls is not None:
        options: dict[str, Any] = {"leave": False, "file": sys.stderr, "dynamic_ncols": True}
        if cls.__module__ == "tqdm.notebook":
            options = {"leave": True}
        elif _terminal_width() <= 0:
            options.update(dynamic_ncols=False, ncols=100)
        bar = cls(total=total, initial=initial, desc=label, unit=unit, **options)
    count = Count(total, label, bar, callback, initial)
    token = _ACTIVE.set(True) if (bar is not None or callback is not None) else None
    try:
        yield count
    finally:
        if token is not None:
            _ACTIVE.reset(token)
        count.close()


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
def stages(names: Sequence[str], *, enabled: Progress = None) -> Iterator[Stages]:
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
    token = _ACTIVE.set(True) if bar is not None else None
    try:
        yield progress
    finally:
        if token is not None:
            _ACTIVE.reset(token)
        progress.close()
