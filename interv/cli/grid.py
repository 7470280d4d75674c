"""``interv grid``: the layer x position recovery grid of any task.

``interv grid MODEL [--task NAME | --pairs FILE.jsonl] [--component resid_pre|resid_post]
[--layers L ...] [--prompt I] [--out DIR]`` patches the clean run's residual stream at
every layer x position into the corrupted run (one exact intervention per cell,
:func:`interv.demo.recovery_grid`) and prints the grid of normalized recoveries with the
scope, the unit, the semantics sentence and the clean tokens of prompt ``I`` by position
(checked against the pairs before the model loads); ``--out DIR`` also writes the report
(its page draws the grid, ``recovery_by_layer_position.png`` beside it).
"""

from __future__ import annotations

import argparse
import contextlib
import math
from typing import TYPE_CHECKING

from interv._checks import as_positions, check_index
from interv._outputs import claim_dir
from interv.cli._vocabulary import METRICS, add_quiet
from interv.cli.tasks import add_task_options, command_pairs
from interv.errors import IntervError

if TYPE_CHECKING:
    from interv.report.report import Report

__all__ = ["grid_lines", "register"]

_COMPONENTS = ("resid_pre", "resid_post")


def grid_lines(report: Report) -> list[str]:
    """The grid as text: one line per layer, one column per position (recovery, 2 decimals;
    ``.`` where a cell is missing or undefined), then the cells of largest recovery."""
    cells = {}
    for row in report.rows:
        site = row.site
        if row.recovery is None or site is None or site.head is not None or not site.positions:
            continue
        cells[(site.layer, site.positions[0])] = row
    if not cells:
        return []
    layers = sorted({layer for layer, _ in cells})
    n_positions = max(position for _, position in cells) + 1
    width = 6
    lines = ["layer " + "".join(f"{p:>{width}}" for p in range(n_positions))]
    for layer in layers:
        values = []
        for position in range(n_positions):
            row = cells.get((layer, position))
            value = None if row is None else row.recovery
            text = "." if value is None or not math.isfinite(value) else f"{value:.2f}"
            values.append(f"{text:>{width}}")
        lines.append(f"L{layer:<4} " + "".join(values))
    finite = [row for row in cells.values() if math.isfinite(row.recovery)]
    best = sorted(finite, key=lambda r: -r.recovery)[:5]
    unit = report.header.metric_unit
    lines.append("largest recovery:")
    lines += [
        f"  {row.label}: recovery {row.recovery:.3f}, effect {row.effect_mean:+.4g} {unit} "
        f"[{row.effect_ci_low:.4g}, {row.effect_ci_high:.4g}]"
        for row in best
    ]
    return lines


def _run_grid(args: argparse.Namespace) -> int:
    from interv.engine.targets import METRICS  # torch: on use (CLI start-up)
    from interv.models.loading import check_model_spec  # torch: on use (CLI start-up)

    # every option, the pairs and the output directory are checked before the model loads
    check_model_spec(args.model)
    if args.metric not in METRICS:
        raise IntervError(f"unknown --metric {args.metric!r}; choose one of {tuple(METRICS)}")
    if args.quiet and args.out is None:
        raise IntervError(
            "--quiet without --out would print nothing and write nothing; add --out DIR"
        )
    layers = as_positions(args.layers, "--layers", allow_empty=False)
    pairs = command_pairs(args, metric=args.metric)
    prompt = check_index(
        args.prompt, pairs.n_pairs, "prompt", f"the task has {pairs.n_pairs} prompt pairs"
    )
    output = None
    if args.out is not None:
        output = claim_dir(args.out, what="output directory", by="interv grid")

    from interv._progress import stages  # torch: on use (CLI start-up)
    from interv.demo import recovery_grid  # torch: on use (CLI start-up)
    from interv.models import load_model  # torch: on use (CLI start-up)
    from interv.report.render import write_report  # torch: on use (CLI start-up)

    names = ("loading the model", "patching every layer x position")
    with contextlib.ExitStack() as claimed:
        if output is not None:
            claimed.enter_context(output)  # removed again if the run fails
        with stages(names) as bar:
            bar.start("loading the model")
            model = load_model(args.model)
            bar.start("patching every layer x position")
            task = pairs.tokenize(model)
            report = recovery_grid(
                model, task, component=args.component, layers=layers, metric=args.metric
            )
        h = report.header
        print(
            f"scope: {h.model} on {h.n_prompts} prompts of {h.task!r}, padded to "
            f"{h.n_positions} tokens; metric {h.metric_name} in {h.metric_unit}; clean mean "
            f"{h.clean_mean:.4g}, corrupted mean {h.corrupted_mean:.4g}"
        )
        print(f"each cell, e.g. the first: {report.rows[0].semantics}")
        print(f"number: {h.recovery_definition}; positions are absolute token indices")
        real = task.attention_mask[prompt]
        tokens = model.to_str_tokens(task.clean_tokens[prompt][real])
        first = int(real.nonzero()[0])  # left padding shifts the real tokens
        listed = " ".join(f"{first + p}:{token!r}" for p, token in enumerate(tokens))
        print(f"prompt {prompt}'s clean tokens by position: {listed}")
        for line in grid_lines(report):
            print(line)
        if output is not None:
            written = write_report(report, output)
            print(f"report written to {written['html'].parent}/")
    return 0


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add the ``grid`` command to the ``interv`` parser."""
    grid = subparsers.add_parser(
        "grid",
        help="layer x position recovery grid: patch the residual stream at every cell",
        description=(
            "Patch the clean run's residual stream at one layer and one position into the "
            "corrupted run, for every layer x position (one exact intervention per cell), "
            "and print the normalized recovery of each (1 = clean behaviour, 0 = corrupted)."
        ),
    )
    grid.add_argument("model", help="model spec for interv.load_model, e.g. induction-2l")
    add_task_options(grid)
    grid.add_argument("--seed", type=int, default=0, help="seed of the prompts (default: 0)")
    grid.add_argument(
        "--metric",
        default="logit_diff",
        choices=METRICS,
        help="target metric (default: logit_diff)",
    )
    grid.add_argument(
        "--component",
        choices=_COMPONENTS,
        default="resid_pre",
        help="residual stream before (resid_pre, default) or after (resid_post) each block",
    )
    grid.add_argument(
        "--layers", type=int, nargs="+", default=None, help="layers patched (default: all)"
    )
    grid.add_argument(
        "--prompt",
        type=int,
        default=0,
        help="the prompt pair whose tokens are printed above the grid (default: 0)",
    )
    grid.add_argument(
        "--out",
        default=None,
        metavar="DIR",
        help="also write the report into this directory (new, empty, or written by interv "
        "before; never over other files)",
    )
    add_quiet(grid)
    grid.set_defaults(handler=_run_grid)
