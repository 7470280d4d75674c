"""Screened sweeps against full exact sweeps, in one run: time, the top-20, the miss rate.

Model: SmolLM2-135M (30 layers x 9 query heads = 270 heads); task: the shipped IOI task,
8 pairs (``interv.load_task("ioi", n_pairs=8)``, padded to 18 tokens); metric: logit
difference target minus foil (logits), prompt mean.

Jobs, each run as a full exact sweep (``interv.run``, every intervention intervened on)
and as screened ones (``interv.run(..., screen=Screen(...))``, :data:`SCREENS`: the
default ``Screen()``, top 20 verified, 60 audited, alpha 0.05 on the miss rate;
integrated-gradient estimates with the same rule; integrated gradients with verification
extended until no unchecked site can beat the top 20, at 0.05):

- ``zero``, ``mean``, ``resample``: all-position ablation of every head (270 sites);
- ``denoise``: all-position denoising of every head (270 sites);
- ``denoise-pos``: per-position denoising, every head x every position (270 x 18 = 4860
  sites); ``--per-position KIND ...`` chooses the kinds of this job (default: denoise).

Printed for each job: wall times and their ratio (full / screened) with the load average
beside them, the ratio of transformer blocks run (prefix reuse makes a site in layer L
cost 30 - L blocks; a backward counted as two forwards), whether the screened top-20 (the
20 largest |exact| among the checked sites) equals the exact top-20 (set, and order), the
measured miss rate against the full sweep next to the audit's own estimate and its 95%
bound, the rank agreement, what stopped the verification, the sites of the exact top-20
that the screen ranked low (their estimate, exact effect and rank by |estimate|) and how
many sites a verification in estimate order would have needed to contain the exact
top-20. ``torch.matmul`` GFLOP/s is measured before and after.

Run: ``python benchmarks/bench_screen.py [--jobs zero mean resample denoise denoise-pos]
[--screens attribution integrated integrated-any] [--threads 2] [--batch-rows 72]``. With
the one default screen it took 70 minutes at load average 5-9 on 2 cores; the per-position
full sweep is most of it. The machine is shared, so read the wall ratios beside the load
average and the blocks ratio.
"""

from __future__ import annotations

import argparse
import os
import time
from collections.abc import Callable
from dataclasses import replace
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import torch

import interv
from interv.audit import Screen
from interv.engine.interventions import ActivationPatch, head_ablation

TOP = 20
JOBS = ("zero", "mean", "resample", "denoise", "denoise-pos")


def load_average() -> str:
    return f"load average (1 min) {os.getloadavg()[0]:.2f} on {os.cpu_count()} CPUs"


def matmul_gflops(size: int = 1024, repeats: int = 40) -> float:
    """Plain ``torch.matmul`` throughput of float32 ``size x size`` matrices, GFLOP/s."""
    a, b = torch.randn(size, size), torch.randn(size, size)
    torch.matmul(a, b)
    start = time.perf_counter()
    for _ in range(repeats):
        torch.matmul(a, b)
    return 2 * size**3 * repeats / (time.perf_counter() - start) / 1e9


def timed(fn: Callable[[], Any]) -> tuple[Any, float, float]:
    """``fn()``, its wall time in seconds and the 1-minute load average after it."""
    start = time.perf_counter()
    value = fn()
    return value, time.perf_counter() - start, os.getloadavg()[0]


def interventions(kind: str, n_layers: int, n_heads: int, n_positions: int) -> list:
    heads = [(layer, head) for layer in range(n_layers) for head in range(n_heads)]
    if kind.endswith("-pos"):
        base = kind.removesuffix("-pos")
        return [
            ActivationPatch("z", layer, head, base, positions=(p,))
            if base in ("denoise", "noise")
            else _ablation(base, layer, head, (p,))
            for layer, head in heads
            for p in range(n_positions)
        ]
    if kind in ("denoise", "noise"):
        return [ActivationPatch("z", layer, head, kind) for layer, head in heads]
    return [head_ablation(kind, layer, head) for layer, head in heads]


def _ablation(baseline: str, layer: int, head: int, positions: tuple[int, ...]):
    return replace(head_ablation(baseline, layer, head), positions=positions)


