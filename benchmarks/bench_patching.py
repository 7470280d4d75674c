"""Exact patching sweeps: interv's runner against transformer-lens's patching helpers.

Benchmarks (each prints the incumbent's wall time, interv's, their ratio and the max
abs difference of the per-cell metric):

- ``A``: all-position head-output denoising over every head of SmolLM2-135M
  (30 layers x 9 heads = 270 cells) on 8 indirect-object pairs of 15 tokens (BOS
  first), metric: prompt-mean logit difference. Incumbent:
  ``transformer_lens.patching.get_act_patch_attn_head_out_all_pos``. Also: interv's
  effective GFLOP/s next to a plain ``torch.matmul`` GFLOP/s measured in the same run,
  the levers side by side (stacking only; stacking + prefix reuse + answer-only
  logits), and attribution patching (approximate) against the exact sweep.
- ``B``: per-position head-output denoising, every (layer, position, head) cell of a
  randomly initialised GPT-2-small-shaped model (12 layers, 12 heads, d_model 768,
  d_vocab 50257) on ``B_PROMPTS`` (1) random prompt pair of 15 tokens: 2160 cells, one
  full forward each for the incumbent (sized for about two minutes on 2 idle cores).
  Incumbent: ``get_act_patch_attn_head_out_by_pos``.
- ``C``: zero ablation of every head, one at a time, on the zoo induction model and
  the GPT-2-small-shaped model. Incumbent: one ``run_with_hooks`` forward per head
  (the transformer-lens idiom). On the zoo model (see :func:`zoo_zero_ablation`): a
  table of a fresh ``interv.run`` call, repeated calls sharing their base runs, and a
  sweep from its config, against the loop alone, the loop with the two baseline forwards
  interv also returns, and the whole job from the prompts; each line is the best of
  ``ZOO_REPEATS`` calls (the jobs take a fraction of a second). On the GPT-2-small-shaped
  model: heads x prompts per second for one ``interv.run`` call.

FLOPs (A) count the forwards interv actually ran: per block and token
``2 * (matmul parameters of the block) + 4 * n_heads * d_head * pos`` (QK and AV over the
full ``pos x pos`` score matrix, as computed), plus ``2 * d_model * d_vocab`` per
unembedded position.

Run: ``python benchmarks/bench_patching.py [A|B|C|all] [--layers 0,5,10] [--threads 1]``.
``--layers`` restricts A and B to some layers of their model (for a shorter run on a busy
machine; the prefix-reuse saving depends on which layers are swept, so spread them
evenly). Times are wall-clock seconds on this machine, with whatever else runs on it:
the 1-minute load average is printed next to each benchmark.
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import time
from collections.abc import Callable
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import torch
from transformer_lens import patching

from interv.engine.attribution_patching import approximate_head_patching_scores
from interv.engine.interventions import ActivationPatch, ZeroAblation
from interv.engine.results import InterventionResult
from interv.engine.runner import run
from interv.engine.sites import hook_name
from interv.tasks.tokenized import TokenizedPairs

A_PROMPTS = 8
A_BATCH_ROWS = 72  # 9 heads x 8 prompts: one layer's cells per forward
B_PROMPTS = 1
B_POSITIONS = 15
B_BATCH_ROWS = 60
C_PROMPTS = 4  # GPT-2-small-shaped model; the zoo model gets 256
TOP_K = 10
NAMES = ("Mary", "John", "Tom", "Anna", "James", "Sarah", "David", "Emma", "Paul", "Lisa")
TEMPLATE = "When {a} and {b} went to the store, {s} gave a drink to"


def load_average() -> str:
    return f"load average (1 min) {os.getloadavg()[0]:.2f} on {os.cpu_count()} CPUs"


def timed(fn: Callable[[], Any], repeats: int = 1) -> tuple[Any, float]:
    """``fn()``'s value and its wall time in seconds: the best of ``repeats`` calls (for
    sub-second jobs, where one call measures the machine's noise more than the job)."""
    best = math.inf
    for _ in range(repeats):
        start = time.perf_counter()
        value = fn()
        best = min(best, time.perf_counter() - start)
    return value, best


