"""Provenance as a value: one join that refuses naming the field; every public function that
combines two results (or a result with the model and prompts it is given) refuses a
mismatched pair, the functions found by their signatures; and the probe's failures."""

from __future__ import annotations

import dataclasses
import importlib
import inspect
import pkgutil
import re

import pytest
from transformer_lens.model_bridge import TransformerBridge
from transformer_lens.model_bridge.sources.native import TransformerBridgeConfig

import interv
from interv.analysis import attention_rows, head_similarity
from interv.analysis.attention_view import attention_view
from interv.audit import Screen
from interv.circuits import discover, edge_scores, faithfulness
from interv.circuits.mission import mission_link
from interv.errors import IntervError
from interv.provenance import FIELDS, Provenance, compared_across, join, model_identity
from interv.report.table import build_report

# ---- the join ----

A = Provenance("m", revision="r1", dtype="float32", prompts="p1", n_prompts=4, metric="logit_diff")


def test_the_join_keeps_what_both_agree_on_and_what_only_one_has():
    other = Provenance("m", revision="r1", dtype="float32", prompts="p1", pairs="q1")
    joined = join(A, other)
    assert joined == dataclasses.replace(A, pairs="q1")
    assert join(joined, A) == joined


@pytest.mark.parametrize("field", list(FIELDS))
def test_the_join_refuses_naming_the_field_that_differs(field):
    mine, theirs = (7, 8) if field == "n_prompts" else ("mine", "theirs")
    first = dataclasses.replace(A, **{field: mine})
    second = dataclasses.replace(A, **{field: theirs})
    message = f"the circuit and the concentration come from different {FIELDS[field]} ({mine!r}"
    with pytest.raises(IntervError, match=re.escape(message)):
        join(first, second, what=("the circuit", "the concentration"))


def test_a_comparison_across_a_condition_lets_it_differ_and_forgets_it():
    later = dataclasses.replace(A, revision="r2")
    joined = join(A, later, across=("revision",))
    assert joined.revision is None and joined.prompts == "p1"
    with pytest.raises(IntervError, match="different dtypes"):
        join(A, dataclasses.replace(later, dtype="bfloat16"), across=("revision",))
    with pytest.raises(IntervError, match="unknown provenance fields"):
        join(A, A, across=("checkpoint",))


def test_a_value_without_provenance_is_refused():
    with pytest.raises(IntervError, match="carries no provenance"):
        join(A, {"model": "m"})


def _native(seed: int) -> TransformerBridge:
    config = TransformerBridgeConfig(
        d_model=16, d_head=4, n_layers=1, n_ctx=8, n_heads=4, d_vocab=20, seed=seed,
        model_name="native-1l",
    )  # fmt: skip
    return TransformerBridge.boot_native(config)


def test_two_checkpoints_of_one_model_differ_in_their_weights_not_their_name():
    first, second = model_identity(_native(1)), model_identity(_native(2))
    assert first[0] == second[0] and first[2] == second[2] == "float32"
    assert first[1] != second[1]
    assert model_identity(_native(1)) == first  # the digest is deterministic


# ---- every function that combines two results ----


def _public_api() -> dict[str, object]:
    """Every name of interv's public API: the ``__all__`` of each public module and package
    face (a face re-exports names of its private modules), by qualified name."""
    api: dict[str, object] = {}
    for info in pkgutil.walk_packages(interv.__path__, "interv."):
        if any(part.startswith("_") for part in info.name.split(".")):
            continue
        try:
            module = importlib.import_module(info.name)
        except ImportError:  # an optional extra (Ray) that is not installed
            continue
        for name in getattr(module, "__all__", ()):
            value = getattr(module, name)
            if inspect.isfunction(value) or inspect.isclass(value):
                api[f"{value.__module__}.{value.__qualname__}"] = value
    return api


