"""A circuit discovery that resumes after a kill: its exact work stored as it is done.

>>> result = discover_in("circuit-run", model, task, method="eap-ig", steps=5)  # doctest: +SKIP

A long discovery (EAP or EAP-IG on every edge, then exact path patching of the verified
top and the audit) writes into one resumable directory (:mod:`interv._journal`: the
lifecycle, the lock and the kill-safe order are those of every resumable directory):

- ``manifest.json``: what is being discovered (its
  :func:`~interv.provenance.run_identity`: model, weights, prompts, pairs, metric, method,
  steps, QK fix, the screen's rule), the versions, the start time and the status;
- ``scores.json``: the screen's scores of every edge (``EdgeScores.to_dict()``), stored
  before any exact work, so that a resumed run ranks and audits exactly as the interrupted
  one did (the scores are not recomputed; scores of other prompts or another model there
  are refused, naming the field of their provenance that differs);
- ``exact.jsonl``: one line per batch of exact edge effects, ``{"indices": [...],
  "values": [...], "per_prompt": [[...], ...]}`` (the prompt means and each edge's
  per-prompt effects), appended as one complete line and ``fsync``-ed as soon as the batch is
  computed (a kill leaves at most a torn last line, dropped on reopening). Lines without
  ``per_prompt`` (written before interv stored it) are read as before: their means are
  reused, and the stability figures patch their edges again for the per-prompt values.
  The edges only the stability resamples or the selection's subsamples verify are stored
  the same way as they return, their lines marked ``"stage": "resamples"``;
- ``curves.jsonl``: one line per job of a faithfulness curve, ``{"curve": {...},
  "circuits": [...], "per_prompt": [[...], ...]}`` (the per-prompt metric of those of the
  curve's circuits), appended the same way; ``curve`` names the curve (its fingerprint:
  model, prompts, metric, complement, fractions, greedy, convention, selection; and the
  SHA-256 of its circuits' edges, :class:`~interv.circuits._stored.CurveKey`), so a curve
  of other settings or other circuits never reads another's lines;
- the outputs of ``interv circuit`` (:data:`OUTPUTS`), safe-written and recorded.

Rerunning the same command (or call) reads them back and passes the stored exact values to
``discover(known=..., exact_per_prompt=..., kept=...)``: no stored edge is patched again,
neither for the audit nor for the stability figures (whose resamples re-average the
per-prompt values), and ``faithfulness(..., resume=store.curve_resume)`` evaluates no
stored circuit again, with either executor (:mod:`interv.circuits.executor`); the figures
and files are the uninterrupted run's (an edge a resample needed counts as patched for it,
whichever run patched it), byte for byte at ``batch_size=1``; at larger batch sizes the
edges left to patch may be stacked in other groups than the uninterrupted run's, which can
move their values in the last bits (float sums in another order). A kill leaves at most a
torn last line in each log, cut off by the rerun; a missing log is work not done yet.
Another discovery (other method, screen, prompts or model) into the same directory is
refused in one line naming the keys that differ.
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
from interv._schema import in_file, parse, read, read_lines
from interv.audit import Screen
from interv.circuits._stored import CircuitManifest, CurveKey, CurveRecord, ExactRecord
from interv.circuits.discovery import default_screen, discover
from interv.circuits.executor import Kept
from interv.circuits.graph import Graph
from interv.circuits.screens import EdgeScores, check_hvp, check_method, edge_scores
from interv.engine.backward import GIM, check_gim
from interv.errors import IntervError
from interv.provenance import Provenance, identity_differences, join, run_identity

__all__ = [
    "FORMAT",
    "OUTPUTS",
    "CircuitStore",
    "circuit_settings",
    "discover_in",
    "discover_resumable",
    "read_exact",
    "read_exact_per_prompt",
]

FORMAT = "interv-circuit-run/1"
"""Format tag of the manifest of a circuit directory."""

SCORES = "scores.json"
EXACT = "exact.jsonl"
CURVES = "curves.jsonl"
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
    logs=(CURVES,),
)
"""The files of a circuit directory (:mod:`interv._journal`)."""


def read_exact(directory: str | Path) -> dict[int, float]:
    """The stored exact edge effects of a circuit directory, edge index -> prompt-mean value.

    A torn last line (a kill while appending) is ignored; a complete line that is not a
    record (:class:`~interv.circuits._stored.ExactRecord`), or two different values for one
    edge, is refused naming the line.
    """
    return _read_log(Path(directory))[0]


def read_exact_per_prompt(directory: str | Path) -> dict[int, torch.Tensor]:
    """The stored per-prompt exact effects of a circuit directory, edge index -> ``[n_prompts]``
    float64 (the edges of lines written before interv stored them are left out), read and
    checked as :func:`read_exact` reads the means; rows of different widths are refused."""
    return {
        index: torch.tensor(row, dtype=torch.float64)
        for index, row in _read_log(Path(directory))[1].items()
    }


def _read_log(directory: Path) -> tuple[dict[int, float], dict[int, list[float]], set[int]]:
    """``exact.jsonl`` read: edge -> value, edge -> per-prompt row where stored, and the
    edges of the resamples' lines."""
    path = directory / EXACT
    if not regular_file(path, "circuit exact log"):
        return {}, {}, set()
    known: dict[int, float] = {}
    rows: dict[int, list[float]] = {}
    later: set[int] = set()
    found: set[int] = set()  # by the discovery
    width: tuple[int, int] | None = None  # (prompts, the first line that has rows)
    for number, record in read_lines(path, ExactRecord, "exact effects"):
        if record.per_prompt:
            here = len(record.per_prompt[0])
            width = (here, number) if width is None else width
            if here != width[0]:
                raise IntervError(
                    f"{str(path)!r}: line {number} holds per-prompt effects of {here} prompts, "
                    f"line {width[1]} of {width[0]}; the directory is corrupt: {_REDO}"
                )
        per_prompt = record.per_prompt or [None] * len(record.indices)
        (later if record.stage == "resamples" else found).update(record.indices)
        for index, value, row in zip(record.indices, record.values, per_prompt, strict=True):
            if known.setdefault(index, value) != value or (
                row is not None and rows.setdefault(index, row) != row
            ):
                raise IntervError(
                    f"{str(path)!r}: edge {index} is stored twice with different exact values "
                    f"(line {number}); the directory is corrupt: delete that line and rerun "
                    "the same command to recompute its edges"
                )
    return known, rows, later - found


