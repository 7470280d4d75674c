"""A benchmark script imported as a module for its tests (benchmarks/ is not a package)."""

from __future__ import annotations

import importlib
import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from types import ModuleType

BENCHMARKS = Path(__file__).parent.parent / "benchmarks"


@contextmanager
def imported_benchmark(name: str) -> Iterator[ModuleType]:
    """``benchmarks/<name>.py`` imported, with the environment it sets and the import path
    restored afterwards."""
    environment = os.environ.copy()
    sys.path.insert(0, str(BENCHMARKS))
    try:
        yield importlib.import_module(name)
    finally:
        sys.path.remove(str(BENCHMARKS))
        os.environ.clear()
        os.environ.update(environment)
