"""interv's thread default on a shared machine (issue 40): passive waiting applied at the
first heavy use, not at import, said once, and never over the user's own choice."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

pytestmark = pytest.mark.slow  # fresh interpreters (torch is imported in each)


def _python(code: str, **env: str) -> subprocess.CompletedProcess:
    clean = {k: v for k, v in os.environ.items() if k != "OMP_WAIT_POLICY"}
    return subprocess.run(
        [sys.executable, "-c", code],
        env={**clean, **env},
        capture_output=True,
        text=True,
        check=True,
    )


def test_the_first_heavy_use_sets_passive_waiting_once_and_import_sets_nothing():
    done = _python(
        "import os, sys, interv\n"
        "assert 'OMP_WAIT_POLICY' not in os.environ and 'torch' not in sys.modules\n"
        "interv.load_model\n"
        "assert 'torch' in sys.modules\n"
        "import interv.engine.masks, interv.analysis\n"
        "print(os.environ['OMP_WAIT_POLICY'])\n"
    )
    assert done.stdout.strip() == "PASSIVE"
    assert done.stderr.count("interv: torch's threads will sleep while they wait") == 1


@pytest.mark.parametrize(
    ("code", "env", "expected"),
    [
        ("interv.set_threads(wait='active'); interv.load_model", {}, "ACTIVE"),
        ("interv.load_model", {"OMP_WAIT_POLICY": "ACTIVE"}, "ACTIVE"),
    ],
    ids=["set_threads", "environment"],
)
def test_the_users_choice_wins_silently(code, env, expected):
    done = _python(f"import os, interv\n{code}\nprint(os.environ['OMP_WAIT_POLICY'])", **env)
    assert done.stdout.strip() == expected
    assert "interv:" not in done.stderr


def test_torch_imported_first_keeps_openmps_policy():
    done = _python(
        "import os, torch, interv\ninterv.load_model\nprint(os.environ.get('OMP_WAIT_POLICY'))"
    )
    assert done.stdout.strip() == "None"
