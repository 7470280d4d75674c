"""The ``interv`` command line: the layer that composes the library for a terminal.

Subcommands stay thin: they parse arguments, call the public Python API and print
results with their units and scope. Heavy imports happen inside the handlers, so
``interv --help`` is instant. One module per group of commands:
:mod:`~interv.cli.report` (``demo``, ``report``), :mod:`~interv.cli.sweeps` (``sweep``,
``sweep-merge``), :mod:`~interv.cli.analysis` (``similarity``, ``entropy-change``,
``pruning``), :mod:`~interv.cli.paths` (``paths``, ``interactions``), :mod:`~interv.cli.zoo`
(``zoo``); ``metrics`` lives here.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from interv import __version__
from interv.cli.analysis import register as register_analysis
from interv.cli.paths import register as register_paths
from interv.cli.report import register as register_report
from interv.cli.sweeps import register as register_sweeps
from interv.cli.zoo import register as register_zoo
from interv.errors import IntervError

__all__ = ["build_parser", "main"]


def _add_metrics(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "metrics",
        help="concentration metrics of one attention row",
        description=(
            "Concentration metrics of one attention row (weights over keys, summing to 1). "
            "These describe how concentrated the weights are, not how much the head matters."
        ),
    )
    parser.add_argument("weights", nargs="+", type=float, help="attention weights a_1..a_n")
    parser.add_argument(
        "--sink",
        type=int,
        nargs="+",
        default=[0],
        help="key positions that form the sink (default: 0, the BOS token)",
    )
    parser.add_argument(
        "--unit", choices=("nats", "bits"), default="nats", help="entropy unit (default: nats)"
    )
    parser.set_defaults(handler=_run_metrics)


def _run_metrics(args: argparse.Namespace) -> int:
    from interv.report.row_summary import describe_row

    print(describe_row(args.weights, sink=args.sink, unit=args.unit))
    return 0


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of the ``interv`` command."""
    parser = argparse.ArgumentParser(
        prog="interv",
        description=(
            "Causal interpretability for transformers: attention-concentration metrics "
            "next to interventions that measure what heads actually do."
        ),
    )
    parser.add_argument("--version", action="version", version=f"interv {__version__}")
    subparsers = parser.add_subparsers(title="commands", metavar="COMMAND")
    _add_metrics(subparsers)
    register_zoo(subparsers)
    register_analysis(subparsers)
    register_paths(subparsers)
    register_sweeps(subparsers)
    register_report(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``interv`` console script; returns the exit status."""
    parser = build_parser()
    args = parser.parse_args(argv)
    handler = getattr(args, "handler", None)
    if handler is None:
        parser.print_help()
        return 0
    try:
        return handler(args)
    except IntervError as error:
        print(f"interv: error: {error}", file=sys.stderr)
        return 2


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
