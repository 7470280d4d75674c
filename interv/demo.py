"""``interv demo``: the whole pipeline on one model, written to a report directory.

The demo runs, on a built-in task and the same prompts throughout:

1. concentration of every head at the answer position (the query whose output is
   scored), with the sink at key position 0 (BOS);
2. per head: zero, mean (over the task's clean prompts, same position) and resample
   (from the corrupted prompts) ablation of the head output ``z``, a denoising patch
   of ``z``, and a value intervention at the sink (the head's value vector at key
   position 0 set to zero);
3. per layer and position: a denoising patch of the residual stream (``resid_pre``);
4. the report (:func:`interv.report.table.build_report`), its plots, and the
   attention row of the most instructive head, saved with
   :func:`interv.report.render.save_report`.

This module (with :func:`report_from_sweep`) is the only part of the report layer
that runs a model, and it does so through the public API.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from interv._checks import as_positions, check_index
from interv.errors import IntervError

if TYPE_CHECKING:
    from interv.engine.interventions import Intervention
    from interv.report.table import Report
    from interv.tasks.tokenized import TokenizedPairs

__all__ = [
    "DEFAULT_MODEL",
    "DemoResult",
    "answer_query_positions",
    "demo_interventions",
    "report_from_sweep",
    "run_demo",
]

DEFAULT_MODEL = "induction-2l"
"""The zoo model the demo runs on by default (ships with interv)."""

_TASK_OF_MODEL = {"induction-2l": "induction", "smollm2-135m": "ioi"}
_MAX_BATCH_ROWS = 512


@dataclass(frozen=True, eq=False)
class DemoResult:
    """What the demo produced: the report, the written files and the run time.

    Attributes:
        report: the typed report.
        paths: format -> written path (see :func:`interv.report.render.save_report`).
        seconds: wall-clock time of the whole demo, in seconds.
    """

    report: Report
    paths: dict[str, Path]
    seconds: float


def answer_query_positions(task: TokenizedPairs) -> tuple[int, ...]:
    """Query positions (for :func:`interv.concentration`) that are the task's answer positions.

    Concentration counts query positions from each prompt's first real token, the
    engine counts answer positions in the padded tensor. ``(-1,)`` (the last real
    token) is returned when every answer position is its prompt's last real token;
    ``(p,)`` when every prompt is right-padded and answered at the same position ``p``.

    Raises:
        IntervError: neither holds (then pass explicit query positions).
    """
    rows = torch.arange(task.n_pairs)
    real = task.attention_mask
    last_real = real.shape[1] - 1 - real.flip(-1).int().argmax(-1)
    if bool((task.answer_positions == last_real).all()) and task.padding_side == "right":
        return (-1,)
    first_real = real.int().argmax(-1)
    relative = task.answer_positions - first_real
    if bool((relative == relative[0]).all()) and bool(real[rows, task.answer_positions].all()):
        return (int(relative[0]),)
    raise IntervError(
        "the task's answer positions are neither every prompt's last real token nor one "
        f"common position (answer positions {task.answer_positions.tolist()}); pass "
        "query_positions explicitly"
    )


def demo_interventions(
    n_layers: int, n_heads: int, n_positions: int, layers: Sequence[int] | None = None
) -> list[Intervention]:
    """The demo's interventions: five per head, then one residual patch per layer x position."""
    from interv.engine.interventions import (
        ActivationPatch,
        MeanAblation,
        ResampleAblation,
        ValueScale,
        ZeroAblation,
    )

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
    for layer in chosen:
        interventions += [
            ActivationPatch("resid_pre", layer, direction="denoise", positions=(position,))
            for position in range(n_positions)
        ]
    return interventions


def _attention_row_figure(model: Any, task: TokenizedPairs, report: Report) -> Any:
    """Bars of the most instructive head's attention row on the first prompt."""
    from interv.engine.forward import Prompts, forward
    from interv.engine.sites import Site
    from interv.report.plots import attention_row

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


def run_demo(
    model: str = DEFAULT_MODEL,
    out: str | Path = "interv-report",
    *,
    n_prompts: int | None = None,
    layers: Sequence[int] | None = None,
    seed: int = 0,
    n_bootstrap: int = 1000,
) -> DemoResult:
    """Run the whole pipeline on ``model`` and its built-in task; write the report to ``out``.

    Args:
        model: ``"induction-2l"`` (zoo, default; task ``"induction"``) or
            ``"smollm2-135m"`` (task ``"ioi"``).
        out: directory to write the report into (created if missing).
        n_prompts: prompt pairs (default 16 for the zoo model, 8 for SmolLM2).
        layers: layers whose heads are intervened on (default: all).
        seed: seed of the task's prompts and of the bootstrap.
        n_bootstrap: bootstrap resamples of prompts.
    """
    import time

    from interv.analysis.concentration import concentration
    from interv.engine.runner import run
    from interv.models.loading import load_model
    from interv.report.render import save_report
    from interv.report.table import build_report
    from interv.tasks.builtin import load_task

    task_name = _TASK_OF_MODEL.get(model)
    if task_name is None:
        raise IntervError(f"unknown demo model {model!r}; choose one of {tuple(_TASK_OF_MODEL)}")
    start = time.perf_counter()
    bridge = load_model(model)
    default_prompts = 16 if model == DEFAULT_MODEL else 8
    pairs = load_task(task_name, n_pairs=n_prompts or default_prompts, seed=seed)
    task = pairs.tokenize(bridge)
    heads_conc = concentration(bridge, task, sink=0, query_positions=answer_query_positions(task))
    interventions = demo_interventions(
        bridge.cfg.n_layers, bridge.cfg.n_heads, task.n_positions, layers
    )
    effects = run(bridge, task, interventions, "logit_diff", max_batch_size=_MAX_BATCH_ROWS)
    report = build_report(effects, heads_conc, n_bootstrap=n_bootstrap, seed=seed)
    figure = _attention_row_figure(bridge, task, report)
    paths = save_report(report, out, figures=None if figure is None else {"attention_row": figure})
    return DemoResult(report, paths, time.perf_counter() - start)


def report_from_sweep(directory: str | Path, *, n_bootstrap: int = 1000, seed: int = 0) -> Report:
    """A report of a saved sweep: its stored effects beside freshly computed concentration.

    Loads the sweep's result with :func:`interv.sweeps.load_sweep`, then the sweep's
    model and task (from its manifest) to compute concentration at the answer positions
    of the same prompts; sites come from the sweep's own intervention list.
    """
    from interv.analysis.concentration import concentration
    from interv.report.table import build_report
    from interv.sweeps.collect import load_sweep
    from interv.sweeps.execute import SweepWorker, as_config
    from interv.sweeps.plan import Shard
    from interv.sweeps.store import read_manifest

    effects = load_sweep(directory)
    manifest = read_manifest(directory)
    worker = SweepWorker.load(as_config(manifest["config"]))
    shard = None if manifest["shard"] is None else Shard.parse(manifest["shard"])
    interventions = [
        iv
        for unit in worker.units
        if shard is None or shard.owns(unit.index)
        for iv in unit.interventions
    ]
    heads_conc = concentration(
        worker.model, worker.task, sink=0, query_positions=answer_query_positions(worker.task)
    )
    return build_report(
        effects, heads_conc, interventions=interventions, n_bootstrap=n_bootstrap, seed=seed
    )
