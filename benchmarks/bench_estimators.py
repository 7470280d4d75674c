"""Edge estimators against exact path patching: EAP, EAP-IG, QK fix, GIM-style, HVP-corrected.

Every estimator scores every edge of the model's graph (:func:`interv.circuits.edge_scores`,
all prompts in one gradient run per step); the truth is the exact path-patching effect of
each edge alone (:func:`interv.circuits.edge_effects`, per prompt) on every edge
(``--sample 0``, the default) or on ``--sample N`` edges drawn uniformly without replacement
(seed 0). Printed per estimator, over the truth's edges:

- Spearman's rho of the prompt-mean estimates with the prompt-mean exact effects, with a
  95% percentile interval over 1,000 bootstrap resamples of the prompts (estimates and
  exact effects resampled together, per prompt);
- recall of the exact top-k by |effect| among the estimator's top-k by |estimate|;
- mean |estimate - exact| (in the metric's unit);
- MIB's CPR and CMD of the circuits the estimator ranks (:func:`interv.circuits.faithfulness`,
  ``convention="mib"``, corrupted complement, 200 bootstrap draws), unless ``--no-faith``;
- the estimator's time (wall clock; the load average is printed beside it).

The HVP rows are Zhang & Wang's correction (arXiv 2606.09899, ``edge_scores(hvp=True)``) and
its multi-step variant (``hvp_steps``), on every edge or, with ``--hvp-top K``, on the
``K`` edges of largest EAP |score| only (screen, then fix; the rest keep EAP's scores).

Run: ``python benchmarks/bench_estimators.py [--model induction-2l] [--task induction]
[--pairs 16] [--seed 0] [--sample 0] [--steps 5] [--topk 10 20] [--no-qk] [--no-ig] [--ablate]
[--no-hvp] [--hvp-steps 4] [--hvp-top K] [--no-faith] [--order PREFIXES] [--exact-cache FILE]
[--out FILE]``. ``--ablate`` adds GIM's three modifications one at a time; ``--order`` runs the
rows whose names start with the given comma-separated prefixes first (the longest prefix
decides); ``--exact-cache`` keeps the exact effects in a file and reuses them.
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
from interv.circuits import GIM, Graph, edge_effects, edge_scores, faithfulness
from interv.stats import percentile_interval, spearman


def load_average() -> str:
    return f"load {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", default="induction-2l")
    parser.add_argument("--task", default="induction")
    parser.add_argument("--pairs", type=int, default=16)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--sample", type=int, default=0, help="edges drawn uniformly; 0: all")
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--topk", type=int, nargs="+", default=[10, 20])
    parser.add_argument("--no-qk", action="store_true", help="leave out the QK fix")
    parser.add_argument("--no-ig", action="store_true", help="leave out EAP-IG")
    parser.add_argument("--ablate", action="store_true", help="GIM's modifications one at a time")
    parser.add_argument("--no-hvp", action="store_true", help="leave out the HVP rows")
    parser.add_argument("--hvp-steps", type=int, default=4, help="multi-step HVP segments")
    parser.add_argument("--hvp-top", type=int, default=None, help="HVP on the top K edges only")
    parser.add_argument("--no-faith", action="store_true", help="leave out MIB CPR/CMD")
    parser.add_argument(
        "--order", default=None, help="comma-separated row prefixes to run first (e.g. EAP,HVP)"
    )
    parser.add_argument("--exact-cache", default=None, help="a .pt file of the exact effects")
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)

    model = interv.load_model(args.model)
    task = interv.load_task(args.task, n_pairs=args.pairs, seed=args.seed).tokenize(model)
    graph = Graph.from_model(model)
    n = task.n_pairs
    if args.sample:
        generator = torch.Generator().manual_seed(0)
        truth = torch.randperm(graph.n_edges, generator=generator)[: args.sample].sort().values
    else:
        truth = torch.arange(graph.n_edges)
    print(
        f"{args.model}: {graph.n_edges} edges; task {args.task}, {n} pairs (seed {args.seed}); "
        f"truth: {'all' if not args.sample else f'{truth.numel()} uniformly drawn'} edges; "
        f"{load_average()}"
    )
    t0 = time.perf_counter()
    cached = args.exact_cache and os.path.exists(args.exact_cache)
    if cached:
        exact = torch.load(args.exact_cache)
    else:
        exact = edge_effects(model, task, graph, truth.tolist(), per_prompt=True)  # [k, n]
        if args.exact_cache:
            torch.save(exact, args.exact_cache)
    exact_seconds = time.perf_counter() - t0
    print(f"exact path patching of {truth.numel()} edges: {exact_seconds:.1f} s; {load_average()}")

    screens = {
        "EAP": {},
        f"EAP-IG ({args.steps} steps)": {"method": "eap-ig", "steps": args.steps},
        "EAP + QK fix": {"qk_fix": True},
        "GIM-style (T=2, q/k/v x 1/4, 1/4, 1/2, frozen norms)": {"gim": GIM()},
    }
    if not args.no_hvp:
        top = {} if args.hvp_top is None else {"hvp_top": args.hvp_top}
        where = "" if args.hvp_top is None else f", top {args.hvp_top} by EAP"
        screens[f"HVP-corrected EAP{where}"] = {"hvp": True} | top
        screens[f"multi-step HVP ({args.hvp_steps} segments{where})"] = {
            "hvp": True,
            "hvp_steps": args.hvp_steps,
        } | top
    if args.no_qk:
        del screens["EAP + QK fix"]
    if args.no_ig:
        del screens[f"EAP-IG ({args.steps} steps)"]
    if args.ablate:  # one GIM modification at a time
        off = {"temperature": 1, "q_scale": 1, "k_scale": 1, "v_scale": 1, "freeze_norms": False}
        screens["GIM: frozen norms only"] = {"gim": GIM(**(off | {"freeze_norms": True}))}
        screens["GIM: softmax gradient at T=2 only"] = {"gim": GIM(**(off | {"temperature": 2}))}
        screens["GIM: q/k/v scales only"] = {
            "gim": GIM(**(off | {"q_scale": 0.25, "k_scale": 0.25, "v_scale": 0.5}))
        }
    if args.order:  # rows whose names start with these prefixes first, in this order
        prefixes = args.order.split(",")

        def rank(name: str) -> int:
            hits = [(len(p), i) for i, p in enumerate(prefixes) if name.startswith(p)]
            return max(hits)[1] if hits else len(prefixes)  # the longest prefix decides

        screens = dict(sorted(screens.items(), key=lambda item: rank(item[0])))
    generator = torch.Generator().manual_seed(1)
    draws = torch.randint(0, n, (1000, n), generator=generator)
    mean_exact = exact.mean(-1)
    boot_exact = exact[:, draws].mean(-1)  # [k, 1000]
    order_exact = torch.sort(-mean_exact.abs(), stable=True).indices
    edge_scores(model, task, batch_size=n)  # warm-up, untimed
    rows = []
    for name, options in screens.items():
        t0 = time.perf_counter()
        scores = edge_scores(model, task, batch_size=n, **options)
        seconds = time.perf_counter() - t0
        per_prompt = scores.per_prompt[truth]  # [k, n]
        mean = per_prompt.mean(-1)
        rho = float(spearman(mean, mean_exact))
        boot = spearman(per_prompt[:, draws].mean(-1).T, boot_exact.T)
        low, high = percentile_interval(boot, 0.95, n_items=n)
        order = torch.sort(-mean.abs(), stable=True).indices
        recall = {
            k: len(set(order_exact[:k].tolist()) & set(order[:k].tolist())) / k for k in args.topk
        }
        error = float((mean - mean_exact).abs().mean())
        faith = {}
        if not args.no_faith:
            t1 = time.perf_counter()
            curve = faithfulness(model, task, scores, convention="mib", n_bootstrap=200)
            faith = {
                "cpr": curve.cpr,
                "cmd": curve.cmd,
                "cpr_interval": list(curve.cpr_interval),
                "cmd_interval": list(curve.cmd_interval),
                "faith_seconds": time.perf_counter() - t1,
            }
        flagged = None
        if scores.reliability is not None:
            kept = scores.reliability[truth]
            kept = kept[~torch.isnan(kept)]  # NaN: not corrected (--hvp-top)
            flagged = float((kept > 0.5).float().mean()) if kept.numel() else None
        rows.append(
            {
                "estimator": name,
                "spearman": rho,
                "interval": [float(low), float(high)],
                "recall": recall,
                "mean_abs_error": error,
                "seconds": seconds,
                "load": os.getloadavg()[0],
                "sentence": scores.sentence,
                "flagged": flagged,
            }
            | faith
        )
        print(
            f"{name}: Spearman {rho:.3f} [{low:.3f}, {high:.3f}]; "
            + ", ".join(f"recall top-{k} {r:.2f}" for k, r in recall.items())
            + f"; mean |score - exact| {error:.4f}; {seconds:.2f} s"
            + ("" if not faith else f"; CPR {faith['cpr']:.3f}, CMD {faith['cmd']:.3f}")
            + ("" if flagged is None else f"; reliability > 0.5 on {flagged:.2f} of them")
            + f"; {load_average()}",
            flush=True,
        )
    unit = scores.unit
    print()
    print(
        "| estimator | Spearman (95% bootstrap over prompts) | "
        + " | ".join(f"recall exact top-{k}" for k in args.topk)
        + f" | mean abs(score - exact) ({unit}) | MIB CPR | MIB CMD | time (s) |"
    )
    print("|---|---|" + "---|" * len(args.topk) + "---|---|---|---|")
    for row in rows:
        low, high = row["interval"]
        print(
            f"| {row['estimator']} | {row['spearman']:.3f} [{low:.3f}, {high:.3f}] | "
            + " | ".join(f"{row['recall'][k]:.2f}" for k in args.topk)
            + f" | {row['mean_abs_error']:.4f} | {row.get('cpr', float('nan')):.3f}"
            + f" | {row.get('cmd', float('nan')):.3f} | {row['seconds']:.2f} |"
        )
    if args.out:
        write_file(
            args.out,
            json.dumps(
                {
                    "model": args.model,
                    "task": args.task,
                    "pairs": n,
                    "truth_edges": truth.numel(),
                    "exact_seconds": exact_seconds,
                    "rows": rows,
                },
                indent=1,
            ).encode(),
            replace=True,
        )


if __name__ == "__main__":
    main()
