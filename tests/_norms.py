"""Norm modules of each form interv identifies (interv.engine.norms.norm_form), and one of
none, for the tests of the norm's identification, GIM's frozen norms and the QK fix."""

from __future__ import annotations

import torch


class Gemma3Norm(torch.nn.Module):
    """Gemma's RMSNorm as Hugging Face writes it: the gain is ``1 + weight``."""

    def __init__(self, d: int):
        super().__init__()
        self.eps = 1e-6
        self.weight = torch.nn.Parameter(torch.randn(d) * 0.1)

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * (1 + self.weight)


class MaxNorm(torch.nn.Module):
    """A norm of neither form (by the largest entry), with a norm's weight and eps."""

    def __init__(self, d: int):
        super().__init__()
        self.eps = 1e-6
        self.weight = torch.nn.Parameter(torch.ones(d))

    def forward(self, x):
        return self.weight * x / x.abs().amax(-1, keepdim=True)


def norms(d: int = 16) -> dict[str, torch.nn.Module]:
    """Llama's RMSNorm, Gemma's, torch's LayerNorm (random weights and bias) and a MaxNorm."""
    from transformers.models.llama.modeling_llama import LlamaRMSNorm

    llama = LlamaRMSNorm(d, eps=1e-5)
    layer = torch.nn.LayerNorm(d)
    with torch.no_grad():
        llama.weight.copy_(torch.randn(d))
        layer.weight.copy_(torch.randn(d))
        layer.bias.copy_(torch.randn(d))
    return {"llama": llama, "gemma": Gemma3Norm(d), "layernorm": layer, "max": MaxNorm(d)}
