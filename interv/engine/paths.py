"""Effects along paths: a head's direct effect, and path patching from a sender to receivers.

A head's output ``z_h`` reaches the logits directly (residual stream -> final norm ->
unembedding) and indirectly (through the blocks after it). Both kinds here change a
*sender* head's contribution to the residual stream only along chosen paths; every other
path keeps the base run's values. The contribution is the head's *write*
(:mod:`interv.engine.writes`): the exact change of its block's attention write when only its
``z`` changes, every other head at the base run: ``dz W_O^h`` where the write is additive,
through the post-attention norm (Gemma-2/3, OLMo-2/3) and the residual multiplier (Granite)
where the family has them.

- :class:`DirectEffect` [``direct_effect``]: the sender's output replaced as by an
  ablation (zero, mean or resample), but only on the path into the final norm and the
  unembedding. Later blocks read the unablated residual stream; the final norm's scale is
  frozen at the base run's value. With the scale frozen, an additive write and plain logits
  the direct effect on a logit is linear in the change of the head's output,
  ``W_U^T (g * c(dz W_O^h) / scale)`` (``g`` the norm's gain, ``c`` its centring for a
  LayerNorm, none for an RMSNorm): for zero ablation it is minus the head's direct logit
  attribution (a post-attention norm or a final soft cap makes it non-linear). The logits
  are the model's own (logit scale, soft cap). ``total - direct`` is the indirect effect,
  through later blocks.
- :class:`PathPatch` [``path_patch``]: the sender's output taken from the other run, only
  along its path into the query, key or value input of chosen receiver heads (or into the
  logits). Everything else is frozen at the base run: a receiver reads the base run's
  residual stream plus the sender's write change, exactly what it would read if
  every other head and MLP kept its base-run output. The receivers' inputs are computed
  in an :class:`~interv.engine.protocol.EditedRun` of the base prompts (one forward per
  receiver layer, shared by every cell that needs it), then patched into the base run.

Grouped-query attention: a query input is per query head, and a value input is patched at
the z level for the receiver only (``z_r + A_r (V' - V)``), both exact. A key input
belongs to a key/value head shared by a group of query heads; the group's shared key is
patched and the group's other query heads (those not among the receivers) are held at
their base-run outputs, which is exact when the receivers sit in one layer and freezes
those heads otherwise. The sentences say so.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch

from interv.engine.interventions import BASELINES, head_ablation
from interv.engine.protocol import (
    EditContext,
    EditedRun,
    Intervention,
    Patching,
    Read,
    patch_runs,
    register,
)
from interv.engine.sites import Site, check_site, head_label, kv_head_of
from interv.engine.writes import Writes
from interv.errors import IntervError

if TYPE_CHECKING:
    from interv.tasks.tokenized import TokenizedPairs

__all__ = ["RECEIVER_INPUTS", "DirectEffect", "PathPatch"]

RECEIVER_INPUTS: tuple[str, ...] = ("q", "k", "v", "logits")
"""What a path ends in: a receiver head's query, key or value input, or the logits."""

_INPUT_NOUN = {"q": "query", "k": "key", "v": "value"}
_FINAL = (Site("final_resid"), Site("final_scale"))


def _write_change(
    context: EditContext, run: Any, layer: int, head: int, z_head: torch.Tensor
) -> torch.Tensor:
    """The change of block ``layer``'s attention write into the residual stream when only
    head ``head``'s z becomes ``z_head``, every other head's as in ``run``
    (:meth:`~interv.engine.writes.Writes.head_write_change`: ``dz W_O^h`` where the write is
    additive; through the post-attention norm and the residual multiplier where the family
    has them)."""
    writes = Writes.of(context.model)
    writes.require_sum_of_writes("a path-specific effect")
    z_base = context.read(run, Site("z", layer))
    return writes.head_write_change(layer, head, z_base, z_head.to(z_base))


def _edit_final(
    site: Site, activation: torch.Tensor, context: EditContext, base_run: str, change: Any
) -> torch.Tensor:
    """Add ``change()`` to the final norm's input, or freeze its scale at the base run's."""
    if site.component == "final_scale":
        return context.read(base_run, site)
    return activation + change().to(activation)


