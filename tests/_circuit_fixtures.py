"""Hand-made circuits, faithfulness curves and concentration tables in their serialized
forms (``CircuitResult.to_dict()``, ``FaithfulnessCurve.to_dict()``), for the interface
tests: no model."""

from __future__ import annotations

import math
import random
from typing import Any

MODEL = "toy-2l"
FRACTIONS = [0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0]


def graph_edges(n_layers: int = 2, n_heads: int = 4, n_kv: int | None = None) -> list[str]:
    """Edge labels of an attention-only model in a canonical order (q/k/v inputs, logits);
    with ``n_kv`` key/value heads, k and v edges name the key/value head."""
    edges = []
    senders_by_layer: list[list[str]] = [["embed"]]
    for layer in range(n_layers):
        senders = [s for group in senders_by_layer for s in group]
        for receiver in range(n_heads):
            for sender in senders:
                edges.append(f"{sender}->L{layer}H{receiver}.q")
        kv_heads = range(n_heads if n_kv is None else n_kv)
        name = "H" if n_kv is None else "KV"
        for kv in kv_heads:
            for sender in senders:
                for part in ("k", "v"):
                    edges.append(f"{sender}->L{layer}{name}{kv}.{part}")
        senders_by_layer.append([f"L{layer}H{h}" for h in range(n_heads)])
    for sender in [s for group in senders_by_layer for s in group]:
        edges.append(f"{sender}->logits")
    return edges


def make_circuit(
    *,
    top_k: int = 4,
    audit: int = 6,
    seed: int = 0,
    n_kv: int | None = None,
    strong: dict[str, float] | None = None,
) -> dict[str, Any]:
    """A circuit dict: ``strong`` edges (label -> exact effect) dominate, every other edge
    is small; the top ``top_k`` by score are verified, ``audit`` more audited."""
    rng = random.Random(seed)
    edges = graph_edges(n_kv=n_kv)
    strong = strong or {
        "L0H1->L1H2.k": 2.0,
        "L1H2->logits": 3.0,
        "L1H0->logits": -1.0,
        "embed->L1H2.q": 0.8,
    }
    true = [strong.get(e, rng.uniform(-0.05, 0.05)) for e in edges]
    scores = [v + rng.uniform(-0.02, 0.02) for v in true]
    order = sorted(range(len(edges)), key=lambda i: -abs(scores[i]))
    verified = set(order[:top_k])
    rest = order[top_k:]
    audited = set(rng.sample(rest, audit))
    status = [
        "exact (verified)" if i in verified else "exact (audit)" if i in audited else "estimated"
        for i in range(len(edges))
    ]
    exact = [None if s == "estimated" else true[i] for i, s in enumerate(status)]
    threshold = min(abs(true[i]) for i in verified)
    return {
        "format": "interv.circuit/1",
        "model": MODEL,
        "task": "toy-task",
        "fingerprint": "0123456789abcdef",
        "method": "eap",
        "steps": 1,
        "qk_fix": False,
        "metric": "logit_diff",
        "n_prompts": 8,
        "unit": "logits",
        "edges": edges,
        "scores": scores,
        "exact": exact,
        "status": status,
        "audit": {
            "screen": {
                "top_k": top_k,
                "audit": audit,
                "alpha": None,
                "budget": None,
                "step": None,
                "level": 0.95,
                "seed": 0,
            },
            "misses": 0,
            "audited": sorted(audited),
            "threshold": threshold,
            "miss_bound": 1 - 0.05 ** (1 / audit),
            "rank_agreement": 0.9,
            "rank_interval": [0.7, 1.0],
        },
        "sentence": (
            "EAP scores of every edge (clean run, corrupted sender contributions), the top 4 "
            "and 6 audited edges patched exactly from the corrupted run into the clean run; "
            "effects in logits (logit_diff)"
        ),
    }


def make_curve(complement: str = "corrupted") -> dict[str, Any]:
    """A faithfulness curve rising from 0 to 1 with a band."""
    mean = [1 - math.exp(-30 * f) for f in FRACTIONS]
    return {
        "format": "interv.faithfulness/1",
        "fingerprint": "0123456789abcdef",
        "fractions": FRACTIONS,
        "n_edges_kept": [max(1, round(f * 81)) for f in FRACTIONS],
        "per_prompt": [[m] * 8 for m in mean],
        "mean": mean,
        "low": [m - 0.1 for m in mean],
        "high": [m + 0.1 for m in mean],
        "signed_mean": [0.9 * m for m in mean],
        "m_full": 3.0,
        "m_empty": 0.1,
        "cpr": 0.8,
        "cmd": 0.2,
        "complement": complement,
        "sentence": (
            "faithfulness (m(C) - m(empty)) / (m(full) - m(empty)) of the top edges by |score|, "
            "every edge outside the circuit patched from the corrupted run; mean over 8 prompts"
        ),
    }


def make_table(n_prompts: int = 8, seed: int = 0) -> dict[str, Any]:
    """A concentration table of 2 layers x 4 heads: L1H2 and L0H1 concentrated; L0H3
    concentrated and sink-parked (outside the default circuit)."""
    rng = random.Random(seed)
    base_entropy = {(0, 1): 0.1, (1, 2): 0.15, (0, 3): 0.05}
    base_sink = {(0, 3): 0.9, (1, 2): 0.3}
    per_prompt: dict[str, list] = {
        "normalized_entropy": [],
        "sink_mass": [],
        "contribution_norm": [],
    }
    for _ in range(n_prompts):
        for name in per_prompt:
            grid = []
            for layer in range(2):
                row = []
                for head in range(4):
                    if name == "normalized_entropy":
                        value = base_entropy.get((layer, head), 0.6 + 0.05 * head)
                    elif name == "sink_mass":
                        value = base_sink.get((layer, head), 0.2)
                    else:
                        value = 1.0 + layer + 0.1 * head
                    row.append(value + rng.uniform(-0.02, 0.02))
                grid.append(row)
            per_prompt[name].append(grid)
    return {
        "model": MODEL,
        "n_prompts": n_prompts,
        "query_positions": [-1],
        "sink_positions": [0],
        "scope": f"model {MODEL}; {n_prompts} prompts; query positions [-1]",
        "per_prompt": per_prompt,
    }


def with_stability(circuit: dict[str, Any], shares: dict[str, float]) -> dict[str, Any]:
    """``circuit`` with a stored stability (``CircuitStability.to_dict()``'s form) over 50
    resamples at sizes 4 and 10: ``shares`` (edge label -> inclusion share at both sizes);
    every other edge of the full-sample circuits 0.5."""
    order = sorted(
        range(len(circuit["edges"])),
        key=lambda i: (
            circuit["exact"][i] is None,
            -abs(circuit["exact"][i] or circuit["scores"][i]),
        ),
    )
    index = {label: i for i, label in enumerate(circuit["edges"])}
    inclusion, circuits = [], []
    for size in (4, 10):
        chosen = order[:size]
        share = {i: 0.5 for i in chosen} | {index[label]: v for label, v in shares.items()}
        held = sorted(share)
        inclusion.append({"edges": held, "share": [share[i] for i in held]})
        circuits.append(chosen)
    return {
        **circuit,
        "stability": {
            "format": "interv.circuit_stability/1",
            "sizes": [4, 10],
            "circuits": circuits,
            "mean": [0.9, 0.6],
            "low": [0.7, 0.4],
            "high": [1.0, 0.8],
            "inclusion": inclusion,
            "n_resamples": 50,
            "stable_at": 0.8,
            "sentence": "circuit stability over 50 bootstrap resamples of the 8 prompt pairs",
        },
    }
