"""``interv report DIR`` on a directory that ``interv circuit`` wrote: its page and Markdown
re-rendered from the stored JSON.

A circuit directory is recognised by its ``circuit.json`` (format ``interv.circuit/1``)
or by its manifest (format ``interv-circuit-run/1``). ``circuit.md`` and ``circuit.html``
are rendered again from ``circuit.json``, ``faithfulness.json`` and ``mission.json`` (no
model loads, nothing is recomputed), in place or into ``--out``, with the rules of every
``interv report``: the output directory is claimed through :func:`interv._outputs.claim_dir`
(new, empty, or holding only files interv wrote and nobody changed since), each file is
written with the safe write, and a file interv did not write (or one edited since) is never
replaced. A damaged JSON file is refused naming the file and the field; a missing
``faithfulness.json`` or ``mission.json`` leaves its section out, and the summary says so.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from interv._checks import read_json
from interv._outputs import claim_dir
from interv._schema import from_file
from interv.errors import IntervError

__all__ = ["is_circuit_dir", "rerender_circuit"]

CIRCUIT_FORMAT = "interv.circuit/1"
RUN_FORMAT = "interv-circuit-run/1"
_INPUTS = ("circuit.json", "faithfulness.json", "mission.json", "manifest.json", ".lock")
_RENDERED = ("circuit.md", "circuit.html")


def _refuse_links(directory: Path) -> None:
    for name in (*_INPUTS, *_RENDERED):
        if (directory / name).is_symlink():
            raise IntervError(
                f"{str(directory / name)!r} is a symbolic link; interv reads the files of a "
                "directory it wrote only as the regular files it wrote (it never follows a "
                "link there)"
            )


def _format_of(path: Path, what: str) -> Any:
    """The ``format`` entry of the JSON object in ``path`` (None if absent or no object)."""
    data = read_json(path, what)
    return data.get("format") if isinstance(data, dict) else None


def is_circuit_dir(directory: Path) -> bool:
    """Whether ``directory`` was written by ``interv circuit``: its ``circuit.json`` is a
    circuit, or its manifest is that of a circuit run (links are refused, not followed; a
    ``circuit.json`` that is not a file, refused)."""
    _refuse_links(directory)
    path = directory / "circuit.json"
    if path.is_file():
        return True
    if path.exists():
        raise IntervError(
            f"{str(path)!r} is a directory (or another non-file), not the file interv circuit "
            f"writes: move it out of {str(directory)!r}, or {_REDO}"
        )
    manifest = directory / "manifest.json"
    if not manifest.is_file():
        return False
    try:
        return _format_of(manifest, "manifest") == RUN_FORMAT
    except IntervError:  # unreadable: the sweep path (or the demo's) says what is wrong
        return False


@contextlib.contextmanager
def _not_being_written(directory: Path) -> Iterator[None]:
    """Hold the run's lock (shared) while reading and writing, so that a rerun of
    ``interv circuit`` in the same directory is not raced; refuse if one holds it."""
    lock = directory / ".lock"
    if not lock.is_file():
        yield
        return
    fd = os.open(lock, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            raise IntervError(
                f"circuit directory {str(directory)!r} is being written by interv circuit "
                "(another process holds its lock); wait for it to finish, then rerun"
            ) from None
        yield
    finally:
        os.close(fd)


_REDO = "rerun the interv circuit command into a new --out to redo it"


def _read(path: Path, what: str, reader: Any) -> Any:
    """The typed value in the JSON file ``path`` (``reader(data)`` reads it through its
    schema), a damaged field named with the file, and how to redo it."""
    return from_file(path, reader, what, redo=_REDO)


def _read_inputs(directory: Path) -> tuple[Any, Any, Any, list[str]]:
    """``(circuit, curve or None, link or None, missing file names)``, each typed; a damaged
    file is refused naming the file and the field."""
    from interv.circuits import CircuitResult, FaithfulnessCurve  # torch: on use (CLI start-up)
    from interv.circuits.mission import MissionLink  # torch: on use (CLI start-up)

    path = directory / "circuit.json"
    if not path.is_file():
        status = read_json(directory / "manifest.json", "circuit manifest").get("status")
        raise IntervError(
            f"circuit directory {str(directory)!r} holds no circuit.json (the run's status is "
            f"{status!r}): nothing to render yet; rerun the same interv circuit command to "
            "finish it (it resumes)"
        )
    data = read_json(path, "circuit file")
    if isinstance(data, dict) and data.get("format") != CIRCUIT_FORMAT:
        raise IntervError(
            f"{str(path)!r}: field 'format' must be {CIRCUIT_FORMAT!r}; got "
            f"{data.get('format')!r} (not a circuit interv circuit wrote)"
        )
    circuit = _read(path, "circuit file", CircuitResult.from_dict)
    missing = []
    found = []
    for name, what, reader in (
        ("faithfulness.json", "faithfulness file", FaithfulnessCurve.from_dict),
        ("mission.json", "mission file", MissionLink.from_dict),
    ):
        path = directory / name
        if path.is_file():
            found.append(_read(path, what, reader))
        else:
            found.append(None)
            missing.append(name)
    return circuit, found[0], found[1], missing


def rerender_circuit(directory: Path, out: str | None) -> int:
    """Render ``circuit.md`` and ``circuit.html`` of the circuit directory ``directory``
    again, into ``out`` (default: in place); print where and what."""
    from interv.report.circuit import (  # torch: on use (CLI start-up)
        check_together,
        circuit_markdown,
    )
    from interv.report.circuit_page import circuit_page  # torch: on use (CLI start-up)

    with _not_being_written(directory):
        circuit, curve, link, missing = _read_inputs(directory)  # all checked before a write
        for name, pair in (("faithfulness.json", (curve, None)), ("mission.json", (None, link))):
            try:  # another run's curve or link is refused
                check_together(circuit, *pair)
            except IntervError as error:
                raise IntervError(
                    f"{str(directory / name)!r} does not belong with "
                    f"{str(directory / 'circuit.json')!r}: {error}; {_REDO}"
                ) from None
        try:
            output = claim_dir(out or directory, what="output directory", by="interv report")
        except IntervError as error:
            if out is not None:
                raise
            raise IntervError(f"{error}; to render the circuit elsewhere pass --out DIR") from None
        with output:
            for name in _RENDERED:  # an edited or foreign file refused before any write
                output.target(name)
            md = circuit_markdown(circuit, curve, link)
            page = circuit_page(circuit, curve, link)
            written = {
                name: output.write_text(name, text)
                for name, text in zip(_RENDERED, (md, page), strict=True)
            }
    left_out = f"; left out (not in {directory}/): {', '.join(missing)}" if missing else ""
    print(
        f"circuit re-rendered to {output.path}/ ({', '.join(written)}) from "
        f"{directory}/circuit.json: {circuit.model_name} on {circuit.task_name}, "
        f"{circuit.graph.n_edges} edges{left_out}"
    )
    print(f"semantics: {circuit.sentence}")
    return 0
