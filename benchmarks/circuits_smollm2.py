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

``--qk`` measures AtP*'s QK fix instead (rotary: queries and keys through the rotary
tables, checked against the model's pattern at every layer): EAP scores of every edge with
and without the fix (time), the exact path-patching effects of the query/key edges in a
checked set (the top 150 by each screen's |score| and 400 drawn uniformly from the query/key
edges, seed 0), Spearman's rho of each screen against exact over the uniform sample (with a
bootstrap interval) and over the whole checked set, and the recall of the exact top-k (k =
20, 50, 100) of the checked set by each screen's top-k there.

``--mib`` compares MIB's conventions with interv's instead: the faithfulness curve of the EAP
scores with the corrupted-run and the mean complement, each in interv's convention
(``max(1, round(p N))`` edges) and MIB's (``int(p N)`` edges, pruned to those connecting the
input to the logits): sizes, edges left after pruning, f at every fraction, CPR, CMD, time.

Run: ``python benchmarks/circuits_smollm2.py [--threads 2] [--pairs 8] [--stability B]
[--no-faithfulness] [--qk] [--mib] [--out FILE]``.
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


def qk_fix_check(model, task, graph) -> dict:
    """EAP with and without AtP*'s QK fix against exact effects of query/key edges."""
    from interv.circuits import edge_effects
    from interv.stats import percentile_interval, spearman

    screens = {}
    for qk_fix in (False, True):
        t0 = time.perf_counter()
        screens[qk_fix] = edge_scores(model, task, qk_fix=qk_fix, batch_size=task.n_pairs)
        print(
            f"EAP{' with the QK fix' if qk_fix else ''}: every edge in "
            f"{time.perf_counter() - t0:.1f} s; {load_average()}"
        )
    qk = torch.tensor([i for i, e in enumerate(graph.edges) if e.input in ("q", "k")])
    generator = torch.Generator().manual_seed(0)
    uniform = qk[torch.randperm(qk.numel(), generator=generator)[:400]]
    tops = [
        qk[torch.sort(-s.scores[qk].abs(), stable=True).indices[:300]] for s in screens.values()
    ]
    checked = torch.unique(torch.cat([uniform, *tops]))
    t0 = time.perf_counter()
    exact = torch.full((graph.n_edges,), float("nan"), dtype=torch.float64)
    exact[checked] = edge_effects(model, task, graph, checked.tolist())
    print(
        f"exact path patching of {checked.numel()} query/key edges in "
        f"{time.perf_counter() - t0:.1f} s; {load_average()}"
    )
    result: dict = {"checked": int(checked.numel()), "uniform": int(uniform.numel())}
    draws = torch.randint(0, uniform.numel(), (1000, uniform.numel()), generator=generator)
    for qk_fix, scores in screens.items():
        name = "fixed" if qk_fix else "plain"
        values = scores.scores
        rho = float(spearman(values[uniform], exact[uniform]))
        boot = spearman(values[uniform][draws], exact[uniform][draws])
        low, high = percentile_interval(boot, 0.95)
        rho_all = float(spearman(values[checked], exact[checked]))
        order_exact = checked[torch.sort(-exact[checked].abs(), stable=True).indices]
        order_screen = checked[torch.sort(-values[checked].abs(), stable=True).indices]
        recall = {
            k: len(set(order_exact[:k].tolist()) & set(order_screen[:k].tolist())) / k
            for k in (20, 50, 100)
        }
        error = float((values[checked] - exact[checked]).abs().mean())
        result[name] = {
            "spearman_uniform": rho,
            "spearman_uniform_interval": [low, high],
            "spearman_checked": rho_all,
            "recall": recall,
            "mean_abs_error": error,
            "sentence": scores.sentence,
        }
        print(
            f"{name}: Spearman over the {uniform.numel()} uniform q/k edges {rho:.3f} "
            f"[{low:.3f}, {high:.3f}], over all {checked.numel()} checked {rho_all:.3f}; "
            f"recall of the exact top-k among the checked: "
            + ", ".join(f"top-{k} {r:.2f}" for k, r in recall.items())
            + f"; mean |score - exact| {error:.4f} logits"
        )
    return result


def mib_check(model, task) -> dict:
    """Faithfulness curves of the EAP scores in interv's and MIB's conventions."""
    scores = edge_scores(model, task, batch_size=task.n_pairs)
    result: dict = {}
    for complement in ("corrupted", "mean"):
        for convention in ("interv", "mib"):
            t0 = time.perf_counter()
            curve = faithfulness(model, task, scores, complement=complement, convention=convention)
            seconds = time.perf_counter() - t0
            pruned = curve.n_edges_pruned[0] if curve.n_edges_pruned else curve.n_edges_kept
            print(
                f"complement {complement}, convention {convention} ({seconds:.1f} s; "
                f"{load_average()}): CPR {curve.cpr:.4f}, CMD {curve.cmd:.4f}"
            )
            for f, k, kept, value in zip(
                curve.fractions, curve.n_edges_kept, pruned, curve.mean, strict=True
            ):
                print(f"   fraction {f:<6g} edges {k:>6} (after pruning {kept:>6}): f {value:.4f}")
            result[f"{complement}_{convention}"] = {
                "seconds": seconds,
                "sizes": curve.n_edges_kept,
                "pruned": pruned,
                "f": curve.mean,
                "cpr": curve.cpr,
                "cmd": curve.cmd,
                "sentence": curve.sentence,
            }
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--pairs", type=int, default=8)
    parser.add_argument("--top-k", type=int, default=200)
    parser.add_argument("--audit", type=int, default=200)
    parser.add_argument("--stability", type=int, default=None, metavar="B")
    parser.add_argument("--no-faithfulness", action="store_true")
    parser.add_argument("--qk", action="store_true", help="measure the QK fix only")
    parser.add_argument("--mib", action="store_true", help="MIB's conventions against interv's")
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
    if args.qk or args.mib:
        if args.qk:
            out["qk_fix"] = qk_fix_check(model, task, graph)
        if args.mib:
            out["mib"] = mib_check(model, task)
        out["seconds_total"] = time.perf_counter() - start
        if args.out:
            write_file(args.out, json.dumps(out, indent=1).encode())
        return
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
