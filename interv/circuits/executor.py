"""Where a circuit's exact work runs: in this process (the default) or on Ray workers.

>>> with RayExecutor(functools.partial(interv.load_model, "smollm2-135m"), n_workers=2) as ex:
...     result = discover(model, task, select="stability", executor=ex)  # doctest: +SKIP

The exact work of a discovery is independent stacked forwards: exact path patching of the
verified and audited edges (:func:`~interv.circuits.edge_effects`), of the edges the
stability resamples verify (:func:`~interv.circuits.circuit_stability`,
:func:`~interv.circuits.stability_selection`; their ranking is one vectorized pass and stays
here), and the faithfulness curve's circuits (:func:`~interv.circuits.faithfulness`). An
executor runs such jobs, each a batch of the local run's stacked forwards, and hands the
results back as they finish; the caller stores and assembles them exactly as the local run
does, so the numbers are the same computations on the same batches.

:class:`RayExecutor` keeps ``n_workers`` Ray actors, each loading the model once with the
picklable ``load`` it is given (the caller's model is not shipped; a worker whose model
differs from the caller's, by name, weights digest or dtype, is refused) and running one job
at a time, with as many torch threads as the calling process (a float reduction split over
another number of threads can differ in its last bits). Without a running Ray instance a
local one is started with ``n_workers`` CPUs and shut down when the executor closes.

:class:`Kept` is what a resumable run (:mod:`interv.circuits.store`) hands such work: the
results an interrupted run of the same computation stored (reused, not computed again) and
where each job's results go as it returns, whichever executor runs it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from interv._ray import dispatch, import_ray, running
from interv.errors import IntervError
from interv.provenance import model_identity

if TYPE_CHECKING:
    import torch

__all__ = ["Kept", "RayExecutor", "check_executor", "run_jobs"]


@dataclass(frozen=True)
class Kept:
    """The per-prompt results of an interrupted run of one computation, and where this run's
    go (the stability resamples' exact edges, a faithfulness curve's circuits).

    Attributes:
        stored: index (an edge, a circuit of the curve) -> ``[n_prompts]`` float64 values an
            interrupted run computed: reused as they are, not computed again, and counted
            as this computation's own work (the same figures as an uninterrupted run).
        keep: called with ``(indices, [k, n_prompts] values)`` as each job returns.
    """

    stored: Mapping[int, torch.Tensor]
    keep: Callable[[list[int], torch.Tensor], None]


def check_executor(executor: Any) -> RayExecutor | None:
    """``executor`` checked: None (this process) or a :class:`RayExecutor`."""
    if executor is not None and not isinstance(executor, RayExecutor):
        raise IntervError(
            f"executor must be None (this process) or an interv.circuits.RayExecutor; got "
            f"{type(executor).__name__}"
        )
    return executor


Job = Callable[[Any, Any, Any, dict], Any]
"""``function(model, shared, job, cache) -> result``: ``cache`` is a dict kept across the
jobs of one call in one process (runs every job of the call needs, computed once there)."""


def run_jobs(
    executor: RayExecutor | None, model: Any, function: Job, shared: Any, jobs: Sequence[Any]
) -> Iterator[tuple[int, Any]]:
    """``(position in jobs, function(model, shared, job, cache))`` for every job, in this
    process in order, or on the executor's workers as they finish."""
    if executor is None or len(jobs) == 0:
        cache: dict = {}
        for position, job in enumerate(jobs):
            yield position, function(model, shared, job, cache)
        return
    yield from executor.map(model, function, shared, jobs)


class _Worker:
    """Ray actor body: the model loaded once."""

    def __init__(self, load: Callable[[], Any], threads: int) -> None:
        import torch

        torch.set_num_threads(threads)  # the caller's: the same float reductions
        self.model = load()
        self.shared: tuple[Any, Any, dict] | None = None

    def identity(self) -> tuple[Any, ...]:
        return tuple(model_identity(self.model))

    def run(self, call: tuple[Job, Any, int, Any]) -> tuple[int, Any]:
        function, shared, position, job = call
        if self.shared is None or self.shared[0] != shared:  # one copy per map call
            self.shared = (shared, import_ray().get(shared[0]), {})
        return position, function(self.model, self.shared[1], job, self.shared[2])


class RayExecutor:
    """Runs a circuit's exact jobs on ``n_workers`` Ray actors (module docstring).

    Args:
        load: a picklable callable returning the model (e.g.
            ``functools.partial(interv.load_model, "smollm2-135m")``), called once per worker.
        n_workers: actors (>= 1), each holding one copy of the model.

    Use it as a context manager (or call :meth:`close`): Ray and the actors start on the
    first job and stop on exit.
    """

    def __init__(self, load: Callable[[], Any], n_workers: int = 2) -> None:
        if not callable(load):
            raise IntervError(f"load must be a callable returning the model; got {load!r}")
        if isinstance(n_workers, bool) or not isinstance(n_workers, int) or n_workers < 1:
            raise IntervError(f"n_workers must be an integer >= 1; got {n_workers!r}")
        self.load = load
        self.n_workers = n_workers
        self._ray: Any = None
        self._running: Any = None
        self._actors: list[Any] = []
        self._identity: tuple[Any, ...] = ()

    def __repr__(self) -> str:
        return f"RayExecutor({self.load!r}, n_workers={self.n_workers})"

    def __enter__(self) -> RayExecutor:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _start(self) -> None:
        if self._actors:
            return
        ray = import_ray()
        self._ray = ray
        self._running = running(ray, self.n_workers)
        self._running.__enter__()
        actor = ray.remote(num_cpus=1)(_Worker)
        import torch

        threads = torch.get_num_threads()
        self._actors = [actor.remote(self.load, threads) for _ in range(self.n_workers)]
        identities = set(ray.get([a.identity.remote() for a in self._actors]))
        if len(identities) != 1:
            raise IntervError(f"the Ray workers loaded different models: {sorted(identities)}")
        self._identity = identities.pop()

    def close(self) -> None:
        """Stop the actors (and the Ray instance this executor started)."""
        for actor in self._actors:
            self._ray.kill(actor)
        self._actors = []
        if self._running is not None:
            self._running.__exit__(None, None, None)
            self._running = None

    def map(
        self,
        model: Any,
        function: Job,
        shared: Any,
        jobs: Sequence[Any],
    ) -> Iterator[tuple[int, Any]]:
        """``(position, function(worker's model, shared, job, cache))`` as the jobs finish; the
        workers' model must be ``model`` (name, weights digest and dtype)."""
        self._start()
        ours = tuple(model_identity(model))
        if self._identity != ours:
            raise IntervError(
                f"the Ray workers loaded {self._identity} (name, weights digest, dtype), not the "
                f"model given {ours}; pass the executor a load of the same model"
            )
        reference = [self._ray.put(shared)]  # in a list: passed as a reference, read once
        calls = [(function, reference, position, job) for position, job in enumerate(jobs)]
        yield from dispatch(self._ray, self._actors, calls, method="run")
