"""Consumers of results: text, tables and plots. Nothing here touches a model, except
:func:`~interv.report.sweep.report_from_sweep`, which loads a sweep's model through the
sweep's own worker to compute concentration beside the stored effects."""

from __future__ import annotations

from interv._lazy import lazy_exports

# no re-exports: a submodule resolves on attribute access (interv.report.table)
__getattr__, __dir__ = lazy_exports("interv.report", {}, globals())
