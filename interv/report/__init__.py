"""Consumers of results: text, tables and plots. Nothing here touches a model, except
:func:`~interv.report.sweep.report_from_sweep` (the sweep's own worker computes
concentration beside the stored effects) and :func:`~interv.report.viewer.view_attention`
(one forward for the patterns it draws)."""

from __future__ import annotations

from interv._lazy import lazy_exports

# no re-exports: a submodule resolves on attribute access (interv.report.table)
__getattr__, __dir__ = lazy_exports("interv.report", {}, globals())
