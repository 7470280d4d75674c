"""A researcher's own investigation, start to finish: subject-verb agreement on SmolLM2-135M.

16 prompt pairs of one's own (``examples/agreement_pairs.jsonl``, the JSONL format that
:meth:`interv.PromptPairs.from_jsonl` reads): the clean prompt has a singular subject
("The key to the cabinets"), the corrupted one the same words with a plural subject
("The keys to the cabinets"); target " is", foil " are"; metric: the logit difference
(target minus foil) at the last token, in logits. Then, with progress bars on a terminal
or in a notebook:

1. concentration of every head at the answer position;
2. zero ablation and mean ablation of all 270 heads (the effect of each on the clean run);
3. denoising of all 270 heads (the clean head output into the corrupted run);
4. the head with the largest |mean-ablation effect|: its direct effect (mean ablation
   only on its path into the logits) and its paths into every later head's value input;
5. the report (``report.html`` and friends) in ``--out``.

Everything uses interv's defaults: OpenMP threads wait passively (``interv.set_threads()``
first, before torch loads) and each run picks its batch size from the model and memory.
``--threads`` and ``--batch-size`` override them, for comparison (docs/performance.md has
both timings). ``--smoke`` runs the same steps on the zoo's 2-layer
model and its induction task, in seconds (the tests run that).

Run: ``python examples/investigation.py [--out DIR] [--threads N] [--batch-size ROWS]
[--smoke]``.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import interv

PAIRS = Path(__file__).resolve().parent / "agreement_pairs.jsonl"


def main(argv: list[str] | None = None) -> dict[str, float]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="agreement-report", help="new or interv's own directory")
    parser.add_argument(
        "--threads", type=int, default=None, help="torch threads (default: torch's)"
    )
    parser.add_argument(
        "--batch-size", type=int, default=None, help="rows per forward (default: auto)"
    )
    parser.add_argument("--smoke", action="store_true", help="the zoo model and task, in seconds")
    parser.add_argument("--n-bootstrap", type=int, default=1000)
    args = parser.parse_args(argv)
    start = time.perf_counter()
    # passive OpenMP waiting, before anything loads torch (OpenMP reads it once, then)
    interv.set_threads(args.threads)

    if args.smoke:
        model = interv.load_model("induction-2l")
        pairs = interv.load_task("induction", n_pairs=16, seed=0)
    else:
        model = interv.load_model("smollm2-135m")
        pairs = interv.PromptPairs.from_jsonl(PAIRS, name="agreement")
    task = pairs.tokenize(model)
    n_layers, n_heads = model.cfg.n_layers, model.cfg.n_heads
    every_head = [(layer, head) for layer in range(n_layers) for head in range(n_heads)]
    options = {"max_batch_size": args.batch_size}

    concentration = interv.concentration(model, task, query_positions=task.answer_query_positions())
    zero = interv.run(model, task, [interv.ZeroAblation(*h) for h in every_head], **options)
    mean = interv.run(
        model, task, [interv.MeanAblation(*h, reference="clean") for h in every_head], **options
    )
    denoise = interv.run(
        model,
        task,
        [interv.ActivationPatch("z", *h, direction="denoise") for h in every_head],
        **options,
    )
    print(mean)  # the largest mean-ablation effects, with units and sentences

    top = int(mean.effect.mean(-1).abs().argmax())
    layer, head = every_head[top]
    later = [(lr, hr) for lr, hr in every_head if lr > layer]
    paths = interv.run(
        model,
        task,
        [
            interv.DirectEffect(layer, head, baseline="mean"),
            *(interv.PathPatch(layer, head, receivers=(r,), receiver_input="v") for r in later),
        ],
        **options,
    )
    print(f"\nL{layer}H{head}: direct effect and paths into the value inputs of later heads")
    print(paths.display(max_rows=6).text())

    report = interv.build_report([zero, mean, denoise], concentration, n_bootstrap=args.n_bootstrap)
    written = interv.save_report(report, args.out)
    wall = time.perf_counter() - start
    print(f"\nreport written to {Path(args.out)}/ ({len(written)} files); {wall:.1f} s wall")
    return {"wall_s": wall, "top_layer": layer, "top_head": head}


if __name__ == "__main__":
    main()
