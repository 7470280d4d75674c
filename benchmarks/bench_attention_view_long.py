"""The attention viewer's rows on a long prompt: time and peak memory of a subsampled view.

SmolLM2-135M (``interv.load_model("smollm2-135m")``, float32, CPU) on its full 8,192-token
context (the repository's text sample repeated), ``attention_view`` of chosen heads with the
default subsample (every 32nd query row plus the last), computed without the pattern. Memory
method: ``benchmarks/_measure.py`` (peak RSS above the resident model, after a warm-up on a
256-token prompt that also runs the one-time check of the pattern-free rows).

Run: ``python benchmarks/bench_attention_view_long.py [--length 8192] [--out figures.json]``
(the measurement runs in a fresh process; a few minutes on 2 loaded cores).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _measure  # the benchmarks folder is not a package

ROOT = Path(__file__).resolve().parents[1]
HEADS = [(0, 0), (10, 3), (20, 4), (29, 8)]
WARM_UP = 256
GIB = 2**30


def worker(length: int) -> None:
    import interv
    from interv.analysis.attention_view import attention_view

    model = interv.load_model("smollm2-135m")
    text = (ROOT / "interv" / "data" / "text_sample.txt").read_text()
    tokens = model.to_tokens(text * 200, prepend_bos=True)[:, :length]
    with torch.no_grad():
        attention_view(model, tokens[:, :WARM_UP], heads=HEADS, attention="rows")
        resident = _measure.reset_peak()
        start = time.perf_counter()
        view = attention_view(model, tokens, heads=HEADS)
        seconds = time.perf_counter() - start
        top = _measure.peak()
    print(
        json.dumps(
            {
                "seconds": seconds,
                "peak_above_model_gib": (top - resident) / GIB,
                "resident_gib": resident / GIB,
                "tokens": int(tokens.shape[1]),
                "rows": view.n_rows,
                "pattern_shape": list(view.pattern.shape),
                "attention": view.attention,
                "scope": view.scope,
            }
        )
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--length", type=int, default=8192)
    parser.add_argument("--out", type=Path)
    parser.add_argument("--worker", nargs=1)
    args = parser.parse_args()
    if args.worker:
        worker(int(args.worker[0]))
        return
    figures = {"machine": _measure.machine()}
    figures["view"] = _measure.run_worker(__file__, [str(args.length)])
    figures["load_after"] = _measure.load()
    text = json.dumps(figures, indent=2)
    print(text)
    if args.out:
        from interv._outputs import write_file

        write_file(args.out, (text + "\n").encode())


if __name__ == "__main__":
    main()
