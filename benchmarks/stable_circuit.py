"""A circuit chosen by stability selection: its size, bootstrap Jaccard, bound, faithfulness.

``discover(model, task, select="stability", pi=PI, resamples=B, q=Q, stability=BOOT)`` on
one model and task (IOI: the pairs' templates as groups, left out in turn), then the
faithfulness curve of the selection's ranking (selected edges first, by inclusion frequency,
then the full result's ranking) at MIB's fractions, ``f`` of the selected edges alone and
``f`` of the full ranking's top edges of the same count.
Printed (and written as JSON with ``--out``): the selected circuit's size, its bootstrap
Jaccard (mean, 95% interval over BOOT bootstrap resamples, each redoing the selection), the
leave-one-template-out Jaccards, the bound on expected false edges, CPR and CMD, and the
times, with the load average beside each.

Run: ``python benchmarks/stable_circuit.py --model induction-2l --task induction --pairs 16
[--method eap] [--verify-top 20] [--audit 20] [--q 20] [--pi 0.8] [--resamples 200]
[--bootstrap 100] [--threads 1] [--out FILE]``.
"""

from __future__ import annotations

import argparse
import json
import os
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")


def _load() -> str:
    return " ".join(f"{x:.1f}" for x in os.getloadavg())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="induction-2l")
    parser.add_argument("--task", default="induction")
    parser.add_argument("--pairs", type=int, default=16)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--method", default="eap")
    parser.add_argument("--verify-top", type=int, default=20)
    parser.add_argument("--audit", type=int, default=20)
    parser.add_argument("--q", type=int, default=20)
    parser.add_argument("--pi", type=float, default=0.8)
    parser.add_argument("--resamples", type=int, default=200)
    parser.add_argument("--bootstrap", type=int, default=100)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--out", default=None)
    args = parser.parse_args()

    import torch

    import interv
    from interv.audit import Screen
    from interv.circuits import MIB_FRACTIONS, discover, faithfulness
    from interv.tasks.builtin import ioi_templates

    torch.set_num_threads(args.threads)
    model = interv.load_model(args.model)
    pairs = interv.load_task(args.task, n_pairs=args.pairs, seed=args.seed)
    task = pairs.tokenize(model)
    groups = ioi_templates(pairs) if args.task == "ioi" else None
    marks: list[tuple[float, str]] = []
    start = time.perf_counter()
    result = discover(
        model,
        task,
        method=args.method,
        screen=Screen(top_k=args.verify_top, audit=args.audit, alpha=None),
        select="stability",
        pi=args.pi,
        resamples=args.resamples,
        q=args.q,
        groups=groups,
        stability=args.bootstrap,
        progress=lambda text: marks.append((time.perf_counter() - start, text)),
    )
    total = time.perf_counter() - start
    selection = result.selection
    print(f"discover + selection: {total:.1f} s (load {_load()})")
    for at, text in marks:
        print(f"  {at:8.1f} s  {text}")
    print(selection)
    print(selection.sentence)
    print(selection.to_pandas().to_string())
    n = result.graph.n_edges
    k = len(selection.selected)
    start = time.perf_counter()
    curve = faithfulness(model, task, selection.ranking(result), fractions=MIB_FRACTIONS)
    curve_time = time.perf_counter() - start
    print(
        f"faithfulness: CPR {curve.cpr:.4g}, CMD {curve.cmd:.4g} "
        f"({curve_time:.1f} s, load {_load()})"
    )
    f_at = f_top = None
    if k:
        own = faithfulness(model, task, selection.ranking(result), fractions=[k / n, 1.0])
        f_at = float(own.mean[0])
        print(f"f of the {k} selected edges alone: {f_at:.4g} (sizes {own.n_edges_kept})")
        top = faithfulness(model, task, result, fractions=[k / n, 1.0])
        f_top = float(top.mean[0])
        print(f"f of the full ranking's top {k} edges: {f_top:.4g} (sizes {top.n_edges_kept})")
    record = {
        "command": vars(args),
        "edges": n,
        "selected": k,
        "bound": selection.bound,
        "jaccard": [selection.jaccard_mean, selection.jaccard_low, selection.jaccard_high],
        "groups": list(selection.groups),
        "group_jaccard": list(selection.group_jaccard),
        "n_exact_computed": selection.n_exact_computed,
        "cpr": curve.cpr,
        "cmd": curve.cmd,
        "f_selected": f_at,
        "f_top_same_size": f_top,
        "time_discover_selection_s": total,
        "time_curve_s": curve_time,
        "marks": marks,
        "load": _load(),
    }
    print(json.dumps(record, default=str))
    if args.out:
        with open(args.out, "w") as handle:
            json.dump(record, handle, indent=1, default=str)


if __name__ == "__main__":
    main()
