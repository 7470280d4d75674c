"""A random 2-layer GPT-2-shaped Hugging Face model (MLPs, LayerNorm, learned positions) as
a TransformerBridge, and random prompt pairs of 6 tokens: the circuit tests' multi-head
reference model (transformer-lens's edge sweeps accept it; no download)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from interv.tasks.tokenized import TokenizedPairs


def tiny_gpt2(directory: Path, *, n_pairs: int = 3, q_scale: float = 1.0) -> tuple[Any, Any]:
    """``(bridge, task)``: 2 layers x 4 heads, d_model 32, 50 tokens; queries scaled by
    ``q_scale`` (a large one saturates the attention); ``n_pairs`` random pairs."""
    from transformer_lens.model_bridge import TransformerBridge
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    config = GPT2Config(
        n_layer=2,
        n_head=4,
        n_embd=32,
        vocab_size=50,
        n_positions=16,
        resid_pdrop=0.0,
        embd_pdrop=0.0,
        attn_pdrop=0.0,
    )
    hf = GPT2LMHeadModel(config).eval()
    if q_scale != 1.0:
        with torch.no_grad():
            for block in hf.transformer.h:  # c_attn: [d_model, 3 d_model], queries first
                block.attn.c_attn.weight[:, : config.n_embd] *= q_scale
                block.attn.c_attn.bias[: config.n_embd] *= q_scale
    hf.save_pretrained(directory)
    model = TransformerBridge.boot_transformers(str(directory), device="cpu", hf_model=hf).eval()
    generator = torch.Generator().manual_seed(1)

    def draw(*shape: int) -> torch.Tensor:
        return torch.randint(0, 50, shape, generator=generator)

    task = TokenizedPairs(
        draw(n_pairs, 6),
        draw(n_pairs, 6),
        torch.ones(n_pairs, 6, dtype=torch.bool),
        torch.full((n_pairs,), 5),
        draw(n_pairs),
        draw(n_pairs),
        name="random pairs",
    )
    return model, task
