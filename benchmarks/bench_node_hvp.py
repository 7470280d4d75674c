"""The HVP correction on node screens: induction-2l's 8 heads against their exact effects.

Attribution, the HVP-corrected estimate and the 4-segment multi-step HVP estimate of each
head's output patched from the corrupted run (``ActivationPatch("z", L, h, "noise")``, 16
induction pairs) against the exact effects ``interv.run`` measures: mean |estimate - exact|
of the prompt means, Spearman over the 8 heads, CPU time (one thread), and each head's
reliability score. The table in docs/estimators.md ("What the HVP correction implements").

Run: ``python benchmarks/bench_node_hvp.py``.
"""

from __future__ import annotations

import os
import time

import torch

import interv
from interv.engine.runner import _base_runs
from interv.engine.screening import first_order_estimates, second_order_estimates
from interv.engine.targets import get_metric
from interv.stats import spearman


def timed(fn):
    start = time.process_time()
    out = fn()
    return out, time.process_time() - start


def main() -> None:
    torch.set_num_threads(1)
    model = interv.load_model("induction-2l")
    task = interv.load_task("induction", n_pairs=16, seed=0).tokenize(model)
    heads = [
        interv.ActivationPatch("z", layer, head, "noise") for layer in range(2) for head in range(4)
    ]
    metric = get_metric("logit_diff")
    base = _base_runs(model, task, heads, True, None)
    eap, t_eap = timed(lambda: first_order_estimates(model, task, heads, metric, base))
    (hvp, rel), t_hvp = timed(lambda: second_order_estimates(model, task, heads, metric, base))
    (multi, _), t_multi = timed(
        lambda: second_order_estimates(model, task, heads, metric, base, segments=4)
    )
    exact, t_exact = timed(lambda: interv.run(model, task, heads, metric).effect)
    print(f"load {os.getloadavg()[0]:.1f}")
    rows = (
        ("attribution", eap, t_eap),
        ("HVP-corrected", hvp, t_hvp),
        ("multi-step HVP (4 segments)", multi, t_multi),
        ("exact", exact, t_exact),
    )
    for name, estimate, seconds in rows:
        error = (estimate.mean(-1) - exact.mean(-1)).abs()
        rho = float(spearman(estimate.mean(-1), exact.mean(-1)))
        print(
            f"{name}: mean |estimate - exact| {float(error.mean()):.3f}; Spearman {rho:.3f}; "
            f"CPU {seconds:.2f} s"
        )
    print("exact effects", [round(float(x), 2) for x in exact.mean(-1)])
    print("reliability", [round(float(x), 1) for x in rel])


if __name__ == "__main__":
    main()
