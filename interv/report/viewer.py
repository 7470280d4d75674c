"""The attention viewer: chosen heads' patterns on chosen prompts, causal numbers beside.

>>> viewer = interv.view_attention(model, task, heads=["L1H0", (0, 2)], result=report)
>>> viewer                          # a notebook draws it (one self-contained <div>)
>>> viewer.save("attention.html")   # the page; opens from file:// with no network
>>> viewer.to_png("attention.png"); viewer.to_svg("attention.svg")

The page draws, for the head and prompt chosen in its menus, the query x key pattern on a
canvas (so 1024-token prompts stay fast), each query row's sink mass, normalized entropy
and content entropy as bars beside it, and the prompt as text (hover a token: where it
attends, in blue, and what attends to it, in orange). Hovering a row shows its exact
numbers with units (float64, computed in Python by :mod:`interv.analysis.attention_view`).
Padding is hatched, masked cells (after the query, outside a window or chunk) are grey, sink
keys are marked above the pattern; grouped-query heads name their key/value group. Given a
result or a report, each head's effects (mean, interval, flags, semantics sentence) stand
beside its pattern.

The colours come from weights stored as 8-bit codes on a log scale (:data:`QUANTIZATION`),
deflate-compressed and base64-encoded (about 0.5 MB per head on a 1024-token prompt);
the page says so. Its script and style (``assets/viewer.js``, ``assets/viewer.css``,
plain JavaScript written for interv, MIT licence) are inlined: no CDN, no server.

:func:`view_attention` is the one function here that runs the model (through
:mod:`interv.analysis`); :class:`AttentionViewer` only renders data.

The page draws full query x key squares. A view that keeps only some query rows (a long
prompt's subsample, :func:`~interv.analysis.attention_view.attention_view`'s
``query_positions``) is refused by the page in one line; its PNG and SVG export draw it
(rows labelled by their true positions, the subsampling stated), and the view itself holds
the rows and their numbers in Python.
"""

from __future__ import annotations

import base64
import json
import zlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from interv._checks import as_positions, check_index
from interv._outputs import claim_file
from interv.analysis.attention_view import ROW_METRICS, AttentionView, attention_view
from interv.analysis.concentration import concentration
from interv.engine.results import InterventionResult
from interv.errors import IntervError
from interv.flags import FLAGS
from interv.provenance import Provenance, join
from interv.report.kit import asset, escape, number
from interv.report.page_tables import flag_badges
from interv.report.report import Report
from interv.report.table import build_report
from interv.report.viewer_export import (
    MASKED_RGB,
    PADDING_RGB,
    RAMP,
    SINK_RGB,
    WEIGHT_FLOOR,
    head_effects,
    png_bytes,
    quantize,
    svg_text,
)
from interv.report.views import effect_text
from interv.tasks.tokenized import TokenizedPairs

if TYPE_CHECKING:
    from transformer_lens.model_bridge import TransformerBridge

__all__ = ["QUANTIZATION", "AttentionViewer", "view_attention"]

QUANTIZATION = (
    "colours come from weights stored as 8-bit codes on a log scale (code 0: below 1e-5; "
    "codes 1..255: 1e-5..1 in steps of 4.6%), so the picture is quantized; hovered numbers "
    "are exact (float64 row metrics and float32 top weights computed in Python)"
)
_TOP_K = 3
# Above this many code bytes a cell's codes are deflate-compressed (the page inflates
# them with the browser's DecompressionStream).
_COMPRESS_ABOVE = 1 << 14


def _script_json(data: Any) -> str:
    """JSON safe inside a ``<script>`` element (no ``</script>``, ``<!--`` or line
    separators can end it early)."""
    text = json.dumps(data, separators=(",", ":"), allow_nan=False)
    for raw, escaped in (("<", "\\u003c"), (">", "\\u003e"), ("&", "\\u0026")):
        text = text.replace(raw, escaped)
    return text.replace("\u2028", "\\u2028").replace("\u2029", "\\u2029")


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


