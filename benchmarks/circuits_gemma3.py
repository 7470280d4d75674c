"""The numbers and figures of an ``interv circuit`` run, as docs/circuits.md shows Gemma-3-270M's.

Reads the directory ``interv circuit`` wrote (``circuit.json``, ``faithfulness.json``, no model)
and prints: the model and task, the graph's edge count, the clean and corrupted-circuit
metric (``m(full)``, ``m(empty)``), the screen's verification and audit (edges verified and
audited, misses, the miss-rate bound, Spearman of estimate and exact with its interval), the
strongest exact edges, the faithfulness curve with CPR and CMD and their intervals, and the
stability (Jaccard with the full-sample circuit per size, with its interval). With
``--figure PATH`` it draws one PNG of four panels: the circuit (its strongest edges by
|exact effect|, layers left to right), the faithfulness curve with its band, estimate
against exact for every checked edge, and the Jaccard of each bootstrap resample's circuit.

The run docs/circuits.md reads (38 minutes on the shared 2-core machine at load 15-27)::

    interv circuit gemma3-270m --task ioi --n-pairs 12 --method eap-ig --steps 5 \
        --top-k 100 --audit 100 --alpha none --stability 50 --out runs/gemma3-ioi

Run: ``python benchmarks/circuits_gemma3.py runs/gemma3-ioi [--edges 30]
[--figure docs/images/circuit-gemma3-ioi.png]``.
"""

from __future__ import annotations

import argparse
import json
import math
import re
from pathlib import Path
from typing import Any

_NODE = re.compile(
    r"^(?:L(?P<layer>\d+)(?:H(?P<head>\d+)|KV(?P<kv>\d+))|MLP(?P<mlp>\d+)|embed|logits)$"
)


def _read(directory: Path, name: str) -> dict[str, Any]:
    return json.loads((directory / name).read_text(encoding="utf-8"))


def _node(label: str, n_layers: int) -> tuple[float, float, str]:
    """``(x, y, kind)`` of a graph node in the drawing: layer on x, head (or MLP) on y."""
    match = _NODE.match(label)
    if match is None:
        raise ValueError(f"unknown node {label!r}")
    if label == "embed":
        return -1.0, 1.5, "embed"
    if label == "logits":
        return float(n_layers), 1.5, "logits"
    if match["mlp"] is not None:
        return int(match["mlp"]) + 0.5, -1.5, "mlp"
    layer = int(match["layer"])
    if match["kv"] is not None:
        return layer, -0.6, "kv"
    return layer, int(match["head"]), "head"


