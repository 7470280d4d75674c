"""Concentration at long context without the pattern: peak memory, time and values.

Model: a 2-layer random Llama-shaped model (8 query heads, 2 key/value heads, d_model 128,
d_head 16, MLP 512, rotary, 32,768-token context, Hugging Face's initialization, seed 0) with
the zoo's 64-token tokenizer; prompts of random tokens (BOS first, seed 1). Float32, CPU.

Each measurement runs in its own fresh process (``benchmarks/_measure.py`` gives the memory
method: peak RSS above the resident model, after a warm-up that also runs the one-time check
of the pattern-free rows against the model's own):

- ``hf_forward``: the model's own forward in Hugging Face with ``attn_implementation="sdpa"``
  (a forward that materializes no pattern; logits of every position);
- ``interv_forward``: interv's pattern-free forward (``attention="rows"``, no readout);
- ``rows``: ``interv.concentration(attention="rows")``, every head at every position;
- ``pattern``: ``interv.concentration(attention="pattern")`` (each layer's pattern, as the
  model computes it), at the comparison length only;
- ``exact``: the ``rows`` numbers with the fused kernel in float64 (the row numbers of the
  same queries and keys without float32 rounding), at the comparison length only;
- ``smollm2``: SmolLM2-135M at its full 8,192-token context (a text repeated), concentration
  of every head without the pattern;
- ``streaming`` (``--streaming LENGTH ...``): StreamingLLM's perplexity, ``text_loss`` of one
  chunk of ``LENGTH`` tokens unedited, under ``WindowAttention(1024, sink_tokens=4)`` and under
  ``WindowAttention(1024)``, the windows applied inside the attention without the pattern
  (``attention="rows"``); ``streaming_pattern``: the same with the model's own attention
  (the windows written at the z level from each layer's pattern), at lengths up to
  ``--compare`` only.

``--model gemma3-270m``: the same questions on a real model with sliding windows, Gemma-3-270M
(its Q4_K_M GGUF dequantized to float32: a close relative of the hub's float model; 18 layers x
4 heads, a 512-key window on every layer but 5, 11 and 17), on interv's text sample repeated
(BOS first), at ``--lengths`` (default 1024 4096 8192):

- ``gemma3_forward``: the model's own forward in Hugging Face with ``attn_implementation="sdpa"``
  through its 18 layers (no pattern materialized; no unembedding: at 262,144 tokens of
  vocabulary the logits of every position would cost more than the layers, and concentration
  stops after the last layer too);
- ``gemma3_rows``: ``interv.concentration(attention="rows")``, all 72 heads at every position,
  with per layer the mean normalized entropy and sink mass (over heads and queries) in bins of
  ``n`` = the keys the layer's mask admits (``[2^k, 2^(k+1))``), local and global layers, and
  over the queries of each prefix of 1,024, 2,048, ... tokens (a causal model's rows there are
  the shorter run's); it runs first at each length, and the report is written after each job;

and ``--figure PATH`` draws them against ``log n`` (the longest length's run).

Reported: per length, time and peak memory above the model of each method, the time ratio
``rows / hf_forward`` and ``rows / interv_forward``, the growth exponent of the peak memory
(``log(peak(32k) / peak(4k)) / log(8)``, 1 = linear, 2 = quadratic); at the comparison length,
the largest difference of every metric between ``rows``, ``pattern`` and ``exact``; the
machine, the date and the load (``uptime``) before and after.

Run: ``python benchmarks/bench_long_context.py [--lengths 4096 8192 16384 32768]
[--compare 4096] [--no-smollm2] [--streaming 16384] [--out figures.json]``, or
``python benchmarks/bench_long_context.py --model gemma3-270m --lengths 1024 4096 8192
--out gemma3.json --figure docs/images/long-context-gemma3.png`` (about 25 minutes
on 2 loaded cores; ``--lengths`` with no value and ``--no-smollm2 --streaming 16384``: the
streaming figure alone).
"""

from __future__ import annotations

import argparse
import json
import math
import shutil
import sys
import tempfile
import time
import warnings
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _measure  # the benchmarks folder is not a package

ROOT = Path(__file__).resolve().parents[1]
TOKENIZER = ROOT / "interv" / "zoo" / "data" / "induction-2l"
CONFIG = {
    "vocab_size": 64,
    "hidden_size": 128,
    "num_attention_heads": 8,
    "num_key_value_heads": 2,
    "num_hidden_layers": 2,
    "intermediate_size": 512,
    "max_position_embeddings": 32768,
    "bos_token_id": 0,
    "eos_token_id": 0,
    "pad_token_id": 1,
}
WARM_UP = 256
STREAMING_WINDOW = 1024
SMOLLM2_TOKENS = 8192
GIB = 2**30


