"""Cost curves of circuit discovery: edges, EAP, greedy circuits, exact verification and
faithfulness, their wall time and peak memory against model size and prompt length.

Models: random Hugging Face Llama models (grouped-query attention with ``heads / 4``
key/value heads, RMSNorm, rotary positions, gated MLPs of width ``3.5 d_model``, vocabulary
1,000), built offline with seed 0 and booted as a ``TransformerBridge`` (the config and the
zoo's tokenizer in a temporary folder; the bridge wraps the in-memory model, no weight
copy). Task: ``pairs`` random clean/corrupted prompt pairs of ``positions`` tokens, random
target and foil; metric: logit difference at the last position.

Operations, on each model (``interv.circuits``):

- ``eap``: :func:`edge_scores` (EAP, one forward and one backward per run), every edge;
- ``greedy``: :func:`greedy_order` of ``|EAP|`` (every nested greedy circuit at once);
- ``exact``: :func:`edge_effects` of the top ``--exact`` edges by ``|EAP|`` (path patching);
- ``faithfulness``: :func:`faithfulness` of the EAP ranking at ``--fractions`` (circuits
  by ``|score|`` and by signed score, and the empty circuit: ``2 x fractions + 1`` circuits).

Method. Each point (one model shape) runs in a fresh child process, forked from a server
that has only imported the libraries (so no point pays the imports and no peak mixes with
another point's). All children run with ``MALLOC_MMAP_THRESHOLD_=65536``, so every large
buffer is its own mapping and goes back to the OS when freed: the resident set tracks live
memory. The child builds its model, then runs the operations one after another. Per
operation: the resident set just before it (the model loaded; ``VmRSS``), the peak during
it (``VmHWM`` after resetting it through ``/proc/self/clear_refs``), and ``repeats`` wall
times (``memory-repeats`` in the ``memory`` sweep); reported: the minimum time (s) and the
peak minus the resident set before it (MiB, "peak above the loaded model"). Growth
exponents: the least-squares slope of ``log quantity`` against ``log swept value`` over a
sweep's points.

Sweeps (each varies one value of ``BASE``: 4 layers x 8 heads (2 key/value heads), d_model
256, 4 pairs x 16 tokens): ``layers`` 4/8/16/32, ``heads`` 8/16/32, ``d_model``
256/512/1024/2048, ``positions`` 16/32/64/128. ``memory``: faithfulness alone on Llama-3-8B's
head layout (32 query heads, 8 key/value heads, d_head = d_model / 32, 8 pairs x 16 tokens)
at d_model 2048-4096, one circuit and four circuits per stacked forward, beside
:func:`faithfulness_memory`'s prediction.

QK fix against EAP (``--qk-fix MODEL``, no sweep): on a real model and task (``--task``,
``--pairs``, seed 0), :func:`edge_scores` with ``qk_fix=False`` and ``qk_fix=True``, all
prompts in one batch, alternately ``--repeats`` times after an untimed EAP warm-up; printed:
each one's minimum wall time and process CPU time, their ratios and the load average;
``--profile N``: the ``N`` functions with the most own time in one more (profiled) QK-fix
run, and the QK fix's own parts (base run, per-layer scores, directions, the blocks'
products and reading) by cumulative time. The header names the position where the prompt
pairs first differ: the fix moves no earlier position, so its cost depends on it.

Run: ``python benchmarks/bench_circuit_costs.py [--out costs.json] [--markdown costs.md]
[--sweeps layers heads d_model positions memory] [--repeats 2] [--memory-repeats 1]
[--threads 2]`` (docs/cost-curves.md: 21 minutes on 2 cores at load average 2-4 with
``--memory-repeats 2``, at least 6 of them the memory sweep's second runs);
``--quick``: a few tiny points (under a minute); ``--render costs.json``: the tables of a
saved run, nothing measured.
"""

from __future__ import annotations

