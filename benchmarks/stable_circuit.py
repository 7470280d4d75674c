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

One discovery, then each ``--q`` x ``--pi`` selection on it, all sharing its exact per-prompt
effects (``discover(exact_per_prompt=...)``): a setting patches only the edges its subsamples
verify that no earlier one did. With ``--connected`` each setting is also run with
``connected=True`` (each subsample's circuit connected from the input to the logits, the
selection pruned again) on the same discovery, beside the plain one; every row says how many
of its selected edges connect the input to the logits through selected edges.

Run: ``python benchmarks/stable_circuit.py --model induction-2l --task induction --pairs 16
[--method eap] [--verify-top 20] [--audit 20] [--q 20 10] [--pi 0.8 0.6] [--resamples 200]
[--bootstrap 100] [--stability 200] [--connected] [--threads 1] [--no-curves | --size-only]
[--out FILE]``.
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
    parser.add_argument("--q", type=int, nargs="+", default=[20])
    parser.add_argument("--pi", type=float, nargs="+", default=[0.8])
    parser.add_argument("--resamples", type=int, default=200)
    parser.add_argument("--bootstrap", type=int, default=100)
    parser.add_argument("--stability", type=int, default=None)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument(
        "--connected",
        action="store_true",
        help="also run each setting with connected=True (connected subsample circuits)",
    )
    parser.add_argument("--no-curves", action="store_true", help="skip the faithfulness curves")
    parser.add_argument(
        "--size-only", action="store_true", help="f at the selection's size only (no CPR/CMD)"
    )
    parser.add_argument("--out", default=None)
    args = parser.parse_args()

    import torch

    import interv
    from interv.audit import Screen
    from interv.circuits import (
        MIB_FRACTIONS,
        circuit_stability,
        discover,
        faithfulness,
        stability_selection,
    )
    from interv.circuits.mib import prune
    from interv.tasks.builtin import ioi_templates

    torch.set_num_threads(args.threads)
    model = interv.load_model(args.model)
    pairs = interv.load_task(args.task, n_pairs=args.pairs, seed=args.seed)
    task = pairs.tokenize(model)
    groups = ioi_templates(pairs) if args.task == "ioi" else None
    marks: list[tuple[float, str]] = []
    start = time.perf_counter()
    exact: dict = {}  # every exact per-prompt effect, shared by the selections below
    result = discover(
        model,
        task,
        method=args.method,
        screen=Screen(top_k=args.verify_top, audit=args.audit, alpha=None),
        exact_per_prompt=exact,
        progress=lambda text: marks.append((time.perf_counter() - start, text)),
    )
    discovery = time.perf_counter() - start
    print(f"discovery (screen + {len(exact)} exact edges): {discovery:.1f} s (load {_load()})")
    for at, text in marks:
        print(f"  {at:8.1f} s  {text}")
    record: dict = {"command": vars(args), "edges": result.graph.n_edges}
    record["time_discovery_s"] = discovery
    if args.stability:
        start = time.perf_counter()
        stability = circuit_stability(
            model, task, result, n_resamples=args.stability, exact_per_prompt=exact
        )
        record["time_stability_s"] = time.perf_counter() - start
        record["stability"] = stability.to_pandas().to_dict("list")
        record["stability_patched"] = stability.n_exact_computed
        print(
            f"{stability!r}: {record['time_stability_s']:.1f} s, "
            f"{stability.n_exact_computed} edges patched (load {_load()})"
        )
    n = result.graph.n_edges
    record["settings"] = []
    kinds = (False, True) if args.connected else (False,)
    settings = [(q, pi, c) for q in args.q for pi in args.pi for c in kinds]
    for q, pi, connected in settings:
        notes: list[str] = []
        start = time.perf_counter()
        selection = stability_selection(
            model,
            task,
            result,
            pi=pi,
            n_resamples=args.resamples,
            q=q,
            groups=groups,
            bootstrap=args.bootstrap,
            exact_per_prompt=exact,
            connected=connected,
            progress=notes.append,
        )
        took = time.perf_counter() - start
        print(
            f"q {q}, pi {pi}, connected {connected}: {selection!r} ({took:.1f} s, "
            f"{selection.n_exact_computed} edges patched, load {_load()})"
        )
        for note in notes:
            print(f"  {note}")
        k = len(selection.selected)
        kept = torch.zeros(n, dtype=torch.bool)
        kept[list(selection.selected)] = True
        row = {
            "q": q,
            "pi": pi,
            "connected": connected,
            "selected": k,
            "selected_connected": int(prune(result.graph, kept).sum()),
            "mean_size": selection.mean_size,
            "n_pruned": selection.n_pruned,
            "notes": notes,
            "edges": [e.label for e in selection.edges()],
            "bound": selection.bound,
            "jaccard": [selection.jaccard_mean, selection.jaccard_low, selection.jaccard_high],
            "groups": list(selection.groups),
            "group_jaccard": list(selection.group_jaccard),
            "n_exact_computed": selection.n_exact_computed,
            "time_selection_s": took,
            "load": _load(),
        }
        if k and not args.no_curves:
            start = time.perf_counter()
            curve = None
            if not args.size_only:
                curve = faithfulness(
                    model, task, selection.ranking(result), fractions=MIB_FRACTIONS
                )
            own = faithfulness(model, task, selection.ranking(result), fractions=[k / n, 1.0])
            top = faithfulness(model, task, result, fractions=[k / n, 1.0])
            row.update(
                cpr=None if curve is None else curve.cpr,
                cmd=None if curve is None else curve.cmd,
                f_selected=float(own.mean[0]),
                f_selected_interval=[float(own.low[0]), float(own.high[0])],
                f_top_same_size=float(top.mean[0]),
                time_curves_s=time.perf_counter() - start,
            )
            areas = "" if curve is None else f"CPR {curve.cpr:.4g}, CMD {curve.cmd:.4g}, "
            print(
                f"  {areas}f of the {k} selected "
                f"{row['f_selected']:.4g} (full top-{k}: {row['f_top_same_size']:.4g})"
            )
        record["settings"].append(row)
        print(json.dumps(row, default=str), flush=True)
    record["load"] = _load()
    if args.out:
        with open(args.out, "w") as handle:
            json.dump(record, handle, indent=1, default=str)


if __name__ == "__main__":
    main()
