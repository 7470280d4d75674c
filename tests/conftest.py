"""Test-wide settings (no network, deterministic property tests, OpenMP threads that
sleep instead of spinning) and shared fixtures."""

from __future__ import annotations

import os
from collections import Counter

# OpenMP threads that wait passively. torch's OpenMP runtime (libgomp) spins while its
# threads wait for work; with another CPU-heavy job on a 2-core machine the spinning
# threads fight it for the cores and torch slows down several-fold. Measured on 2 cores
# (tests/test_engine_fast.py, test_engine_runner.py, test_demo.py; another engineer's
# jobs running too, plus a 2-thread torch matmul loop as the competing job):
# default 260 s, OMP_NUM_THREADS=1 69 s, OMP_WAIT_POLICY=PASSIVE 48 s; without the
# matmul loop 59 s, 14 s and 14 s. Passive waiting keeps both cores for an idle machine.
# Set before torch is imported (it reads the variable once); subprocesses (notebook
# kernels, CLI runs, Ray workers) inherit it. A value set by the caller wins.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

# Tests must never reach a model hub: everything they load ships with a package.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")

import _background
import pytest
import torch
from hypothesis import settings

# Torch calls are slow on first use; a deadline would make property tests flaky.
settings.register_profile("interv", deadline=None, max_examples=60, derandomize=True)
settings.load_profile("interv")


def pytest_collection_finish(session):
    """Start the single-threaded zoo training at once when its test is selected, so that
    it runs on the core the other tests leave free (tests/_background.py). Not under
    pytest-xdist: there every worker collects every test, and the other worker keeps the
    second core busy; the test starts the training itself when it runs."""
    if os.environ.get("PYTEST_XDIST_WORKER"):
        return
    if any(item.nodeid.endswith(_background.TRAINING_TEST) for item in session.items):
        _background.start_training("induction-2l")


def pytest_configure(config):
    """xdist's scheduler orders the groups by their number of tests; the suite's long tests
    are alone in their groups (a notebook, a docs page), so they came last and the run
    ended on one worker. The order of the collection decides instead (below)."""
    if hasattr(config.option, "loadscopereorder"):
        config.option.loadscopereorder = False


def pytest_collection_modifyitems(config, items):
    """Under pytest-xdist with ``--dist loadgroup`` (the README's test command), the tests of
    one file run on one worker (their module fixtures are built once), except the notebooks
    and the docs pages: each of those runs in its own kernel or namespace, so each is a group
    of its own and the two workers share them. Real-model tests follow the same rule (each
    worker loads a real model once, as a session fixture; a first-use conversion into
    interv's cache is locked, so two workers never convert at once: interv.models._cache).

    The groups are handed out longest first, as a scheduler would by their durations: the
    executed notebooks, the docs pages' runs and the zoo's training (30-90 s each on 2
    cores), then the files with slow or real-model tests, then the rest; within each class
    the groups with more tests first, as xdist itself orders them (a stable sort)."""
    if not config.pluginmanager.hasplugin("xdist"):
        return
    groups = {}
    for item in items:
        group = item.path.name
        if item.path.name in _ONE_GROUP_EACH and hasattr(item, "callspec"):
            group = f"{group}::{item.name}"
        item.add_marker(pytest.mark.xdist_group(group))
        groups[item] = group
    heavy = {
        g
        for i, g in groups.items()
        if i.get_closest_marker("slow") or i.get_closest_marker("real_model")
    }
    longest = {g for g in heavy if "::" in g or g in _LONGEST_FILES}
    sizes = Counter(groups.values())

    def order(item):
        group = groups[item]
        return (0 if group in longest else 1 if group in heavy else 2, -sizes[group])

    items.sort(key=order)


_ONE_GROUP_EACH = ("test_notebooks.py", "test_docs.py")
# files whose slow tests alone take a minute or more (test_zoo.py: the training, 79 s idle)
_LONGEST_FILES = ("test_zoo.py",)


def pytest_sessionfinish(session, exitstatus):
    _background.stop_all()


@pytest.fixture(scope="session")
def induction_zoo():
    """The zoo's ``induction-2l``, loaded once per session, for tests that leave it as they
    found it (interv's own calls do: hooks never outlive a call)."""
    from interv import load_model

    return load_model("induction-2l")


# Real pretrained models shipped in PyPI packages, loaded once per test session. The
# first SmolLM2 load on a machine converts the GGUF file into interv's cache
# ($INTERV_CACHE or the user cache dir), so a CI run pays the conversion once.


@pytest.fixture(scope="session")
def smollm2_bridge():
    """SmolLM2-135M-Instruct as a TransformerBridge (float32, CPU, eval mode)."""
    from interv import load_model

    return load_model("smollm2-135m", device="cpu", dtype=torch.float32)


@pytest.fixture(scope="session")
def minilm_bridge():
    """all-MiniLM-L6-v2 as a TransformerBridge (float32, CPU, eval mode)."""
    from interv import load_model

    return load_model("minilm-l6", device="cpu", dtype=torch.float32)


@pytest.fixture(scope="session")
def gemma3_bridge():
    """Gemma-3-270M, Q4_K_M-dequantized (float32, CPU, eval mode); skipped where its chunk
    packages are not installed (the ``models`` extra brings them). The first load on a
    machine converts it into interv's cache (minutes; CI does it before the tests)."""
    import importlib.util

    from interv import load_model
    from interv.models import gemma3

    missing = [
        dist for package, dist, _ in gemma3.CHUNKS if importlib.util.find_spec(package) is None
    ]
    if importlib.util.find_spec(gemma3.PACKAGE) is None or missing:
        pytest.skip(f"Gemma-3-270M needs the packages of: {gemma3.INSTALL_HINT}")
    return load_model("gemma3-270m", device="cpu", dtype=torch.float32)