def summary(directory: Path, n_edges: int) -> dict[str, Any]:
    """The run's numbers, printed and returned."""
    circuit = _read(directory, "circuit.json")
    curve = _read(directory, "faithfulness.json")
    audit = circuit["audit"]
    labels = circuit["edges"]
    exact = circuit["exact"]
    checked = [i for i, v in enumerate(exact) if v is not None]
    strongest = sorted(checked, key=lambda i: -abs(exact[i]))[:n_edges]
    status = circuit["status"]
    out = {
        "model": circuit["model"],
        "task": circuit["task"],
        "n_edges": len(labels),
        "method": circuit["method"],
        "steps": circuit["steps"],
        "m_full": curve["m_full"],
        "m_empty": curve["m_empty"],
        "n_verified": status.count("exact (verified)"),
        "n_audited": status.count("exact (audit)"),
        "misses": audit["misses"],
        "miss_bound": audit["miss_bound"],
        "spearman": audit["rank_agreement"],
        "spearman_interval": audit["rank_interval"],
        "strongest": [(labels[i], exact[i]) for i in strongest],
        "fractions": curve["fractions"],
        "sizes": curve["n_edges_kept"],
        "f": curve["mean"],
        "f_low": curve["low"],
        "f_signed": curve["signed_mean"],
        "f_high": curve["high"],
        "cpr": curve["cpr"],
        "cpr_interval": curve["cpr_interval"],
        "cmd": curve["cmd"],
        "cmd_interval": curve["cmd_interval"],
        "stability": circuit.get("stability"),
    }
    print(f"{out['model']} on {out['task']}: {out['n_edges']:,} edges; {circuit['sentence']}")
    print(
        f"clean metric m(full) {out['m_full']:.3f}, "
        f"every edge corrupted m(empty) {out['m_empty']:.3f}"
    )
    low, high = out["spearman_interval"]
    print(
        f"verified {out['n_verified']}, audited {out['n_audited']}, misses {out['misses']}, "
        f"miss-rate bound {out['miss_bound']:.4f}; Spearman of estimate and exact over the "
        f"checked edges {out['spearman']:.3f} [{low:.3f}, {high:.3f}]"
    )
    print("strongest exact edges: " + ", ".join(f"{e} {v:+.3f}" for e, v in out["strongest"][:10]))
    for f, k, m, lo, hi in zip(
        out["fractions"], out["sizes"], out["f"], out["f_low"], out["f_high"], strict=True
    ):
        print(f"  fraction {f:<6g} {k:>6} edges: f {m:.3f} [{lo:.3f}, {hi:.3f}]")
    print(
        f"CPR {out['cpr']:.3f} [{out['cpr_interval'][0]:.3f}, {out['cpr_interval'][1]:.3f}], "
        f"CMD {out['cmd']:.3f} [{out['cmd_interval'][0]:.3f}, {out['cmd_interval'][1]:.3f}]"
    )
    stability = out["stability"]
    if stability is not None:
        print(
            f"stability over {stability['n_resamples']} resamples of {stability['n_prompts']} "
            "prompts (Jaccard with the full-sample circuit): "
            + ", ".join(
                f"top-{s} {m:.2f} [{lo:.2f}, {hi:.2f}]"
                for s, m, lo, hi in zip(
                    stability["sizes"],
                    stability["mean"],
                    stability["low"],
                    stability["high"],
                    strict=True,
                )
            )
        )
    return out


