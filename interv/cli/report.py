"""``interv demo`` and ``interv report``: the report's command-line entry points.

- ``interv demo [--model SPEC] [--out DIR]`` runs the whole pipeline (see
  :mod:`interv.demo`), writes the report and prints where it is and the three most
  instructive rows.
- ``interv report DIR`` renders a report from saved results: a directory that
  ``interv demo`` wrote (its ``report.json``, re-rendered in place or into ``--out``),
  or a sweep directory (``interv sweep``; effects from :func:`interv.sweeps.load_sweep`,
  concentration recomputed on the sweep's model and prompts). With ``--csv`` and/or
  ``--parquet`` it writes the tables instead of the page, for sweeps too large for one:
  ``rows.*`` (one row per site x intervention, :meth:`Report.to_pandas`) and, for a
  sweep, ``effects.*`` (one row per intervention x prompt, ``InterventionResult.to_pandas``).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import TYPE_CHECKING

from interv.errors import IntervError

if TYPE_CHECKING:
    from interv.report.table import Report

__all__ = ["register"]


def _print_summary(report: Report, paths: dict[str, Path], seconds: float | None) -> None:
    html = paths["html"]
    timing = "" if seconds is None else f" in {seconds:.1f} s (wall clock)"
    files = f"{html.name}, report.md, report.json, report.csv"
    print(f"report written to {html.parent}/ ({files}){timing}")
    header = report.header
    print(
        f"scope: {header.model} on {header.task}, {header.n_prompts} prompts, effects in "
        f"{header.metric_unit} ({header.metric_name}), concentration at {header.query_positions}"
    )
    print("three most instructive rows (largest gap between concentration rank and |effect| rank):")
    for i, (_, why) in enumerate(report.instructive(3), start=1):
        print(f"  {i}. {why}")


def _run_demo(args: argparse.Namespace) -> int:
    from interv.demo import run_demo

    result = run_demo(args.model, args.out, n_prompts=args.n_prompts, layers=args.layers)
    _print_summary(result.report, result.paths, result.seconds)
    return 0


def _run_report(args: argparse.Namespace) -> int:
    from interv.report.render import save_report
    from interv.report.table import Report

    directory = Path(args.directory)
    out = Path(args.out) if args.out else directory
    if (directory / "report.json").is_file():
        data = json.loads((directory / "report.json").read_text(encoding="utf-8"))
        report = Report.from_dict(data)
    elif (directory / "manifest.json").is_file():
        from interv.demo import report_from_sweep

        report = report_from_sweep(directory)
    else:
        raise IntervError(
            f"{str(directory)!r} holds neither a saved report (report.json, from interv demo) "
            "nor a sweep (manifest.json, from interv sweep)"
        )
    if args.csv or args.parquet:
        _write_tables(report, directory, out, csv=args.csv, parquet=args.parquet)
        return 0
    paths = save_report(report, out)
    _print_summary(report, paths, None)
    return 0


def _write_tables(report: Report, directory: Path, out: Path, *, csv: bool, parquet: bool) -> None:
    """Write ``rows`` (and, for a sweep, ``effects``) as CSV and/or Parquet into ``out``."""
    frames = {"rows": report.to_pandas()}
    if (directory / "manifest.json").is_file():
        from interv.sweeps.collect import load_sweep

        frames["effects"] = load_sweep(directory).to_pandas()
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for name, frame in frames.items():
        if csv:
            frame.to_csv(out / f"{name}.csv", index=False)
            written.append(f"{name}.csv")
        if parquet:
            try:
                frame.to_parquet(out / f"{name}.parquet", index=False)
            except ImportError as error:
                raise IntervError(
                    f"--parquet needs a Parquet engine for pandas: pip install pyarrow ({error})"
                ) from error
            written.append(f"{name}.parquet")
    print(
        f"tables written to {out}/ ({', '.join(written)}): rows = one per site x "
        "intervention with its semantics sentence, effect in "
        f"{report.header.metric_unit} and the head's concentration"
        + ("; effects = one per intervention x prompt" if "effects" in frames else "")
    )


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add the ``demo`` and ``report`` subcommands to the ``interv`` parser."""
    demo = subparsers.add_parser(
        "demo",
        help="run concentration, ablations, patching and the report on a shipped model",
        description=(
            "Run the whole pipeline (concentration, zero/mean/resample ablation, denoising "
            "patching, a value intervention at the sink, the report and its plots) on a "
            "model and its built-in task, and write the report."
        ),
    )
    demo.add_argument(
        "--model",
        default="induction-2l",
        choices=("induction-2l", "smollm2-135m"),
        help="induction-2l (zoo, ships with interv; default) or smollm2-135m (IOI task)",
    )
    demo.add_argument(
        "--out", default="interv-report", help="output directory (default ./interv-report)"
    )
    demo.add_argument(
        "--n-prompts", type=int, default=None, help="prompt pairs (default 16 zoo, 8 SmolLM2)"
    )
    demo.add_argument(
        "--layers", type=int, nargs="+", default=None, help="layers to intervene on (default all)"
    )
    demo.set_defaults(handler=_run_demo)

    report = subparsers.add_parser(
        "report",
        help="render a report from saved results (interv demo output or a sweep directory)",
        description=(
            "Render the report page (HTML), Markdown, JSON and CSV from saved results, or "
            "with --csv/--parquet only its tables (for sweeps too large for a page)."
        ),
    )
    report.add_argument("directory", help="a directory written by interv demo or interv sweep")
    report.add_argument(
        "--out", default=None, help="output directory (default: the input directory)"
    )
    report.add_argument(
        "--csv",
        action="store_true",
        help="write the tables as CSV instead of the page (rows.csv; effects.csv for a "
        "sweep); needs pandas: pip install 'interv[pandas]'",
    )
    report.add_argument(
        "--parquet",
        action="store_true",
        help="write the tables as Parquet instead of the page; needs pandas and pyarrow",
    )
    report.set_defaults(handler=_run_report)
