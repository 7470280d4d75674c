"""The HVP correction on the edges it corrects: SmolLM2 IOI, the top 40 by EAP, against exact.

EAP, the HVP correction and the two-segment multi-step HVP of the 40 edges of largest EAP
|score| (``edge_scores(hvp=True, hvp_top=40)``) against their exact path-patching effects:
Spearman, mean and median |score - exact|, how many of the 40 each brings closer than EAP, and
EAP's error on the edges whose reliability score exceeds 0.5 against the others. 4 IOI pairs.

Run: ``python benchmarks/bench_hvp_top.py``.
"""

from __future__ import annotations

import os
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import torch

import interv
from interv.circuits import edge_effects, edge_scores
from interv.stats import spearman


def timed(fn, *args, **kwargs):
    start = time.perf_counter()
    return fn(*args, **kwargs), time.perf_counter() - start


def main() -> None:
    torch.set_num_threads(2)
    model = interv.load_model("smollm2-135m")
    task = interv.load_task("ioi", n_pairs=4, seed=0).tokenize(model)
    eap, t_eap = timed(edge_scores, model, task)
    top = sorted(torch.sort(-eap.scores.abs(), stable=True).indices[:40].tolist())
    exact, t_exact = timed(edge_effects, model, task, None, top)
    hvp, t_hvp = timed(edge_scores, model, task, hvp=True, hvp_top=40)
    multi, t_multi = timed(edge_scores, model, task, hvp=True, hvp_top=40, hvp_steps=2)
    print(
        f"load {os.getloadavg()[0]:.1f}; exact of the 40: {t_exact:.1f} s; EAP {t_eap:.1f} s; "
        f"HVP {t_hvp:.1f} s; MS-HVP(2) {t_multi:.1f} s"
    )
    eap_error = (eap.scores[top] - exact).abs()
    for name, scores in (("EAP", eap), ("HVP", hvp), ("MS-HVP(2)", multi)):
        error = (scores.scores[top] - exact).abs()
        closer = int((error < eap_error).sum())
        print(
            f"{name}: Spearman {float(spearman(scores.scores[top], exact)):.3f}; mean |score - "
            f"exact| {float(error.mean()):.4f}; median {float(error.median()):.4f}; closer than "
            f"EAP on {closer} of 40"
        )
    flag = hvp.reliability[top] > 0.5
    print(
        f"reliability > 0.5 on {int(flag.sum())} of 40; EAP mean |error| there "
        f"{float(eap_error[flag].mean()):.4f}, elsewhere {float(eap_error[~flag].mean()):.4f}; "
        f"mean |exact| of the 40: {float(exact.abs().mean()):.4f}"
    )


if __name__ == "__main__":
    main()
