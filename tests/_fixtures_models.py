"""Session-wide real-model fixtures (SmolLM2-135M, MiniLM), loaded once per test run.

The first SmolLM2 load of a machine converts the GGUF file into interv's cache
(``$INTERV_CACHE`` or the user cache dir), so CI pays the conversion once.
"""

from __future__ import annotations

import pytest
import torch

from interv.models import load_model


@pytest.fixture(scope="session")
def smollm2_bridge():
    """SmolLM2-135M-Instruct as a TransformerBridge (float32, CPU, eval mode)."""
    return load_model("smollm2-135m", device="cpu", dtype=torch.float32)


@pytest.fixture(scope="session")
def minilm_bridge():
    """all-MiniLM-L6-v2 as a TransformerBridge (float32, CPU, eval mode)."""
    return load_model("minilm-l6", device="cpu", dtype=torch.float32)
