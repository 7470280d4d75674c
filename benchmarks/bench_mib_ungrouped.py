"""MIB's own graph code reads interv's circuit file of a grouped-query model (ungrouped graph).

    python benchmarks/bench_mib_ungrouped.py --eap-ig PATH --kv-heads 3 DIR/mib_circuit.json

``PATH``: a local checkout of hannamw/EAP-IG at the commit MIB-circuit-track pins (7af394a),
or its ``src`` folder (nothing is downloaded or copied into interv); its ``graph.py`` imports
transformer-lens's ``HookedTransformer``, gone in transformer-lens 4, so a stand-in module
serves the import only (MIB's graph is built from the file's config). The file: e.g. the
``mib_circuit.json`` of ``interv circuit smollm2-135m --task ioi --convention mib --kv
ungrouped ...``; ``--kv-heads``: the model's key/value heads (3 for SmolLM2-135M, 2 for
Qwen-2.5-0.5B; MIB's config does not carry them).

MIB's ``Graph.from_json`` reads the file; at each of MIB's 10 percentages MIB's
``apply_topn(int(p N), absolute)`` and ``prune()`` repeated to its fixed point (MIB's
``evaluate_graph`` prunes again: the pinned ``prune`` makes one pass) give the circuit MIB
evaluates; interv's reading of the same file (``read_mib_circuit`` against
``Graph(..., kv="ungrouped")``, MIB's order of the scores, ``prune``) gives interv's. Prints
both edge counts per size, absolute and signed, and whether the edge sets are identical.
"""

from __future__ import annotations

import argparse
import json
import sys
import types
from pathlib import Path

import torch

from interv.circuits.graph import Graph
from interv.circuits.mib import mib_edge_name, mib_sizes, prune, read_mib_circuit

FRACTIONS = (0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0)


def _mib_graph_class(path: Path) -> type:
    src = path / "src" if (path / "src" / "eap").is_dir() else path
    if not (src / "eap" / "graph.py").is_file():
        raise SystemExit(f"{path}: no eap/graph.py (give EAP-IG's checkout or its src folder)")
    stand_in = types.ModuleType("transformer_lens")
    stand_in.HookedTransformer = type("HookedTransformer", (), {})
    stand_in.HookedTransformerConfig = type("HookedTransformerConfig", (), {})
    saved = sys.modules.get("transformer_lens")
    sys.modules["transformer_lens"] = stand_in
    sys.path.insert(0, str(src))
    try:
        from eap.graph import Graph as MIBGraph
    finally:
        if saved is None:
            del sys.modules["transformer_lens"]
        else:
            sys.modules["transformer_lens"] = saved
    return MIBGraph


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("file", type=Path, help="interv's MIB circuit file (JSON)")
    parser.add_argument("--eap-ig", type=Path, required=True, help="EAP-IG checkout (7af394a)")
    parser.add_argument("--kv-heads", type=int, required=True, help="the model's key/value heads")
    args = parser.parse_args()
    mib_graph = _mib_graph_class(args.eap_ig).from_json(str(args.file))
    cfg = json.loads(args.file.read_text())["cfg"]
    graph = Graph(cfg["n_layers"], cfg["n_heads"], args.kv_heads, kv="ungrouped")
    circuit = read_mib_circuit(args.file, graph)
    if circuit.scores is None:
        raise SystemExit(f"{args.file} scores no edge: nothing to rank")
    names = [mib_edge_name(edge) for edge in graph.edges]
    print(f"MIB's graph: {len(mib_graph.edges)} edges; interv's ungrouped graph: {graph.n_edges}")
    differ = 0
    for absolute in (True, False):
        key = -circuit.scores.abs() if absolute else -circuit.scores
        order = torch.sort(key, stable=True).indices
        for fraction, n in zip(FRACTIONS, mib_sizes(FRACTIONS, graph.n_edges), strict=True):
            mib_graph.apply_topn(n, absolute=absolute)
            saved = int(mib_graph.in_graph.sum())
            while True:
                before = mib_graph.in_graph.clone()
                mib_graph.prune()
                if torch.equal(before, mib_graph.in_graph):
                    break
            theirs = {name for name, edge in mib_graph.edges.items() if edge.in_graph}
            mask = torch.zeros(graph.n_edges, dtype=torch.bool)
            mask[order[:n]] = True
            ours = {names[i] for i in prune(graph, mask).nonzero().flatten().tolist()}
            differ += theirs != ours
            print(
                f"{'absolute' if absolute else 'signed'} {fraction:g}: int(p N) = {n}; MIB "
                f"saves {saved}, evaluates {len(theirs)}; interv {len(ours)}; "
                f"{'identical' if theirs == ours else 'DIFFERENT'}"
            )
    print(f"{differ} of {2 * len(FRACTIONS)} circuits differ")
    return int(differ > 0)


if __name__ == "__main__":
    raise SystemExit(main())