def interleaved_best(
    jobs: dict[str, Callable[[], Any]], repeats: int
) -> tuple[dict[str, Any], dict[str, float]]:
    """Each job's last value and best wall time over ``repeats`` rounds, the jobs called in
    turns within a round, so that a slow spell of the machine hits every job alike."""
    values: dict[str, Any] = {}
    best = dict.fromkeys(jobs, math.inf)
    for _ in range(repeats):
        for name, job in jobs.items():
            values[name], seconds = timed(job)
            best[name] = min(best[name], seconds)
    return values, best


def matmul_gflops(size: int = 1024, repeats: int = 40) -> float:
    """Plain ``torch.matmul`` throughput of float32 ``size x size`` matrices, GFLOP/s."""
    a, b = torch.randn(size, size), torch.randn(size, size)
    torch.matmul(a, b)
    _, seconds = timed(lambda: [torch.matmul(a, b) for _ in range(repeats)])
    return 2 * size**3 * repeats / seconds / 1e9


def mean_logit_diff_fn(task: TokenizedPairs) -> Callable[[torch.Tensor], torch.Tensor]:
    """The incumbent's metric: prompt-mean logit difference at the answer positions."""
    rows = torch.arange(task.n_pairs)

    def metric(logits: torch.Tensor) -> torch.Tensor:
        at_answer = logits[rows, task.answer_positions]
        return (at_answer[rows, task.target_ids] - at_answer[rows, task.foil_ids]).mean()

    return metric


def unpadded_task(clean, corrupted, target, foil, name: str) -> TokenizedPairs:
    batch, pos = clean.shape
    return TokenizedPairs(
        clean_tokens=clean,
        corrupted_tokens=corrupted,
        attention_mask=torch.ones(batch, pos, dtype=torch.bool),
        answer_positions=torch.full((batch,), pos - 1),
        target_ids=torch.as_tensor(target),
        foil_ids=torch.as_tensor(foil),
        name=name,
    )


def ioi_task(model) -> TokenizedPairs:
    """8 IOI pairs: clean repeats subject B (answer A); corrupted repeats a third name."""
    clean, corrupted, target, foil = [], [], [], []
    for i in range(A_PROMPTS):
        a, b, c = NAMES[i % 10], NAMES[(i + 1) % 10], NAMES[(i + 2) % 10]
        clean.append(TEMPLATE.format(a=a, b=b, s=b))
        corrupted.append(TEMPLATE.format(a=a, b=b, s=c))
        target.append(model.to_single_token(" " + a))
        foil.append(model.to_single_token(" " + b))
    task = unpadded_task(
        model.to_tokens(clean), model.to_tokens(corrupted), target, foil, "ioi (8 pairs)"
    )
    if task.clean_tokens.shape != (A_PROMPTS, 15) or task.corrupted_tokens.shape != (
        A_PROMPTS,
        15,
    ):
        raise RuntimeError(f"IOI prompts are not 15 tokens: {tuple(task.clean_tokens.shape)}")
    return task


def random_task(model, n_prompts: int, n_positions: int, seed: int = 0) -> TokenizedPairs:
    generator = torch.Generator().manual_seed(seed)
    d_vocab = model.cfg.d_vocab

    def draw(*shape):
        return torch.randint(1, d_vocab, shape, generator=generator)

    return unpadded_task(
        draw(n_prompts, n_positions),
        draw(n_prompts, n_positions),
        draw(n_prompts),
        draw(n_prompts),
        f"random tokens ({n_prompts} x {n_positions})",
    )


def gpt2_small_shaped():
    from transformer_lens.config import TransformerBridgeConfig
    from transformer_lens.model_bridge import TransformerBridge

    config = TransformerBridgeConfig(
        d_model=768,
        d_head=64,
        n_layers=12,
        n_ctx=1024,
        n_heads=12,
        d_vocab=50257,
        attn_only=False,
        act_fn="gelu",
        d_mlp=3072,
        normalization_type="LN",
        seed=0,
        model_name="gpt2-small-shaped (random)",
    )
    return TransformerBridge.boot_native(config).eval()


def block_flops_per_token(model, n_positions: int) -> float:
    """``2 * matmul parameters + 4 * n_heads * d_head * pos`` of one block, per token."""
    block = model.blocks[0]
    params = sum(p.numel() for p in block.parameters() if p.ndim == 2)
    return 2 * params + 4 * model.cfg.n_heads * model.cfg.d_head * n_positions


