"""The shipped claims results (interv/data/claims.json, read by notebook 08) come from the
current config of benchmarks/claims.py and hold every field the notebook reads."""

from __future__ import annotations

import importlib.util
import json
from importlib import resources
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parent.parent / "benchmarks" / "claims.py"
ROOT = Path(__file__).resolve().parent.parent
NOTEBOOK = ROOT / "notebooks" / "08_claims_checked.ipynb"
RENDERED = ROOT / "docs" / "notebooks" / "08_claims_checked.ipynb"
CLAIMS_PAGE = ROOT / "docs" / "claims.md"


@pytest.fixture(scope="module")
def script():
    spec = importlib.util.spec_from_file_location("claims_script", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def shipped() -> dict:
    text = resources.files("interv.data").joinpath("claims.json").read_text(encoding="utf-8")
    return json.loads(text)


def test_shipped_results_have_the_scripts_config_and_hashes(script, shipped):
    assert shipped["config"] == script.CONFIG
    assert shipped["config_hash"] == script.config_hash(script.CONFIG)
    assert shipped["part_hashes"] == {
        part: script.config_hash(script.part_config(part)) for part in script.part_names()
    }
    assert list(shipped["results"]) == script.part_names()


def test_config_hash_changes_with_any_setting_and_only_that_parts_hash(script):
    changed = json.loads(json.dumps(script.CONFIG))
    changed["similarity"]["n_resamples"] += 1
    assert script.config_hash(changed) != script.config_hash(script.CONFIG)
    for part in script.part_names():
        same = script.config_hash(script.part_config(part, changed)) == script.config_hash(
            script.part_config(part)
        )
        assert same != part.startswith("similarity_"), part


# every field notebook 08 reads, per kind of part
ABLATION = {
    "model",
    "task",
    "n_prompts",
    "n_positions",
    "n_heads",
    "query_positions",
    "metric",
    "metric_unit",
    "effect_definition",
    "clean_mean",
    "corrupted_mean",
    "kinds",
    "semantics",
    "agreement",
    "agreement_per_layer",
    "agreement_caveat",
    "effects_excluding_zero",
    "largest_effects",
}
PRUNING = {
    "model",
    "n_heads",
    "evaluation",
    "unit",
    "semantics",
    "scope",
    "items",
    "n_items",
    "item_shape",
    "ks",
    "orders",
    "rankings",
    "random_orders",
    "unavailable",
    "best_vs_worst",
    "pairs",
}
SIMILARITY = {
    "model",
    "n_heads",
    "n_prompts",
    "prompt_lengths",
    "scope",
    "flips",
    "clustering",
    "clustering_algorithm",
    "sink_mass_per_head",
    "last_token_mass_per_head",
}
COLLAPSE = {
    "model",
    "before",
    "after",
    "n_heads",
    "n_prompts",
    "unit",
    "scope",
    "total",
    "sink_part",
    "content_part",
    "sink_share",
    "sink_share_ci",
    "level",
    "sink_mass_before",
    "sink_mass_after",
}
SINKS = {
    "model",
    "n_heads",
    "positional_embedding",
    "key",
    "eps",
    "level",
    "definition",
    "inputs",
}
NORMS = {"model", "n_layers", "n_sentences", "prompt_lengths", "scope", "definition", "groups"}
NORMS_GROUPS = {"minilm-l6": {"cls", "sep", "cls_sep"}}  # a causal model: the first token
ROLLOUT = {
    "model",
    "task",
    "n_prompts",
    "n_positions",
    "metric_unit",
    "exact_semantics",
    "rollout_caveat",
    "definition",
    "agreement",
    "sink",
}
STREAMING = {
    "model",
    "text",
    "positional_embedding",
    "window",
    "sink_tokens",
    "unit",
    "semantics",
    "definition",
    "variants",
}
INACTIVE = {
    "model",
    "n_heads",
    "n_chunks",
    "chunk_len",
    "threshold",
    "ks",
    "definition",
    "ablations",
}
STABILITY = {
    "model",
    "task",
    "n_pairs",
    "n_edges",
    "sizes",
    "jaccard",
    "ci_low",
    "ci_high",
    "stable_edges",
    "bar",
    "n_resamples",
    "top_edges",
    "sentence",
}
WINDOWS = {
    "model",
    "weights",
    "text",
    "n_tokens",
    "mask_rule",
    "attention",
    "local_layers",
    "global_layers",
    "window",
    "local",
    "local_past_window",
    "global",
    "heads_changing_rank",
    "max_rank_change",
    "rank_spearman",
    "n_heads",
    "top_heads",
    "top_overlap",
    "most_moved",
}
FIELDS = {
    "ablation": ABLATION,
    "pruning": PRUNING,
    "similarity": SIMILARITY,
    "collapse": COLLAPSE,
    "sinks": SINKS,
    "norms": NORMS,
    "rollout": ROLLOUT,
    "streaming": STREAMING,
    "inactive": INACTIVE,
    "stability": STABILITY,
    "windows": WINDOWS,
}


def test_shipped_results_hold_every_field_the_notebook_reads(shipped):
    for key in ("config", "config_hash", "interv_version", "command", "part_commands"):
        assert key in shipped, key
    for part, numbers in shipped["results"].items():
        missing = FIELDS[part.split("_", 1)[0]] - set(numbers)
        assert not missing, (part, missing)
        assert part in shipped["part_commands"] and part in shipped["provenance"]
        assert {"seconds", "cpus", "torch_threads", "load_average_before"} <= set(
            shipped["provenance"][part]
        )
    for part in (p for p in shipped["results"] if p.startswith("ablation_")):
        numbers = shipped["results"][part]
        for kind in numbers["kinds"]:
            for metric in ("entropy", "normalized_entropy", "sink_mass", "contribution_norm"):
                assert set(numbers["agreement"][kind][metric]) == {"rho", "ci", "n_heads"}
                rows = numbers["agreement_per_layer"][kind][metric]
                assert len(rows["rho"]) == len(rows["ci_low"]) == len(rows["layers"])
    for part in (p for p in shipped["results"] if p.startswith("pruning_")):
        numbers = shipped["results"][part]
        for order in numbers["orders"].values():
            assert len(order["values"]) == len(order["ci_low"]) == len(numbers["ks"])
        assert [gap["k"] for gap in numbers["best_vs_worst"]] == numbers["ks"]
    for part in (p for p in shipped["results"] if p.startswith("sinks_")):
        for numbers in shipped["results"][part]["inputs"].values():
            assert {"rate", "ci", "per_layer", "n_prompts", "length", "norm_ratio"} <= set(numbers)
            assert set(numbers["norm_ratio"]) == {"key", "value"}
    for part in (p for p in shipped["results"] if p.startswith("norms_")):
        groups = NORMS_GROUPS.get(part.split("_", 1)[1], {"first"})
        assert set(shipped["results"][part]["groups"]) == groups, part
    for part in (p for p in shipped["results"] if p.startswith("rollout_")):
        for scope in ("with_sink", "without_sink"):
            methods = shipped["results"][part]["agreement"][scope]
            assert set(methods) == {"rollout", "raw_attention", "norm_contribution"}
    for part in (p for p in shipped["results"] if p.startswith("streaming_")):
        for variant in shipped["results"][part]["variants"].values():
            assert {"full", "window", "first_token_hidden"} <= set(variant["conditions"])
    for part in (p for p in shipped["results"] if p.startswith("inactive_")):
        numbers = shipped["results"][part]
        for kind in numbers["ablations"].values():
            assert {"n_inactive_alone", "share_inactive_alone", "joint"} <= set(kind)
            assert {"spearman_sink_vs_abs_change", "spearman_norm_vs_abs_change"} <= set(kind)
            assert set(kind["joint"]) == {"sink_score", "output_norm", "exact"}
            for curve in kind["joint"].values():
                columns = ("relative_change", "ci_low", "ci_high", "precision")
                assert all(len(curve[c]) == len(numbers["ks"]) for c in columns)
                assert curve["largest_k_below"] in [0, *numbers["ks"]]
    for part in (p for p in shipped["results"] if p.startswith("stability_")):
        numbers = shipped["results"][part]
        columns = ("jaccard", "ci_low", "ci_high", "stable_edges")
        assert all(len(numbers[c]) == len(numbers["sizes"]) for c in columns)
    for part in (p for p in shipped["results"] if p.startswith("windows_")):
        numbers = shipped["results"][part]
        for scope in ("local", "local_past_window", "global"):
            assert {"masked_mean", "naive_mean", "shift_mean", "shift_ci", "shift_max_abs"} <= set(
                numbers[scope]
            )
    for part in (p for p in shipped["results"] if p.startswith("similarity_")):
        numbers = shipped["results"][part]
        for flip in numbers["flips"].values():
            assert {"rate", "ci", "n_flips", "n_ties", "n_triples", "sampled"} <= set(flip)


def test_existing_parts_keep_their_hashes_when_parts_are_added(script):
    # each part hashes only its own slice of the config: a new section leaves the others alone
    extended = json.loads(json.dumps(script.CONFIG))
    extended["streaming"]["window"] += 1
    for part in script.part_names():
        same = script.config_hash(script.part_config(part, extended)) == script.config_hash(
            script.part_config(part)
        )
        assert same != part.startswith("streaming_"), part


def test_shipped_results_are_small_and_the_notebook_reads_that_file(shipped):
    # twelve claims' numbers on two causal models, MiniLM and the zoo; the package carries it
    size = len(resources.files("interv.data").joinpath("claims.json").read_bytes())
    assert size < 160 * 1024, f"{size} bytes"
    cells = json.loads(NOTEBOOK.read_text(encoding="utf-8"))["cells"]
    source = "".join("".join(cell["source"]) for cell in cells)
    assert 'resources.files("interv.data").joinpath("claims.json")' in source


def test_task_parts_may_name_their_model_and_keep_the_others_hashes(script):
    # ablation_ioi_gemma3-270m: the IOI task on Gemma, its own model and batch size in its hash
    task, model, entry, batch_size = script.task_settings("ablation", "ioi_gemma3-270m")
    assert (task, model) == ("ioi", "gemma3-270m")
    assert set(entry) == {"n_pairs", "seed"}
    assert batch_size == script.CONFIG["ablation"]["tasks"]["ioi_gemma3-270m"]["batch_size"]
    assert script.task_settings("ablation", "ioi")[:2] == ("ioi", "smollm2-135m")
    gemma = script.part_config("ablation_ioi_gemma3-270m")
    assert gemma["model"] == "gemma3-270m" and gemma["task"]["name"] == "ioi_gemma3-270m"
    assert script.part_config("ablation_ioi")["model"] == "smollm2-135m"


def _table(text: str) -> str:
    return "\n".join(line for line in text.splitlines() if line.startswith("|"))


def test_the_docs_two_model_table_is_the_rendered_notebooks():
    # docs/claims.md copies the table notebook 08 prints from the stored file (one owner: the
    # file; test_notebooks checks the rendered copy against a fresh run)
    cells = json.loads(RENDERED.read_text(encoding="utf-8"))["cells"]
    printed = [
        "".join(output.get("text", ""))
        for cell in cells
        if cell["cell_type"] == "code" and "TWO_MODEL_TABLE" in "".join(cell["source"])
        for output in cell["outputs"]
    ]
    table = _table("".join(printed))
    assert table.count("\n") >= 5, "the rendered notebook prints no two-model table"
    assert table in _table(CLAIMS_PAGE.read_text(encoding="utf-8"))
