"""Circuits, found and checked: edge screens (EAP, EAP-IG) verified by exact path patching.

- :class:`Graph`, :class:`Node`, :class:`Edge` (:mod:`interv.circuits.graph`): the
  residual-stream graph, grouped-query attention native.
- :func:`edge_scores` (:mod:`interv.circuits.screens`): EAP and EAP-IG estimates of every
  edge at once; with ``gim=GIM()`` (:mod:`interv.engine.backward`) by GIM's backward.
- :func:`edge_effects` (:mod:`interv.circuits.patching`): exact path patching of edges.
- :func:`discover` (:mod:`interv.circuits.discovery`): screen, verify the top, audit the
  rest (:func:`interv.audit.verify_screen`), per-edge status.
- :func:`faithfulness`, :func:`cpr`, :func:`cmd` (:mod:`interv.circuits.curves`):
  MIB's faithfulness curve, exact, with bootstrap intervals.
- :func:`greedy_order` (:mod:`interv.circuits.greedy`): greedy circuits, grown from the
  logits.
- :func:`mission_link` (:mod:`interv.circuits.mission`): a circuit's heads beside their
  concentration, and how the two rank.
- :mod:`interv.circuits.store`: a discovery that resumes after a kill (``discover_in``).
- :func:`circuit_stability` (:mod:`interv.circuits.stability`): the circuit found again on
  bootstrap resamples of the prompts (Jaccard, per-edge inclusion).
- :func:`stability_selection` (:mod:`interv.circuits.selection`): the circuit chosen by
  stability selection over half subsamples of the prompts, with its false-edge bound.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from interv._lazy import lazy_exports

# public name -> module that owns it
_EXPORTS: dict[str, str] = {
    "Node": "interv.circuits.graph",
    "Edge": "interv.circuits.graph",
    "Graph": "interv.circuits.graph",
    "edge_effects": "interv.circuits.patching",
    "edge_scores": "interv.circuits.screens",
    "EdgeScores": "interv.circuits.screens",
    "GIM": "interv.engine.backward",
    "discover": "interv.circuits.discovery",
    "CircuitResult": "interv.circuits.discovery",
    "faithfulness": "interv.circuits.curves",
    "FaithfulnessCurve": "interv.circuits.curves",
    "MIB_FRACTIONS": "interv.circuits.curves",
    "cpr": "interv.circuits.curves",
    "cmd": "interv.circuits.curves",
    "greedy_order": "interv.circuits.greedy",
    "MissionLink": "interv.circuits.mission",
    "mission_link": "interv.circuits.mission",
    "circuit_stability": "interv.circuits.stability",
    "CircuitStability": "interv.circuits.stability",
    "stability_selection": "interv.circuits.selection",
    "StableCircuit": "interv.circuits.selection",
    "RayExecutor": "interv.circuits.executor",
}

__all__ = sorted(_EXPORTS)

__getattr__, __dir__ = lazy_exports("interv.circuits", _EXPORTS, globals())


if TYPE_CHECKING:  # pragma: no cover - static analysers see the real names
    from interv.circuits.curves import (
        MIB_FRACTIONS,
        FaithfulnessCurve,
        cmd,
        cpr,
        faithfulness,
    )
    from interv.circuits.discovery import CircuitResult, discover
    from interv.circuits.executor import RayExecutor
    from interv.circuits.graph import Edge, Graph, Node
    from interv.circuits.greedy import greedy_order
    from interv.circuits.mission import MissionLink, mission_link
    from interv.circuits.patching import edge_effects
    from interv.circuits.screens import EdgeScores, edge_scores
    from interv.circuits.selection import StableCircuit, stability_selection
    from interv.circuits.stability import CircuitStability, circuit_stability
    from interv.engine.backward import GIM