def interv_sweep_flops(model, task: TokenizedPairs, start_layers: list[int]) -> float:
    """FLOPs of the forwards a prefix-reusing sweep runs (base runs + suffixes)."""
    n, pos = task.n_pairs, task.n_positions
    n_layers, unembed = model.cfg.n_layers, 2 * model.cfg.d_model * model.cfg.d_vocab
    per_block = block_flops_per_token(model, pos) * n * pos
    base = 2 * (n_layers * per_block + unembed * n * pos)
    return base + sum((n_layers - layer) * per_block + unembed * n for layer in start_layers)


def full_forward_flops(model, task: TokenizedPairs) -> float:
    n, pos = task.n_pairs, task.n_positions
    per_block = block_flops_per_token(model, pos) * n * pos
    return model.cfg.n_layers * per_block + 2 * model.cfg.d_model * model.cfg.d_vocab * n * pos


def spearman(x: torch.Tensor, y: torch.Tensor) -> float:
    """Spearman rank correlation of two flat tensors (no ties expected: continuous values)."""

    def ranks(values: torch.Tensor) -> torch.Tensor:
        return values.flatten().argsort().argsort().double()

    return float(torch.corrcoef(torch.stack([ranks(x), ranks(y)]))[0, 1])


def bench_a(layers: list[int] | None) -> None:
    import pandas as pd  # a dependency of transformer-lens

    from interv.models import load_model

    print("== A: all-position head denoising, SmolLM2-135M ==")
    model = load_model("smollm2-135m", device="cpu", dtype=torch.float32).eval()
    task = ioi_task(model)
    n_heads = model.cfg.n_heads
    layers = list(range(model.cfg.n_layers)) if layers is None else sorted(set(layers))
    n_layers = len(layers)
    print(
        f"scope: {n_layers} of {model.cfg.n_layers} layers ({layers}) x {n_heads} heads = "
        f"{n_layers * n_heads} cells, "
        f"{task.n_pairs} IOI pairs x {task.n_positions} tokens (BOS first), metric: "
        f"prompt-mean logit difference target minus foil (logits); {load_average()}"
    )
    matmul = matmul_gflops()
    print(f"torch.matmul (1024 x 1024, float32) before the sweeps: {matmul:.1f} GFLOP/s")

    cells = pd.DataFrame(
        [(layer, head) for layer in layers for head in range(n_heads)], columns=["layer", "head"]
    )

    def incumbent() -> torch.Tensor:
        with torch.no_grad():
            _, clean_cache = model.run_with_cache(task.clean_tokens)
            flat = patching.get_act_patch_attn_head_out_all_pos(
                model,
                task.corrupted_tokens,
                clean_cache,
                mean_logit_diff_fn(task),
                index_axis_names=None,
                index_df=cells,
            )
        return flat.reshape(n_layers, n_heads)

    theirs, t_incumbent = timed(incumbent)
    grid = [ActivationPatch("z", layer, head) for layer in layers for head in range(n_heads)]
    incumbent_flops = (len(grid) + 1) * full_forward_flops(model, task)
    print(
        f"incumbent get_act_patch_attn_head_out_all_pos: {t_incumbent:.1f} s "
        f"({incumbent_flops / t_incumbent / 1e9:.1f} GFLOP/s effective)"
    )

    def interv_sweep(label: str, reuse_prefix: bool) -> InterventionResult:
        result, seconds = timed(
            lambda: run(
                model,
                task,
                grid,
                "logit_diff",
                max_batch_size=A_BATCH_ROWS,
                reuse_prefix=reuse_prefix,
            )
        )
        difference = float((result.mean().reshape(n_layers, n_heads) - theirs).abs().max())
        if reuse_prefix:
            flops = interv_sweep_flops(model, task, [iv.layer for iv in grid])
        else:
            flops = (len(grid) + 2) * full_forward_flops(model, task)
        matmul_now = matmul_gflops()
        best = max(matmul, matmul_now)
        gflops = flops / seconds / 1e9
        print(
            f"interv, {label}: {seconds:.1f} s, {t_incumbent / seconds:.2f}x faster; "
            f"max |difference| of the per-head mean logit diff {difference:.2e} logits; "
            f"{gflops:.1f} GFLOP/s effective = {100 * gflops / best:.0f}% of torch.matmul "
            f"(best of before the sweeps and right after this one: {best:.1f} GFLOP/s; "
            f"right after: {matmul_now:.1f})"
        )
        effect = result.effect.mean(-1)  # denoising: minus the corrupted run's
        print(
            f"  per-head denoising effects range {float(effect.min()):+.3f} .. "
            f"{float(effect.max()):+.3f} logits (change of the prompt-mean logit diff)"
        )
        return result

    exact = interv_sweep("stacking + prefix reuse + answer-only logits", reuse_prefix=True)
    attribution_check(model, task, grid, exact)
    interv_sweep("stacking only (reuse_prefix=False)", reuse_prefix=False)