def blocks(model, task, layers: list[int], gradient_passes: int) -> int:
    """Prompt-blocks run: both base runs, ``gradient_passes`` forward + backward (3 blocks
    each), and a suffix of ``n_layers - L`` blocks per exact site in layer ``L``."""
    n_layers = model.cfg.n_layers
    per_run = n_layers * task.n_pairs
    suffixes = sum(n_layers - layer for layer in layers) * task.n_pairs
    return 2 * per_run + 3 * gradient_passes * per_run + suffixes


SCREENS = {
    "attribution": Screen(),
    "integrated": Screen(estimator="integrated", steps=5),
    "integrated-any": Screen(estimator="integrated", steps=5, bound="any"),
}
"""The screens compared: the default (attribution, the miss rate bounded below 0.05),
integrated gradients (5 path points) with the same rule, and integrated gradients with
verification extended until an unchecked site beating the top-20 is excluded at 0.05."""


def bench_job(model, task, kind: str, screens: dict, batch_rows: int) -> list[dict[str, Any]]:
    cfg = model.cfg
    # per position: the positions real in every prompt (right padding: 0..k-1); a position
    # that is padding in some prompt is refused by interv.run
    ivs = interventions(kind, cfg.n_layers, cfg.n_heads, len(task.shared_positions))
    n = len(ivs)
    print(f"\n== {kind}: {n} sites ({ivs[0].describe(task)} ...) ==")
    full, t_full, load_full = timed(
        lambda: interv.run(model, task, ivs, "logit_diff", max_batch_size=batch_rows)
    )
    print(f"full exact sweep: {t_full:.1f} s ({n} interventions; load average {load_full:.2f})")
    exact_effect = full.effect.mean(-1)
    true_top = torch.sort(-exact_effect.abs(), stable=True).indices[:TOP]
    rows = []
    for name, screen in screens.items():
        rows.append(
            bench_screen(model, task, kind, ivs, name, screen, batch_rows, exact_effect, true_top)
            | {"full_s": t_full, "load_full": load_full}
        )
        row = rows[-1]
        row["ratio"] = t_full / row["screened_s"]
        row["load"] = (load_full + row["load_screen"]) / 2
        print(
            f"time ratio full / screened: {row['ratio']:.2f}x (blocks run: "
            f"{row['block_ratio']:.2f}x)"
        )
    return rows