@dataclass(frozen=True, eq=False)
class AttentionViewer:
    """A rendered attention view: patterns and row numbers, maybe effects beside them.

    Attributes:
        view: the :class:`~interv.analysis.attention_view.AttentionView` drawn.
        report: effects of the same model and prompts (their provenance joined with the
            view's by :func:`interv.provenance.join`), or None.
    """

    view: AttentionView
    report: Report | None = None

    def __post_init__(self) -> None:
        if self.report is None:
            return
        if self.view.task_name is None:
            raise IntervError(
                "effects join only patterns of the prompts they were measured on: build the "
                "view from the task's TokenizedPairs, not from strings or tokens"
            )
        join(self.view, self.report, what=("the viewer's prompts", "the report"))

    # ---- the page ----
    def payload(self) -> dict[str, Any]:
        """The data the page's script reads (JSON-ready; patterns as base64 codes).

        Raises:
            IntervError: a view that keeps only some query rows (the page draws full
                squares; :meth:`to_png` and :meth:`to_svg` draw it).
        """
        view = self.view
        _require_page(view)
        n = view.n_positions
        lower = np.tril_indices(n) if view.causal else None
        cells = []
        for p in range(view.n_prompts):
            row = []
            for k in range(len(view.heads)):
                row.append(self._cell(p, k, lower))
            cells.append(row)
        return {
            "format": "interv-attention/1",
            "model": view.model_name,
            "causal": view.causal,
            "n": n,
            "unit": view.unit,
            "units": ROW_METRICS,
            "metrics": list(ROW_METRICS),
            "floor": WEIGHT_FLOOR,
            "ramp": [list(stop) for stop in RAMP],
            "masked": list(MASKED_RGB),
            "padding": list(PADDING_RGB),
            "sinkColour": list(SINK_RGB),
            "topK": min(_TOP_K, n),
            "heads": [
                {
                    "label": label,
                    "layer": layer,
                    "head": head,
                    "kv": kv,
                    "rule": rule.describe(),
                    "window": rule.window,
                    "chunk": rule.chunk,
                }
                for label, (layer, head), kv, rule in zip(
                    view.head_labels, view.heads, view.kv_heads, view.key_rules, strict=True
                )
            ],
            "prompts": [
                {
                    "index": view.prompt_indices[p],
                    "tokens": list(view.tokens[p]),
                    "real": "".join("1" if r else "0" for r in view.real[p].tolist()),
                    "sink": view.sink_mask[p].nonzero()[:, 0].tolist(),
                    "first": int(view.real[p].to(torch.int64).argmax()),
                    "length": view.prompt_lengths[p],
                }
                for p in range(view.n_prompts)
            ],
            "cells": cells,
        }

    def _cell(self, p: int, k: int, lower: tuple[np.ndarray, np.ndarray] | None) -> dict:
        view = self.view
        weights = torch.where(view.key_mask[p, k], view.pattern[p, k], 0.0)
        codes = quantize(weights)
        packed = (codes[lower] if lower is not None else codes.reshape(-1)).tobytes()
        compressed = len(packed) > _COMPRESS_ABOVE
        if compressed:
            packed = zlib.compress(packed, 6)
        metrics = np.stack([view.metric(name)[p, k].numpy() for name in ROW_METRICS])
        top_k = min(_TOP_K, view.n_positions)
        ranked = torch.where(view.key_mask[p, k], view.pattern[p, k], -1.0)
        top_w, top_i = ranked.topk(top_k, dim=-1)
        top_i = torch.where(top_w < 0, -1, top_i)
        return {
            "n": view.n_available[p, k].tolist(),
            "codes": _b64(packed),
            "z": compressed,
            "metrics": _b64(metrics.astype("<f8").tobytes()),
            "topIndex": _b64(top_i.numpy().astype("<i4").tobytes()),
            "topWeight": _b64(top_w.numpy().astype("<f4").tobytes()),
        }

    def _effects_html(self, k: int) -> str:
        report = self.report
        if report is None:
            return ""
        layer, head = self.view.heads[k]
        rows = head_effects(report, layer, head)
        h = report.header
        level = round(h.ci_level * 100)
        if not rows:
            body = "<p class='iv-hint'>No intervention on this head in the result.</p>"
        else:
            items = []
            for row in rows:
                recovery = (
                    ""
                    if row.recovery is None
                    else f", normalized recovery {number(row.recovery, 3)} (dimensionless)"
                )
                effect = (
                    f"effect <b>{number(row.effect_mean, 4)} {escape(h.metric_unit)}</b> "
                    f"({level}% CI {number(row.effect_ci_low, 4)} … "
                    f"{number(row.effect_ci_high, 4)})"
                    if row.exact
                    else f"<b>{escape(effect_text(row, h.metric_unit))}</b>"
                )
                items.append(
                    f"<li><b>{escape(row.label)}</b> · {escape(row.kind)}: {effect}"
                    f"{recovery} {flag_badges(row.flags)}"
                    f"<div class='iv-sem'>{escape(row.semantics)}</div></li>"
                )
            body = f"<ul class='iv-effects'>{''.join(items)}</ul>"
        return (
            f"<div class='iv-eff' data-head='{k}'><h3>Effects of {escape(self.view.head_labels[k])}"
            f"</h3>{body}</div>"
        )

    def _effects_section(self) -> str:
        report = self.report
        if report is None:
            return ""
        h = report.header
        rules = "".join(
            f"<dt>{flag_badges((flag,))}</dt><dd>{escape(report.rules_text[flag])}</dd>"
            for flag in FLAGS
            if flag in report.rules_text
        )
        scope = (
            f"Effects: change of {h.metric_name} in {h.metric_unit} on the {h.n_prompts} "
            f"prompt pairs of task {h.task} ({h.effect_definition}); mean over prompts with a "
            f"{round(h.ci_level * 100)}% percentile bootstrap interval over prompts. "
            "Flags as in the report, with concentration at "
            f"{h.query_positions.split(' (')[0]}."
        )
        parts = "".join(self._effects_html(k) for k in range(len(self.view.heads)))
        return (
            f"<section class='iv-causal'><p class='iv-hint'>{escape(scope)}</p>{parts}"
            f"<details><summary>flag rules</summary><dl>{rules}</dl></details></section>"
        )

    def _head_info(self) -> str:
        view = self.view
        return "".join(
            f"<p class='iv-headinfo' data-head='{k}'><b>{escape(label)}</b> · layer {layer}, "
            f"query head {head} · {escape(view.kv_label(k))}</p>"
            for k, (label, (layer, head)) in enumerate(
                zip(view.head_labels, view.heads, strict=True)
            )
        )

    def fragment(self) -> str:
        """The viewer as one ``<div class="interv-attention">`` with its style, data and
        script inlined (what a notebook shows)."""
        view = self.view
        head_options = "".join(
            f"<option value='{k}'>{escape(label)} "
            f"({escape(view.kv_label(k).split(',')[0])})</option>"
            for k, label in enumerate(view.head_labels)
        )
        prompt_options = "".join(
            f"<option value='{p}'>prompt {view.prompt_indices[p]} · "
            f"{view.prompt_lengths[p]} tokens · {escape(_preview(view.tokens[p], view.real[p]))}"
            "</option>"
            for p in range(view.n_prompts)
        )
        return (
            "<div class='interv-attention'>"
            f"<style>{asset('viewer.css')}</style>"
            f"<script type='application/json' class='iv-data'>{_script_json(self.payload())}"
            "</script>"
            f"<h2>interv attention viewer · {escape(view.model_name)}</h2>"
            f"<p class='iv-scope'>{escape(view.scope)}</p>"
            f"<p class='iv-hint'>Hover the pattern or a token for its query row's numbers; "
            f"{escape(QUANTIZATION)}. Hatched: padding (no key, no query, excluded from every "
            "number); grey: masked (key after the query, or outside the layer's window or "
            "chunk); orange ticks: sink keys.</p>"
            "<p class='iv-nojs'>This viewer is drawn by its inlined script: JavaScript is off "
            "here (in Jupyter: trust the notebook).</p>"
            "<div class='iv-controls'>"
            f"<label>prompt <select data-control='prompt'>{prompt_options}</select></label>"
            f"<label>head <select data-control='head'>{head_options}</select></label>"
            f"<label>colour <select data-control='colour'>{_colour_options(view.n_positions)}"
            "</select></label>"
            "<label>zoom <select data-control='zoom'><option value='fit'>fit</option>"
            "<option value='1'>1 px per token</option><option value='2'>2 px</option>"
            "<option value='4'>4 px</option></select></label>"
            "<label>text <select data-control='text'>"
            "<option value='both'>hover: where it attends + what attends to it</option>"
            "<option value='row'>hover: where it attends (its row)</option>"
            "<option value='column'>hover: what attends to it (its column)</option>"
            "</select></label>"
            "<button type='button' data-action='png'>PNG</button>"
            "<button type='button' data-action='svg'>SVG</button>"
            "</div>"
            "<div class='iv-thumbs' aria-label='every head shown, this prompt'></div>"
            f"<div class='iv-heads'>{self._head_info()}</div>"
            "<div class='iv-main'><div class='iv-plot'><div class='iv-patternbox'>"
            "<div class='iv-axis'>query ↓ · key → (orange: sink keys)</div>"
            "<canvas class='iv-sinkbar' aria-hidden='true'></canvas>"
            "<div class='iv-stack'><canvas class='iv-pattern' tabindex='0' "
            "aria-label='attention pattern, query rows by key columns'></canvas>"
            "<canvas class='iv-overlay' aria-hidden='true'></canvas></div></div>"
            "<div class='iv-stripbox'><div class='iv-striphead'><span></span><span></span>"
            "<span></span></div><canvas class='iv-strips' aria-label='row metrics'></canvas>"
            "</div></div>"
            "<aside class='iv-side'><div class='iv-row' aria-live='polite'>"
            "<p class='iv-hint'>Hover a row of the pattern, or a token below.</p></div>"
            f"{self._effects_section()}</aside></div>"
            "<div class='iv-text' aria-label='the prompt as text'></div>"
            f"<script>{asset('viewer.js')}</script></div>"
        )

    def html(self) -> str:
        """The whole HTML document (what :meth:`save` writes)."""
        title = f"interv attention viewer: {self.view.model_name}"
        return (
            "<!DOCTYPE html>\n<html lang='en'><head><meta charset='utf-8'>"
            "<meta name='viewport' content='width=device-width, initial-scale=1'>"
            f"<title>{escape(title)}</title></head><body>{self.fragment()}</body></html>\n"
        )

    def _repr_html_(self) -> str | None:
        # a subsampled view has no page: the notebook shows its repr (which says so)
        return None if self.view.subsampled else self.fragment()

    def __repr__(self) -> str:
        view = self.view
        effects = "" if self.report is None else f", effects of {len(self.report.rows)} rows"
        rows = (
            f"; {view.rows_text} (no HTML page: to_png/to_svg draw it)" if view.subsampled else ""
        )
        return (
            f"AttentionViewer({', '.join(view.head_labels)} on {view.source}, "
            f"{view.n_positions} positions{rows}{effects})"
        )

    # ---- files ----
    def save(self, path: str | Path, *, overwrite: bool = False) -> Path:
        """Write the page to ``path``: a new file, or one interv wrote and nobody changed
        since (``overwrite=True`` replaces any file). Returns the path. A view that keeps
        only some query rows is refused (before any file is touched)."""
        _require_page(self.view)
        return _write(path, lambda: self.html().encode("utf-8"), overwrite, "viewer page")

    def to_png(
        self,
        path: str | Path,
        *,
        prompt: int = 0,
        heads: Sequence[int] | None = None,
        overwrite: bool = False,
    ) -> Path:
        """Draw shown prompt ``prompt``'s patterns (shown heads ``heads``, default all) with
        matplotlib, from the exact weights, into a PNG at ``path`` (the rules of :meth:`save`)."""
        chosen = self._choose(prompt, heads)
        return _write(
            path, lambda: png_bytes(self.view, self.report, *chosen), overwrite, "PNG file"
        )

    def to_svg(
        self,
        path: str | Path,
        *,
        prompt: int = 0,
        heads: Sequence[int] | None = None,
        overwrite: bool = False,
    ) -> Path:
        """Write shown prompt ``prompt``'s patterns as an SVG to ``path``: vector cells up to
        :data:`~interv.report.viewer_export.VECTOR_CELLS_UP_TO` positions, an embedded PNG
        raster beyond; row metrics as vector bars (the rules of :meth:`save`)."""
        chosen = self._choose(prompt, heads)
        return _write(
            path,
            lambda: svg_text(self.view, self.report, *chosen).encode("utf-8"),
            overwrite,
            "SVG file",
        )

    def _choose(self, prompt: int, heads: Sequence[int] | None) -> tuple[int, tuple[int, ...]]:
        view = self.view
        check_index(prompt, view.n_prompts, "prompt", f"the viewer shows {view.n_prompts}")
        if heads is None:
            return prompt, tuple(range(len(view.heads)))
        chosen = as_positions(heads, "heads", allow_empty=False)
        for k in chosen:
            check_index(k, len(view.heads), "head", f"the viewer shows {len(view.heads)} heads")
        return prompt, chosen


