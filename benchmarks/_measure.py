"""What the benchmarks share: the machine and its load, peak memory of a process, workers run
in fresh processes, and the circuit job the Ray and resume benchmarks run.

Memory method (CPU): Linux resident set size. A worker runs with
``MALLOC_MMAP_THRESHOLD_=65536`` so every large buffer is its own mapping and returns to the OS
when freed (RSS then tracks live memory, not the allocator's high-water heap); after loading the
model and a warm-up it reads ``VmRSS`` (the resident model), resets the peak by writing ``5`` to
``/proc/self/clear_refs``, runs the measured call and reads ``VmHWM`` (the peak). GPU memory:
``torch.cuda.max_memory_allocated`` after ``reset_peak_memory_stats``.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

MIB = 2**20


def circuit_job_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of the circuit job ``circuit_ray.py`` and ``circuit_resume.py`` run (a
    screen, its verified and audited edges, stability resamples and the selection's
    subsamples, patched in batches), with the same defaults in both."""
    parser.add_argument("--model", default="induction-2l")
    parser.add_argument("--task", default="induction")
    parser.add_argument("--pairs", type=int, default=8)
    parser.add_argument("--top-k", type=int, default=10)
    parser.add_argument("--audit", type=int, default=10)
    parser.add_argument("--resamples", type=int, default=50)
    parser.add_argument("--batch-size", type=int, default=4)


def machine() -> dict[str, Any]:
    """The machine, the date and the load, for the figures' header."""
    import torch

    info: dict[str, Any] = {
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "host": platform.node(),
        "cpu_cores": os.cpu_count(),
        "platform": platform.platform(),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "torch_threads": torch.get_num_threads(),
        "load_average": load(),
    }
    if torch.cuda.is_available():
        info["gpu"] = torch.cuda.get_device_name(0)
        info["gpu_memory_gib"] = round(torch.cuda.get_device_properties(0).total_memory / 2**30, 1)
    return info


def load() -> list[float]:
    """The 1-, 5- and 15-minute load averages (``uptime``)."""
    return [round(value, 2) for value in os.getloadavg()]


def status_kib(field: str) -> int:
    """A ``/proc/self/status`` field in KiB (``VmRSS``, ``VmHWM``)."""
    status = Path("/proc/self/status").read_text()
    match = re.search(rf"{field}:\s+(\d+) kB", status)
    return int(match.group(1)) if match else 0


def reset_peak() -> int:
    """Reset the peak RSS; return the current RSS in bytes (the resident model)."""
    rss = status_kib("VmRSS") * 1024
    Path("/proc/self/clear_refs").write_text("5")
    return rss


def peak() -> int:
    """The peak RSS in bytes since :func:`reset_peak`."""
    return status_kib("VmHWM") * 1024


def run_worker(script: str, args: list[str], timeout: float = 3600) -> dict[str, Any]:
    """Run ``python script --worker args...`` in a fresh process (its own heap and peak); it
    prints one JSON object on its last output line, returned here (with its stderr's tail on
    a failure)."""
    env = dict(os.environ, MALLOC_MMAP_THRESHOLD_="65536", PYTHONWARNINGS="ignore")
    done = subprocess.run(
        [sys.executable, script, "--worker", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
        check=False,
    )
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if done.returncode != 0 or not lines:
        tail = "\n".join(done.stderr.splitlines()[-15:])
        return {"error": f"worker {args} failed (exit {done.returncode}):\n{tail}"}
    return json.loads(lines[-1])
