"""Every entry point on a device, in bfloat16 and float32, against the CPU in float32.

The pipeline, run once per configuration (device, dtype), each in its own fresh process:

1. ``concentration``: :func:`interv.concentration` of every head on one long prompt (a text
   repeated), without the pattern (``attention="rows"``: :mod:`interv.engine.rows`);
2. ``sweep``: :func:`interv.run` with a zero ablation of every head (270 on SmolLM2);
3. ``screened``: :func:`interv.run` with a mean ablation of every head, screened
   (``Screen(top_k=20, audit=20, alpha=None)``: first-order estimates, the top and an audit
   sample exact, once);
4. ``circuits``: :func:`interv.discover` (EAP, ``Screen(top_k=50, audit=50, alpha=None)``) and the
   faithfulness curve of its circuits (:func:`interv.faithfulness`).

Compared with the CPU float32 run: the largest |difference| of each step's numbers (per-head
normalized entropy and sink mass averaged over the prompt; per-head prompt-mean effects; edge
scores and exact values; the faithfulness curve), the time of each step (after a warm-up on a
short prompt) and, on a GPU, the peak GPU memory of each step
(``torch.cuda.max_memory_allocated``); the machine, the date and the load.

Default: SmolLM2-135M, its 16 subject-verb agreement pairs (``examples/agreement_pairs.jsonl``),
an 8,192-token prompt, ``--device cuda`` in bfloat16 and float32. ``--smoke``: the CPU as the
device under test, in float32 and bfloat16, in this process, on a random 2-layer Llama-shaped
model (4 query heads, 2 key/value heads, d_model 32) with 4 pairs of the zoo's induction task,
a 256-token prompt and smaller screens, in seconds (the test suite runs it).

Run: ``python benchmarks/device_check.py [--device cuda] [--dtypes bfloat16 float32]
[--long 8192] [--out figures.json]`` or ``python benchmarks/device_check.py --smoke``. Prints
one table per configuration and the whole report as JSON (also written to ``--out``).
"""

from __future__ import annotations

import argparse
import json
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
PAIRS = ROOT / "examples" / "agreement_pairs.jsonl"
TEXT = ROOT / "interv" / "data" / "text_sample.txt"
STEPS = ("concentration", "sweep", "screened", "circuits")


# ----------------------------------------------------------------------------- one run


