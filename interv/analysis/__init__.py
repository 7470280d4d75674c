"""Analyses of a whole model: run it and reduce what its heads do.

- :mod:`interv.analysis.concentration`: entropy, sink split and value-aware numbers
  of every head, reduced inside the hooks (no attention cache).
- :mod:`interv.analysis.similarity`: head-by-head similarity under keep-sink and
  drop-sink, with the share of "which head is closer" verdicts that flip.
- :mod:`interv.analysis.clustering`: head clusterings under both conventions and
  their agreement.
- :mod:`interv.analysis.attribution`: the change of entropy between two conditions,
  split exactly into sink growth and content sharpening.
- :mod:`interv.analysis.pruning`: heads ranked by each concentration metric, by exact
  effect and by attribution, mean-ablated cumulatively: loss against heads removed.

The public names are re-exported lazily from :mod:`interv`; importing this package
imports nothing heavy.
"""
