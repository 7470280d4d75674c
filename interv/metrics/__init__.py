"""Pure concentration math on attention rows: no model, no hooks, only torch.

Every function takes rows of shape ``[..., key]`` (any leading dims, e.g. ``[batch,
head_index, query_pos, key_pos]``) with an optional bool ``key_mask`` (True = the key
is an available candidate: causal AND padding), validates them, and computes in
float64 whatever the input dtype.

- :mod:`~interv.metrics.concentration`: entropy, normalized entropy, effective support,
  max weight, top-k mass, number of available keys;
- :mod:`~interv.metrics.sink`: the exact grouping split of a row's entropy into sink
  and content parts, and of an entropy change between two conditions;
- :mod:`~interv.metrics.sink_rate`: Gu et al.'s sink score of a key and the share of heads
  above a threshold (``Sink_k^eps``), over ``[..., query, key]`` rows;
- :mod:`~interv.metrics.rollout`: attention rollout through the layers (a summary of the
  weights, not a causal effect);
- :mod:`~interv.metrics.compositional`: clr, Aitchison distance and its orthogonal
  sink/content split;
- :mod:`~interv.metrics.compare`: row comparison (cosine, Jensen-Shannon, Aitchison)
  under the keep-sink and drop-sink conventions.
"""

from interv.metrics.compare import compare_rows
from interv.metrics.compositional import AitchisonSplit, aitchison_distance, aitchison_split, clr
from interv.metrics.concentration import (
    available_keys,
    effective_support,
    entropy,
    max_weight,
    normalized_entropy,
    top_k_mass,
)
from interv.metrics.rollout import attention_rollout
from interv.metrics.sink import (
    EntropyChange,
    SinkSplit,
    entropy_change,
    mean_entropy_change,
    sink_split,
)
from interv.metrics.sink_rate import GU_EPS, SinkRate, sink_rate, sink_scores

__all__ = [
    "GU_EPS",
    "AitchisonSplit",
    "EntropyChange",
    "SinkRate",
    "SinkSplit",
    "aitchison_distance",
    "aitchison_split",
    "attention_rollout",
    "available_keys",
    "clr",
    "compare_rows",
    "effective_support",
    "entropy",
    "entropy_change",
    "max_weight",
    "mean_entropy_change",
    "normalized_entropy",
    "sink_rate",
    "sink_scores",
    "sink_split",
    "top_k_mass",
]
