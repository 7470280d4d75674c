"""Peak memory and time of interv.concentration versus a plain forward and run_with_cache.

Model: SmolLM2-135M-Instruct (30 layers, 9 query heads, float32, CPU) on one prompt of
1024 tokens (a paragraph repeated, cut to 1024 tokens, BOS first).

Methods, each in its own fresh subprocess (so one cannot reuse the other's heap):

- ``plain``: one forward with no hooks (what the model needs anyway);
- ``interv``: :func:`interv.concentration` (reduces each pattern inside its hook);
- ``cache``: ``run_with_cache`` keeping every ``hook_pattern`` and ``hook_v``, then the
  same metrics computed from the cache with the metric functions of
  :mod:`interv.metrics` (in chunks of queries, so the cache itself dominates).

Memory method: Linux resident set size. Each subprocess runs with
``MALLOC_MMAP_THRESHOLD_=65536`` so every large buffer is its own mapping and goes back
to the OS when freed (RSS then tracks live memory, not the allocator's high-water
heap). After loading the model and one short warm-up forward, the subprocess reads
``VmRSS`` (the resident model), resets the peak by writing ``5`` to
``/proc/self/clear_refs``, runs the method and reads ``VmHWM`` (the peak). Reported:
peak minus resident model, in MiB, and the same above the plain forward's peak.

Time: in this process, after a warm-up, a plain forward (no hooks, no logits kept) and
``interv.concentration`` alternate ``REPEATS`` times on the same prompt; reported: the best
wall time of each and their ratio, next to ``torch.matmul`` GFLOP/s measured in the same run.

Run: ``python benchmarks/bench_concentration_memory.py [--threads N]`` (about 3-5 minutes on
2 CPU cores; the first run also converts SmolLM2 once, about a minute).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

N_TOKENS = 1024
MIB = 2**20
REPEATS = 3
METHODS = ("plain", "interv", "cache")
ROW_METRICS = (
    "entropy",
    "normalized_entropy",
    "sink_mass",
    "content_entropy",
    "content_normalized_entropy",
)
VALUE_METRICS = ("sink_contribution_share", "contribution_norm")
PARAGRAPH = (
    "Attention heads in small language models often park most of their weight on the "
    "first token of the sequence, a pattern known as an attention sink. Measuring how "
    "concentrated a head is therefore says little about what it reads, unless the sink "
    "is separated from the content keys and the values are taken into account. "
)


def _status_kib(field: str) -> int:
    status = Path("/proc/self/status").read_text()
    return int(re.search(rf"{field}:\s+(\d+) kB", status).group(1))


def _load_model():
    from interv.models.smollm2 import load_smollm2

    return load_smollm2(device="cpu", dtype=torch.float32)


def _prompt_tokens(model) -> torch.Tensor:
    """``[1, N_TOKENS]`` tokens: BOS then a repeated paragraph, cut to length."""
    tokens = model.to_tokens(PARAGRAPH * 40, prepend_bos=True)
    if tokens.shape[1] < N_TOKENS:
        raise RuntimeError(f"prompt tokenizes to {tokens.shape[1]} < {N_TOKENS} tokens")
    return tokens[:, :N_TOKENS]


def _metrics_from_cache(model, tokens: torch.Tensor) -> dict[str, torch.Tensor]:
    """The cache baseline: every pattern and value kept, metrics computed afterwards."""
    from interv.engine.sites import kv_head_of
    from interv.metrics.concentration import normalized_entropy
    from interv.metrics.sink import sink_split

    cfg = model.cfg
    _, cache = model.run_with_cache(
        tokens,
        names_filter=lambda name: name.endswith(("attn.hook_pattern", "attn.hook_v")),
        return_type=None,
    )
    n_pos = tokens.shape[1]
    value_heads = [kv_head_of(cfg, h) for h in range(cfg.n_heads)]
    out: dict[str, list[torch.Tensor]] = {name: [] for name in (*ROW_METRICS, *VALUE_METRICS)}
    chunk = 128
    for layer in range(cfg.n_layers):
        pattern = cache[f"blocks.{layer}.attn.hook_pattern"]
        values = cache[f"blocks.{layer}.attn.hook_v"][:, :, value_heads].double()
        w_out = model.blocks[layer].attn.W_O.detach().double()
        # [batch, head, key]: norm of each key's value vector written into the residual stream
        key_norms = torch.einsum("bkhd,hdm->bhkm", values, w_out).norm(dim=-1)
        per_chunk: dict[str, list[torch.Tensor]] = {name: [] for name in out}
        for start in range(0, n_pos, chunk):
            rows = pattern[:, :, start : start + chunk]
            causal = torch.ones(n_pos, n_pos, dtype=torch.bool).tril()[start : start + chunk]
            split = sink_split(rows, sink=0, key_mask=causal)
            contribution = rows.double() * key_norms[:, :, None, :]
            total = contribution.sum(dim=-1)
            per_chunk["entropy"].append(split.entropy)
            per_chunk["normalized_entropy"].append(normalized_entropy(rows, key_mask=causal))
            per_chunk["sink_mass"].append(split.sink_mass)
            per_chunk["content_entropy"].append(split.content_entropy)
            per_chunk["content_normalized_entropy"].append(split.content_normalized_entropy)
            per_chunk["contribution_norm"].append(total)
            per_chunk["sink_contribution_share"].append(contribution[..., 0] / total)
        for name, parts in per_chunk.items():
            out[name].append(torch.cat(parts, dim=-1))
    return {name: torch.stack(parts, dim=1) for name, parts in out.items()}


def _child(method: str, result_path: str) -> None:
    """Run one method in this process and write its memory numbers (and metrics) to disk."""
    from interv.analysis.concentration import concentration

    model = _load_model()
    tokens = _prompt_tokens(model)
    with torch.no_grad():
        model(tokens[:, :8], return_type=None)  # warm-up: lazy init outside the measurement
    resident_kib = _status_kib("VmRSS")
    Path("/proc/self/clear_refs").write_text("5")
    start = time.perf_counter()
    with torch.no_grad():
        if method == "plain":
            model(tokens, return_type=None)
            metrics = {}
        elif method == "interv":
            result = concentration(model, tokens)
            metrics = {name: result.metric(name) for name in (*ROW_METRICS, *VALUE_METRICS)}
        else:
            metrics = _metrics_from_cache(model, tokens)
    seconds = time.perf_counter() - start
    peak_kib = _status_kib("VmHWM")
    torch.save(metrics, result_path + ".pt")
    Path(result_path).write_text(
        json.dumps(
            {
                "resident_mib": resident_kib / 1024,
                "peak_mib": peak_kib / 1024,
                "seconds": seconds,
                "n_tokens": int(tokens.shape[1]),
            }
        )
    )


def _run(method: str, workdir: Path) -> dict:
    result_path = str(workdir / method)
    env = dict(os.environ, MALLOC_MMAP_THRESHOLD_="65536", HF_HUB_OFFLINE="1")
    subprocess.run([sys.executable, __file__, "--child", method, result_path], check=True, env=env)
    numbers = json.loads(Path(result_path).read_text())
    numbers["metrics"] = torch.load(result_path + ".pt")
    return numbers


def timing() -> None:
    """Best-of-``REPEATS`` wall time of a plain forward and of concentration, alternated."""
    from bench_patching import load_average, matmul_gflops

    from interv.analysis.concentration import concentration

    model = _load_model()
    tokens = _prompt_tokens(model)
    with torch.no_grad():
        model(tokens, return_type=None)  # warm-up at full length
    plain, ours = [], []
    for _ in range(REPEATS):
        start = time.perf_counter()
        with torch.no_grad():
            model(tokens, return_type=None)
        plain.append(time.perf_counter() - start)
        start = time.perf_counter()
        concentration(model, tokens)
        ours.append(time.perf_counter() - start)
    print(
        f"time ({torch.get_num_threads()} threads, {load_average()}, torch.matmul "
        f"{matmul_gflops():.1f} GFLOP/s), best of {REPEATS}: plain forward {min(plain):.2f} s, "
        f"interv.concentration {min(ours):.2f} s; ratio concentration / forward "
        f"{min(ours) / min(plain):.2f}"
    )


def main() -> None:
    from interv.models.smollm2 import converted_dir

    converted_dir()  # convert SmolLM2 once, outside the measured subprocesses
    timing()
    with tempfile.TemporaryDirectory() as tmp:
        runs = {method: _run(method, Path(tmp)) for method in METHODS}
    plain = runs["plain"]
    print(
        f"SmolLM2-135M-Instruct (float32, CPU), 1 prompt of {plain['n_tokens']} tokens, "
        "30 layers x 9 heads, all query positions"
    )
    print("memory: Linux VmHWM - VmRSS after loading (MALLOC_MMAP_THRESHOLD_=65536), MiB")
    print(f"  resident model (weights + runtime): {plain['resident_mib']:.0f} MiB")
    extra = {m: runs[m]["peak_mib"] - runs[m]["resident_mib"] for m in METHODS}
    for method in METHODS:
        print(
            f"  {method:>6}: peak above resident model {extra[method]:8.1f} MiB, "
            f"above the plain forward's peak {extra[method] - extra['plain']:8.1f} MiB, "
            f"wall time {runs[method]['seconds']:.1f} s"
        )
    print(
        f"ratio cache / interv, peak above resident model: {extra['cache'] / extra['interv']:.1f}x"
    )
    above_plain_interv = max(extra["interv"] - extra["plain"], 1.0)
    print(
        "ratio cache / interv, peak above the plain forward's peak (interv floored at 1 MiB): "
        f"{(extra['cache'] - extra['plain']) / above_plain_interv:.1f}x"
    )
    print(
        "max |interv - cache| over all [layer, head, query] entries (unit of the metric), "
        "and entries NaN in one method only:"
    )
    for name, expected in runs["cache"]["metrics"].items():
        actual = runs["interv"]["metrics"][name]
        both = ~(actual.isnan() | expected.isnan())
        nan_mismatch = int((actual.isnan() != expected.isnan()).sum())
        diff = float((actual[both] - expected[both]).abs().max())
        print(f"  {name}: {diff:.2e} (NaN mismatches: {nan_mismatch})")


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "--child":
        _child(sys.argv[2], sys.argv[3])
    else:
        if "--threads" in sys.argv:
            torch.set_num_threads(int(sys.argv[sys.argv.index("--threads") + 1]))
        main()