def _result_types(api: dict[str, object]) -> dict[str, type]:
    """Public classes of interv that carry a provenance (a field or a property)."""
    return {
        value.__name__: value
        for value in api.values()
        if inspect.isclass(value)
        and (
            isinstance(getattr(value, "provenance", None), property)
            or (
                dataclasses.is_dataclass(value)
                and "provenance" in {f.name for f in dataclasses.fields(value)}
            )
        )
    }


_SOURCES = ("task", "prompts", "prompts_or_tokens")


def _combining(api: dict[str, object], types: dict[str, type]) -> list[tuple[str, object, dict]]:
    """``(name, callable, {parameter: result type name})`` of every public function (and
    class constructor) of interv that takes two results, or a result beside the model and
    the prompts it runs, read from the parameters' annotations."""
    pattern = re.compile(r"\b(" + "|".join(sorted(types)) + r")\b")
    found = []
    for name, value in sorted(api.items()):
        if inspect.isclass(value) and value.__name__ in types:
            continue  # a result's own constructor
        try:
            parameters = inspect.signature(value).parameters
        except (TypeError, ValueError):
            continue
        typed = {}
        for p in parameters.values():
            match = pattern.search(str(p.annotation))
            if match:
                typed[p.name] = match[1]
        runs = "model" in parameters and any(s in parameters for s in _SOURCES)
        if len(typed) + int(runs) >= 2:
            found.append((name, value, typed))
    return found


API = _public_api()
TYPES = _result_types(API)
COMBINING = _combining(API, TYPES)


def test_the_result_types_and_the_functions_that_join_them_are_found():
    assert {"InterventionResult", "HeadConcentration", "AttentionRows", "EdgeScores"} <= set(TYPES)
    assert {"CircuitResult", "FaithfulnessCurve", "MissionLink", "Report"} <= set(TYPES)
    names = {name.rsplit(".", 1)[1] for name, _, _ in COMBINING}
    assert {"mission_link", "build_report", "circuit_markdown", "discover", "faithfulness"} <= names
    assert {"view_attention", "entropy_change_attribution", "AttentionViewer"} <= names


@pytest.fixture(scope="module")
def world():
    """One value of every result type, all of the zoo model and one task."""
    model = interv.load_model("induction-2l")
    task = interv.load_task("induction", n_pairs=6, seed=2).tokenize(model)
    heads = [interv.ZeroAblation(layer, head) for layer in range(2) for head in range(4)]
    result = interv.run(model, task, heads, progress=False)
    concentration = interv.concentration(model, task, query_positions=[-1], progress=False)
    rows = attention_rows(model, task)
    scores = edge_scores(model, task)
    screen = Screen(top_k=5, audit=5, alpha=None)
    circuit = discover(model, task, scores=scores, screen=screen)
    values = {
        "InterventionResult": result,
        "HeadConcentration": concentration,
        "AttentionRows": rows,
        "HeadSimilarity": head_similarity(rows, measures=("cosine",), n_resamples=10),
        "EdgeScores": scores,
        "CircuitResult": circuit,
        "FaithfulnessCurve": faithfulness(model, task, circuit, n_bootstrap=20),
        "MissionLink": mission_link(circuit, concentration, n_bootstrap=20),
        "Report": build_report(result, concentration, n_bootstrap=20),
        "AttentionView": attention_view(model, task, heads=[(1, 0)]),
    }
    values["ReportData"] = values["Report"]  # what the renderers read of a report
    missing = set(TYPES) - set(values)
    assert not missing, f"add a value of {missing} to this fixture"
    return {"model": model, "task": task, "Screen": screen, **values}


def _with(value, **changes):
    """``value`` with its provenance (or the provenance of the field that holds it) changed."""
    names = {f.name for f in dataclasses.fields(value)}
    if "provenance" in names:
        return dataclasses.replace(value, provenance=value.provenance.replace(**changes))
    for name in names:
        inner = getattr(value, name)
        if dataclasses.is_dataclass(inner) and hasattr(inner, "provenance"):
            return dataclasses.replace(value, **{name: _with(inner, **changes)})
    raise AssertionError(f"no provenance to change in {type(value).__name__}")


