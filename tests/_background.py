"""Single-threaded test work started in a subprocess when the session begins.

``zoo.train`` runs on one CPU thread (deterministic algorithms, so that it reproduces the
shipped checkpoint); in the session it would leave the second core idle for about 90 s.
When the training test is selected, ``tests/conftest.py`` starts the same training in a
subprocess as soon as collection finishes, and the test collects its files when it runs.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

TRAINING_TEST = "test_zoo.py::test_training_from_scratch_reproduces_shipped_roles_and_accuracy"
TRAIN = "import sys; from interv import zoo; zoo.train(sys.argv[1], sys.argv[2], progress=False)"

_runs: dict[str, tuple[subprocess.Popen, Path]] = {}


def start_training(name: str) -> None:
    """Train zoo model ``name`` from scratch in a subprocess (once per session)."""
    if name in _runs:
        return
    out = Path(tempfile.mkdtemp(prefix="interv-train-")) / "model"
    child = subprocess.Popen(
        [sys.executable, "-c", TRAIN, name, str(out)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    _runs[name] = (child, out)


def trained(name: str) -> Path:
    """The directory the training of ``name`` wrote (started now if it was not yet)."""
    start_training(name)
    child, out = _runs[name]
    _, stderr = child.communicate(timeout=1800)
    assert child.returncode == 0, stderr[-4000:]
    return out


def stop_all() -> None:
    """Stop what is still running and remove what it wrote."""
    for child, out in _runs.values():
        if child.poll() is None:
            child.kill()
        child.communicate()  # reaps the child and closes its stderr pipe
        shutil.rmtree(out.parent, ignore_errors=True)
    _runs.clear()