def _require_page(view: AttentionView) -> None:
    """Refuse a view that keeps only some query rows: the page's script draws squares."""
    if view.subsampled:
        raise IntervError(
            "the HTML attention viewer page (save, the notebook display) draws full query x key "
            f"squares; this view keeps {view.rows_text}: draw it with to_png or to_svg (rows at "
            "their true positions), read its rows in Python (view.pattern[p, k, r] is query "
            "position view.query_positions[r]), or build a full view (query_positions='all')"
        )


LOG_COLOUR_ABOVE = 128
"""Prompts longer than this open in the log colour scale (a linear scale shows little
more than the sink column there); the menu switches."""


def _colour_options(n_positions: int) -> str:
    default = "log" if n_positions > LOG_COLOUR_ABOVE else "weight"
    options = (
        ("weight", "weight a (linear)"),
        ("log", "weight a (log scale, 1e-5…1)"),
        ("content", "content q = a / (1 − s), sink keys apart"),
    )
    return "".join(
        f"<option value='{value}'{' selected' if value == default else ''}>{text}</option>"
        for value, text in options
    )


def _preview(tokens: tuple[str, ...], real: torch.Tensor, limit: int = 48) -> str:
    text = "".join(t for t, r in zip(tokens, real.tolist(), strict=True) if r)
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _write(path: str | Path, produce: Callable[[], bytes], overwrite: bool, what: str) -> Path:
    """Claim ``path`` (a new file, or interv's own unchanged one; ``overwrite=True``: any
    regular file, never a link or a directory), then write what ``produce`` returns with
    interv's one safe-write primitive (:func:`interv._outputs.write_file`)."""
    with claim_file(path, what=what, by="interv view_attention", overwrite=overwrite) as out:
        return out.write_bytes(Path(path).expanduser().name, produce())


