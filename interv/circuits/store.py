"""A circuit discovery that resumes after a kill: its exact work stored as it is done.

>>> result = discover_in("circuit-run", model, task, method="eap-ig", steps=5)  # doctest: +SKIP

A long discovery (EAP or EAP-IG on every edge, then exact path patching of the verified
top and the audit) writes into one resumable directory (:mod:`interv._journal`: the
lifecycle, the lock and the kill-safe order are those of every resumable directory):

- ``manifest.json``: what is being discovered (model, task fingerprint, method, steps,
  QK fix, metric, the screen's rule), the versions, the start time and the status;
- ``scores.json``: the screen's scores of every edge (``EdgeScores.to_dict()``), stored
  before any exact work, so that a resumed run ranks and audits exactly as the interrupted
  one did (the scores are not recomputed; scores of other prompts or another model there
  are refused, naming the field of their provenance that differs);
- ``exact.jsonl``: one line per batch of exact edge effects, ``{"indices": [...],
  "values": [...]}``, appended as one complete line and ``fsync``-ed as soon as the batch is
  computed (a kill leaves at most a torn last line, dropped on reopening);
- the outputs of ``interv circuit`` (:data:`OUTPUTS`), safe-written and recorded.

Rerunning the same command (or call) reads them back and passes the stored exact values to
``discover(known=...)``: nothing exact is computed twice. Another discovery (other method,
screen, prompts or model) into the same directory is refused in one line naming the keys
that differ.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

import torch

from interv._checks import read_json
from interv._journal import MANIFEST, Journal, Layout, Store, resumed, started
from interv._outputs import regular_file
from interv._schema import read, read_lines
from interv.audit import Screen
from interv.circuits._stored import CircuitManifest, ExactRecord
from interv.circuits.discovery import discover
from interv.circuits.screens import EdgeScores, edge_scores, fingerprint
from interv.errors import IntervError
from interv.provenance import Provenance, join

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

SCORES = "scores.json"
EXACT = "exact.jsonl"
OUTPUTS = (
    "circuit.json",
    "faithfulness.json",
    "mission.json",
    "circuit.md",
    "circuit.html",
    "mib_circuit.json",
)
"""The result files ``interv circuit`` writes beside the store's own files
(``mib_circuit.json`` only with ``--convention mib`` on a graph of MIB's shape)."""


def read_circuit_manifest(directory: Path) -> dict[str, Any]:
    """The manifest of a circuit directory (:class:`~interv.circuits._stored.CircuitManifest`),
    or an IntervError naming what is wrong."""
    path = directory / MANIFEST
    data = read_json(path, "circuit manifest")
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise IntervError(
            f"{str(path)!r} is not the manifest of a circuit directory (format {FORMAT!r}); "
            "choose another --out"
        )
    return dataclasses.asdict(read(path, CircuitManifest, "circuit manifest"))


LAYOUT = Layout(
    "circuit directory",
    "interv circuit",
    read_circuit_manifest,
    once=(SCORES,),
    log=EXACT,
    outputs=OUTPUTS,
)
"""The files of a circuit directory (:mod:`interv._journal`)."""


def read_exact(directory: str | Path) -> dict[int, float]:
    """The stored exact edge effects of a circuit directory, edge index -> value.

    A torn last line (a kill while appending) is ignored; a complete line that is not a
    record (:class:`~interv.circuits._stored.ExactRecord`), or two different values for one
    edge, is refused naming the line.
    """
    path = Path(directory) / EXACT
    if not regular_file(path, "circuit exact log"):
        return {}
    known: dict[int, float] = {}
    for number, record in read_lines(path, ExactRecord, "exact effects"):
        for index, value in zip(record.indices, record.values, strict=True):
            if known.setdefault(index, value) != value:
                raise IntervError(
                    f"{str(path)!r}: edge {index} is stored twice with different exact values "
                    f"(line {number}); the directory is corrupt: delete that line and rerun "
                    "the same command to recompute its edges"
                )
    return known


def _differences(stored: Mapping[str, Any], given: Mapping[str, Any]) -> str:
    return "; ".join(
        f"{key}: {stored.get(key)!r} -> {given.get(key)!r}"
        for key in sorted(set(stored) | set(given))
        if stored.get(key) != given.get(key)
    )


class CircuitStore(Store):
    """Writer of one circuit directory; create it with :meth:`open`, use it as a context
    manager (it holds the directory's lock until it closes)."""

    @classmethod
    def open(cls, directory: str | Path, identity: Mapping[str, Any]) -> CircuitStore:
        """Create ``directory`` for the discovery ``identity`` (a JSON-ready mapping: model,
        task fingerprint, method, steps, ...), or reopen it to resume the same discovery.

        Refuses a directory holding another discovery (naming the differing keys, in one
        line), a non-empty directory that is not a circuit directory, a link among its
        files, and a directory another process is writing.
        """
        identity = json.loads(json.dumps(dict(identity), sort_keys=True))

        def decide(path: Path, stored: dict[str, Any] | None, holds: bool) -> dict[str, Any]:
            if stored is not None:
                if stored["identity"] == identity:
                    return resumed(stored)
                if holds:
                    raise IntervError(
                        f"circuit directory {str(path)!r} holds another discovery (stored -> "
                        f"given: {_differences(stored['identity'], identity)}); rerun with the "
                        "stored settings to resume, or choose another --out"
                    )
            return started(FORMAT, identity=identity)

        return cls(Journal.open(directory, LAYOUT, decide))

    def scores(self) -> dict[str, Any] | None:
        """The stored ``EdgeScores.to_dict()``, or None before any is stored."""
        if not self.journal.has(SCORES):
            return None
        path = self.directory / SCORES
        data = read_json(path, "circuit scores")
        if not isinstance(data, dict):
            raise IntervError(f"{path} is damaged: not a JSON object; rerun into a new --out")
        return data

    def write_scores(self, scores: Mapping[str, Any]) -> None:
        """Store the screen's scores (once; before any exact work)."""
        self.journal.write_once(SCORES, scores, indent=None)

    def known(self) -> dict[int, float]:
        """The exact edge effects stored so far (edge index -> value)."""
        return read_exact(self.directory)

    def append_exact(self, indices: Iterable[int], values: Any) -> None:
        """Append one batch of exact effects as one complete line, ``fsync``-ed."""
        indices = [int(i) for i in indices]
        values = [float(v) for v in torch.as_tensor(values, dtype=torch.float64).flatten()]
        if len(indices) != len(values):
            raise IntervError(f"{len(values)} exact values for {len(indices)} edges")
        self.journal.append({"indices": indices, "values": values})

    def write_output(self, name: str, text: str) -> Path:
        """Write one of :data:`OUTPUTS` beside the store's files (safe write, recorded)."""
        return self.journal.write_output(name, text)


def discover_resumable(
    store: CircuitStore,
    *,
    scores: Callable[[], Any],
    discover: Callable[..., Any],
    from_dict: Callable[[Mapping[str, Any]], Any] = EdgeScores.from_dict,
    expected: Provenance | None = None,
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
        from_dict: reads the stored scores back.
        expected: the provenance of this run (model, prompts, metric): stored scores of
            anything else are refused, naming the field that differs.
        finish: mark the directory complete afterwards (False: the caller does, once its
            own outputs are written).
    """
    stored = store.scores()
    if stored is None:
        computed = scores()
        store.write_scores(computed.to_dict())
        found = computed
    else:
        found = from_dict(stored)
        if expected is not None:
            join(expected, found, what=("this run", f"the stored {store.directory / SCORES}"))
    known = store.known()
    ran = 0

    def keep(indices: Any, values: Any) -> None:
        nonlocal ran
        indices = [int(i) for i in torch.as_tensor(indices).flatten()]
        store.append_exact(indices, values)
        ran += len(indices)

    result = discover(scores=found, known=known or None, on_exact=keep)
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
            store,
            scores=scores,
            discover=run,
            expected=Provenance.of(model, task, metric=metric),
        )
    return result
