"""Second-order (Hessian-vector-product) terms of each edge's patch (Zhang & Wang 2026).

"When Attribution Patching Lies" (arXiv 2606.09899) corrects attribution patching's
first-order estimate ``g . delta`` with the second-order Taylor term of the metric along
the patch, ``1/2 delta^T H delta``, ``H`` the Hessian of the metric with respect to the
patched activation through the whole downstream network, computed as a Hessian-vector
product (a second backward pass); its reliability score compares the two terms,
``|delta^T H delta| / (2 |g . delta|)``; its multi-step variant walks the patch in ``S``
equal segments with a second-order step at each segment's start.

On interv's edge graph the patched activation of edge ``u -> v`` is reader ``v``'s own
(pre-norm) input and ``delta`` the sender's change (:mod:`interv.circuits.patching`), so
with ``f(t)`` the metric of the run whose reader ``v`` reads ``x_v + t delta_u``:

    first  = f'(0)      = g_v . delta_u          (EAP's score)
    second = f''(0)     = delta_u^T H_v delta_u
    hvp    = f'(0) + f''(0) / 2
    multi-step (S)      = sum_{s<S} f'(s/S) / S + f''(s/S) / (2 S^2)

Each edge has its own direction, so each edge is one copy of the prompts in a stacked
forward with two backwards (:func:`interv.engine.second_order.along_patches`, which node
screens share): the correction of every edge at once is not one extra backward. ``t`` is
one scalar per edge and prompt, each copy's rows depend on their own ``t`` only, so one
gradient of the summed metric and one of the summed first derivatives hold every edge's
and prompt's ``f'`` and ``f''``. The multi-step sum and the reliability score are
:mod:`interv.engine.second_order`'s.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import torch

from interv.circuits.graph import Graph
from interv.circuits.patching import (
    Run,
    copies_of,
    per_prompt_metric,
    receiver_change,
    sender_delta,
    tokens_of,
)
from interv.engine.forward import Prompts
from interv.engine.second_order import along_patches
from interv.engine.sites import Site
from interv.engine.targets import TargetMetric

if TYPE_CHECKING:
    from interv.tasks.tokenized import TokenizedPairs


def edge_derivatives(
    model: Any,
    task: TokenizedPairs,
    graph: Graph,
    base: Run,
    other: Run,
    indices: Sequence[int],
    base_name: str,
    metric: TargetMetric,
    clean_logits: torch.Tensor,
    at: float = 0.0,
    batch_size: int = 8,
    progress: Callable[[str], None] | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """``f'(at)`` and ``f''(at)`` ``[len(indices), n]`` (float64, the metric's unit) of each
    edge's patched metric ``f(t)`` along its patch (module docstring), every prompt its own.

    One stacked forward of ``batch_size`` copies of the prompts (the whole model, the
    attention pattern computed explicitly so that it is twice differentiable) and two
    backwards per batch."""
    n = task.n_pairs
    first = torch.zeros(len(indices), n, dtype=torch.float64)
    second = torch.zeros(len(indices), n, dtype=torch.float64)
    for start in range(0, len(indices), batch_size):
        chunk = list(indices[start : start + batch_size])
        f1, f2 = _chunk_derivatives(
            model, task, graph, base, other, chunk, base_name, metric, clean_logits, at
        )
        first[start : start + len(chunk)] = f1
        second[start : start + len(chunk)] = f2
        if progress is not None:
            progress(f"hvp: edges {start + 1}..{start + len(chunk)} of {len(indices)}")
    return first, second


def _chunk_derivatives(
    model: Any,
    task: TokenizedPairs,
    graph: Graph,
    base: Run,
    other: Run,
    indices: list[int],
    base_name: str,
    metric: TargetMetric,
    clean_logits: torch.Tensor,
    at: float,
) -> tuple[torch.Tensor, torch.Tensor]:
    n, k = task.n_pairs, len(indices)

    def build(t: torch.Tensor) -> list[tuple[Site, Any]]:
        edits: dict[Site, list[tuple[int, int, torch.Tensor]]] = {}
        for copy, index in enumerate(indices):
            receiver = graph.receiver_of(index)
            delta = sender_delta(model, graph, other, base, index - receiver.start)
            scaled = delta * t[copy].view(n, *([1] * (delta.ndim - 1))).to(delta)
            change = receiver_change(model, graph, base, receiver, scaled)
            if receiver.input == "logits":
                edits.setdefault(Site("final_resid"), []).append((copy, -1, change))
            elif receiver.input == "mlp":
                site = Site("mlp_out", receiver.node.layer)
                edits.setdefault(site, []).append((copy, -1, change))
            else:
                site = Site(receiver.input, receiver.node.layer)
                edits.setdefault(site, []).append((copy, receiver.node.head, change))
        return [(site, _editor(n, changes)) for site, changes in edits.items()]

    def values(logits: torch.Tensor) -> torch.Tensor:
        return per_prompt_metric(metric, task, logits, clean_logits)  # [k, n]

    prompts = Prompts.of(tokens_of(task, base_name), task.attention_mask)
    with copies_of(model, graph) as kv_hooks:
        return along_patches(
            model,
            prompts,
            task.answer_positions,
            k,
            build,
            values,
            at=at,
            hooks=kv_hooks,
            dtype=base.resid_pre[0].dtype,
        )


def _editor(n: int, changes: list[tuple[int, int, torch.Tensor]]) -> Any:
    """A hook adding each copy's change (at its head, ``-1``: the whole activation)."""

    def edit(activation: torch.Tensor, hook: Any) -> torch.Tensor:
        parts = list(activation.split(n))
        for copy, head, change in changes:
            if head < 0:
                parts[copy] = parts[copy] + change.to(activation)
            else:
                heads = parts[copy].clone()
                heads[:, :, head] = heads[:, :, head] + change.to(activation)
                parts[copy] = heads
        return torch.cat(parts)

    return edit
