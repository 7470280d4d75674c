"""Writers and readers of the residual stream, as each family's block defines them.

The residual stream is a sum of writes: the embeddings, then per block the attention
sublayer's write and the MLP's write. Path-specific numbers (:class:`DirectEffect`,
:class:`PathPatch`, exact edge effects, EAP, faithfulness) move one writer's change along one
path into one reader, so they need each write and each read as the model computes them:

- **attention write** of block ``L``: ``m * post1(z W_O + b_O)``, with ``z`` every head's
  output (``hook_z``, the input of the output projection), ``post1`` the post-attention norm
  (Gemma-2/3, OLMo-2/3; none elsewhere) and ``m`` the residual multiplier (Granite; 1
  elsewhere). The bridge's ``hook_attn_out`` carries this value.
- **a head's write**: the exact change of the attention write when only that head's ``z``
  changes, every other head's ``z`` as in the base run:
  ``m * (post1(o + dz_h W_O^h) - post1(o))`` with ``o = z W_O + b_O`` of the base run. Without
  a post norm that is ``m * dz_h W_O^h`` whatever the other heads do; with one, the heads'
  changes do not add up to the layer's (the norm is not linear), and a head's write depends
  on the base run's other heads.
- **MLP write**: ``m * post2(mlp(pre2(x)))``, ``x`` the residual stream the MLP reads: between
  attention and MLP in a sequential block (``resid_mid``), the block's input in a parallel one
  (GPT-J, GPT-NeoX, Phi, Cohere: a block's heads do not reach its own MLP); ``pre2`` its input
  norm (the shared first norm in GPT-J, Phi and Cohere; none in OLMo-2/3); a mixture of
  experts' output is the first element of the tuple it returns. ``hook_mlp_out`` carries it.
- **readers**: a head's query, key or value reads ``pre1(x)`` through its projection (no
  ``pre1`` in OLMo-2/3); an MLP reads as above; the logits read the model's own head,
  ``finish(unembed(ln_final(x)))`` with ``finish`` the logit scale (Cohere, Granite) and the
  final soft cap (Gemma-2).

Norms and MLPs run as the Hugging Face modules the bridge wraps: a norm fires no hook; an
MLP's own projections are the bridge's components and fire theirs (a caller inside a forward
with hooks on them guards against re-entry).

>>> writes = Writes.of(model)                          # a Gemma-2
>>> writes.head_write_change(1, 3, z_base, z_new)     # [batch, pos, d_model]
>>> writes.finish_logits(model.unembed(normed))       # 30 * tanh(logits / 30)
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass
from typing import Any

import torch

from interv.engine.architecture import Architecture, architecture_of
from interv.errors import IntervError

__all__ = ["Writes", "plain_module"]


def plain_module(module: Any) -> Any:
    """The Hugging Face module a bridge component wraps (the component itself if none)."""
    original = getattr(module, "original_component", None)
    return module if original is None else original


@dataclass(frozen=True, eq=False)
class Writes:
    """The write and read paths of one model (see the module docstring).

    Attributes:
        model: the transformer-lens bridge.
        arch: its :class:`~interv.engine.architecture.Architecture`.
    """

    model: Any
    arch: Architecture

    @classmethod
    def of(cls, model: Any) -> Writes:
        """The write paths of ``model`` (its architecture is read once and cached)."""
        return cls(model, architecture_of(model))

    # -- facts

    @property
    def parallel(self) -> bool:
        """Whether attention and MLP read the same block input (a block's heads do not reach
        its own MLP)."""
        return self.arch.parallel_residual

    @property
    def mlp_reads(self) -> str:
        """The site of the residual stream an MLP reads: ``"resid_mid"`` (sequential blocks)
        or ``"resid_pre"`` (parallel blocks)."""
        return "resid_pre" if self.parallel else "resid_mid"

    @property
    def linear_heads(self) -> bool:
        """Whether a head's write is linear in its ``z`` and independent of the other heads
        (no norm between the output projection and the residual add)."""
        return not self.arch.post_attention_norm

    @property
    def multiplier(self) -> float:
        """The factor on every sublayer's write (Granite's ``residual_multiplier``; else 1)."""
        m = self.arch.residual_multiplier
        return 1.0 if m is None else float(m)

    def require_sum_of_writes(self, what: str) -> None:
        """Refuse, in one line naming the family, a model whose residual stream is not a sum
        of writes (post-LN blocks normalize the stream after each add): ``what`` cannot move
        one writer's change along one path there."""
        if self.arch.residual_norm:
            self.arch.refuse(
                self.arch.lacks("additive_writes") or "post-LN blocks",
                hint=f"{what} needs a residual stream that is a sum of writes",
            )

    def require_graph(self) -> None:
        """Refuse what a circuit graph cannot hold: a residual stream that is not a sum of
        writes, or a layer whose mixer has no attention heads (a hybrid's linear-attention
        layers: no head nodes, no query/key/value inputs)."""
        self.require_sum_of_writes("a circuit graph")
        reason = self.arch.lacks("attention_rows")
        if reason is not None:
            self.arch.refuse(reason, hint="a circuit graph needs attention heads in every layer")

    # -- writes

    def _block(self, layer: int) -> Any:
        return self.model.blocks[layer]

    def _part(self, layer: int, name: str) -> Any:
        block = self._block(layer)
        parts = block._modules if hasattr(block, "_modules") else {}
        return parts.get(name)

    def output_projection(self, layer: int, z: torch.Tensor) -> torch.Tensor:
        """``z W_O + b_O``: the attention output before any post norm, ``[..., d_model]`` from
        ``z`` ``[..., head_index, d_head]``."""
        attn = self._block(layer).attn
        out = torch.einsum("...hk,hkd->...d", z, attn.W_O.to(z))
        bias = getattr(attn, "b_O", None)
        return out if bias is None else out + bias.to(out)

    def _post_attention(self, layer: int, raw: torch.Tensor) -> torch.Tensor:
        norm = self._part(layer, "ln1_post")
        out = raw if norm is None else plain_module(norm)(raw)
        return out * self.multiplier if self.multiplier != 1.0 else out

    def attention_write(self, layer: int, z: torch.Tensor) -> torch.Tensor:
        """Block ``layer``'s attention write from every head's ``z`` ``[..., heads, d_head]``."""
        return self._post_attention(layer, self.output_projection(layer, z))

    def _changes(self, layer: int, z_base: torch.Tensor, raw: torch.Tensor) -> torch.Tensor:
        """``[n, pos, k, d_model]``: the attention write's change for each of ``k`` changes
        ``raw`` of its output projection (``[n, pos, k, d_model]``) from the base run's."""
        if self.linear_heads:
            return raw * self.multiplier if self.multiplier != 1.0 else raw
        base = self.output_projection(layer, z_base).unsqueeze(-2)
        return self._post_attention(layer, base + raw) - self._post_attention(layer, base)

    def head_write_changes(
        self, layer: int, z_base: torch.Tensor, z_other: torch.Tensor
    ) -> torch.Tensor:
        """``[n, pos, head_index, d_model]``: per head, the change of the attention write when
        only that head's ``z`` goes from ``z_base`` to ``z_other`` (``[n, pos, heads, d_head]``)."""
        w_out = self._block(layer).attn.W_O
        raw = torch.einsum("bphk,hkd->bphd", z_other - z_base, w_out.to(z_base))
        return self._changes(layer, z_base, raw)

    def head_write_change(
        self, layer: int, head: int, z_base: torch.Tensor, z_head: torch.Tensor
    ) -> torch.Tensor:
        """``[n, pos, d_model]``: the change of block ``layer``'s attention write when only
        head ``head``'s ``z`` goes to ``z_head`` (``[n, pos, d_head]``), every other head's
        as in ``z_base`` (``[n, pos, heads, d_head]``)."""
        w_out = self._block(layer).attn.W_O[head]
        raw = (z_head - z_base[:, :, head]) @ w_out.to(z_head)
        return self._changes(layer, z_base, raw.unsqueeze(-2)).squeeze(-2)

    def mixed_attention_writes(
        self, layer: int, z_base: torch.Tensor, z_live: torch.Tensor, keep: torch.Tensor
    ) -> torch.Tensor:
        """``[n, pos, readers, d_model]``: per reader, the change of the attention write when
        the heads ``keep[reader]`` (``[readers, heads]`` bool) take ``z_live``, the others
        ``z_base``; ``z_*`` ``[n, pos, heads, d_head]``."""
        w_out = self._block(layer).attn.W_O.to(z_base)
        raw = torch.einsum("bphk,hkd->bphd", z_live - z_base, w_out)  # per head
        return self._changes(layer, z_base, torch.einsum("rh,bphd->bprd", keep.to(raw), raw))

    def attention_input(self, layer: int, x: torch.Tensor) -> torch.Tensor:
        """What the heads' projections of block ``layer`` read from the residual ``x``."""
        norm = self._part(layer, "ln1")
        return x if norm is None else plain_module(norm)(x)

    def _mlp_input(self, layer: int, x: torch.Tensor) -> torch.Tensor:
        norm = self._part(layer, "ln2")
        if norm is None and self.parallel:
            norm = self._part(layer, "ln1")  # GPT-J, Phi, Cohere: the MLP shares ln1
        return x if norm is None else plain_module(norm)(x)

    def _mlp(self, layer: int, x: torch.Tensor) -> torch.Tensor:
        mlp = self._part(layer, "mlp")
        if mlp is None:
            raise IntervError(f"{self.arch.family}: block {layer} has no MLP")
        if getattr(mlp, "name", "") is None:  # containerless (OPT): fc1, activation, fc2
            act = getattr(mlp.original_component, "activation_fn", None)
            parts = [getattr(mlp, name, None) for name in ("in", "out")]
            if act is None or None in parts:
                self.arch.refuse(f"the MLP of block {layer} is not a module interv can run alone")
            return plain_module(parts[1])(act(plain_module(parts[0])(x)))
        module = plain_module(mlp)
        forward = getattr(module, "forward", module)
        try:
            wants_residual = "residual" in inspect.signature(forward).parameters
        except (TypeError, ValueError):
            wants_residual = False
        out = module(x, torch.zeros_like(x)) if wants_residual else module(x)  # BLOOM adds it
        if isinstance(out, tuple):  # a mixture of experts: (output, router logits)
            out = out[0]
        return out.reshape(x.shape)

    def mlp_write(self, layer: int, x: torch.Tensor) -> torch.Tensor:
        """Block ``layer``'s MLP write from the residual ``x`` it reads (:attr:`mlp_reads`)."""
        out = self._mlp(layer, self._mlp_input(layer, x))
        norm = self._part(layer, "ln2_post")
        if norm is not None:
            out = plain_module(norm)(out)
        return out * self.multiplier if self.multiplier != 1.0 else out

    # -- the logits

    def check_logits(self) -> None:
        """Refuse, in one line, a model whose logits interv cannot compute from the final
        residual stream (a masked-LM head's transform before the final norm, or both a
        logit scale and a soft cap, whose order the configuration does not say)."""
        arch = self.arch
        if arch.head_transform:
            arch.refuse(arch.lacks("plain_logits") or "a masked-LM head's transform")
        if arch.logit_scale is not None and arch.final_logit_softcap is not None:
            arch.refuse(
                f"the model's logits apply a logit scale {arch.logit_scale:g} and a final soft "
                f"cap {arch.final_logit_softcap:g}, in an order its configuration does not say"
            )

    def finish_logits(self, logits: torch.Tensor) -> torch.Tensor:
        """The model's own logits from ``unembed(ln_final(x))``: times the logit scale
        (Cohere's ``logit_scale``, Granite's ``1 / logits_scaling``), then the final soft cap
        ``c * tanh(logits / c)`` (Gemma-2)."""
        self.check_logits()
        arch = self.arch
        if arch.logit_scale is not None:
            logits = logits * arch.logit_scale
        cap = arch.final_logit_softcap
        if cap is not None:
            logits = torch.tanh(logits / cap) * cap
        return logits