def _effects_of(result: Any) -> Report | tuple[InterventionResult, ...] | None:
    if result is None or isinstance(result, Report):
        return result
    if isinstance(result, InterventionResult):
        return (result,)
    if (
        isinstance(result, Sequence)
        and result
        and all(isinstance(r, InterventionResult) for r in result)
    ):
        return tuple(result)
    raise IntervError(
        "result must be an InterventionResult (from interv.run), a list of them, or a Report "
        f"(from interv.build_report); got {type(result).__name__}"
    )


def view_attention(
    model: TransformerBridge,
    prompts: str | Sequence[str] | torch.Tensor | TokenizedPairs,
    heads: Any = None,
    result: InterventionResult | Sequence[InterventionResult] | Report | None = None,
    *,
    attention_mask: torch.Tensor | None = None,
    prompt_indices: Sequence[int] | None = None,
    sink: int | Sequence[int] = 0,
    off_row_sink: str | None = None,
) -> AttentionViewer:
    """Patterns of ``heads`` on ``prompts`` with every query row's numbers, and effects.

    Args:
        model: a transformer-lens ``TransformerBridge``.
        prompts: a string or list of strings (BOS prepended), a ``[batch, pos]`` token
            tensor (with ``attention_mask`` if padded), or a :class:`~interv.TokenizedPairs`
            (its clean prompts; needed with ``result``).
        heads: ``[(layer, head), "L1H3", ...]``, a layer index (all its heads), or None
            (every head, for models with at most 16 heads).
        result: effects to show beside each head: an :class:`~interv.InterventionResult`
            (or a list) of ``interv.run`` on ``prompts``, or a :class:`~interv.Report` of
            them. A result is joined into a report here (flags as in the report, with
            concentration at the answer positions, ``prompts.answer_query_positions()``,
            either padding side: one more forward).
        attention_mask: ``[batch, pos]`` bool for a padded token tensor.
        prompt_indices: which prompts of the batch to show (default all).
        sink: sink key position(s), counted from each prompt's first real token.
        off_row_sink: None (default) refuses a model whose rows sum to less than 1 over
            real keys (an off-row learned sink, gpt-oss); ``"as_key"`` counts the deficit as
            one more sink key in every row's numbers.

    Returns:
        An :class:`AttentionViewer` (displays itself in Jupyter; ``save``, ``to_png``,
        ``to_svg``).

    Raises:
        IntervError: before any forward, for heads or prompts out of range, a prompt
            longer than the model's context, a result from another model or task, or a
            result of a task whose answers no one query position describes (then pass a
            report built with the query positions you choose).
    """
    effects = _effects_of(result)
    if effects is not None:
        if not isinstance(prompts, TokenizedPairs):
            raise IntervError(
                "result= shows effects beside the patterns of the prompts they were measured "
                "on: pass as prompts the TokenizedPairs the effects were measured on; got "
                f"{type(prompts).__name__}"
            )
        ours = Provenance.of(model, prompts)
        for item in (effects,) if isinstance(effects, Report) else effects:
            what = "the report" if isinstance(item, Report) else "the result"
            join(ours, item, what=("the viewer's prompts", what))
        if not isinstance(effects, Report):
            try:
                answers = prompts.answer_query_positions()
            except IntervError as error:
                raise IntervError(f"{error}, and pass that report as result=") from None
    view = attention_view(
        model,
        prompts,
        heads=heads,
        attention_mask=attention_mask,
        prompt_indices=prompt_indices,
        sink=sink,
        off_row_sink=off_row_sink,
        query_positions="all",  # the page draws full squares
    )
    report = effects if isinstance(effects, Report) or effects is None else None
    if report is None and effects is not None:
        task = prompts  # checked above
        heads_conc = concentration(
            model,
            task,
            sink=sink,
            query_positions=answers,
            off_row_sink=off_row_sink,
        )
        report = build_report(effects, heads_conc)
    return AttentionViewer(view, report)
