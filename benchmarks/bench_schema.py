"""Load time of a 70k-edge ``scores.json`` (SmolLM2-135M's graph, 8 prompts per edge, 13 MB):
interv's typed reader (``EdgeScores.from_dict`` through its schema: types, no infinity, the
finite scores, lengths against the graph) against the same file read without checks
(``json.loads`` and the tensors built directly) and, where installed, the same checks
declared in msgspec (``Struct`` + ``Meta``) and pydantic (``TypeAdapter`` over a dataclass
with ``allow_inf_nan=False``), each building the same tensors.

    python benchmarks/bench_schema.py [--repeats 5]

Prints the best of ``--repeats`` for each, in milliseconds, and each one's ratio to the
unchecked read (one run, so the machine's load affects all alike).
"""

import argparse
import json
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any, Literal

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


def _tensors(scores: list[float], per_prompt: list[list[float]], n_edges: int) -> object:
    if len(scores) != n_edges or len(per_prompt) != n_edges:
        raise ValueError("lengths")
    return torch.tensor(scores), torch.tensor(per_prompt)


def _msgspec() -> Callable[[Path], object] | None:
    try:
        import msgspec
    except ImportError:
        return None
    finite = Annotated[float, msgspec.Meta(ge=-1.7976931348623157e308, le=1.7976931348623157e308)]

    class StoredGraph(msgspec.Struct, forbid_unknown_fields=True):
        n_layers: Annotated[int, msgspec.Meta(ge=1)]
        n_heads: Annotated[int, msgspec.Meta(ge=1)]
        n_kv_heads: Annotated[int, msgspec.Meta(ge=1)]
        has_mlp: bool
        model_name: str
        parallel: bool = False

    class StoredProvenance(msgspec.Struct, forbid_unknown_fields=True):
        model: str
        revision: str | None = None
        dtype: str | None = None
        prompts: str | None = None
        n_prompts: Annotated[int, msgspec.Meta(ge=0)] | None = None
        pairs: str | None = None
        metric: str | None = None
        direction: str | None = None
        settings: str | None = None

    class StoredScores(msgspec.Struct, forbid_unknown_fields=True):
        format: Literal["interv.edge_scores/1"]
        graph: StoredGraph
        scores: list[finite]
        per_prompt: list[list[finite]] | None
        method: Literal["eap", "eap-ig"]
        steps: Annotated[int, msgspec.Meta(ge=1)]
        metric: str
        fingerprint: str
        sentence: str
        direction: Literal["noise", "denoise"]
        qk_fix: bool
        provenance: StoredProvenance
        unit: str

    decoder = msgspec.json.Decoder(StoredScores)

    def read(path: Path) -> object:
        stored = decoder.decode(path.read_bytes())
        graph = Graph(**msgspec.structs.asdict(stored.graph))
        return _tensors(stored.scores, stored.per_prompt or [], graph.n_edges)

    return read


def _pydantic() -> Callable[[Path], object] | None:
    try:
        import pydantic
    except ImportError:
        return None
    from pydantic.dataclasses import dataclass

    config = pydantic.ConfigDict(extra="forbid", allow_inf_nan=False, strict=True)
    finite = Annotated[float, pydantic.Field(allow_inf_nan=False)]
    at_least_1 = Annotated[int, pydantic.Field(ge=1)]

    @dataclass(config=config)
    class StoredGraph:
        n_layers: at_least_1
        n_heads: at_least_1
        n_kv_heads: at_least_1
        has_mlp: bool
        model_name: str
        parallel: bool = False

    @dataclass(config=config)
    class StoredProvenance:
        model: str
        revision: str | None = None
        dtype: str | None = None
        prompts: str | None = None
        n_prompts: Annotated[int, pydantic.Field(ge=0)] | None = None
        pairs: str | None = None
        metric: str | None = None
        direction: str | None = None
        settings: str | None = None

    @dataclass(config=config)
    class StoredScores:
        format: Literal["interv.edge_scores/1"]
        graph: StoredGraph
        scores: list[finite]
        per_prompt: list[list[finite]] | None
        method: Literal["eap", "eap-ig"]
        steps: at_least_1
        metric: str
        fingerprint: str
        sentence: str
        direction: Literal["noise", "denoise"]
        qk_fix: bool
        provenance: StoredProvenance
        unit: str

    adapter = pydantic.TypeAdapter(StoredScores)

    def read(path: Path) -> object:
        stored: Any = adapter.validate_json(path.read_bytes())
        graph = Graph(**vars(stored.graph))
        return _tensors(stored.scores, stored.per_prompt or [], graph.n_edges)

    return read


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as directory:
        path = _file(Path(directory))
        n_edges = EdgeScores.from_dict(json.loads(path.read_text())).graph.n_edges
        print(f"{path.stat().st_size / 1e6:.1f} MB, {n_edges} edges")
        readers = {"unchecked": _unchecked, "interv's typed reader": _typed}
        for name, make in (("msgspec", _msgspec), ("pydantic", _pydantic)):
            reader = make()
            if reader is None:
                print(f"{name}: not installed")
            else:
                readers[name] = reader
        best = {}
        for name, read in readers.items():
            times = []
            for _ in range(args.repeats):
                start = time.perf_counter()
                read(path)
                times.append(time.perf_counter() - start)
            best[name] = min(times)
            ratio = best[name] / best["unchecked"]
            print(f"{name}: {1000 * best[name]:.0f} ms (best of {args.repeats}), {ratio:.2f}x")


if __name__ == "__main__":
    main()