import argparse
import ctypes
import dataclasses
import datetime
import gc
import json
import math
import multiprocessing
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import warnings
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import torch
from _measure import MIB, peak, reset_peak  # the sibling benchmarks (sys.path[0])
from bench_circuits import matmul_gflops, random_pairs

from interv._outputs import write_file
from interv.circuits import Graph, edge_effects, edge_scores, faithfulness, greedy_order

ROOT = Path(__file__).resolve().parents[1]
TOKENIZER = ROOT / "interv" / "zoo" / "data" / "induction-2l"
VOCAB = 1000
OPS = ("eap", "greedy", "exact", "faithfulness")
FRACTIONS = (0.001, 0.01, 0.1, 0.5, 1.0)
PRELOAD = ["torch", "transformers", "transformer_lens.model_bridge", "interv.circuits.curves"]


@dataclass(frozen=True)
class Shape:
    """One random Llama-shaped model and its task."""

    layers: int = 4
    heads: int = 8
    d_model: int = 256
    positions: int = 16
    pairs: int = 4
    kv_ratio: int = 4

    @property
    def kv_heads(self) -> int:
        return max(1, self.heads // self.kv_ratio)

    @property
    def d_head(self) -> int:
        return self.d_model // self.heads

    @property
    def d_mlp(self) -> int:
        return self.d_model * 7 // 2

    @property
    def n_senders(self) -> int:
        return 1 + self.layers * (self.heads + 1)

    def label(self) -> str:
        return (
            f"{self.layers}L x {self.heads}H ({self.kv_heads} kv), d_model {self.d_model}, "
            f"{self.pairs} x {self.positions} tokens"
        )


@dataclass(frozen=True)
class Job:
    """What one child measures: the operations on one shape."""

    shape: Shape
    ops: tuple[str, ...]
    repeats: int
    threads: int
    n_exact: int
    fractions: tuple[float, ...]
    copies: tuple[int | None, ...] = (None,)
    """Faithfulness circuits per stacked forward (None: interv's default)."""


BASE = Shape()
SWEEPS: dict[str, tuple[str, tuple[int, ...]]] = {
    "layers": ("layers", (4, 8, 16, 32)),
    "heads": ("heads", (8, 16, 32)),
    "d_model": ("d_model", (256, 512, 1024, 2048)),
    "positions": ("positions", (16, 32, 64, 128)),
}
MEMORY_SHAPES = tuple(
    Shape(layers=layers, heads=32, d_model=d, positions=16, pairs=8)
    for layers, d in ((2, 2048), (2, 3072), (2, 4096), (8, 2048))
)
MEMORY_COPIES = (1, 4)
QUICK_BASE = Shape(layers=2, heads=4, d_model=64, positions=8, pairs=2)
QUICK_SWEEPS: dict[str, tuple[str, tuple[int, ...]]] = {
    "layers": ("layers", (2, 4)),
    "positions": ("positions", (8, 16)),
}
QUICK_MEMORY = (Shape(layers=2, heads=8, d_model=128, positions=8, pairs=2),)


# ----------------------------------------------------------------------------- memory model


def faithfulness_memory(shape: Shape, copies: int, n_circuits: int, n_edges: int) -> dict:
    """Bytes held at the peak of :func:`interv.circuits.faithfulness` above the loaded model
    (float32), by tensor, from reading ``interv/circuits/curves.py`` (``_circuit_forward``)
    and ``interv/circuits/patching.py`` (``capture_run``). With ``R = copies x pairs`` rows,
    ``T`` positions, ``S = 1 + layers (heads + 1)`` senders:

    - ``sender_changes``: the table ``deltas`` ``[R, T, S, d_model]``, every sender's output
      change (embed, each head's ``z W_O``, each MLP), allocated whole before the forward;
    - ``replacement_run``: the corrupted run kept as the complement, per layer
      ``resid_pre``, ``resid_mid``, ``z`` (``heads x d_head = d_model``), ``mlp_out``, and
      the final residual: ``(4 layers + 1) x pairs x T x d_model``;
    - ``live_activations``: the stacked forward's hooks keep every block's ``resid_pre``,
      ``resid_mid`` (``live_inputs``) and ``z`` (``live_z``, ``heads x d_head = d_model``)
      until it ends: ``3 layers x R x T x d_model``;
    - ``hook_transient``: the largest hook's temporaries, three ``[R, T, heads, d_model]``
      tensors (the query hook: the rebuilt inputs of every query head, the norm's product
      and its output; the ``z`` hook: live and replacement ``z W_O`` per head and their
      difference), or the MLP's three ``[R, T, d_mlp]`` when wider;
    - ``circuit_masks``: ``[n_circuits, n_edges]`` bool.
    """
    f32 = 4
    rows = copies * shape.pairs
    t, d = shape.positions, shape.d_model
    parts = {
        "sender_changes": rows * t * shape.n_senders * d * f32,
        "replacement_run": (4 * shape.layers + 1) * shape.pairs * t * d * f32,
        "live_activations": 3 * shape.layers * rows * t * d * f32,
        "hook_transient": 3 * rows * t * max(shape.heads * d, shape.d_mlp) * f32,
        "circuit_masks": n_circuits * n_edges,
    }
    parts["total"] = sum(parts.values())
    return parts


def default_copies(shape: Shape, n_circuits: int) -> int:
    """Circuits per stacked forward that :func:`interv.circuits.curves.circuit_metrics`
    chooses with ``batch_size=None`` (about 2 MiB of sender changes, at least one)."""
    per_copy = shape.pairs * shape.positions * shape.n_senders * shape.d_model * 4
    return min(n_circuits, max(1, (2 << 20) // per_copy))


# ----------------------------------------------------------------------------- the child


def _settle() -> float:
    """Free what can be freed, reset the peak; the resident set now (MiB)."""
    gc.collect()
    ctypes.CDLL("libc.so.6").malloc_trim(0)
    return reset_peak() / MIB


def build(shape: Shape, folder: Path):
    """The bridge (seed 0) and the task (seed 1) of ``shape``."""
    import transformers  # heavy: only the children build models (the server preloads it)
    from transformer_lens.model_bridge import TransformerBridge

    config = transformers.LlamaConfig(
        vocab_size=VOCAB,
        hidden_size=shape.d_model,
        intermediate_size=shape.d_mlp,
        num_hidden_layers=shape.layers,
        num_attention_heads=shape.heads,
        num_key_value_heads=shape.kv_heads,
        max_position_embeddings=max(256, shape.positions),
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        hf = transformers.LlamaForCausalLM._from_config(config, attn_implementation="eager")
    hf.eval()
    config.save_pretrained(folder)
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(TOKENIZER / name, folder / name)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        transformers.logging.set_verbosity_error()
        model = TransformerBridge.boot_transformers(str(folder), device="cpu", hf_model=hf)
    model.eval()
    return model, random_pairs(shape.pairs, shape.positions, vocab=VOCAB, low=2)


def measure(job: Job) -> dict:
    """Build the model of ``job.shape`` in this process and measure ``job.ops`` (module
    docstring: minimum wall time, peak resident set above the one before each op)."""

    torch.set_num_threads(job.threads)
    before_model = _settle()
    with tempfile.TemporaryDirectory() as folder:
        model, task = build(job.shape, Path(folder))
    graph = Graph.from_model(model)
    loaded = _settle()
    out: dict = {
        "n_edges": graph.n_edges,
        "n_senders": len(graph.senders),
        "model_mib": loaded - before_model,
        "loaded_mib": loaded,
        "load_before": list(os.getloadavg()),
        "ops": {},
    }
    scores = None

    def eap():
        return edge_scores(model, task)

    def ensure_scores():
        nonlocal scores
        if scores is None:
            scores = eap()
        return scores

    runs = []
    for op in job.ops:
        if op == "eap":
            runs.append(("eap", eap))
        elif op == "greedy":
            runs.append(("greedy", lambda: greedy_order(graph, ensure_scores().scores.abs())))
        elif op == "exact":
            runs.append(
                ("exact", lambda: _exact(edge_effects, model, task, graph, ensure_scores(), job))
            )
        else:
            for copies in job.copies:
                name = "faithfulness" if copies is None else f"faithfulness x{copies}"
                runs.append(
                    (
                        name,
                        lambda copies=copies: faithfulness(
                            model,
                            task,
                            ensure_scores(),
                            fractions=job.fractions,
                            batch_size=copies,
                            n_bootstrap=200,
                        ),
                    )
                )
    for name, run in runs:
        if name != "eap":
            ensure_scores()
        seconds = []
        base = _settle()
        for _ in range(job.repeats):
            start = time.perf_counter()
            result = run()
            seconds.append(time.perf_counter() - start)
            if name == "eap":
                scores = result
            del result
        out["ops"][name] = {
            "seconds": seconds,
            "min_seconds": min(seconds),
            "peak_mib": peak() / MIB - base,
            "before_mib": base,
        }
    out["load_after"] = list(os.getloadavg())
    return out


def _exact(edge_effects, model, task, graph, scores, job: Job) -> torch.Tensor:
    top = torch.sort(-scores.scores.abs(), stable=True).indices[: job.n_exact].tolist()
    return edge_effects(model, task, graph, top)


# ----------------------------------------------------------------------------- fits, tables


def fit_exponent(xs: list[float], ys: list[float]) -> float | None:
    """Least-squares slope of ``log y`` against ``log x`` over the points with ``y > 0``
    (None with fewer than two such points)."""
    pairs = [(math.log(x), math.log(y)) for x, y in zip(xs, ys, strict=True) if y and y > 0]
    if len(pairs) < 2:
        return None
    mx = sum(p[0] for p in pairs) / len(pairs)
    my = sum(p[1] for p in pairs) / len(pairs)
    sxx = sum((p[0] - mx) ** 2 for p in pairs)
    if sxx == 0:
        return None
    return sum((p[0] - mx) * (p[1] - my) for p in pairs) / sxx


def quantities(point: dict, n_circuits: int) -> dict[str, float]:
    """The numbers of one point, by column name; beside the measured faithfulness peak, the
    memory model's prediction at interv's default circuits per forward."""
    out = {"edges": float(point["n_edges"])}
    for op, figures in point["ops"].items():
        out[f"{op} s"] = figures["min_seconds"]
        out[f"{op} MiB"] = figures["peak_mib"]
        if op == "faithfulness":
            shape = Shape(**point["shape"])
            copies = default_copies(shape, n_circuits)
            predicted = faithfulness_memory(shape, copies, n_circuits, point["n_edges"])
            out["faithfulness predicted MiB"] = predicted["total"] / MIB
    return out


def sweep_fits(points: list[dict], n_circuits: int) -> dict[str, float | None]:
    xs = [p["value"] for p in points]
    table = [quantities(p, n_circuits) for p in points]
    return {c: fit_exponent(xs, [q.get(c, 0.0) for q in table]) for c in table[0]}


def _n_circuits(result: dict) -> int:
    return 2 * len(result.get("fractions", FRACTIONS)) + 1


def _cell(value: float | None, digits: int = 3) -> str:
    if value is None:
        return "-"
    if abs(value) >= 100:
        return f"{value:,.0f}"
    return f"{value:.{digits}g}"


def _exponent(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def markdown(result: dict) -> str:
    """The sweeps' tables with their exponents, and the memory model against measurement."""
    lines = []
    n_circuits = _n_circuits(result)
    for name, sweep in result["sweeps"].items():
        points = sweep["points"]
        columns = list(quantities(points[0], n_circuits))
        lines.append(f"### `{name}` sweep ({sweep['base']}, varying {sweep['field']})")
        lines.append("")
        lines.append(f"| {sweep['field']} | " + " | ".join(columns) + " |")
        lines.append("|" + "---:|" * (len(columns) + 1))
        for point in points:
            q = quantities(point, n_circuits)
            lines.append(f"| {point['value']} | " + " | ".join(_cell(q[c]) for c in columns) + " |")
        fits = sweep_fits(points, n_circuits)
        lines.append("| **exponent** | " + " | ".join(_exponent(fits[c]) for c in columns) + " |")
        lines.append("")
    if result.get("memory"):
        lines.append("### Faithfulness memory: model against measurement")
        lines.append("")
        lines.append(
            "| shape | circuits per forward | sender changes | replacement run | live activations "
            "| hook transient | predicted MiB | measured MiB | measured / predicted | s |"
        )
        lines.append("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
        for row in result["memory"]:
            p = row["predicted"]
            lines.append(
                f"| {row['shape']} | {row['copies']} | "
                + " | ".join(
                    f"{p[k] / MIB:,.0f}"
                    for k in (
                        "sender_changes",
                        "replacement_run",
                        "live_activations",
                        "hook_transient",
                        "total",
                    )
                )
                + f" | {row['measured_mib']:,.0f} | {row['measured_mib'] * MIB / p['total']:.2f}"
                f" | {row['seconds']:.1f} |"
            )
        lines.append("")
    return "\n".join(lines)


# ----------------------------------------------------------------------------- driver


def _uptime() -> str:
    return subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()


def run(args: argparse.Namespace) -> dict:
    base = QUICK_BASE if args.quick else BASE
    sweeps = QUICK_SWEEPS if args.quick else SWEEPS
    memory_shapes = QUICK_MEMORY if args.quick else MEMORY_SHAPES
    fractions = tuple(args.fractions)
    jobs: dict[Shape, Job] = {}
    plan: dict[str, list[tuple[int, Shape]]] = {}
    for name in args.sweeps:
        if name == "memory":
            continue
        field, values = sweeps[name]
        plan[name] = [(v, dataclasses.replace(base, **{field: v})) for v in values]
        for _, shape in plan[name]:
            jobs[shape] = Job(shape, OPS, args.repeats, args.threads, args.exact, fractions)
    memory_jobs = []
    if "memory" in args.sweeps:
        memory_jobs = [
            Job(
                shape,
                ("faithfulness",),
                args.memory_repeats,
                args.threads,
                args.exact,
                fractions,
                copies=MEMORY_COPIES,
            )
            for shape in memory_shapes
        ]
    os.environ["MALLOC_MMAP_THRESHOLD_"] = "65536"  # read by the children's allocator
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload(PRELOAD)
    started = time.perf_counter()
    result: dict = {
        "command": "python benchmarks/bench_circuit_costs.py " + " ".join(args.argv),
        "date": datetime.datetime.now().astimezone().isoformat(timespec="seconds"),
        "machine": f"{os.cpu_count()}-core VM, {_mem_total_gib():.0f} GiB RAM, torch "
        f"{torch.__version__}, {args.threads} threads",
        "uptime_before": _uptime(),
        "matmul_gflops_before": matmul_gflops(),
        "ops": {
            "eap": "edge_scores (EAP), every edge",
            "greedy": "greedy_order of |EAP| (all nested greedy circuits)",
            "exact": f"edge_effects of the top {args.exact} edges by |EAP|",
            "faithfulness": f"faithfulness of the EAP ranking at fractions {list(fractions)} "
            f"({2 * len(fractions) + 1} circuits), interv's default circuits per forward",
        },
        "units": "seconds: minimum wall time over repeats; MiB: peak resident set above "
        "the resident set before the operation (model loaded)",
        "repeats": args.repeats,
        "memory_repeats": args.memory_repeats,
        "fractions": list(fractions),
        "sweeps": {},
        "memory": [],
    }
    measured: dict[Shape, dict] = {}
    with ProcessPoolExecutor(1, mp_context=context, max_tasks_per_child=1) as pool:
        for shape, job in jobs.items():
            measured[shape] = pool.submit(measure, job).result()
            _say(shape.label(), measured[shape])
        for job in memory_jobs:
            point = pool.submit(measure, job).result()
            _say(job.shape.label(), point)
            for copies in job.copies:
                figures = point["ops"][f"faithfulness x{copies}"]
                result["memory"].append(
                    {
                        "shape": job.shape.label(),
                        "copies": copies,
                        "n_edges": point["n_edges"],
                        "model_mib": point["model_mib"],
                        "predicted": faithfulness_memory(
                            job.shape, copies, 2 * len(fractions) + 1, point["n_edges"]
                        ),
                        "measured_mib": figures["peak_mib"],
                        "seconds": figures["min_seconds"],
                    }
                )
    for name, entries in plan.items():
        points = [{"value": v, "shape": dataclasses.asdict(s), **measured[s]} for v, s in entries]
        result["sweeps"][name] = {
            "field": sweeps[name][0],
            "base": base.label(),
            "points": points,
            "exponents": sweep_fits(points, _n_circuits(result)),
        }
    result["matmul_gflops_after"] = matmul_gflops()
    result["uptime_after"] = _uptime()
    result["wall_seconds"] = time.perf_counter() - started
    return result


def _mem_total_gib() -> float:
    text = Path("/proc/meminfo").read_text()
    return int(re.search(r"MemTotal:\s+(\d+) kB", text).group(1)) / 2**20


def _say(label: str, point: dict) -> None:
    ops = ", ".join(
        f"{op} {f['min_seconds']:.2f} s / {f['peak_mib']:.0f} MiB" for op, f in point["ops"].items()
    )
    print(
        f"{label}: {point['n_edges']} edges, model {point['model_mib']:.0f} MiB; {ops}; "
        f"load {point['load_after'][0]:.2f}",
        flush=True,
    )


QK_PARTS = (
    "qk_base",
    "_add_qk_scores",
    "_qk_layer_scores",
    "_qk_directions",
    "_joint_blocks",
    "_block_terms",
    "_reader_gradients",
)
"""The functions whose cumulative time ``--profile`` prints (those the code has)."""


def qk_cost(args: argparse.Namespace) -> dict:
    """EAP and the QK fix on ``args.qk_fix``'s model, same prompts, alternately."""
    import cProfile
    import pstats

    import interv

    torch.set_num_threads(args.threads)
    model = interv.load_model(args.qk_fix)
    task = interv.load_task(args.task, n_pairs=args.pairs, seed=0).tokenize(model)
    n = task.n_pairs
    # the QK fix's directions start where the pairs first differ (no change before it)
    differs = (task.clean_tokens != task.corrupted_tokens).any(0).nonzero()
    first = int(differs[0]) if differs.numel() else task.n_positions
    print(
        f"{args.qk_fix}, {args.task}: {n} pairs x {task.n_positions} positions, first "
        f"differing at position {first}; interv from {Path(interv.__file__).parent}; "
        f"{_uptime()}",
        flush=True,
    )
    edge_scores(model, task, batch_size=n)  # warm-up, untimed
    times: dict[str, list[float]] = {"eap": [], "qk_fix": []}
    cpu: dict[str, list[float]] = {"eap": [], "qk_fix": []}
    loads = []
    for repeat in range(args.repeats):
        for name, fix in (("eap", False), ("qk_fix", True)):
            start, start_cpu = time.perf_counter(), time.process_time()
            edge_scores(model, task, batch_size=n, qk_fix=fix)
            times[name].append(time.perf_counter() - start)
            cpu[name].append(time.process_time() - start_cpu)
            loads.append(os.getloadavg()[0])
            print(
                f"{name} run {repeat + 1}: {times[name][-1]:.1f} s (CPU {cpu[name][-1]:.1f} s); "
                f"{_uptime()}",
                flush=True,
            )
    result = {
        "model": args.qk_fix,
        "task": args.task,
        "pairs": n,
        "positions": task.n_positions,
        "first_difference": first,
        "seconds": times,
        "eap_s": min(times["eap"]),
        "qk_fix_s": min(times["qk_fix"]),
        "ratio": min(times["qk_fix"]) / min(times["eap"]),
        "cpu_seconds": cpu,
        "cpu_ratio": min(cpu["qk_fix"]) / min(cpu["eap"]),
        "loads": loads,
        "matmul_gflops": matmul_gflops(),
    }
    print(
        f"EAP {result['eap_s']:.1f} s, QK fix {result['qk_fix_s']:.1f} s (minimum of "
        f"{args.repeats}): ratio {result['ratio']:.2f} (CPU time: {result['cpu_ratio']:.2f}); "
        f"load average {min(loads):.1f} to "
        f"{max(loads):.1f}; matmul {result['matmul_gflops']:.0f} GFLOP/s"
    )
    if args.profile:
        profiler = cProfile.Profile()
        start = time.perf_counter()
        profiler.enable()
        edge_scores(model, task, batch_size=n, qk_fix=True)
        profiler.disable()
        seconds = time.perf_counter() - start
        stats = pstats.Stats(profiler)
        parts = {
            name: cumulative
            for (_, _, name), (_, _, _, cumulative, _) in stats.stats.items()  # type: ignore[attr-defined]
            if name in QK_PARTS
        }
        print(
            f"profiled QK-fix run: {seconds:.1f} s; cumulative: "
            + ", ".join(
                f"{name} {t:.1f} s" for name, t in sorted(parts.items(), key=lambda x: -x[1])
            )
        )
        stats.sort_stats("tottime").print_stats(args.profile)
        result["profile"] = {"seconds": seconds, "cumulative": parts}
    if args.out is not None:
        write_file(args.out, json.dumps(result, indent=1).encode())
    return result


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a few tiny points (< 1 minute)")
    parser.add_argument(
        "--sweeps",
        nargs="+",
        default=[*SWEEPS, "memory"],
        choices=[*SWEEPS, "memory"],
    )
    parser.add_argument("--repeats", type=int, default=2, help="timed runs per operation")
    parser.add_argument(
        "--memory-repeats", type=int, default=1, help="timed runs per faithfulness of `memory`"
    )
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--exact", type=int, default=100, help="edges verified exactly")
    parser.add_argument("--fractions", type=float, nargs="+", default=list(FRACTIONS))
    parser.add_argument("--out", type=Path, default=None, help="write the figures (JSON)")
    parser.add_argument("--markdown", type=Path, default=None, help="write the tables")
    parser.add_argument(
        "--render", type=Path, default=None, help="print the tables of a saved --out file"
    )
    parser.add_argument(
        "--qk-fix", default=None, metavar="MODEL", help="time EAP and the QK fix on MODEL"
    )
    parser.add_argument("--task", default="ioi", help="--qk-fix's task")
    parser.add_argument("--pairs", type=int, default=8, help="--qk-fix's prompt pairs")
    parser.add_argument("--profile", type=int, default=0, help="--qk-fix: top N of a profile")
    args = parser.parse_args(argv)
    if args.qk_fix is not None:
        return qk_cost(args)
    if args.render is not None:
        result = json.loads(args.render.read_text())
        print(markdown(result))
        return result
    args.argv = list(argv) if argv is not None else sys.argv[1:]
    if args.quick:
        args.sweeps = [s for s in args.sweeps if s in (*QUICK_SWEEPS, "memory")]
    result = run(args)
    tables = markdown(result)
    print(tables)
    print(f"wall time {result['wall_seconds']:.0f} s; {result['uptime_after']}")
    if args.out is not None:
        write_file(args.out, json.dumps(result, indent=1).encode())
    if args.markdown is not None:
        write_file(args.markdown, tables.encode())
    return result


if __name__ == "__main__":
    main()
