"""``interv demo``: the whole pipeline on one model, written to a report directory.

The demo runs, on a built-in task (or the user's own pairs, ``pairs=``) and the same
prompts throughout:

1. concentration of every head at the answer position (the query whose output is
   scored), with the sink at key position 0 (BOS);
2. per head: zero, mean (over the task's clean prompts, same position) and resample
   (from the corrupted prompts) ablation of the head output ``z``, a denoising patch
   of ``z``, and a value intervention at the sink (the head's value vector at key
   position 0 set to zero);
3. per layer and position: a denoising patch of the residual stream (``resid_pre``);
4. the report (:func:`interv.report.table.build_report`), its plots, and the
   attention row of the most instructive head, written with
   :func:`interv.report.render.write_report` into the directory claimed up front.

This module and :func:`interv.report.sweep.report_from_sweep` are the only parts of the
report layer that run a model, and they do so through the public API.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from interv._checks import as_int, as_positions, check_index
from interv._outputs import claim_dir, fresh_dir
from interv._progress import stages
from interv.analysis.concentration import concentration
from interv.engine.forward import Prompts, forward
from interv.engine.interventions import (
    ActivationPatch,
    MeanAblation,
    ResampleAblation,
    ValueScale,
    ZeroAblation,
)
from interv.engine.runner import run, warm_cache
from interv.engine.sites import Site
from interv.engine.stacking import BaseRunCache
from interv.errors import IntervError
from interv.models.loading import load_model
from interv.report.plots import attention_row
from interv.report.render import write_report
from interv.report.table import build_report
from interv.tasks.builtin import load_task
from interv.tasks.pairs import PromptPairs

if TYPE_CHECKING:
    from interv.engine.interventions import Intervention
    from interv.report.report import Report
    from interv.tasks.tokenized import TokenizedPairs

__all__ = [
    "DEFAULT_MODEL",
    "DEFAULT_OUT",
    "GRID_COMPONENTS",
    "DemoResult",
    "check_demo_options",
    "demo_interventions",
    "grid_interventions",
    "recovery_grid",
    "run_demo",
]

GRID_COMPONENTS = ("resid_pre", "resid_post")
"""Residual-stream components a layer x position recovery grid can patch."""

DEFAULT_MODEL = "induction-2l"
"""The zoo model the demo runs on by default (ships with interv)."""

DEFAULT_OUT: dict[str, str] = {
    "induction-2l": "interv-report",
    "smollm2-135m": "interv-report-smollm2",
    "gemma3-270m": "interv-report-gemma3",
}
"""Default output directory of each demo model (one per model, so no demo replaces
another's report)."""

# model -> (built-in task, number of layers, default prompt pairs). The layer counts
# let --layers be checked before the model loads; run_demo confirms them after.
_DEMO_MODELS: dict[str, tuple[str, int, int]] = {
    "induction-2l": ("induction", 2, 16),
    "smollm2-135m": ("ioi", 30, 8),
    "gemma3-270m": ("ioi", 18, 8),
}
_MAX_BATCH_ROWS = 512
_STAGES = (
    "loading the model",
    "tokenizing the task",
    "concentration",
    "interventions",
    "report statistics",
    "plots and files",
)


@dataclass(frozen=True, eq=False)
class DemoResult:
    """What the demo produced: the report, the written files and the run time.

    Attributes:
        report: the typed report.
        paths: format -> written path (see :func:`interv.report.render.report_files`).
        seconds: wall-clock time of the whole demo, in seconds.
        out_dir: the directory written (the default one may have moved to a fresh name,
            see :func:`run_demo`).
    """

    report: Report
    paths: dict[str, Path]
    seconds: float
    out_dir: Path


def demo_interventions(
    n_layers: int, n_heads: int, n_positions: int, layers: Sequence[int] | None = None
) -> list[Intervention]:
    """The demo's interventions: five per head, then one residual patch per layer x position
    ``0..n_positions - 1`` (the demo passes the positions real in every prompt)."""
    chosen = list(range(n_layers)) if layers is None else list(as_positions(layers, "layers"))
    for layer in chosen:
        check_index(layer, n_layers, "layer", f"the model has {n_layers} layers")
    interventions: list[Intervention] = []
    for layer in chosen:
        for head in range(n_heads):
            interventions += [
                ZeroAblation(layer, head),
                MeanAblation(layer, head, reference="clean"),
                ResampleAblation(layer, head, source="corrupted", seed=0),
                ActivationPatch("z", layer, head, direction="denoise"),
                ValueScale(layer, head, key_positions=(0,), factor=0.0),
            ]
    return interventions + grid_interventions(n_layers, n_positions, layers=chosen)


def grid_interventions(
    n_layers: int,
    n_positions: int,
    *,
    component: str = "resid_pre",
    layers: Sequence[int] | None = None,
    positions: Sequence[int] | None = None,
) -> list[Intervention]:
    """One denoising patch of ``component`` per layer x position (layer-major): the clean
    run's residual stream at that one layer and position patched into the corrupted run.
    ``positions`` (default ``0..n_positions - 1``): the positions patched, e.g. a task's
    :attr:`~interv.TokenizedPairs.shared_positions` (a position that is padding in some
    prompt is refused by :func:`interv.run`).

    Raises:
        IntervError: a component outside :data:`GRID_COMPONENTS`, or a layer outside
            ``0 .. n_layers - 1`` (named with the allowed range).
    """
    if component not in GRID_COMPONENTS:
        raise IntervError(f"unknown grid component {component!r}; choose one of {GRID_COMPONENTS}")
    as_int(n_positions, "n_positions", minimum=1)
    chosen = list(range(n_layers)) if layers is None else list(as_positions(layers, "layers"))
    for layer in chosen:
        check_index(layer, n_layers, "layer", f"the model has {n_layers} layers")
    return [
        ActivationPatch(component, layer, direction="denoise", positions=(position,))
        for layer in chosen
        for position in (range(n_positions) if positions is None else positions)
    ]


def recovery_grid(
    model: Any,
    task: PromptPairs | TokenizedPairs,
    *,
    component: str = "resid_pre",
    layers: Sequence[int] | None = None,
    metric: str = "logit_diff",
    n_bootstrap: int = 1000,
    seed: int = 0,
) -> Report:
    """The layer x position recovery grid of any task, as a report.

    Every cell is an exact intervention: :func:`grid_interventions` (the clean run's
    ``component`` at one layer and one position patched into the corrupted run), run
    through :func:`interv.run`; the report (:func:`interv.report.table.build_report`,
    concentration at the answer positions) draws the grid on its page and in
    ``recovery_by_layer_position.png``, one cell per patch with its normalized recovery
    (dimensionless, 1 = clean behaviour, 0 = corrupted) and its sentence.

    >>> report = recovery_grid(model, interv.load_task("induction", n_pairs=8))  # doctest: +SKIP

    Args:
        model: a ``TransformerBridge``.
        task: the prompt pairs (tokenized here: a prompt longer than the model's context
            is refused, naming the pair and ``n_ctx``) or already tokenized pairs.
        component: ``"resid_pre"`` (before the block) or ``"resid_post"`` (after it).
        layers: the layers patched (default all).
        metric: the target metric (``logit_diff`` needs foils).
        n_bootstrap, seed: the report's bootstrap over prompts.
    """
    if isinstance(task, PromptPairs):
        task = task.tokenize(model)
    n_layers = int(model.cfg.n_layers)
    interventions = grid_interventions(
        n_layers,
        task.n_positions,
        component=component,
        layers=layers,
        positions=task.shared_positions,  # the positions real in every prompt
    )
    heads_conc = concentration(model, task, sink=0, query_positions=task.answer_query_positions())
    effects = run(model, task, interventions, metric, max_batch_size=_MAX_BATCH_ROWS)
    return build_report(effects, heads_conc, n_bootstrap=n_bootstrap, seed=seed)


def _attention_row_figure(model: Any, task: TokenizedPairs, report: Report) -> Any:
    """Bars of the most instructive head's attention row on the first prompt."""
    instructive = report.instructive(1)
    if not instructive:
        return None
    site = instructive[0][0].site
    pattern = Site("pattern", site.layer)
    prompt = Prompts.of(task.clean_tokens[:1], task.attention_mask[:1])
    out = forward(model, prompt, capture=[pattern], readout=None, stop_after=pattern)
    query = int(task.answer_positions[0])
    weights = out.captured[pattern][0, site.head, query, : query + 1].cpu()
    return attention_row(
        weights,
        sink=report.header.sink_positions,
        title=f"{site.label}, prompt 0, query = answer position {query}",
    )


def check_demo_options(
    model: str, n_prompts: int | None, layers: Sequence[int] | None
) -> tuple[str, int, tuple[int, ...] | None]:
    """Validate the demo's options without loading anything.

    Returns:
        The task name, the number of prompt pairs and the layers (None = all).

    Raises:
        IntervError: an unknown demo model, ``n_prompts`` below 1, or layers that are
            empty, repeated, negative or beyond the model's layers.
    """
    if model not in _DEMO_MODELS:
        raise IntervError(f"unknown demo model {model!r}; choose one of {tuple(_DEMO_MODELS)}")
    task_name, n_layers, default_prompts = _DEMO_MODELS[model]
    pairs = default_prompts if n_prompts is None else as_int(n_prompts, "n_prompts", minimum=1)
    chosen = as_positions(layers, "layers", allow_empty=False)
    if chosen is not None:
        bad = [layer for layer in chosen if layer >= n_layers]
        if bad:
            raise IntervError(
                f"layers {bad} do not exist; {model} has {n_layers} layers (valid layers "
                f"0..{n_layers - 1})"
            )
    return task_name, pairs, chosen


def run_demo(
    model: str = DEFAULT_MODEL,
    out: str | Path | None = None,
    *,
    n_prompts: int | None = None,
    layers: Sequence[int] | None = None,
    seed: int = 0,
    n_bootstrap: int = 1000,
    progress: bool | None = None,
    pairs: PromptPairs | None = None,
) -> DemoResult:
    """Run the whole pipeline on ``model`` and its built-in task (or ``pairs``); write the
    report to ``out``.

    Every option and the output directory are checked before the model loads. The
    directory must be new, empty, or hold only files an earlier interv run wrote there
    (see :mod:`interv._outputs`); interv never overwrites anyone else's files. When the
    run fails, what it wrote is removed; a run killed while writing leaves files that a
    rerun of the same call replaces (each file is complete or absent).

    Args:
        model: ``"induction-2l"`` (zoo, default; task ``"induction"``),
            ``"smollm2-135m"`` or ``"gemma3-270m"`` (task ``"ioi"``).
        out: directory to write the report into (created if missing). None: the model's
            :data:`DEFAULT_OUT` directory, or, if that holds files interv did not write,
            the first free ``<default>-2``, ``<default>-3``, ... (see ``out_dir`` of the
            result).
        n_prompts: prompt pairs, >= 1 (default 16 for the zoo model, 8 for SmolLM2).
        layers: layers whose heads are intervened on (default: all).
        seed: seed of the task's prompts and of the bootstrap.
        n_bootstrap: bootstrap resamples of prompts.
        progress: a progress bar on stderr; None = only when stderr is a terminal.
        pairs: the user's own prompt pairs (e.g. ``PromptPairs.from_jsonl(path)``) instead
            of the model's built-in task, every pair used (``n_prompts`` must then be
            None); the demo's metric is ``logit_diff``, so they need foils.

    Raises:
        IntervError: a bad option or output directory (before any model is loaded); a
            prompt of ``pairs`` longer than the model's context (the pair, the prompt and
            ``n_ctx`` are named, before any intervention runs).
    """
    task_name, pairs_count, chosen = check_demo_options(model, n_prompts, layers)
    if pairs is not None:
        _check_own_pairs(pairs, n_prompts)
    as_int(n_bootstrap, "n_bootstrap", minimum=1)
    start = time.perf_counter()
    if out is None:
        output = fresh_dir(DEFAULT_OUT[model], what="output directory", by="interv demo")
    else:
        output = claim_dir(out, what="output directory", by="interv demo")
    with output, stages(_STAGES, enabled=progress) as bar:
        source = pairs if pairs is not None else (task_name, pairs_count)
        report, figure = _compute(model, source, chosen, seed, n_bootstrap, bar)
        bar.start("plots and files")
        paths = write_report(
            report, output, figures=None if figure is None else {"attention_row": figure}
        )
    return DemoResult(report, paths, time.perf_counter() - start, output.path)


def _check_own_pairs(pairs: Any, n_prompts: int | None) -> None:
    """The user's pairs can run the demo: a PromptPairs with foils, and no n_prompts."""
    if not isinstance(pairs, PromptPairs):
        raise IntervError(
            f"pairs must be an interv.PromptPairs (e.g. PromptPairs.from_jsonl(path)); got "
            f"{type(pairs).__name__}"
        )
    if n_prompts is not None:
        raise IntervError(
            f"n_prompts={n_prompts} counts the built-in task's pairs; with your own pairs "
            f"every one of the {pairs.n_pairs} is used (pass fewer pairs instead)"
        )
    if pairs.foils is None:
        raise IntervError(
            f"the demo scores logit_diff (target minus foil logit), but the pairs "
            f"{pairs.name!r} have no foils; give a foil for every pair"
        )


def _compute(
    model: str,
    source: PromptPairs | tuple[str, int],
    layers: tuple[int, ...] | None,
    seed: int,
    n_bootstrap: int,
    bar: Any,
) -> tuple[Report, Any]:
    """The demo's report and attention-row figure (stages 1-5 of the progress bar)."""
    bar.start("loading the model")
    bridge = load_model(model)
    n_layers = int(bridge.cfg.n_layers)
    if n_layers != _DEMO_MODELS[model][1]:
        raise IntervError(
            f"{model} has {n_layers} layers, but the demo's table says {_DEMO_MODELS[model][1]}"
        )
    bar.start("tokenizing the task")
    if isinstance(source, PromptPairs):
        pairs = source
    else:
        pairs = load_task(source[0], n_pairs=source[1], seed=seed)
    task = pairs.tokenize(bridge)
    bar.start("concentration")
    heads_conc = concentration(bridge, task, sink=0, query_positions=task.answer_query_positions())
    bar.start("interventions")
    # residual patches only where every prompt has a real token (right padding: the
    # shortest prompt's positions); elsewhere some prompts would add an exact no-effect
    shared = len(task.shared_positions)
    interventions = demo_interventions(n_layers, bridge.cfg.n_heads, shared, layers)
    # One engine run per batch of interventions, so the bar moves as they are computed;
    # the runs share one cache of the clean and corrupted base runs, filled once.
    cache = BaseRunCache()
    warm_cache(bridge, task, interventions, cache)
    chunk = max(1, _MAX_BATCH_ROWS // task.n_pairs)
    effects = []
    for first in range(0, len(interventions), chunk):
        bar.detail(f"{first}/{len(interventions)} interventions")
        part = interventions[first : first + chunk]
        effects.append(
            run(bridge, task, part, "logit_diff", max_batch_size=_MAX_BATCH_ROWS, cache=cache)
        )
    bar.detail(f"{len(interventions)}/{len(interventions)} interventions")
    bar.start("report statistics")
    report = build_report(effects, heads_conc, n_bootstrap=n_bootstrap, seed=seed)
    return report, _attention_row_figure(bridge, task, report)