def _arguments(function, typed: dict, world: dict) -> dict:
    arguments = {}
    for p in inspect.signature(function).parameters.values():
        if p.name in typed:
            arguments[p.name] = world[typed[p.name]]
        elif p.name == "model":
            arguments[p.name] = world["model"]
        elif p.name in _SOURCES:
            arguments[p.name] = world["task"]
        elif "Screen" in str(p.annotation):
            arguments[p.name] = world["Screen"]
        elif p.default is p.empty and str(p.annotation) == "int":
            arguments[p.name] = 0
        elif p.default is p.empty and str(p.annotation) == "tuple[int, ...]":
            arguments[p.name] = (0,)
        elif p.default is inspect.Parameter.empty and p.kind not in (
            p.VAR_POSITIONAL,
            p.VAR_KEYWORD,
        ):
            raise AssertionError(f"no value for parameter {p.name!r} of {function.__qualname__}")
    return arguments


@pytest.mark.parametrize(("name", "function", "typed"), COMBINING, ids=[c[0] for c in COMBINING])
def test_every_function_combining_two_results_refuses_a_mismatched_pair(
    name, function, typed, world
):
    arguments = _arguments(function, typed, world)
    function(**arguments)  # the matched values join
    across = compared_across(function)
    own = {p: world[t].provenance for p, t in typed.items()}
    if "model" in arguments and any(s in arguments for s in _SOURCES):
        own["(model, prompts)"] = Provenance.of(world["model"], world["task"])
    checked = 0
    for changed, original in own.items():
        if changed not in typed:
            continue
        for field in FIELDS:
            others = [o for p, o in own.items() if p != changed]
            if field in across or getattr(original, field) is None:
                continue
            if all(getattr(o, field) is None for o in others):
                continue
            wrong = 999 if field == "n_prompts" else f"mismatched-{field}"
            bad = dict(arguments, **{changed: _with(arguments[changed], **{field: wrong})})
            with pytest.raises(IntervError, match=re.escape(f"different {FIELDS[field]}")):
                function(**bad)
            checked += 1
    assert checked, f"{name}: no field to mismatch (every field compared across?)"


# ---- the probe's failures: each joined another task's numbers before ----


@pytest.fixture(scope="module")
def other_task(world):
    """The same built-in task, other prompts: same name, count and lengths."""
    task = interv.load_task("induction", n_pairs=6, seed=3).tokenize(world["model"])
    mine = world["task"]
    assert (task.name, task.n_pairs, task.n_positions) == (
        mine.name,
        mine.n_pairs,
        mine.n_positions,
    )
    return task


def test_the_mission_link_refuses_the_concentration_of_other_prompts_of_the_same_count(
    world, other_task
):
    heads = interv.concentration(world["model"], other_task, query_positions=[-1], progress=False)
    with pytest.raises(
        IntervError, match=r"the circuit and the concentration come from different prompts"
    ):
        mission_link(world["CircuitResult"], heads)


def test_discover_refuses_the_screen_of_another_task(world, other_task):
    scores = edge_scores(world["model"], other_task)
    with pytest.raises(IntervError, match="the given scores come from different prompts"):
        discover(world["model"], world["task"], scores=scores, screen=world["Screen"])


def test_the_viewer_refuses_a_report_of_another_task_of_the_same_name_count_and_lengths(
    world, other_task
):
    model = world["model"]
    effects = interv.run(model, other_task, [interv.ZeroAblation(1, 0)], progress=False)
    heads = interv.concentration(model, other_task, query_positions=[-1], progress=False)
    report = build_report(effects, heads, n_bootstrap=20)
    with pytest.raises(IntervError, match="the report come from different prompts"):
        interv.view_attention(model, world["task"], heads=[(1, 0)], result=report)