def _tiny_model(directory: Path) -> None:
    """A random 2-layer Llama-shaped model (4 query heads, 2 key/value heads, d_model 32)
    with the zoo's tokenizer, for the smoke run."""
    import transformers

    transformers.logging.set_verbosity_error()
    config = transformers.LlamaConfig(
        vocab_size=64,
        hidden_size=32,
        num_attention_heads=4,
        num_key_value_heads=2,
        num_hidden_layers=2,
        intermediate_size=64,
        max_position_embeddings=512,
        bos_token_id=0,
        eos_token_id=0,
        pad_token_id=1,
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        model = transformers.AutoModelForCausalLM.from_config(config)
    model.save_pretrained(directory)
    tokenizer = ROOT / "interv" / "zoo" / "data" / "induction-2l"
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(tokenizer / name, directory / name)


def _load(model_spec: str, device: str, dtype: str) -> Any:
    import interv

    return interv.load_model(model_spec, device=device, dtype=dtype)


def _task(model: Any, smoke: bool) -> Any:
    import interv

    if smoke:
        return interv.load_task("induction", n_pairs=4, seed=0).tokenize(model)
    return interv.PromptPairs.from_jsonl(PAIRS, name="agreement").tokenize(model)


def _long_prompt(model: Any, length: int) -> torch.Tensor:
    """``[1, length]`` tokens: BOS, then the sample text repeated (random tokens when the
    model's vocabulary cannot spell it)."""
    text = TEXT.read_text()
    try:
        tokens = model.to_tokens(text * (1 + length // 200), prepend_bos=True)[:, :length]
    except Exception:
        tokens = torch.zeros(1, 0, dtype=torch.int64)
    if tokens.shape[1] < length:  # a toy vocabulary: random tokens, BOS first
        generator = torch.Generator().manual_seed(1)
        tokens = torch.randint(2, int(model.cfg.d_vocab), (1, length), generator=generator)
        tokens[0, 0] = int(getattr(model.tokenizer, "bos_token_id", 0) or 0)
    return tokens


def _step(name: str, device: str, call: Any) -> tuple[Any, dict[str, float]]:
    if device.startswith("cuda"):
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
    start = time.perf_counter()
    result = call()
    if device.startswith("cuda"):
        torch.cuda.synchronize()
    figures = {"seconds": time.perf_counter() - start}
    if device.startswith("cuda"):
        figures["peak_gpu_gib"] = torch.cuda.max_memory_allocated() / 2**30
    return result, figures


def pipeline(model_spec: str, device: str, dtype: str, long: int, smoke: bool) -> dict:
    """Run the four steps; return their numbers (CPU float64 tensors) and figures."""
    import interv

    model = _load(model_spec, device, dtype)
    task = _task(model, smoke)
    n_layers, n_heads = model.cfg.n_layers, model.cfg.n_heads
    heads = [(layer, head) for layer in range(n_layers) for head in range(n_heads)]
    prompt = _long_prompt(model, long)
    # warm-up: kernels, the pattern-free check, lazy imports
    interv.concentration(model, prompt[:, :64], attention="rows")
    interv.run(model, task, [interv.ZeroAblation(0, 0)])
    numbers: dict[str, torch.Tensor] = {}
    figures: dict[str, dict[str, float]] = {}

    concentration, figures["concentration"] = _step(
        "concentration", device, lambda: interv.concentration(model, prompt, attention="rows")
    )
    numbers["concentration.normalized_entropy"] = concentration.per_head("normalized_entropy")
    numbers["concentration.sink_mass"] = concentration.per_head("sink_mass")
    figures["concentration"]["tokens"] = int(prompt.shape[1])

    sweep, figures["sweep"] = _step(
        "sweep", device, lambda: interv.run(model, task, [interv.ZeroAblation(*h) for h in heads])
    )
    numbers["sweep.effect"] = sweep.effect.mean(-1)
    figures["sweep"]["interventions"] = len(heads)

    ablations = [interv.MeanAblation(*h, reference="clean") for h in heads]
    size = 4 if smoke else 20
    screen = interv.Screen(top_k=size, audit=size, alpha=None)
    screened, figures["screened"] = _step(
        "screened", device, lambda: interv.run(model, task, ablations, screen=screen)
    )
    numbers["screened.effect"] = screened.effect.mean(-1)

    def circuits() -> tuple[Any, Any]:
        size = 5 if smoke else 50
        check = interv.Screen(top_k=size, audit=size, alpha=None)
        found = interv.discover(model, task, screen=check)
        fractions = (0.1, 0.5, 1.0) if smoke else interv.circuits.MIB_FRACTIONS
        curve = interv.faithfulness(
            model, task, found, fractions=fractions, n_bootstrap=50 if smoke else 1000
        )
        return found, curve

    (found, curve), figures["circuits"] = _step("circuits", device, circuits)
    numbers["circuits.scores"] = found.scores.scores
    numbers["circuits.faithfulness"] = torch.tensor(curve.mean)
    figures["circuits"]["edges"] = int(found.scores.scores.numel())
    return {
        "numbers": {name: value.detach().double().cpu() for name, value in numbers.items()},
        "figures": figures,
        "model": str(model.cfg.model_name),
        "attention": concentration.attention,
    }


def worker(model_spec: str, device: str, dtype: str, long: int, smoke: bool, save: str) -> None:
    warnings.simplefilter("ignore")
    import transformers

    transformers.logging.set_verbosity_error()
    done = pipeline(model_spec, device, dtype, long, smoke)
    torch.save(done["numbers"], save)
    print(
        json.dumps(
            {
                "figures": done["figures"],
                "model": done["model"],
                "attention": done["attention"],
                "load_after": _measure.load(),
            }
        )
    )


# ----------------------------------------------------------------------------- the check


def compare(found: dict[str, torch.Tensor], reference: dict[str, torch.Tensor]) -> dict:
    """Per number, the largest |difference| from the reference and the reference's scale."""
    out = {}
    for name, value in reference.items():
        other = found.get(name)
        if other is None or other.shape != value.shape:
            out[name] = {"max_abs_difference": None, "why": "missing or of another shape"}
            continue
        both = ~(value.isnan() | other.isnan())
        nan_agree = bool(torch.equal(value.isnan(), other.isnan()))
        difference = (other - value).abs()[both]
        out[name] = {
            "max_abs_difference": float(difference.max()) if difference.numel() else 0.0,
            "reference_max_abs": float(value[both].abs().max()) if both.any() else 0.0,
            "nan_agree": nan_agree,
        }
    return out


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--worker", nargs=6, metavar=("MODEL", "DEVICE", "DTYPE", "LONG", "SMOKE", "SAVE")
    )
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--dtypes", nargs="+", default=["bfloat16", "float32"])
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--long", type=int, default=8192)
    parser.add_argument("--smoke", action="store_true")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)
    if args.worker:
        spec, device, dtype, long, smoke, save = args.worker
        worker(spec, device, dtype, int(long), smoke == "1", save)
        return {}
    scratch = Path(tempfile.mkdtemp(prefix="interv-device-check-"))
    try:
        model_spec, device, long = args.model, args.device, args.long
        if args.smoke:
            _tiny_model(scratch / "model")
            model_spec, device, long = str(scratch / "model"), "cpu", 256
        if device.startswith("cuda") and not torch.cuda.is_available():
            report = {
                "machine": _measure.machine(),
                "not_run": f"device {device!r}: this machine has no CUDA device",
            }
            print(json.dumps(report, indent=1))
            return report
        report = _run(args, scratch, model_spec, device, long)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    text = json.dumps(report, indent=1, default=str)
    print(text)
    if args.out:
        from interv._outputs import write_file

        write_file(args.out, text.encode())
    return report


def _run(args: Any, scratch: Path, model_spec: str, device: str, long: int) -> dict[str, Any]:
    script = str(Path(__file__).resolve())
    report: dict[str, Any] = {
        "command": " ".join([Path(sys.executable).name, *sys.argv]),
        "machine": _measure.machine(),
        "model": model_spec if not args.smoke else "random 2-layer Llama, 4 heads, d_model 32",
        "long_prompt_tokens": long,
        "configurations": {},
    }
    smoke = "1" if args.smoke else "0"

    def run(run_device: str, dtype: str) -> tuple[dict[str, Any], dict[str, torch.Tensor]]:
        if args.smoke:  # in this process: seconds, not the cost of a fresh one
            warnings.simplefilter("ignore")
            done = pipeline(model_spec, run_device, dtype, long, smoke=True)
            figures = {key: done[key] for key in ("figures", "model", "attention")}
            return {**figures, "load_after": _measure.load()}, done["numbers"]
        save = scratch / f"{run_device.replace(':', '_')}-{dtype}.pt"
        got = _measure.run_worker(
            script, [model_spec, run_device, dtype, str(long), smoke, str(save)]
        )
        numbers = torch.load(save) if save.exists() else {}
        return got, numbers

    reference, reference_numbers = run("cpu", "float32")
    report["configurations"]["cpu float32"] = reference
    for dtype in args.dtypes:
        if device == "cpu" and dtype == "float32":
            continue
        got, numbers = run(device, dtype)
        if "error" not in got and reference_numbers:
            got["against_cpu_float32"] = compare(numbers, reference_numbers)
        report["configurations"][f"{device} {dtype}"] = got
    for name, got in report["configurations"].items():
        print(f"\n{name}: " + (got.get("error") or ""))
        for step, figures in got.get("figures", {}).items():
            cells = ", ".join(f"{key} {value:.3g}" for key, value in figures.items())
            print(f"  {step:>13}: {cells}")
        for number, cells in got.get("against_cpu_float32", {}).items():
            print(f"  {number:>36}: max |difference| {cells['max_abs_difference']}")
    report["load_at_end"] = _measure.load()
    return report


if __name__ == "__main__":
    main()
