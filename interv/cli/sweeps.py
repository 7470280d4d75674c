"""Command line for sweeps: ``interv sweep`` and ``interv sweep-merge``.

- ``interv sweep CONFIG.toml --out DIR [--shard i/n] [--executor local|ray]
  [--workers N] [--quiet]`` runs or resumes a sweep (see :mod:`interv.sweeps`);
  rerunning the same command after an interruption resumes it. ``--screen`` (or any of
  ``--top-k``, ``--audit``, ``--alpha``, ``--budget``, ``--estimator``, ``--steps``,
  ``--hvp-steps``) screens every entry instead (the config's ``[sweep.screen]`` with these
  keys set, checked as the table is; see :mod:`interv.sweeps.screened`).
- ``interv sweep-merge DIR... --out DIR`` merges the shard directories of one sweep.

A config's ``kind = "module:Class"`` imports ``module`` only with ``--allow-import module``
(said on stderr before the import); ``sweep-merge`` and ``interv report`` read the
manifests of received directories as data and import nothing they name.

Both end with a one-line summary on stdout (unless ``--quiet``); the progress bar is
drawn on stderr only when it is a terminal. :func:`register` adds the commands to the
``interv`` parser (handlers are stored as ``args.handler``).
"""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING

from interv.cli._vocabulary import add_alpha, add_quiet

if TYPE_CHECKING:
    from interv.engine.results import InterventionResult
    from interv.sweeps.config import SweepConfig

__all__ = ["register"]


def _summary(result: InterventionResult, directory: str, manifest: dict) -> str:
    computed = manifest.get("computed_in_last_run")
    shard = manifest["shard"]
    share = "all units" if shard is None else f"shard {shard}"
    if computed is None:
        fresh = ""
    elif computed == 0:
        fresh = ", none computed by this run (every unit was stored already)"
    else:
        fresh = f", {computed} computed by this run"
    if result.screened:
        fresh = "" if computed is None else f"; {computed} exact evaluations by this run"
        n_exact = int(result.exact.sum())
        audits = "\n".join(f"  {outcome.describe()}" for outcome in result.screens)
        n_estimated = result.n_interventions - n_exact
        estimated = (
            f"{n_estimated} " + "; ".join(result.estimate_sentences())
            if n_estimated
            else "none estimated"
        )
        return (
            f"screened sweep complete: {result.n_interventions} interventions x "
            f"{result.scope.n_prompts} prompts of task {result.scope.task_name!r} on model "
            f"{result.scope.model_name!r}, metric {result.metric.name} in "
            f"{result.metric.unit}; {n_exact} intervened on exactly, {estimated}{fresh}; "
            f"results in {directory}\n{audits}"
        )
    return (
        f"sweep complete ({share}): {result.n_interventions} interventions x "
        f"{result.scope.n_prompts} prompts of task {result.scope.task_name!r} on model "
        f"{result.scope.model_name!r}, metric {result.metric.name} in {result.metric.unit}; "
        f"{manifest['n_units']} units in the whole sweep{fresh}; results in {directory}"
    )


_SCREEN_FLAGS = ("top_k", "audit", "alpha", "budget", "estimator", "steps", "hvp_steps")

#: :data:`interv.audit.ESTIMATORS`, listed here so that ``interv sweep --help`` needs no
#: torch (a test keeps the two equal); the value is checked by :class:`interv.Screen`
ESTIMATORS = ("attribution", "integrated", "gim", "hvp")


def _screened(config: SweepConfig, args: argparse.Namespace) -> SweepConfig:
    """``config`` with ``[sweep.screen]`` set when a screen flag is given."""
    from interv.sweeps.config import with_screen  # torch: on use (CLI start-up)

    # the screen flags default to "not given" (argparse.SUPPRESS): the config's
    # [sweep.screen] or interv.Screen's defaults apply, and an explicit `--alpha none` counts
    given = {key: getattr(args, key) for key in _SCREEN_FLAGS if hasattr(args, key)}
    if not args.screen and not given:
        return config
    return with_screen(config, **given)


def _say_import(module: str) -> None:
    """Shown before interv imports a module a config names (allowed by --allow-import)."""
    print(f"interv: importing module {module!r} (allowed by --allow-import)", file=sys.stderr)


