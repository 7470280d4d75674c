"""Key restrictions: the keys an intervention still lets one layer's queries attend to.

An intervention that changes only *which keys* the heads of a layer attend to (a sliding
window with sinks, hidden keys: :mod:`interv.engine.masks`) declares it as
:class:`KeyRestriction` values (:meth:`~interv.engine.protocol.Intervention.key_restrictions`).
The keys that stay for a query are the restriction's AND the layer's own
:class:`~interv.engine.architecture.KeyRule` (causal, padding, the family's window or chunk),
each row renormalized over them: the mask changed before the softmax.

Two computations give that one meaning. Where attention runs without the pattern
(:mod:`interv.engine.rows`), the engine ANDs each restriction into the layer's admitted keys
inside the attention computation, chunk of queries by chunk (the fused kernel's mask and the
chunked path's rows alike), for the rows of the stacked copy that declared it and the heads it
names: no ``T x T`` pattern exists. Where the model's own attention runs, the intervention's
:meth:`~interv.engine.protocol.Intervention.edit` rewrites each head's output from the
observed pattern instead (``z + (A' - A) V``).

>>> window = KeyRestriction(layer=2, keep=lambda real, queries, keys: (
...     torch.arange(keys.start, keys.stop)[None, None, :]
...     > torch.arange(queries.start, queries.stop)[None, :, None] - 32
... ).expand(real.shape[0], -1, -1))
>>> window.kept(real, slice(0, 128), slice(0, 4096)).shape    # [batch, query, key]
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from interv.errors import IntervError

__all__ = ["KeepFn", "KeyRestriction"]

KeepFn = Callable[[torch.Tensor, slice, slice], torch.Tensor]
"""``keep(real, queries, keys) -> [batch, query, key]`` bool: True where the key may stay.

``real`` is ``[batch, pos]`` bool (True at real tokens, one contiguous run per prompt);
``queries`` and ``keys`` are ``slice(start, stop)`` of padded positions: only that block of
rows is built (a chunk of queries of a long prompt costs ``chunk x keys``, never ``T x T``)."""


@dataclass(frozen=True, eq=False)
class KeyRestriction:
    """The keys one layer's queries may still attend to, by an intervention alone.

    Attributes:
        layer: the attention layer it restricts.
        keep: the kept keys of a block of queries (:data:`KeepFn`).
        heads: the query heads it restricts (None: every head).
    """

    layer: int
    keep: KeepFn
    heads: tuple[int, ...] | None = None

    def __post_init__(self) -> None:
        if isinstance(self.layer, bool) or not isinstance(self.layer, int) or self.layer < 0:
            raise IntervError(f"KeyRestriction.layer must be an int >= 0; got {self.layer!r}")
        if self.heads is not None:
            heads = tuple(self.heads)
            if not heads or any(
                isinstance(h, bool) or not isinstance(h, int) or h < 0 for h in heads
            ):
                raise IntervError(
                    f"KeyRestriction.heads must be None or a non-empty tuple of ints >= 0; got "
                    f"{self.heads!r}"
                )
            object.__setattr__(self, "heads", tuple(sorted(set(heads))))

    def kept(self, real: torch.Tensor, queries: slice, keys: slice) -> torch.Tensor:
        """``[batch, query, key]`` bool: the keys that stay for queries ``queries``, among
        ``keys`` (padded positions; see :data:`KeepFn`)."""
        kept = self.keep(real, queries, keys)
        shape = (real.shape[0], queries.stop - queries.start, keys.stop - keys.start)
        if not isinstance(kept, torch.Tensor) or kept.dtype != torch.bool or kept.shape != shape:
            got = (kept.dtype, tuple(kept.shape)) if isinstance(kept, torch.Tensor) else kept
            raise IntervError(
                f"the key restriction of layer {self.layer} must keep a {list(shape)} bool "
                f"tensor of [batch, query, key]; got {got!r}"
            )
        return kept
