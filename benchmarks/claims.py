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
  interval of the sink share over held-out sequences.

Then ``claims.json`` in the results directory: the config, its hash, the numbers (rounded)
and the commands; ``--ship`` also writes it to ``interv/data/claims.json``, the file the
notebook loads when no results directory is present. ``tests/test_claims_results.py``
checks that the shipped file's config hash is :func:`config_hash` of :data:`CONFIG`.

A part's file is reused when its slice of :data:`CONFIG` (:func:`part_config`) is unchanged;
after changing how a part is computed or summarized, delete its file (and, for an ablation
part, its sweep directory) so that it is recomputed.

Run (57 minutes on 2 CPU cores shared with other work, load average 3 to 5, one torch
thread; each part prints its wall time and the load)::

    OMP_NUM_THREADS=1 python benchmarks/claims.py --out claims-results --ship
    python benchmarks/claims.py --out claims-results --parts similarity_minilm-l6   # one part
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
        "models": ["smollm2-135m", "minilm-l6"],
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


def config_hash(config: dict[str, Any] = CONFIG) -> str:
    """First 16 hex digits of the SHA-256 of the canonical JSON of ``config``."""
    canonical = json.dumps(config, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()[:16]


def part_names(config: dict[str, Any] = CONFIG) -> list[str]:
    """Every part of the measurement, in the order they run."""
    return [
        *(f"ablation_{task}" for task in config["ablation"]["tasks"]),
        *(f"pruning_{model}" for model in config["pruning"]["models"]),
        *(f"similarity_{model}" for model in config["similarity"]["models"]),
        *(f"collapse_{model}" for model in config["collapse"]["models"]),
    ]


def part_config(part: str, config: dict[str, Any] = CONFIG) -> dict[str, Any]:
    """The slice of ``config`` that one part's numbers depend on (its own hash, so that adding
    a part does not invalidate the others)."""
    section, name = part.split("_", 1)
    settings = dict(config[section])
    if section == "ablation":
        tasks = settings.pop("tasks")
        return {"section": section, **settings, "task": {"name": name, **tasks[name]}}
    models = settings.pop("models")
    spec = models[name] if isinstance(models, dict) else {}
    return {"section": section, **settings, "model": name, **spec}


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
    task_cfg = cfg["tasks"][task_name]
    model = _model(cfg["model"])
    sweep = {
        "model": {"spec": cfg["model"]},
        "task": {"name": task_name, "n_pairs": task_cfg["n_pairs"], "seed": task_cfg["seed"]},
        "sweep": {
            "metric": cfg["metric"],
            "batch_size": cfg["batch_size"],
            "unit_size": cfg["unit_size"],
            "seed": cfg["seed"],
            "interventions": [dict(entry) for entry in cfg["interventions"]],
        },
    }
    result = interv.run_sweep(sweep, out / "sweeps" / task_name, model=model, progress=False)
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

    cfg = CONFIG["similarity"]
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


# ----------------------------------------------------------------------------- driver


def compute(part: str, out: Path) -> dict[str, Any]:
    """Compute one part (see :func:`part_names`)."""
    kind, name = part.split("_", 1)
    if kind == "ablation":
        return ablation_part(name, out)
    if kind == "pruning":
        return pruning_part(name, out)
    if kind == "similarity":
        return similarity_part(name, out)
    return collapse_part(name, out)


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
    done: dict[str, dict[str, Any]] = {}
    for part in part_names():
        path = args.out / f"{part}.json"
        if path.exists():
            saved = json.loads(path.read_text())
            if saved.get("config_hash") == config_hash(part_config(part)):
                done[part] = saved
                print(f"{part}: done earlier ({saved['provenance']['seconds']:.0f} s)", flush=True)
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
