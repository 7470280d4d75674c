"""``interv demo`` and ``interv report``: the report's command-line entry points.

- ``interv demo [MODEL] [--pairs FILE.jsonl] [--out DIR]`` runs the whole pipeline (see
  :mod:`interv.demo`), writes the report and prints where it is and its headline (the
  heads with the largest |effect| beside their concentration ranks, the most
  concentrated heads beside their effects, the instructive disagreements).
- ``interv report DIR`` renders a report from saved results: a directory that
  ``interv demo`` wrote (its ``report.json``, re-rendered in place or into ``--out``),
  or a sweep directory (``interv sweep``; effects from :func:`interv.sweeps.load_sweep`,
  concentration recomputed on the sweep's model and prompts). With ``--csv`` and/or
  ``--parquet`` it writes the tables instead of the page, for sweeps too large for one:
  ``rows.*`` (one row per site x intervention, :meth:`Report.to_pandas`) and, for a
  sweep, ``effects.*`` (one row per intervention x prompt, ``InterventionResult.to_pandas``).
- ``interv report DIR`` on a directory that ``interv circuit`` wrote re-renders its
  ``circuit.md`` and ``circuit.html`` from the stored JSON (:mod:`interv.cli.report_circuit`).
"""

from __future__ import annotations

import argparse
import io
from pathlib import Path
from typing import TYPE_CHECKING

from interv._checks import as_int, read_json
from interv._inert import inert_frame
from interv._outputs import claim_dir
from interv.cli._vocabulary import add_deprecated, add_quiet
from interv.cli.report_circuit import is_circuit_dir, rerender_circuit
from interv.cli.tasks import PAIRS_FILE_HELP, first_pairs, read_pairs
from interv.errors import IntervError

if TYPE_CHECKING:
    from interv.report.report import Report

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
    from interv.report.render import headline_lines  # torch: on use (CLI start-up)

    for line in headline_lines(report, 5):
        print(line)


_DEMO_MODELS = ("induction-2l", "smollm2-135m", "gemma3-270m")


def _demo_model(args: argparse.Namespace) -> str:
    """The positional MODEL, or the deprecated ``--model``'s value; never two different."""
    old = args.model_option
    if old is not None and old not in _DEMO_MODELS:
        raise IntervError(f"--model {old!r}: the demo runs one of {_DEMO_MODELS}")
    if old is not None and args.model is not None and old != args.model:
        raise IntervError(f"two models given: {args.model!r} and --model {old!r}; give one")
    return args.model or old or _DEMO_MODELS[0]


def _run_demo(args: argparse.Namespace) -> int:
    from interv.demo import DEFAULT_OUT, run_demo  # torch: on use (CLI start-up)

    model = _demo_model(args)
    pairs = None
    n_prompts = args.n_pairs
    if n_prompts is not None:
        as_int(n_prompts, "--n-pairs", minimum=1)
    if args.pairs is not None:
        source = f"--pairs {args.pairs}"
        pairs = first_pairs(read_pairs(args.pairs), n_prompts, source, "--n-pairs")
        n_prompts = None
    result = run_demo(model, args.out, n_prompts=n_prompts, layers=args.layers, pairs=pairs)
    default = Path(DEFAULT_OUT[model])
    if args.out is None and result.out_dir != default:
        print(
            f"note: {default}/ holds files interv did not write, so the report went to "
            f"{result.out_dir}/ instead (nothing was overwritten)"
        )
    _print_summary(result.report, result.paths, result.seconds)
    return 0


def _run_report(args: argparse.Namespace) -> int:
    from interv.report.render import write_report  # torch: on use (CLI start-up)

    directory = Path(args.directory)
    if not directory.exists():
        raise IntervError(f"directory {str(directory)!r} does not exist")
    if not directory.is_dir():
        raise IntervError(
            f"{str(directory)!r} is a file; expected a directory written by interv demo or "
            "interv sweep"
        )
    if is_circuit_dir(directory):  # interv circuit's directory: its page and Markdown again
        if args.csv or args.parquet:
            raise IntervError(
                f"{str(directory)!r} is a circuit directory (interv circuit): --csv and "
                "--parquet apply to reports and sweeps; its tables are circuit.json"
            )
        return rerender_circuit(directory, args.out)
    for name in ("report.json", "manifest.json"):
        if (directory / name).is_symlink():
            raise IntervError(
                f"{str(directory / name)!r} is a symbolic link; interv reads the files of a "
                "directory it wrote only as the regular files it wrote (it never follows a "
                "link there)"
            )
    is_report = (directory / "report.json").is_file()
    if not is_report and not (directory / "manifest.json").is_file():
        raise IntervError(
            f"{str(directory)!r} holds neither a saved report (report.json, from interv demo) "
            "nor a sweep (manifest.json, from interv sweep) nor a circuit (circuit.json, from "
            "interv circuit)"
        )
    if is_report:
        from interv.report.report import Report  # torch: on use (CLI start-up)

        report = Report.from_dict(read_json(directory / "report.json", "saved report"))
    else:
        from interv.sweeps.store import read_manifest  # torch: on use (CLI start-up)

        read_manifest(directory)  # a broken manifest fails here, before any model loads
    try:
        output = claim_dir(args.out or directory, what="output directory", by="interv report")
    except IntervError as error:
        if args.out is not None:
            raise
        killed = "" if is_report else " (a sweep killed mid-run lists its files again when its "
        killed += "" if is_report else "command is rerun)"
        raise IntervError(
            f"{error}; to render the report elsewhere pass --out DIR{killed}"
        ) from None
    with output:
        if not is_report:
            from interv.report.sweep import report_from_sweep  # torch: on use (CLI start-up)

            report = report_from_sweep(directory)
        if args.csv or args.parquet:
            files = _table_files(report, directory, args.csv, args.parquet)
            written = {name: output.write_bytes(name, data) for name, data in files.items()}
        else:
            written = write_report(report, output)
    if args.csv or args.parquet:
        _print_tables(report, output.path, written)
        return 0
    _print_summary(report, written, None)
    return 0


