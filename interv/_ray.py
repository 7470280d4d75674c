"""Ray, the optional extra (``pip install interv[ray]``): imported on use, a local instance
started where none runs, and jobs kept one per actor (the sweeps' and the circuits'
executors share this; nothing here knows what a job computes)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

from interv.errors import IntervError

__all__ = ["dispatch", "import_ray", "running"]


def import_ray() -> Any:
    """The ``ray`` module, or an IntervError saying how to install it."""
    try:
        import ray  # optional dependency
    except ImportError as error:
        raise IntervError(
            "the Ray executor needs the optional dependency ray; install it with "
            "pip install 'interv[ray]' (or pip install ray), or use the local executor"
        ) from error
    return ray


@contextlib.contextmanager
def running(ray: Any, n_workers: int) -> Iterator[None]:
    """Ray running for the block: a local instance of ``n_workers`` CPUs and no dashboard
    when none is (shut down at the end), else the one already running."""
    started = not ray.is_initialized()
    if started:
        ray.init(num_cpus=n_workers, include_dashboard=False, log_to_driver=False)
    try:
        yield
    finally:
        if started:
            ray.shutdown()


def dispatch(
    ray: Any, actors: list[Any], todo: list[Any], method: str = "compute"
) -> Iterator[Any]:
    """Yield ``actor.<method>(job)`` results as they finish (jobs started in ``todo``'s
    order), keeping each actor busy with one job."""
    queue = list(reversed(todo))
    running_jobs = {}
    for actor in actors:
        if queue:
            running_jobs[getattr(actor, method).remote(queue.pop())] = actor
    while running_jobs:
        (ready,), _ = ray.wait(list(running_jobs), num_returns=1)
        actor = running_jobs.pop(ready)
        if queue:
            running_jobs[getattr(actor, method).remote(queue.pop())] = actor
        yield ray.get(ready)
