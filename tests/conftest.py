"""Test-wide settings (no network, deterministic property tests) and shared fixtures."""

from __future__ import annotations

import os

# Tests must never reach a model hub: everything they load ships with a package.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")

import pytest
import torch
from hypothesis import settings

# Torch calls are slow on first use; a deadline would make property tests flaky.
settings.register_profile("interv", deadline=None, max_examples=60, derandomize=True)
settings.load_profile("interv")


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
