"""The cost of the weights' digest (``interv.provenance.model_identity``) on SmolLM2-135M.

Every result's provenance names the weights by a digest of every byte of every parameter,
remembered per tensor until its version counter moves. Measured, in one process (float32,
CPU): the first call (every tensor hashed), a repeated call (nothing changed: nothing
reread), a call after one tensor was edited in place (that tensor rehashed), and, for
scale, one ``interv.concentration`` of 8 prompts of 128 tokens.

    python benchmarks/bench_fingerprint.py [--model smollm2-135m]

Prints the median and the minimum of each (ms). Record the load (``uptime``) beside them.
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

import interv
from interv.provenance import _DIGESTS, model_identity


def _timed(function, repeats: int) -> tuple[float, float]:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        function()
        times.append((time.perf_counter() - start) * 1e3)
    return statistics.median(times), min(times)


def _report(what: str, function, repeats: int, digits: int = 1) -> None:
    median, least = _timed(function, repeats)
    print(f"{what}: median {median:.{digits}f} ms, min {least:.{digits}f} ms")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="smollm2-135m")
    args = parser.parse_args()
    model = interv.load_model(args.model)
    parameters = list(model.parameters())
    size = sum(p.numel() * p.element_size() for p in parameters) / 2**20
    print(f"{args.model}: {sum(p.numel() for p in parameters) / 1e6:.1f}M parameters, "
          f"{size:.0f} MiB, {len(parameters)} tensors")  # fmt: skip

    def first() -> None:
        _DIGESTS.clear()
        model_identity(model)

    weight = max(parameters, key=lambda p: p.numel() if p.ndim == 2 else 0)

    def edited() -> None:
        with torch.no_grad():
            weight[0, 0] += 0.0  # an in-place write: the version counter moves
        model_identity(model)

    _report("first call (every byte hashed)", first, 3)
    model_identity(model)
    _report("repeated call (nothing changed)", lambda: model_identity(model), 20, digits=2)
    _report(f"one tensor {tuple(weight.shape)} edited in place", edited, 5)
    tokens = torch.randint(100, 40000, (8, 128), generator=torch.Generator().manual_seed(0))
    start = time.perf_counter()
    interv.concentration(model, tokens, progress=False)
    print(f"for scale: concentration of 8 x 128 tokens {time.perf_counter() - start:.2f} s")


if __name__ == "__main__":
    main()
