"""interv's defaults on a shared machine: OpenMP's wait policy and the batch size.

One job, the one issue 24 measured: zero ablation of the 27 heads of SmolLM2-135M's layers
0-2 on the 8 IOI pairs of 15 tokens of ``bench_patching.py`` (prompt-mean logit
difference), one ``interv.run`` call, timed after a warm-up call on one head. Each
configuration runs in a fresh child process (OpenMP reads ``OMP_WAIT_POLICY`` once, when
torch is imported), with ``--busy`` CPU-bound ``python -c "while True: pass"`` processes
running beside it the whole time (default 1: "another CPU-heavy job").

Policies: ``ACTIVE`` or ``PASSIVE`` set by hand in the child's environment;
``set_threads``: no ``OMP_WAIT_POLICY`` in the environment, the child calls
``interv.set_threads(threads)`` first; ``default``: nothing set anywhere and interv imports
torch (a script that calls ``interv.load_model`` first: interv's first-heavy-use default,
passive waiting); ``unset``: nothing set and torch imported by the script before interv
loads anything (OpenMP's default: spinning threads).

Run: ``python benchmarks/bench_defaults.py [--policies unset set_threads PASSIVE] [--batches
144 auto] [--threads 2] [--busy 1] [--repeats 1]``. Prints one line per configuration (wall
seconds, rows per forward), the load average before and after, and the ratio of interv's
defaults (``set_threads``, automatic batch size) to the fastest hand-set ``PASSIVE`` run.
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


def child(batch: str, threads: int, policy: str) -> None:
    """Time the job in this process; print one JSON line."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    sys.path.insert(0, str(HERE))
    import interv

    if policy == "set_threads":
        interv.set_threads(threads)  # before torch is imported, as a script does
    if policy == "default":  # a script that sets nothing and lets interv import torch
        model = interv.load_model("smollm2-135m", device="cpu", dtype="float32")
    import torch
    from bench_patching import ioi_task

    from interv.engine.stacking import auto_batch_rows

    if policy != "default":
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
    waiting = os.environ.get("OMP_WAIT_POLICY", "unset")
    print(json.dumps({"wall_s": wall, "rows": rows, "omp_wait_policy": waiting}))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--policies",
        nargs="+",
        default=["unset", "set_threads", "PASSIVE"],
        choices=["unset", "default", "set_threads", "ACTIVE", "PASSIVE"],
    )
    parser.add_argument("--batches", nargs="+", default=["144", "auto"])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--busy", type=int, default=1, help="CPU-bound processes beside it")
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--child-policy", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child is not None:
        child(args.child, args.threads, args.child_policy)
        return
    busy = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(args.busy)]
    walls: dict[tuple[str, str], float] = {}
    try:
        time.sleep(1)
        print(f"load average before: {os.getloadavg()}; {args.busy} busy loop(s) beside")
        for policy in args.policies:
            for batch in args.batches:
                for _ in range(args.repeats):
                    env = {k: v for k, v in os.environ.items() if k != "OMP_WAIT_POLICY"}
                    if policy in ("ACTIVE", "PASSIVE"):
                        env["OMP_WAIT_POLICY"] = policy
                    command = [sys.executable, __file__, "--child", batch]
                    done = subprocess.run(
                        [*command, "--threads", str(args.threads), "--child-policy", policy],
                        env=env,
                        capture_output=True,
                        text=True,
                        check=True,
                    )
                    out = json.loads(done.stdout.strip().splitlines()[-1])
                    key = (policy, batch)
                    walls[key] = min(walls.get(key, float("inf")), out["wall_s"])
                    print(
                        f"{policy:11s} (OMP_WAIT_POLICY {out['omp_wait_policy']:7s}) "
                        f"max_batch_size={batch:>5s} ({out['rows']} rows): "
                        f"{out['wall_s']:.2f} s",
                        flush=True,
                    )
        print(f"load average after: {os.getloadavg()}")
        hand = [wall for (policy, _), wall in walls.items() if policy == "PASSIVE"]
        for policy in ("default", "unset", "set_threads"):
            if (policy, "auto") in walls and hand:
                ratio = walls[(policy, "auto")] / min(hand)
                print(f"{policy} (batch auto) / fastest hand-set PASSIVE: {ratio:.2f}x")
    finally:
        for process in busy:
            process.kill()
            process.wait()


if __name__ == "__main__":
    main()
