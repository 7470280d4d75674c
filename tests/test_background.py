"""The session's background runs (tests/_background.py) end without leaking a pipe."""

from __future__ import annotations

import _background


def test_stopping_an_unfinished_background_run_closes_its_pipe_and_reaps_it(monkeypatch):
    # a private table and a child that would outlive the session: the session's own
    # training run (if any) is not touched
    monkeypatch.setattr(_background, "_runs", {})
    monkeypatch.setattr(_background, "TRAIN", "import time; time.sleep(60)")
    _background.start_training("sleeper")
    child, out = _background._runs["sleeper"]
    _background.stop_all()
    assert child.returncode is not None
    assert child.stderr.closed
    assert not out.parent.exists()
    assert _background._runs == {}
