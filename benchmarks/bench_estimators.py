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
  ``convention="mib"``, corrupted complement), each with its 95% interval (200 bootstrap
  resamples of the prompts), unless ``--no-faith``;
- the estimator's time (wall clock; the load average is printed beside it).

Then each estimator against EAP-IG (the reference of the verdict "beats EAP-IG on both":
a higher recall of the exact top-k, k the largest ``--topk``, *and* a higher CPR), each
difference with a 95% *paired* percentile interval over the same 1,000 resamples of the
prompts for every estimator (the resample's own exact top-k; the CPR of the resample's
prompt means). For the paired CPR the benchmark evaluates each estimator's CPR circuits
once more (:func:`interv.circuits.curves.circuit_metrics`, the circuits of MIB's signed
order, pruned as ``faithfulness`` prunes them), keeps their per-prompt metrics, and checks
that their CPR is the one ``faithfulness`` reported.

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
from interv.circuits.curves import MIB_FRACTIONS, circuit_metrics, cpr
from interv.circuits.mib import mib_order, mib_scores, mib_sizes, prune
from interv.circuits.patching import capture_run, check_task, per_prompt_metric
from interv.engine.forward import Prompts, forward
from interv.stats import percentile_interval, spearman

REFERENCE = "EAP-IG"
"""The row every other estimator is compared with (the verdict's "beats EAP-IG on both")."""


def load_average() -> str:
    return f"load {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs"


class SignedCurves:
    """Per-prompt metrics of the circuits CPR is computed from (MIB's signed order, pruned),
    for a paired bootstrap of CPR across estimators; the clean run, the corrupted run and
    the empty circuit computed once."""

    def __init__(self, model, task, graph: Graph) -> None:
        self.model, self.task, self.graph = model, task, graph
        self.target = check_task(model, task, "logit_diff")
        self.clean_logits = forward(
            model,
            Prompts.of(task.clean_tokens, task.attention_mask),
            readout="position_logits",
            positions=task.answer_positions,
        ).readout
        self.replacement = capture_run(model, task, "corrupted")
        self.full = per_prompt_metric(self.target, task, self.clean_logits, self.clean_logits)
        self.full = self.full[0].double().cpu()
        self.empty = self.metrics(torch.zeros(1, graph.n_edges, dtype=torch.bool))[0]
        self.sizes = mib_sizes(MIB_FRACTIONS, graph.n_edges)

    def metrics(self, kept: torch.Tensor) -> torch.Tensor:
        return circuit_metrics(
            self.model,
            self.task,
            self.graph,
            kept,
            self.replacement,
            self.target,
            self.clean_logits,
        )

    def of(self, scores) -> torch.Tensor:
        """``[n_fractions, n]`` metric of the CPR circuits of ``scores``."""
        order = mib_order(mib_scores(scores), absolute=False)
        masks = []
        for size in self.sizes:
            mask = torch.zeros(self.graph.n_edges, dtype=torch.bool)
            mask[order[:size]] = True
            masks.append(prune(self.graph, mask))
        return self.metrics(torch.stack(masks))

    def cpr(self, values: torch.Tensor, draws: torch.Tensor) -> tuple[float, torch.Tensor]:
        """CPR of the prompt means, and of each resample's (``draws``: ``[B, n]``)."""
        point = (values.mean(-1) - self.empty.mean()) / (self.full.mean() - self.empty.mean())
        e = self.empty[draws].mean(-1)  # [B]
        boot = (values[:, draws].mean(-1) - e) / (self.full[draws].mean(-1) - e)  # [n_frac, B]
        areas = torch.tensor([cpr(MIB_FRACTIONS, column.tolist()) for column in boot.T])
        return cpr(MIB_FRACTIONS, point.tolist()), areas


def top_recall(estimates: torch.Tensor, exact: torch.Tensor, k: int) -> torch.Tensor:
    """``[B]`` recall of the exact top-``k`` by |effect| among the top-``k`` by |estimate|,
    per column of ``[n_edges, B]`` estimates and exact effects (stable order, as the table)."""

    def top(values: torch.Tensor) -> torch.Tensor:
        chosen = torch.zeros_like(values, dtype=torch.bool)
        index = torch.sort(-values.abs(), dim=0, stable=True).indices[:k]
        return chosen.scatter(0, index, True)

    return (top(estimates) & top(exact)).sum(0).double() / k


def paired(point: float, boot: torch.Tensor, n: int) -> dict:
    """The difference, its paired percentile interval, and whether the point lies outside
    it (``biased``: the resampled statistic is shifted from the sample's, as a top-k recall
    of noisier resampled means can be; the interval then does not cover the difference)."""
    low, high = percentile_interval(boot, 0.95, n_items=n)
    return {
        "difference": point,
        "interval": [float(low), float(high)],
        "biased": not float(low) <= point <= float(high),
    }


def interval(bounds, digits: int = 3) -> str:
    low, high = bounds
    return f"[{low:.{digits}f}, {high:.{digits}f}]"


def cell(difference: dict, digits: int) -> str:
    """A difference and its interval, marked ``(outside)`` where the point lies outside it."""
    mark = " (outside)" if difference["biased"] else ""
    bounds = interval(difference["interval"], digits)
    return f"{difference['difference']:+.{digits}f} {bounds}{mark}"


