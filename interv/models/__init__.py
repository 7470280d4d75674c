"""Real pretrained models for interv, loaded offline as transformer-lens bridges.

:func:`load_model` is the one entry point; see :mod:`interv.models.loading` for the
specs it accepts. :func:`sentence_embedding` is the embedding-based target for the
MiniLM encoder, whose output logits are meaningless.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from interv._lazy import lazy_exports

# public name -> module that owns it
_EXPORTS: dict[str, str] = {
    "BUILTIN_SPECS": "interv.models.loading",
    "DTYPES": "interv.models.loading",
    "load_model": "interv.models.loading",
    "model_revision": "interv.models.loading",
    "output_head_is_trained": "interv.models.loading",
    "sentence_embedding": "interv.models.minilm",
}

__all__ = sorted(_EXPORTS)

__getattr__, __dir__ = lazy_exports("interv.models", _EXPORTS, globals())


if TYPE_CHECKING:  # pragma: no cover - static analysers see the real names
    from interv.models.loading import (
        BUILTIN_SPECS,
        DTYPES,
        load_model,
        model_revision,
        output_head_is_trained,
    )
    from interv.models.minilm import sentence_embedding