def _run(args: argparse.Namespace) -> int:
    from interv.sweeps.execute import as_config  # torch: on use (CLI start-up)
    from interv.sweeps.store import read_manifest  # torch: on use (CLI start-up)

    progress = False if args.quiet else None
    config = as_config(args.config, allow_import=args.allow_import, on_import=_say_import)
    config = _screened(config, args)
    if args.executor == "ray":
        from interv.sweeps.ray_executor import run_sweep_ray  # torch: on use (CLI start-up)

        result = run_sweep_ray(
            config, args.out, n_workers=args.workers, shard=args.shard, progress=progress
        )
    else:
        from interv.sweeps.execute import run_sweep  # torch: on use (CLI start-up)

        result = run_sweep(config, args.out, shard=args.shard, progress=progress)
    if not args.quiet:
        print(_summary(result, args.out, read_manifest(args.out)))
    return 0


def _merge(args: argparse.Namespace) -> int:
    from interv.sweeps.collect import merge_sweeps  # torch: on use (CLI start-up)
    from interv.sweeps.store import read_manifest  # torch: on use (CLI start-up)

    result = merge_sweeps(args.dirs, args.out)
    if not args.quiet:
        manifest = read_manifest(args.out)
        manifest["computed_in_last_run"] = None
        print(_summary(result, args.out, manifest) + f" (merged from {len(args.dirs)} dirs)")
    return 0


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add the ``sweep`` and ``sweep-merge`` commands to the ``interv`` parser."""
    sweep = subparsers.add_parser(
        "sweep",
        help="run or resume an intervention sweep from a TOML config",
        description=(
            "Run the interventions of a TOML sweep config and write each work unit's "
            "results to DIR as soon as it is computed. Rerunning the same command resumes "
            "an interrupted sweep; another config into the same DIR is refused."
        ),
    )
    sweep.add_argument("config", help="the sweep config (TOML)")
    sweep.add_argument("--out", required=True, metavar="DIR", help="the sweep directory")
    sweep.add_argument(
        "--shard",
        default=None,
        metavar="i/n",
        help="run only share i of n: the units whose index modulo n is i",
    )
    sweep.add_argument(
        "--executor",
        choices=("local", "ray"),
        default="local",
        help="compute units in this process (default) or on Ray workers (needs interv[ray])",
    )
    sweep.add_argument("--workers", type=int, default=2, help="number of Ray workers (default: 2)")
    screen = sweep.add_argument_group(
        "screening",
        "estimate every site (--estimator) and intervene exactly only on the top by "
        "|estimate| and a random audit sample (sets the config's [sweep.screen]; rerun with "
        "the same flags to resume)",
    )
    screen.add_argument("--screen", action="store_true", help="screen every entry")
    screen.add_argument(
        "--top-k", type=int, default=argparse.SUPPRESS, help="sites verified exactly (default 20)"
    )
    screen.add_argument(
        "--audit",
        type=int,
        default=argparse.SUPPRESS,
        help="random other sites checked exactly (default 60)",
    )
    add_alpha(screen, given_only=True)
    screen.add_argument(
        "--budget", type=int, default=argparse.SUPPRESS, help="most exact evaluations"
    )
    screen.add_argument(
        "--estimator",
        choices=ESTIMATORS,
        default=argparse.SUPPRESS,
        help="how every site is estimated (default attribution: the gradient at the base run; "
        "integrated: integrated gradients, --steps points; gim: GIM's modified backward; hvp: "
        "Zhang & Wang's HVP correction, with reliability scores)",
    )
    screen.add_argument(
        "--steps",
        type=int,
        default=argparse.SUPPRESS,
        help="integrated gradients' points (--estimator integrated; default 5)",
    )
    screen.add_argument(
        "--hvp-steps",
        type=int,
        default=argparse.SUPPRESS,
        help="the multi-step HVP's segments (--estimator hvp; default 1: the single correction)",
    )
    add_quiet(sweep)
    sweep.add_argument(
        "--allow-import",
        action="append",
        default=[],
        metavar="MODULE",
        help="let a kind named by import path ('MODULE:Class') import MODULE (or a module "
        "below it); repeat for several. Without it interv imports no module a config names",
    )
    sweep.set_defaults(handler=_run)

    merge = subparsers.add_parser(
        "sweep-merge",
        help="merge the shard directories of one sweep",
        description="Merge the shard directories of one sweep into one complete sweep directory.",
    )
    merge.add_argument(
        "dirs", nargs="+", metavar="DIR", help="shard directories of the same config"
    )
    merge.add_argument("--out", required=True, metavar="DIR", help="the merged sweep directory")
    add_quiet(merge)
    merge.set_defaults(handler=_merge)
