"""Analyses of a whole model: run it once and reduce what its heads do.

- :func:`concentration`: entropy, sink split and value-aware numbers of every head,
  reduced inside the hooks (no attention cache), as a :class:`HeadConcentration`.
"""

from interv.analysis.concentration import METRICS, HeadConcentration, concentration

__all__ = ["METRICS", "HeadConcentration", "concentration"]
