"""Peer comparison: one all-head patching job in interv, transformer-lens, nnsight and pyvene.

The job (benchmark A of ``bench_patching.py``): all-position denoising of every head of
SmolLM2-135M (30 layers x 9 heads = 270 cells). For each head, its output ``z`` (the
per-head attention output before the output projection, ``o_proj``'s input reshaped to
``[batch, pos, 9, 64]`` on the Hugging Face model) is taken from the clean run and patched
into the corrupted run at every position; the metric is the prompt-mean logit difference
(target minus foil) at the answer position, on the 8 IOI pairs of 15 tokens (BOS first)
that ``bench_patching.ioi_task`` builds. All four get the same token ids.

How each one runs it (all under ``torch.no_grad()``, float32):

- interv: ``interv.run(bridge, task, [ActivationPatch("z", L, h) ...])``: one clean and
  one corrupted forward, then the cells stacked 72 rows (a layer's 9 heads x 8 prompts)
  per forward, each forward starting at its layer from the recorded block inputs, with
  logits at the answer position only.
- transformer-lens: ``patching.get_act_patch_attn_head_out_all_pos`` on the same
  ``TransformerBridge`` after one ``run_with_cache`` of the clean prompts: one full
  forward of 8 prompts per cell.
- nnsight 0.8: ``TransformersModel`` on the Hugging Face model; one clean trace saves
  every layer's ``o_proj.input``, then one trace per layer with nine invokes of the
  corrupted prompts (one per head, batched into one forward of 72 rows), each writing its
  head's 64 columns of ``o_proj.input`` in place and saving its metric.
- pyvene 0.1.8: per layer an ``IntervenableModel`` on the Hugging Face model with one
  ``VanillaIntervention`` (interchange) at ``head_attention_value_output`` (``o_proj``'s
  input split into heads), unit ``h.pos``; one call per layer with the 9 heads x 8
  corrupted prompts as 72 base rows, the matching clean prompts as the source, and each
  row's head and all 15 positions as its unit locations (pyvene runs the source forward,
  then the intervened base forward).

Before timing, each implementation runs once on one layer (imports, code caches and
first-call allocations are not counted). Model loading is not timed.

Run (the optional extra installs nnsight and pyvene next to interv)::

    pip install -e ".[peers]"
    python benchmarks/bench_peers.py [--threads 2] [--layers 0,10,20] [--only interv,nnsight]

It prints the scope, torch threads, the load average (1 min; before the runs and after
each) and ``torch.matmul`` GFLOP/s (before and after), then one line per implementation:
wall time and the process's CPU time, each with its ratio to interv's (its time / interv's
time), and the max |difference| of its 270 per-head metrics against interv's, in logits
(with ``--only`` leaving interv out, the first one named is the reference). It exits with
status 1 when a difference exceeds 1e-3 logits. Wall times are seconds on this machine
with whatever else runs on it; on a busy machine the CPU-time ratios with ``--threads 1``
are the steadier estimate (with more threads, CPU time also counts threads waiting on
each other).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TQDM_DISABLE", "1")  # transformer-lens's per-cell progress bar

import torch
from bench_patching import A_BATCH_ROWS, ioi_task, load_average, matmul_gflops, timed

from interv.engine.interventions import ActivationPatch
from interv.engine.runner import run
from interv.tasks.tokenized import TokenizedPairs

IMPLEMENTATIONS = ("interv", "transformer-lens", "nnsight", "pyvene")
TOLERANCE = 1e-3  # logits; float32 runs agree to ~1e-5
INSTALL_HINT = 'pip install -e ".[peers]"'
PACKAGES = ("torch", "transformer-lens", "transformers", "nnsight", "pyvene")


@dataclass(frozen=True)
class Job:
    """The patching job, handed to each implementation: ``[len(layers), n_heads]`` out."""

    task: TokenizedPairs
    layers: tuple[int, ...]
    n_heads: int
    d_head: int


def logit_diff(logits: torch.Tensor, task: TokenizedPairs) -> torch.Tensor:
    """``[copies * n_pairs, pos, d_vocab]`` logits -> ``[copies]`` prompt-mean logit diff."""
    copies = logits.shape[0] // task.n_pairs
    rows = torch.arange(logits.shape[0])
    at_answer = logits[rows, task.answer_positions.repeat(copies)]
    diff = (
        at_answer[rows, task.target_ids.repeat(copies)]
        - at_answer[rows, task.foil_ids.repeat(copies)]
    )
    return diff.reshape(copies, task.n_pairs).mean(dim=1)


def interv_grid(bridge, job: Job) -> torch.Tensor:
    grid = [
        ActivationPatch("z", layer, head) for layer in job.layers for head in range(job.n_heads)
    ]
    result = run(bridge, job.task, grid, "logit_diff", max_batch_size=A_BATCH_ROWS)
    return result.mean().reshape(len(job.layers), job.n_heads)


def transformer_lens_grid(bridge, job: Job) -> torch.Tensor:
    import pandas as pd  # a dependency of transformer-lens
    from transformer_lens import patching

    cells = pd.DataFrame(
        [(layer, head) for layer in job.layers for head in range(job.n_heads)],
        columns=["layer", "head"],
    )
    _, clean_cache = bridge.run_with_cache(job.task.clean_tokens)
    flat = patching.get_act_patch_attn_head_out_all_pos(
        bridge,
        job.task.corrupted_tokens,
        clean_cache,
        lambda logits: logit_diff(logits, job.task)[0],
        index_axis_names=None,
        index_df=cells,
    )
    return flat.reshape(len(job.layers), job.n_heads)


def nnsight_grid(lm, job: Job) -> torch.Tensor:
    import nnsight

    task, d_head = job.task, job.d_head
    layers = lm.model.layers
    with lm.trace(task.clean_tokens):
        clean_z = nnsight.save({})
        for layer in job.layers:
            clean_z[layer] = layers[layer].self_attn.o_proj.input
    values = torch.empty(len(job.layers), job.n_heads)
    for row, layer in enumerate(job.layers):
        o_proj = layers[layer].self_attn.o_proj
        with lm.trace() as tracer:
            per_head = nnsight.save({})
            for head in range(job.n_heads):
                with tracer.invoke(task.corrupted_tokens):
                    columns = slice(head * d_head, (head + 1) * d_head)
                    o_proj.input[:, :, columns] = clean_z[layer][:, :, columns]
                    per_head[head] = logit_diff(lm.lm_head.output, task)[0]
        values[row] = torch.stack([per_head[head] for head in range(job.n_heads)])
    return values


def pyvene_grid(hf_model, job: Job) -> torch.Tensor:
    import pyvene as pv

    task, n_heads = job.task, job.n_heads
    base = {"input_ids": task.corrupted_tokens.repeat(n_heads, 1)}  # head-major rows
    source = {"input_ids": task.clean_tokens.repeat(n_heads, 1)}
    heads = [[head] for head in range(n_heads) for _ in range(task.n_pairs)]
    positions = [list(range(task.n_positions))] * len(heads)
    locations = [[heads, positions]]  # one intervention: [heads, positions] per base row
    values = torch.empty(len(job.layers), n_heads)
    for row, layer in enumerate(job.layers):
        config = pv.IntervenableConfig(
            {
                "layer": layer,
                "component": "head_attention_value_output",
                "unit": "h.pos",
                "intervention_type": pv.VanillaIntervention,
            }
        )
        intervenable = pv.IntervenableModel(config, model=hf_model)
        _, patched = intervenable(
            base, [source], unit_locations={"sources->base": (locations, locations)}
        )
        values[row] = logit_diff(patched.logits, task)
    return values


def load_hf_model(directory: str):
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(directory, dtype=torch.float32).eval()


def load_nnsight_model(directory: str):
    from nnsight import TransformersModel

    return TransformersModel(directory, task="text-generation", dispatch=True, dtype=torch.float32)


def installed_version(distribution: str) -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(distribution)
    except PackageNotFoundError:
        return "(not installed)"


def require(package: str) -> None:
    import importlib.util

    if importlib.util.find_spec(package) is None:
        raise SystemExit(f"{package} is not installed; install the peers with: {INSTALL_HINT}")


def parse_only(text: str | None) -> list[str]:
    if text is None:
        return list(IMPLEMENTATIONS)
    chosen = [name.strip() for name in text.split(",") if name.strip()]
    unknown = sorted(set(chosen) - set(IMPLEMENTATIONS))
    if unknown or not chosen:
        raise SystemExit(f"--only takes some of {', '.join(IMPLEMENTATIONS)}; got {text!r}")
    return [name for name in IMPLEMENTATIONS if name in chosen]


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=None, help="torch threads")
    parser.add_argument(
        "--layers",
        default=None,
        help="comma-separated layers of SmolLM2 to sweep (default: all 30), for a quick check",
    )
    parser.add_argument(
        "--only",
        default=None,
        help=f"comma-separated subset of {','.join(IMPLEMENTATIONS)} (default: all four)",
    )
    args = parser.parse_args(argv[1:])
    only = parse_only(args.only)
    for name, package in (("nnsight", "nnsight"), ("pyvene", "pyvene")):
        if name in only:
            require(package)
    if args.threads is not None:
        torch.set_num_threads(args.threads)
    torch.set_grad_enabled(False)

    from interv.models import load_model, smollm2

    bridge = load_model("smollm2-135m", device="cpu", dtype=torch.float32).eval()
    directory = str(smollm2.converted_dir())
    cfg = bridge.cfg
    layers = range(cfg.n_layers) if args.layers is None else map(int, args.layers.split(","))
    job = Job(ioi_task(bridge), tuple(sorted(set(layers))), cfg.n_heads, cfg.d_head)
    if not job.layers or not all(0 <= layer < cfg.n_layers for layer in job.layers):
        raise SystemExit(f"--layers must name layers 0..{cfg.n_layers - 1}; got {args.layers!r}")

    runners: dict[str, Callable[[Job], torch.Tensor]] = {}
    for name in only:
        if name == "interv":
            runners[name] = lambda job: interv_grid(bridge, job)
        elif name == "transformer-lens":
            runners[name] = lambda job: transformer_lens_grid(bridge, job)
        elif name == "nnsight":
            lm = load_nnsight_model(directory)
            runners[name] = lambda job, lm=lm: nnsight_grid(lm, job)
        else:
            hf_model = load_hf_model(directory)
            runners[name] = lambda job, hf_model=hf_model: pyvene_grid(hf_model, job)

    print(", ".join(f"{package} {installed_version(package)}" for package in PACKAGES))
    n_cells = len(job.layers) * job.n_heads
    print(
        f"job: all-position head-output (z) denoising, SmolLM2-135M, {len(job.layers)} of "
        f"{cfg.n_layers} layers x {job.n_heads} heads = {n_cells} cells, {job.task.n_pairs} IOI "
        f"pairs x {job.task.n_positions} tokens (BOS first), metric: prompt-mean logit "
        f"difference target minus foil (logits)"
    )
    print(f"{torch.get_num_threads()} torch threads; {load_average()} before the runs")
    matmul_before = matmul_gflops()
    print(f"torch.matmul (1024 x 1024, float32) before the runs: {matmul_before:.1f} GFLOP/s")

    warmup = Job(job.task, job.layers[:1], job.n_heads, job.d_head)
    values: dict[str, torch.Tensor] = {}
    seconds: dict[str, float] = {}
    cpu_seconds: dict[str, float] = {}
    for name, runner in runners.items():
        runner(warmup)
        cpu_start = time.process_time()
        values[name], seconds[name] = timed(lambda runner=runner: runner(job))
        cpu_seconds[name] = time.process_time() - cpu_start
        print(
            f"  {name}: {seconds[name]:.1f} s wall, {cpu_seconds[name]:.1f} s CPU; "
            f"{load_average()}",
            flush=True,
        )

    matmul_after = matmul_gflops()
    print(f"torch.matmul after the runs: {matmul_after:.1f} GFLOP/s; {load_average()} after")
    reference = only[0]
    print(
        f"{'implementation':<18}{'wall s':>8}{'/ ' + reference:>10}{'CPU s':>9}"
        f"{'/ ' + reference:>10}   max |diff| vs {reference}"
    )
    failed = []
    for name in only:
        difference = float((values[name] - values[reference]).abs().max())
        if difference > TOLERANCE:
            failed.append(f"{name}: {difference:.2e}")
        print(
            f"{name:<18}{seconds[name]:>8.1f}{seconds[name] / seconds[reference]:>9.2f}x"
            f"{cpu_seconds[name]:>9.1f}{cpu_seconds[name] / cpu_seconds[reference]:>9.2f}x"
            f"   {difference:.2e} logits"
        )
    effect = values[reference]
    print(
        f"per-head metric ({reference}) ranges {float(effect.min()):+.3f} .. "
        f"{float(effect.max()):+.3f} logits"
    )
    if failed:
        print(
            f"FAILED: per-head metrics differ from {reference}'s by more than {TOLERANCE:g} "
            f"logits: {'; '.join(failed)}",
            file=sys.stderr,
        )
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
