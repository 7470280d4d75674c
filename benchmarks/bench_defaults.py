"""interv's defaults on a shared machine: OpenMP's wait policy and the batch size.

One job, the one issue 24 measured: zero ablation of the 27 heads of SmolLM2-135M's layers
0-2 on the 8 IOI pairs of 15 tokens of ``bench_patching.py`` (prompt-mean logit
difference), one ``interv.run`` call, timed after a warm-up call on one head. Each
configuration runs in a fresh child process (OpenMP reads ``OMP_WAIT_POLICY`` once, when
torch is imported), with ``--busy`` CPU-bound ``python -c "while True: pass"`` processes
running beside it the whole time (default 1: "another CPU-heavy job").

Run: ``python benchmarks/bench_defaults.py [--policies ACTIVE PASSIVE] [--batches 32 144
auto] [--threads 2] [--busy 1] [--repeats 1]``. Prints one line per configuration (wall
seconds, rows per forward) and the load average before and after.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent


def child(batch: str, threads: int) -> None:
    """Time the job in this process; print one JSON line."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    sys.path.insert(0, str(HERE))
    import torch
    from bench_patching import ioi_task

    import interv
    from interv.engine.stacking import auto_batch_rows

    torch.set_num_threads(threads)
    model = interv.load_model("smollm2-135m", device="cpu", dtype=torch.float32)
    task = ioi_task(model)
    heads = [interv.ZeroAblation(layer, head) for layer in range(3) for head in range(9)]
    size = None if batch == "auto" else int(batch)
    interv.run(model, task, heads[:1], progress=False)  # warm-up: first-use costs
    start = time.perf_counter()
    interv.run(model, task, heads, max_batch_size=size, progress=False)
    wall = time.perf_counter() - start
    rows = auto_batch_rows(model, task.n_positions, task.n_pairs) if size is None else size
    print(json.dumps({"wall_s": wall, "rows": rows}))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--policies", nargs="+", default=["ACTIVE", "PASSIVE"])
    parser.add_argument("--batches", nargs="+", default=["32", "144", "auto"])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--busy", type=int, default=1, help="CPU-bound processes beside it")
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child is not None:
        child(args.child, args.threads)
        return
    busy = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(args.busy)]
    try:
        time.sleep(1)
        print(f"load average before: {os.getloadavg()}; {args.busy} busy loop(s) beside")
        for policy in args.policies:
            for batch in args.batches:
                for _ in range(args.repeats):
                    env = {**os.environ, "OMP_WAIT_POLICY": policy}
                    command = [sys.executable, __file__, "--child", batch]
                    done = subprocess.run(
                        [*command, "--threads", str(args.threads)],
                        env=env,
                        capture_output=True,
                        text=True,
                        check=True,
                    )
                    out = json.loads(done.stdout.strip().splitlines()[-1])
                    print(
                        f"OMP_WAIT_POLICY={policy:8s} max_batch_size={batch:>5s} "
                        f"({out['rows']} rows): {out['wall_s']:.2f} s",
                        flush=True,
                    )
        print(f"load average after: {os.getloadavg()}")
    finally:
        for process in busy:
            process.kill()
            process.wait()


if __name__ == "__main__":
    main()
