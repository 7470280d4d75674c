"""Progress bars of long work: drawn on stderr when it is a terminal, tqdm's widget in a
notebook kernel, absent when piped; a callback for programs.

The end-to-end tests run ``interv demo``, ``interv sweep`` and ``interv entropy-change``
(small settings) in one child process, once with stderr on a pseudo-terminal and once
with everything piped, and compare. The Python tests drive ``interv.run``,
``concentration``, ``head_similarity`` and ``run_sweep`` on the zoo model.
"""

from __future__ import annotations

import fcntl
import itertools
import os
import pty
import select
import struct
import subprocess
import sys
import termios
import time

import pytest
import torch
from tqdm import notebook, std

import interv
from interv._progress import bar_class, counting, in_notebook, show_progress, stages
from interv.analysis import attention_rows, head_similarity
from interv.errors import IntervError

SWEEP = """
[model]
spec = "induction-2l"
[task]
name = "induction"
n_pairs = 4
[sweep]
batch_size = 64
unit_size = 4
[[sweep.interventions]]
kind = "zero_ablation"
"""

# three long commands in one process (imports paid once)
SCRIPT = """
import sys
from interv.cli import main
for argv in (
    ["demo", "--n-pairs", "2", "--layers", "1", "--out", "report"],
    ["sweep", "sweep.toml", "--out", "sweep"],
    ["entropy-change", "induction-2l", "--from", "0", "--n-sequences", "2"],
):
    assert main(argv) == 0, argv
"""

BAR_MARKERS = ("stages |", "sweep units:", "elapsed")


def _start_piped(tmp_path) -> subprocess.Popen:
    """The script started with stdout and stderr piped (collected by ``communicate``)."""
    (tmp_path / "sweep.toml").write_text(SWEEP)
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "COLUMNS": "120"}
    return subprocess.Popen(
        [sys.executable, "-c", SCRIPT],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _run_on_a_terminal(tmp_path) -> tuple[str, str]:
    """stdout and stderr of the script, its stderr a pseudo-terminal."""
    (tmp_path / "sweep.toml").write_text(SWEEP)
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "COLUMNS": "120"}
    controller, terminal_fd = pty.openpty()
    # a terminal 120 columns wide (a bare pseudo-terminal reports 0)
    fcntl.ioctl(terminal_fd, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 120, 0, 0))
    child = subprocess.Popen(
        [sys.executable, "-c", SCRIPT],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=terminal_fd,
    )
    os.close(terminal_fd)
    chunks = []
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline:
        ready, _, _ = select.select([controller], [], [], 0.2)
        if ready:
            try:
                data = os.read(controller, 65536)
            except OSError:  # the child closed the terminal (EIO)
                break
            if not data:
                break
            chunks.append(data)
        elif child.poll() is not None:
            break
    os.close(controller)
    with child.stdout:
        stdout = child.stdout.read().decode()
    assert child.wait(timeout=60) == 0, b"".join(chunks).decode(errors="replace")
    return stdout, b"".join(chunks).decode(errors="replace")


@pytest.mark.slow
def test_long_commands_draw_progress_on_a_terminal_and_not_into_pipes(tmp_path):
    for name in ("terminal", "pipe"):
        (tmp_path / name).mkdir()
    piped = _start_piped(tmp_path / "pipe")  # both at once: half the wall time on 2 cores
    term_out, term_err = _run_on_a_terminal(tmp_path / "terminal")
    pipe_out, pipe_err = piped.communicate(timeout=600)
    assert piped.returncode == 0, pipe_err
    # on a terminal: the demo's stages, the interventions counted, the sweep's units
    for text in ("loading the model", "interventions", "stages |", "sweep units", "elapsed"):
        assert text in term_err, term_err[-2000:]
    assert "\r" in term_err  # redrawn in place
    # piped: no bar anywhere, and stdout carries the same results either way
    for marker in (*BAR_MARKERS, "\r", "\x1b["):
        assert marker not in pipe_err and marker not in pipe_out, marker
    assert "report written to report/" in pipe_out and "report written to report/" in term_out
    assert "sweep complete" in pipe_out and "sweep complete" in term_out
    for marker in BAR_MARKERS:
        assert marker not in term_out  # the bar never goes to stdout


def test_the_stage_bar_is_drawn_on_a_terminal_and_nothing_without_one(monkeypatch):
    controller, terminal_fd = pty.openpty()
    terminal = os.fdopen(terminal_fd, "w")
    monkeypatch.setattr(sys, "stderr", terminal)
    assert show_progress(None)
    with stages(("first", "second")) as bar:
        bar.start("first")
        bar.detail("1/2 things")
        time.sleep(0.6)  # one tick of the elapsed-time refresh
        bar.start("second")
    terminal.flush()
    drawn = b""
    while select.select([controller], [], [], 0.1)[0]:
        drawn += os.read(controller, 65536)
    terminal.close()
    os.close(controller)
    text = drawn.decode()
    assert "first" in text and "1/2 things" in text and "second" in text and "elapsed" in text

    class Pipe:
        def __init__(self) -> None:
            self.written = ""

        def write(self, text: str) -> int:
            self.written += text
            return len(text)

        def flush(self) -> None:
            pass

        def isatty(self) -> bool:
            return False

    pipe = Pipe()
    monkeypatch.setattr(sys, "stderr", pipe)
    assert not show_progress(None)
    with stages(("first",)) as bar:
        bar.start("first")
        bar.detail("x")
    assert pipe.written == ""
    assert not show_progress(False) and show_progress(True)