def bench_screen(
    model, task, kind, ivs, name, screen, batch_rows, exact_effect, true_top
) -> dict[str, Any]:
    n = len(ivs)
    print(f"-- screen {name}: {screen.describe()}")
    screened, t_screen, load_screen = timed(
        lambda: interv.run(model, task, ivs, "logit_diff", max_batch_size=batch_rows, screen=screen)
    )
    outcome = screened.screens[0]
    audit = outcome.audit
    print(
        f"screened: {t_screen:.1f} s ({audit.n_checked} exact: {audit.n_verified} verified, "
        f"{audit.audited.numel()} audited; load average {load_screen:.2f})"
    )
    screened_top = audit.top(TOP)
    same_set = set(true_top.tolist()) == set(screened_top.tolist())
    same_order = torch.equal(true_top, screened_top)
    checked = audit.checked
    difference = float((audit.exact[checked] - exact_effect[checked]).abs().max())
    rank_of = torch.empty(n, dtype=torch.long)
    rank_of[audit.order] = torch.arange(n)
    layers = [ivs[i].layer for i in checked.nonzero().flatten().tolist()]
    passes = len({iv.base_run for iv in ivs}) * (
        screen.steps if screen.estimator == "integrated" else 1
    )
    block_ratio = blocks(model, task, [iv.layer for iv in ivs], 0) / blocks(
        model, task, layers, passes
    )
    measured = audit.miss_rate_against(exact_effect)
    print(
        f"screened top-{TOP} == exact top-{TOP}: set {same_set}, order {same_order}; "
        f"max |screened exact - full| over checked sites {difference:.2e} logits"
    )
    print(
        f"miss rate: measured against the full sweep {measured:.4f} "
        f"({round(measured * audit.n_unverified)} of {audit.n_unverified} unverified sites "
        f"above the top-{TOP} threshold {audit.threshold:.3f}); the audit's estimate "
        f"{audit.miss_rate:.4f} ({audit.misses} of {audit.audited.numel()}), 95% bound "
        f"{audit.miss_bound:.4f} (Bonferroni over {audit.looks} looks "
        f"{audit.miss_bound_corrected:.4f}); at most {audit.unchecked_bound} unchecked sites "
        f"above the threshold (95% finite-population bound); stopped by {audit.stopped_by}"
    )
    low, high = audit.rank_interval
    print(
        f"rank agreement of estimate and exact over the {audit.n_checked} checked: "
        f"Spearman {audit.rank_agreement:.3f} [{low:.3f}, {high:.3f}]"
    )
    wrong = [i for i in true_top.tolist() if screened.status[i] == "estimated"]
    low_ranked = [i for i in true_top.tolist() if int(rank_of[i]) >= TOP]
    print(
        f"exact top-{TOP} sites ranked outside the screen's top {TOP} by |estimate|: "
        f"{len(low_ranked)}; of them never checked (left as estimates): {len(wrong)}"
    )
    for i in low_ranked:
        place = int((true_top == i).nonzero())
        print(
            f"  {ivs[i].site.label} {ivs[i].describe(task)[:60]}...: exact "
            f"{float(exact_effect[i]):+.3f}, estimate {float(audit.estimates[i]):+.3f}, "
            f"exact rank {place + 1}, estimate rank {int(rank_of[i]) + 1}, "
            f"{screened.status[i]}"
        )
    needed = int(rank_of[true_top].max()) + 1
    print(
        f"a verification in estimate order would need the top {needed} of {n} by "
        f"|estimate| to contain the exact top-{TOP}"
    )
    return {
        "job": kind,
        "screen": name,
        "sites": n,
        "screened_s": t_screen,
        "load_screen": load_screen,
        "block_ratio": block_ratio,
        "same_set": same_set,
        "same_order": same_order,
        "measured_miss": measured,
        "audit_miss": audit.miss_rate,
        "bound": audit.miss_bound,
        "unchecked_bound": audit.unchecked_bound,
        "checked": audit.n_checked,
        "stopped_by": audit.stopped_by,
        "needed": needed,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", nargs="+", default=list(JOBS), help=f"of {JOBS}")
    parser.add_argument("--threads", type=int, default=None, help="torch threads")
    parser.add_argument("--batch-rows", type=int, default=72, help="max_batch_size, both sides")
    parser.add_argument("--screens", nargs="+", default=list(SCREENS), help=f"of {list(SCREENS)}")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    model = interv.load_model("smollm2-135m")
    task = interv.load_task("ioi", n_pairs=8).tokenize(model)
    screens = {name: SCREENS[name] for name in args.screens}
    print(
        f"SmolLM2-135M, {task.n_pairs} IOI pairs x {task.n_positions} tokens (padded), metric "
        f"logit difference (logits), prompt mean; {torch.get_num_threads()} torch threads; "
        f"{load_average()}"
    )
    for name, screen in screens.items():
        print(f"screen {name}: {screen.describe()}")
    print(f"torch.matmul (1024 x 1024, float32): {matmul_gflops():.1f} GFLOP/s")
    rows = [
        row for job in args.jobs for row in bench_job(model, task, job, screens, args.batch_rows)
    ]
    print(
        f"\ntorch.matmul (1024 x 1024, float32) after: {matmul_gflops():.1f} GFLOP/s; "
        f"{load_average()}"
    )
    print(
        "\n| job | screen | sites | full s | screened s | ratio | blocks ratio | top-20 set | "
        "order | checked | miss measured | miss audit | rate bound | unchecked bound | "
        "stopped by | needed | load |"
    )
    print("|---" * 17 + "|")
    for r in rows:
        print(
            f"| {r['job']} | {r['screen']} | {r['sites']} | {r['full_s']:.1f} | "
            f"{r['screened_s']:.1f} | {r['ratio']:.2f}x | {r['block_ratio']:.2f}x | "
            f"{r['same_set']} | {r['same_order']} | {r['checked']} | {r['measured_miss']:.4f} | "
            f"{r['audit_miss']:.4f} | {r['bound']:.4f} | {r['unchecked_bound']} | "
            f"{r['stopped_by']} | {r['needed']} | {r['load']:.1f} |"
        )


if __name__ == "__main__":
    main()