def attribution_check(model, task, grid, exact: InterventionResult) -> None:
    """Attribution patching against the exact sweep; its top heads verified exactly."""
    scores, t_attr = timed(lambda: approximate_head_patching_scores(model, task, "logit_diff"))
    scores = scores[sorted({iv.layer for iv in grid})].flatten()  # swept layers, grid order
    effect = exact.effect.mean(-1)
    rho = spearman(scores, effect)
    top = scores.argsort(descending=True)[:TOP_K].tolist()
    exact_top = set(effect.argsort(descending=True)[:TOP_K].tolist())
    verify = run(model, task, [grid[i] for i in top], "logit_diff", max_batch_size=A_BATCH_ROWS)
    verified = verify.effect.mean(-1)
    print(
        f"attribution patching (approximate, 1 forward + 1 backward): {t_attr:.1f} s; "
        f"Spearman rank correlation with the exact sweep over {scores.numel()} heads: "
        f"{rho:.3f}; {len(exact_top & set(top))} of its top {TOP_K} heads are in the exact "
        f"top {TOP_K}"
    )
    for rank, (index, value) in enumerate(zip(top, verified.tolist(), strict=True)):
        layer, head = grid[index].layer, grid[index].head
        print(
            f"  attribution rank {rank + 1}: L{layer}H{head} estimate "
            f"{float(scores[index]):+.3f} logits, exact denoising effect "
            f"{value:+.3f} logits (change of the prompt-mean logit diff)"
        )


def bench_b(layers: list[int] | None) -> None:
    import pandas as pd  # a dependency of transformer-lens

    print("== B: per-position head denoising, GPT-2-small-shaped random model ==")
    model = gpt2_small_shaped()
    task = random_task(model, B_PROMPTS, B_POSITIONS)
    n_heads, pos = model.cfg.n_heads, task.n_positions
    layers = list(range(model.cfg.n_layers)) if layers is None else sorted(set(layers))
    n_layers = len(layers)
    print(
        f"scope: {n_layers} of {model.cfg.n_layers} layers ({layers}) x {pos} positions x "
        f"{n_heads} heads = {n_layers * pos * n_heads} cells, {task.n_pairs} random prompt "
        f"pair(s) x {pos} tokens, metric: prompt-mean logit difference (logits); "
        f"{load_average()}"
    )
    cells = [(layer, p, head) for layer in layers for p in range(pos) for head in range(n_heads)]

    def incumbent() -> torch.Tensor:
        with torch.no_grad():
            _, clean_cache = model.run_with_cache(task.clean_tokens)
            return patching.get_act_patch_attn_head_out_by_pos(
                model,
                task.corrupted_tokens,
                clean_cache,
                mean_logit_diff_fn(task),
                index_axis_names=None,
                index_df=pd.DataFrame(cells, columns=["layer", "pos", "head"]),
            )

    theirs, t_incumbent = timed(incumbent)
    grid = [ActivationPatch("z", layer, head, positions=(p,)) for layer, p, head in cells]
    result, seconds = timed(
        lambda: run(model, task, grid, "logit_diff", max_batch_size=B_BATCH_ROWS)
    )
    difference = float((result.mean() - theirs).abs().max())
    print(
        f"incumbent get_act_patch_attn_head_out_by_pos: {t_incumbent:.1f} s; interv: "
        f"{seconds:.1f} s; {t_incumbent / seconds:.2f}x faster; max |difference| of the "
        f"per-cell mean logit diff {difference:.2e} logits"
    )