@register("direct_effect")
@dataclass(frozen=True)
class DirectEffect(Intervention):
    """A head's output replaced only on its direct path into the logits, in the clean run.

    Attributes:
        layer, head: the head.
        baseline: ``"zero"``, ``"mean"`` (over the clean prompts, same position) or
            ``"resample"`` (from the corrupted prompts, ``seed``), as the matching ablation.
        seed: seed of the resample draw.
    """

    layer: int
    head: int
    baseline: str = "zero"
    seed: int = 0
    family = "path"

    def __post_init__(self) -> None:
        if self.baseline not in BASELINES:
            raise IntervError(f"unknown baseline {self.baseline!r}; choose one of {BASELINES}")
        Site("z", self.layer, self.head)

    def total(self) -> Intervention:
        """The ablation with the same replacement on every path (the total effect)."""
        return head_ablation(self.baseline, self.layer, self.head, self.seed)

    @property
    def site(self) -> Site:
        return Site("z", self.layer, self.head)

    def edits(self) -> tuple[Site, ...]:
        return _FINAL

    def reads(self) -> tuple[Read, ...]:
        own = Read("clean", Site("z", self.layer))  # every head: the write passes them all
        return tuple(dict.fromkeys((own, *self.total().reads(), Read("clean", _FINAL[1]))))

    def check(self, cfg: Any, n_positions: int) -> None:
        self.total().check(cfg, n_positions)

    def edit(self, site: Site, activation: torch.Tensor, context: EditContext) -> torch.Tensor:
        def change() -> torch.Tensor:
            z = context.read("clean", Site("z", self.layer))[:, :, self.head]
            replaced = self.total().edit(self.site, z.clone(), context)
            return _write_change(context, "clean", self.layer, self.head, replaced)

        return _edit_final(site, activation, context, "clean", change)

    def describe(self, task: TokenizedPairs | None = None) -> str:
        total = self.total().describe(task)
        what = total.removeprefix(f"{head_label(self.layer, self.head)} output (z) ")
        return (
            f"direct effect of {head_label(self.layer, self.head)}: its output (z) {what}, "
            "only on the path into the final norm and unembedding (its write: the change of "
            "the attention sublayer's residual write when only its z changes, the other heads "
            "at the clean run; later blocks read the unablated residual stream; the final "
            "norm's scale frozen at the clean run's value)"
        )


@dataclass(frozen=True)
class _PathInputs(Patching, Intervention):
    """The base run with the residual stream entering each receiver layer set to the base
    run's plus the sender's change: what the receivers read when only the sender changed.

    Internal: the source that :class:`PathPatch` reads its receivers' inputs from.
    """

    layer: int
    head: int
    direction: str
    receiver_layers: tuple[int, ...]

    def edits(self) -> tuple[Site, ...]:
        return tuple(Site("resid_pre", layer) for layer in self.receiver_layers)

    def reads(self) -> tuple[Read, ...]:
        sender = Site("z", self.layer, self.head)
        return (
            Read(self.source_run, sender),
            Read(self.base_run, Site("z", self.layer)),
            *(Read(self.base_run, site) for site in self.edits()),
        )

    def edit(self, site: Site, activation: torch.Tensor, context: EditContext) -> torch.Tensor:
        sender = Site("z", self.layer, self.head)
        z_source = context.read(self.source_run, sender)
        change = _write_change(context, self.base_run, self.layer, self.head, z_source)
        return context.read(self.base_run, site) + change.to(activation)

    def describe(self, task: TokenizedPairs | None = None) -> str:
        return (
            f"the {self.base_run} run with the residual stream entering layers "
            f"{list(self.receiver_layers)} changed only by {head_label(self.layer, self.head)}"
        )


def _heads(receivers: Any) -> tuple[tuple[int, int], ...]:
    pairs = []
    for item in receivers:
        if isinstance(item, str) or len(item) != 2:
            raise IntervError(
                f"receivers must be (layer, head) pairs, e.g. ((1, 0), (1, 2)); got {receivers!r}"
            )
        site = Site("z", item[0], item[1])
        pairs.append((site.layer, site.head))
    if len(set(pairs)) != len(pairs):
        raise IntervError(f"receivers must not repeat; got {pairs}")
    return tuple(sorted(pairs))