def against_reference(rows: list[dict], boots: dict, k: int, n: int) -> list[dict]:
    """Every estimator against :data:`REFERENCE`: the differences of top-``k`` recall and of
    CPR with paired intervals, and the verdict; printed as a table and returned."""
    reference = next((row for row in rows if row["estimator"].startswith(REFERENCE)), None)
    if reference is None:
        return []
    ref = boots[reference["estimator"]]
    with_cpr = "cpr" in reference
    print()
    print(
        f'Verdict rule: "beats {REFERENCE} on both" = a higher recall of the exact top-{k} '
        f"and a higher MIB CPR than {reference['estimator']}; established only where both "
        f"paired 95% intervals (the same {draws_of(ref)} resamples of the {n} prompts for "
        "every estimator) lie above 0. A difference marked (outside) lies outside its own "
        "percentile interval: the resampled statistic is biased (a top-k recall of noisier "
        "resampled means), so that interval establishes nothing either way."
    )
    print()
    print(
        f"| estimator | recall top-{k} minus {REFERENCE}'s (paired 95%) | "
        + (
            f"CPR minus {REFERENCE}'s (paired 95%) | CPR intervals of the table overlap | "
            if with_cpr
            else ""
        )
        + f"beats {REFERENCE} on both |"
    )
    print("|---|---|" + "---|---|" * with_cpr + "---|")
    out = []
    for row in rows:
        if row is reference:
            continue
        mine = boots[row["estimator"]]
        recall = paired(
            row["recall"][k] - reference["recall"][k], mine["recall"] - ref["recall"], n
        )
        entry = {"estimator": row["estimator"], f"recall_top_{k}": recall}
        better = [recall["difference"] > 0]
        sure = [recall["interval"][0] > 0 and not recall["biased"]]
        cells = [cell(recall, 2)]
        if with_cpr:
            cpr_diff = paired(row["cpr"] - reference["cpr"], mine["cpr"] - ref["cpr"], n)
            overlap = (
                row["cpr_interval"][0] <= reference["cpr_interval"][1]
                and reference["cpr_interval"][0] <= row["cpr_interval"][1]
            )
            entry |= {"cpr": cpr_diff, "cpr_intervals_overlap": overlap}
            better.append(cpr_diff["difference"] > 0)
            sure.append(cpr_diff["interval"][0] > 0 and not cpr_diff["biased"])
            cells += [
                cell(cpr_diff, 3),
                "yes" if overlap else "no",
            ]
        entry["beats"] = all(better)
        entry["established"] = all(better) and all(sure)
        cells.append(
            ("yes (both intervals above 0)" if entry["established"] else "yes, not established")
            if entry["beats"]
            else "no"
        )
        out.append(entry)
        print(f"| {row['estimator']} | " + " | ".join(cells) + " |")
    return out


def draws_of(boot: dict) -> int:
    return int(boot["recall"].numel())


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
    for path in (args.exact_cache, args.out):  # their folders made before any model work
        if path:
            os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
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
        if tuple(exact.shape) != (truth.numel(), n):
            raise SystemExit(
                f"{args.exact_cache} holds exact effects of shape {tuple(exact.shape)}; this run "
                f"needs ({truth.numel()} edges, {n} prompts): remove it or pass another file"
            )
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
    k_max = max(args.topk)
    signed = None if args.no_faith else SignedCurves(model, task, graph)
    boots = {}  # estimator -> resampled recall of the exact top-k_max, resampled CPR
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
        boot_recall = top_recall(per_prompt[:, draws].mean(-1), boot_exact, k_max)
        boots[name] = {"recall": boot_recall}
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
            t1 = time.perf_counter()
            again, boots[name]["cpr"] = signed.cpr(signed.of(scores), draws)
            faith["paired_seconds"] = time.perf_counter() - t1
            faith["cpr_again"] = again
            if abs(again - curve.cpr) > 1e-3 * max(1.0, abs(curve.cpr)):
                raise SystemExit(
                    f"{name}: the CPR circuits evaluated again give CPR {again:.6f}, "
                    f"faithfulness gave {curve.cpr:.6f}: the paired bootstrap would not be "
                    "of the reported CPR"
                )
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
            + (
                ""
                if not faith
                else f"; CPR {faith['cpr']:.3f} {interval(faith['cpr_interval'])}, "
                f"CMD {faith['cmd']:.3f} {interval(faith['cmd_interval'])}"
                f" (again {faith['cpr_again']:.6f})"
            )
            + ("" if flagged is None else f"; reliability > 0.5 on {flagged:.2f} of them")
            + f"; {load_average()}",
            flush=True,
        )
    unit = scores.unit
    faith_columns = "" if args.no_faith else " MIB CPR (95%) | MIB CMD (95%) |"
    print()
    print(
        "| estimator | Spearman (95% bootstrap over prompts) | "
        + " | ".join(f"recall exact top-{k}" for k in args.topk)
        + f" | mean abs(score - exact) ({unit}) |{faith_columns} time (s) |"
    )
    print(
        "|---|---|" + "---|" * len(args.topk) + "---|" + "---|---|" * (not args.no_faith) + "---|"
    )
    for row in rows:
        print(
            f"| {row['estimator']} | {row['spearman']:.3f} {interval(row['interval'])} | "
            + " | ".join(f"{row['recall'][k]:.2f}" for k in args.topk)
            + f" | {row['mean_abs_error']:.4f} |"
            + (
                ""
                if args.no_faith
                else f" {row['cpr']:.3f} {interval(row['cpr_interval'])} |"
                f" {row['cmd']:.3f} {interval(row['cmd_interval'])} |"
            )
            + f" {row['seconds']:.2f} |"
        )
    verdict = against_reference(rows, boots, k_max, n)
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
                    "against_reference": verdict,
                },
                indent=1,
            ).encode(),
            replace=True,
        )


if __name__ == "__main__":
    main()
