"""Pure concentration math on attention rows: no model, no hooks, only torch.

Every function takes rows of shape ``[..., key]`` (any leading dims, e.g. ``[batch,
head_index, query_pos, key_pos]``) with an optional bool ``key_mask`` (True = the key
is an available candidate: causal AND padding), validates them, and computes in
float64 whatever the input dtype.

- :mod:`~interv.metrics.concentration`: entropy, normalized entropy, effective support,
  max weight, top-k mass, number of available keys;
- :mod:`~interv.metrics.sink`: the exact grouping split of a row's entropy into sink
  and content parts, and of an entropy change between two conditions;
- :mod:`~interv.metrics.sink_heads`: Gu et al.'s sink score of a key and the share of heads
  above a threshold (``Sink_k^eps``), over ``[..., query, key]`` rows;
- :mod:`~interv.metrics.rollout`: attention rollout through the layers (a summary of the
  weights, not a causal effect);
- :mod:`~interv.metrics.compositional`: clr, Aitchison distance and its orthogonal
  sink/content split;
- :mod:`~interv.metrics.compare`: row comparison (cosine, Jensen-Shannon, Aitchison)
  under the keep-sink and drop-sink conventions.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from interv._lazy import lazy_exports

# public name -> module that owns it
_EXPORTS: dict[str, str] = {
    "compare_rows": "interv.metrics.compare",
    "AitchisonSplit": "interv.metrics.compositional",
    "aitchison_distance": "interv.metrics.compositional",
    "aitchison_split": "interv.metrics.compositional",
    "clr": "interv.metrics.compositional",
    "available_keys": "interv.metrics.concentration",
    "effective_support": "interv.metrics.concentration",
    "entropy": "interv.metrics.concentration",
    "max_weight": "interv.metrics.concentration",
    "normalized_entropy": "interv.metrics.concentration",
    "top_k_mass": "interv.metrics.concentration",
    "EntropyChange": "interv.metrics.sink",
    "SinkSplit": "interv.metrics.sink",
    "entropy_change": "interv.metrics.sink",
    "mean_entropy_change": "interv.metrics.sink",
    "sink_split": "interv.metrics.sink",
    "GU_EPS": "interv.metrics.sink_heads",
    "SinkRate": "interv.metrics.sink_heads",
    "sink_rate": "interv.metrics.sink_heads",
    "sink_scores": "interv.metrics.sink_heads",
    "attention_rollout": "interv.metrics.rollout",
}


__all__ = sorted(_EXPORTS)

__getattr__, __dir__ = lazy_exports("interv.metrics", _EXPORTS, globals())


if TYPE_CHECKING:  # pragma: no cover - static analysers see the real names
    from interv.metrics.compare import compare_rows
    from interv.metrics.compositional import (
        AitchisonSplit,
        aitchison_distance,
        aitchison_split,
        clr,
    )
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
    from interv.metrics.sink_heads import GU_EPS, SinkRate, sink_rate, sink_scores
