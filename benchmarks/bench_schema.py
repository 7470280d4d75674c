"""Load time of a 70k-edge ``scores.json`` (SmolLM2-135M's graph, 8 prompts per edge): the
typed reader (``EdgeScores.from_dict`` through its schema) against the same file read without
checks (``json.loads`` and the tensors built directly).

    python benchmarks/bench_schema.py [--repeats 5]

Prints the best of ``--repeats`` for each, in milliseconds, and their ratio (one run, so the
machine's load affects both alike).
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

import torch

from interv.circuits import EdgeScores, Graph
from interv.provenance import Provenance


def _file(directory: Path) -> Path:
    graph = Graph(30, 9, 3, has_mlp=True, model_name="SmolLM2-135M-Instruct")
    per_prompt = torch.randn(graph.n_edges, 8, generator=torch.Generator().manual_seed(0))
    scores = EdgeScores(
        graph=graph,
        scores=per_prompt.mean(-1).double(),
        per_prompt=per_prompt.double(),
        method="eap",
        steps=1,
        metric="logit_diff",
        fingerprint="0" * 16,
        sentence="EAP estimates",
        provenance=Provenance("SmolLM2-135M-Instruct", n_prompts=8, metric="logit_diff"),
        unit="logits",
    )
    path = directory / "scores.json"
    path.write_text(json.dumps(scores.to_dict()))
    return path


def _unchecked(path: Path) -> object:
    data = json.loads(path.read_text())
    return torch.tensor(data["scores"]), torch.tensor(data["per_prompt"])


def _typed(path: Path) -> object:
    return EdgeScores.from_dict(json.loads(path.read_text()))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as directory:
        path = _file(Path(directory))
        n_edges = EdgeScores.from_dict(json.loads(path.read_text())).graph.n_edges
        print(f"{path.stat().st_size / 1e6:.1f} MB, {n_edges} edges")
        best = {}
        for name, read in (("unchecked", _unchecked), ("typed reader", _typed)):
            times = []
            for _ in range(args.repeats):
                start = time.perf_counter()
                read(path)
                times.append(time.perf_counter() - start)
            best[name] = min(times)
            print(f"{name}: {1000 * best[name]:.0f} ms (best of {args.repeats})")
        print(f"ratio typed / unchecked: {best['typed reader'] / best['unchecked']:.2f}")


if __name__ == "__main__":
    main()
