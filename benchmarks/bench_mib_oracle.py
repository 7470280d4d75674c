"""MIB's own code as the oracle for interv's MIB files and ``convention="mib"`` circuits.

    python benchmarks/bench_mib_oracle.py --eap-ig PATH [--seed 0] [--quick]

``PATH``: a local checkout of hannamw/EAP-IG at the commit MIB-circuit-track pins (7af394a),
its ``src`` folder or the repository root (nothing is downloaded, nothing of it is copied
into interv). Its ``graph.py`` imports transformer-lens's ``HookedTransformer``, gone in
transformer-lens 4: the benchmark puts a stand-in module in ``sys.modules`` for the import
only (MIB's graph code never calls it when given a config dict).

For each shape (2 x 2, 4 x 4 sequential and parallel, GPT-2 small 12 x 12) and each ranking
(EdgeScores noising, EdgeScores denoising, a CircuitResult whose checked-first ranking differs
from MIB's), interv writes its MIB file; MIB's ``Graph.from_json`` reads it; at each of MIB's
10 percentages MIB's ``apply_topn(int(p N), absolute, prune=True)`` and a second ``prune()``
(as ``evaluate_graph`` does) give the circuit MIB evaluates, compared edge by edge with the circuit
``faithfulness(..., convention="mib")`` evaluates (``_curve_masks``), absolute and signed.
Also: MIB's edge count of every shape against ``mib_edge_count``, MIB's ``to_pt`` read by
``read_mib_circuit``, and MIB's ``to_json`` of its own graph read back identically. Prints one
line per check and the number of disagreements (0 expected; scores are random, so no ties).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import types
from pathlib import Path

import torch

from interv.audit import Screen, verify_screen
from interv.circuits import CircuitResult, EdgeScores, Graph
from interv.circuits.curves import MIB_FRACTIONS, _curve_masks
from interv.circuits.mib import (
    mib_edge_count,
    mib_layout,
    mib_sizes,
    read_mib_circuit,
    write_mib_circuit,
)
from interv.provenance import Provenance


def _mib_graph_module(path: Path) -> types.ModuleType:
    src = path / "src" if (path / "src" / "eap").is_dir() else path
    if not (src / "eap" / "graph.py").is_file():
        raise SystemExit(f"{path}: no eap/graph.py (give EAP-IG's checkout or its src folder)")
    stand_in = types.ModuleType("transformer_lens")

    class HookedTransformer:  # never instantiated: MIB's graph is built from a config dict
        pass

    class HookedTransformerConfig:
        pass

    stand_in.HookedTransformer = HookedTransformer
    stand_in.HookedTransformerConfig = HookedTransformerConfig
    saved = sys.modules.get("transformer_lens")
    sys.modules["transformer_lens"] = stand_in
    sys.path.insert(0, str(src))
    try:
        import eap.graph as mib_graph
    finally:
        sys.path.remove(str(src))
        if saved is not None:
            sys.modules["transformer_lens"] = saved
        else:
            del sys.modules["transformer_lens"]
    return mib_graph


def _edge_scores(graph: Graph, values: torch.Tensor, direction: str) -> EdgeScores:
    return EdgeScores(
        graph=graph,
        scores=values,
        per_prompt=None,
        method="eap",
        steps=1,
        metric="logit_diff",
        fingerprint="0" * 16,
        sentence="random estimates",
        provenance=Provenance("oracle", n_prompts=4, metric="logit_diff", direction=direction),
        unit="logits",
        direction=direction,
    )


def _rankings(graph: Graph, generator: torch.Generator) -> dict[str, object]:
    values = torch.randn(graph.n_edges, generator=generator, dtype=torch.float64)
    noise = _edge_scores(graph, values, "noise")
    # checked edges: the top 5% by |estimate|; their exact effects shrunk, so that checked
    # first and MIB's |score| order differ
    exact = values * torch.where(torch.rand(graph.n_edges, generator=generator) < 0.5, 0.1, 1.0)
    top_k = max(2, graph.n_edges // 20)
    audit = verify_screen(Screen(top_k=top_k, audit=0, alpha=None), values, lambda i: exact[i])
    result = CircuitResult(graph, noise, audit, "0" * 16, "oracle", "random", "random")
    return {
        "EdgeScores noise": noise,
        "EdgeScores denoise": _edge_scores(graph, values, "denoise"),
        "CircuitResult": result,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--eap-ig", type=Path, required=True)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--quick", action="store_true", help="leave out GPT-2 small's shape")
    args = parser.parse_args()
    mib = _mib_graph_module(args.eap_ig)
    generator = torch.Generator().manual_seed(args.seed)
    shapes = [(2, 2, False), (4, 4, False), (4, 4, True), (12, 12, False)]
    shapes = shapes[:-1] if args.quick else shapes
    disagreements = 0
    with tempfile.TemporaryDirectory() as tmp:
        for n_layers, n_heads, parallel in shapes:
            graph = Graph(n_layers, n_heads, n_heads, parallel=parallel, model_name="oracle")
            cfg = {"n_layers": n_layers, "n_heads": n_heads, "parallel_attn_mlp": parallel}
            theirs = mib.Graph.from_model({**cfg, "d_model": 8})
            names, _ = mib_layout(graph)
            same = len(theirs.edges) == mib_edge_count(graph) == graph.n_edges
            same &= set(theirs.edges) == set(names)
            disagreements += not same
            shape = f"{n_layers}x{n_heads}{' parallel' if parallel else ''}"
            print(f"{shape}: MIB {len(theirs.edges)} edges, interv {mib_edge_count(graph)}: {same}")
            # MIB's own files read by interv: to_json and to_pt
            theirs.scores[:] = torch.randn(theirs.scores.shape, generator=generator)
            theirs.in_graph[:] = torch.rand(theirs.scores.shape, generator=generator) < 0.3
            theirs.in_graph &= theirs.real_edge_mask
            for suffix, save in (("json", theirs.to_json), ("pt", theirs.to_pt)):
                path = Path(tmp) / f"theirs_{shape.replace(' ', '_')}.{suffix}"
                save(str(path))
                read = read_mib_circuit(path, graph)
                ok = all(
                    float(read.scores[i]) == float(theirs.edges[n].score)
                    and bool(read.in_graph[i]) == bool(theirs.edges[n].in_graph)
                    for i, n in enumerate(names)
                )
                disagreements += not ok
                print(f"{shape}: MIB's to_{suffix} read by interv, every score and in_graph: {ok}")
            sizes = mib_sizes(MIB_FRACTIONS, graph.n_edges)
            for label, ranking in _rankings(graph, generator).items():
                path = Path(tmp) / f"{label.replace(' ', '_')}_{shape.replace(' ', '_')}.json"
                write_mib_circuit(path, ranking, d_model=8, n_edges=sizes[6], overwrite=True)
                loaded = mib.Graph.from_json(str(path))
                masks, *_ = _curve_masks(ranking, graph, MIB_FRACTIONS, sizes, "mib", False)
                wrong = 0
                for half, absolute in enumerate((True, False)):
                    for j, n in enumerate(sizes):
                        loaded.apply_topn(n, absolute, prune=True)
                        loaded.prune()  # evaluate_graph prunes again
                        kept = {name for name, e in loaded.edges.items() if e.in_graph}
                        ours = {names[i] for i in masks[half * len(sizes) + j].nonzero().flatten()}
                        wrong += kept != ours
                # the file's in_graph is the circuit MIB evaluates for its own top-n of the
                # file (apply_topn's one prune pass, then evaluate_graph's prune)
                loaded = mib.Graph.from_json(str(path))
                in_file = {name for name, e in loaded.edges.items() if e.in_graph}
                loaded.apply_topn(sizes[6], True, prune=True)
                loaded.prune()
                wrong += in_file != {name for name, e in loaded.edges.items() if e.in_graph}
                disagreements += wrong
                print(f"{shape}, {label}: circuits differing from MIB's (of 21): {wrong}")
            # the signed order puts the most helpful edge first in both directions
            values = torch.randn(graph.n_edges, generator=generator, dtype=torch.float64)
            for direction, sign in (("noise", -1.0), ("denoise", 1.0)):
                path = Path(tmp) / f"sign_{direction}.json"
                write_mib_circuit(
                    path, _edge_scores(graph, values, direction), d_model=8, overwrite=True
                )
                loaded = mib.Graph.from_json(str(path))
                loaded.apply_topn(1, False, prune=False)
                top = next(name for name, e in loaded.edges.items() if e.in_graph)
                helpful = names[int(torch.argmax(sign * values))]
                disagreements += top != helpful
                print(f"{shape}, {direction}: signed top is the most helpful: {top == helpful}")
    print(json.dumps({"disagreements": disagreements}))


if __name__ == "__main__":
    main()