def build_model(directory: Path) -> None:
    """Save the random model and the zoo's tokenizer into ``directory``."""
    import transformers

    transformers.logging.set_verbosity_error()
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        model = transformers.AutoModelForCausalLM.from_config(
            transformers.LlamaConfig(**CONFIG), attn_implementation="eager"
        )
    model.save_pretrained(directory)
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(TOKENIZER / name, directory / name)


def prompt(length: int) -> torch.Tensor:
    """``[1, length]`` random tokens 2..63, BOS (0) first."""
    generator = torch.Generator().manual_seed(1)
    tokens = torch.randint(2, CONFIG["vocab_size"], (1, length), generator=generator)
    tokens[0, 0] = 0
    return tokens


# ----------------------------------------------------------------------------- workers


def _bridge(directory: str) -> Any:
    from transformer_lens.model_bridge import TransformerBridge

    return TransformerBridge.boot_transformers(directory, device="cpu").eval()


def _measured(run: Any, length: int, repeats: int) -> dict[str, Any]:
    """Warm up on a short prompt, then time ``run(tokens)`` (best of ``repeats``) and its peak."""
    with torch.no_grad():
        run(prompt(WARM_UP))
        times = []
        resident = _measure.reset_peak()
        result = None
        for _ in range(repeats):
            start = time.perf_counter()
            result = run(prompt(length))
            times.append(time.perf_counter() - start)
        top = _measure.peak()
    return {
        "seconds": min(times),
        "peak_above_model_gib": (top - resident) / GIB,
        "peak_gib": top / GIB,
        "resident_gib": resident / GIB,
        "result": result,
    }


