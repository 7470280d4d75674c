"""The time a resumed ``interv circuit`` run saves by reusing what the killed run stored.

Three runs of one command: uninterrupted (the reference files and the full time), then one
killed (SIGKILL, no cleanup) right after its ``--after``-th stored job of a stage
(``--kill-in resamples``: the exact edges only the stability resamples or the selection's
subsamples verify, ``exact.jsonl`` lines marked ``"stage": "resamples"``; ``curve``: the
faithfulness curves' circuits, ``curves.jsonl``). The killed directory is copied, and the
copy stripped of what only this round's store keeps (the resamples' lines and
``curves.jsonl``: the directory the previous store left after the same kill). Both are
resumed with the same command, back to back: printed are each run's time, the load, the work
each resume redid (from its manifest) and whether every output file equals the
uninterrupted run's, byte for byte.

Run: ``python benchmarks/circuit_resume.py --model induction-2l --pairs 8 --kill-in curve
--after 4`` (add ``--model smollm2-135m --task ioi --pairs 4`` for SmolLM2).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _measure import circuit_job_arguments  # the sibling benchmarks (sys.path[0])

KILLER = """
import os, signal, sys
import interv.circuits.store as store
from interv.circuits.executor import Kept
from interv.cli import main

stage, after, count = sys.argv[1], int(sys.argv[2]), 0


def killing(keep):
    def kept(*args):
        global count
        keep(*args)  # stored: appended and fsync-ed
        count += 1
        if count == after:
            os.kill(os.getpid(), signal.SIGKILL)  # no cleanup, no finally: as a real kill
    return kept


if stage == "curve":
    real = store.CircuitStore.curve_resume

    def curve_resume(self, curve):
        kept = real(self, curve)
        return Kept(kept.stored, killing(kept.keep))

    store.CircuitStore.curve_resume = curve_resume
else:
    append = store.CircuitStore.append_exact
    resampled = killing(lambda *args: None)

    def append_exact(self, indices, values, per_prompt=None, stage=None):
        append(self, indices, values, per_prompt, stage)
        if stage == "resamples":
            resampled()

    store.CircuitStore.append_exact = append_exact
sys.exit(main(sys.argv[3:]))
"""

OUTPUTS = ("scores.json", "circuit.json", "faithfulness.json", "mission.json", "circuit.md")


def _load() -> str:
    return " ".join(f"{x:.1f}" for x in os.getloadavg())


def _run(argv: list[str], prelude: list[str] | None = None) -> tuple[float, int]:
    start = time.perf_counter()
    code = (
        KILLER
        if prelude
        else "import sys; from interv.cli import main; sys.exit(main(sys.argv[1:]))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code, *(prelude or []), *argv],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        check=False,
    )
    if done.returncode not in (0, -9):
        sys.exit(done.stderr.decode()[-2000:])
    return time.perf_counter() - start, done.returncode


def _strip(directory: Path) -> None:
    """The directory the previous store left: no resamples' lines, no curves.jsonl."""
    log = directory / "exact.jsonl"
    lines = [line for line in log.read_text().splitlines() if '"stage": "resamples"' not in line]
    log.write_text("".join(line + "\n" for line in lines))
    (directory / "curves.jsonl").unlink(missing_ok=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    circuit_job_arguments(parser)
    parser.add_argument("--kill-in", choices=("resamples", "curve"), default="curve")
    parser.add_argument("--after", type=int, default=4, help="stored jobs of that stage")
    args = parser.parse_args()
    command = [
        "circuit", args.model, "--task", args.task, "--n-pairs", str(args.pairs),
        "--top-k", str(args.top_k), "--audit", str(args.audit), "--alpha", "none",
        "--stability", str(args.resamples), "--select", "stability",
        "--subsamples", str(args.resamples), "--batch-size", str(args.batch_size), "--quiet",
    ]  # fmt: skip
    with tempfile.TemporaryDirectory() as scratch:
        root = Path(scratch)
        full, _ = _run([*command, "--out", str(root / "full")])
        print(f"uninterrupted: {full:.1f} s (load {_load()})")
        killed, code = _run([*command, "--out", str(root / "new")], [args.kill_in, str(args.after)])
        if code != -9:
            sys.exit(f"the run ended before its {args.after}th {args.kill_in} job; lower --after")
        print(f"killed after {args.after} {args.kill_in} jobs: {killed:.1f} s (load {_load()})")
        shutil.copytree(root / "new", root / "old")
        _strip(root / "old")
        for name, what in (("new", "this store"), ("old", "the previous store's directory")):
            took, _ = _run([*command, "--out", str(root / name)])
            manifest = json.loads((root / name / "manifest.json").read_text())
            same = all(
                (root / name / f).read_bytes() == (root / "full" / f).read_bytes() for f in OUTPUTS
            )
            print(
                f"resumed ({what}): {took:.1f} s (load {_load()}); exact edges patched again "
                f"{manifest['computed_in_last_run']} (stored {manifest['stored_before']}), "
                f"curve circuits evaluated {manifest.get('circuits_in_last_run')} (stored "
                f"{manifest.get('circuits_stored_before')}); outputs equal the uninterrupted "
                f"run's byte for byte: {same}"
            )


if __name__ == "__main__":
    main()
