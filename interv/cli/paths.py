"""``interv paths`` and ``interv interactions``: how a head acts, and which heads act together.

- ``interv paths MODEL --sender L0H2`` patches the sender's output from the corrupted run
  along its path into each later head's query, key or value input (one cell per receiver)
  and prints the cells with the largest effect, next to the sender's total effect (the
  activation patch on every path) and its direct effect into the logits.
- ``interv interactions MODEL --heads L1H0 L1H2 ...`` ablates each head alone and every pair
  together and prints the interaction terms with their intervals and compensation flags,
  largest |interaction| first.

Both take a built-in ``--task`` or the user's own ``--pairs FILE.jsonl``
(:mod:`interv.cli.tasks`). Every number is printed with its unit and every design with
its semantics sentence.
"""

from __future__ import annotations

import argparse
import math

from interv._checks import as_int
from interv.cli._vocabulary import METRICS, deprecation, parse_head
from interv.cli.tasks import add_task_options, command_pairs
from interv.errors import IntervError

__all__ = ["parse_head", "register"]


def _sender(words: list[str]) -> tuple[int, int]:
    """``--sender L0H2``; the old ``--sender 0 2`` (layer, head) with a deprecation."""
    if len(words) == 2 and all(word.isdigit() for word in words):
        deprecation(f"--sender {words[0]} {words[1]}", f"--sender L{words[0]}H{words[1]}")
        return int(words[0]), int(words[1])
    if len(words) != 1:
        raise IntervError(f"--sender takes one head, written L0H2; got {' '.join(words)!r}")
    return parse_head(words[0], "--sender")


def _load(args: argparse.Namespace):
    """The model and the tokenized task; every option is checked before the model loads."""
    from interv.engine.targets import METRICS  # torch: on use (CLI start-up)
    from interv.models.loading import check_model_spec, load_model  # torch: on use (CLI start-up)

    check_model_spec(args.model)
    if args.metric not in METRICS:
        raise IntervError(f"unknown --metric {args.metric!r}; choose one of {tuple(METRICS)}")
    for name in ("n_pairs", "top"):
        if getattr(args, name, None) is not None:
            as_int(getattr(args, name), f"--{name.replace('_', '-')}", minimum=1)
    pairs = command_pairs(args, metric=args.metric)
    model = load_model(args.model)
    return model, pairs.tokenize(model)


def _run_paths(args: argparse.Namespace) -> int:
    from interv.engine.interventions import ActivationPatch  # torch: on use (CLI start-up)
    from interv.engine.paths import DirectEffect, PathPatch  # torch: on use (CLI start-up)
    from interv.engine.runner import run  # torch: on use (CLI start-up)

    layer, head = _sender(args.sender)
    receivers = [parse_head(t, "--receivers") for t in args.receivers] if args.receivers else None
    model, task = _load(args)
    cfg = model.cfg
    if receivers is None:
        receivers = [(r, h) for r in range(layer + 1, cfg.n_layers) for h in range(cfg.n_heads)]
    cells = [PathPatch(layer, head, (receiver,), args.input) for receiver in receivers]
    references = [
        ActivationPatch("z", layer, head, direction="noise"),
        PathPatch(layer, head, (), "logits"),
        DirectEffect(layer, head),
    ]
    result = run(model, task, [*references, *cells], args.metric, max_batch_size=256)
    effects = result.effect.mean(-1)
    unit = result.metric.unit
    print(
        f"scope: {result.scope.model_name} on {result.scope.n_prompts} prompts of "
        f"{result.scope.task_name!r}; effects = mean {result.metric.name} minus the clean run's, "
        f"in {unit}"
    )
    for index in range(3):
        print(f"{float(effects[index]):+.4f} {unit}  {result.descriptions[index]}")
    order = sorted(range(3, len(effects)), key=lambda i: -abs(float(effects[i])))
    print(f"paths into the {args.input} input of each receiver, by |effect| (top {args.top}):")
    for index in order[: args.top]:
        print(f"  {float(effects[index]):+.4f} {unit}  {result.descriptions[index]}")
    return 0


def _run_interactions(args: argparse.Namespace) -> int:
    from interv.analysis.pairwise import interactions  # torch: on use (CLI start-up)

    heads = [parse_head(text, "--heads") for text in args.heads]
    model, task = _load(args)
    found = interactions(
        model, task, heads, baseline=args.baseline, metric=args.metric, seed=args.seed
    )
    print(f"design: {found.semantics}")
    print(f"rule: {found.rule}")
    pairs = [(i, j) for i in range(len(found.heads)) for j in range(i + 1, len(found.heads))]
    # largest |interaction| first, NaN last
    pairs.sort(key=lambda ij: (math.isnan(float(found.mean[ij])), -abs(float(found.mean[ij]))))
    print("pairs by |interaction|, largest first:")
    for i, j in pairs:
        print(f"  {found.describe_pair(found.heads[i], found.heads[j])}")
    return 0


def _common(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("model", help="model spec for interv.load_model, e.g. induction-2l")
    add_task_options(parser)
    parser.add_argument("--seed", type=int, default=0, help="seed of the prompts (default: 0)")
    parser.add_argument(
        "--metric",
        default="logit_diff",
        choices=METRICS,
        help="target metric (default: logit_diff)",
    )


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add the ``paths`` and ``interactions`` commands to the ``interv`` parser."""
    paths = subparsers.add_parser(
        "paths",
        help="path patching from a sender head into each later head, with its direct effect",
        description=(
            "Patch a sender head's output from the corrupted run only along its path into "
            "each later head's query, key or value input (everything else frozen at the clean "
            "run), and print the strongest paths next to the sender's total and direct effect."
        ),
    )
    _common(paths)
    paths.add_argument(
        "--sender", nargs="+", required=True, metavar="HEAD", help="the sender head, e.g. L0H2"
    )
    paths.add_argument(
        "--input", choices=("q", "k", "v"), default="k", help="receiver input (default: k)"
    )
    paths.add_argument(
        "--receivers",
        nargs="+",
        default=None,
        metavar="HEAD",
        help="receiver heads, e.g. L1H0 L1H2 (default: every head of the later layers)",
    )
    paths.add_argument("--top", type=int, default=10, help="cells printed (default: 10)")
    paths.set_defaults(handler=_run_paths)

    pairs = subparsers.add_parser(
        "interactions",
        help="pairwise ablations of heads and their interaction terms",
        description=(
            "Ablate each head alone and every pair together; print f(AB) - f(A) - f(B) + "
            "f(none) with a bootstrap interval over prompts, and flag compensation."
        ),
    )
    _common(pairs)
    pairs.add_argument(
        "--heads", nargs="+", required=True, metavar="HEAD", help="heads, e.g. L1H0 L1H2 L0H2"
    )
    pairs.add_argument(
        "--baseline", choices=("zero", "mean", "resample"), default="mean", help="ablation"
    )
    pairs.set_defaults(handler=_run_interactions)
