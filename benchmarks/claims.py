"""The measurements behind ``notebooks/08_claims_checked.ipynb``: claims about attention, checked.

Every number is computed by interv from models and data that ship with it (SmolLM2-135M,
all-MiniLM-L6-v2, the IOI and capitals tasks, interv's text sample). Five kinds of parts, each
written to the results directory as soon as it is done (a finished part is not
recomputed when the script is rerun with the same config; the ablation sweeps resume
unit by unit):

- ``ablation_<task>``: every head of SmolLM2 (30 x 9 = 270) zero-, mean- and
  resample-ablated on the task (a resumable sweep, ``sweeps/<task>/``), joined with the
  heads' concentration at the answer position by :func:`interv.build_report`, whose
  agreement rows give Spearman's rho between each concentration metric and |effect| with
  a bootstrap interval over prompts, over all heads and per layer;
- ``pruning_<model>``: pruning curves over every head for each ranking (raw entropy,
  content entropy, sink mass, contribution norm, exact effect, attribution score, random
  orders of several seeds), mean-ablating cumulatively at chosen k, evaluated as next-token
  loss on interv's text sample (SmolLM2) or as the cosine of sentence embeddings to the
  unablated ones (MiniLM), with bootstrap intervals over text chunks / sentences;
- ``similarity_<model>``: head-similarity verdict flip rates between keep-sink and
  drop-sink (cosine, JS, Aitchison) over all heads, and the adjusted Rand index of the
  keep-sink vs drop-sink clusterings at several k, with bootstrap intervals over prompts;
- ``collapse_<zoo model>``: the entropy change of a zoo model from an early checkpoint
  to its final weights, split into sink growth and content sharpening, with a bootstrap
  interval of the sink share over held-out sequences;
- ``sinks_<model>``: Gu et al.'s sink rate of the first token (``Sink_1^0.3``) on natural
  input, random tokens, one repeated token and one repeated token after BOS, with the first
  token's key and value norms relative to the other tokens', per layer;
- ``norms_<model>``: MiniLM's raw attention mass on [CLS] and [SEP] against Kobayashi et
  al.'s norm-based share, per layer, with intervals over sentences;
- ``rollout_<task>``: attention rollout, raw attention and the norm-based contribution at
  the answer position against the exact effect of hiding each token from every head of
  every layer (Spearman over the prompt's tokens, with an interval over prompts);
- ``windows_<model>``: the seed's lesson on a real model with sliding windows (Gemma-3-270M,
  its Q4_K_M GGUF dequantized: a close relative of the hub's float model): normalized entropy
  at 4,096 tokens of interv's text sample (repeated) with ``n`` = the keys each layer's mask
  admits against the naive ``n`` = query position + 1, on local (512-key window) and global
  layers; how far the numbers move and how many of the 72 heads change rank;
- ``streaming_<model>``: next-token loss on interv's text sample with full attention, a
  sliding window, the window plus the first 1-4 tokens, the first token hidden and its
  values zeroed (StreamingLLM's masks as exact interventions), with and without BOS.

Then ``claims.json`` in the results directory: the config, its hash, the numbers (rounded)
and the commands; ``--ship`` also writes it to ``interv/data/claims.json``, the file the
notebook loads when no results directory is present. ``tests/test_claims_results.py``
checks that the shipped file's config hash is :func:`config_hash` of :data:`CONFIG`.

Every part has its own config hash (:func:`part_config`: its slice of :data:`CONFIG`). A
part's file in the results directory is reused when its hash is unchanged; a part missing
there is taken from the shipped ``interv/data/claims.json`` when the shipped part hash is
the same, unless ``--parts`` names it (so adding a part reruns only that part). After
changing how a part is computed or summarized, delete its file (and, for an ablation part,
its sweep directory) so that it is recomputed.

Run (57 minutes on 2 CPU cores shared with other work, load average 3 to 5, one torch
thread; each part prints its wall time and the load)::

    OMP_NUM_THREADS=1 python benchmarks/claims.py --out claims-results --ship
    python benchmarks/claims.py --out claims-results --parts similarity_minilm-l6   # one part

A task part on another model carries the model in its name: ``ablation_ioi_gemma3-270m``
and ``rollout_ioi_gemma3-270m`` are the IOI parts on Gemma-3-270M (their config entry names
the task, the model and a batch size; see :func:`task_settings`). The model parts of
Gemma-3-270M (``similarity_``, ``sinks_``, ``norms_``, ``streaming_``, ``inactive_``) are
entries of their sections' ``models``; ``norms_`` on a causal model reads the first token
(BOS) of chunks of the text sample instead of [CLS]/[SEP]. Each runs alone, and the stored
SmolLM2 parts are kept (their part hashes do not change)::

    python benchmarks/claims.py --out claims-results --parts sinks_gemma3-270m --ship

On 2 CPU cores at load 19-26 (one torch thread), Gemma's parts took 100 to 1,500 s each
(their provenance has the time and the load; docs/claims.md has the table).

The parts added for notebook 08's claims 6-9 (sinks, norms, rollout, streaming) take 1 to 3
minutes each on 2 shared CPU cores (their provenance records the time and the load). The
windows part (Gemma-3-270M at 4,096 tokens) took 15 minutes at load 12-17, one torch thread,
once its model was converted into interv's cache (about 4 minutes, once per machine).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import platform
import re
import sys
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

REPO = Path(__file__).resolve().parent.parent
SHIPPED = REPO / "interv" / "data" / "claims.json"
COMMAND = "OMP_NUM_THREADS=1 python benchmarks/claims.py --out claims-results --ship"

CONCENTRATION_METRICS = (
    "entropy",
    "normalized_entropy",
    "content_normalized_entropy",
    "sink_mass",
    "contribution_norm",
)
"""Concentration metrics whose agreement with |effect| the claims read (all layers and per
layer); the report computes two more (content entropy, sink contribution share), kept
for all layers only."""

CONFIG: dict[str, Any] = {
    "version": 1,
    "ablation": {
        "model": "smollm2-135m",
        "tasks": {
            "ioi": {"n_pairs": 32, "seed": 0},
            "capitals": {"n_pairs": 32, "seed": 0},
            "ioi_gemma3-270m": {
                "task": "ioi",
                "model": "gemma3-270m",
                "n_pairs": 8,
                "seed": 0,
                "batch_size": 32,
            },
        },
        "interventions": [
            {"kind": "zero_ablation", "sites": "all_heads"},
            {"kind": "mean_ablation", "sites": "all_heads", "reference": "clean"},
            {"kind": "resample_ablation", "sites": "all_heads", "source": "corrupted"},
        ],
        "metric": "logit_diff",
        "batch_size": 128,
        "unit_size": 30,
        "query_positions": [-1],
        "per_layer_metrics": list(CONCENTRATION_METRICS),
        "top_heads": 5,
        "n_bootstrap": 1000,
        "level": 0.95,
        "seed": 0,
    },
    "pruning": {
        "models": {
            "smollm2-135m": {
                "evaluation": {"kind": "text", "n_tokens": 100_000, "chunk_len": 128},
                "rankings": [
                    "entropy",
                    "content_entropy",
                    "sink_mass",
                    "contribution",
                    "exact_effect",
                    "attribution",
                    "random",
                ],
                "attribution_task": {"name": "ioi", "n_pairs": 32, "seed": 0},
                "ks": [0, 5, 10, 20, 40, 80, 135, 270],
            },
            "minilm-l6": {
                "evaluation": {"kind": "sentences", "n": 32, "min_words": 8, "max_words": 24},
                "rankings": ["entropy", "content_entropy", "sink_mass", "exact_effect", "random"],
                "attribution_task": None,
                "ks": [0, 5, 10, 20, 36, 54, 72],
            },
        },
        "random_seeds": [0, 1, 2, 3, 4],
        "first_heads": 5,
        "n_bootstrap": 1000,
        "level": 0.95,
        "seed": 0,
    },
    "similarity": {
        "models": {
            "smollm2-135m": {},
            "minilm-l6": {},
            # Aitchison's log-ratios need one set of keys: Gemma's windowed and global layers
            # admit different ones, and interv refuses the comparison (UNAVAILABLE_MEASURES)
            "gemma3-270m": {"measures": ["cosine", "js"]},
        },
        "sentences": {"n": 16, "min_words": 8, "max_words": 24},
        "measures": ["cosine", "js", "aitchison"],
        "cluster_ks": [4, 8, 16],
        "n_resamples": 200,
        "confidence": 0.95,
        "max_triples": 200_000,
        "seed": 0,
    },
    "collapse": {
        "models": ["induction-2l", "sink-lm-3l"],
        "before": 0,
        "n_sequences": 32,
        "n_bootstrap": 1000,
        "level": 0.95,
        "seed": 0,
    },
    "sinks": {
        "models": {
            "smollm2-135m": {"natural": "text_sample", "length": 64},
            "induction-2l": {"natural": "held_out", "length": 48},
            "sink-lm-3l": {"natural": "held_out", "length": 64},
            "gemma3-270m": {"natural": "text_sample", "length": 64},
        },
        "inputs": ["natural", "random", "repeated", "repeated_after_bos"],
        "n_prompts": 32,
        "key": 0,
        "eps": 0.3,
        "n_bootstrap": 1000,
        "level": 0.95,
        "seed": 0,
    },
    "norms": {
        "models": {
            "minilm-l6": {},
            "smollm2-135m": {"input": "text_sample", "length": 64},
            "gemma3-270m": {"input": "text_sample", "length": 64},
        },
        "sentences": {"n": 32, "min_words": 8, "max_words": 24},
        "n_bootstrap": 1000,
        "level": 0.95,
        "seed": 0,
    },
    "rollout": {
        "model": "smollm2-135m",
        "tasks": {
            "ioi": {"n_pairs": 32, "seed": 0},
            "capitals": {"n_pairs": 32, "seed": 0},
            "ioi_gemma3-270m": {
                "task": "ioi",
                "model": "gemma3-270m",
                "n_pairs": 16,
                "seed": 0,
                "batch_size": 32,
            },
        },
        "metric": "logit_diff",
        "residual": 0.5,
        "exact": "key_knockout",
        "batch_size": 128,
        "n_bootstrap": 1000,
        "level": 0.95,
        "seed": 0,
    },
    "inactive": {
        # Gemma-3-270M on fewer, shorter chunks: each of its ~180 forwards unembeds every
        # position into 262k tokens, on a machine at load 20
        "models": {
            "smollm2-135m": {"n_tokens": 512, "chunk_len": 64},
            "gemma3-270m": {"n_tokens": 128, "chunk_len": 16, "batch_size": 4},
        },
        "ablations": ["zero", "mean"],
        "threshold": 0.01,
        "shares": [0.05, 0.1, 0.12, 0.15, 0.2, 0.3],
        "rankings": ["sink_score", "output_norm", "exact"],
        "batch_size": 4,
        "n_bootstrap": 1000,
        "level": 0.95,
        "seed": 0,
    },
    "stability": {
        "tasks": {"ioi": {"n_pairs": 16, "seed": 0}},
        "model": "smollm2-135m",
        "method": "eap-ig",
        "steps": 5,
        "top_k": 100,
        "audit": 100,
        "n_resamples": 200,
        "bar": 0.8,
        "seed": 0,
    },
    "windows": {
        "models": {"gemma3-270m": {"n_tokens": 4096}},
        "metric": "normalized_entropy",
        "block": 64,
        "top_heads": 10,
        "n_bootstrap": 1000,
        "level": 0.95,
        "seed": 0,
    },
    "streaming": {
        "models": {
            "smollm2-135m": {"chunk_len": 127, "n_tokens": 100_000},
            "gemma3-270m": {"chunk_len": 127, "n_tokens": 762, "batch_size": 3},
        },
        "window": 32,
        "sink_tokens": [1, 2, 4],
        "bos": [True, False],
        "batch_size": 11,
        "n_bootstrap": 1000,
        "level": 0.95,
        "seed": 0,
    },
}
"""Everything the numbers depend on. Changing anything here changes :func:`config_hash`,
and the shipped results no longer match (a test says so): rerun the script."""

UNAVAILABLE_RANKINGS = {
    "minilm-l6": {
        "contribution": (
            "the value-aware contribution norm comes from interv.concentration, which covers "
            "causal models only; MiniLM is a bidirectional encoder"
        ),
        "attribution": (
            "attribution patching needs a prompt-pair task scored on output logits; MiniLM's "
            "masked-LM head is not in its checkpoint, so its logits are meaningless"
        ),
    }
}
"""Rankings the claim asks for that cannot be computed on a model, and why."""

UNAVAILABLE_MEASURES = {
    "gemma3-270m": {
        "aitchison": (
            "Aitchison's distance compares log-ratios over one set of keys, and Gemma's layers "
            "admit different keys (a 512-key window on 15 layers, none on 5, 11 and 17): "
            "interv.analysis.head_similarity refuses it across such layers"
        )
    }
}
"""Similarity measures the claim asks for that cannot be computed on a model, and why."""


def config_hash(config: dict[str, Any] = CONFIG) -> str:
    """First 16 hex digits of the SHA-256 of the canonical JSON of ``config``."""
    canonical = json.dumps(config, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()[:16]


SECTIONS = (
    "ablation",
    "pruning",
    "similarity",
    "collapse",
    "sinks",
    "norms",
    "rollout",
    "streaming",
    "inactive",
    "stability",
    "windows",
)
"""The kinds of parts, in the order they run; a section with ``tasks`` has one part per
task, the others one part per model."""


def part_names(config: dict[str, Any] = CONFIG) -> list[str]:
    """Every part of the measurement, in the order they run."""
    names = []
    for section in SECTIONS:
        settings = config[section]
        names += [f"{section}_{name}" for name in settings.get("tasks", settings.get("models"))]
    return names


def part_config(part: str, config: dict[str, Any] = CONFIG) -> dict[str, Any]:
    """The slice of ``config`` that one part's numbers depend on (its own hash, so that adding
    a part or a section does not invalidate the others)."""
    section, name = part.split("_", 1)
    settings = dict(config[section])
    if "tasks" in settings:
        tasks = settings.pop("tasks")
        entry = dict(tasks[name])
        # a task entry may name its own model and batch size (e.g. ``ioi_gemma3-270m``)
        for key in ("model", "batch_size"):
            if key in entry:
                settings[key] = entry.pop(key)
        return {"section": section, **settings, "task": {"name": name, **entry}}
    models = settings.pop("models")
    spec = models[name] if isinstance(models, dict) else {}
    return {"section": section, **settings, "model": name, **spec}


def task_settings(section: str, key: str) -> tuple[str, str, dict[str, Any], int]:
    """A task part's task name, model spec, ``{"n_pairs", "seed"}`` and batch size: the
    entry ``CONFIG[section]["tasks"][key]`` may name its task (``"task"``, default ``key``),
    its model and its batch size (default: the section's)."""
    cfg = CONFIG[section]
    entry = dict(cfg["tasks"][key])
    task = entry.pop("task", key)
    model = entry.pop("model", cfg["model"])
    batch_size = entry.pop("batch_size", cfg["batch_size"])
    return task, model, entry, batch_size


def sentences(n: int, min_words: int, max_words: int) -> list[str]:
    """The first ``n`` sentences of interv's text sample with ``min_words..max_words`` words."""
    from interv.analysis.pruning import text_sample

    text = text_sample().replace("\n", " ")
    found = [s.strip() for s in re.split(r"(?<=[.!?])\s+", text) if s.strip()]
    chosen = [s for s in found if min_words <= len(s.split()) <= max_words][:n]
    if len(chosen) < n:
        raise SystemExit(f"the text sample has only {len(chosen)} such sentences, not {n}")
    return chosen


def _round(value: float, digits: int = 4) -> float | None:
    """``value`` rounded for the shipped file; None for NaN (strict JSON)."""
    value = float(value)
    if math.isnan(value) or math.isinf(value):
        return None
    return round(value, digits)


def _interv_version() -> str:
    import interv

    return interv.__version__


def _load_average() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


_LOADED: dict[str, Any] = {}


def _model(spec: str) -> Any:
    import interv

    if spec not in _LOADED:
        _LOADED[spec] = interv.load_model(spec)
    return _LOADED[spec]


# ----------------------------------------------------------------------------- ablation


def ablation_part(task_name: str, out: Path) -> dict[str, Any]:
    """Zero, mean and resample ablation of every head of SmolLM2 on one task, with the
    agreement of each concentration metric with |effect| (all heads and per layer)."""
    import interv

    cfg = CONFIG["ablation"]
    key = task_name
    task_name, spec, task_cfg, batch_size = task_settings("ablation", key)
    model = _model(spec)
    sweep = {
        "model": {"spec": spec},
        "task": {"name": task_name, "n_pairs": task_cfg["n_pairs"], "seed": task_cfg["seed"]},
        "sweep": {
            "metric": cfg["metric"],
            "batch_size": batch_size,
            "unit_size": cfg["unit_size"],
            "seed": cfg["seed"],
            "interventions": [dict(entry) for entry in cfg["interventions"]],
        },
    }
    result = interv.run_sweep(sweep, out / "sweeps" / key, model=model, progress=False)
    task = interv.load_task(task_name, n_pairs=task_cfg["n_pairs"], seed=task_cfg["seed"])
    task = task.tokenize(model)
    if tuple(task.answer_positions.tolist()) != tuple(result.scope.answer_positions):
        raise SystemExit("the task tokenized here differs from the sweep's task")
    heads = interv.concentration(model, task, query_positions=cfg["query_positions"])
    report = interv.build_report(
        result, heads, n_bootstrap=cfg["n_bootstrap"], level=cfg["level"], seed=cfg["seed"]
    )
    header = report.header
    kinds = list(report.kinds)
    overall = {
        kind: {
            a.metric: {
                "rho": _round(a.rho),
                "ci": [_round(a.ci_low), _round(a.ci_high)],
                "n_heads": a.n_heads,
            }
            for a in report.agreement
            if a.kind == kind and a.layer is None
        }
        for kind in kinds
    }
    per_layer = {
        kind: {
            metric: _layer_rows(report.agreement, kind, metric)
            for metric in cfg["per_layer_metrics"]
        }
        for kind in kinds
    }
    semantics, top, significant = {}, {}, {}
    for kind in kinds:
        rows = [row for row in report.rows if row.kind == kind and row.head is not None]
        semantics[kind] = rows[0].semantics
        significant[kind] = {
            "n_heads": len(rows),
            "n_effect_ci_excludes_zero": sum(
                1 for row in rows if row.effect_ci_low > 0 or row.effect_ci_high < 0
            ),
        }
        top[kind] = [
            {
                "head": row.label,
                "effect": _round(row.effect_mean),
                "effect_ci": [_round(row.effect_ci_low), _round(row.effect_ci_high)],
                "normalized_entropy": _round(row.concentration["normalized_entropy"], 3),
                "sink_mass": _round(row.concentration["sink_mass"], 3),
            }
            for row in sorted(rows, key=lambda r: -abs(r.effect_mean))[: cfg["top_heads"]]
        ]
    return {
        "model": header.model,
        "task": header.task,
        "n_prompts": header.n_prompts,
        "n_positions": header.n_positions,
        "n_heads": header.n_layers * header.n_heads,
        "query_positions": header.query_positions,
        "sink_positions": list(header.sink_positions),
        "metric": header.metric_name,
        "metric_unit": header.metric_unit,
        "metric_definition": header.metric_definition,
        "effect_definition": header.effect_definition,
        "clean_mean": _round(header.clean_mean),
        "corrupted_mean": _round(header.corrupted_mean),
        "concentration_units": {m: header.concentration_units[m] for m in CONCENTRATION_METRICS},
        "n_bootstrap": header.n_bootstrap,
        "level": header.ci_level,
        "kinds": kinds,
        "semantics": semantics,
        "agreement": overall,
        "agreement_per_layer": per_layer,
        "agreement_caveat": report.agreement_caveat,
        "effects_excluding_zero": significant,
        "largest_effects": top,
    }


def _layer_rows(agreements: Any, kind: str, metric: str) -> dict[str, Any]:
    """The per-layer agreement of one kind and metric as parallel lists (3 decimals)."""
    rows = [a for a in agreements if a.kind == kind and a.metric == metric and a.layer is not None]
    counts = sorted({a.n_heads for a in rows})
    return {
        "layers": [a.layer for a in rows],
        "rho": [_round(a.rho, 3) for a in rows],
        "ci_low": [_round(a.ci_low, 3) for a in rows],
        "ci_high": [_round(a.ci_high, 3) for a in rows],
        "n_heads": counts[0] if len(counts) == 1 else [a.n_heads for a in rows],
    }


# ----------------------------------------------------------------------------- pruning


def _evaluation(model: Any, spec: dict[str, Any]) -> Any:
    from interv.analysis.pruning import EmbeddingEvaluation, TextEvaluation

    if spec["kind"] == "text":
        return TextEvaluation.from_text(
            model, n_tokens=spec["n_tokens"], chunk_len=spec["chunk_len"]
        )
    chosen = sentences(spec["n"], spec["min_words"], spec["max_words"])
    return EmbeddingEvaluation.from_sentences(model, chosen)


def pruning_part(spec_name: str, out: Path) -> dict[str, Any]:
    """Pruning curves of every ranking over every head of one model, with intervals."""
    import interv
    from interv.analysis.pruning import pruning_curves

    shared = CONFIG["pruning"]
    cfg = shared["models"][spec_name]
    model = _model(spec_name)
    evaluation = _evaluation(model, cfg["evaluation"])
    attribution_task = None
    if cfg["attribution_task"] is not None:
        task_cfg = cfg["attribution_task"]
        attribution_task = interv.load_task(
            task_cfg["name"], n_pairs=task_cfg["n_pairs"], seed=task_cfg["seed"]
        ).tokenize(model)
    curves = pruning_curves(
        model,
        evaluation,
        orders=cfg["rankings"],
        ks=cfg["ks"],
        attribution_task=attribution_task,
        random_seeds=shared["random_seeds"],
    )
    boot = {"level": shared["level"], "n_bootstrap": shared["n_bootstrap"], "seed": shared["seed"]}
    intervals = curves.intervals(**boot)
    names = list(curves.orders)
    rankings = [name for name in names if not name.startswith("random")]
    randoms = [name for name in names if name.startswith("random")]
    better = min if curves.lower_is_better else max
    worse = max if curves.lower_is_better else min
    gaps = []
    for i, k in enumerate(curves.ks):
        best = better(rankings, key=lambda n: float(curves.values[n][i]))
        worst = worse(rankings, key=lambda n: float(curves.values[n][i]))
        delta = curves.difference(best, worst, **boot)[i]  # worst - best, paired over items
        gaps.append(
            {
                "k": k,
                "best": best,
                "worst": worst,
                "worst_minus_best": _round(delta[0], 5),
                "ci": [_round(delta[1], 5), _round(delta[2], 5)],
            }
        )
    # named comparisons, paired over items: each ranking against the exact effect (the
    # single-head oracle), and raw entropy against content entropy (the sink channel)
    comparisons = [
        (name, "exact_effect")
        for name in rankings
        if name != "exact_effect" and "exact_effect" in rankings
    ]
    if "entropy" in rankings and "content_entropy" in rankings:
        comparisons.append(("entropy", "content_entropy"))
    pairs = {}
    for first, second in comparisons:
        delta = curves.difference(second, first, **boot)  # first - second
        pairs[f"{first} minus {second}"] = {
            "difference": [_round(v, 5) for v in delta[:, 0]],
            "ci_low": [_round(v, 5) for v in delta[:, 1]],
            "ci_high": [_round(v, 5) for v in delta[:, 2]],
        }
    torch_save(out / f"pruning_{spec_name}.items.pt", curves)
    return {
        "model": str(model.cfg.model_name),
        "n_heads": model.cfg.n_layers * model.cfg.n_heads,
        "evaluation": curves.evaluation,
        "unit": curves.unit,
        "lower_is_better": curves.lower_is_better,
        "semantics": curves.ablation,
        "scope": curves.scope,
        "items": curves.items,
        "n_items": curves.n_items,
        "item_shape": list(evaluation.tokens.shape),
        "ks": list(curves.ks),
        "level": shared["level"],
        "n_bootstrap": shared["n_bootstrap"],
        "orders": {
            name: {
                "rule": curves.rules[name],
                "values": [_round(v, 5) for v in curves.values[name]],
                "ci_low": [_round(v, 5) for v in intervals[name][:, 0]],
                "ci_high": [_round(v, 5) for v in intervals[name][:, 1]],
                "first_heads": [
                    f"L{a}H{b}" for a, b in curves.orders[name][: shared["first_heads"]]
                ],
            }
            for name in names
        },
        "rankings": rankings,
        "random_orders": randoms,
        "unavailable": UNAVAILABLE_RANKINGS.get(spec_name, {}),
        "best_vs_worst": gaps,
        "pairs": pairs,
    }


def torch_save(path: Path, curves: Any) -> None:
    """Every item's value of every curve, for later analyses (not shipped)."""
    import torch

    torch.save({"ks": curves.ks, "item_values": curves.item_values}, path)


# ----------------------------------------------------------------------------- similarity


def similarity_part(spec: str, out: Path) -> dict[str, Any]:
    """Flip rates and clustering agreement of every head of one model, with intervals."""
    import interv

    cfg = {**CONFIG["similarity"], **CONFIG["similarity"]["models"][spec]}
    model = _model(spec)
    prompts = sentences(**cfg["sentences"])
    rows = interv.analysis.attention_rows(model, prompts)
    similarity = interv.analysis.head_similarity(
        rows,
        measures=cfg["measures"],
        n_resamples=cfg["n_resamples"],
        confidence=cfg["confidence"],
        max_triples=cfg["max_triples"],
        seed=cfg["seed"],
    )
    flips = {
        flip.measure: {
            "rate": _round(flip.rate),
            "ci": [_round(flip.ci_low), _round(flip.ci_high)],
            "n_flips": flip.n_flips,
            "n_ties": flip.n_ties,
            "n_triples": flip.n_triples,
            "n_triples_total": flip.n_triples_total,
            "sampled": flip.sampled,
            "describe": flip.describe(),
        }
        for flip in similarity.flips
    }
    clustering = {
        measure: [
            {
                "k": a.k,
                "ari": _round(a.adjusted_rand_index),
                "ci": [_round(a.ci_low), _round(a.ci_high)],
                "n_resamples": a.n_resamples,
            }
            for a in interv.analysis.clustering_agreement(
                similarity,
                measure=measure,
                ks=cfg["cluster_ks"],
                n_resamples=cfg["n_resamples"],
                confidence=cfg["confidence"],
                seed=cfg["seed"],
            )
        ]
        for measure in cfg["measures"]
    }
    # where the mass goes: the sink (position 0) and the last real token ([SEP] on MiniLM)
    sink_mass, last_mass = _sink_and_last_mass(rows)
    share = similarity.aitchison_sink_share
    off_diagonal = share[~share.isnan()]
    return {
        "model": similarity.model_name,
        "n_heads": len(similarity.head_labels),
        "n_prompts": similarity.n_prompts,
        "prompt_lengths": [min(rows.prompt_lengths), max(rows.prompt_lengths)],
        "n_rows": similarity.n_rows,
        "scope": similarity.scope,
        "confidence": cfg["confidence"],
        "n_resamples": cfg["n_resamples"],
        "flips": flips,
        "unavailable_measures": UNAVAILABLE_MEASURES.get(spec, {}),
        "clustering": clustering,
        "clustering_algorithm": "agglomerative, average linkage (UPGMA), cut at k clusters",
        "sink_mass_per_head": {
            "mean": _round(sink_mass.mean()),
            "max": _round(sink_mass.max()),
            "n_heads_above_half": int((sink_mass > 0.5).sum()),
        },
        "last_token_mass_per_head": None
        if last_mass is None
        else {"mean": _round(last_mass.mean()), "max": _round(last_mass.max())},
        "aitchison_sink_share_median": _round(off_diagonal.median()),
    }


def _sink_and_last_mass(rows: Any) -> tuple[Any, Any]:
    """``[head]`` mean over prompts (each prompt's mean over its included query rows) of the
    mass on the sink keys and on the last real token (None for a causal model, where only
    the last query sees the last token)."""
    import torch

    sink, last = [], []
    for b in range(rows.n_prompts):
        queries = rows.included[b]  # [query_pos]
        pattern = rows.pattern[b][:, :, queries].double()  # [layer, head, query, key]
        sink.append((pattern * rows.sink_mask[b].double()).sum(dim=-1).mean(dim=-1).flatten())
        last_key = int(rows.key_mask[b].any(dim=0).nonzero()[-1, 0])
        last.append(pattern[..., last_key].mean(dim=-1).flatten())
    if rows.causal:
        return torch.stack(sink).mean(dim=0), None
    return torch.stack(sink).mean(dim=0), torch.stack(last).mean(dim=0)


# ----------------------------------------------------------------------------- collapse


def collapse_part(name: str, out: Path) -> dict[str, Any]:
    """The entropy change of a zoo model from a checkpoint to its final weights, split into
    sink growth and content sharpening, with a bootstrap interval of the sink share."""
    import interv

    cfg = CONFIG["collapse"]
    change = interv.zoo.checkpoint_entropy_change(
        name, before=cfg["before"], n_sequences=cfg["n_sequences"]
    )
    low, high = change.overall_share_interval(
        level=cfg["level"], n_bootstrap=cfg["n_bootstrap"], seed=cfg["seed"]
    )
    overall = change.overall
    return {
        "model": name,
        "before": change.before_label,
        "after": change.after_label,
        "n_heads": change.total.numel(),
        "n_prompts": change.n_prompts[0],
        "unit": change.unit,
        "scope": change.scope,
        "total": _round(overall["total"]),
        "sink_part": _round(overall["sink_part"]),
        "content_part": _round(overall["content_part"]),
        "sink_share": _round(overall["sink_share"]),
        "sink_share_ci": [_round(low), _round(high)],
        "level": cfg["level"],
        "sink_mass_before": _round(change.sink_mass_before.mean()),
        "sink_mass_after": _round(change.sink_mass_after.mean()),
        "describe": change.describe(),
    }


# ----------------------------------------------------------------------------- sinks


def _sink_inputs(spec: str, model: Any) -> dict[str, tuple[Any, str]]:
    """The four inputs of a sinks part: tokens and how they are named in the scope."""
    from interv import zoo
    from interv.analysis import TextEvaluation, random_tokens, repeated_tokens

    cfg = CONFIG["sinks"]
    settings = cfg["models"][spec]
    length, n, seed = settings["length"], cfg["n_prompts"], cfg["seed"]
    if settings["natural"] == "text_sample":
        text = TextEvaluation.from_text(model, n_tokens=100_000, chunk_len=length - 1)
        natural = (text.tokens, f"natural text: BOS + {length - 1} tokens of interv's text sample")
    else:
        tokens = zoo.held_out_batch(spec, n_sequences=n).tokens
        if tokens.shape[1] != length:
            raise SystemExit(
                f"{spec}: held-out sequences have {tokens.shape[1]} tokens, not {length}"
            )
        natural = (tokens, "natural input: held-out sequences of the model's training task")
    ordinary = "uniform over the vocabulary's non-special tokens"
    return {
        "natural": natural,
        "random": (
            random_tokens(model, n, length, seed=seed),
            f"random tokens: BOS + {length - 1} tokens {ordinary}",
        ),
        "repeated": (
            repeated_tokens(model, n, length, seed=seed),
            f"one repeated token: {length} copies of one token (no BOS)",
        ),
        "repeated_after_bos": (
            repeated_tokens(model, n, length, seed=seed, bos=True),
            f"one repeated token after BOS: BOS + {length - 1} copies of one token",
        ),
    }


def sinks_part(spec: str, out: Path) -> dict[str, Any]:
    """Gu et al.'s sink rate of the first token on natural, random and repeated-token input,
    with the first token's key and value norms relative to the other tokens'."""
    from interv.analysis import sink_profile

    cfg = CONFIG["sinks"]
    model = _model(spec)
    boot = {"level": cfg["level"], "n_bootstrap": cfg["n_bootstrap"], "seed": cfg["seed"]}
    inputs = {}
    for name, (tokens, label) in _sink_inputs(spec, model).items():
        profile = sink_profile(model, tokens, key=cfg["key"], eps=cfg["eps"], inputs=label)
        low, high = profile.rate_interval(**boot)
        norms = {}
        for which in ("key", "value"):
            ratio = profile.norm_ratio(which)
            ratio_low, ratio_high = profile.norm_ratio_interval(which, **boot)
            norms[which] = {
                "per_layer": [_round(v, 3) for v in ratio],
                "ci_low": [_round(v, 3) for v in ratio_low],
                "ci_high": [_round(v, 3) for v in ratio_high],
                "n_layers_below_1": int((ratio_high < 1).sum()),
                "n_layers_above_1": int((ratio_low > 1).sum()),
            }
        inputs[name] = {
            "label": label,
            "n_prompts": profile.n_prompts,
            "length": tokens.shape[1],
            "rate": _round(profile.rate),
            "ci": [_round(low), _round(high)],
            "per_layer": [_round(v, 3) for v in profile.per_layer],
            "mean_score": _round(profile.scores.nanmean()),
            "norm_ratio": norms,
            "scope": profile.scope,
        }
    return {
        "model": str(model.cfg.model_name),
        "n_layers": model.cfg.n_layers,
        "n_heads": model.cfg.n_layers * model.cfg.n_heads,
        "n_key_value_heads": getattr(model.cfg, "n_key_value_heads", None) or model.cfg.n_heads,
        "positional_embedding": str(model.cfg.positional_embedding_type),
        "key": cfg["key"],
        "eps": cfg["eps"],
        "level": cfg["level"],
        "definition": (
            "sink score of key 0 = mean attention weight on it over the queries that see it "
            "(Gu et al.'s alpha_1); sink rate = share of (prompt, layer, head) scores above eps "
            "(Gu et al.'s Sink_1^eps); norm ratio = ||k|| (or ||v||) of the first token over the "
            "mean of the prompt's other tokens, per key/value head, mean over heads and prompts"
        ),
        "inputs": inputs,
    }


# ----------------------------------------------------------------------------- norms


def norms_part(spec: str, out: Path) -> dict[str, Any]:
    """Raw attention mass against norm-based weighting (Kobayashi et al. 2020) on [CLS] and
    [SEP], per layer, with intervals over sentences."""
    import torch

    from interv.analysis import token_attention
    from interv.stats import bootstrap_indices, bootstrap_mean_ci

    cfg = CONFIG["norms"]
    settings = cfg["models"][spec]
    model = _model(spec)
    if settings.get("input") == "text_sample":
        # a causal model: the first token (BOS) of chunks of interv's text sample
        from interv.analysis import TextEvaluation

        length = settings["length"]
        text = TextEvaluation.from_text(model, n_tokens=100_000, chunk_len=length - 1)
        tokens = text.tokens  # every chunk of the sample
        real = torch.ones_like(tokens, dtype=torch.bool)
        flow = token_attention(model, tokens)
        first = torch.zeros_like(real)
        first[:, 0] = True
        key_groups = (("first", first),)
        inputs = f"BOS + {length - 1} tokens of interv's text sample, {len(tokens)} chunks"
    else:
        chosen = sentences(**cfg["sentences"])
        encoded = model.tokenizer(chosen, padding=True, return_tensors="pt")
        tokens, real = encoded["input_ids"], encoded["attention_mask"].bool()
        flow = token_attention(model, tokens, attention_mask=real)
        cls = real & (tokens == model.tokenizer.cls_token_id)
        sep = real & (tokens == model.tokenizer.sep_token_id)
        key_groups = (("cls", cls), ("sep", sep), ("cls_sep", cls | sep))
        inputs = f"{len(chosen)} sentences of interv's text sample"
    indices = bootstrap_indices(len(tokens), cfg["n_bootstrap"], cfg["seed"])
    groups = {}
    for name, keys in key_groups:
        weight, norm = flow.shares_on(keys)  # [sentence, layer]
        rows = {"weight": weight, "norm": norm, "weight_minus_norm": weight - norm}
        groups[name] = {}
        for what, values in rows.items():
            bounds = [
                bootstrap_mean_ci(values[:, layer], indices, cfg["level"])
                for layer in range(values.shape[1])
            ]
            groups[name][what] = {
                "per_layer": [_round(v, 4) for v in values.mean(dim=0)],
                "ci_low": [_round(low, 4) for low, _ in bounds],
                "ci_high": [_round(high, 4) for _, high in bounds],
            }
    return {
        "model": flow.model_name,
        "n_layers": model.cfg.n_layers,
        "inputs": inputs,
        "n_sentences": len(tokens),
        "prompt_lengths": [int(real.sum(dim=1).min()), int(real.sum(dim=1).max())],
        "n_query_rows": int(real.sum()),
        "level": cfg["level"],
        "n_bootstrap": cfg["n_bootstrap"],
        "scope": flow.scope,
        "definition": (
            "per layer and query row: weight share = head-averaged attention weight on the "
            "keys (fraction of the row); norm share = ||sum_h a^h_tj v^h_j W_O^h|| on the keys "
            "over its sum over all keys (Kobayashi et al.'s norm-based weighting, output bias "
            "left out); each sentence's (or chunk's) mean over its real query rows, then the "
            "mean over sentences (chunks) with a percentile bootstrap interval over them; "
            "causal models: the first token (BOS), whose own query row is included"
        ),
        "groups": groups,
    }


# ----------------------------------------------------------------------------- rollout


def rollout_part(task_name: str, out: Path) -> dict[str, Any]:
    """Attention rollout, raw attention and the norm-based contribution at the answer
    position against the exact effect of hiding each token from every head of every layer,
    ranked over the prompt's tokens, with intervals over prompts."""
    import torch

    import interv
    from interv.analysis import token_attention
    from interv.stats import bootstrap_indices, percentile_interval, spearman

    cfg = CONFIG["rollout"]
    task_name, spec, task_cfg, batch_size = task_settings("rollout", task_name)
    model = _model(spec)
    task = interv.load_task(task_name, n_pairs=task_cfg["n_pairs"], seed=task_cfg["seed"])
    task = task.tokenize(model)
    # hide each key of a prompt's own tokens: prompts grouped by length, since a key beyond
    # a shorter prompt is padding there (refused: it would be an exact no-effect)
    lengths = task.attention_mask.sum(dim=1)
    effects = torch.full((task.n_pairs, task.n_positions), torch.nan, dtype=torch.float64)
    clean = torch.full((task.n_pairs,), torch.nan, dtype=torch.float64)
    for length in sorted(set(lengths.tolist())):
        members = (lengths == length).nonzero()[:, 0]
        knockouts = [interv.KeyKnockout((j,)) for j in range(length)]
        result = interv.run(
            model,
            task.select(members),
            knockouts,
            metric=cfg["metric"],
            max_batch_size=batch_size,
        )
        part = (result.values - result.clean).T.abs().to(torch.float64)  # [prompt, key]
        effects[members, :length] = part
        clean[members] = result.clean.to(torch.float64)
    flow = token_attention(model, task)
    rows = torch.arange(task.n_pairs)
    answer = task.answer_positions
    scores = {
        "rollout": flow.rollout(residual=cfg["residual"])[rows, answer],
        "raw_attention": flow.weights.mean(dim=1)[rows, answer],
        "norm_contribution": flow.norm_shares().mean(dim=1)[rows, answer],
    }
    indices = bootstrap_indices(task.n_pairs, cfg["n_bootstrap"], cfg["seed"])
    agreement, versus = {}, {}
    for scope, first in (("with_sink", 0), ("without_sink", 1)):
        agreement[scope] = {}
        per_prompt = {}
        for method, values in scores.items():
            rho = torch.tensor(
                [
                    float(
                        spearman(
                            values[b, first : int(answer[b])], effects[b, first : int(answer[b])]
                        )
                    )
                    for b in range(task.n_pairs)
                ],
                dtype=torch.float64,
            )
            defined = ~rho.isnan()
            low, high = percentile_interval(
                rho[indices].nanmean(dim=-1), cfg["level"], n_items=task.n_pairs
            )
            agreement[scope][method] = {
                "rho": _round(rho[defined].mean()),
                "ci": [_round(low), _round(high)],
                "n_prompts": int(defined.sum()),
            }
            per_prompt[method] = rho
        # rollout against the two one-layer readings, paired over prompts
        versus[scope] = {}
        for other in ("raw_attention", "norm_contribution"):
            delta = per_prompt["rollout"] - per_prompt[other]
            low, high = percentile_interval(
                delta[indices].nanmean(dim=-1), cfg["level"], n_items=task.n_pairs
            )
            versus[scope][f"rollout_minus_{other}"] = {
                "difference": _round(delta.nanmean()),
                "ci": [_round(low), _round(high)],
            }
    before_answer = torch.arange(task.n_positions)[None, :] < answer[:, None]
    top_effect = (effects.masked_fill(~before_answer, -1).argmax(dim=1) == 0).double()
    return {
        "model": str(model.cfg.model_name),
        "task": task_name,
        "n_prompts": task.n_pairs,
        "n_positions": task.n_positions,
        "n_layers": model.cfg.n_layers,
        "metric": result.metric.name,
        "metric_unit": result.metric.unit,
        "clean_mean": _round(clean.mean()),
        "exact_semantics": result.descriptions[0],
        "residual": cfg["residual"],
        "rollout_caveat": flow.rollout_caveat,
        "definition": (
            "per prompt: Spearman's rho over the key positions before the answer position "
            "(with the sink: from position 0; without: from position 1) between a method's "
            "score of each key at the answer row and |effect| of hiding that key from every "
            "head of every layer; mean over prompts (a prompt whose scores are all tied gives "
            "no rho and is left out), percentile bootstrap over prompts. "
            "rollout: Abnar & Zuidema's, residual 0.5; raw attention: head- and layer-averaged "
            "weights; norm contribution: Kobayashi's norm-based share, layer-averaged"
        ),
        "agreement": agreement,
        "rollout_versus": versus,
        "sink": {
            "rollout_mass": _round(scores["rollout"][:, 0].mean()),
            "raw_attention_mass": _round(scores["raw_attention"][:, 0].mean()),
            "norm_share": _round(scores["norm_contribution"][:, 0].mean()),
            "effect": _round(effects[:, 0].mean()),
            "mean_effect_other_tokens": _round(
                effects.masked_fill(~before_answer, 0)[:, 1:].sum() / before_answer[:, 1:].sum()
            ),
            "share_of_prompts_where_it_has_the_largest_effect": _round(top_effect.mean()),
        },
    }


# ----------------------------------------------------------------------------- streaming


def streaming_part(spec: str, out: Path) -> dict[str, Any]:
    """Next-token loss on interv's text sample with full attention, a sliding window, the
    window plus the first 1-4 tokens, the first token hidden, and its values zeroed, as exact
    interventions on the attention (StreamingLLM's masks); chunks with and without BOS."""
    import interv
    from interv.analysis import TextEvaluation, text_loss

    cfg = CONFIG["streaming"]
    settings = cfg["models"][spec]
    model = _model(spec)
    window, sinks = cfg["window"], cfg["sink_tokens"]
    text = TextEvaluation.from_text(
        model, n_tokens=settings["n_tokens"], chunk_len=settings["chunk_len"]
    )
    every_head = [
        interv.ValueScale(layer, head, key_positions=(0,), factor=0.0)
        for layer in range(model.cfg.n_layers)
        for head in range(model.cfg.n_heads)
    ]
    conditions = {
        "window": interv.WindowAttention(window),
        **{f"window_sinks_{k}": interv.WindowAttention(window, sink_tokens=k) for k in sinks},
        "first_token_hidden": interv.KeyKnockout((0,)),
        "first_token_values_zeroed": interv.Combined(tuple(every_head)),
    }
    semantics = {
        name: iv.describe()
        for name, iv in conditions.items()
        if name != "first_token_values_zeroed"
    }
    semantics["first_token_values_zeroed"] = (
        "the value vectors at key position 0 set to zero for every query head of every layer "
        f"({len(every_head)} ValueScale edits in one forward; the weights are unchanged)"
    )
    boot = {"level": cfg["level"], "n_bootstrap": cfg["n_bootstrap"], "seed": cfg["seed"]}
    variants = {}
    for bos in cfg["bos"]:
        tokens = text.tokens if bos else text.tokens[:, 1:]
        first_position = window + max(sinks)
        loss = text_loss(
            model,
            TextEvaluation(tokens=tokens, source=text.source),
            list(conditions.values()),
            first_position=first_position,
            max_batch_size=settings.get("batch_size", cfg["batch_size"]),
        )
        rows = {
            "full": {
                "loss": _round(loss.mean()),
                "loss_ci": [_round(v) for v in loss.interval(**boot)],
                "perplexity": _round(loss.perplexity(), 3),
            }
        }
        for index, name in enumerate(conditions):
            delta, low, high = loss.difference(index, **boot)
            rows[name] = {
                "loss": _round(loss.mean(index)),
                "loss_ci": [_round(v) for v in loss.interval(index, **boot)],
                "perplexity": _round(loss.perplexity(index), 3),
                "minus_full": _round(delta),
                "minus_full_ci": [_round(low), _round(high)],
            }
        variants["with_bos" if bos else "without_bos"] = {
            "first_token": "BOS" if bos else "the chunk's first text token",
            "chunk_len": int(tokens.shape[1]),
            "n_chunks": loss.n_chunks,
            "first_position": first_position,
            "scope": loss.scope,
            "conditions": rows,
        }
    return {
        "model": str(model.cfg.model_name),
        "text": text.source,
        "positional_embedding": str(model.cfg.positional_embedding_type),
        "window": window,
        "sink_tokens": sinks,
        "unit": "nats/token",
        "level": cfg["level"],
        "semantics": semantics,
        "definition": (
            "mean next-token cross-entropy at the scored query positions (those where the "
            "window hides keys in every condition), mean over positions then chunks; intervals: "
            "percentile bootstrap over chunks, differences paired over chunks; perplexity = "
            "exp(loss), a ratio of perplexities = exp(difference)"
        ),
        "variants": variants,
    }


# ----------------------------------------------------------------------------- windows


def windows_part(spec: str, out: Path) -> dict[str, Any]:
    """Normalized entropy with n = the keys each layer's mask admits against the naive
    n = query position + 1, at a long prompt of real text, local and global layers."""
    import numpy as np
    import torch

    import interv
    from interv.analysis.pruning import text_sample
    from interv.engine.architecture import architecture_of

    cfg = CONFIG["windows"]
    settings = cfg["models"][spec]
    model = _model(spec)
    n_tokens = settings["n_tokens"]
    text = text_sample()
    tokens = model.to_tokens(text * (1 + 8 * n_tokens // len(text)), prepend_bos=True)
    tokens = tokens[:, :n_tokens]
    if tokens.shape[1] != n_tokens:
        raise SystemExit(f"the repeated text sample gives {tokens.shape[1]} tokens, not {n_tokens}")
    arch = architecture_of(model)
    with torch.no_grad():
        heads = interv.concentration(model, tokens, progress=False)
    entropy = heads.entropy[0].double()  # [layer, head, query] nats
    admitted = heads.n_available_keys[0].double()  # [layer, query]
    query = torch.arange(n_tokens, dtype=torch.float64)
    naive = (query + 1).expand_as(admitted)
    keep = slice(1, None)  # n = 1 at the first query: undefined
    masked_ne = (entropy / admitted.log()[:, None, :])[..., keep]
    naive_ne = (entropy / naive.log()[:, None, :])[..., keep]
    stored = heads.normalized_entropy[0].double()[..., keep]
    mismatch = float((stored - masked_ne).abs().nan_to_num(0).max())
    if mismatch > 1e-5:
        raise SystemExit(
            f"interv's normalized entropy differs from H / log(n admitted): {mismatch}"
        )
    n_layers, n_heads = entropy.shape[:2]
    local = [i for i in range(n_layers) if arch.key_rule(i).window is not None]
    global_ = [i for i in range(n_layers) if i not in local]
    windows = sorted({arch.key_rule(i).window for i in local})
    shift = naive_ne - masked_ne  # <= 0: the naive n is never smaller
    rng = np.random.default_rng(cfg["seed"])

    def summarize(layers: list[int], first_query: int) -> dict[str, Any]:
        """Queries first_query..T-1 of ``layers`` (shift's query axis starts at query 1)."""
        if not layers:
            return {"n_heads": 0}
        q = slice(first_query - 1, None)
        moved = shift[layers][..., q]  # [layer, head, query]
        n_blocks = max(1, moved.shape[-1] // cfg["block"])
        per_block = np.array(
            [
                float(moved[..., torch.from_numpy(b)].mean())
                for b in np.array_split(np.arange(moved.shape[-1]), n_blocks)
            ]
        )
        boots = per_block[rng.integers(0, n_blocks, (cfg["n_bootstrap"], n_blocks))].mean(1)
        alpha = (1 - cfg["level"]) / 2
        return {
            "n_heads": len(layers) * n_heads,
            "first_query": first_query,
            "masked_mean": _round(float(masked_ne[layers][..., q].mean())),
            "naive_mean": _round(float(naive_ne[layers][..., q].mean())),
            "shift_mean": _round(float(moved.mean())),
            "shift_ci": [_round(np.quantile(boots, alpha)), _round(np.quantile(boots, 1 - alpha))],
            "shift_max_abs": _round(float(moved.abs().max())),
        }

    window = windows[0] if windows else None
    per_head_masked = masked_ne.mean(-1)  # [layer, head], mean over queries 1..T-1
    per_head_naive = naive_ne.mean(-1)
    labels = [f"L{layer}H{head}" for layer in range(n_layers) for head in range(n_heads)]

    def ranks(values: torch.Tensor) -> np.ndarray:
        order = np.argsort(values.flatten().numpy(), kind="stable")  # most concentrated first
        rank = np.empty(len(order), dtype=int)
        rank[order] = np.arange(len(order))
        return rank

    masked_rank, naive_rank = ranks(per_head_masked), ranks(per_head_naive)
    top = cfg["top_heads"]
    top_masked = {labels[i] for i in np.argsort(per_head_masked.flatten().numpy())[:top]}
    top_naive = {labels[i] for i in np.argsort(per_head_naive.flatten().numpy())[:top]}
    moved_heads = sorted(
        range(len(labels)), key=lambda i: -abs(int(masked_rank[i]) - int(naive_rank[i]))
    )[:5]
    return {
        "model": str(model.cfg.model_name),
        "weights": "Q4_K_M GGUF dequantized to float32: a close relative of the hub's float model",
        "text": f"interv's text sample, repeated, first {n_tokens} tokens (BOS first)",
        "n_tokens": n_tokens,
        "mask_rule": heads.mask_rule,
        "local_layers": local,
        "global_layers": global_,
        "window": window,
        "attention": heads.attention,
        "level": cfg["level"],
        "definition": (
            "normalized entropy = H(a) / log n per (layer, head, query), queries 1..T-1; masked n "
            "= the keys the layer's mask admits (min(t + 1, window) on local layers), naive n = "
            "t + 1; shift = naive minus masked, mean over heads and queries; interval: percentile "
            f"bootstrap over blocks of {cfg['block']} consecutive queries (one text: the interval "
            "is over positions of this text, not over texts); rank: the 72 heads ordered by their "
            "mean normalized entropy over queries (most concentrated first)"
        ),
        "local": summarize(local, 1),
        "local_past_window": summarize(local, window) if window else {"n_heads": 0},
        "global": summarize(global_, 1),
        "heads_changing_rank": int((masked_rank != naive_rank).sum()),
        "n_heads": len(labels),
        "max_rank_change": int(np.abs(masked_rank - naive_rank).max()),
        "rank_spearman": _round(float(np.corrcoef(masked_rank, naive_rank)[0, 1])),
        "top_overlap": len(top_masked & top_naive),
        "top_heads": top,
        "top_masked": sorted(top_masked),
        "top_naive": sorted(top_naive),
        "most_moved": [
            {
                "head": labels[i],
                "masked_rank": int(masked_rank[i]) + 1,
                "naive_rank": int(naive_rank[i]) + 1,
                "masked": _round(float(per_head_masked.flatten()[i])),
                "naive": _round(float(per_head_naive.flatten()[i])),
            }
            for i in moved_heads
        ],
    }


# ----------------------------------------------------------------------------- driver


# ----------------------------------------------------------------------------- inactive


def _chunk_losses(model: Any, tokens: Any, ablations: list[Any], batch_size: int) -> Any:
    """``[1 + n_ablations, n_chunks]`` float64 mean next-token loss (nats/token) per chunk:
    unablated first, then under each (Combined) ablation, exact forwards with prefix reuse."""
    import torch

    from interv.engine.forward import Prompts
    from interv.engine.stacking import capture_base_runs, intervened_readouts, planned_reads

    prompts = Prompts.of(tokens)
    targets = tokens[:, 1:]

    def loss(logits: Any) -> Any:
        values = torch.nn.functional.cross_entropy(
            logits[:, :-1].flatten(0, 1).float().cpu(), targets.flatten(), reduction="none"
        )
        return values.reshape(targets.shape).to(torch.float64).mean(-1)

    reads = planned_reads(model, ablations, reuse_prefix=True)
    base = capture_base_runs(model, {"clean": prompts}, reads, readout="logits")
    out = torch.empty(1 + len(ablations), tokens.shape[0], dtype=torch.float64)
    out[0] = loss(base.readouts["clean"])
    n = tokens.shape[0]
    for indices, logits in intervened_readouts(
        model, ablations, base, readout="logits", max_batch_size=batch_size * n, reuse_prefix=True
    ):
        for j, index in enumerate(indices):
            out[1 + index] = loss(logits[j * n : (j + 1) * n])
    return out


def _relative_change(losses: Any, level: float, n_bootstrap: int, seed: int) -> list[Any]:
    """Per row of ``losses[1:]``: the relative change of the mean loss against ``losses[0]``
    (ratio of means minus 1) with a percentile bootstrap interval over chunks."""
    from interv.stats import bootstrap_indices, percentile_interval

    base = losses[0]
    draws = bootstrap_indices(base.numel(), n_bootstrap, seed)
    rows = []
    for row in losses[1:]:
        value = float(row.mean() / base.mean() - 1)
        boot = row[draws].mean(-1) / base[draws].mean(-1) - 1
        low, high = percentile_interval(boot, level, n_items=base.numel())
        rows.append((value, low, high))
    return rows


def inactive_part(spec: str, out: Path) -> dict[str, Any]:
    """Inactive heads (Sandoval-Segura et al. 2025, arXiv:2504.03889): every head ablated
    alone (zero and mean), the share whose loss change is under the threshold, how well the
    first-token sink score and the output norm find them, and the heads ablated together in
    each ranking's order."""
    import torch

    from interv.analysis.pruning import TextEvaluation
    from interv.engine.forward import Prompts, forward
    from interv.engine.interventions import Combined, MeanAblation, ZeroAblation
    from interv.engine.sites import Site
    from interv.stats import spearman

    cfg = CONFIG["inactive"]
    spec_cfg = cfg["models"][spec]
    model = _model(spec)
    tokens = TextEvaluation.from_text(
        model, n_tokens=spec_cfg["n_tokens"], chunk_len=spec_cfg["chunk_len"]
    ).tokens
    n_layers, n_heads = model.cfg.n_layers, model.cfg.n_heads
    heads = [(layer, head) for layer in range(n_layers) for head in range(n_heads)]
    sites = [Site(c, layer) for layer in range(n_layers) for c in ("pattern", "z")]
    captured = forward(model, Prompts.of(tokens), capture=sites, readout=None).captured
    sink, norm = [], []
    for layer in range(n_layers):
        pattern = captured[Site("pattern", layer)].double()  # [n, head, q, k]
        sink.append(pattern[:, :, 1:, 0].mean((0, 2)))  # queries after the first token
        z = captured[Site("z", layer)].double()
        w_out = model.blocks[layer].attn.W_O.double()
        written = torch.einsum("bphk,hkd->bphd", z, w_out).norm(dim=-1)  # [n, pos, head]
        norm.append(written.mean((0, 1)))
    sink_score = torch.cat(sink)
    output_norm = torch.cat(norm)
    kinds = {
        "zero": lambda layer, head: ZeroAblation(layer, head),
        "mean": lambda layer, head: MeanAblation(layer, head, reference="clean", pooled=True),
    }
    boot = (cfg["level"], cfg["n_bootstrap"], cfg["seed"])
    threshold = cfg["threshold"]
    ks = [round(share * len(heads)) for share in cfg["shares"]]
    results: dict[str, Any] = {}
    for kind in cfg["ablations"]:
        make = kinds[kind]
        batch_size = spec_cfg.get("batch_size", cfg["batch_size"])
        single = _chunk_losses(model, tokens, [make(*h) for h in heads], batch_size)
        change = torch.tensor([v for v, _, _ in _relative_change(single, *boot)])
        inactive = change.abs() < threshold
        orders = {
            "sink_score": torch.sort(-sink_score, stable=True).indices,  # most parked first
            "output_norm": torch.sort(output_norm, stable=True).indices,  # quietest first
            "exact": torch.sort(change.abs(), stable=True).indices,  # the single-head oracle
        }
        joint_sets = [
            Combined(tuple(make(*heads[i]) for i in orders[name][:k].tolist()))
            for name in cfg["rankings"]
            for k in ks
        ]
        joint_changes = _relative_change(_chunk_losses(model, tokens, joint_sets, 1), *boot)
        curves = {}
        for r, name in enumerate(cfg["rankings"]):
            rows = joint_changes[r * len(ks) : (r + 1) * len(ks)]
            below = [k for k, (_, _, high) in zip(ks, rows, strict=True) if high < threshold]
            curves[name] = {
                "relative_change": [_round(v, 5) for v, _, _ in rows],
                "ci_low": [_round(lo, 5) for _, lo, _ in rows],
                "ci_high": [_round(hi, 5) for _, _, hi in rows],
                "largest_k_below": max(below, default=0),
                "precision": [
                    _round(float(inactive[orders[name][:k]].double().mean()), 3) for k in ks
                ],
                "first_heads": [f"L{heads[i][0]}H{heads[i][1]}" for i in orders[name][:5]],
            }
        results[kind] = {
            "share_inactive_alone": _round(float(inactive.double().mean()), 4),
            "n_inactive_alone": int(inactive.sum()),
            "base_loss": _round(float(single[0].mean()), 5),
            "spearman_sink_vs_abs_change": _round(float(spearman(sink_score, change.abs()))),
            "spearman_norm_vs_abs_change": _round(float(spearman(output_norm, change.abs()))),
            "joint": curves,
        }
    return {
        "model": str(model.cfg.model_name),
        "n_heads": len(heads),
        "n_chunks": int(tokens.shape[0]),
        "chunk_len": int(tokens.shape[1]),
        "threshold": threshold,
        "ks": ks,
        "shares": cfg["shares"],
        "level": cfg["level"],
        "definition": (
            "loss = mean next-token cross-entropy (nats/token) over the chunks of interv's text "
            "sample; change = mean loss with the heads ablated over the unablated mean, minus 1 "
            "(relative), 95% percentile bootstrap over chunks; zero ablation: the head's output z "
            "set to 0 at every position; mean ablation: z replaced by its mean pooled over every "
            "position of the chunks; a head is inactive alone when its single ablation changes "
            "the loss by less than the threshold (point estimate); sink score = mean attention "
            "weight on the first token over the later queries; output norm = mean ||z_h W_O[h]|| "
            "over positions; joint: the first k heads of a ranking ablated together "
            "(sink score descending, output norm ascending, |single-head change| ascending)"
        ),
        "ablations": results,
    }


# ----------------------------------------------------------------------------- stability


def stability_part(task_name: str, out: Path) -> dict[str, Any]:
    """Circuit stability on a task: EAP-IG discovery redone on bootstrap resamples of the
    prompts (Méloux et al. 2025's measure against their >= 0.8 bar), circuits of 20, 100 and
    500 edges."""
    import interv
    from interv.audit import Screen
    from interv.circuits import discover

    cfg = CONFIG["stability"]
    task_cfg = cfg["tasks"][task_name]
    model = _model(cfg["model"])
    task = interv.load_task(task_name, n_pairs=task_cfg["n_pairs"], seed=task_cfg["seed"])
    tokenized = task.tokenize(model)
    result = discover(
        model,
        tokenized,
        method=cfg["method"],
        steps=cfg["steps"],
        screen=Screen(top_k=cfg["top_k"], audit=cfg["audit"], alpha=None, seed=cfg["seed"]),
        stability=cfg["n_resamples"],
    )
    stability = result.stability
    return {
        "model": str(model.cfg.model_name),
        "task": task_name,
        "n_pairs": tokenized.n_pairs,
        "n_edges": result.graph.n_edges,
        "sizes": list(stability.sizes),
        "jaccard": [_round(v) for v in stability.mean],
        "ci_low": [_round(v) for v in stability.low],
        "ci_high": [_round(v) for v in stability.high],
        "stable_edges": [int(stability.stable(s).sum()) for s in stability.sizes],
        "bar": cfg["bar"],
        "n_resamples": stability.n_resamples,
        "n_exact_computed": stability.n_exact_computed,
        "top_edges": [e.label for e in result.circuit(10)],
        "discovery": result.sentence,
        "sentence": stability.sentence,
    }


def compute(part: str, out: Path) -> dict[str, Any]:
    """Compute one part (see :func:`part_names`)."""
    kind, name = part.split("_", 1)
    parts = {
        "ablation": ablation_part,
        "pruning": pruning_part,
        "similarity": similarity_part,
        "collapse": collapse_part,
        "sinks": sinks_part,
        "norms": norms_part,
        "rollout": rollout_part,
        "streaming": streaming_part,
        "inactive": inactive_part,
        "stability": stability_part,
        "windows": windows_part,
    }
    return parts[kind](name, out)


def summary(out: Path, parts: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """The shipped results: config, hash, commands, provenance and every part's numbers."""
    import interv

    return {
        "config": CONFIG,
        "config_hash": config_hash(),
        "part_hashes": {part: config_hash(part_config(part)) for part in parts},
        "interv_version": interv.__version__,
        "command": COMMAND,
        "part_commands": {
            part: f"python benchmarks/claims.py --out claims-results --parts {part}"
            for part in parts
        },
        "provenance": {part: parts[part]["provenance"] for part in parts},
        "results": {part: parts[part]["numbers"] for part in parts},
    }


def shipped_parts() -> dict[str, dict[str, Any]]:
    """The parts of the shipped ``interv/data/claims.json`` whose part config is unchanged,
    as the results directory stores them (``config_hash``, ``numbers``, ``provenance``).

    Each part has its own hash (:func:`part_config`), so adding a part or changing another
    part's settings keeps these; a part is recomputed only when its own slice changed or
    when ``--parts`` names it.
    """
    if not SHIPPED.is_file():
        return {}
    summary = json.loads(SHIPPED.read_text())
    reused = {}
    for part, numbers in summary.get("results", {}).items():
        if part not in part_names():
            continue
        part_hash = config_hash(part_config(part))
        if summary.get("part_hashes", {}).get(part) == part_hash:
            reused[part] = {
                "config_hash": part_hash,
                "numbers": numbers,
                "provenance": summary["provenance"][part],
            }
    return reused


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--out", type=Path, default=Path("claims-results"))
    parser.add_argument("--parts", nargs="+", default=None, choices=part_names())
    parser.add_argument("--ship", action="store_true", help="also write interv/data/claims.json")
    parser.add_argument("--threads", type=int, default=None, help="torch threads")
    args = parser.parse_args(argv)
    import torch

    if args.threads is not None:
        torch.set_num_threads(args.threads)
    args.out.mkdir(parents=True, exist_ok=True)
    shipped = shipped_parts()
    done: dict[str, dict[str, Any]] = {}
    for part in part_names():
        path = args.out / f"{part}.json"
        if path.exists():
            saved = json.loads(path.read_text())
            if saved.get("config_hash") == config_hash(part_config(part)):
                done[part] = saved
                print(f"{part}: done earlier ({saved['provenance']['seconds']:.0f} s)", flush=True)
                continue
        if part in shipped and (args.parts is None or part not in args.parts):
            # the shipped file holds this part with the same part config: reuse its numbers
            path.write_text(json.dumps(shipped[part], indent=1, allow_nan=False) + "\n")
            done[part] = shipped[part]
            print(f"{part}: reused from {SHIPPED.relative_to(REPO)} (same part config)", flush=True)
            continue
        if args.parts is not None and part not in args.parts:
            continue
        load_before = _load_average()
        start = time.perf_counter()
        numbers = compute(part, args.out)
        seconds = time.perf_counter() - start
        record = {
            "config_hash": config_hash(part_config(part)),
            "numbers": numbers,
            "provenance": {
                "seconds": round(seconds, 1),
                "load_average_before": load_before,
                "load_average_after": _load_average(),
                "cpus": os.cpu_count(),
                "torch_threads": torch.get_num_threads(),
                "torch": torch.__version__,
                "python": platform.python_version(),
                "interv": _interv_version(),
            },
        }
        path.write_text(json.dumps(record, indent=1, allow_nan=False) + "\n")
        done[part] = record
        print(
            f"{part}: {seconds:.0f} s (load average {load_before} -> {_load_average()})",
            flush=True,
        )
    missing = [part for part in part_names() if part not in done]
    if missing:
        print(f"not yet computed: {missing}; claims.json not written", flush=True)
        return 0
    text = json.dumps(summary(args.out, done), indent=None, separators=(",", ":"))
    (args.out / "claims.json").write_text(text + "\n")
    print(f"wrote {args.out / 'claims.json'} ({len(text) / 1024:.1f} KiB)", flush=True)
    if args.ship:
        SHIPPED.write_text(text + "\n")
        print(f"wrote {SHIPPED}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
