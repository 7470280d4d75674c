"""Real pretrained models for interv, loaded offline as transformer-lens bridges.

:func:`load_model` is the one entry point; see :mod:`interv.models.loading` for the
specs it accepts. :func:`sentence_embedding` is the embedding-based target for the
MiniLM encoder, whose output logits are meaningless.
"""

from __future__ import annotations

from interv.models.loading import BUILTIN_SPECS, DTYPES, load_model, output_head_is_trained
from interv.models.minilm import sentence_embedding

__all__ = ["BUILTIN_SPECS", "DTYPES", "load_model", "output_head_is_trained", "sentence_embedding"]
