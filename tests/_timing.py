"""Time budgets for tests that assert how fast something is drawn.

A budget is stated for an idle machine; on a busy one every wall-clock measurement
stretches by about the run queue per core, so the budget is scaled by
``max(1, load average / cores)`` (the 1-minute load average read when the check runs).
The measured time is printed by the tests beside the budget, so the idle figure stays
visible in the log.
"""

from __future__ import annotations

import os


def load_factor() -> float:
    """``max(1, 1-minute load average / CPU cores)``: how much a busy machine stretches time."""
    cores = os.cpu_count() or 1
    return max(1.0, os.getloadavg()[0] / cores)


def budget_ms(idle_ms: float) -> float:
    """The time budget, in ms, of work that takes at most ``idle_ms`` on an idle machine."""
    return idle_ms * load_factor()