def zero_ablation_loop(model, task: TokenizedPairs) -> torch.Tensor:
    """The incumbent idiom: one ``run_with_hooks`` forward per head, zeroing its ``z``.

    Returns ``[n_layers * n_heads]`` prompt-mean logit differences, layer-major.
    """
    metric = mean_logit_diff_fn(task)
    values = []
    with torch.no_grad():
        for layer in range(model.cfg.n_layers):
            for head in range(model.cfg.n_heads):

                def zero(z, hook, head=head):
                    z[:, :, head] = 0.0
                    return z

                padded = not bool(task.attention_mask.all())
                logits = model.run_with_hooks(
                    task.clean_tokens,
                    fwd_hooks=[(hook_name("z", layer), zero)],
                    **({"attention_mask": task.attention_mask} if padded else {}),
                )
                values.append(metric(logits))
    return torch.stack(values)


def zero_ablation_rates(model, label: str, n_prompts: int, max_batch_size: int) -> None:
    task = random_task(model, n_prompts, 15, seed=1)
    n_layers, n_heads = model.cfg.n_layers, model.cfg.n_heads
    theirs, t_incumbent = timed(lambda: zero_ablation_loop(model, task).reshape(n_layers, n_heads))
    grid = [ZeroAblation(layer, head) for layer in range(n_layers) for head in range(n_heads)]
    result, seconds = timed(
        lambda: run(model, task, grid, "logit_diff", max_batch_size=max_batch_size)
    )
    ours = result.mean().reshape(n_layers, n_heads)
    cells = n_layers * n_heads * task.n_pairs
    print(
        f"{label}: {n_layers * n_heads} heads x {task.n_pairs} prompts x {task.n_positions} "
        f"tokens; incumbent (one run_with_hooks per head): {t_incumbent:.2f} s = "
        f"{cells / t_incumbent:.0f} head x prompt/s; interv: {seconds:.2f} s = "
        f"{cells / seconds:.0f} head x prompt/s; {t_incumbent / seconds:.2f}x; max "
        f"|difference| {float((ours - theirs).abs().max()):.2e} logits"
    )


def baseline_forwards(model, task: TokenizedPairs) -> tuple[torch.Tensor, torch.Tensor]:
    """The clean and corrupted prompt-mean logit differences: the two forwards an ablation's
    effect (and its normalized recovery) is measured against."""
    metric = mean_logit_diff_fn(task)
    padded = not bool(task.attention_mask.all())
    mask = {"attention_mask": task.attention_mask} if padded else {}
    with torch.no_grad():
        return (
            metric(model(task.clean_tokens, **mask)),
            metric(model(task.corrupted_tokens, **mask)),
        )


ZOO_PROMPTS = 256
ZOO_BATCH_ROWS = 512  # fastest of 256..2048 rows on 2 cores: larger stacks outgrow the caches
ZOO_REPEATS = 7
"""Calls per line on the zoo model, whose jobs take a fraction of a second; the best counts."""


