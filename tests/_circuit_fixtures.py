"""Hand-made circuits, faithfulness curves and head concentrations as the typed results
(``CircuitResult``, ``FaithfulnessCurve``, ``HeadConcentration``) of one toy model, for the
interface tests: no model runs (the audit is :func:`interv.audit.verify_screen` on given
exact values)."""

from __future__ import annotations

import dataclasses
import math
import random

import torch

from interv.analysis.concentration import METRICS, HeadConcentration
from interv.audit import Screen, verify_screen
from interv.circuits import CircuitResult, EdgeScores, FaithfulnessCurve, Graph
from interv.circuits.curves import cmd, cpr
from interv.circuits.stability import CircuitStability
from interv.provenance import Provenance

MODEL = "toy-2l"
FRACTIONS = (0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0)
PROMPTS = Provenance(MODEL, revision="0" * 16, dtype="float32", prompts="toy-prompts", n_prompts=8)
"""The toy model and prompts every fixture here comes from."""
SCREEN = PROMPTS.replace(
    pairs="toy-pairs", metric="logit_diff", direction="noise", settings="method='eap'"
)
"""The provenance of the toy circuit's screen."""


def make_graph(n_kv: int | None = None) -> Graph:
    """An attention-only graph of 2 layers x 4 heads (``n_kv`` key/value heads)."""
    return Graph(2, 4, 4 if n_kv is None else n_kv, has_mlp=False, model_name=MODEL)


def make_circuit(
    *,
    top_k: int = 4,
    audit: int = 6,
    seed: int = 0,
    n_kv: int | None = None,
    strong: dict[str, float] | None = None,
    provenance: Provenance = SCREEN,
    sentence: str = (
        "EAP scores of every edge (clean run, corrupted sender contributions), the top 4 "
        "and 6 audited edges patched exactly from the corrupted run into the clean run; "
        "effects in logits (logit_diff)"
    ),
    model_name: str = MODEL,
    graph: Graph | None = None,
) -> CircuitResult:
    """A circuit: ``strong`` edges (label -> exact effect) dominate, every other edge is
    small; the top ``top_k`` by score are verified, ``audit`` more audited."""
    rng = random.Random(seed)
    graph = make_graph(n_kv) if graph is None else graph
    labels = [edge.label for edge in graph.edges]
    strong = strong or {
        "L0H1->L1H2.k": 2.0,
        "L1H2->logits": 3.0,
        "L1H0->logits": -1.0,
        "embed->L1H2.q": 0.8,
    }
    true = torch.tensor(
        [strong.get(label, rng.uniform(-0.05, 0.05)) for label in labels], dtype=torch.float64
    )
    scores = true + torch.tensor([rng.uniform(-0.02, 0.02) for _ in labels], dtype=torch.float64)
    checked = verify_screen(
        Screen(top_k=top_k, audit=audit, alpha=None), scores, lambda i: true[i], method="EAP"
    )
    edge_scores = EdgeScores(
        graph=graph,
        scores=scores,
        per_prompt=None,
        method="eap",
        steps=1,
        metric="logit_diff",
        fingerprint="0123456789abcdef",
        sentence="EAP estimates of every edge",
        provenance=provenance,
        unit="logits",
    )
    return CircuitResult(
        graph=graph,
        scores=edge_scores,
        audit=checked,
        fingerprint="0123456789abcdef",
        model_name=model_name,
        task_name="toy-task",
        sentence=sentence,
    )


