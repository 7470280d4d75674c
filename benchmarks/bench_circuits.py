"""Circuits: transformer-lens 4.3's edge tools and interv on the same job, in one run.

Model: a random GPT-2-shaped Hugging Face model (``--layers`` x ``--heads``, ``--d-model``,
MLPs, LayerNorm, learned positions), saved to a temporary folder and booted as a
TransformerBridge: transformer-lens's edge ``attribution_patch`` and ``faithfulness`` refuse
interv's zoo (native bridges) and grouped-query models (SmolLM2), and accept this kind.
Task: ``--pairs`` random clean/corrupted prompt pairs of ``--positions`` tokens, random
target and foil; metric: logit difference at the last position.

The job, each side in its own child process (so that peak memory is its own):

1. edge scores of every edge (EAP; transformer-lens's denoising convention: gradient on the
   corrupted run, clean minus corrupted): transformer-lens ``attribution_patch(...,
   EdgeAttributionConfig(granularity="edge"))`` per pair (its metric reads one prompt),
   per-position edges summed over positions; interv ``edge_scores(direction="denoise")``;
2. the faithfulness curve at MIB's 10 edge fractions over the same pairs, circuits = the
   top edges by |score| (interv's ranking, given to both): transformer-lens
   ``faithfulness`` once per pair and fraction (it takes one pair), the circuit's edges at
   every position; interv ``faithfulness`` (every circuit and pair in stacked forwards; it
   also evaluates the signed-ranking curve for CPR and the empty circuit, 21 circuits
   against transformer-lens's 10).

Printed: the largest difference of the edge scores and of the per-pair faithfulness values,
each side's wall time and peak resident memory above a child that only builds the model
(ratios transformer-lens / interv), the load average, and ``torch.matmul`` GFLOP/s before
and after. Target of issue 22: interv at least 3x faster, at most half the peak memory.

Run: ``python benchmarks/bench_circuits.py [--threads 2] [--layers 4] [--heads 4]
[--d-model 128] [--pairs 4] [--positions 12]``. transformer-lens's faithfulness costs one
Python-level rebuild per excluded (position-level) edge per forward, so its time grows with
edges x positions x pairs x fractions: the defaults keep its side to minutes.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import torch

from interv._outputs import write_file
from interv.circuits import Edge, Graph, Node, edge_scores, faithfulness
from interv.circuits.curves import MIB_FRACTIONS
from interv.tasks.tokenized import TokenizedPairs


def load_average() -> float:
    return os.getloadavg()[0]


def matmul_gflops(size: int = 1024, repeats: int = 20) -> float:
    """Plain ``torch.matmul`` throughput of float32 ``size x size`` matrices, GFLOP/s."""
    a, b = torch.randn(size, size), torch.randn(size, size)
    torch.matmul(a, b)
    start = time.perf_counter()
    for _ in range(repeats):
        torch.matmul(a, b)
    return 2 * size**3 * repeats / (time.perf_counter() - start) / 1e9


def build(args: argparse.Namespace, folder: str):
    """The GPT-2-shaped bridge and the task (seeded: every child builds the same)."""
    from transformer_lens.model_bridge import TransformerBridge
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    config = GPT2Config(
        n_layer=args.layers,
        n_head=args.heads,
        n_embd=args.d_model,
        vocab_size=1000,
        n_positions=max(64, args.positions),
        resid_pdrop=0.0,
        embd_pdrop=0.0,
        attn_pdrop=0.0,
    )
    hf = GPT2LMHeadModel(config).eval()
    if not os.path.exists(os.path.join(folder, "config.json")):
        hf.save_pretrained(folder)
    model = TransformerBridge.boot_transformers(folder, device="cpu", hf_model=hf).eval()
    return model, random_pairs(args.pairs, args.positions, vocab=1000)


def random_pairs(n: int, positions: int, *, vocab: int, low: int = 0) -> TokenizedPairs:
    """``n`` random clean/corrupted pairs of ``positions`` token ids in ``[low, vocab)``,
    random target and foil at the last position (generator seed 1)."""
    generator = torch.Generator().manual_seed(1)

    def draw(*shape: int) -> torch.Tensor:
        return torch.randint(low, vocab, shape, generator=generator)

    return TokenizedPairs(
        draw(n, positions),
        draw(n, positions),
        torch.ones(n, positions, dtype=torch.bool),
        torch.full((n,), positions - 1),
        draw(n),
        draw(n),
        name=f"random pairs ({n} x {positions})",
    )


def tl_edge_scores(model, task, graph):
    from transformer_lens.tools.analysis.attribution_patching import (
        EdgeAttributionConfig,
        attribution_patch,
    )

    kinds = {"embed": "embed", "attn_head_out": "head", "mlp_out": "mlp"}
    total = torch.zeros(graph.n_edges, dtype=torch.float64)
    for i in range(task.n_pairs):
        target, foil = task.target_ids[i], task.foil_ids[i]

        def metric(logits, target=target, foil=foil):
            return logits[0, -1, target] - logits[0, -1, foil]

        result = attribution_patch(
            model,
            task.clean_tokens[i : i + 1],
            task.corrupted_tokens[i : i + 1],
            metric,
            EdgeAttributionConfig(granularity="edge"),
        )
        for (writer, reader), score in result.edge_scores.items():
            sender = Node(kinds[writer.kind], writer.layer, writer.head)
            if reader.kind == "logits":
                edge = Edge(sender, Node("logits"), "logits")
            elif reader.kind == "mlp_in":
                edge = Edge(sender, Node("mlp", reader.layer), "mlp")
            else:
                edge = Edge(sender, Node("head", reader.layer, reader.head), reader.kind[0])
            total[graph.index(edge)] += score
    return total / task.n_pairs


def tl_faithfulness(model, task, graph, order, sizes, calls=None):
    """``[n_fractions, n_pairs]`` recovered fractions, one transformer-lens call per cell
    (only the first ``calls`` cells, fraction-major, when given; NaN elsewhere)."""
    from transformer_lens.tools.analysis.attribution_patching import Node as TLNode
    from transformer_lens.tools.analysis.attribution_patching import faithfulness as tl_faith

    kinds = {"embed": "embed", "head": "attn_head_out", "mlp": "mlp_out"}
    readers = {"q": "q_input", "k": "k_input", "v": "v_input", "mlp": "mlp_in"}

    def expand(edges):
        circuit = []
        for edge in edges:
            s, r = edge.sender, edge.receiver
            for position in range(task.n_positions):
                writer = TLNode(kinds[s.kind], position, s.layer, s.head)
                if edge.input == "logits":
                    reader = TLNode("logits", position, graph.n_layers - 1)
                else:
                    reader = TLNode(readers[edge.input], position, r.layer, r.head)
                circuit.append((writer, reader))
        return circuit

    out = torch.full((len(sizes), task.n_pairs), torch.nan, dtype=torch.float64)
    done = 0
    for j, size in enumerate(sizes):
        circuit = expand([graph.edges[i] for i in order[:size]])
        for i in range(task.n_pairs):
            if calls is not None and done >= calls:
                return out
            done += 1
            target, foil = int(task.target_ids[i]), int(task.foil_ids[i])
            result = tl_faith(
                model,
                task.clean_tokens[i : i + 1],
                task.corrupted_tokens[i : i + 1],
                lambda logits, t=target, f=foil: logits[0, -1, t] - logits[0, -1, f],
                circuit,
            )
            out[j, i] = result.recovered
    return out


def child(args: argparse.Namespace) -> None:
    torch.set_num_threads(args.threads)
    model, task = build(args, args.folder)
    graph = Graph.from_model(model)
    report: dict = {"n_edges": graph.n_edges}
    if args.job == "build":
        print(json.dumps(report))
        return
    sizes = [max(1, round(f * graph.n_edges)) for f in MIB_FRACTIONS]
    order_file = os.path.join(args.folder, "order.json")
    if args.job == "interv":
        start = time.perf_counter()
        ours = edge_scores(model, task, direction="denoise")
        t0 = time.perf_counter()
        report["seconds_scores"] = t0 - start
        report["scores"] = ours.scores.tolist()
        report["faith"], report["cpr"], report["cmd"] = [], float("nan"), float("nan")
        if not args.scores_only:
            curve = faithfulness(model, task, ours, n_bootstrap=1000)
            report["faith"] = curve.per_prompt.tolist()
            report["cpr"], report["cmd"] = curve.cpr, curve.cmd
        report["seconds_faithfulness"] = time.perf_counter() - t0
        order = torch.sort(-ours.scores.abs(), stable=True).indices.tolist()
        write_file(order_file, json.dumps(order).encode())
    else:  # the circuits: interv's ranking (the same edges for both sides)
        with open(order_file) as handle:
            order = json.load(handle)
        t0 = time.perf_counter()
        scores = tl_edge_scores(model, task, graph)
        t1 = time.perf_counter()
        faith = (
            torch.empty(0)
            if args.scores_only
            else tl_faithfulness(model, task, graph, order, sizes, args.tl_calls)
        )
        report["seconds_scores"] = t1 - t0
        report["seconds_faithfulness"] = time.perf_counter() - t1
        report["scores"] = scores.tolist()
        report["faith"] = faith.tolist()
    report["seconds"] = report["seconds_scores"] + report["seconds_faithfulness"]
    print(json.dumps(report))


def run_child(args: argparse.Namespace, job: str, folder: str) -> tuple[dict, float, float]:
    """(the child's report, its peak RSS in MiB, the load average after it)."""
    command = [sys.executable, __file__, "--job", job, "--folder", folder]
    for name in ("threads", "layers", "heads", "d_model", "pairs", "positions"):
        command += [f"--{name.replace('_', '-')}", str(getattr(args, name))]
    if args.scores_only:
        command.append("--scores-only")
    if args.tl_calls is not None:
        command += ["--tl-calls", str(args.tl_calls)]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, text=True)
    output = process.stdout.read()
    _, status, usage = os.wait4(process.pid, 0)
    process.returncode = os.waitstatus_to_exitcode(status)
    if process.returncode != 0:
        raise SystemExit(f"{job} child failed ({process.returncode})")
    report = json.loads(output.strip().splitlines()[-1])
    return report, usage.ru_maxrss / 1024, load_average()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--d-model", type=int, default=128)
    parser.add_argument("--pairs", type=int, default=4)
    parser.add_argument("--positions", type=int, default=12)
    parser.add_argument(
        "--scores-only",
        action="store_true",
        help="skip the faithfulness curve on both sides (for models where "
        "transformer-lens's faithfulness takes hours, e.g. GPT-2-small-shaped)",
    )
    parser.add_argument(
        "--tl-calls",
        type=int,
        default=None,
        help="run only this many of transformer-lens's faithfulness calls (fraction x pair "
        "cells, smallest circuits first) and extrapolate its curve time from them",
    )
    parser.add_argument("--job", choices=("tl", "interv", "build"), default=None)
    parser.add_argument("--folder", default=None)
    args = parser.parse_args()
    if args.job is not None:
        child(args)
        return
    torch.set_num_threads(args.threads)
    before = matmul_gflops()
    print(
        f"GPT-2-shaped random model: {args.layers} layers x {args.heads} heads, d_model "
        f"{args.d_model}; {args.pairs} pairs x {args.positions} tokens; {args.threads} threads; "
        f"matmul {before:.1f} GFLOP/s; load average {load_average():.2f} on {os.cpu_count()} CPUs"
    )
    with tempfile.TemporaryDirectory() as folder:
        build_report, rss_build, _ = run_child(args, "build", folder)
        ours, rss_ours, load_ours = run_child(args, "interv", folder)
        theirs, rss_theirs, load_theirs = run_child(args, "tl", folder)
    after = matmul_gflops()
    n_edges = build_report["n_edges"]
    score_diff = (torch.tensor(ours["scores"]) - torch.tensor(theirs["scores"])).abs().max()
    faith_ours = torch.tensor(ours["faith"], dtype=torch.float64)
    faith_theirs = torch.tensor(theirs["faith"], dtype=torch.float64)
    if args.tl_calls is not None and faith_theirs.numel():
        cells = len(MIB_FRACTIONS) * args.pairs
        called = min(args.tl_calls, cells)
        per_call = theirs["seconds_faithfulness"] / called
        theirs["seconds_faithfulness"] = per_call * cells
        theirs["seconds"] = theirs["seconds_scores"] + theirs["seconds_faithfulness"]
        print(
            f"transformer-lens faithfulness: {called} of {cells} calls run, {per_call:.1f} s "
            "each; its curve time below is extrapolated from them"
        )
    faith_diff = (
        (faith_ours - faith_theirs).abs().nan_to_num(0.0).max()
        if faith_ours.numel()
        else torch.tensor(float("nan"))
    )
    print(f"{n_edges} edges (position-summed); MIB fractions {list(MIB_FRACTIONS)}")
    print(
        f"max |score difference| {float(score_diff):.3g} logits (scores up to "
        f"{float(torch.tensor(ours['scores']).abs().max()):.3g})"
    )
    print(f"max |per-pair faithfulness difference| {float(faith_diff):.3g}")
    for name, report, rss, load in (
        ("interv", ours, rss_ours, load_ours),
        ("transformer-lens 4.3", theirs, rss_theirs, load_theirs),
    ):
        print(
            f"{name}: scores {report['seconds_scores']:.1f} s, faithfulness "
            f"{report['seconds_faithfulness']:.2f} s, total {report['seconds']:.1f} s; peak RSS "
            f"{rss:.0f} MiB ({rss - rss_build:.0f} MiB above the model-only child's "
            f"{rss_build:.0f}); load average after {load:.2f}"
        )
    print(
        f"ratios transformer-lens / interv: time {theirs['seconds'] / ours['seconds']:.1f}x "
        f"(scores {theirs['seconds_scores'] / ours['seconds_scores']:.1f}x, faithfulness "
        f"{theirs['seconds_faithfulness'] / max(ours['seconds_faithfulness'], 1e-9):.1f}x), "
        "peak memory "
        f"above the model {(rss_theirs - rss_build) / max(rss_ours - rss_build, 1):.1f}x"
    )
    print(f"interv CPR {ours['cpr']:.4f}, CMD {ours['cmd']:.4f}; matmul after {after:.1f} GFLOP/s")


if __name__ == "__main__":
    main()
