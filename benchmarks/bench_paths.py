"""Path patching: one sender against every later head, interv against plain hooks.

SmolLM2-135M, 8 IOI pairs of 15 tokens (BOS first), sender ``--sender`` (default L17H4),
receivers every head of the later layers, receiver input ``--input`` (default the key
input: under grouped-query attention the receiver's key/value group is patched and its
other query heads are held at the clean run). Metric: prompt-mean logit difference.

The straightforward implementation, in the same run: transformer-lens hooks
(``run_with_hooks``), one frozen forward per receiver layer (the sender patched from the
corrupted run, every later head output and every MLP output from the sender's layer on
held at the clean run, the receivers' inputs captured), then **one full forward per
cell** with the receiver's input patched. interv: ``interv.run`` on the same cells (the
frozen inputs come from an edited run that starts at the receiver's layer; the cells are
stacked along the batch and start at their receiver's layer, with logits at the answer
position only).

Prints both wall times, their ratio, the max |difference| of the per-cell metric and the
machine's matmul GFLOP/s. Run: ``python benchmarks/bench_paths.py [--sender 17 4]
[--input k] [--threads 2]``.
"""

from __future__ import annotations

import argparse
import os
import sys

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch
from bench_patching import ioi_task, load_average, matmul_gflops, mean_logit_diff_fn, timed

from interv.engine.paths import PathPatch
from interv.engine.runner import run
from interv.engine.sites import hook_name, kv_head_of


def plain_hook_grid(model, task, sender: tuple[int, int], component: str) -> torch.Tensor:
    """``[later layers, heads]`` mean logit difference, one forward per cell."""
    cfg = model.cfg
    layer_s, head_s = sender
    metric = mean_logit_diff_fn(task)
    z_names = [hook_name("z", layer) for layer in range(cfg.n_layers)]
    mlp_names = [hook_name("mlp_out", layer) for layer in range(cfg.n_layers)]
    with torch.no_grad():
        _, clean = model.run_with_cache(task.clean_tokens, names_filter=z_names + mlp_names)
        _, corrupted = model.run_with_cache(task.corrupted_tokens, names_filter=z_names)

    def patch_sender(z, hook):
        z[:, :, head_s] = corrupted[hook.name][:, :, head_s]
        return z

    def frozen(activation, hook):
        return clean[hook.name]

    values = []
    seen: dict[str, torch.Tensor] = {}  # the receiver layer's input in the frozen forward

    def keep(activation, hook):
        seen["input"] = activation.clone()

    for receiver_layer in range(layer_s + 1, cfg.n_layers):
        input_name = hook_name(component, receiver_layer)

        hooks = [(z_names[layer_s], patch_sender)]
        hooks += [(z_names[layer], frozen) for layer in range(layer_s + 1, receiver_layer)]
        hooks += [(mlp_names[layer], frozen) for layer in range(layer_s, receiver_layer)]
        with torch.no_grad():
            model.run_with_hooks(task.clean_tokens, fwd_hooks=[*hooks, (input_name, keep)])
        for receiver in range(cfg.n_heads):
            group = kv_head_of(cfg, receiver)
            held = [h for h in range(cfg.n_heads) if kv_head_of(cfg, h) == group and h != receiver]

            def patch_input(activation, hook, index=group if component != "q" else receiver):
                activation[:, :, index] = seen["input"][:, :, index]
                return activation

            def hold(z, hook, held=held):
                z[:, :, held] = clean[hook.name][:, :, held]
                return z

            cell_hooks = [(input_name, patch_input)]
            if component == "k" and held:
                cell_hooks.append((z_names[receiver_layer], hold))
            with torch.no_grad():
                logits = model.run_with_hooks(task.clean_tokens, fwd_hooks=cell_hooks)
            values.append(metric(logits))
    return torch.stack(values).reshape(cfg.n_layers - layer_s - 1, cfg.n_heads)


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sender", type=int, nargs=2, default=(17, 4), metavar=("LAYER", "HEAD"))
    parser.add_argument("--input", choices=("q", "k"), default="k", help="receiver input")
    parser.add_argument("--threads", type=int, default=None, help="torch threads")
    args = parser.parse_args(argv[1:])
    if args.threads is not None:
        torch.set_num_threads(args.threads)
    from interv.models import load_model

    model = load_model("smollm2-135m", device="cpu", dtype=torch.float32).eval()
    task = ioi_task(model)
    layer_s, head_s = args.sender
    cells = [
        PathPatch(layer_s, head_s, ((layer, head),), args.input)
        for layer in range(layer_s + 1, model.cfg.n_layers)
        for head in range(model.cfg.n_heads)
    ]
    print(
        f"torch {torch.__version__}, {torch.get_num_threads()} threads; {load_average()}; "
        f"torch.matmul {matmul_gflops():.1f} GFLOP/s"
    )
    print(
        f"scope: SmolLM2-135M, sender L{layer_s}H{head_s} against every head of layers "
        f"{layer_s + 1}..{model.cfg.n_layers - 1} = {len(cells)} cells, receiver input "
        f"{args.input!r}, {task.n_pairs} IOI pairs x {task.n_positions} tokens, metric: "
        "prompt-mean logit difference (logits)"
    )
    theirs, t_plain = timed(lambda: plain_hook_grid(model, task, args.sender, args.input))
    result, t_interv = timed(lambda: run(model, task, cells, "logit_diff", max_batch_size=72))
    ours = result.mean().reshape(theirs.shape)
    print(
        f"plain hooks (one frozen forward per receiver layer + one forward per cell): "
        f"{t_plain:.1f} s; interv.run: {t_interv:.1f} s; {t_plain / t_interv:.2f}x faster; "
        f"max |difference| of the per-cell metric {float((ours - theirs).abs().max()):.2e} "
        "logits"
    )
    effect = result.effect.mean(-1).reshape(theirs.shape)  # noising: minus the clean run's
    top = effect.abs().flatten().argsort(descending=True)[:5].tolist()
    for index in top:
        layer, head = divmod(index, model.cfg.n_heads)
        print(
            f"  L{layer_s}H{head_s} -> L{layer_s + 1 + layer}H{head} ({args.input}): "
            f"{float(effect.flatten()[index]):+.4f} logits"
        )


if __name__ == "__main__":
    main(sys.argv)
