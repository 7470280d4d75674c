"""Circuit discovery on SmolLM2-135M, the shipped IOI task: the numbers of the README.

Model: SmolLM2-135M (30 layers x 9 query heads on 3 key/value heads, 70,651 edges), float32,
CPU. Task: ``interv.load_task("ioi", n_pairs=8)``. Metric: logit difference target minus foil.

Printed: the graph; EAP and EAP-IG (5 steps) scores of every edge (every prompt in one
gradient run; time); ``discover`` with each screen (top 200 verified exactly, 200 audited,
the miss-rate bound, Spearman with its interval, time); the faithfulness curve of the
EAP-IG circuit result at MIB's 10 fractions with 95% bootstrap intervals, CPR and CMD
(time); with ``--stability B`` each discovery's stability over B bootstrap resamples of the
prompts (Jaccard of the top-20, 100 and 500 circuits with the full-sample ones, time, exact
effects patched for it). The load average is printed beside every time. ``--out FILE``
writes the results as JSON (through interv's safe writer).

Run: ``python benchmarks/circuits_smollm2.py [--threads 2] [--pairs 8] [--stability B]
[--no-faithfulness] [--out FILE]``.
"""

from __future__ import annotations

import argparse
import json
import os
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import torch

import interv
from interv._outputs import write_file
from interv.audit import Screen
from interv.circuits import Graph, circuit_stability, discover, edge_scores, faithfulness


def load_average() -> str:
    return f"load average (1 min) {os.getloadavg()[0]:.2f} on {os.cpu_count()} CPUs"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--pairs", type=int, default=8)
    parser.add_argument("--top-k", type=int, default=200)
    parser.add_argument("--audit", type=int, default=200)
    parser.add_argument("--stability", type=int, default=None, metavar="B")
    parser.add_argument("--no-faithfulness", action="store_true")
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    start = time.perf_counter()
    model = interv.load_model("smollm2-135m", device="cpu", dtype=torch.float32)
    task = interv.load_task("ioi", n_pairs=args.pairs).tokenize(model)
    print(f"loaded in {time.perf_counter() - start:.1f} s; {load_average()}")
    graph = Graph.from_model(model)
    print(graph.describe())
    print(f"task: {task.name}, {task.n_pairs} pairs x {task.n_positions} positions")
    out: dict = {"n_edges": graph.n_edges, "pairs": task.n_pairs}
    screen = Screen(top_k=args.top_k, audit=args.audit, alpha=0.05, budget=3 * args.top_k)
    results = {}
    for method in ("eap", "eap-ig"):
        t0 = time.perf_counter()
        # every prompt in one gradient run (fast; edge_scores' default is memory-first)
        scores = edge_scores(model, task, method=method, steps=5, batch_size=task.n_pairs)
        t_scores = time.perf_counter() - t0
        print(f"{method}: every edge scored in {t_scores:.1f} s; {load_average()}")
        t0 = time.perf_counter()
        result = discover(model, task, screen=screen, scores=scores)
        t_verify = time.perf_counter() - t0
        if args.stability:
            t0 = time.perf_counter()
            stability = circuit_stability(model, task, result, n_resamples=args.stability)
            t_stability = time.perf_counter() - t0
            print(
                f"{method}: stability in {t_stability:.1f} s ({stability.n_exact_computed} "
                f"exact per-prompt effects patched, {result.audit.n_checked} checked edges' "
                f"per-prompt effects patched again here; {load_average()}): {stability}"
            )
            print(stability.to_pandas().to_string(index=False))
            out[f"{method}_stability"] = {
                "seconds": t_stability,
                **{k: v for k, v in stability.to_dict().items() if k != "inclusion"},
            }
        audit = result.audit
        low, high = audit.rank_interval
        print(
            f"{method}: verified {audit.n_verified}, audited {int(audit.audited.numel())}, "
            f"misses {audit.misses}, miss rate {audit.miss_rate:.4f} <= {audit.miss_bound:.4f} "
            f"(95% CP), Spearman {audit.rank_agreement:.3f} [{low:.3f}, {high:.3f}], stopped "
            f"by {audit.stopped_by}, exact in {t_verify:.1f} s; {load_average()}"
        )
        top = result.circuit(10)
        values = result.value
        print("  top 10:", ", ".join(f"{e.label} {float(values[graph.index(e)]):.3f}" for e in top))
        results[method] = result
        out[method] = {
            "seconds_scores": t_scores,
            "seconds_exact": t_verify,
            "n_verified": audit.n_verified,
            "n_audited": int(audit.audited.numel()),
            "misses": audit.misses,
            "miss_rate": audit.miss_rate,
            "miss_bound": audit.miss_bound,
            "spearman": audit.rank_agreement,
            "spearman_interval": [low, high],
            "stopped_by": audit.stopped_by,
            "top10": [e.label for e in top],
        }
    if args.no_faithfulness:
        out["seconds_total"] = time.perf_counter() - start
        print(f"total {out['seconds_total']:.1f} s; {load_average()}")
        if args.out:
            write_file(args.out, json.dumps(out, indent=1).encode())
        return
    t0 = time.perf_counter()
    curve = faithfulness(model, task, results["eap-ig"])
    t_curve = time.perf_counter() - t0
    print(f"faithfulness (EAP-IG circuit result) in {t_curve:.1f} s; {load_average()}")
    print(curve.to_pandas().to_string(index=False))
    print(
        f"CPR {curve.cpr:.4f} [{curve.cpr_interval[0]:.4f}, {curve.cpr_interval[1]:.4f}], "
        f"CMD {curve.cmd:.4f} [{curve.cmd_interval[0]:.4f}, {curve.cmd_interval[1]:.4f}]; "
        f"m(full) {curve.m_full:.3f}, m(empty) {curve.m_empty:.3f}"
    )
    out["faithfulness"] = curve.to_dict()
    out["seconds_faithfulness"] = t_curve
    out["seconds_total"] = time.perf_counter() - start
    print(f"total {out['seconds_total']:.1f} s; {load_average()}")
    if args.out:
        write_file(args.out, json.dumps(out, indent=1).encode())


if __name__ == "__main__":
    main()