def gemma3_tokens(length: int) -> torch.Tensor:
    """``[1, length]`` tokens of interv's text sample, repeated, BOS first (Gemma's tokenizer)."""
    from transformers import AutoTokenizer

    from interv.models.gemma3 import converted_dir

    tokenizer = AutoTokenizer.from_pretrained(converted_dir())
    text = (ROOT / "interv" / "data" / "text_sample.txt").read_text()
    ids = tokenizer(text * (1 + 8 * length // len(text)))["input_ids"]
    ids = [tokenizer.bos_token_id, *(i for i in ids if i != tokenizer.bos_token_id)][:length]
    if len(ids) != length:
        raise SystemExit(f"the repeated text gives {len(ids)} tokens, not {length}")
    return torch.tensor([ids])


def _measured_on(run: Any, tokens: torch.Tensor) -> dict[str, Any]:
    """Warm up on the first 256 tokens, then time ``run(tokens)`` once and its peak."""
    with torch.no_grad():
        run(tokens[:, :WARM_UP])
        resident = _measure.reset_peak()
        start = time.perf_counter()
        result = run(tokens)
        seconds = time.perf_counter() - start
        top = _measure.peak()
    return {
        "seconds": seconds,
        "peak_above_model_gib": (top - resident) / GIB,
        "peak_gib": top / GIB,
        "resident_gib": resident / GIB,
        "tokens": int(tokens.shape[1]),
        "result": result,
    }


def per_layer_bins(model: Any, heads: Any) -> list[dict[str, Any]]:
    """Per layer: its window, and the mean normalized entropy and sink mass over heads and
    queries, overall and in bins ``[2^k, 2^(k+1))`` of n = the keys the mask admits."""
    from interv.engine.architecture import architecture_of

    arch = architecture_of(model)
    out = []
    for layer in range(model.cfg.n_layers):
        n = heads.n_available_keys[0, layer]  # [query]
        ne = heads.normalized_entropy[0, layer].double()  # [head, query]
        sink = heads.sink_mass[0, layer].double()
        real = n > 1  # normalized entropy is undefined at n = 1
        bins = []
        for k in range(1, int(math.log2(int(n.max()))) + 1):
            inside = real & (n >= 2**k) & (n < 2 ** (k + 1))
            if inside.any():
                bins.append(
                    {
                        "log2_n_from": k,
                        "queries": int(inside.sum()),
                        "normalized_entropy": float(ne[:, inside].mean()),
                        "sink_mass": float(sink[:, inside].mean()),
                    }
                )
        out.append(
            {
                "layer": layer,
                "window": arch.key_rule(layer).window,
                "normalized_entropy": float(ne[:, real].mean()),
                "sink_mass": float(sink[:, real].mean()),
                "bins": bins,
            }
        )
    return out


def per_layer_prefixes(heads: Any) -> dict[int, dict[str, list[float]]]:
    """Per prefix length ``L`` (1,024, 2,048, ... up to the prompt): each layer's mean
    normalized entropy and sink mass over its heads and the queries ``< L`` (n > 1). A causal
    model's rows of the first ``L`` queries are those of an ``L``-token prompt of the same
    tokens, so these are the means of the shorter runs up to rounding."""
    n_all = heads.n_available_keys[0]  # [layer, query]
    out = {}
    length = 1024
    while length <= n_all.shape[-1]:
        n = n_all[:, :length]
        real = (n > 1)[:, None, :]  # [layer, 1, query]
        means = {}
        for metric in ("normalized_entropy", "sink_mass"):
            values = getattr(heads, metric)[0, :, :, :length].double()  # [layer, head, query]
            total = torch.where(real, values, 0.0).sum(dim=(1, 2))
            means[metric] = (total / (real.sum(dim=(1, 2)) * values.shape[1])).tolist()
        out[length] = means
        length *= 2
    return out


def gemma3_figure(report: dict[str, Any], path: Path) -> None:
    """Mean normalized entropy and sink mass per layer against log2 n (the longest run)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    measured = {int(k): row for k, row in report["lengths"].items() if "layers" in row["rows"]}
    length = max(measured)  # keys are ints here, strings in a JSON file read back
    layers = measured[length]["rows"]["layers"]
    fig, axes = plt.subplots(1, 2, figsize=(10, 4))
    for ax, metric, label in (
        (axes[0], "normalized_entropy", "mean normalized entropy (fraction of log n)"),
        (axes[1], "sink_mass", "mean sink mass (BOS; fraction of the row)"),
    ):
        for row in layers:
            x = [b["log2_n_from"] for b in row["bins"]]
            y = [b[metric] for b in row["bins"]]
            if row["window"] is None:
                ax.plot(x, y, marker="o", linewidth=2, label=f"layer {row['layer']} (global)")
            else:
                ax.plot(x, y, color="0.7", linewidth=1)
        ax.plot([], [], color="0.7", linewidth=1, label="local layers (512-key window)")
        for prefix in measured[length]["rows"].get("prefixes", {}):
            # the last query of a prompt of `prefix` tokens: a global layer's n there
            ax.axvline(math.log2(int(prefix)), color="0.85", linestyle=":", linewidth=1)
        ax.set_xlabel("log2 n  (n = keys the layer's mask admits; bins [2^k, 2^(k+1)))")
        ax.set_ylabel(label)
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=8)
    fig.suptitle(
        f"Gemma-3-270M (Q4_K_M dequantized), {length:,} tokens of real text, 72 heads, no pattern"
        "\n(dotted: the prompt lengths 1,024, 2,048, ...; their rows are this run's first rows)",
        fontsize=9,
    )
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def worker(job: str, directory: str, length: int, repeats: int, save: str | None) -> None:
    warnings.simplefilter("ignore")
    import transformers

    transformers.logging.set_verbosity_error()
    from interv.analysis.concentration import METRICS, concentration

    if job == "hf_forward":
        model = transformers.AutoModelForCausalLM.from_pretrained(
            directory, attn_implementation="sdpa"
        ).eval()
        figures = _measured(lambda tokens: model(tokens).logits.shape, length, repeats)
    elif job == "interv_forward":
        from interv.engine.forward import AttentionPath, Prompts, forward

        bridge = _bridge(directory)
        figures = _measured(
            lambda tokens: forward(
                bridge, Prompts.of(tokens), readout=None, attention=AttentionPath("rows")
            ),
            length,
            repeats,
        )
    elif job in ("streaming", "streaming_pattern"):
        from interv.analysis import text_loss
        from interv.engine.masks import WindowAttention

        attention = "pattern" if job == "streaming_pattern" else "rows"
        bridge = _bridge(directory)
        edits = [
            WindowAttention(STREAMING_WINDOW, sink_tokens=4),
            WindowAttention(STREAMING_WINDOW),
        ]
        figures = _measured(
            lambda tokens: text_loss(bridge, tokens, edits, attention=attention), length, repeats
        )
        loss = figures.pop("result")
        figures["loss_nats_per_token"] = {
            "unedited": loss.mean(),
            **{sentence: loss.mean(i) for i, sentence in enumerate(loss.descriptions)},
        }
        figures["scope"] = loss.scope
    elif job == "gemma3_forward":
        from interv.models.gemma3 import converted_dir

        model = transformers.AutoModelForCausalLM.from_pretrained(
            converted_dir(), attn_implementation="sdpa", dtype=torch.float32
        ).eval()
        tokens = gemma3_tokens(length)
        # the layers only (no 262k-vocabulary unembedding): what concentration runs through
        figures = _measured_on(lambda t: model.model(t).last_hidden_state.shape, tokens)
    elif job == "gemma3_rows":
        from interv.models.gemma3 import load_gemma3

        model = load_gemma3(device="cpu", dtype=torch.float32)
        tokens = gemma3_tokens(length)
        figures = _measured_on(lambda t: concentration(model, t, attention="rows"), tokens)
        heads = figures.pop("result")
        figures["scope"] = heads.scope
        figures["layers"] = per_layer_bins(model, heads)
        figures["prefixes"] = per_layer_prefixes(heads)
    elif job == "smollm2":
        from interv.models.smollm2 import load_smollm2

        model = load_smollm2(device="cpu", dtype=torch.float32)
        text = (ROOT / "interv" / "data" / "text_sample.txt").read_text()
        tokens = model.to_tokens(text * 200, prepend_bos=True)[:, :length]
        with torch.no_grad():
            concentration(model, tokens[:, :WARM_UP], attention="rows")
            resident = _measure.reset_peak()
            start = time.perf_counter()
            heads = concentration(model, tokens, attention="rows")
            seconds = time.perf_counter() - start
            top = _measure.peak()
        figures = {
            "seconds": seconds,
            "peak_above_model_gib": (top - resident) / GIB,
            "peak_gib": top / GIB,
            "resident_gib": resident / GIB,
            "tokens": int(tokens.shape[1]),
            "heads": int(model.cfg.n_layers * model.cfg.n_heads),
            "scope": heads.scope,
        }
    else:
        import interv.engine.rows as rows

        if job == "exact":
            rows._STATS_DTYPE = torch.float64
        attention = "pattern" if job == "pattern" else "rows"
        bridge = _bridge(directory)
        figures = _measured(
            lambda tokens: concentration(bridge, tokens, attention=attention), length, repeats
        )
        heads = figures["result"]
        figures["scope"] = heads.scope
        if save:
            torch.save({name: heads.metric(name) for name in METRICS}, save)
    figures.pop("result", None)
    figures.update(job=job, length=length, load_after=_measure.load())
    print(json.dumps(figures))


# ----------------------------------------------------------------------------- the run


def _differences(files: dict[str, Path]) -> dict[str, dict[str, float]]:
    """Per pair of methods, the largest |difference| of each metric (NaNs must agree)."""
    loaded = {name: torch.load(path) for name, path in files.items() if path.exists()}
    out: dict[str, dict[str, float]] = {}
    for a, b in (("rows", "pattern"), ("rows", "exact"), ("pattern", "exact")):
        if a not in loaded or b not in loaded:
            continue
        pair = {}
        for metric, x in loaded[a].items():
            y = loaded[b][metric]
            if not torch.equal(x.isnan(), y.isnan()):
                pair[metric] = math.inf
                continue
            pair[metric] = float((x - y).abs().nan_to_num(0).max())
        out[f"{a} vs {b}"] = pair
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--worker", nargs=5, metavar=("JOB", "DIR", "LENGTH", "REPEATS", "SAVE"))
    parser.add_argument("--lengths", type=int, nargs="*", default=[4096, 8192, 16384, 32768])
    parser.add_argument("--compare", type=int, default=4096)
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--no-smollm2", action="store_true")
    parser.add_argument("--streaming", type=int, nargs="*", default=[], metavar="LENGTH")
    parser.add_argument("--out", type=Path)
    parser.add_argument("--model", choices=["random-llama", "gemma3-270m"], default="random-llama")
    parser.add_argument("--figure", type=Path, help="--model gemma3-270m: the PNG to write")
    args = parser.parse_args()
    if args.worker:
        job, directory, length, repeats, save = args.worker
        worker(job, directory, int(length), int(repeats), None if save == "-" else save)
        return
    script = str(Path(__file__).resolve())
    if args.model == "gemma3-270m":
        gemma3_main(script, args)
        return
    report: dict[str, Any] = {
        "command": " ".join([Path(sys.executable).name, *sys.argv]),
        "machine": _measure.machine(),
        "model": CONFIG,
        "lengths": {},
    }
    scratch = Path(tempfile.mkdtemp(prefix="interv-bench-long-"))
    try:
        build_model(scratch / "model")
        model_dir = str(scratch / "model")

        def run(job: str, length: int, save: str = "-") -> dict[str, Any]:
            figures = _measure.run_worker(
                script, [job, model_dir, str(length), str(args.repeats), save]
            )
            if "error" in figures:
                line = figures["error"]
            else:
                line = (
                    f"{figures['seconds']:8.1f} s  peak {figures['peak_above_model_gib']:6.3f} "
                    f"GiB above the model; load {figures['load_after']}"
                )
            print(f"{job:>15} {length:>6}: {line}", flush=True)
            return figures

        files = {name: scratch / f"{name}.pt" for name in ("rows", "pattern", "exact")}
        for length in args.lengths:
            row = {job: run(job, length) for job in ("hf_forward", "interv_forward")}
            row["rows"] = run("rows", length, str(files["rows"]) if length == args.compare else "-")
            if length == args.compare:
                row["pattern"] = run("pattern", length, str(files["pattern"]))
                row["exact"] = run("exact", length, str(files["exact"]))
            ok = all("seconds" in row[job] for job in ("rows", "hf_forward", "interv_forward"))
            if ok:
                row["ratio_rows_to_hf_forward"] = (
                    row["rows"]["seconds"] / row["hf_forward"]["seconds"]
                )
                row["ratio_rows_to_interv_forward"] = (
                    row["rows"]["seconds"] / row["interv_forward"]["seconds"]
                )
            report["lengths"][length] = row
        report["differences_at"] = args.compare
        report["differences"] = _differences(files)
        peaks = {
            length: row["rows"].get("peak_above_model_gib")
            for length, row in report["lengths"].items()
        }
        ends = [length for length in (min(peaks), max(peaks)) if peaks[length]] if peaks else []
        if len(ends) == 2 and ends[0] != ends[1]:
            report["peak_growth_exponent"] = math.log(peaks[ends[1]] / peaks[ends[0]]) / math.log(
                ends[1] / ends[0]
            )
        if not args.no_smollm2:
            report["smollm2"] = run("smollm2", SMOLLM2_TOKENS)
        for length in args.streaming:
            row = {"streaming": run("streaming", length)}
            if length <= args.compare:  # the pattern path: each layer's pattern, z-level edits
                row["streaming_pattern"] = run("streaming_pattern", length)
            report.setdefault("streaming", {})[length] = row
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    report["load_at_end"] = _measure.load()
    text = json.dumps(report, indent=1, default=str)
    print(text)
    if args.out:
        from interv._outputs import write_file

        write_file(args.out, text.encode())


def _write_report(path: Path, report: dict[str, Any], *, first: bool) -> None:
    """Write the report; the first write refuses an existing file, later ones replace the
    copy this run wrote."""
    from interv._outputs import write_file

    write_file(path, json.dumps(report, indent=1, default=str).encode(), replace=not first)


def gemma3_main(script: str, args: argparse.Namespace) -> None:
    """The ``--model gemma3-270m`` run (module docstring)."""
    lengths = args.lengths if args.lengths != [4096, 8192, 16384, 32768] else [1024, 4096, 8192]
    report: dict[str, Any] = {
        "command": " ".join([Path(sys.executable).name, *sys.argv]),
        "machine": _measure.machine(),
        "model": "gemma3-270m (Q4_K_M GGUF dequantized to float32)",
        "text": "interv's text sample, repeated, BOS first",
        "lengths": {},
    }
    wrote = False
    for length in lengths:
        row: dict[str, Any] = {}
        for job in ("gemma3_rows", "gemma3_forward"):  # interv's first: the longer wait
            load_before = _measure.load()
            figures = _measure.run_worker(script, [job, "-", str(length), "1", "-"], timeout=9000)
            figures["load_before"] = load_before
            if "error" in figures:
                line = figures["error"]
            else:
                line = (
                    f"{figures['seconds']:8.1f} s  peak {figures['peak_above_model_gib']:6.3f} "
                    f"GiB above the model; load {figures['load_after']}"
                )
            print(f"{job:>15} {length:>6}: {line}", flush=True)
            row[job.removeprefix("gemma3_")] = figures
            if args.out:  # after every job: a run stopped later keeps what it measured
                report["lengths"][length] = row
                _write_report(args.out, report, first=not wrote)
                wrote = True
        if all("seconds" in row[job] for job in ("forward", "rows")):
            row["ratio_rows_to_forward"] = row["rows"]["seconds"] / row["forward"]["seconds"]
        report["lengths"][length] = row
        if args.out:
            _write_report(args.out, report, first=not wrote)
            wrote = True
    report["load_at_end"] = _measure.load()
    print(json.dumps(report, indent=1, default=str))
    if args.out:
        _write_report(args.out, report, first=False)
    if args.figure:
        gemma3_figure(report, args.figure)


if __name__ == "__main__":
    main()
