"""Progress bars of long CLI work: drawn on stderr when it is a terminal, absent when piped.

The end-to-end tests run ``interv demo``, ``interv sweep`` and ``interv entropy-change``
(small settings) in one child process, once with stderr on a pseudo-terminal and once
with everything piped, and compare.
"""

from __future__ import annotations

import fcntl
import os
import pty
import select
import struct
import subprocess
import sys
import termios
import time

import pytest

from interv._progress import show_progress, stages

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
    ["demo", "--n-prompts", "2", "--layers", "1", "--out", "report"],
    ["sweep", "sweep.toml", "--out", "sweep"],
    ["entropy-change", "--zoo", "induction-2l", "--from", "0", "--n-sequences", "2"],
):
    assert main(argv) == 0, argv
"""

BAR_MARKERS = ("stages |", "sweep units:", "elapsed")


def _run(tmp_path, *, terminal: bool) -> tuple[str, str]:
    """stdout and stderr of the script; stderr on a pseudo-terminal if ``terminal``."""
    (tmp_path / "sweep.toml").write_text(SWEEP)
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "COLUMNS": "120"}
    if not terminal:
        done = subprocess.run(
            [sys.executable, "-c", SCRIPT],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=600,
            check=False,
        )
        assert done.returncode == 0, done.stderr
        return done.stdout, done.stderr
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
    term_out, term_err = _run(tmp_path / "terminal", terminal=True)
    pipe_out, pipe_err = _run(tmp_path / "pipe", terminal=False)
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
