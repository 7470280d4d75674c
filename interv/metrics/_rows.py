"""Validation shared by every concentration metric: attention rows in, checked float64 out.

Internal module, no stability promise. Every public metric of :mod:`interv.metrics`
calls :func:`prepare_rows` first, so they all agree on what a valid row is:

- ``rows`` has shape ``[..., key]`` (any leading dims, e.g. ``batch head query``) and a
  floating dtype; ``key_mask`` (optional, bool, True = the key is an available
  candidate: causal AND padding) broadcasts to it. Leading dims of both broadcast.
- Weights are finite and non-negative; mass on masked keys is below the tolerance;
  the available weights sum to 1 within the tolerance (or to at most 1 when the
  caller declares an off-row sink with ``allow_deficit=True``).
- The tolerance follows the precision the weights were *produced* in, not the dtype
  they are stored in (a lossless conversion such as ``softmax(x).double()`` must not
  change a row's validity): the production precision is the coarsest of bfloat16,
  float16 and float32 in which every weight of the input is exactly representable
  (float32 at the finest: float64 rows may carry float32 rounding). The tolerance is
  ``eps(production)`` for the rounding of each stored weight (at most ``eps / 2`` of
  the row's mass in total) plus ``4 * sqrt(n) * eps(float32)`` for the producer's
  float32 summation over ``n`` keys. bf16 rows of a real model pass, and so do float32
  softmax rows converted to float64; a float32 row off by 1e-4 (up to ~40k keys) and a
  bf16 row off by a percent do not.
- A row with no available key (``n == 0``, e.g. a padding query) is not a
  distribution: it is not validated and every metric reports NaN there.

Valid rows are re-closed in float64 (masked keys set to exactly 0, available weights
divided by their sum) so that the exact identities of the metrics (grouping,
entropy change, Aitchison split) hold to float64 rounding whatever the input dtype.

Off-row sinks: some models park attention mass on a learned logit that is not a key
(the row then sums to less than 1). With ``allow_deficit=True`` the deficit
``1 - sum(available weights)`` is appended as one extra available key, the
*off-row sink*, after the last real key; it counts in ``n`` and always belongs to
the sink set.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import torch

from interv.errors import IntervError

UNITS = ("nats", "bits")


@dataclass(frozen=True, eq=False)
class Rows:
    """Validated rows, float64, broadcast with their mask.

    Attributes:
        weights: ``[..., key]`` float64 (``key + 1`` with an off-row sink), closed over
            available keys, exactly 0 at masked keys and in empty rows.
        mask: ``[..., key]`` bool, same shape as ``weights``; True = available key.
        n: ``[...]`` int64 number of available keys per row (off-row sink included).
        n_keys: number of real key positions (the input's last dim).
        has_off_row_sink: True when the last column of ``weights`` is the off-row sink.
    """

    weights: torch.Tensor
    mask: torch.Tensor
    n: torch.Tensor
    n_keys: int
    has_off_row_sink: bool

    @property
    def empty(self) -> torch.Tensor:
        """``[...]`` bool, True for rows with no available key (metrics are NaN there)."""
        return self.n == 0

    def real_keys(self, values: torch.Tensor) -> torch.Tensor:
        """``values[..., :n_keys]``: drop the off-row sink column, if any."""
        return values[..., : self.n_keys]


def check_unit(unit: str) -> float:
    """The divisor that turns nats into ``unit`` (1 for nats, ln 2 for bits)."""
    if unit not in UNITS:
        raise IntervError(f"unit must be one of {UNITS}; got {unit!r}")
    return 1.0 if unit == "nats" else math.log(2.0)


def choose(value: str, allowed: tuple[str, ...], what: str) -> str:
    """Return ``value`` if it is one of ``allowed``, else raise naming both."""
    if value not in allowed:
        raise IntervError(f"{what} must be one of {allowed}; got {value!r}")
    return value


def divide_by_log_n(entropy_nats: torch.Tensor, n: torch.Tensor) -> torch.Tensor:
    """``entropy_nats / log n``, NaN where ``n <= 1`` (normalized entropy is undefined)."""
    log_n = n.clamp(min=1).to(torch.float64).log()
    return torch.where(n > 1, entropy_nats / log_n, torch.nan)


_PRODUCTION_DTYPES = (torch.bfloat16, torch.float16, torch.float32)
_HEAD = 4096  # elements checked first: float32 weights fail bfloat16 at once


def _exactly_representable(rows: torch.Tensor, dtype: torch.dtype) -> bool:
    """Whether every (finite) value of ``rows`` survives a round trip through ``dtype``."""
    flat = rows.detach().reshape(-1)
    return all(bool((part.to(dtype).to(rows.dtype) == part).all()) for part in (flat[:_HEAD], flat))


def production_dtype(rows: torch.Tensor) -> torch.dtype:
    """The precision ``rows`` were produced in, as far as their values tell.

    The coarsest of bfloat16, float16 and float32 in which every value is exactly
    representable; float32 when none is coarser (also for float64 rows, which may carry
    float32 rounding). ``rows`` must be finite.
    """
    for dtype in _PRODUCTION_DTYPES:
        if rows.dtype == dtype or _exactly_representable(rows, dtype):
            return dtype
    return torch.float32


def sum_tolerance(dtype: torch.dtype, n: torch.Tensor) -> torch.Tensor:
    """``[...]`` float64 tolerance on a row sum over ``n`` keys for weights produced in
    ``dtype`` (float64 counts as float32): ``eps(dtype) + 4 sqrt(n) eps(float32)``."""
    produced = dtype if dtype in _PRODUCTION_DTYPES else torch.float32
    stored = torch.finfo(produced).eps
    summed = 4.0 * torch.finfo(torch.float32).eps * n.to(torch.float64).clamp(min=1).sqrt()
    return stored + summed


def _precision_note(produced: torch.dtype, stored: torch.dtype) -> str:
    """Which tolerance was applied and why, for messages."""
    name = str(produced).removeprefix("torch.")
    if produced == stored:
        return f"{name} tolerance"
    if stored == torch.float64 and produced == torch.float32:
        return f"{name} tolerance: weights stored as float64 may carry float32 rounding"
    return f"{name} tolerance: every value is exactly a {name}, the precision it was produced in"


def _first_row(bad: torch.Tensor) -> tuple[int, ...]:
    return tuple(int(i) for i in bad.nonzero()[0])


def _row_name(index: tuple[int, ...]) -> str:
    return "rows[" + ", ".join(str(i) for i in index) + "]" if index else "rows"


def prepare_rows(
    rows: torch.Tensor, key_mask: torch.Tensor | None = None, *, allow_deficit: bool = False
) -> Rows:
    """Validate ``rows`` (``[..., key]``) against ``key_mask`` and return float64 :class:`Rows`.

    Raises :class:`IntervError` naming the first offending row and the expected range
    for: a non-tensor or non-floating input, a mask that is not bool or does not
    broadcast, NaN or inf, negative weights, mass on masked keys, and rows whose
    available weights do not sum to 1 (or exceed 1 with ``allow_deficit=True``).
    """
    if not isinstance(rows, torch.Tensor):
        raise IntervError(f"rows must be a torch.Tensor of shape [..., key]; got {type(rows)}")
    if not rows.is_floating_point():
        raise IntervError(
            f"rows must have a floating dtype (float16, bfloat16, float32, float64); "
            f"got {rows.dtype}"
        )
    if rows.ndim == 0 or rows.shape[-1] == 0:
        raise IntervError(
            f"rows must have shape [..., key] with at least one key; got {tuple(rows.shape)}"
        )
    n_keys = rows.shape[-1]
    if key_mask is None:
        mask = torch.ones(rows.shape, dtype=torch.bool, device=rows.device)
    else:
        if not isinstance(key_mask, torch.Tensor) or key_mask.dtype != torch.bool:
            dtype = key_mask.dtype if isinstance(key_mask, torch.Tensor) else type(key_mask)
            raise IntervError(f"key_mask must be a bool tensor (True = available key); got {dtype}")
        mask = key_mask
    try:
        shape = torch.broadcast_shapes(rows.shape, mask.shape)
    except RuntimeError as error:
        raise IntervError(
            f"key_mask of shape {tuple(mask.shape)} does not broadcast to rows of shape "
            f"{tuple(rows.shape)}; expected a shape like {tuple(rows.shape)} or "
            f"(..., {n_keys}) with size-1 dims where it is shared"
        ) from error
    if shape[-1] != n_keys:
        raise IntervError(
            f"key_mask of shape {tuple(mask.shape)} would stretch the key dim of rows "
            f"{tuple(rows.shape)}; its last dim must be {n_keys} or 1"
        )
    weights = rows.to(torch.float64).expand(shape)
    mask = mask.expand(shape)

    finite = torch.isfinite(weights)
    if not bool(finite.all()):
        index = _first_row(~finite)
        raise IntervError(
            f"{_row_name(index[:-1])} has weight {float(weights[index])} at key {index[-1]}; "
            "expected finite attention weights in [0, 1]"
        )
    negative = weights < 0
    if bool(negative.any()):
        index = _first_row(negative)
        raise IntervError(
            f"{_row_name(index[:-1])} has negative weight {float(weights[index]):.3g} at key "
            f"{index[-1]}; expected attention weights in [0, 1]"
        )
    n = mask.sum(dim=-1)
    produced = production_dtype(rows)
    tolerance = sum_tolerance(produced, n)
    precision = _precision_note(produced, rows.dtype)
    masked_mass = torch.where(mask, 0.0, weights).sum(dim=-1)
    leaking = (masked_mass > tolerance) & (n > 0)
    if bool(leaking.any()):
        index = _first_row(leaking)
        raise IntervError(
            f"{_row_name(index)} puts mass {float(masked_mass[index]):.3g} on masked keys; "
            f"expected at most {float(tolerance[index]):.2g} ({precision}): "
            "apply the mask before the softmax, or pass the mask the model used"
        )
    available = torch.where(mask, weights, 0.0)
    total = available.sum(dim=-1)
    if allow_deficit:
        off = (total > 1 + tolerance) & (n > 0)
        expected = "at most 1 (allow_deficit=True: the rest sits on an off-row sink)"
    else:
        off = ((total - 1).abs() > tolerance) & (n > 0)
        expected = "1"
    if bool(off.any()):
        index = _first_row(off)
        hint = (
            ""
            if allow_deficit or float(total[index]) > 1
            else "; if the model parks mass on an off-row learned sink, pass allow_deficit=True"
        )
        raise IntervError(
            f"{_row_name(index)} sums to {float(total[index]):.6g} over its "
            f"{int(n[index])} available keys; expected {expected} within "
            f"{float(tolerance[index]):.2g} ({precision}){hint}"
        )
    if allow_deficit:
        deficit = (1 - total).clamp(min=0) * (n > 0)
        available = torch.cat([available, deficit.unsqueeze(-1)], dim=-1)
        mask = torch.cat([mask, (n > 0).unsqueeze(-1)], dim=-1)
        n = n + (n > 0)
        total = available.sum(dim=-1)
    closed = available / torch.where(total > 0, total, 1.0).unsqueeze(-1)
    return Rows(weights=closed, mask=mask, n=n, n_keys=n_keys, has_off_row_sink=allow_deficit)


def check_paired_rows(before: torch.Tensor, after: torch.Tensor) -> None:
    """Two conditions of the *same* rows: the same key positions, leading dims that
    broadcast. Raises :class:`IntervError` with both shapes otherwise."""
    for name, rows in (("before", before), ("after", after)):
        if not isinstance(rows, torch.Tensor) or rows.ndim == 0:
            raise IntervError(
                f"{name} must be a torch.Tensor of shape [..., key]; got {rows!r:.60}"
            )
    if before.shape[-1] != after.shape[-1]:
        raise IntervError(
            f"before has {before.shape[-1]} keys (shape {tuple(before.shape)}) but after has "
            f"{after.shape[-1]} (shape {tuple(after.shape)}); entropy_change compares the same "
            "rows over the same key positions: for rows of different lengths compare "
            "condition means with mean_entropy_change"
        )
    try:
        torch.broadcast_shapes(before.shape, after.shape)
    except RuntimeError:
        raise IntervError(
            f"before of shape {tuple(before.shape)} and after of shape {tuple(after.shape)} do "
            "not broadcast; expected the same rows in both conditions"
        ) from None


def resolve_sink(sink: int | Sequence[int] | torch.Tensor, rows: Rows) -> torch.Tensor:
    """The sink set of ``rows`` as a bool tensor shaped like ``rows.weights``.

    ``sink`` is a key position, a sequence of key positions, or a bool tensor over keys
    (``[key]`` or broadcastable to the rows, so each row may have its own sink, e.g.
    the BOS position under left padding). The off-row sink, if any, is always added.
    Raises :class:`IntervError` for positions outside ``0..key-1``, an empty sequence,
    a bool mask of the wrong shape, or a sink position that is masked in a non-empty row.
    """
    shape = (*rows.weights.shape[:-1], rows.n_keys)
    if isinstance(sink, torch.Tensor) and sink.dtype == torch.bool:
        try:
            broadcast = torch.broadcast_shapes(sink.shape, shape)
        except RuntimeError as error:
            raise IntervError(
                f"sink mask of shape {tuple(sink.shape)} does not broadcast to rows of shape "
                f"{shape}; expected ({rows.n_keys},) or a shape broadcastable to the rows"
            ) from error
        if broadcast != shape:
            raise IntervError(
                f"sink mask of shape {tuple(sink.shape)} would enlarge rows of shape {shape}; "
                f"expected ({rows.n_keys},) or a shape broadcastable to the rows"
            )
        sink_mask = sink.to(rows.weights.device).expand(shape)
    else:
        if isinstance(sink, int) and not isinstance(sink, bool):
            positions = [sink]
        elif isinstance(sink, Sequence) and not isinstance(sink, str):
            positions = list(sink)
        else:
            raise IntervError(
                f"sink must be a key position (int), a sequence of positions or a bool mask "
                f"over keys; got {sink!r}"
            )
        if not positions:
            raise IntervError("sink must name at least one key position; got an empty sequence")
        for position in positions:
            if isinstance(position, bool) or not isinstance(position, int):
                raise IntervError(f"sink positions must be ints; got {position!r} in {sink!r}")
            if not 0 <= position < rows.n_keys:
                raise IntervError(
                    f"sink position {position} is out of range; rows have keys 0..{rows.n_keys - 1}"
                )
        sink_mask = torch.zeros(rows.n_keys, dtype=torch.bool, device=rows.weights.device)
        sink_mask[positions] = True
        sink_mask = sink_mask.expand(shape)
    real_mask = rows.real_keys(rows.mask)
    masked_sink = sink_mask & ~real_mask & (rows.n > 0).unsqueeze(-1)
    if bool(masked_sink.any()):
        index = _first_row(masked_sink)
        raise IntervError(
            f"sink position {index[-1]} is masked in {_row_name(index[:-1])}; a sink must be "
            "an available key: pass a per-row bool sink mask (e.g. the BOS position under "
            "left padding)"
        )
    if rows.has_off_row_sink:
        off_row = torch.ones((*shape[:-1], 1), dtype=torch.bool, device=sink_mask.device)
        sink_mask = torch.cat([sink_mask, off_row], dim=-1)
    return sink_mask