def _table_files(report: Report, directory: Path, csv: bool, parquet: bool) -> dict[str, bytes]:
    """``rows`` (and, for a sweep, ``effects``) as CSV and/or Parquet bytes, by file name.
    CSV text cells that would start a spreadsheet formula are quoted; numeric columns stay
    numeric (:func:`interv._inert.csv_cell`)."""
    frames = {"rows": report.to_pandas()}
    if (directory / "manifest.json").is_file():
        from interv.sweeps.collect import load_sweep  # torch: on use (CLI start-up)

        frames["effects"] = load_sweep(directory).to_pandas()
    files = {}
    for name, frame in frames.items():
        if csv:
            # RFC 4180 line ends, so a cell holding a line break (\r included) is quoted
            text = inert_frame(frame).to_csv(index=False, lineterminator="\r\n")
            files[f"{name}.csv"] = text.encode("utf-8")
        if parquet:
            buffer = io.BytesIO()
            try:
                frame.to_parquet(buffer, index=False)
            except ImportError as error:
                raise IntervError(
                    f"--parquet needs a Parquet engine for pandas: pip install pyarrow ({error})"
                ) from error
            files[f"{name}.parquet"] = buffer.getvalue()
    return files


def _print_tables(report: Report, out: Path, written: dict[str, Path]) -> None:
    sweep = any(name.startswith("effects.") for name in written)
    print(
        f"tables written to {out}/ ({', '.join(written)}): rows = one per site x "
        "intervention with its semantics sentence, effect in "
        f"{report.header.metric_unit} and the head's concentration"
        + ("; effects = one per intervention x prompt" if sweep else "")
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
        "model",
        nargs="?",
        default=None,
        choices=_DEMO_MODELS,
        metavar="MODEL",
        help="induction-2l (the zoo model that ships with interv, induction task; default), "
        "smollm2-135m or gemma3-270m (IOI task); the demo runs these three models",
    )
    add_deprecated(demo, "--model", dest="model_option", new="interv demo MODEL")
    demo.add_argument(
        "--out",
        default=None,
        metavar="DIR",
        help="output directory: new, empty, or written by interv before; never overwrites "
        "other files (default ./interv-report, ./interv-report-smollm2 for smollm2-135m, "
        "./interv-report-gemma3 for gemma3-270m; "
        "a fresh -2, -3, ... if that one holds other files)",
    )
    demo.add_argument(
        "--pairs",
        default=None,
        metavar="FILE.jsonl",
        help=PAIRS_FILE_HELP + "; replaces the model's built-in task, and each line needs a "
        "foil (logit_diff). Its words must be in the model's vocabulary: English text needs "
        "smollm2-135m",
    )
    demo.add_argument(
        "--n-pairs",
        type=int,
        default=None,
        help="prompt pairs, >= 1 (default 16 zoo, 8 SmolLM2; with --pairs: every pair of the "
        "file, or its first N_PAIRS)",
    )
    add_deprecated(demo, "--n-prompts", dest="n_pairs", new="--n-pairs", type=int)
    demo.add_argument(
        "--layers", type=int, nargs="+", default=None, help="layers to intervene on (default all)"
    )
    add_quiet(demo)
    demo.set_defaults(handler=_run_demo)

    report = subparsers.add_parser(
        "report",
        help="render a report from saved results (interv demo, sweep or circuit output)",
        description=(
            "Render the report page (HTML), Markdown, JSON and CSV from saved results, or "
            "with --csv/--parquet only its tables (for sweeps too large for a page); for a "
            "directory interv circuit wrote, its circuit.md and circuit.html again."
        ),
    )
    report.add_argument(
        "directory", help="a directory written by interv demo, interv sweep or interv circuit"
    )
    report.add_argument(
        "--out",
        default=None,
        metavar="DIR",
        help="output directory (default: the input directory); new, empty, or written by "
        "interv before",
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
    add_quiet(report)
    report.set_defaults(handler=_run_report)