def zoo_zero_ablation(model) -> None:
    """Zero ablation of every zoo head on the induction task, as a table of ways to run it.

    Incumbents: the transformer-lens hook loop alone (the metric under each ablation) and
    with the two baseline forwards interv also returns; for the sweep, the whole job from
    the prompts (batched ``to_tokens``, baselines, loop). interv: ``run`` on a fresh call
    (pays its base runs), ``run`` repeated with a shared ``BaseRunCache`` (base runs
    reused across calls), and ``run_sweep`` from its config with the loaded model (builds
    and tokenizes the task, stores each unit of 2 heads as it is computed).
    """
    import tempfile

    from interv.engine.stacking import BaseRunCache
    from interv.sweeps import run_sweep
    from interv.tasks.builtin import load_task

    config = {
        "model": {"spec": "induction-2l"},
        "task": {"name": "induction", "n_pairs": ZOO_PROMPTS, "seed": 0},
        "sweep": {
            "batch_size": ZOO_BATCH_ROWS,
            "unit_size": 2,
            "interventions": [{"kind": "zero_ablation"}],
        },
    }
    pairs = load_task("induction", n_pairs=ZOO_PROMPTS, seed=0)
    task = pairs.tokenize(model)
    n_layers, n_heads = model.cfg.n_layers, model.cfg.n_heads
    grid = [ZeroAblation(layer, head) for layer in range(n_layers) for head in range(n_heads)]
    repeats = ZOO_REPEATS

    def tl_job():
        model.to_tokens(list(pairs.clean))
        model.to_tokens(list(pairs.corrupted))
        return baseline_forwards(model, task), zero_ablation_loop(model, task)

    cache = BaseRunCache()  # the first call fills it; every later call reuses it
    with tempfile.TemporaryDirectory() as directory:
        fresh = (f"{directory}/sweep-{i}" for i in range(repeats))
        jobs = {
            "loop": lambda: zero_ablation_loop(model, task),
            "loop_baselines": lambda: (
                baseline_forwards(model, task),
                zero_ablation_loop(model, task),
            ),
            "job": tl_job,
            "cold": lambda: run(model, task, grid, "logit_diff", max_batch_size=ZOO_BATCH_ROWS),
            "warm": lambda: run(
                model, task, grid, "logit_diff", max_batch_size=ZOO_BATCH_ROWS, cache=cache
            ),
            "sweep": lambda: run_sweep(config, next(fresh), progress=False, model=model),
        }
        values, best = interleaved_best(jobs, repeats)
    theirs = values["loop"]
    cold, warm, swept = values["cold"], values["warm"], values["sweep"]
    t_loop, t_loop_baselines, t_job = best["loop"], best["loop_baselines"], best["job"]
    t_cold, t_warm, t_sweep = best["cold"], best["warm"], best["sweep"]
    difference = max(float((result.mean() - theirs).abs().max()) for result in (cold, warm, swept))
    print(
        f"zoo induction-2l: zero ablation of {len(grid)} heads x {task.n_pairs} induction "
        f"prompts (up to {task.n_positions} tokens), metric: prompt-mean logit difference; "
        f"interv stacks up to {ZOO_BATCH_ROWS} rows; best of {repeats} calls per line, the "
        "lines' calls taken in turns"
    )
    rows = [
        ("transformer-lens: one run_with_hooks per head (ablated metric only)", t_loop, ""),
        (
            "transformer-lens: the same + clean and corrupted forwards (interv's outputs)",
            t_loop_baselines,
            "",
        ),
        (
            "interv.run, a fresh call (pays its clean and corrupted base runs)",
            t_cold,
            f"{t_loop / t_cold:.2f}x the loop, {t_loop_baselines / t_cold:.2f}x with baselines",
        ),
        (
            "interv.run, repeated calls sharing a BaseRunCache (base runs reused)",
            t_warm,
            f"{t_loop / t_warm:.2f}x the loop, {t_loop_baselines / t_warm:.2f}x with baselines",
        ),
        ("transformer-lens job from the prompts: to_tokens, baselines, loop", t_job, ""),
        (
            "interv.run_sweep from its config (tokenizes, stores 4 units of 2 heads)",
            t_sweep,
            f"{t_loop / t_sweep:.2f}x the loop, {t_job / t_sweep:.2f}x the job",
        ),
    ]
    for label, seconds, ratio in rows:
        print(f"  {label:<80} {seconds * 1000:7.1f} ms  {ratio}")
    print(
        f"  max |difference| of the per-head mean logit diff vs the loop: {difference:.2e} logits"
    )


def bench_c() -> None:
    from interv import zoo

    print(f"== C: zero-ablation sweep over every head; {load_average()} ==")
    zoo_zero_ablation(zoo.load("induction-2l").eval())
    zero_ablation_rates(gpt2_small_shaped(), "GPT-2-small-shaped random model", C_PROMPTS, 96)


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("which", nargs="?", default="all", choices=["A", "B", "C", "all"])
    parser.add_argument(
        "--layers",
        default=None,
        help="A and B: comma-separated layers of the swept model (default: all), for a "
        "shorter run on a busy machine",
    )
    parser.add_argument("--threads", type=int, default=None, help="torch threads")
    args = parser.parse_args(argv[1:])
    if args.threads is not None:
        torch.set_num_threads(args.threads)
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads")
    layers = None if args.layers is None else [int(x) for x in args.layers.split(",")]
    if args.which in ("A", "all"):
        bench_a(layers)
    if args.which in ("B", "all"):
        bench_b(layers)
    if args.which in ("C", "all"):
        bench_c()


if __name__ == "__main__":
    main(sys.argv)
