"""pandas DataFrames of interv's results (optional: ``pip install "interv[pandas]"``).

>>> frame = result.to_pandas()  # one row per intervention x prompt
>>> frame.pivot_table(index=["layer", "head"], columns="kind", values="effect")

Every frame is *long*: one row per observation, with the unit (and, for causal numbers,
the intervention's semantics sentence) as columns, so ``pivot`` / ``pivot_table`` give
any wide view without losing what a number means:

- :func:`result_frame` (``InterventionResult.to_pandas``, also a loaded sweep): one row
  per intervention and prompt: the metric under the intervention, both baselines, the
  *effect* (``value`` minus the value of the run it modified) and the recovery;
- :func:`concentration_frame` (``HeadConcentration.to_pandas``): one row per prompt,
  layer, head, query position and metric, with the metric's unit;
- :func:`similarity_frame` (``HeadSimilarity.to_pandas``): one row per measure,
  convention and head pair;
- :func:`pruning_frame` (``PruningCurves.to_pandas``): one row per order and number of
  heads removed;
- :func:`report_frame` (``Report.to_pandas``): one row per report row (site x
  intervention), effect statistics beside the head's concentration.

Nothing in interv needs pandas to run: only these conversions import it, and they
raise :class:`~interv.IntervError` naming the install command when it is missing.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from interv.errors import IntervError

if TYPE_CHECKING:
    import pandas

    from interv.analysis.concentration import HeadConcentration
    from interv.analysis.pruning.curves import PruningCurves
    from interv.analysis.similarity import HeadSimilarity
    from interv.engine.results import InterventionResult
    from interv.report.table import Report

__all__ = [
    "concentration_frame",
    "pruning_frame",
    "report_frame",
    "require_pandas",
    "result_frame",
    "similarity_frame",
]


def require_pandas() -> Any:
    """The ``pandas`` module, or :class:`IntervError` saying how to install it."""
    try:
        import pandas
    except ImportError as error:
        raise IntervError(
            "to_pandas() and interv report --csv/--parquet need pandas, an optional "
            "dependency of interv: pip install 'interv[pandas]' (or pip install pandas)"
        ) from error
    return pandas


def result_frame(result: InterventionResult) -> pandas.DataFrame:
    """One row per intervention x prompt (see :meth:`InterventionResult.to_records`),
    plus ``effect`` = ``value`` minus the value of the run the intervention modified
    (``clean`` or ``corrupted``, per ``base_run``), in ``unit``."""
    pd = require_pandas()
    frame = pd.DataFrame.from_records(result.to_records())
    if frame.empty:
        return frame
    base = frame["clean"].where(frame["base_run"] == "clean", frame["corrupted"])
    frame.insert(frame.columns.get_loc("value") + 1, "effect", frame["value"] - base)
    frame["positions"] = frame["positions"].map(_positions_text)
    return frame


def concentration_frame(concentration: HeadConcentration) -> pandas.DataFrame:
    """One row per prompt, layer, head, query position and metric, at real queries.

    Columns: ``model``, ``prompt``, ``layer``, ``head``, ``label`` (``L1H3``),
    ``query_position`` (as requested: from the first real token, negative from the last),
    ``query_index`` (the position it resolved to in that prompt), ``n_available_keys``,
    ``metric``, ``value`` (NaN where undefined, e.g. ``n <= 1``), ``unit``.
    """
    pd = require_pandas()
    import numpy as np

    from interv.analysis.concentration import METRICS

    n_prompts, n_layers, n_heads, n_queries = concentration.entropy.shape
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
    query_index = concentration.query_index.numpy()[prompt, query]
    real = query_index >= 0
    base = {
        "model": concentration.model_name,
        "prompt": prompt[real],
        "layer": layer[real],
        "head": head[real],
        "label": [f"L{a}H{b}" for a, b in zip(layer[real], head[real], strict=True)],
        "query_position": np.asarray(concentration.query_positions)[query[real]],
        "query_index": query_index[real],
        "n_available_keys": concentration.n_available_keys.numpy()[prompt, query][real],
    }
    frames = [
        pd.DataFrame(
            {
                **base,
                "metric": name,
                "value": concentration.metric(name).numpy().ravel()[real],
                "unit": unit,
            }
        )
        for name, unit in METRICS.items()
    ]
    return pd.concat(frames, ignore_index=True)


def similarity_frame(similarity: HeadSimilarity) -> pandas.DataFrame:
    """One row per measure, convention and head pair (see :meth:`HeadSimilarity.to_records`)."""
    pd = require_pandas()
    frame = pd.DataFrame.from_records(similarity.to_records())
    if "sink_positions" in frame:
        frame["sink_positions"] = frame["sink_positions"].map(_positions_text)
    return frame


def pruning_frame(curves: PruningCurves, *, level: float = 0.95) -> pandas.DataFrame:
    """One row per order and heads removed (see :meth:`PruningCurves.to_records`).

    Curves that carry every item's value also get ``ci_low`` and ``ci_high``: the
    percentile bootstrap interval over items of each point (:meth:`PruningCurves.intervals`
    at ``level``, 1000 resamples, seed 0), described in ``frame.attrs["interval"]``.
    """
    pd = require_pandas()
    frame = pd.DataFrame.from_records(curves.to_records())
    frame["heads_removed"] = frame["heads_removed"].map(" ".join)
    if curves.item_values:
        intervals = curves.intervals(level=level)
        bounds = [
            intervals[name][i].tolist() for name in curves.orders for i in range(len(curves.ks))
        ]
        frame["ci_low"] = [low for low, _ in bounds]
        frame["ci_high"] = [high for _, high in bounds]
        frame.attrs["interval"] = (
            f"{level:.0%} percentile bootstrap interval over the {curves.n_items} "
            f"{curves.items}, 1000 resamples, seed 0, in {curves.unit}"
        )
    return frame


def report_frame(report: Report) -> pandas.DataFrame:
    """One row per report row: the site, the intervention and its semantics sentence, the
    effect statistics (``effect_unit``), the recovery and flags, and the head's
    concentration: ``<metric>`` (mean over prompts) and ``<metric>_sd`` for every metric
    of :data:`~interv.analysis.concentration.METRICS` (NaN for rows that are not one head).

    ``frame.attrs["units"]`` maps every numeric column to its unit.
    """
    pd = require_pandas()
    from interv.engine.protocol import kind_of

    h = report.header
    units = h.concentration_units
    records = []
    for row in report.rows:
        site = row.site
        kind = kind_of(row.kind)
        record: dict[str, Any] = {
            "index": row.index,
            "label": row.label,
            "component": None if site is None else site.component,
            "layer": None if site is None else site.layer,
            "head": None if site is None else site.head,
            "positions": _positions_text(None if site is None else site.positions),
            "kind": row.kind,
            "family": None if kind is None else kind.cls.family,
            "semantics": row.semantics,
            "base_run": row.base_run,
            "effect_mean": row.effect_mean,
            "effect_ci_low": row.effect_ci_low,
            "effect_ci_high": row.effect_ci_high,
            "effect_std": row.effect_std,
            "effect_min": row.effect_min,
            "effect_max": row.effect_max,
            "effect_unit": h.metric_unit,
            "ci_level": h.ci_level,
            "recovery": row.recovery,
            "flags": "; ".join(row.flags),
        }
        for name in units:
            record[name] = None if row.concentration is None else row.concentration[name]
            record[f"{name}_sd"] = (
                None if row.concentration_std is None else row.concentration_std[name]
            )
        record.update(model=h.model, task=h.task, n_prompts=h.n_prompts, metric=h.metric_name)
        records.append(record)
    frame = pd.DataFrame.from_records(records)
    for name in units:
        frame[[name, f"{name}_sd"]] = frame[[name, f"{name}_sd"]].astype(float)
    frame["recovery"] = frame["recovery"].astype(float)
    frame[["layer", "head"]] = frame[["layer", "head"]].astype("Int64")
    frame.attrs["units"] = {
        **dict.fromkeys(
            ("effect_mean", "effect_ci_low", "effect_ci_high", "effect_std", "effect_min"),
            h.metric_unit,
        ),
        "effect_max": h.metric_unit,
        "recovery": "dimensionless (1 = clean, 0 = corrupted)",
        **{name: unit for name, unit in units.items()},
        **{f"{name}_sd": unit for name, unit in units.items()},
    }
    return frame


def _positions_text(positions: Any) -> str | None:
    """Positions as text (``"3 5"``), so that frames hold no lists; None = all positions."""
    if positions is None:
        return None
    return " ".join(str(int(p)) for p in positions)
