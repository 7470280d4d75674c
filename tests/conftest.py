"""Test-wide settings: no network, deterministic property tests."""

from __future__ import annotations

import os

# Tests must never reach a model hub: everything they load ships with a package.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")

from hypothesis import settings  # noqa: E402

# Torch calls are slow on first use; a deadline would make property tests flaky.
settings.register_profile("interv", deadline=None, max_examples=60, derandomize=True)
settings.load_profile("interv")
