"""The HVP tests' quadratic oracle, shared by the edge and the node screens' tests: a native
2-layer attention-only bridge whose norms are linear (a huge epsilon), 3 random prompt pairs,
and a squared logit-difference metric, so the metric is a quadratic of any patch and the
second-order correction is exact."""

from __future__ import annotations

import torch

from interv.engine.targets import TargetMetric
from interv.tasks.tokenized import TokenizedPairs


def _squared_logit_diff(logits, target_ids, foil_ids, clean_logits=None):
    diff = logits.gather(-1, target_ids.unsqueeze(-1)) - logits.gather(-1, foil_ids.unsqueeze(-1))
    return diff.squeeze(-1) ** 2


SQUARED = TargetMetric(
    "squared_logit_diff",
    "logits^2",
    "squared logit difference target minus foil (a test metric)",
    _squared_logit_diff,
    needs_foil=True,
)


def linear_model(*, loud_values: bool = False, float64: bool = False):
    """``(model, task)``: the bridge (``loud_values``: layer 1's values scaled by 1e3 too, so
    its heads' second-order terms count; ``float64``: the model in float64) and its pairs."""
    from transformer_lens.config import TransformerBridgeConfig
    from transformer_lens.model_bridge import TransformerBridge

    config = TransformerBridgeConfig(
        d_model=16,
        d_head=4,
        n_layers=2,
        n_ctx=8,
        n_heads=4,
        d_vocab=20,
        attn_only=True,
        normalization_type="LN",
        eps=1e6,  # std = sqrt(var + eps): constant to a relative 1e-7, so every norm is linear
        seed=2,
    )
    model = TransformerBridge.boot_native(config).eval()
    with torch.no_grad():  # the norms divide by 1e3: logits back to a usual size
        params = dict(model.named_parameters())
        params["head._original_component.weight"].mul_(1e3)
        if loud_values:
            params[
                "layers.1._original_component.attn._original_component.v._original_component.weight"
            ].mul_(1e3)
    if float64:
        model = model.double()
    g = torch.Generator().manual_seed(0)
    task = TokenizedPairs(
        clean_tokens=torch.randint(1, 20, (3, 6), generator=g),
        corrupted_tokens=torch.randint(1, 20, (3, 6), generator=g),
        attention_mask=torch.ones(3, 6, dtype=torch.bool),
        answer_positions=torch.full((3,), 5),
        target_ids=torch.randint(0, 20, (3,), generator=g),
        foil_ids=torch.randint(0, 20, (3,), generator=g),
        padding_side="right",
        name="random pairs",
    )
    return model, task