def figure(directory: Path, out: dict[str, Any], path: Path, n_edges: int) -> None:
    """One PNG of four panels (see the module's docstring)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    circuit = _read(directory, "circuit.json")
    n_layers = 1 + max(
        int(m["layer"] or m["mlp"] or 0)
        for label in circuit["edges"]
        for node in label.split("->")
        if (m := _NODE.match(node.split(".")[0])) is not None
    )
    fig = plt.figure(figsize=(13, 9.5))
    grid = fig.add_gridspec(2, 3, height_ratios=(1.1, 1))
    ax = fig.add_subplot(grid[0, :])
    largest = max(abs(v) for _, v in out["strongest"]) or 1.0
    nodes: dict[str, tuple[float, float, str]] = {}
    for label, value in out["strongest"]:
        sender, receiver = label.split("->")
        receiver, _, port = receiver.partition(".")
        (x0, y0, _), (x1, y1, _) = (
            nodes.setdefault(n, _node(n, n_layers)) for n in (sender, receiver)
        )
        color = "tab:blue" if value < 0 else "tab:red"
        ax.annotate(
            "",
            xy=(x1, y1),
            xytext=(x0, y0),
            arrowprops={
                "arrowstyle": "-|>",
                "color": color,
                "lw": 0.5 + 4.5 * abs(value) / largest,
                "alpha": 0.75,
                "connectionstyle": "arc3,rad=0.12",
                "shrinkA": 6,
                "shrinkB": 6,
            },
        )
        if port:
            ax.text((x0 + 2 * x1) / 3, (y0 + 2 * y1) / 3, port, fontsize=7, color=color)
    markers = {"embed": "s", "logits": "s", "mlp": "D", "kv": "v", "head": "o"}
    for name, (x, y, kind) in nodes.items():
        ax.plot(x, y, markers[kind], color="0.25", ms=7)
        ax.text(x, y + 0.22, name, ha="center", fontsize=7)
    ax.set_xlim(-1.6, n_layers + 0.6)
    ax.set_ylim(-2.1, 4.0)
    ax.set_xticks(range(n_layers))
    ax.set_yticks([])
    ax.set_xlabel("layer")
    ax.set_title(
        f"{out['model']}, {out['task']}: the {len(out['strongest'])} strongest exact edges by "
        "|effect| (width by |effect|)\nblue: corrupting the edge alone lowers the metric, red:"
        " raises it; q/k/v: the reader's input; triangles: the layer's key/value head",
        fontsize=9,
    )
    ax = fig.add_subplot(grid[1, 0])
    fractions = [100 * f for f in out["fractions"]]
    ax.fill_between(fractions, out["f_low"], out["f_high"], alpha=0.3, label="95% interval")
    ax.plot(fractions, out["f"], "o-", label="circuits by |value| (CMD)")
    ax.plot(fractions, out["f_signed"], "s--", ms=4, label="circuits by signed value (CPR)")
    ax.axhline(1.0, color="0.5", lw=0.8, ls="--")
    ax.axhline(0.0, color="0.5", lw=0.8)
    ax.set_xscale("log")
    ax.set_xlabel(f"% of the {out['n_edges']:,} edges kept")
    ax.set_ylabel("(m(C) - m(empty)) / (m(full) - m(empty))")
    ax.set_title(
        f"CPR {out['cpr']:.2f} [{out['cpr_interval'][0]:.2f}, {out['cpr_interval'][1]:.2f}], "
        f"CMD {out['cmd']:.3f} [{out['cmd_interval'][0]:.3f}, {out['cmd_interval'][1]:.3f}]",
        fontsize=9,
    )
    ax.legend(fontsize=8)
    ax = fig.add_subplot(grid[1, 1])
    for status, color in (("exact (verified)", "tab:green"), ("exact (audit)", "tab:orange")):
        rows = [i for i, s in enumerate(circuit["status"]) if s == status]
        ax.scatter(
            [circuit["exact"][i] for i in rows],
            [circuit["scores"][i] for i in rows],
            s=12,
            color=color,
            label=f"{status}: {len(rows)}",
        )
    values = [v for v in circuit["exact"] if v is not None]
    lo, hi = min(values), max(values)
    ax.plot([lo, hi], [lo, hi], color="0.5", lw=0.8, ls="--")
    ax.set_xlabel("exact effect (path patching), logits")
    ax.set_ylabel(f"{out['method']} estimate, logits")
    low, high = out["spearman_interval"]
    ax.set_title(f"Spearman {out['spearman']:.2f} [{low:.2f}, {high:.2f}]", fontsize=9)
    ax.legend(fontsize=8)
    ax = fig.add_subplot(grid[1, 2])
    stability = out["stability"]
    if stability is not None:
        ax.boxplot(stability["jaccard"])
        ax.set_xticks(
            range(1, len(stability["sizes"]) + 1), [f"top-{s}" for s in stability["sizes"]]
        )
        ax.axhline(0.8, color="0.5", lw=0.8, ls="--")
        ax.set_ylim(0, 1.02)
        ax.set_ylabel("Jaccard with the full-sample circuit")
        ax.set_title(
            f"{stability['n_resamples']} bootstrap resamples of {stability['n_prompts']} pairs",
            fontsize=9,
        )
    else:
        ax.set_axis_off()
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    print(f"figure written to {path}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("directory", type=Path, help="the directory interv circuit wrote")
    parser.add_argument("--edges", type=int, default=30, help="edges drawn (by |exact|)")
    parser.add_argument("--figure", type=Path, default=None, metavar="PATH")
    args = parser.parse_args()
    out = summary(args.directory, args.edges)
    if args.figure is not None:
        figure(args.directory, out, args.figure, args.edges)
    if not all(math.isfinite(v) for v in (out["cpr"], out["cmd"])):
        print("note: CPR or CMD is not finite")


if __name__ == "__main__":
    main()
