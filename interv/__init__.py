"""interv: causal interpretability for transformers.

Attention *concentration* (how a head spreads its weights) and causal *effect* (how
much the target output changes when a component is intervened on) are different
questions. interv measures both, for the same scope, and never lets one stand in
for the other.

>>> import interv
>>> model = interv.load_model("induction-2l")
>>> task = interv.load_task("induction", n_pairs=16).tokenize(model)
>>> heads = interv.concentration(model, task, query_positions=[-1])
>>> result = interv.run(model, task, [interv.ZeroAblation(1, 0)], metric="logit_diff")

The top level holds what a first hour needs: models and tasks, concentration, the
runner and every intervention kind (and the protocol to write your own), reports and
sweeps. The rest lives in :mod:`interv.metrics` (row-level math),
:mod:`interv.analysis` (whole-model sink analyses, pruning, attribution patching),
:mod:`interv.sweeps`, :mod:`interv.report` and :mod:`interv.engine`.

Importing ``interv`` is cheap and changes nothing in the process: the public names below are
resolved lazily on first use, so neither torch, transformer-lens nor matplotlib is imported
until a function that needs them is touched, and no environment variable, ``sys.path`` entry
or global setting is changed. At the first heavy use (``interv.load_model``, ``interv.run``,
``import interv.engine...``), before torch is imported, interv makes torch's threads sleep
while they wait instead of spinning (several times faster beside other jobs) and says so in
one line, unless :func:`set_threads` or ``OMP_WAIT_POLICY`` chose already.
"""

# Nothing here imports a module Python has not loaded by the time it runs a package with
# `-m`, so that `python -m interv` can take the working directory off sys.path
# (interv/__main__.py) before any file there could stand in for a module interv imports.
from interv._lazy import lazy_exports
from interv._version import __version__
from interv.errors import IntervError

TYPE_CHECKING = False  # as typing.TYPE_CHECKING, without importing typing

# public name -> module that owns it
_EXPORTS: dict[str, str] = {
    # models and tasks
    "load_model": "interv.models.loading",
    "load_task": "interv.tasks.builtin",
    "PromptPairs": "interv.tasks.pairs",
    "TokenizedPairs": "interv.tasks.tokenized",
    # concentration of a model's heads (reduced inside hooks)
    "concentration": "interv.analysis.concentration",
    "HeadConcentration": "interv.analysis.concentration",
    # the runner and its result
    "run": "interv.engine.runner",
    "set_threads": "interv._threads",
    "InterventionResult": "interv.engine.results",
    "Screen": "interv.audit",
    # circuits: edge screens verified by exact path patching
    "discover": "interv.circuits.discovery",
    "CircuitResult": "interv.circuits.discovery",
    "edge_scores": "interv.circuits.screens",
    "EdgeScores": "interv.circuits.screens",
    "edge_effects": "interv.circuits.patching",
    "faithfulness": "interv.circuits.curves",
    "FaithfulnessCurve": "interv.circuits.curves",
    # intervention kinds
    "ZeroAblation": "interv.engine.interventions",
    "MeanAblation": "interv.engine.interventions",
    "ResampleAblation": "interv.engine.interventions",
    "ActivationPatch": "interv.engine.interventions",
    "ValueScale": "interv.engine.interventions",
    "ValueReplace": "interv.engine.interventions",
    "AttentionKnockout": "interv.engine.interventions",
    "PatternPatch": "interv.engine.interventions",
    "ValuePatch": "interv.engine.interventions",
    "Combined": "interv.engine.interventions",
    "PairAblation": "interv.engine.interventions",
    "AddVector": "interv.engine.directions",
    "ProjectOut": "interv.engine.directions",
    "SubspacePatch": "interv.engine.directions",
    "WindowAttention": "interv.engine.masks",
    "KeyKnockout": "interv.engine.masks",
    "DirectEffect": "interv.engine.paths",
    "PathPatch": "interv.engine.paths",
    # the protocol for your own kinds
    "Intervention": "interv.engine.protocol",
    "Site": "interv.engine.sites",
    "Read": "interv.engine.protocol",
    "ReferenceSet": "interv.engine.protocol",
    "EditContext": "interv.engine.protocol",
    "register": "interv.engine.protocol",
    # reports and sweeps
    "build_report": "interv.report.table",
    "Report": "interv.report.report",
    "save_report": "interv.report.render",
    "run_sweep": "interv.sweeps.execute",
    "load_sweep": "interv.sweeps.collect",
    "view_attention": "interv.report.viewer",
}


__all__ = ["IntervError", "__version__", *sorted(_EXPORTS)]

__getattr__, __dir__ = lazy_exports("interv", _EXPORTS, globals())


if TYPE_CHECKING:  # pragma: no cover - static analysers see the real names
    from interv._threads import set_threads
    from interv.analysis.concentration import HeadConcentration, concentration
    from interv.audit import Screen
    from interv.circuits.curves import FaithfulnessCurve, faithfulness
    from interv.circuits.discovery import CircuitResult, discover
    from interv.circuits.patching import edge_effects
    from interv.circuits.screens import EdgeScores, edge_scores
    from interv.engine.directions import AddVector, ProjectOut, SubspacePatch
    from interv.engine.interventions import (
        ActivationPatch,
        AttentionKnockout,
        Combined,
        MeanAblation,
        PairAblation,
        PatternPatch,
        ResampleAblation,
        ValuePatch,
        ValueReplace,
        ValueScale,
        ZeroAblation,
    )
    from interv.engine.masks import KeyKnockout, WindowAttention
    from interv.engine.paths import DirectEffect, PathPatch
    from interv.engine.protocol import EditContext, Intervention, Read, ReferenceSet, register
    from interv.engine.results import InterventionResult
    from interv.engine.runner import run
    from interv.engine.sites import Site
    from interv.models.loading import load_model
    from interv.report.render import save_report
    from interv.report.report import Report
    from interv.report.table import build_report
    from interv.report.viewer import view_attention
    from interv.sweeps.collect import load_sweep
    from interv.sweeps.execute import run_sweep
    from interv.tasks.builtin import load_task
    from interv.tasks.pairs import PromptPairs
    from interv.tasks.tokenized import TokenizedPairs
