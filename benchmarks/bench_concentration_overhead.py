"""Time of interv.concentration against a plain forward, with the admitted-key mask in place.

Model: SmolLM2-135M-Instruct (30 layers, 9 query heads, float32, CPU) on one prompt of 1024
tokens (the prompt of bench_concentration_memory.py). interv.concentration reads each layer's
:class:`~interv.engine.architecture.KeyRule` (issue 29), builds the admitted keys of every
chunk of queries, checks every row against them (mass outside, sum to 1) and reduces the
rows to the seven per-query numbers inside the pattern hooks; it stops after the last
pattern. The plain forward runs every block and the unembedding with no hooks.

Method: after a warm-up of each, the two alternate ``REPEATS`` times on the same prompt in
this process; reported: the best wall time of each, their ratio (the issue's bound: 1.3),
the torch threads and the load average at the start and end (the machine is shared: compare
the ratio, measured in one run, not the seconds).

Run: ``python benchmarks/bench_concentration_overhead.py [--threads N] [--repeats R]``
(about a minute on 2 CPU cores once SmolLM2 is converted).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_concentration_memory import _load_model, _prompt_tokens

BOUND = 1.3


def load_average() -> str:
    one, five, _ = os.getloadavg()
    return f"load {one:.2f} (1 min) / {five:.2f} (5 min)"


def main() -> None:
    from interv.analysis.concentration import concentration

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    model = _load_model()
    tokens = _prompt_tokens(model)
    start_load = load_average()
    with torch.no_grad():
        model(tokens, return_type=None)
        result = concentration(model, tokens, progress=False)
    plain, ours = [], []
    for _ in range(args.repeats):
        with torch.no_grad():
            start = time.perf_counter()
            model(tokens, return_type=None)
            plain.append(time.perf_counter() - start)
            start = time.perf_counter()
            concentration(model, tokens, progress=False)
            ours.append(time.perf_counter() - start)
    ratio = min(ours) / min(plain)
    print(f"mask rule: {result.mask_rule}")
    print(
        f"SmolLM2-135M, {tokens.shape[1]} tokens, float32, {torch.get_num_threads()} threads; "
        f"{start_load} at the start, {load_average()} at the end; best of {args.repeats}: "
        f"plain forward {min(plain):.2f} s, interv.concentration {min(ours):.2f} s; ratio "
        f"{ratio:.2f} (bound {BOUND}: {'within' if ratio <= BOUND else 'OVER'})"
    )
    print(
        f"all plain: {[round(t, 2) for t in plain]}; all concentration: "
        f"{[round(t, 2) for t in ours]}"
    )


if __name__ == "__main__":
    main()
