"""Scripted sweeps: a TOML config in, a resumable, shardable result directory out.

A sweep runs many interventions of one model on one task and writes every result to
disk as soon as it is computed, so it can be killed at any moment and resumed by
rerunning the same command, split into shards across machines and merged, or spread
over Ray workers::

    from interv.sweeps import load_sweep, merge_sweeps, run_sweep

    result = run_sweep("examples/sweep_zoo.toml", "out/zoo")          # InterventionResult
    run_sweep("examples/sweep_zoo.toml", "out/zoo-0", shard="0/2")     # one share ...
    run_sweep("examples/sweep_zoo.toml", "out/zoo-1", shard="1/2")     # ... and the other
    merged = merge_sweeps(["out/zoo-0", "out/zoo-1"], "out/zoo-all")  # == result
    again = load_sweep("out/zoo")                                      # no model needed

On the command line: ``interv sweep CONFIG.toml --out DIR [--shard i/n] [--quiet]``
and ``interv sweep-merge DIR... --out DIR``.

Modules: :mod:`~interv.sweeps.config` (the TOML schema, validated before any model is
loaded), :mod:`~interv.sweeps.plan` (interventions, work units, shards),
:mod:`~interv.sweeps.store` (the directory format), :mod:`~interv.sweeps.execute`
(the loop), :mod:`~interv.sweeps.collect` (reading back, merging),
:mod:`~interv.sweeps.ray_executor` (optional Ray workers), :mod:`~interv.sweeps.screened`
(``[sweep.screen]``: each entry screened, resumable).

Importing this package is cheap: torch is imported on first use of a public name.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from interv._lazy import lazy_exports

# public name -> module that owns it
_EXPORTS: dict[str, str] = {
    "Shard": "interv.sweeps.plan",
    "SweepConfig": "interv.sweeps.config",
    "load_config": "interv.sweeps.config",
    "parse_config": "interv.sweeps.config",
    "load_sweep": "interv.sweeps.collect",
    "merge_sweeps": "interv.sweeps.collect",
    "run_sweep": "interv.sweeps.execute",
    "run_sweep_ray": "interv.sweeps.ray_executor",
}


__all__ = sorted(_EXPORTS)

__getattr__, __dir__ = lazy_exports("interv.sweeps", _EXPORTS, globals())


if TYPE_CHECKING:  # pragma: no cover - static analysers see the real names
    from interv.sweeps.collect import load_sweep, merge_sweeps
    from interv.sweeps.config import SweepConfig, load_config, parse_config
    from interv.sweeps.execute import run_sweep
    from interv.sweeps.plan import Shard
    from interv.sweeps.ray_executor import run_sweep_ray
