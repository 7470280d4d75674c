"""The ``interv`` command line: the layer that composes the library for a terminal.

Subcommands stay thin: they parse arguments, call the public Python API and print
results with their units and scope. Heavy imports happen inside the handlers, so
``interv --help`` is instant. One module per group of commands:
:mod:`~interv.cli.report` (``demo``, ``report``), :mod:`~interv.cli.sweeps` (``sweep``,
``sweep-merge``), :mod:`~interv.cli.analysis` (``similarity``, ``entropy-change``,
``pruning``), :mod:`~interv.cli.paths` (``paths``, ``interactions``),
:mod:`~interv.cli.grid` (``grid``), :mod:`~interv.cli.circuit` (``circuit``),
:mod:`~interv.cli.zoo` (``zoo``); ``metrics`` lives here. :mod:`~interv.cli.tasks` gives
every command that runs a task ``--task`` or ``--pairs FILE.jsonl``.
"""

from __future__ import annotations

import argparse
import math
import os
import sys
from collections.abc import Sequence
from decimal import Decimal, InvalidOperation

from interv import __version__
from interv.cli._vocabulary import IntervParser
from interv.cli.analysis import register as register_analysis
from interv.cli.circuit import register as register_circuit
from interv.cli.grid import register as register_grid
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
            "These describe how concentrated the weights are, not how much the head matters. "
            "Weights may be rounded as typed (0.3333 0.3333 0.3333): a sum that rounding of "
            "the typed decimals explains (at most 1%) is rescaled to 1, and said so."
        ),
    )
    parser.add_argument("weights", nargs="+", help="attention weights a_1..a_n")
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
    parser.add_argument(
        "--allow-deficit",
        action="store_true",
        help="accept a row summing to less than 1: the rest sits on an off-row learned sink "
        "(counted as one extra key, part of the sink)",
    )
    parser.set_defaults(handler=_run_metrics)


_ROUNDING_CAP = Decimal("0.01")


def _typed_row(texts: Sequence[str], allow_deficit: bool) -> tuple[list[float], str | None]:
    """The typed weights as floats, rescaled to sum to 1 when rounding of the typed
    decimals explains the difference (capped at 1%); and a note saying so, if it did.

    Each weight typed with ``d >= 1`` decimals may be off by half a unit in its last
    place; integers (``0``, ``1``) are exact.
    """
    values = []
    allowance = Decimal(0)
    for text in texts:
        try:
            value = Decimal(text)
        except InvalidOperation:
            raise IntervError(
                f"weight {text!r} is not a number; expected weights in [0, 1]"
            ) from None
        if not value.is_finite():
            raise IntervError(f"weight {text!r} is not a finite number; expected weights in [0, 1]")
        decimals = max(0, -int(value.as_tuple().exponent))
        if decimals:
            allowance += Decimal(5) / Decimal(10) ** (decimals + 1)
        values.append(value)
    allowance = min(allowance, _ROUNDING_CAP)
    total = sum(values, Decimal(0))
    weights = [float(v) for v in values]
    if any(v < 0 for v in values):
        return weights, None  # the metrics name the negative weight
    if total <= 0:
        raise IntervError(
            f"the {len(values)} weights are all 0; expected a row of attention weights summing "
            "to 1 (e.g. interv metrics 0.7 0.1 0.1 0.1)"
        )
    gap = total - 1
    if gap == 0:
        return weights, None
    if abs(gap) <= allowance:
        note = (
            f"note: the typed weights sum to {total}; rounding of their decimals explains up to "
            f"+-{allowance.normalize()} (half a unit in each weight's last place), so the row "
            "was rescaled to sum to 1"
        )
        return [float(v / total) for v in values], note
    if allow_deficit and gap < 0:
        return weights, None
    needed = math.ceil(math.log10(50 * len(values)))
    deficit = (
        ", or pass --allow-deficit if the rest of the mass sits on an off-row learned sink"
        if gap < 0 and not allow_deficit
        else ""
    )

    raise IntervError(
        f"the {len(values)} weights sum to {total}; expected 1 (a row of attention weights). "
        f"Rounding of the typed decimals explains at most +-{allowance.normalize()} (half a unit "
        f"in each weight's last place, at most 1%); type at least {needed} decimals per weight "
        f"(e.g. {'0.' + '3' * needed} for 1/3), fix the row{deficit}"
    )


def _run_metrics(args: argparse.Namespace) -> int:
    from interv.report.row_summary import describe_row  # torch: on use (CLI start-up)

    weights, note = _typed_row(args.weights, args.allow_deficit)
    if note:
        print(note)
    print(describe_row(weights, sink=args.sink, unit=args.unit, allow_deficit=args.allow_deficit))
    return 0


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of the ``interv`` command."""
    parser = IntervParser(
        prog="interv",
        description=(
            "Causal interpretability for transformers: attention-concentration metrics "
            "next to interventions that measure what heads actually do."
        ),
    )
    parser.add_argument("--version", action="version", version=f"interv {__version__}")
    subparsers = parser.add_subparsers(
        title="commands", metavar="COMMAND", parser_class=IntervParser
    )
    _add_metrics(subparsers)
    register_zoo(subparsers)
    register_analysis(subparsers)
    register_paths(subparsers)
    register_grid(subparsers)
    register_circuit(subparsers)
    register_sweeps(subparsers)
    register_report(subparsers)
    return parser


def _quietly(handler, args: argparse.Namespace) -> int:
    """``--quiet``: the handler with no progress bar and nothing on stdout (errors and
    warnings still reach stderr)."""
    import contextlib
    import io

    from interv._progress import silenced

    with silenced(), contextlib.redirect_stdout(io.StringIO()):
        return handler(args)


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``interv`` console script; returns the exit status.

    0 on success; 2 with ``interv: error: ...`` on stderr for a user mistake (an
    :class:`~interv.errors.IntervError`, or a bad argument found by argparse); 130 on
    Ctrl-C; 141 when stdout's reader went away.
    """
    # OpenMP threads that sleep while they wait instead of spinning: with another job on
    # the cores, spinning threads made the demos 2x slower (zoo 20-32 s -> 12 s, SmolLM2
    # 129 s -> 64 s on 2 shared cores). Effective only before torch is imported, which
    # the handlers do lazily; a value the user set wins.
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    parser = build_parser()
    args = parser.parse_args(argv)
    handler = getattr(args, "handler", None)
    if handler is None:
        parser.print_help()
        return 0
    try:
        if getattr(args, "quiet", False):
            return _quietly(handler, args)
        return handler(args)
    except IntervError as error:
        print(f"interv: error: {error}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interv: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        # the reader of stdout went away (`interv ... | head`): stop quietly
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 141


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
