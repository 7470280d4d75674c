"""Head-by-head similarity under both sink conventions, and how often the verdict flips.

Is head A more like head B or like head C? On raw attention rows (*keep-sink*) two heads
that both park most of their mass on the sink look alike whatever content they read; on
renormalized content rows (*drop-sink*) only the content preference counts. This module
computes head-to-head distance matrices under both conventions and measures how many
"A is closer to B than to C" verdicts the choice flips.

Definitions (``H`` = number of heads of the model, all layers, layer-major order):

- **Row distance** ``d_r(A, B)`` for one (prompt, query) row ``r``:
  :func:`interv.metrics.compare_rows` of head A's and head B's rows for that same query, turned
  into a distance: ``1 - cosine similarity`` (unitless, [0, 1]), Jensen-Shannon divergence
  (nats, [0, log 2]) or Aitchison distance (nats of log-ratio, [0, inf)).
- **Head distance** ``d(A, B)``: the mean over prompts of each prompt's mean over its
  included query rows of ``d_r(A, B)`` (every prompt weighs the same). Rows follow the
  query rule of :data:`~interv.analysis._patterns.QUERY_RULE` and are the same rows
  under both conventions; a row is also excluded (and counted) when some head has no
  content mass on it (drop-sink undefined), so every comparison is like for like.
- **Aitchison zeros**: log-ratios need positive weights; exact zeros among available
  keys (fp32 softmax underflow) are replaced by ``zero_replacement`` and the row is
  re-closed (:func:`interv.metrics.clr`); the number of replaced weights is reported.
- **Aitchison split per pair**: ``d_r^2 = sink_r^2 + content_r^2`` exactly
  (:func:`interv.metrics.aitchison_split`); the result reports each term's mean over rows and
  the sink's share of the mean squared distance, ``sum_r sink_r^2 / sum_r d_r^2``.
- **Verdict** for a triple (A; B, C), B != C, both != A: ``sign(d(A, B) - d(A, C))``
  (negative: A is closer to B). It *flips* when its sign differs between keep-sink and
  drop-sink. Triples whose difference is within ``tie_atol`` under either convention
  are ties: excluded from the rate and counted. Swapping B and C negates both verdicts,
  so the rate over ordered triples equals the rate over unordered pairs {B, C}; all
  ``H (H - 1) (H - 2) / 2`` of them are evaluated, or a seeded uniform sample of
  ``max_triples`` when there are more (the result says which).
- **Confidence interval**: percentile bootstrap over prompts (resample the prompts with
  replacement, average their per-prompt matrices, recompute the flip rate on the same
  triples), seeded; NaN with a single prompt.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch

from interv._pandas import positions_text, require_pandas
from interv._progress import Progress, check_progress, counting
from interv.analysis._patterns import QUERY_RULE, AttentionRows, prompt_mean_weights
from interv.errors import IntervError
from interv.metrics.compare import CONVENTIONS, MEASURES, compare_rows
from interv.metrics.compositional import aitchison_split
from interv.provenance import Provenance
from interv.stats import TOO_FEW, percentile_interval

if TYPE_CHECKING:
    import pandas

__all__ = ["DISTANCE_UNITS", "FlipRate", "HeadSimilarity", "flip_counts", "head_similarity"]

DISTANCE_UNITS: dict[str, str] = {
    "cosine": "1 - cosine similarity (unitless, 0..1)",
    "js": "Jensen-Shannon divergence in nats (0..log 2)",
    "aitchison": "Aitchison distance in nats of log-ratio (0..inf)",
}
"""Unit and range of the head distance of each measure."""

# Upper bound on the elements of one chunk of head pairs [pair, row, key].
_CHUNK_ELEMENTS = 1 << 20
# Bootstrap resamples evaluated together ([convention, resample, triple] float64).
_RESAMPLES_PER_CHUNK = 16


@dataclass(frozen=True)
class FlipRate:
    """Share of "A is closer to B than to C" verdicts that the sink convention flips.

    Attributes:
        measure: the distance measure (see :data:`DISTANCE_UNITS`).
        rate: flips / non-tied triples, a fraction in [0, 1]; NaN if every triple tied.
        ci_low, ci_high: percentile bootstrap interval of ``rate`` over prompts (NaN
            with a single prompt).
        confidence: coverage of the interval (e.g. 0.95).
        n_resamples: bootstrap resamples of the prompts.
        n_flips: flipped triples at the full prompt set.
        n_ties: triples excluded as ties (within ``tie_atol`` under either convention).
        n_triples: triples evaluated (ties included).
        n_triples_total: all unordered triples ``H (H - 1) (H - 2) / 2``.
        sampled: True when ``n_triples < n_triples_total`` (seeded uniform sample).
        seed: seed of the triple sample and of the bootstrap.
    """

    measure: str
    rate: float
    ci_low: float
    ci_high: float
    confidence: float
    n_resamples: int
    n_flips: int
    n_ties: int
    n_triples: int
    n_triples_total: int
    sampled: bool
    seed: int

    def describe(self) -> str:
        """One line: the rate with its interval, the triples and the ties, in words."""
        sample = "a seeded sample of " if self.sampled else "all "
        interval = (
            f"{100 * self.confidence:.0f}% bootstrap CI over prompts "
            f"{100 * self.ci_low:.1f}..{100 * self.ci_high:.1f}%, {self.n_resamples} resamples"
            if self.ci_low == self.ci_low
            else f"interval {TOO_FEW}"
        )
        return (
            f"{self.measure}: {100 * self.rate:.1f}% of head-triple verdicts flip between "
            f"keep-sink and drop-sink ({interval}; "
            f"{sample}{self.n_triples} of {self.n_triples_total} triples, "
            f"{self.n_ties} ties excluded)"
        )


@dataclass(frozen=True, eq=False)
class HeadSimilarity:
    """Head-to-head distance matrices under both conventions, and their flip rates.

    Attributes:
        per_prompt: ``[measure, convention, prompt, head, head]`` float64: each prompt's
            mean over its included rows of the row distance, in the measure's unit
            (:data:`DISTANCE_UNITS`); ``convention`` follows :data:`CONVENTIONS`.
        aitchison_sink_term, aitchison_content_term: ``[prompt, head, head]`` float64,
            per-prompt means of the sink and content terms of the Aitchison distance
            (nats of log-ratio); empty when ``"aitchison"`` is not among ``measures``.
        aitchison_sink_share: ``[head, head]`` float64 fraction in [0, 1] of the summed
            squared Aitchison distance due to the sink term (NaN on the diagonal).
        flips: one :class:`FlipRate` per measure, in ``measures`` order.
        measures: the measures computed.
        head_labels: ``"L{layer}H{head}"`` of every head, layer-major.
        model_name, n_prompts, prompt_lengths: scope.
        n_rows: included (prompt, query) rows, the same for every pair and convention.
        n_rows_no_content: rows excluded because some head had no content mass there.
        zero_replacement: weight given to exact zeros before taking log-ratios.
        n_zeros_replaced: exact zeros among available keys of the included rows, summed
            over heads, per convention (``{"keep_sink": .., "drop_sink": ..}``).
        sink_positions: sink set, counted from each prompt's first real token.
        mask_rule: the key mask in words.
        provenance: the rows' (:class:`~interv.provenance.Provenance`).
    """

    per_prompt: torch.Tensor
    aitchison_sink_term: torch.Tensor
    aitchison_content_term: torch.Tensor
    aitchison_sink_share: torch.Tensor
    flips: tuple[FlipRate, ...]
    measures: tuple[str, ...]
    head_labels: tuple[str, ...]
    model_name: str
    n_prompts: int
    prompt_lengths: tuple[int, ...]
    n_rows: int
    n_rows_no_content: int
    zero_replacement: float
    n_zeros_replaced: dict[str, int]
    sink_positions: tuple[int, ...]
    mask_rule: str
    provenance: Provenance
    query_rule: str = QUERY_RULE
    aggregation: str = "mean over prompts of each prompt's mean over its included query rows"

    def _index(self, measure: str, convention: str) -> tuple[int, int]:
        if measure not in self.measures:
            raise IntervError(f"measure must be one of {self.measures}; got {measure!r}")
        if convention not in CONVENTIONS:
            raise IntervError(f"convention must be one of {CONVENTIONS}; got {convention!r}")
        return self.measures.index(measure), CONVENTIONS.index(convention)

    def distance(self, measure: str, convention: str) -> torch.Tensor:
        """``[head, head]`` float64 head distance ``d(A, B)`` in the measure's unit."""
        m, c = self._index(measure, convention)
        return self.per_prompt[m, c].mean(dim=0)

    def flip(self, measure: str) -> FlipRate:
        """The :class:`FlipRate` of ``measure``."""
        m, _ = self._index(measure, CONVENTIONS[0])
        return self.flips[m]

    @property
    def scope(self) -> str:
        """One line naming model, prompts, rows, query rule, sink, mask and aggregation."""
        lengths = sorted(self.prompt_lengths)
        return (
            f"model {self.model_name}; {len(self.head_labels)} heads; {self.n_prompts} prompts "
            f"of {lengths[0]}..{lengths[-1]} tokens; {self.n_rows} query rows ({self.query_rule}"
            f"; {self.n_rows_no_content} more excluded for no content mass); sink positions "
            f"{list(self.sink_positions)}; mask: {self.mask_rule}; head distance = "
            f"{self.aggregation}; Aitchison zeros replaced by {self.zero_replacement:g} "
            f"(keep-sink {self.n_zeros_replaced['keep_sink']}, drop-sink "
            f"{self.n_zeros_replaced['drop_sink']} weights)"
        )

    def _scope_fields(self) -> dict[str, Any]:
        return {
            "model": self.model_name,
            "n_prompts": self.n_prompts,
            "n_rows": self.n_rows,
            "query_rule": self.query_rule,
            "sink_positions": list(self.sink_positions),
            "aggregation": self.aggregation,
        }

    def to_records(self) -> list[dict[str, Any]]:
        """One dict per (measure, convention, head pair A < B): the head distance.

        Keys: ``measure``, ``convention``, ``head_a``, ``head_b``, ``distance``, ``unit``,
        ``per_prompt_std`` (standard deviation over prompts, same unit), plus for the
        Aitchison measure ``sink_term``, ``content_term`` (means, nats of log-ratio) and
        ``sink_share_of_squared_distance``; and the scope fields ``model``,
        ``n_prompts``, ``n_rows``, ``query_rule``, ``sink_positions``, ``aggregation``.
        """
        records = []
        n_heads = len(self.head_labels)
        pairs = torch.triu_indices(n_heads, n_heads, offset=1).T.tolist()
        for measure in self.measures:
            for convention in CONVENTIONS:
                m, c = self._index(measure, convention)
                mean = self.per_prompt[m, c].mean(dim=0)
                std = self.per_prompt[m, c].std(dim=0) if self.n_prompts > 1 else None
                for a, b in pairs:
                    record = {
                        "measure": measure,
                        "convention": convention,
                        "head_a": self.head_labels[a],
                        "head_b": self.head_labels[b],
                        "distance": float(mean[a, b]),
                        "unit": DISTANCE_UNITS[measure],
                        "per_prompt_std": float("nan") if std is None else float(std[a, b]),
                    }
                    if measure == "aitchison":
                        record["sink_term"] = float(self.aitchison_sink_term[:, a, b].mean())
                        record["content_term"] = float(self.aitchison_content_term[:, a, b].mean())
                        record["sink_share_of_squared_distance"] = float(
                            self.aitchison_sink_share[a, b]
                        )
                    records.append(record | self._scope_fields())
        return records

    def flip_records(self) -> list[dict[str, Any]]:
        """One dict per measure: the :class:`FlipRate` fields plus the scope fields."""
        return [
            {**flip.__dict__, "unit": "fraction of non-tied head triples"} | self._scope_fields()
            for flip in self.flips
        ]

    def to_pandas(self) -> pandas.DataFrame:
        """A long ``pandas.DataFrame`` of :meth:`to_records`, one row per measure, convention
        and head pair, with the unit (needs pandas)."""
        frame = require_pandas().DataFrame.from_records(self.to_records())
        if "sink_positions" in frame:
            frame["sink_positions"] = frame["sink_positions"].map(positions_text)
        return frame


