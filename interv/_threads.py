"""How torch's CPU threads wait and how many there are: :func:`set_threads`.

OpenMP's threads spin while they wait for work by default. On a machine that other jobs
share, the spinning threads compete with those jobs for the cores, and torch runs several
times slower (one 27-head ablation job on 2 cores next to a busy loop: 4-5x; see
``docs/performance.md``). Passive waiting (``OMP_WAIT_POLICY=PASSIVE``) makes them sleep.
OpenMP reads the variable once, when torch is imported, so it must be set before that.
Importing interv sets nothing. At interv's first heavy use in a process (the first package
of interv that needs torch: ``interv.load_model``, ``interv.run``, ``from interv.engine
import ...``), :func:`default_wait` makes the threads wait passively, unless the user chose
(:func:`set_threads`, or ``OMP_WAIT_POLICY`` in the environment) or torch was imported first
(then OpenMP has read its policy already; a line says so when the machine is busy). It says
what it did once, in one line on stderr. The ``interv`` command sets passive waiting at its
entry, and a script or notebook may choose by calling :func:`set_threads` first:

>>> import interv
>>> interv.set_threads()  # before the first model loads: torch is imported after this
>>> model = interv.load_model("induction-2l")

No stability promise for this module's private names; ``interv.set_threads`` is public.
"""

import os
import sys
import warnings

from interv.errors import IntervError

__all__ = ["set_threads"]

_WAITS = ("passive", "active")
_STATE = {"chosen": False, "defaulted": False}


def set_threads(n: int | None = None, *, wait: str = "passive") -> None:
    """Make torch's OpenMP threads wait ``wait``ly, and use ``n`` of them.

    Call it before anything imports torch (before the first ``interv.load_model``): OpenMP
    reads its wait policy once, when torch is imported. Called later with a policy other
    than the one torch started with, it warns (``RuntimeWarning``) that the wait policy is
    unchanged, saying how to set it, and still sets ``n``.

    Args:
        n: the number of threads torch uses for one operation (``torch.set_num_threads``);
            ``None`` keeps torch's choice (the number of cores).
        wait: ``"passive"`` (threads sleep while they wait: much faster when other jobs
            share the cores, what the ``interv`` command uses) or ``"active"`` (they spin:
            OpenMP's default, slightly faster on an idle machine).
    """
    if wait not in _WAITS:
        raise IntervError(f"wait must be one of {_WAITS}; got {wait!r}")
    if n is not None and (isinstance(n, bool) or not isinstance(n, int) or n < 1):
        raise IntervError(f"n must be an integer >= 1 (or None: torch's choice); got {n!r}")
    policy = wait.upper()
    _STATE["chosen"] = True
    if "torch" not in sys.modules:
        os.environ["OMP_WAIT_POLICY"] = policy
    elif os.environ.get("OMP_WAIT_POLICY", "ACTIVE").upper() != policy:
        warnings.warn(
            f"torch was imported before interv.set_threads(wait={wait!r}): OpenMP keeps the "
            "wait policy it started with. Call interv.set_threads() before anything imports "
            f"torch, or start Python with OMP_WAIT_POLICY={policy} in the environment",
            RuntimeWarning,
            stacklevel=2,
        )
    if n is not None:
        import torch  # after the policy is in the environment: OpenMP reads it now

        torch.set_num_threads(n)


def default_wait() -> None:
    """interv's default at its first heavy use: passive waiting, said once (module docstring).

    Nothing when the user chose (:func:`set_threads`, ``OMP_WAIT_POLICY`` in the
    environment), when it ran before, or when torch is imported already and the machine is
    not busy; with torch imported first on a busy machine (1-minute load average above the
    cores left after one), one line says the threads spin and how to change it.
    """
    if _STATE["defaulted"] or _STATE["chosen"] or "OMP_WAIT_POLICY" in os.environ:
        return
    _STATE["defaulted"] = True
    if "torch" not in sys.modules:
        os.environ["OMP_WAIT_POLICY"] = "PASSIVE"
        print(
            "interv: torch's threads will sleep while they wait (OMP_WAIT_POLICY=PASSIVE, set "
            "at interv's first model work): several times faster beside other jobs; call "
            "interv.set_threads(wait='active') before it to keep OpenMP's spinning",
            file=sys.stderr,
        )
        return
    cores = os.cpu_count() or 1
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else 0.0
    if cores > 1 and load > cores - 1:
        print(
            f"interv: torch was imported before interv, so its threads spin while they wait "
            f"(OpenMP's default); with the machine busy (load {load:.1f} on {cores} cores) "
            "that runs several times slower. Call interv.set_threads() before importing "
            "torch, or start Python with OMP_WAIT_POLICY=PASSIVE",
            file=sys.stderr,
        )
