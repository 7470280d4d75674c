"""Turn shipped zoo files (config, safetensors weights, tokenizer) into a TransformerBridge.

Zoo weights are the state dict of transformer-lens's native model
(``transformer_lens.model_bridge.sources.native.NativeModel``) *before* the bridge
wraps it, so their keys are short (``layers.0.attn.q.weight``) and independent of the
bridge's wrapping.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
from safetensors.torch import load_file
from transformer_lens.config import TransformerBridgeConfig
from transformer_lens.model_bridge.sources import build_bridge_from_module
from transformer_lens.model_bridge.sources.native import NativeModel, initialize_native_model
from transformers import PreTrainedTokenizerFast

from interv.errors import IntervError
from interv.zoo._registry import FINAL_WEIGHTS_FILE, card, checkpoint_file, data_dir

if TYPE_CHECKING:
    from transformer_lens.model_bridge import TransformerBridge

__all__ = ["bridge_from_native", "load", "native_model"]


def native_model(config: dict[str, Any], *, seed: int | None = None) -> NativeModel:
    """A native model of ``config``; initialized from ``seed``, or left uninitialized
    (to be overwritten by a state dict) when ``seed`` is None."""
    tl_config = TransformerBridgeConfig(**config, seed=seed, init_weights=seed is not None)
    # nn.Linear's default init draws from the global RNG; keep the caller's RNG intact.
    with torch.random.fork_rng(devices=[]):
        model = NativeModel(tl_config)
        if seed is not None:
            initialize_native_model(model, tl_config)
    return model


def bridge_from_native(
    model: NativeModel, *, tokenizer_dir: Path, name: str, device: str | torch.device = "cpu"
) -> TransformerBridge:
    """Wrap ``model`` (modified in place) in a TransformerBridge in eval mode, with the zoo
    tokenizer saved in ``tokenizer_dir``."""
    tokenizer = PreTrainedTokenizerFast.from_pretrained(tokenizer_dir)
    model = model.to(device)
    bridge = build_bridge_from_module(
        model,
        "TransformerLensNative",
        tl_config=model.cfg,
        tokenizer=tokenizer,
        model_name=f"interv-zoo/{name}",
    )
    return bridge.eval()


def load_weights(model: NativeModel, path: Path) -> None:
    """Copy the safetensors state dict at ``path`` into ``model`` (all keys must match)."""
    model.load_state_dict(load_file(path), strict=True)


def load(
    name: str, *, checkpoint: int | None = None, device: str | torch.device = "cpu"
) -> TransformerBridge:
    """Zoo model ``name`` as a TransformerBridge in eval mode, offline.

    ``checkpoint`` is a training step among :func:`interv.zoo.checkpoints` (weights
    saved after that many optimizer steps); None loads the final weights.
    """
    zoo_card = card(name)
    directory = data_dir(name)
    if checkpoint is None:
        weights = directory / FINAL_WEIGHTS_FILE
    elif checkpoint in zoo_card.checkpoints:
        weights = directory / checkpoint_file(checkpoint)
    else:
        raise IntervError(
            f"zoo model {name!r} has no checkpoint at step {checkpoint!r}; shipped steps: "
            f"{', '.join(str(step) for step in zoo_card.checkpoints)} (None = final weights)"
        )
    model = native_model(zoo_card.recipe.config)
    load_weights(model, weights)
    return bridge_from_native(model, tokenizer_dir=directory, name=name, device=device)
