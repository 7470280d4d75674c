"""The intervention engine: sites, the intervention protocol, one forward primitive, one runner.

- :mod:`interv.engine.architecture`: what a model's family computes, read once per model
  (:func:`~interv.engine.architecture.architecture_of`): the keys each layer admits (causal or
  bidirectional, padding, sliding window, chunk), the off-row sink, gates, soft caps, norms
  and write paths; one-line refusals of what interv cannot model exactly.
- :mod:`interv.engine.sites`: :class:`~interv.engine.sites.Site` (component, layer, head,
  positions) and the only place transformer-lens hook names are spelled.
- :mod:`interv.engine.forward`: :func:`~interv.engine.forward.forward`, the one way interv
  runs a model (device, masks, hooks, captures, readouts, early stop, prefix reuse).
- :mod:`interv.engine.protocol`: what an intervention declares (sites it edits, what it
  reads, how it writes, its semantics sentence) and how a kind registers;
  :mod:`interv.engine.registry`: the lookups of registered kinds, built-ins included.
- :mod:`interv.engine.interventions`: the built-in kinds (ablations, patches, value and
  routing edits, pair ablations, combinations); :mod:`interv.engine.directions`: kinds
  built only on the public protocol (steering vectors, projections, subspace patches);
  :mod:`interv.engine.paths`: direct effects and path patching.
- :mod:`interv.engine.stacking`: base runs (shared across calls by a ``BaseRunCache``),
  and many edited copies in one forward.
- :mod:`interv.engine.targets`: target metrics read at the answer position.
- :mod:`interv.engine.runner`: :func:`~interv.engine.runner.run` (and ``screen=``).
- :mod:`interv.engine.screening`: screened runs: every ablation or patch estimated (by
  attribution, integrated gradients, GIM or the HVP correction), the top and an audit sample
  intervened on exactly (:mod:`interv.audit`); :mod:`interv.engine.second_order`: the
  second-order term of each patch along its own direction (Hessian-vector products, stacked
  copies).
- :mod:`interv.engine.attribution_patching`: attribution patching, a first-order approximation
  of head patching (one forward and one backward), for screening only.
- :mod:`interv.engine.results`: the typed result of a run.
"""

from __future__ import annotations

from interv._lazy import lazy_exports

# no re-exports: a submodule resolves on attribute access (interv.engine.stacking)
__getattr__, __dir__ = lazy_exports("interv.engine", {}, globals())