@register("path_patch")
@dataclass(frozen=True)
class PathPatch(Patching, Intervention):
    """A sender head's output from the other run, only along its path into chosen receivers.

    Attributes:
        layer, head: the sender.
        receivers: receiver query heads ``((layer, head), ...)``, each in a later layer
            than the sender; empty for ``receiver_input="logits"``.
        receiver_input: ``"q"``, ``"k"``, ``"v"`` (the receivers' query, key or value
            input) or ``"logits"`` (the direct path into the final norm and unembedding).
        direction: ``"noise"`` (corrupted sender into the clean run: is the path
            necessary?) or ``"denoise"`` (clean sender into the corrupted run: is it
            sufficient?).
    """

    layer: int
    head: int
    receivers: tuple[tuple[int, int], ...] = ()
    receiver_input: str = "k"
    direction: str = "noise"
    family = "path"
    reports_recovery = True

    def __post_init__(self) -> None:
        Site("z", self.layer, self.head)
        if self.receiver_input not in RECEIVER_INPUTS:
            raise IntervError(
                f"unknown receiver_input {self.receiver_input!r}; choose one of {RECEIVER_INPUTS}"
            )
        patch_runs(self.direction)
        receivers = _heads(self.receivers)
        object.__setattr__(self, "receivers", receivers)
        if (self.receiver_input == "logits") == bool(receivers):
            raise IntervError(
                "receiver_input 'logits' takes no receivers; 'q', 'k' and 'v' need at least "
                f"one receiver head; got receiver_input={self.receiver_input!r} with "
                f"receivers {list(receivers)}"
            )
        early = [pair for pair in receivers if pair[0] <= self.layer]
        if early:
            raise IntervError(
                f"receivers must lie in layers after the sender's ({self.layer}); got "
                f"{[head_label(*pair) for pair in early]}"
            )

    @classmethod
    def sweep_expansions(
        cls, options: Mapping[str, Any], *, layer: int, head: int | None, cfg: Any
    ) -> Iterator[dict[str, Any]]:
        """``receivers = "each_later_head"`` in a sweep: one cell per head after the sender
        (with ``cfg=None``, before a model is loaded, one representative cell)."""
        if options.get("receivers") != "each_later_head":
            yield dict(options)
            return
        if cfg is None:
            yield {**options, "receivers": ((layer + 1, 0),)}
            return
        for later in range(layer + 1, cfg.n_layers):
            for receiver in range(cfg.n_heads):
                yield {**options, "receivers": ((later, receiver),)}

    @property
    def site(self) -> None:
        """None: a path patch is about a sender *and* its receivers (both in ``params``);
        reports show it in their path section, beside both heads' concentration."""
        return None

    def _inputs(self) -> EditedRun:
        return EditedRun(
            _PathInputs(self.layer, self.head, self.direction, self._receiver_layers())
        )

    def _receiver_layers(self) -> tuple[int, ...]:
        return tuple(sorted({layer for layer, _ in self.receivers}))

    def edits(self) -> tuple[Site, ...]:
        if self.receiver_input == "logits":
            return _FINAL
        if self.receiver_input == "v":
            return tuple(Site("z", layer, head) for layer, head in self.receivers)
        inputs = tuple(Site(self.receiver_input, layer, head) for layer, head in self.receivers)
        if self.receiver_input == "k":  # the heads sharing a receiver's key, held (below)
            inputs += tuple(Site("z", layer) for layer in self._receiver_layers())
        return inputs

    def observes(self) -> tuple[Site, ...]:
        if self.receiver_input != "v":
            return ()
        return tuple(
            site
            for layer, head in self.receivers
            for site in (Site("pattern", layer, head), Site("v", layer, head))
        )

    def reads(self) -> tuple[Read, ...]:
        sender = Site("z", self.layer, self.head)
        if self.receiver_input == "logits":
            return (
                Read(self.source_run, sender),
                Read(self.base_run, Site("z", self.layer)),
                Read(self.base_run, _FINAL[1]),
            )
        inputs = self._inputs()
        component = self.receiver_input
        reads = [Read(inputs, Site(component, layer, head)) for layer, head in self.receivers]
        if component == "k":
            reads += [Read(self.base_run, Site("z", layer)) for layer in self._receiver_layers()]
        return tuple(reads)

    def check(self, cfg: Any, n_positions: int) -> None:
        super().check(cfg, n_positions)
        check_site(cfg, Site("z", self.layer, self.head), n_positions)

    def edit(self, site: Site, activation: torch.Tensor, context: EditContext) -> torch.Tensor:
        if self.receiver_input == "logits":
            sender = Site("z", self.layer, self.head)

            def change() -> torch.Tensor:
                z_source = context.read(self.source_run, sender)
                return _write_change(context, self.base_run, self.layer, self.head, z_source)

            return _edit_final(site, activation, context, self.base_run, change)
        inputs = self._inputs()
        if site.component == "z" and site.head is None:  # key receivers' layer: hold the group
            return self._hold_key_groups(site.layer, activation, context)
        if self.receiver_input == "v":
            pattern = context.observed(Site("pattern", site.layer, site.head))
            values = context.observed(Site("v", site.layer, site.head))
            patched = context.read(inputs, Site("v", site.layer, site.head)).to(values)
            return activation + torch.einsum("bqk,bkd->bqd", pattern, patched - values).to(
                activation
            )
        return context.read(inputs, site)

    def _hold_key_groups(self, layer: int, z: torch.Tensor, context: EditContext) -> torch.Tensor:
        """Query heads that share a key/value head with a key receiver of ``layer`` (and are
        not receivers) keep their base-run output ``z``; without GQA there are none."""
        cfg = context.cfg
        receivers = {head for receiver_layer, head in self.receivers if receiver_layer == layer}
        groups = {kv_head_of(cfg, head) for head in receivers}
        held = [
            head
            for head in range(cfg.n_heads)
            if kv_head_of(cfg, head) in groups and head not in receivers
        ]
        if held:
            z[:, :, held] = context.read(self.base_run, Site("z", layer))[:, :, held].to(z)
        return z

    def describe(self, task: TokenizedPairs | None = None) -> str:
        sender = head_label(self.layer, self.head)
        if self.receiver_input == "logits":
            path = "the final norm and unembedding (its direct path; the final norm's scale frozen)"
        else:
            names = ", ".join(head_label(*pair) for pair in self.receivers)
            path = f"the {_INPUT_NOUN[self.receiver_input]} input of {names}"
            if self.receiver_input == "k":
                path += (
                    " (under grouped-query attention, the other query heads of their key/value "
                    f"groups held at the {self.base_run} run)"
                )
        return (
            f"path patching ({self.direction_noun}): {sender} output (z) from the "
            f"{self.source_run} run, only along its path into {path}, everything else frozen "
            f"at the {self.base_run} run ({self.question('the path')})"
        )