def _differences(stored: Mapping[str, Any], given: Mapping[str, Any]) -> str:
    return "; ".join(
        f"{key}: {mine!r} -> {theirs!r}"
        for key, mine, theirs in identity_differences(stored, given)
    )


def circuit_settings(
    method: str,
    steps: int,
    qk_fix: bool,
    screen: Screen,
    kv: str = "grouped",
    gim: Any = False,
    hvp: bool = False,
    hvp_steps: int = 1,
    hvp_top: int | None = None,
    selection: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The settings of a circuit discovery beside its provenance (checked): the screen's
    method, its gradient runs (1 for EAP, whatever ``steps`` says), the QK fix, the rule
    that picks the edges computed exactly (every field of the :class:`~interv.Screen`), the
    graph's key/value edges where they are not the default (``kv="ungrouped"``), GIM's
    backward settings and the HVP correction's where used (a resume with another estimator
    is refused), and the stability selection where one is asked (``selection``: ``select``,
    ``pi``, ``q`` and ``subsamples``; a top selection adds nothing, so directories written
    before keep their identity)."""
    if not isinstance(screen, Screen):
        raise IntervError(f"screen must be an interv.Screen; got {screen!r}")
    runs = check_method(method, steps, qk_fix)
    segments = check_hvp(hvp, hvp_steps, hvp_top, method, qk_fix, gim)
    if gim is True:
        gim = GIM()
    if gim not in (None, False) and not isinstance(gim, GIM):
        raise IntervError(
            f"gim must be an interv.engine.backward.GIM, True (its defaults) or False; got {gim!r}"
        )
    rule = {name: getattr(screen, name) for name in screen.__dataclass_fields__}
    settings = {"method": method, "steps": runs, "qk_fix": qk_fix, "screen": rule}
    settings |= {"kv": kv} if kv != "grouped" else {}
    settings |= {"gim": gim.settings()} if isinstance(gim, GIM) else {}
    settings |= {"hvp": segments, "hvp_top": hvp_top} if segments else {}
    if selection is not None and selection.get("select", "top") != "top":
        keys = ("select", "pi", "q", "subsamples")
        if set(selection) != set(keys):
            raise IntervError(f"selection must give exactly {keys}; got {sorted(selection)}")
        settings["selection"] = {key: selection[key] for key in keys}
    return settings


class CircuitStore(Store):
    """Writer of one circuit directory; create it with :meth:`open`, use it as a context
    manager (it holds the directory's lock until it closes)."""

    def __init__(self, journal: Journal) -> None:
        super().__init__(journal)
        self._circuits = [0, 0]  # curve circuits evaluated by this run, stored before it

    @classmethod
    def open(cls, directory: str | Path, identity: Mapping[str, Any]) -> CircuitStore:
        """Create ``directory`` for the discovery ``identity`` (its
        :func:`~interv.provenance.run_identity`: provenance and :func:`circuit_settings`), or
        reopen it to resume the same discovery.

        A provenance field ``identity`` does not know yet (None: the command claims the
        directory before its model loads) is compared when :meth:`confirm` gives it. Refuses
        a directory holding another discovery (naming the differing keys, in one line), a
        non-empty directory that is not a circuit directory, a link among its files, and a
        directory another process is writing.
        """
        identity = json.loads(json.dumps(dict(identity), sort_keys=True))

        def decide(path: Path, stored: dict[str, Any] | None, holds: bool) -> dict[str, Any]:
            if stored is not None:
                if not identity_differences(stored["identity"], identity):
                    return resumed({**stored, "identity": _known(stored["identity"], identity)})
                if holds:
                    _refuse_other(path, stored["identity"], identity)
            return started(FORMAT, identity=identity)

        return cls(Journal.open(directory, LAYOUT, decide))

    def confirm(self, identity: Mapping[str, Any]) -> None:
        """Compare the whole ``identity`` (its provenance known now: the model loaded) with
        the directory's, refusing another discovery as :meth:`open` does, and store it."""
        identity = json.loads(json.dumps(dict(identity), sort_keys=True))
        stored = self.manifest["identity"]
        if identity_differences(stored, identity):
            if self.journal.holds_results():
                _refuse_other(self.directory, stored, identity)
            stored = {}
        known = _known(stored, identity)
        if known != self.manifest["identity"]:
            self.manifest["identity"] = known
            self.journal.write_manifest()

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
        """The exact edge effects stored so far (edge index -> prompt-mean value)."""
        return read_exact(self.directory)

    def append_exact(
        self, indices: Iterable[int], values: Any, per_prompt: Any = None, stage: str | None = None
    ) -> None:
        """Append one batch of exact effects (``[k]`` prompt means and, where given, their
        ``[k, n_prompts]`` per-prompt values; ``stage="resamples"`` for edges only the
        stability resamples or subsamples verified) as one complete line, ``fsync``-ed."""
        indices = [int(i) for i in indices]
        values = [float(v) for v in torch.as_tensor(values, dtype=torch.float64).flatten()]
        if len(indices) != len(values):
            raise IntervError(f"{len(values)} exact values for {len(indices)} edges")
        record: dict[str, Any] = {"indices": indices, "values": values}
        if per_prompt is not None:
            rows = torch.stack([torch.as_tensor(r, dtype=torch.float64) for r in per_prompt])
            if rows.dim() != 2 or rows.shape[0] != len(indices):
                raise IntervError(
                    f"per-prompt exact values of shape {tuple(rows.shape)} for {len(indices)} "
                    "edges; expected [edges, prompts]"
                )
            record["per_prompt"] = rows.tolist()
        if stage is not None:
            record["stage"] = stage
        parse(ExactRecord, record, "exact effects")  # what is read back: rows average to values
        self.journal.append(record)

    def curve_resume(self, curve: Mapping[str, Any]) -> Kept:
        """What ``faithfulness(..., resume=store.curve_resume)`` reads and writes: the
        per-prompt metric of the circuits of ``curve`` (a
        :class:`~interv.circuits._stored.CurveKey`'s fields) stored in ``curves.jsonl``, and
        where each job's go (one line per job, ``fsync``-ed). Lines of other curves are
        left alone; a circuit stored twice with different values, or a row of another
        number of prompts, is refused naming the line."""
        key = parse(CurveKey, dict(curve), "faithfulness curve")
        stored: dict[int, torch.Tensor] = {}
        path = self.directory / CURVES
        lines = read_lines(path, CurveRecord, "curve values") if path.is_file() else ()
        for number, record in lines:
            if record.curve != key:
                continue
            for circuit, row in zip(record.circuits, record.per_prompt, strict=True):
                value = torch.tensor(row, dtype=torch.float64)
                earlier = stored.setdefault(circuit, value)
                if earlier.shape != value.shape or not torch.equal(earlier, value):
                    raise IntervError(
                        f"{str(path)!r}: circuit {circuit} of a curve is stored twice with "
                        f"different values (line {number}); the directory is corrupt: delete "
                        "that line and rerun the same command to evaluate its circuits again"
                    )
        self._circuits[1] += len(stored)

        def keep(circuits: list[int], rows: torch.Tensor) -> None:
            rows = torch.as_tensor(rows, dtype=torch.float64)
            if not bool(rows.isfinite().all()):
                return  # not stored (a resumed run evaluates them again)
            record = {
                "curve": dataclasses.asdict(key),
                "circuits": [int(c) for c in circuits],
                "per_prompt": rows.tolist(),
            }
            parse(CurveRecord, record, "curve values")
            self.journal.append(record, CURVES)
            self._circuits[0] += len(record["circuits"])

        return Kept(stored=stored, keep=keep)

    def finish(self, **extra: Any) -> None:
        """Mark the directory complete (its curves' circuits evaluated by this run and
        stored before it counted in the manifest, where a curve was resumed through it)."""
        if any(self._circuits):
            ran, before = self._circuits
            extra = {"circuits_in_last_run": ran, "circuits_stored_before": before, **extra}
        super().finish(**extra)

    def write_output(self, name: str, text: str) -> Path:
        """Write one of :data:`OUTPUTS` beside the store's files (safe write, recorded)."""
        return self.journal.write_output(name, text)


def _known(stored: Mapping[str, Any], given: Mapping[str, Any]) -> dict[str, Any]:
    """``stored`` with the values ``given`` knows and it does not (None there)."""
    return {**stored, **{key: value for key, value in given.items() if value is not None}}


def _refuse_other(path: Path, stored: Mapping[str, Any], given: Mapping[str, Any]) -> None:
    raise IntervError(
        f"circuit directory {str(path)!r} holds another discovery (stored -> given: "
        f"{_differences(stored, given)}); rerun with the stored settings to resume, or choose "
        "another --out"
    )


_REDO = "run the discovery again into a new directory (interv circuit --out DIR) to redo it"


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
        discover: ``discover(scores=..., known=..., exact_per_prompt=..., on_exact=...,
            kept=...)`` -> the result (the caller binds model, task, method, screen, metric;
            see :func:`interv.circuits.discover`): ``known`` the stored prompt means of the
            discovery's edges, ``exact_per_prompt`` a dict of their stored per-prompt rows
            that ``discover`` fills with those it computes before it calls ``on_exact``,
            which stores both; ``kept`` (:class:`~interv.circuits.executor.Kept`) the
            stored rows of the edges only the resamples verified, and where theirs go.
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
        try:
            found = from_dict(stored)
        except IntervError as error:
            raise in_file(store.directory / SCORES, error, _REDO) from None
        if expected is not None:
            join(expected, found, what=("this run", f"the stored {store.directory / SCORES}"))
    stored_means, rows, later = _read_log(store.directory)  # one read of the log
    known = {index: value for index, value in stored_means.items() if index not in later}
    tensors = {index: torch.tensor(row, dtype=torch.float64) for index, row in rows.items()}
    per_prompt = {index: row for index, row in tensors.items() if index not in later}
    resampled = {index: row for index, row in tensors.items() if index in later}
    n_prompts = None if expected is None else expected.n_prompts
    width = {int(row.numel()) for row in tensors.values()}
    if n_prompts is not None and width and width != {n_prompts}:
        raise IntervError(
            f"{str(store.directory / EXACT)!r} holds per-prompt exact effects of {width.pop()} "
            f"prompts for this run's {n_prompts}; the directory is corrupt: {_REDO}"
        )
    ran = 0

    def keep(indices: Any, values: Any) -> None:
        nonlocal ran
        indices = [int(i) for i in torch.as_tensor(indices).flatten()]
        computed = [per_prompt.get(i) for i in indices]  # discover filled them before the call
        complete = indices and all(row is not None for row in computed)
        store.append_exact(indices, values, computed if complete else None)
        ran += len(indices)

    def keep_resampled(indices: list[int], rows: torch.Tensor) -> None:
        nonlocal ran
        rows = torch.as_tensor(rows, dtype=torch.float64)
        store.append_exact(indices, rows.mean(-1), rows, stage="resamples")
        ran += len(indices)

    result = discover(
        scores=found,
        known=known or None,
        exact_per_prompt=per_prompt,
        on_exact=keep,
        kept=Kept(stored=resampled, keep=keep_resampled),
    )
    store.manifest.update(computed_in_last_run=ran, stored_before=len(stored_means))
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
    kv: str = "grouped",
    screen: Screen | None = None,
    metric: str = "logit_diff",
    batch_size: int | None = None,
    progress: Callable[[str], None] | None = None,
    gim: Any = False,
    hvp: bool = False,
    hvp_steps: int = 1,
    hvp_top: int | None = None,
) -> Any:
    """:func:`interv.circuits.discover`, resumable: its scores and exact effects are stored
    in ``directory`` as they are computed, and a call with the same arguments after a kill
    (or an exception) reuses them and recomputes no exact effect.

    The directory is identified by the run's :func:`~interv.provenance.run_identity` (the
    model and its weights, the prompts and pairs, the metric, and :func:`circuit_settings`),
    the identity ``interv circuit`` writes too: each resumes the other's directory. Another
    discovery into it is refused naming what differs.
    Returns the ``CircuitResult``.
    """
    if screen is None:  # discover's default, which the identity names
        screen = default_screen(Graph.from_model(model, kv=kv).n_edges)
    if not isinstance(metric, str):
        raise IntervError(f"metric must be a metric name (a string) here; got {metric!r}")
    settings = circuit_settings(method, steps, qk_fix, screen, kv, gim, hvp, hvp_steps, hvp_top)
    check_gim(model, gim)  # the model's family, before any work
    estimator = {"gim": gim, "hvp": hvp, "hvp_steps": hvp_steps, "hvp_top": hvp_top}
    expected = Provenance.of(model, task, metric=metric)
    identity = run_identity(expected, settings)
    with CircuitStore.open(directory, identity) as store:

        def scores() -> Any:
            return edge_scores(
                model,
                task,
                method=method,
                steps=steps,
                qk_fix=qk_fix,
                kv=kv,
                metric=metric,
                **estimator,
            )

        def run(**resume: Any) -> Any:
            return discover(
                model,
                task,
                method=method,
                steps=steps,
                qk_fix=qk_fix,
                kv=kv,
                screen=screen,
                metric=metric,
                batch_size=batch_size,
                progress=progress,
                **estimator,
                **resume,
            )

        result, _ = discover_resumable(
            store,
            scores=scores,
            discover=run,
            expected=expected,
        )
    return result
