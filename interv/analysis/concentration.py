"""Concentration of every head of a model, reduced inside the hooks as patterns appear.

For each layer, head and requested query position this computes the row metrics of
:mod:`interv.metrics` (entropy, normalized entropy, sink mass, content entropy,
content normalized entropy, number of available keys) plus two *value-aware*
numbers that say how much of what the head writes comes from the sink:

- the weighted contribution of key ``i`` to head ``h``'s output is the vector
  ``a_i * v_i W_O^h`` (``[d_model]``, residual-stream units); its norm is
  ``a_i * ||v_i W_O^h||`` because ``a_i >= 0``;
- ``contribution_norm = sum_i a_i ||v_i W_O^h||`` over the available keys
  (residual-stream units; an upper bound on ``||z_h W_O^h||`` by the triangle
  inequality);
- ``sink_contribution_share = sum_{i in S} a_i ||v_i W_O^h|| / contribution_norm``
  (fraction in [0, 1]), to be read next to ``sink_mass = sum_{i in S} a_i``: a sink
  that takes most of the mass but writes small vectors has a share far below its mass.

Memory: nothing quadratic in the context is kept. A hook on each layer's values
(site ``v``, which fires before the pattern of the same layer) stores the per-key norms
``||v_i W_O^h||`` (``[batch, head_index, key_pos]``); a hook on its pattern (site
``pattern``) reduces the pattern, in chunks of query rows, to per-(batch, head, query)
numbers and returns None, so the pattern is freed as soon as the model is done with it;
the forward ends right after the last layer's pattern. Under grouped-query attention query head
``h`` reads value head ``h // (n_heads // n_key_value_heads)``.

Masks and padding: key ``j`` is available for query ``t`` iff the layer's own mask admits it
(:func:`interv.engine.architecture.architecture_of`: causal or bidirectional, AND padding, AND
the family's sliding window or chunk), so ``n``, the normalized entropies and the sink set
follow what each layer can see: a head uniform over a 4-key window reads a normalized entropy
of 1. The first forward checks every row against its mask (mass on an excluded key is refused,
naming layer, head and key). Query positions and sink positions are counted from each
prompt's first real token, so a left-padded prompt gives the numbers of the same prompt run
alone (the bridge derives rotary/learned positions from the mask).

Off-row sinks (gpt-oss): a learned sink logit in the softmax's denominator leaves rows over
real keys summing to less than 1. Refused by default; ``off_row_sink="as_key"`` counts the
deficit ``1 - sum(a)`` as one extra sink key with its own mass (in ``n``, the entropy and the
sink mass; no value vector, so no contribution).

Gated heads (Qwen3-Next, Qwen3.5): the head's output is ``sigmoid(g_t) * (a . V)`` before
``W_O``, so key ``i``'s contribution is ``a_i ||(sigmoid(g_t) * v_i) W_O^h||`` and both
value-aware numbers use it (:mod:`interv.analysis._gates`; the gate is read at site ``gate``,
after the pattern, so such a layer's rows are reduced there); the scope says so.

>>> heads = concentration(model, ["The cat sat on the mat"])
>>> heads.per_head("normalized_entropy")          # [layer, head_index]
>>> heads.mask_rule                               # the rule each layer applied, in words
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from interv._checks import as_positions
from interv._display import Display, number
from interv._pandas import require_pandas
from interv._progress import Progress, check_progress, counting
from interv.analysis._gates import gate_factors, gated_value_norms
from interv.analysis._inputs import PromptBatch, prompt_batch
from interv.engine.architecture import (
    Architecture,
    KeyRule,
    architecture_of,
    check_admitted,
    check_off_row_sink,
    layer_list,
)
from interv.engine.forward import AttentionPath, Prompts, choose_attention, forward, model_device
from interv.engine.rows import RowRequest, RowStats, admits_keys
from interv.engine.sites import Site, check_prompt_positions, kv_head_of
from interv.errors import IntervError
from interv.metrics._rows import sum_tolerance
from interv.provenance import Provenance
from interv.tasks.tokenized import prompts_fingerprint

if TYPE_CHECKING:
    import pandas
    from transformer_lens.model_bridge import TransformerBridge

    from interv.tasks.tokenized import TokenizedPairs

__all__ = ["METRICS", "HeadConcentration", "concentration"]

METRICS: dict[str, str] = {
    "entropy": "nats",
    "normalized_entropy": "fraction of log(n)",
    "sink_mass": "fraction of the row's mass",
    "content_entropy": "nats",
    "content_normalized_entropy": "fraction of log(n - |S|)",
    "sink_contribution_share": "fraction of the contribution norm",
    "contribution_norm": "residual-stream norm",
}
"""Per-(batch, layer, head, query) metrics of :class:`HeadConcentration` and their units."""

REDUCTIONS = ("mean", "median")
SINK_CONVENTION = "key positions counted from each prompt's first real token"
ATTENTION_PATHS = {
    "pattern": "pattern",
    "rows": "recomputed from queries and keys, no pattern",
}
"""How :func:`concentration` obtained the rows (``attention=``), as its scope names it: each
layer's pattern as the model computes it, or rows recomputed in query chunks from the
queries and keys while the model runs without its pattern (:mod:`interv.engine.rows`)."""
MASK_RULE = "causal AND padding (key j available for query t iff j <= t and j is real)"
"""The rule of a plain causal model (every result names the rule its model applied)."""
# Upper bound on the elements of one chunk of query rows: [batch, head, chunk, key]. The
# metric math holds about three such arrays at once in the pattern's dtype (4 MiB each in
# float32 at this size).
_CHUNK_ELEMENTS = 1 << 20


@dataclass(frozen=True, eq=False)
class HeadConcentration:
    """Concentration numbers of every head for every prompt and query position.

    Metric tensors (see :data:`METRICS`) are float64 ``[batch, layer, head_index,
    query]``, where ``query`` indexes :attr:`query_positions`. Entries of queries that
    lie beyond a prompt's end are NaN and not counted as undefined.

    Attributes:
        entropy: ``H(a)`` in nats, in ``[0, log n]``.
        normalized_entropy: ``H(a) / log n`` in [0, 1]; NaN (undefined) where ``n <= 1``.
        sink_mass: ``s = sum_{i in S} a_i`` in [0, 1].
        content_entropy: ``H(q)`` in nats of the content distribution
            ``q = a_{not S} / (1 - s)``; NaN where ``s = 1`` or no content key.
        content_normalized_entropy: ``H(q) / log(n - |S|)``; NaN where ``n - |S| <= 1``.
        sink_contribution_share: ``sum_{i in S} a_i ||v_i W_O^h|| / contribution_norm``
            in [0, 1]; NaN where the contribution norm is 0.
        contribution_norm: ``sum_i a_i ||v_i W_O^h||`` in residual-stream units.
        n_available_keys: ``[batch, layer, query]`` int64 number of available keys ``n`` at
            each layer (the same for every head of a layer; it differs between layers of
            different rules, e.g. sliding-window and global layers; the off-row sink key is
            counted with ``off_row_sink="as_key"``; 0 for queries beyond a prompt's end).
        query_positions: the requested query positions, counted from each prompt's first
            real token (negative ones from its last real token, -1 = last).
        query_index: ``[batch, query]`` int64 position of each query in the prompt
            counted from its first real token; -1 where the query is beyond the prompt.
        sink_positions: the sink set ``S`` as positions counted from each prompt's
            first real token (only the ones a query can see are used).
        model_name: name of the model (scope).
        prompt_lengths: number of real tokens of each prompt (scope).
        unit: entropy unit, ``"nats"``.
        provenance: the model (name, weights, dtype) and the prompts' fingerprint
            (:class:`~interv.provenance.Provenance`); joins with other results compare it.
        mask_rule: the key rule of every layer in words (which keys each layer admits).
        off_row_sink: None, or ``"as_key"`` when an off-row sink's deficit was counted as
            an extra sink key.
        gated_layers: layers whose heads gate their output: there the contributions are
            ``a_i ||(sigmoid(g_t) * v_i) W_O^h||``, the gate included.
        attention: how the rows were obtained, in words (:data:`ATTENTION_PATHS`).
    """

    entropy: torch.Tensor
    normalized_entropy: torch.Tensor
    sink_mass: torch.Tensor
    content_entropy: torch.Tensor
    content_normalized_entropy: torch.Tensor
    sink_contribution_share: torch.Tensor
    contribution_norm: torch.Tensor
    n_available_keys: torch.Tensor
    query_positions: tuple[int, ...]
    query_index: torch.Tensor
    sink_positions: tuple[int, ...]
    model_name: str
    prompt_lengths: tuple[int, ...]
    provenance: Provenance
    unit: str = "nats"
    sink_convention: str = SINK_CONVENTION
    mask_rule: str = MASK_RULE
    off_row_sink: str | None = None
    gated_layers: tuple[int, ...] = ()
    attention: str = "pattern"

    @property
    def n_prompts(self) -> int:
        """Number of prompts (the batch size)."""
        return len(self.prompt_lengths)

    @property
    def query_is_real(self) -> torch.Tensor:
        """``[batch, query]`` bool: the query position lies inside the prompt."""
        return self.query_index >= 0

    def metric(self, name: str) -> torch.Tensor:
        """The ``[batch, layer, head_index, query]`` tensor of metric ``name``."""
        if name not in METRICS:
            raise IntervError(f"unknown metric {name!r}; choose one of {tuple(METRICS)}")
        return getattr(self, name)

    @property
    def n_undefined(self) -> dict[str, int]:
        """Per metric, the number of NaN entries at real queries (undefined, e.g. ``n <= 1``)."""
        real = self.query_is_real[:, None, None, :]
        return {name: int((self.metric(name).isnan() & real).sum()) for name in METRICS}

    def per_prompt(self, name: str) -> torch.Tensor:
        """Mean of metric ``name`` over each prompt's defined, real query entries.

        Returns:
            ``[batch, layer, head_index]`` float64 in the metric's unit; NaN where a
            prompt has no defined entry. This is the per-prompt distribution that
            travels with every mean.
        """
        return self.metric(name).nanmean(dim=-1)

    def per_head(self, name: str, reduce: str = "mean") -> torch.Tensor:
        """Metric ``name`` per head: ``reduce`` over prompts of :meth:`per_prompt`.

        Args:
            name: one of :data:`METRICS`.
            reduce: ``"mean"`` or ``"median"`` over prompts (each prompt weighs the
                same, whatever its number of queries).

        Returns:
            ``[layer, head_index]`` float64 in the metric's unit.
        """
        if reduce not in REDUCTIONS:
            raise IntervError(f"reduce must be one of {REDUCTIONS}; got {reduce!r}")
        per_prompt = self.per_prompt(name)
        if reduce == "mean":
            return per_prompt.nanmean(dim=0)
        return per_prompt.nanmedian(dim=0).values

    def per_head_spread(self, name: str) -> torch.Tensor:
        """``[layer, head_index]`` standard deviation over prompts of :meth:`per_prompt`."""
        per_prompt = self.per_prompt(name)
        centered = per_prompt - per_prompt.nanmean(dim=0)
        defined = (~per_prompt.isnan()).sum(dim=0)
        variance = centered.square().nansum(dim=0) / (defined - 1).clamp(min=1)
        return torch.where(defined > 1, variance.sqrt(), torch.nan)

    @property
    def scope(self) -> str:
        """One line naming model, prompts, lengths, queries, sink, mask rule and unit."""
        lengths = sorted(self.prompt_lengths)
        return (
            f"model {self.model_name}; {self.n_prompts} prompts of {lengths[0]}..{lengths[-1]} "
            f"tokens; {len(self.query_positions)} query positions; sink positions "
            f"{list(self.sink_positions)} ({self.sink_convention}); mask: {self.mask_rule}; "
            f"rows: {self.attention}; entropy unit {self.unit}{_gated_text(self.gated_layers)}"
        )

    def display(self, max_rows: int = 12) -> Display:
        """What :meth:`__repr__` and :meth:`_repr_html_` show: the scope, what each number
        means with its unit, and per head the mean over prompts (with the standard deviation
        over prompts) of three metrics, the ``max_rows`` heads with the most sink mass first."""
        n_layers, n_heads = self.entropy.shape[1:3]
        names = ("normalized_entropy", "sink_mass", "content_normalized_entropy")
        means = {name: self.per_head(name) for name in names}
        spreads = {name: self.per_head_spread(name) for name in names}
        heads = [(layer, head) for layer in range(n_layers) for head in range(n_heads)]
        sink = means["sink_mass"]
        heads.sort(key=lambda lh: (math.isnan(float(sink[lh])), -float(sink[lh]), lh))
        shown = heads[:max_rows]

        def cell(name: str, lh: tuple[int, int]) -> str:
            return f"{number(float(means[name][lh]), 3)} ± {number(float(spreads[name][lh]), 2)}"

        undefined = self.n_undefined["normalized_entropy"]
        lines = [
            self.scope,
            "normalized entropy H(a)/log n: 0 = all mass on one key, 1 = uniform over the "
            "n available keys; sink mass: the fraction of the row's mass on the sink "
            "positions; content normalized entropy: the same as normalized entropy for the "
            "row without the sink, renormalized, over log(n - |S|)",
            "per head: mean over prompts ± standard deviation over prompts of each prompt's "
            "mean over its query positions; all unitless",
            "concentration only: how a head spreads its attention, not what it does to the "
            "output (interv.run measures that)",
        ]
        if undefined:
            lines.append(f"{undefined} entries undefined (n <= 1 available keys): left out")
        lines.append(
            f"most sink mass first ({len(shown)} of {len(heads)} heads shown; every number: "
            ".to_pandas())"
        )
        return Display(
            title=f"HeadConcentration: {n_layers} layers x {n_heads} heads",
            lines=lines,
            headers=["head", "normalized entropy", "sink mass", "content normalized entropy"],
            rows=[[f"L{lh[0]}H{lh[1]}", *(cell(name, lh) for name in names)] for lh in shown],
            left_out=len(heads) - len(shown),
        )

    def __repr__(self) -> str:
        return self.display().text()

    def _repr_html_(self) -> str:
        return self.display().html()

    def to_pandas(self) -> pandas.DataFrame:
        """A long ``pandas.DataFrame``, one row per prompt, layer, head, query position and
        metric, at real queries (needs pandas).

        Columns: ``model``, ``prompt``, ``layer``, ``head``, ``label`` (``L1H3``),
        ``query_position`` (as requested: from the first real token, negative from the last),
        ``query_index`` (the position it resolved to in that prompt), ``n_available_keys``,
        ``metric``, ``value`` (NaN where undefined, e.g. ``n <= 1``), ``unit``.
        """
        pd = require_pandas()
        n_prompts, n_layers, n_heads, n_queries = self.entropy.shape
        prompt, layer, head, query = (
            axis.ravel()
            for axis in np.meshgrid(
                np.arange(n_prompts),
                np.arange(n_layers),
                np.arange(n_heads),
                np.arange(n_queries),
                indexing="ij",
            )
        )
        query_index = self.query_index.numpy()[prompt, query]
        real = query_index >= 0
        base = {
            "model": self.model_name,
            "prompt": prompt[real],
            "layer": layer[real],
            "head": head[real],
            "label": [f"L{a}H{b}" for a, b in zip(layer[real], head[real], strict=True)],
            "query_position": np.asarray(self.query_positions)[query[real]],
            "query_index": query_index[real],
            "n_available_keys": self.n_available_keys.numpy()[prompt, layer, query][real],
        }
        frames = [
            pd.DataFrame(
                {
                    **base,
                    "metric": name,
                    "value": self.metric(name).numpy().ravel()[real],
                    "unit": unit,
                }
            )
            for name, unit in METRICS.items()
        ]
        return pd.concat(frames, ignore_index=True)


def concentration(
    model: TransformerBridge,
    prompts_or_tokens: str | Sequence[str] | torch.Tensor | TokenizedPairs,
    *,
    attention_mask: torch.Tensor | None = None,
    sink: int | Sequence[int] = 0,
    query_positions: Sequence[int] | None = None,
    off_row_sink: str | None = None,
    progress: Progress = None,
    attention: str = "auto",
) -> HeadConcentration:
    """Concentration metrics of every layer and head, computed without an attention cache.

    Args:
        model: a transformer-lens ``TransformerBridge`` exposing the pattern and value
            hooks on every block.
        prompts_or_tokens: a string or list of strings (tokenized with
            ``model.to_tokens``, BOS prepended, right-padded), a ``[batch, pos]`` (or
            ``[pos]``) int token tensor, or a :class:`~interv.TokenizedPairs` (its clean
            tokens and attention mask).
        attention_mask: ``[batch, pos]`` bool, True at real tokens, for a token tensor
            with padding (left or right; the real tokens of a prompt must be contiguous).
        sink: sink key position(s) ``S``, counted from each prompt's first real token
            (default 0: BOS).
        query_positions: query positions counted from each prompt's first real token
            (negative: from its last real token); default every position of the
            longest prompt.
        off_row_sink: None (default) refuses a model whose rows sum to less than 1 over
            real keys (a learned off-row sink, gpt-oss); ``"as_key"`` counts the deficit as
            one extra sink key (see the module docstring).
        progress: a bar over the layers as their patterns are reduced: None (default) in
            a notebook or on a terminal, not when stderr is piped; True / False; or a
            callable ``progress(done, total, label)`` (see :func:`interv.run`).
        attention: how the rows are obtained (named in the result's scope): ``"pattern"``
            from each layer's pattern as the model computes it (memory quadratic in the
            prompt length); ``"rows"`` recomputed from the queries and keys in query chunks
            while the model runs without materializing any pattern (memory linear;
            :mod:`interv.engine.rows`, refused in one line for a family interv cannot
            recompute exactly); ``"auto"`` (default) ``"rows"`` from
            :data:`~interv.engine.rows.LONG_CONTEXT` positions on where the family allows
            it, else ``"pattern"``.

    Returns:
        A :class:`HeadConcentration` with float64 ``[batch, layer, head_index, query]``
        metrics and its scope.
    """
    progress = check_progress(progress)
    arch = architecture_of(model)
    arch.require("attention_rows", hint="interv.concentration needs rows at every layer")
    check_off_row_sink(arch, off_row_sink)
    batch = prompt_batch(model, prompts_or_tokens, attention_mask)
    counted = "counted from each prompt's first real token"
    sink_positions = as_positions(sink, "sink", allow_empty=False, meaning=counted)
    check_prompt_positions(sink_positions, batch.real, "sink position", from_first_real=True)
    if query_positions is None:
        queries = tuple(range(int(batch.lengths.max())))
    else:
        queries = as_positions(
            query_positions, "query_positions", allow_negative=True, allow_empty=False
        )
    query_index = _query_index(queries, batch.lengths)
    reducer = _Reducer(model, arch, batch, sink_positions, query_index, off_row_sink)
    n_layers = model.cfg.n_layers
    label = f"concentration: {n_layers} layers"
    prompts = Prompts(batch.tokens, batch.real)
    mode = choose_attention(model, prompts, attention)
    with counting(n_layers, label, progress=progress, unit="layer") as count:
        if mode == "rows":

            def reduce(layer: int, stats: RowStats) -> None:
                reducer.from_stats(layer, stats)
                count.advance()

            request = RowRequest(keys=reducer.sink_keys, columns=reducer.columns, on_layer=reduce)
            forward(
                model,
                prompts,
                readout=None,
                stop_after=Site("z", n_layers - 1),
                attention=AttentionPath("rows", request),
            )
        else:
            hooks: list[tuple[Site, Any]] = []
            for layer in range(n_layers):
                hooks.append((Site("v", layer), reducer.value_hook(layer)))
                hooks.append((Site("pattern", layer), _counted(reducer.pattern_hook(layer), count)))
                if layer in reducer.gated_layers:  # the rows are reduced once the gate is known
                    hooks.append((Site("gate", layer), reducer.gate_hook(layer)))
            # the rest of the forward (last block's output, unembedding) is not needed
            last = "gate" if n_layers - 1 in reducer.gated_layers else "pattern"
            forward(
                model,
                prompts,
                hooks=hooks,
                readout=None,
                stop_after=Site(last, n_layers - 1),
                attention=AttentionPath("pattern"),
            )
    return HeadConcentration(
        **reducer.results(),
        n_available_keys=reducer.n_available_keys,
        query_positions=queries,
        query_index=query_index,
        sink_positions=sink_positions,
        model_name=str(getattr(model.cfg, "model_name", "unknown")),
        prompt_lengths=tuple(int(n) for n in batch.lengths),
        provenance=Provenance.of(
            model,
            prompts=prompts_fingerprint(batch.tokens, batch.real),
            n_prompts=int(batch.tokens.shape[0]),
        ),
        mask_rule=arch.mask_rule
        + ("; off-row sink counted as an extra sink key" if reducer.as_key_layers else ""),
        off_row_sink=off_row_sink,
        attention=ATTENTION_PATHS[mode],
        gated_layers=tuple(sorted(reducer.gated_layers)),
    )


def _gated_text(layers: tuple[int, ...]) -> str:
    """What the scope says of gated heads ("" without any)."""
    if not layers:
        return ""
    return (
        f"; gated heads (layers {layer_list(layers)}): contributions a_i ||(sigmoid(g_t) * v_i) "
        "W_O|| include each head's output gate"
    )


def _counted(reduce: Any, count: Any) -> Any:
    """The hook ``reduce``, then one step of ``count``."""

    def hook(activation: torch.Tensor, hook: Any) -> None:
        reduce(activation, hook=hook)
        count.advance()

    return hook


def _query_index(queries: tuple[int, ...], lengths: torch.Tensor) -> torch.Tensor:
    """``[batch, query]`` position of each query from the first real token; -1 if outside."""
    requested = torch.tensor(queries, dtype=torch.int64)[None, :]
    lengths = lengths[:, None]
    index = torch.where(requested < 0, lengths + requested, requested)
    inside = (index >= 0) & (index < lengths)
    if not bool(inside.any(dim=0).all()):
        outside = queries[int((~inside.any(dim=0)).nonzero()[0, 0])]
        longest = int(lengths.max())
        raise IntervError(
            f"query position {outside} lies outside every prompt; the longest prompt has "
            f"{longest} tokens (valid positions -{longest}..{longest - 1})"
        )
    return torch.where(inside, index, -1)


class _Reducer:
    """Hook callbacks that turn each layer's pattern into per-query numbers, then drop it."""

    def __init__(
        self,
        model: TransformerBridge,
        arch: Architecture,
        batch: PromptBatch,
        sink_positions: tuple[int, ...],
        query_index: torch.Tensor,
        off_row_sink: str | None,
    ) -> None:
        cfg = model.cfg
        self._model = model
        device = model_device(model)
        self._value_heads = torch.tensor(
            [kv_head_of(cfg, h) for h in range(cfg.n_heads)], device=device
        )
        n_batch, n_pos = batch.tokens.shape
        real_query = query_index >= 0
        # absolute query positions in the padded tensor (a real position where unused)
        query_abs = batch.first_real[:, None] + query_index.clamp(min=0)
        sinks = torch.tensor(sink_positions, dtype=torch.int64)
        sink_abs = batch.first_real[:, None] + sinks[None, :]  # [batch, sink]
        self._query_abs = query_abs.to(device)
        self._real_query = real_query.to(device)
        self._real = batch.real.to(device)
        self._sink_abs = sink_abs.clamp(max=n_pos - 1).to(device)
        self._sink_real = (sinks[None, :] < batch.lengths[:, None]).to(device)  # [batch, sink]
        self._rules = [arch.key_rule(layer) for layer in range(cfg.n_layers)]
        self.as_key_layers = frozenset(
            layer
            for layer in range(cfg.n_layers)
            if off_row_sink == "as_key" and arch.layer(layer).off_row_sink
        )
        # rows read as a plain slice when every prompt asks for the same consecutive queries
        first = query_abs[0]
        self._query_range = (
            (int(first[0]), int(first[-1]) + 1)
            if bool((query_abs == first).all()) and bool((first[1:] - first[:-1] == 1).all())
            else None
        )
        # kept on the model's device until the end: no host copy per chunk
        shape = (n_batch, cfg.n_layers, cfg.n_heads, query_index.shape[1])
        self._out = {
            name: torch.full(shape, torch.nan, dtype=torch.float64, device=device)
            for name in METRICS
        }
        self._n_available = torch.zeros(
            n_batch, cfg.n_layers, query_index.shape[1], dtype=torch.int64, device=device
        )
        self._value_norms: torch.Tensor | None = None
        self.gated_layers = frozenset(
            layer for layer in arch.attention_layers if arch.layer(layer).output_gate
        )
        self._gated_values: tuple[torch.Tensor, torch.Tensor] | None = None  # values, Gram
        self._gates: torch.Tensor | None = None  # [batch, pos, head, d_head] factors
        self._pending: torch.Tensor | None = None  # a gated layer's pattern, until its gate
        self._chunk = max(1, _CHUNK_ELEMENTS // max(1, n_batch * cfg.n_heads * n_pos))
        # the last key a causal chunk can see, read once here rather than per chunk
        self._chunk_last = [
            int(query_abs[:, start : start + self._chunk].max())
            for start in range(0, query_abs.shape[1], self._chunk)
        ]
        self._bad: list[torch.Tensor] = []
        self._admitted: dict[tuple[KeyRule, int], torch.Tensor] = {}
        self._keep_masks = n_batch * query_index.shape[1] * n_pos <= _CHUNK_ELEMENTS * 16

    def value_hook(self, layer: int) -> Any:
        """Hook on the values of ``layer`` storing ``||v_i W_O^h||`` ``[batch, head, key_pos]``."""

        def hook(values: torch.Tensor, hook: Any) -> None:
            self._value_norms = self._norms(layer, values)

        return hook

    def _norms(self, layer: int, values: torch.Tensor) -> torch.Tensor:
        """``[batch, head, key_pos]`` float64 ``||v_i W_O^h||`` from the values ``[batch,
        key_pos, n_key_value_heads, d_head]``."""
        w_out = self._model.blocks[layer].attn.W_O.detach().to(torch.float64)
        # ||v W||^2 = v (W W^T) v^T with the [d_head, d_head] Gram matrix of each head
        gram = w_out @ w_out.transpose(-1, -2)  # [head_index, d_head, d_head]
        per_head_values = values.detach().to(torch.float64)[:, :, self._value_heads]
        squared = torch.einsum("bkhd,hde,bkhe->bhk", per_head_values, gram, per_head_values)
        if layer in self.gated_layers:
            self._gated_values = (per_head_values, gram)
        return squared.clamp(min=0).sqrt()

    # -- rows recomputed without the pattern (attention="rows")

    @property
    def sink_keys(self) -> torch.Tensor:
        """``[batch, sink]`` padded positions of the sink keys (-1 beyond a prompt's end)."""
        return torch.where(self._sink_real, self._sink_abs, -1)

    def columns(self, layer: int, values: torch.Tensor) -> torch.Tensor:
        """The value norms of ``layer`` as the one per-key column ``[batch, head, key, 1]``
        each row weights (kept for the sink contribution)."""
        self._value_norms = self._norms(layer, values)
        return self._value_norms[..., None]

    def from_stats(self, layer: int, stats: RowStats) -> None:
        """The metrics of the requested queries from ``layer``'s row numbers."""
        if self._value_norms is None or stats.weighted is None:
            raise IntervError(
                f"the values of layer {layer} did not reach interv before its rows; this "
                "model's attention order is not supported by interv.concentration"
            )
        query = self._query_abs  # [batch, query]
        n_heads = stats.entropy.shape[1]
        index = query[:, None, :].expand(-1, n_heads, -1)

        def take(values: torch.Tensor) -> torch.Tensor:
            return values.gather(2, index)

        n_sinks = stats.at_keys.shape[-1]
        sink_rows = stats.at_keys.gather(2, index[..., None].expand(-1, -1, -1, n_sinks))
        rule = self._rules[layer]
        available = admits_keys(rule, self._real, self.sink_keys)  # [batch, pos, sink]
        n_sink = available.gather(1, query[..., None].expand(-1, -1, n_sinks)).sum(dim=-1)
        sink_norms = self._value_norms.gather(
            -1, self.sink_keys.clamp(min=0)[:, None, :].expand(-1, n_heads, -1)
        )  # [batch, head, sink]: ||v W_O|| of the sink keys
        sums = (
            take(stats.entropy),
            take(stats.mass),
            sink_rows,
            take(stats.rest),
            take(stats.rest_entropy),
            take(stats.weighted[..., 0]),
            (sink_rows * sink_norms.to(torch.float64)[:, :, None, :]).sum(dim=-1),
        )
        self._store(layer, 0, query.shape[1], sums, stats.n.gather(1, query), n_sink[:, None])
        self._value_norms = None

    def pattern_hook(self, layer: int) -> Any:
        """Hook on the pattern of ``layer`` reducing it to per-query numbers."""

        def hook(pattern: torch.Tensor, hook: Any) -> None:
            if self._value_norms is None:
                raise IntervError(
                    f"the values of layer {layer} did not reach a hook before its pattern; this "
                    "model's attention order is not supported by interv.concentration"
                )
            pattern = pattern.detach()
            if layer in self.gated_layers and self._gates is None:
                self._pending = pattern  # reduced by gate_hook, once the gate is known
                return
            for start, stop, rows, admitted in self._chunks(layer, pattern):
                self._reduce(layer, start, stop, rows, admitted, pattern.dtype)
            # one host read per layer: did any chunk fail its checks? then say where
            if self._bad and bool(torch.stack(self._bad).any()):
                for start, _, rows, admitted in self._chunks(layer, pattern):
                    self._check(layer, rows, admitted, start, pattern.dtype, explain=True)
            self._bad.clear()
            self._value_norms = None

        return hook

    def gate_hook(self, layer: int) -> Any:
        """Hook on the gate logits of a gated ``layer``: reduces the layer's pattern with
        the gated contributions ``a_i ||(sigmoid(g_t) * v_i) W_O^h||``."""

        def hook(gate: torch.Tensor, hook: Any) -> None:
            pending, self._pending = self._pending, None
            if pending is None:
                raise IntervError(
                    f"the pattern of layer {layer} did not reach a hook before its gate; this "
                    "model's attention order is not supported by interv.concentration"
                )
            self._gates = gate_factors(gate, self._model.cfg.n_heads)
            try:
                self.pattern_hook(layer)(pending, hook=hook)
            finally:
                self._gates = self._gated_values = None

        return hook

    def _chunks(
        self, layer: int, pattern: torch.Tensor
    ) -> Iterator[tuple[int, int, torch.Tensor, torch.Tensor]]:
        """``(start, stop, rows, admitted)`` of each chunk of requested queries: rows
        ``[batch, head, query, key]`` of ``pattern`` and the keys the layer admits."""
        n_query = self._query_abs.shape[1]
        batch_index = torch.arange(pattern.shape[0], device=pattern.device)[:, None]
        rule = self._rules[layer]
        for chunk, start in enumerate(range(0, n_query, self._chunk)):
            stop = min(start + self._chunk, n_query)
            query_abs = self._query_abs[:, start:stop]
            # causal: keys after the chunk's last query are masked; leave them out
            n_keys = self._chunk_last[chunk] + 1 if rule.causal else pattern.shape[-1]
            if self._query_range is not None:
                first = self._query_range[0]
                rows = pattern[:, :, first + start : first + stop, :n_keys]
            else:  # [batch, query, head, key] -> [batch, head, query, key]
                rows = pattern[batch_index, :, query_abs, :n_keys].transpose(1, 2)
            yield start, stop, rows, self._admitted_rows(rule, start, query_abs)[..., :n_keys]

    def _admitted_rows(self, rule: KeyRule, start: int, query_abs: torch.Tensor) -> torch.Tensor:
        """``[batch, query, key]`` keys ``rule`` admits for this chunk (kept per rule and chunk
        while they are small, since layers share rules)."""
        key = (rule, start)
        found = self._admitted.get(key)
        if found is None:
            found = rule.admitted(self._real, query_abs)
            if self._keep_masks:
                self._admitted[key] = found
        return found

    def _reduce(
        self,
        layer: int,
        start: int,
        stop: int,
        rows: torch.Tensor,
        admitted: torch.Tensor,
        produced: torch.dtype,
    ) -> None:
        """Reduce ``rows`` ``[batch, head, query, key]`` (queries ``start:stop``) over the
        keys ``admitted`` ``[batch, query, key]``.

        One elementwise pass ``a log a`` in the pattern's dtype; every sum over keys is
        accumulated in float64. Rows must put no mass on keys ``admitted`` excludes and
        (without an off-row sink) sum to 1: both are checked here, naming the offending
        layer, head and key.
        """
        f64 = torch.float64
        if rows.dtype.itemsize < 4:  # bfloat16 / float16 patterns: their own values, exactly
            rows = rows.float()
        mass = rows.sum(dim=-1, dtype=f64)
        n = admitted.sum(dim=-1)  # [batch, query]
        self._check(layer, rows, admitted, start, produced, mass=mass)
        plogp = torch.special.xlogy(rows, rows)
        entropy = -plogp.sum(dim=-1, dtype=f64)
        # sink keys of each prompt that the layer admits for the query
        n_keys = rows.shape[-1]
        index = self._sink_abs.clamp(max=n_keys - 1)  # [batch, sink]
        available = admitted.gather(-1, index[:, None, :].expand(-1, admitted.shape[1], -1))
        in_reach = self._sink_real & (self._sink_abs < n_keys)  # keys past n_keys: excluded
        available = available & in_reach[:, None, :]  # [batch, query, sink]
        gather = index[:, None, None, :].expand(*rows.shape[:-1], -1)
        sink_rows = rows.gather(-1, gather).to(f64) * available[:, None].to(f64)
        # the content keys, summed directly (precise when the sink takes almost all the mass)
        marks = torch.zeros(admitted.shape[0], n_keys, dtype=torch.int64, device=rows.device)
        is_sink = marks.scatter_add_(1, index, in_reach.to(torch.int64)) > 0  # [batch, key]
        content = (admitted & ~is_sink[:, None, :])[:, None].to(rows.dtype)
        content_mass = (rows * content).sum(dim=-1, dtype=f64)
        content_entropy = -(plogp * content).sum(dim=-1, dtype=f64)
        if self._gates is None:
            norms = self._value_norms[:, :, :n_keys]  # [batch, head, key]
            total = torch.einsum("bhqk,bhk->bhq", rows, norms.to(rows.dtype)).to(f64)
            at_sinks = self._value_norms.gather(-1, gather[:, :, 0, :]).to(f64)[:, :, None, :]
            from_sink = (sink_rows * at_sinks).sum(dim=-1)
        else:  # gated heads: each key's norm depends on the query's gate too
            values, gram = self._gated_values
            query_abs = self._query_abs[:, start:stop]
            batch_index = torch.arange(query_abs.shape[0], device=query_abs.device)[:, None]
            gates = self._gates[batch_index, query_abs]
            gated = gated_value_norms(gates, values[:, :n_keys], gram)  # [batch, head, q, key]
            total = (rows.to(f64) * gated).sum(dim=-1)  # [batch, head, query]
            from_sink = (sink_rows * gated.gather(-1, gather)).sum(dim=-1)
        n_sink = available.sum(dim=-1)[:, None]  # [batch, 1, query]
        sums = (entropy, mass, sink_rows, content_mass, content_entropy, total, from_sink)
        self._store(layer, start, stop, sums, n, n_sink)

    def _store(
        self,
        layer: int,
        start: int,
        stop: int,
        sums: tuple[torch.Tensor, ...],
        n: torch.Tensor,
        n_sink: torch.Tensor,
    ) -> None:
        """The metrics of queries ``start:stop`` from their rows' sums (float64): entropy
        ``-sum a log a`` and mass ``sum a`` over the admitted keys (``[batch, head, query]``),
        the weights at the sink keys (``[batch, head, query, sink]``, 0 where not admitted),
        the content mass ``c = sum a`` and entropy part ``-sum a log a`` over the admitted
        keys outside the sink set, the contribution ``sum a ||v W_O||`` and its part from the
        sink keys; ``n`` ``[batch,
        query]`` admitted keys and ``n_sink`` ``[batch, 1, query]`` admitted sink keys.

        The content numbers come from sums over the content keys, not differences of rows or
        of totals: ``H(q) = log c - (sum_content a log a) / c``.
        """
        f64 = torch.float64
        entropy, mass, sink_rows, content_mass, content_part, total, from_sink = sums
        real = self._real_query[:, start:stop]
        if layer not in self.as_key_layers:
            # re-closed in float64, as interv.metrics does: each weight divided by the row's
            # sum (the float32 rounding of the softmax's normalizer cancels; a row within
            # tolerance of 1 was checked above); the content entropy is a ratio, unchanged
            safe = torch.where(mass > 0, mass, 1.0)
            entropy = entropy / safe + torch.log(safe)
            sink_rows = sink_rows / safe[..., None]
            total = total / safe
            from_sink = from_sink / safe
        sink_mass = sink_rows.sum(dim=-1)
        if layer in self.as_key_layers:  # the deficit is one more sink key
            deficit = (1.0 - mass).clamp(min=0)
            entropy = entropy - torch.special.xlogy(deficit, deficit)
            sink_mass = sink_mass + deficit
            n = n + 1
            n_sink = n_sink + 1
        # no content where every admitted key is a sink (however the sums round)
        has_content = (content_mass > 0) & (n[:, None] > n_sink)
        safe_content = torch.where(has_content, content_mass, 1.0)
        content_entropy = torch.where(
            has_content, torch.log(safe_content) + content_part / safe_content, torch.nan
        )
        n = torch.where(real, n, 0)
        log_n = n[:, None].to(f64).clamp(min=1).log()  # [batch, 1, query]
        n_content = (n[:, None] - n_sink).to(f64)
        values = {
            "entropy": entropy,
            "normalized_entropy": torch.where(log_n > 0, entropy / log_n, torch.nan),
            "sink_mass": sink_mass,
            "content_entropy": content_entropy,
            "content_normalized_entropy": torch.where(
                n_content > 1, content_entropy / torch.log(n_content.clamp(min=2)), torch.nan
            ),
            "contribution_norm": total,
            "sink_contribution_share": torch.where(total > 0, from_sink / total, torch.nan),
        }
        self._n_available[:, layer, start:stop] = n
        for name, value in values.items():
            self._out[name][:, layer, :, start:stop] = torch.where(real[:, None], value, torch.nan)

    def _check(
        self,
        layer: int,
        rows: torch.Tensor,
        admitted: torch.Tensor,
        start: int,
        produced: torch.dtype,
        *,
        mass: torch.Tensor | None = None,
        explain: bool = False,
    ) -> None:
        """Flag mass on excluded keys, and rows that do not sum to 1 (or, with an off-row
        sink counted as a key, to at most 1), at real queries: without a host read (the flag
        joins :attr:`_bad`), or with ``explain`` raising the error that names the offending
        layer, head and key."""
        f64 = torch.float64
        if rows.dtype.itemsize < 4:
            rows = rows.float()
        if mass is None:
            mass = rows.sum(dim=-1, dtype=f64)
        real = self._real_query[:, start : start + rows.shape[2]]  # [batch, query]
        inside = torch.einsum("bhqk,bqk->bhq", rows, admitted.to(rows.dtype)).to(f64)
        n = admitted.sum(dim=-1)
        precision = produced if produced.is_floating_point else torch.float32
        tolerance = sum_tolerance(precision, n)[:, None]
        leaked = ((mass - inside) > tolerance) & real[:, None]
        if layer in self.as_key_layers:
            off = (mass > 1 + tolerance) & real[:, None]
        else:
            off = ((mass - 1).abs() > tolerance) & real[:, None]
        if not explain:
            self._bad.append(leaked.any() | off.any())
            return
        if bool(leaked.any()):
            check_admitted(
                torch.where(real[:, None, :, None], rows, 0),
                admitted,
                layer=layer,
                queries=self._query_abs[:, start : start + rows.shape[2]],
                tolerance=float(tolerance.min()),
            )
        if bool(off.any()):
            b, h, q = (int(i) for i in off.nonzero()[0])
            position = int(self._query_abs[b, start + q])
            raise IntervError(
                f"layer {layer} head {h} (prompt {b}, query position {position}): the row sums "
                f"to {float(mass[b, h, q]):.6g} over its {int(n[b, q])} admitted keys; expected 1"
                + (
                    ""
                    if layer in self.as_key_layers
                    else " (an off-row sink? interv.concentration(..., off_row_sink='as_key'))"
                )
            )

    def results(self) -> dict[str, torch.Tensor]:
        """The filled ``[batch, layer, head_index, query]`` metric tensors, on the CPU."""
        return {name: value.cpu() for name, value in self._out.items()}

    @property
    def n_available_keys(self) -> torch.Tensor:
        """``[batch, layer, query]`` int64 admitted keys, on the CPU."""
        return self._n_available.cpu()
