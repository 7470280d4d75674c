"""The exact work of a discovery on a local Ray cluster against one process: equal numbers?

One screen (EAP) computed once, then twice, in this process and with
``RayExecutor(n_workers=N)``: ``discover(scores=..., stability=B, select="stability",
resamples=B)`` (exact path patching of the verified and audited edges and of the edges the
resamples verify) and ``faithfulness`` at MIB's fractions, both with the same
``--batch-size`` (the same stacked forwards). Printed: each phase's time, the load, and
whether every number is equal (exact values, status, stability and selection dicts, the
curve's per-prompt values, CPR and CMD), else the largest difference.

Run: ``python benchmarks/circuit_ray.py --model smollm2-135m --task ioi --pairs 4 --top-k 10
--audit 10 --resamples 50 --batch-size 4 --workers 2``.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import time

from _measure import circuit_job_arguments  # the sibling benchmarks (sys.path[0])

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")


def _load() -> str:
    return " ".join(f"{x:.1f}" for x in os.getloadavg())


def _diff(a, b) -> float:
    """The largest absolute difference between two JSON-like values (inf: other shapes)."""
    if isinstance(a, dict) and isinstance(b, dict):
        if a.keys() != b.keys():
            return float("inf")
        return max((_diff(a[k], b[k]) for k in a), default=0.0)
    if isinstance(a, list) and isinstance(b, list):
        if len(a) != len(b):
            return float("inf")
        return max((_diff(x, y) for x, y in zip(a, b, strict=True)), default=0.0)
    if isinstance(a, float) and isinstance(b, float):
        if a != a and b != b:
            return 0.0
        return abs(a - b)
    return 0.0 if a == b else float("inf")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    circuit_job_arguments(parser)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--out", default=None)
    args = parser.parse_args()

    import torch

    import interv
    from interv.audit import Screen
    from interv.circuits import MIB_FRACTIONS, RayExecutor, discover, edge_scores, faithfulness

    model = interv.load_model(args.model)
    task = interv.load_task(args.task, n_pairs=args.pairs, seed=0).tokenize(model)
    start = time.perf_counter()
    scores = edge_scores(model, task)
    record = {"command": vars(args), "screen_s": time.perf_counter() - start}
    options = dict(
        scores=scores,
        screen=Screen(top_k=args.top_k, audit=args.audit, alpha=None),
        stability=args.resamples,
        select="stability",
        resamples=args.resamples,
        batch_size=args.batch_size,
    )
    runs = {}
    for name in ("local", "ray"):
        load = functools.partial(interv.load_model, args.model)
        executor = RayExecutor(load, n_workers=args.workers) if name == "ray" else None
        try:
            if executor is not None:
                start = time.perf_counter()
                executor._start()  # the workers load the model: timed apart
                record["ray_start_s"] = time.perf_counter() - start
            start = time.perf_counter()
            result = discover(model, task, **options, executor=executor)
            found = time.perf_counter() - start
            start = time.perf_counter()
            curve = faithfulness(
                model,
                task,
                result,
                fractions=MIB_FRACTIONS,
                batch_size=args.batch_size,
                executor=executor,
            )
            curved = time.perf_counter() - start
        finally:
            if executor is not None:
                executor.close()
        runs[name] = (result, curve)
        record[f"{name}_discover_s"] = found
        record[f"{name}_curve_s"] = curved
        record[f"{name}_load"] = _load()
        print(
            f"{name}: discover + stability + selection {found:.1f} s, curve {curved:.1f} s "
            f"(load {_load()}); {result.stability.n_exact_computed} + "
            f"{result.selection.n_exact_computed} edges patched for stability",
            flush=True,
        )
    (a, ca), (b, cb) = runs["local"], runs["ray"]
    checks = {
        "exact": torch.equal(a.audit.exact.nan_to_num(7.0), b.audit.exact.nan_to_num(7.0)),
        "status": a.status == b.status,
        "stability": a.stability.to_dict() == b.stability.to_dict(),
        "selection": a.selection.to_dict() == b.selection.to_dict(),
        "curve": torch.equal(ca.per_prompt, cb.per_prompt) and (ca.cpr, ca.cmd) == (cb.cpr, cb.cmd),
    }
    record["equal"] = checks
    record["max_difference"] = max(
        _diff(a.to_dict(), b.to_dict()), _diff(ca.to_dict(), cb.to_dict())
    )
    print(json.dumps(record, indent=1))
    if args.out:
        with open(args.out, "w") as handle:
            json.dump(record, handle, indent=1)


if __name__ == "__main__":
    main()