def make_curve(
    circuit: CircuitResult | None = None, complement: str = "corrupted"
) -> FaithfulnessCurve:
    """A faithfulness curve of ``circuit`` (default :func:`make_circuit`) rising from 0 to 1
    with a band."""
    circuit = make_circuit() if circuit is None else circuit
    mean = [1 - math.exp(-30 * f) for f in FRACTIONS]
    signed = [0.9 * m for m in mean]
    return FaithfulnessCurve(
        fractions=FRACTIONS,
        n_edges_kept=[max(1, round(f * circuit.graph.n_edges)) for f in FRACTIONS],
        per_prompt=torch.tensor([[m] * 8 for m in mean], dtype=torch.float64),
        mean=mean,
        low=[m - 0.1 for m in mean],
        high=[m + 0.1 for m in mean],
        signed_mean=signed,
        m_full=3.0,
        m_empty=0.1,
        cpr=cpr(FRACTIONS, signed),  # the areas of the curve, as faithfulness computes them
        cmd=cmd(FRACTIONS, mean),
        cpr_interval=(0.7, 0.9),
        cmd_interval=(0.1, 0.3),
        complement=complement,
        sentence=(
            "faithfulness (m(C) - m(empty)) / (m(full) - m(empty)) of the top edges by "
            "|score|, every edge outside the circuit patched from the corrupted run; mean over "
            "8 prompts"
        ),
        fingerprint="0123456789abcdef",
        provenance=circuit.provenance.replace(direction=None, settings=None),
        ranking=circuit.provenance,
    )


def make_concentration(
    n_prompts: int = 8, seed: int = 0, provenance: Provenance | None = None
) -> HeadConcentration:
    """The concentration of 2 layers x 4 heads at one query (the last token of 5-token
    prompts): L1H2 and L0H1 concentrated; L0H3 concentrated and sink-parked (outside the
    default circuit)."""
    rng = random.Random(seed)
    base_entropy = {(0, 1): 0.1, (1, 2): 0.15, (0, 3): 0.05}
    base_sink = {(0, 3): 0.9, (1, 2): 0.3}
    values = {name: torch.full((n_prompts, 2, 4, 1), 0.5, dtype=torch.float64) for name in METRICS}
    for p in range(n_prompts):
        for layer in range(2):
            for head in range(4):
                entropy = base_entropy.get((layer, head), 0.6 + 0.05 * head)
                sink = base_sink.get((layer, head), 0.2)
                norm = 1.0 + layer + 0.1 * head
                for name, value in (
                    ("normalized_entropy", entropy),
                    ("sink_mass", sink),
                    ("contribution_norm", norm),
                ):
                    values[name][p, layer, head, 0] = value + rng.uniform(-0.02, 0.02)
    if provenance is None:
        provenance = PROMPTS.replace(n_prompts=n_prompts)
    return HeadConcentration(
        **values,
        n_available_keys=torch.full((n_prompts, 1), 5),
        query_positions=(-1,),
        query_index=torch.full((n_prompts, 1), 4),
        sink_positions=(0,),
        model_name=MODEL,
        prompt_lengths=tuple([5] * n_prompts),
        provenance=provenance,
    )


def with_stability(circuit: CircuitResult, shares: dict[str, float]) -> CircuitResult:
    """``circuit`` with a stability over 50 resamples at sizes 4 and 10: ``shares`` (edge
    label -> inclusion share at both sizes); every other edge of the full-sample circuits
    0.5."""
    graph = circuit.graph
    order = circuit.ranking().tolist()
    index = {edge.label: i for i, edge in enumerate(graph.edges)}
    sizes = (4, 10)
    inclusion = torch.zeros(len(sizes), graph.n_edges, dtype=torch.float64)
    for row, size in enumerate(sizes):
        inclusion[row, order[:size]] = 0.5
        for label, share in shares.items():
            inclusion[row, index[label]] = share
    stability = CircuitStability(
        graph=graph,
        sizes=sizes,
        circuits=tuple(tuple(order[:size]) for size in sizes),
        jaccard=torch.full((len(sizes), 50), 0.5, dtype=torch.float64),
        mean=[0.9, 0.6],
        low=[0.7, 0.4],
        high=[1.0, 0.8],
        inclusion=inclusion,
        n_resamples=50,
        seed=0,
        level=0.95,
        stable_at=0.8,
        n_prompts=8,
        n_verified=4,
        n_exact_computed=0,
        sentence="circuit stability over 50 bootstrap resamples of the 8 prompt pairs",
    )
    return dataclasses.replace(circuit, stability=stability)