@pytest.fixture(scope="module")
def zoo():
    model = interv.load_model("induction-2l")
    task = interv.load_task("induction", n_pairs=4, seed=0).tokenize(model)
    return model, task


def _ablations(model):
    return [
        interv.ZeroAblation(layer, head)
        for layer in range(model.cfg.n_layers)
        for head in range(model.cfg.n_heads)
    ]


class _Calls:
    def __init__(self) -> None:
        self.calls: list[tuple[int, int, str]] = []

    def __call__(self, done: int, total: int, label: str) -> None:
        self.calls.append((done, total, label))

    def check_monotone(self, total: int) -> None:
        done = [c[0] for c in self.calls]
        assert done[0] == 0 and done[-1] == total, self.calls
        assert all(a <= b for a, b in itertools.pairwise(done)), self.calls
        assert {c[1] for c in self.calls} == {total}
        assert len({c[2] for c in self.calls}) == 1


def test_run_calls_the_callback_with_monotone_counts_up_to_every_intervention(zoo):
    model, task = zoo
    ablations = _ablations(model)
    calls = _Calls()
    # 4 prompts per copy, 8 rows per forward: several forwards, so several steps
    result = interv.run(model, task, ablations, max_batch_size=8, progress=calls)
    calls.check_monotone(len(ablations))
    assert len(calls.calls) >= 3 and "interv.run" in calls.calls[0][2]
    quiet = interv.run(model, task, ablations, max_batch_size=8, progress=False)
    torch.testing.assert_close(result.values, quiet.values)


def test_concentration_and_similarity_count_their_steps(zoo):
    model, task = zoo
    calls = _Calls()
    interv.concentration(model, task, query_positions=[-1], progress=calls)
    calls.check_monotone(model.cfg.n_layers)
    rows = attention_rows(model, task)
    calls = _Calls()
    head_similarity(rows, measures=("cosine",), n_resamples=10, progress=calls)
    calls.check_monotone(model.cfg.n_layers * model.cfg.n_heads)


def test_nothing_is_drawn_when_stderr_is_not_a_terminal(zoo, capsys):
    model, task = zoo
    interv.run(model, task, _ablations(model), max_batch_size=8)
    interv.concentration(model, task, query_positions=[-1])
    captured = capsys.readouterr()
    assert captured.err == "" and captured.out == ""
    assert bar_class(None) is None


def test_a_bar_is_drawn_on_a_terminal_and_inner_work_stays_quiet(zoo, monkeypatch):
    model, task = zoo
    controller, terminal_fd = pty.openpty()
    fcntl.ioctl(terminal_fd, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 120, 0, 0))
    terminal = os.fdopen(terminal_fd, "w")
    monkeypatch.setattr(sys, "stderr", terminal)
    assert bar_class(None) is std.tqdm
    interv.run(model, task, _ablations(model), max_batch_size=4, progress=True)
    with counting(1, "outer", progress=True):
        assert bar_class(None) is None  # one bar per job: a run inside stays quiet
        assert bar_class(True) is std.tqdm
    terminal.flush()
    drawn = b""
    while select.select([controller], [], [], 0.1)[0]:
        drawn += os.read(controller, 65536)
    terminal.close()
    os.close(controller)
    text = drawn.decode()
    assert "interv.run: 8 interventions" in text and "/8 [" in text, text


class _Kernel:
    kernel = object()  # what a Jupyter kernel's shell has and a terminal IPython lacks


def test_a_notebook_kernel_gets_the_widget_or_a_text_bar_without_a_warning(monkeypatch):
    ipython = pytest.importorskip("IPython")
    assert not in_notebook()
    monkeypatch.setattr(ipython, "get_ipython", lambda: _Kernel())
    assert in_notebook()
    if notebook.IProgress is not None:  # ipywidgets installed (interv[test] has it)
        assert bar_class(None) is notebook.tqdm
    # without ipywidgets: tqdm's text bar, never its "IProgress not found" warning
    monkeypatch.setattr(notebook, "IProgress", None)
    assert bar_class(None) is std.tqdm
    assert bar_class(False) is None


def test_progress_must_be_none_a_bool_or_a_callable(zoo):
    model, task = zoo
    with pytest.raises(IntervError, match=r"progress must be None.*got 'yes'"):
        interv.run(model, task, _ablations(model), progress="yes")
    with pytest.raises(IntervError, match="progress must be None"):
        interv.concentration(model, task, progress=1)