def flip_counts(
    keep: torch.Tensor, drop: torch.Tensor, triples: torch.Tensor, *, tie_atol: float = 1e-12
) -> tuple[int, int]:
    """Count flipped and tied verdicts of head triples between two distance matrices.

    Args:
        keep, drop: ``[head, head]`` distances under keep-sink and drop-sink.
        triples: ``[n_triples, 3]`` int64 rows ``(A, B, C)``.
        tie_atol: a verdict ``sign(d(A, B) - d(A, C))`` whose difference is within this
            (in the distance's unit) under either convention is a tie.

    Returns:
        ``(n_flips, n_ties)``: flipped non-tied triples, and tied triples.
    """
    a, b, c = triples.unbind(dim=-1)
    flips, ties = _verdict_flips(keep[a, b] - keep[a, c], drop[a, b] - drop[a, c], tie_atol)
    return int(flips), int(ties)


def _verdict_flips(
    keep_diff: torch.Tensor, drop_diff: torch.Tensor, tie_atol: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """``[...]`` flipped and tied counts over the last (triple) dim of verdict differences."""
    tied = (keep_diff.abs() <= tie_atol) | (drop_diff.abs() <= tie_atol)
    flipped = ~tied & ((keep_diff > 0) != (drop_diff > 0))
    return flipped.sum(dim=-1), tied.sum(dim=-1)


def _triples(n_heads: int, max_triples: int, generator: torch.Generator) -> torch.Tensor:
    """``[n, 3]`` triples (A, B, C): all with B < C, or ``max_triples`` sampled uniformly."""
    total = n_heads * (n_heads - 1) * (n_heads - 2) // 2
    if total <= max_triples:
        heads = torch.arange(n_heads)
        pairs = torch.combinations(heads, r=2)  # [pair, 2], B < C
        a = heads.repeat_interleave(len(pairs))
        b, c = pairs.repeat(n_heads, 1).unbind(dim=-1)
        keep = (a != b) & (a != c)
        return torch.stack([a[keep], b[keep], c[keep]], dim=-1)
    # uniform over ordered triples of distinct heads: shift each draw past the ones taken
    a = torch.randint(n_heads, (max_triples,), generator=generator)
    b = torch.randint(n_heads - 1, (max_triples,), generator=generator)
    b = b + (b >= a).long()
    c = torch.randint(n_heads - 2, (max_triples,), generator=generator)
    low, high = torch.minimum(a, b), torch.maximum(a, b)
    c = c + (c >= low).long()
    c = c + (c >= high).long()
    return torch.stack([a, b, c], dim=-1)


def _flip_rate(
    measure: str,
    per_prompt: torch.Tensor,
    *,
    n_resamples: int,
    confidence: float,
    max_triples: int,
    tie_atol: float,
    seed: int,
) -> FlipRate:
    """Flip rate of ``per_prompt`` ``[convention, prompt, head, head]`` with its bootstrap CI."""
    generator = torch.Generator().manual_seed(seed)
    n_heads, n_prompts = per_prompt.shape[-1], per_prompt.shape[1]
    triples = _triples(n_heads, max_triples, generator)
    a, b, c = triples.unbind(dim=-1)
    # verdict differences are linear in the per-prompt matrices: [convention, prompt, triple]
    differences = per_prompt[:, :, a, b] - per_prompt[:, :, a, c]
    keep, drop = differences.mean(dim=1)
    n_flips, n_ties = (int(count) for count in _verdict_flips(keep, drop, tie_atol))
    decided = len(triples) - n_ties
    rate = n_flips / decided if decided else float("nan")
    draws = torch.randint(n_prompts, (n_resamples, n_prompts), generator=generator)
    weights = torch.nn.functional.one_hot(draws, n_prompts).sum(dim=1) / n_prompts
    rates = []
    for chunk in weights.to(torch.float64).split(_RESAMPLES_PER_CHUNK):
        keep, drop = torch.einsum("rp,cpt->crt", chunk, differences)
        flips, ties = _verdict_flips(keep, drop, tie_atol)
        rates.append(flips.double() / (len(triples) - ties))  # NaN: every triple tied
    # n/a below the statistics' own minimum of prompts (interv.stats.too_few)
    low, high = percentile_interval(torch.cat(rates), confidence, n_items=n_prompts)
    return FlipRate(
        measure=measure,
        rate=rate,
        ci_low=low,
        ci_high=high,
        confidence=confidence,
        n_resamples=n_resamples if n_prompts > 1 else 0,
        n_flips=n_flips,
        n_ties=n_ties,
        n_triples=len(triples),
        n_triples_total=n_heads * (n_heads - 1) * (n_heads - 2) // 2,
        sampled=len(triples) < n_heads * (n_heads - 1) * (n_heads - 2) // 2,
        seed=seed,
    )


def _symmetric(upper: torch.Tensor) -> torch.Tensor:
    """``[..., head, head]`` mirrored from its upper triangle, with a 0 diagonal.

    Every measure is symmetric with ``d(A, A) = 0``; only pairs A < B are kept.
    """
    strict = upper.triu(diagonal=1)
    return strict + strict.transpose(-1, -2)


def _check_options(
    measures: Sequence[str],
    zero_replacement: float,
    n_resamples: int,
    confidence: float,
    max_triples: int,
) -> tuple[str, ...]:
    chosen = (measures,) if isinstance(measures, str) else tuple(measures)
    if not chosen or any(m not in MEASURES for m in chosen) or len(set(chosen)) != len(chosen):
        raise IntervError(f"measures must be distinct names among {MEASURES}; got {measures!r}")
    if isinstance(zero_replacement, bool) or not 0 < zero_replacement < 1:
        raise IntervError(f"zero_replacement must be in (0, 1); got {zero_replacement!r}")
    if isinstance(n_resamples, bool) or not isinstance(n_resamples, int) or n_resamples < 1:
        raise IntervError(f"n_resamples must be an int >= 1; got {n_resamples!r}")
    if not 0 < confidence < 1:
        raise IntervError(f"confidence must be in (0, 1), e.g. 0.95; got {confidence!r}")
    if isinstance(max_triples, bool) or not isinstance(max_triples, int) or max_triples < 1:
        raise IntervError(f"max_triples must be an int >= 1; got {max_triples!r}")
    return chosen


def head_similarity(
    rows: AttentionRows,
    *,
    measures: Sequence[str] = MEASURES,
    zero_replacement: float = 1e-12,
    n_resamples: int = 200,
    confidence: float = 0.95,
    max_triples: int = 100_000,
    tie_atol: float = 1e-12,
    seed: int = 0,
    progress: Progress = None,
) -> HeadSimilarity:
    """Head distance matrices under keep-sink and drop-sink, with verdict flip rates.

    Args:
        rows: every head's attention rows, from :func:`interv.analysis.attention_rows`
            (or :func:`~interv.analysis._patterns.rows_from_pattern` for constructed rows).
            At least 3 heads in all.
        measures: any of ``"cosine"``, ``"js"``, ``"aitchison"`` (default: all three).
        zero_replacement: weight in (0, 1) given to exact zeros among available keys
            before Aitchison log-ratios (the rows are re-closed); the count is reported.
        n_resamples: bootstrap resamples of the prompts for the flip-rate interval.
        confidence: coverage of the percentile interval, in (0, 1).
        max_triples: evaluate every head triple up to this many, else a seeded sample.
        tie_atol: verdict differences within this (distance unit) are ties.
        seed: seed of the triple sample and the bootstrap.
        progress: a bar over the head blocks compared: None (default) in a notebook or on
            a terminal, not when stderr is piped; True / False; or a callable
            ``progress(done, total, label)`` (see :func:`interv.run`).

    Returns:
        A :class:`HeadSimilarity` (definitions in the module docstring).

    Cost: every head pair is compared on every included row, ``H^2 / 2 * rows * keys``
    float64 work per measure and convention. Measured on 2 shared CPU cores with 4
    prompts of 15-19 tokens: MiniLM (72 heads) 1.5 s, SmolLM2 (270 heads) 120 s; keep
    a subset of layers with ``attention_rows(..., layers=...)`` for quick looks.
    """
    chosen = _check_options(measures, zero_replacement, n_resamples, confidence, max_triples)
    progress = check_progress(progress)
    heads = rows.flat_heads()  # [head, batch, query, key], the model dtype (metrics validate it)
    n_heads = heads.shape[0]
    if n_heads < 3:
        raise IntervError(f"head similarity needs at least 3 heads for triples; got {n_heads}")
    # keys available at some held layer: every head's mass lies inside, so cosine and JS over
    # them equal the distance over each pair's own keys (keys where both rows are 0 add 0)
    key_mask = rows.any_key_mask  # [batch, query, key]
    if "aitchison" in chosen and not rows.shared_rule:
        raise IntervError(
            f"measure 'aitchison' compares log-ratios over one set of keys, but the held layers "
            f"admit different keys ({rows.mask_rule}); choose measures ('cosine', 'js') or "
            "hold layers of one rule with attention_rows(..., layers=...)"
        )
    sink = rows.sink_mask[:, None, :].expand_as(key_mask)  # [batch, query, key]
    content_keys = key_mask & ~sink
    content_mass = torch.where(content_keys, heads, 0.0).sum(dim=-1)  # [head, batch, query]
    has_content = (content_mass > 0).all(dim=0)
    used = rows.included & has_content  # [batch, query]
    if not bool(used.any()):
        raise IntervError(
            "no included query row has content mass in every head; the drop-sink convention "
            "is undefined on all rows"
        )
    empty_prompts = (~used.any(dim=1)).nonzero()[:, 0].tolist()
    if empty_prompts:
        raise IntervError(
            f"prompts {empty_prompts} have no query row usable under both conventions "
            f"({QUERY_RULE}, with content mass in every head; lengths "
            f"{[rows.prompt_lengths[i] for i in empty_prompts]}); lengthen or drop them"
        )
    row_weights = prompt_mean_weights(used)  # [row, prompt]
    x_rows, key_mask, sink_rows = heads[:, used], key_mask[used], sink[used]
    zeros = (x_rows == 0) & key_mask
    n_zeros = {
        "keep_sink": int(zeros.sum()),
        "drop_sink": int((zeros & ~sink_rows).sum()),
    }
    options = {"sink": sink_rows, "key_mask": key_mask, "zero_replacement": zero_replacement}
    n_prompts = rows.n_prompts
    with_split = "aitchison" in chosen
    per_prompt = torch.zeros(len(chosen), 2, n_prompts, n_heads, n_heads, dtype=torch.float64)
    # sink term, content term (per prompt), summed squared sink term and distance (prompt 0)
    split_terms = torch.zeros(4 if with_split else 0, n_prompts, n_heads, n_heads).double()
    chunk = max(1, _CHUNK_ELEMENTS // (x_rows[0].numel() * n_heads))
    label = f"head similarity: {n_heads} heads"
    with counting(n_heads, label, progress=progress, unit="head") as count:
        for start in range(0, n_heads, chunk):
            stop = min(start + chunk, n_heads)
            # block of heads A in start:stop against heads B >= start (the upper triangle):
            # each side is validated once at its own shape, the measures broadcast
            x, y = x_rows[start:stop, None], x_rows[None, start:]  # [A, 1, row, key], [1, B, ..]
            block = (slice(start, stop), slice(start, None))
            for m, measure in enumerate(chosen):
                for c, convention in enumerate(CONVENTIONS):
                    row_distance = compare_rows(
                        x, y, measure=measure, convention=convention, **options
                    )  # [A, B, row]
                    if measure == "cosine":
                        row_distance = 1 - row_distance
                    per_prompt[m, c, :, *block] = torch.einsum(
                        "abr,rp->pab", row_distance, row_weights
                    )
            if with_split:
                split = aitchison_split(x, y, **options)
                for t, term in enumerate((split.sink_term, split.content_term)):
                    split_terms[t, :, *block] = torch.einsum("abr,rp->pab", term, row_weights)
                split_terms[2, 0, *block] = split.sink_term.square().sum(dim=-1)
                split_terms[3, 0, *block] = split.distance.square().sum(dim=-1)
            count.advance(min(chunk, n_heads - start))
    per_prompt = _symmetric(per_prompt)  # [measure, convention, prompt, head, head]
    if with_split:
        sink_term, content_term, sink_squared, total_squared = _symmetric(split_terms)
        share = sink_squared[0] / total_squared[0]
        share.fill_diagonal_(torch.nan)
    else:
        sink_term = content_term = torch.zeros(0, 0, 0, dtype=torch.float64)
        share = torch.zeros(0, 0, dtype=torch.float64)
    flips = tuple(
        _flip_rate(
            measure,
            per_prompt[m],
            n_resamples=n_resamples,
            confidence=confidence,
            max_triples=max_triples,
            tie_atol=tie_atol,
            seed=seed,
        )
        for m, measure in enumerate(chosen)
    )
    return HeadSimilarity(
        per_prompt=per_prompt,
        aitchison_sink_term=sink_term,
        aitchison_content_term=content_term,
        aitchison_sink_share=share,
        flips=flips,
        measures=chosen,
        head_labels=rows.head_labels,
        model_name=rows.model_name,
        n_prompts=n_prompts,
        prompt_lengths=rows.prompt_lengths,
        n_rows=int(used.sum()),
        n_rows_no_content=int((rows.included & ~has_content).sum()),
        zero_replacement=zero_replacement,
        n_zeros_replaced=n_zeros,
        sink_positions=rows.sink_positions,
        mask_rule=rows.mask_rule,
        provenance=rows.provenance,
    )
