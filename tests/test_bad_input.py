"""A newcomer's mistakes: every one ends in a clear message, never in a traceback.

One table of the mistakes users make with models, tasks, configs, metrics, reports and
output paths, through the command line and through Python. For each case:

- the CLI exits with status 2 and prints ``interv: error: ...`` (argparse's own
  ``error:`` for malformed arguments); Python raises :class:`interv.IntervError`;
- the message names the bad value and what is allowed (the ``match`` pattern);
- nothing under the working directory is created, changed or removed (no partial or
  overwritten output);
- where it can, the check happens before any model is loaded (``before_load``).
"""

from __future__ import annotations

import dataclasses
import errno
import functools
import hashlib
import json
import math
import os
import re
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
from _report_fixtures import make_concentration, make_result
from hypothesis import given, settings
from hypothesis import strategies as st

import interv
import interv.sweeps
import interv.zoo
from interv import metrics
from interv.analysis.attention_view import attention_view
from interv.cli import main
from interv.errors import IntervError

SWEEP = """
[model]
spec = "{spec}"
[task]
{task}
[sweep]
batch_size = 64
{sweep}
[[sweep.interventions]]
kind = "{kind}"
{extra}
"""


def _sweep_config(
    spec: str = "induction-2l",
    task: str = 'name = "induction"\nn_pairs = 4',
    sweep: str = "",
    kind: str = "zero_ablation",
    extra: str = "",
) -> str:
    return SWEEP.format(spec=spec, task=task, sweep=sweep, kind=kind, extra=extra)


def _saved_report() -> str:
    """report.json of a small hand-made report (no model)."""
    from interv.analysis.concentration import METRICS
    from interv.engine.interventions import ZeroAblation
    from interv.report.render import to_json
    from interv.report.table import build_report

    generator = torch.Generator().manual_seed(0)
    interventions = [ZeroAblation(0, 0), ZeroAblation(0, 1)]
    result = make_result(
        torch.randn(2, 4, generator=generator),
        torch.randn(4, generator=generator) + 3,
        torch.randn(4, generator=generator),
        ["ZeroAblation"] * 2,
        [iv.describe() for iv in interventions],
        sites=[iv.site for iv in interventions],
    )
    per_prompt = {
        name: torch.rand(4, 1, 2, generator=generator, dtype=torch.float64) for name in METRICS
    }
    report = build_report(result, make_concentration(per_prompt), n_bootstrap=50)
    return to_json(report)


def _populate(root: Path) -> None:
    """The files a user has lying around, some of them broken."""
    (root / "afile").write_text("a user's file\n")
    (root / "mine").mkdir()
    (root / "mine" / "report.md").write_text("# my own notes, not interv's\n")
    (root / "empty").mkdir()
    (root / "emptydir-for-report").mkdir()
    (root / "notutf8.txt").write_bytes("caf\xe9\n".encode("latin-1"))
    (root / "blank.txt").write_text("\n  \n")
    (root / "english.txt").write_text("The cat sat\n")
    (root / "plots-cosine.png").write_bytes(b"a user's image")
    (root / "pruning.png").write_bytes(b"a user's image")
    saved = _saved_report()
    (root / "truncated").mkdir()
    (root / "truncated" / "report.json").write_text(saved[: len(saved) // 2])
    (root / "latin1").mkdir()
    (root / "latin1" / "report.json").write_bytes(b'{"header": "\xe9"}')
    (root / "notareport").mkdir()
    (root / "notareport" / "report.json").write_text("[1, 2, 3]\n")
    (root / "saved").mkdir()
    (root / "saved" / "report.json").write_text(saved)
    # an interv directory whose report.md the user edited afterwards
    (root / "edited").mkdir()
    (root / "edited" / "report.md").write_text("interv wrote this\n")
    digest = hashlib.sha256(b"interv wrote this\n").hexdigest()
    marker = {"format": "interv-files/1", "files": {"report.md": {"sha256": digest}}}
    (root / "edited" / ".interv-files.json").write_text(json.dumps(marker))
    (root / "edited" / "report.md").write_text("interv wrote this\nand I added my notes\n")
    (root / "incomplete").mkdir()
    (root / "incomplete" / "manifest.json").write_text('{"format": "interv-sweep/1"}\n')
    (root / "cut").mkdir()
    (root / "cut" / "manifest.json").write_text('{"format": "interv-sweep/1", "config": {')
    pairs = {"clean": "A B C A", "corrupted": "D E F A", "target": "B", "foil": "C"}
    (root / "pairs.jsonl").write_text(json.dumps(pairs) + "\n")
    (root / "badline.jsonl").write_text(json.dumps(pairs) + "\n{not json\n")
    (root / "notutf8.jsonl").write_bytes(b'{"clean": "caf\xe9"}\n')
    configs = {
        "ok.toml": _sweep_config(),
        "broken.toml": "[model\nspec = 1\n",
        "factor_nan.toml": _sweep_config(kind="value_scale", extra="factor = nan"),
        "factor_inf.toml": _sweep_config(kind="value_scale", extra="factor = inf"),
        "atol_nan.toml": _sweep_config(sweep="recovery_atol = nan"),
        "nomodel.toml": _sweep_config(spec="./models/nope"),
        "badtask.toml": _sweep_config(task='path = "notutf8.jsonl"'),
        "notask.toml": _sweep_config(task='path = "missing.jsonl"'),
        "unknownkey.toml": _sweep_config(sweep='metrik = "logit_diff"'),
        "badlayer.toml": _sweep_config(extra="sites = {layers = [7]}"),
        "valuescale.toml": _sweep_config(kind="value_scale"),
    }
    for name, text in configs.items():
        (root / name).write_text(text)
    (root / "notutf8.toml").write_bytes(b'[model]\nspec = "\xff"\n')


def _snapshot(root: Path) -> dict[str, str]:
    """Every path under ``root`` with the hash of its content (directories as 'dir')."""
    found = {}
    for path in sorted(root.rglob("*")):
        relative = str(path.relative_to(root))
        found[relative] = "dir" if path.is_dir() else hashlib.sha256(path.read_bytes()).hexdigest()
    return found


@pytest.fixture(scope="module")
def zoo_model():
    return interv.load_model("induction-2l")


@pytest.fixture
def workdir(tmp_path, monkeypatch):
    _populate(tmp_path)
    monkeypatch.chdir(tmp_path)
    return tmp_path


@pytest.fixture
def model_loads(monkeypatch):
    """Names of the models loaded during the test (every load path goes through one of
    these functions)."""
    import interv.models
    import interv.models.loading
    import interv.zoo

    loads: list[str] = []

    def counting(function: Callable[..., Any]) -> Callable[..., Any]:
        def load(name: Any, *args: Any, **kwargs: Any) -> Any:
            loads.append(str(name))
            return function(name, *args, **kwargs)

        return load

    # resolve the lazy face first: read after the patch below, it would resolve to (and be
    # "restored" to) the counting wrapper, leaking it into later tests
    face_load = interv.models.load_model
    monkeypatch.setattr(
        interv.models.loading, "load_model", counting(interv.models.loading.load_model)
    )
    monkeypatch.setattr(interv.models, "load_model", counting(face_load))
    monkeypatch.setattr(interv.zoo, "load", counting(interv.zoo.load))
    return loads


# (argv, pattern the message must match, the check comes before any model load)
CLI_CASES = [
    # interv demo: output paths and options
    (["demo", "--out", "afile"], r"'afile' is an existing file; expected a directory", True),
    (["demo", "--out", "afile/sub"], r"cannot be created: 'afile' is a file", True),
    (["demo", "--out", "/proc/interv-demo"], r"cannot create .*'/proc/interv-demo'", True),
    (["demo", "--out", "mine"], r"'mine' holds files interv did not write \(report\.md\)", True),
    (["demo", "--out", "edited"], r"report\.md \(changed since interv wrote it\)", True),
    (["demo", "--n-pairs", "0"], r"--n-pairs must be >= 1; got 0", True),
    (["demo", "--n-pairs", "-3"], r"--n-pairs must be >= 1; got -3", True),
    (["demo", "--n-pairs", "two"], r"--n-pairs: invalid int value: 'two'", True),
    (["demo", "--layers", "2"], r"layers \[2\] do not exist; induction-2l has 2 layers", True),
    (
        ["demo", "--layers", "-1"],
        r"layers must be >= 0 \(absolute positions\); got -1 in \(-1,\)",
        True,
    ),
    (["demo", "--layers", "1", "1"], r"layers must not repeat a position; got \[1, 1\]", True),
    (["demo", "gpt2"], r"invalid choice: 'gpt2' \(choose from", True),
    (["demo", "--model", "gpt2"], r"--model 'gpt2': the demo runs one of", True),
    # interv report: what the directory holds
    (["report", "nosuch"], r"directory 'nosuch' does not exist", True),
    (["report", "afile"], r"'afile' is a file; expected a directory written by", True),
    (["report", "emptydir-for-report"], r"holds neither a saved report .* nor a sweep", True),
    (["report", "truncated"], r"report\.json' is not valid JSON .* cut short", True),
    (["report", "latin1"], r"report\.json' is not UTF-8 text: byte 0xe9", True),
    (["report", "notareport"], r"not a saved interv report: expected a JSON object", True),
    (
        ["report", "incomplete"],
        r"manifest\.json' is damaged: sweep manifest: missing field 'config'",
        True,
    ),
    (["report", "cut"], r"manifest\.json' is not valid JSON", True),
    (["report", "saved", "--out", "mine"], r"holds files interv did not write", True),
    (["report", "saved"], r"'saved' holds files interv did not write .* pass --out DIR", True),
    (["report", "saved", "--out", "afile"], r"'afile' is an existing file", True),
    # interv metrics: one row, as typed
    (["metrics", "0.7", "0.1", "0.1", "0.2"], r"4 weights sum to 1\.1; expected 1", True),
    (["metrics", "0.3", "0.3", "0.3"], r"sum to 0\.9; .*type at least 3 decimals", True),
    (["metrics", "0.3", "0.2"], r"sum to 0\.5; .*pass --allow-deficit", True),
    (["metrics", "0.5", "nan", "0.5"], r"weight 'nan' is not a finite number", True),
    (
        ["metrics", "0.5", "abc"],
        r"weight 'abc' is not a number; expected weights in \[0, 1\]",
        True,
    ),
    (["metrics", "-0.5", "1.5"], r"negative weight -0\.5 at key 0; expected .* \[0, 1\]", True),
    (["metrics", "0.5", "0.5", "--sink", "2"], r"sink position 2 is out of range; .* 0\.\.1", True),
    (["metrics", "0.5", "0.5", "--unit", "dits"], r"invalid choice: 'dits'", True),
    # interv sweep and sweep-merge: configs, tasks, output
    (["sweep", "missing.toml", "--out", "s"], r"sweep config 'missing\.toml' does not exist", True),
    (["sweep", "broken.toml", "--out", "s"], r"'broken\.toml' is not valid TOML", True),
    (["sweep", "notutf8.toml", "--out", "s"], r"'notutf8\.toml' is not UTF-8 text", True),
    (["sweep", "factor_nan.toml", "--out", "s"], r"factor must be a finite number; got nan", True),
    (["sweep", "factor_inf.toml", "--out", "s"], r"factor must be a finite number; got inf", True),
    (["sweep", "atol_nan.toml", "--out", "s"], r"recovery_atol must be a finite number", True),
    (["sweep", "unknownkey.toml", "--out", "s"], r"metrik", True),
    (["sweep", "ok.toml", "--out", "afile"], r"'afile' is an existing file", True),
    (["sweep", "ok.toml", "--out", "afile/s"], r"cannot be created: 'afile' is a file", True),
    (["sweep", "ok.toml", "--out", "mine"], r"neither empty nor a sweep directory", True),
    (["sweep", "ok.toml", "--out", "s", "--shard", "5/4"], r"shard 5/4 does not exist", True),
    (["sweep", "nomodel.toml", "--out", "s"], r"model directory './models/nope' does not", True),
    (["sweep", "badtask.toml", "--out", "s"], r"task file .*notutf8\.jsonl' is not UTF-8", True),
    (["sweep", "notask.toml", "--out", "s"], r"task\.path 'missing\.jsonl' does not exist", True),
    (["sweep", "badlayer.toml", "--out", "s"], r"layer 7 is out of range; .* 0\.\.1", False),
    (["sweep", "ok.toml", "--out", "s", "--top-k", "0"], r"screen\.top_k must be >= 1", True),
    (
        ["sweep", "ok.toml", "--out", "s", "--alpha", "1.5"],
        r"alpha must be a number in \(0, 1\)",
        True,
    ),
    (["sweep", "ok.toml", "--out", "s", "--alpha", "x"], r"--alpha must be a number", True),
    (
        ["sweep", "valuescale.toml", "--out", "s", "--screen"],
        r"cannot estimate .*value_scale.*'zero_ablation', 'mean_ablation', 'resample_ablation'",
        True,
    ),
    (["sweep", "ok.toml", "--out", "s", "--screen", "--shard", "0/2"], r"cannot be sharded", True),
    (
        ["sweep", "ok.toml", "--out", "s", "--top-k", "9"],
        r"top_k \(9\) must be at most the number of interventions screened \(8\)",
        False,
    ),
    (["sweep-merge", "mine", "--out", "s"], r"'mine' is not a sweep directory", True),
    # similarity, pruning, entropy-change, zoo
    (["similarity", "./models/nope"], r"model directory './models/nope' does not exist", True),
    (["similarity", "no-such-model"], r"unknown model spec 'no-such-model'; valid specs", True),
    (["similarity", "induction-2l", "--prompts", "missing.txt"], r"does not exist", True),
    (["similarity", "induction-2l", "--prompts", "notutf8.txt"], r"is not UTF-8 text", True),
    (["similarity", "induction-2l", "--prompts", "blank.txt"], r"has no non-empty line", True),
    (["similarity", "induction-2l", "--k", "0"], r"--k must be >= 1; got 0", True),
    (
        ["similarity", "induction-2l", "--prompts", "english.txt"],
        r"prompt 0 'The cat sat' cannot be tokenized: its words \['The', 'cat', 'sat'\]",
        False,
    ),
    (
        ["similarity", "induction-2l", "--plot", "plots.png"],
        r"'plots-cosine\.png' exists and interv did not write it",
        True,
    ),
    (["similarity", "induction-2l", "--plot", "p.xyz"], r"unknown image format 'xyz'", True),
    (["pruning", "induction-2l", "--task", "nosuch"], r"unknown task 'nosuch'; available", True),
    (
        ["pruning", "induction-2l", "--task", "ioi"],
        r"cannot be tokenized: .* zoo models take the task 'induction'",
        False,
    ),
    (["pruning", "induction-2l", "--metric", "acc"], r"--metric: invalid choice: 'acc'", True),
    (
        ["pruning", "induction-2l", "--rankings", "size"],
        r"--rankings: invalid choice: 'size'",
        True,
    ),
    (["pruning", "induction-2l", "--n-pairs", "0"], r"--n-pairs must be >= 1; got 0", True),
    (
        ["pruning", "induction-2l", "--ks", "4", "2"],
        r"--ks must be ascending and distinct; got \[4, 2\]",
        True,
    ),
    (["pruning", "induction-2l", "--ks", "-1"], r"--ks must be >= 0; got -1", True),
    (["pruning", "induction-2l", "--random-seeds", "1", "1"], r"distinct ints; got \[1, 1\]", True),
    (
        ["pruning", "induction-2l", "--ks", "0", "99"],
        r"ks must be ascending distinct ints in \[0, 8\] \(max_heads\); got \[0, 99\]",
        False,
    ),
    (["pruning", "induction-2l", "--plot", "pruning.png"], r"did not write it", True),
    (["pruning", "induction-2l", "--plot", "afile/p.png"], r"'afile' is a file", True),
    (["entropy-change", "nosuch", "--from", "0"], r"unknown zoo model 'nosuch'", True),
    (
        ["entropy-change", "induction-2l", "--from", "7"],
        r"--from 7: .* no checkpoint at that step; shipped steps: 0, ",
        True,
    ),
    (
        ["entropy-change", "induction-2l", "--from", "0", "--n-sequences", "0"],
        r"--n-sequences must be >= 1",
        True,
    ),
    (["paths", "nosuch", "--sender", "L0H2"], r"unknown model spec 'nosuch'; valid specs", True),
    (
        ["paths", "induction-2l", "--sender", "L0H2", "--metric", "acc"],
        r"--metric: invalid choice: 'acc'",
        True,
    ),
    (["paths", "induction-2l", "--sender", "L0H2", "--n-pairs", "0"], r"--n-pairs must", True),
    (["paths", "induction-2l", "--sender", "L0H2", "--top", "0"], r"--top must be >= 1", True),
    (
        ["paths", "induction-2l", "--sender", "L0H2", "--receivers", "X1"],
        r"--receivers: a head is written L1H3 \(layer 1, head 3\); got 'X1'",
        True,
    ),
    (
        ["paths", "induction-2l", "--sender", "L5H0"],
        r"layer 5 is out of range; the model has 2 layers",
        False,
    ),
    (
        ["interactions", "induction-2l", "--heads", "L0H2", "L4H0"],
        r"layer 4 is out of range; the model has 2 layers",
        False,
    ),
    (
        ["interactions", "induction-2l", "--heads", "L0H2", "--baseline", "x"],
        r"invalid choice",
        True,
    ),
    (["zoo", "info", "nosuch"], r"unknown zoo model 'nosuch'; available: induction-2l", True),
    (["zoo", "train", "induction-2l", "--out", "afile"], r"'afile' is an existing file", True),
]


@pytest.mark.parametrize(
    ("argv", "pattern", "before_load"),
    [pytest.param(*case, id=" ".join(case[0])) for case in CLI_CASES],
)
def test_cli_mistake_exits_2_with_a_clear_message_and_leaves_files_alone(
    argv, pattern, before_load, workdir, model_loads, capsys
):
    before = _snapshot(workdir)
    try:
        status = main(argv)
    except SystemExit as exit_:  # argparse's own errors
        status = exit_.code
    captured = capsys.readouterr()
    assert status == 2, captured.err
    assert "Traceback" not in captured.err
    error_lines = [line for line in captured.err.splitlines() if "error:" in line]
    assert error_lines, captured.err
    assert any(re.search(pattern, line) for line in error_lines), captured.err
    assert _snapshot(workdir) == before, "the failed command changed files"
    if before_load:
        assert model_loads == [], f"a model was loaded before the check: {model_loads}"


def _pairs(*words: str) -> interv.PromptPairs:
    return interv.PromptPairs(
        clean=[" ".join(words)], corrupted=[" ".join(("Z",) * len(words))], targets=["A"]
    )


def _run_sweep(config: str, out: str) -> Any:
    from interv.sweeps import run_sweep

    return run_sweep(config, out, progress=False)


# (call(workdir, zoo_model), pattern, before_load)
PYTHON_CASES = {
    "from_jsonl missing file": (
        lambda d, m: interv.PromptPairs.from_jsonl("missing.jsonl"),
        r"task file 'missing\.jsonl' does not exist",
        True,
    ),
    "from_jsonl not UTF-8": (
        lambda d, m: interv.PromptPairs.from_jsonl("notutf8.jsonl"),
        r"'notutf8\.jsonl' is not UTF-8 text: byte 0xe9 at offset 14 \(line 1\)",
        True,
    ),
    "from_jsonl a directory": (
        lambda d, m: interv.PromptPairs.from_jsonl("mine"),
        r"task file 'mine' is a directory; expected a file",
        True,
    ),
    "from_jsonl a line that is not JSON": (
        lambda d, m: interv.PromptPairs.from_jsonl("badline.jsonl"),
        r"badline\.jsonl, line 2: not valid JSON",
        True,
    ),
    "a word the zoo tokenizer does not know": (
        lambda d, m: _pairs("A", "B", "hello", "A").tokenize(m),
        r"clean prompt 'A B hello A' cannot be tokenized: its words \['hello'\] are not in",
        False,
    ),
    "a target the zoo tokenizer does not know": (
        lambda d, m: interv.PromptPairs(clean=["A B"], corrupted=["C B"], targets=["xyz"]).tokenize(
            m
        ),
        r"target 'xyz' cannot be tokenized: its words \['xyz'\]",
        False,
    ),
    "a built-in task that does not fit the zoo model": (
        lambda d, m: interv.load_task("ioi", n_pairs=2).tokenize(m),
        r"the built-in task 'ioi' is English text .* zoo models take the task 'induction'",
        False,
    ),
    "an unknown task": (
        lambda d, m: interv.load_task("nosuch"),
        r"unknown task 'nosuch'; available tasks are \('capitals', 'induction', 'ioi'\)",
        True,
    ),
    "zero pairs": (
        lambda d, m: interv.load_task("ioi", n_pairs=0),
        r"n_pairs must be an integer >= 1; got 0",
        True,
    ),
    "an unknown task option": (
        lambda d, m: interv.load_task("ioi", names="x"),
        r"task 'ioi' has no option 'names'; its options are \('name_set',\)",
        True,
    ),
    "concentration of English text on the zoo model": (
        lambda d, m: interv.concentration(m, ["the cat sat"]),
        r"prompt 0 'the cat sat' cannot be tokenized: "
        r"its words \['the', 'cat', 'sat'\] are not in the tokenizer's vocabulary",
        False,
    ),
    "run on untokenized pairs": (
        lambda d, m: interv.run(m, interv.load_task("induction", n_pairs=2), []),
        r"task must be a TokenizedPairs; got PromptPairs; call \.tokenize\(model\) on it",
        False,
    ),
    "ValueScale factor nan": (
        lambda d, m: interv.ValueScale(0, 0, (0,), factor=math.nan),
        r"factor must be a finite number; got nan",
        True,
    ),
    "ValueScale factor inf": (
        lambda d, m: interv.ValueScale(0, 0, (0,), factor=math.inf),
        r"factor must be a finite number; got inf",
        True,
    ),
    "run recovery_atol nan": (
        lambda d, m: interv.run(
            m,
            interv.load_task("induction", n_pairs=2).tokenize(m),
            [interv.ZeroAblation(0, 0)],
            recovery_atol=math.nan,
        ),
        r"recovery_atol must be a finite number; got nan",
        False,
    ),
    "entropy_change of a 2-key row against a 3-key row": (
        lambda d, m: metrics.entropy_change(
            torch.tensor([0.5, 0.5]), torch.tensor([0.2, 0.3, 0.5])
        ),
        r"before has 2 keys .* after has 3 .* mean_entropy_change",
        True,
    ),
    "a float32 row off by 1e-4": (
        lambda d, m: metrics.entropy(torch.softmax(torch.arange(8.0), -1) * (1 - 1e-4)),
        r"sums to 0\.9999 over its 8 available keys; expected 1 within .*\(float32 tolerance\)",
        True,
    ),
    "a missing local model directory": (
        lambda d, m: interv.load_model("./models/nope"),
        r"model directory './models/nope' does not exist; expected a local directory",
        True,
    ),
    "a model spec that is not a string": (
        lambda d, m: interv.load_model(42),
        r"model spec must be a string or a path; got int 42",
        True,
    ),
    "an unknown dtype": (
        lambda d, m: interv.load_model("induction-2l", dtype="float64"),
        r"unknown dtype 'float64'; choose one of \['bfloat16', 'float16', 'float32'\]",
        True,
    ),
    "run_demo with zero prompts": (
        lambda d, m: interv.demo.run_demo(n_prompts=0),
        r"n_prompts must be >= 1; got 0",
        True,
    ),
    "run_demo into an existing file": (
        lambda d, m: interv.demo.run_demo(out="afile"),
        r"'afile' is an existing file",
        True,
    ),
    "run_demo into a user's directory": (
        lambda d, m: interv.demo.run_demo(out="mine"),
        r"holds files interv did not write \(report\.md\)",
        True,
    ),
    "run_sweep into an existing file": (
        lambda d, m: _run_sweep("ok.toml", "afile"),
        r"sweep directory 'afile' is an existing file",
        True,
    ),
    "load_sweep of a directory without a manifest": (
        lambda d, m: interv.load_sweep("mine"),
        r"'mine' is not a sweep directory: it has no manifest\.json",
        True,
    ),
    "load_sweep of a truncated manifest": (
        lambda d, m: interv.load_sweep("cut"),
        r"sweep manifest 'cut/manifest\.json' is not valid JSON",
        True,
    ),
    "Report.from_dict of an incomplete report": (
        lambda d, m: interv.Report.from_dict({"header": {"sink_positions": [0]}}),
        r"not a saved interv report: report\.header: missing field 'model'",
        True,
    ),
}


@pytest.mark.parametrize("name", list(PYTHON_CASES))
def test_python_mistake_raises_interv_error_and_leaves_files_alone(
    name, workdir, zoo_model, model_loads
):
    call, pattern, before_load = PYTHON_CASES[name]
    import interv.demo  # noqa: F401  (the cases reach run_demo through the package)

    before = _snapshot(workdir)
    with pytest.raises(IntervError, match=pattern):
        call(workdir, zoo_model)
    assert _snapshot(workdir) == before, "the failed call changed files"
    if before_load:
        assert model_loads == [], f"a model was loaded before the check: {model_loads}"


def test_the_table_holds_at_least_forty_cases():
    assert len(CLI_CASES) + len(PYTHON_CASES) >= 40


def test_a_hub_name_offline_fails_at_once_with_the_offline_options(workdir):
    start = time.perf_counter()
    with pytest.raises(IntervError, match=r"no model hub is reachable .* Offline options"):
        interv.load_model("someorg/somemodel")
    assert time.perf_counter() - start < 10  # no 35 s of download retries


@pytest.mark.slow
@pytest.mark.parametrize(
    "argv",
    [
        ["metrics", "0.7", "0.1", "0.1", "0.2"],
        ["report", "truncated"],
        ["demo", "--out", "afile"],
    ],
    ids=["metrics", "report", "demo"],
)
def test_the_console_script_prints_one_error_line_and_no_traceback(argv, workdir):
    done = subprocess.run(
        [sys.executable, "-m", "interv", *argv],
        capture_output=True,
        text=True,
        env={**os.environ, "HF_HUB_OFFLINE": "1"},
        check=False,
    )
    assert done.returncode == 2
    assert done.stdout == ""
    assert done.stderr.startswith("interv: error: ") and done.stderr.count("\n") == 1
    assert "Traceback" not in done.stderr


# =====================================================================================
# Trust: what interv writes, imports and reads (issue 21, the trust-writes half).
#
# Each example of the issue is a case below; the cases found by reading every place
# interv writes or reads a file follow them. The table cases keep the rules above (exit
# status 2 or IntervError, the message, nothing changed, before any model load); the
# stateful examples (a kill, a full disk, a received directory) are tests of their own.
# =====================================================================================

EVIL = "trust_evil_module"  # a module that records being imported; never imported unasked
EVIL_SOURCE = """
from pathlib import Path
Path(__file__).with_name("IMPORTED-" + __name__).write_text("imported")
"""
HAND_SWEEP = {
    "model": {"spec": "induction-2l"},
    "task": {"name": "induction", "n_pairs": 1},
    "sweep": {"interventions": [{"kind": "zero_ablation", "sites": {"layers": [0]}}]},
}


@functools.cache
def _zoo_provenance() -> dict[str, Any]:
    """What a sweep of HAND_SWEEP on the zoo model stores as its provenance."""
    from interv.provenance import Provenance

    model = interv.load_model("induction-2l")
    task = interv.load_task("induction", n_pairs=1).tokenize(model)
    return Provenance.of(model, task, metric="logit_diff").to_dict()


def _hand_sweep(directory: Path, kind: str | None = None) -> None:
    """A complete sweep directory written through the store, without a model: one unit,
    one prompt (``kind`` replaces the stored kind: a manifest received from someone)."""
    from interv.sweeps.config import SweepConfig, parse_config
    from interv.sweeps.store import SweepStore

    config = parse_config(HAND_SWEEP)
    if kind is not None:
        normalized = json.loads(json.dumps(config.normalized))
        normalized["sweep"]["interventions"][0]["kind"] = kind
        config = SweepConfig(normalized=normalized)
    baselines = {
        "config_hash": config.config_hash,
        "clean": [2.0],
        "corrupted": [0.5],
        "dtype": "float32",
        "recovery_atol": 1e-6,
        "metric": {"name": "logit_diff", "unit": "logits", "definition": "target - foil"},
        "scope": {
            "model_name": "interv-zoo/induction-2l",
            "task_name": "induction",
            "n_prompts": 1,
            "n_positions": 29,
            "answer_positions": [28],
            "padding_side": "right",
        },
        "provenance": _zoo_provenance(),
    }
    record = {
        "unit": "u00000",
        "config_hash": config.config_hash,
        "start": 0,
        "kinds": ["ZeroAblation"],
        "descriptions": ["L0H0 output (z) set to zero"],
        "base_runs": ["clean"],
        "sites": [{"component": "z", "layer": 0, "head": 0, "positions": None}],
        "params": [{"kind": "ZeroAblation", "layer": 0, "head": 0}],
        "values": [[1.25]],
    }
    from interv.sweeps.execute import task_fingerprint

    fingerprint = task_fingerprint(interv.load_task("induction", n_pairs=1))
    with SweepStore.open(directory, config, None, fingerprint) as store:
        store.write_baselines(baselines)
        store.append(record)
        store.record_plan(1, 1)
        store.finish()


def _edit_json(path: Path, change: Callable[[Any], Any]) -> None:
    path.write_text(json.dumps(change(json.loads(path.read_text()))))


def _set(key_path: tuple, value: Any) -> Callable[[Any], Any]:
    def change(data: Any) -> Any:
        target = data
        for key in key_path[:-1]:
            target = target[key]
        if value is _DROP:
            del target[key_path[-1]]
        else:
            target[key_path[-1]] = value
        return data

    return change


_DROP = object()


def _populate_trust(root: Path) -> None:
    """Files with the damage, the markup and the code that issue 21 names."""
    saved = json.loads(_saved_report())
    for name, change in {
        "hdr-type": _set(("header", "n_prompts"), "sixteen"),
        "hdr-list": _set(("header",), [1, 2]),
        "hdr-gone": _set(("header",), _DROP),
        "hdr-sink": _set(("header", "sink_positions"), "0"),
        "hdr-extra": _set(("header", "owner"), "me"),
        "row-site": _set(("rows", 0, "site", "component"), "nope"),
        "row-flags": _set(("rows", 0, "flags"), 7),
    }.items():
        (root / name).mkdir()
        (root / name / "report.json").write_text(json.dumps(change(json.loads(json.dumps(saved)))))
    damage = {
        "sw-nunits": ("manifest.json", _set(("n_units",), "1")),
        "sw-status": ("manifest.json", _set(("status",), "done")),
        "sw-shard": ("manifest.json", _set(("shard",), "x/y")),
        "sw-dtype": ("baselines.json", _set(("dtype",), "float99")),
        "sw-clean": ("baselines.json", _set(("clean",), "abc")),
        "sw-scope": ("baselines.json", _set(("scope", "n_prompts"), _DROP)),
        "sw-metric": ("baselines.json", _set(("metric",), ["logits"])),
    }
    for name, (file, change) in damage.items():
        _hand_sweep(root / name)
        _edit_json(root / name / file, change)
    for name, line in {
        "sw-values": {"values": [["a"]]},
        "sw-kinds": {"kinds": ["ZeroAblation", "ZeroAblation"]},
        "sw-rowlen": {"values": [[1.0, 2.0]]},
        "sw-site": {"sites": [{"component": "nope", "layer": 0, "head": 0, "positions": None}]},
    }.items():
        _hand_sweep(root / name)
        units = root / name / "units.jsonl"
        units.write_text(json.dumps({**json.loads(units.read_text()), **line}) + "\n")
    _hand_sweep(root / "sw-garbage")
    (root / "sw-garbage" / "units.jsonl").write_text("{not json\n")
    _hand_sweep(root / "sw-nounit")
    (root / "sw-nounit" / "units.jsonl").write_text("")
    _hand_sweep(root / "sw-nobase")
    (root / "sw-nobase" / "baselines.json").unlink()
    _hand_sweep(root / "sw-link")
    (root / "sw-link" / "units.jsonl").unlink()
    (root / "sw-link" / "units.jsonl").symlink_to("../afile")  # relative: the tree is copied
    _hand_sweep(root / "received", kind=f"{EVIL}:Kind")
    (root / f"{EVIL}.py").write_text(EVIL_SOURCE)
    configs = {
        "optstr.toml": _sweep_config(task='name = "induction"\noptions = {prefix_len = "20"}'),
        "seedstr.toml": _sweep_config(task='name = "induction"\nseed = "1"'),
        "colon.toml": _sweep_config(kind=":X"),
        "relative.toml": _sweep_config(kind="..x:Y"),
        "spaces.toml": _sweep_config(kind="a b:C"),
        "evil.toml": _sweep_config(kind=f"{EVIL}:Kind"),
    }
    for name, text in configs.items():
        (root / name).write_text(text)
    (root / "bom.toml").write_bytes(b"\xef\xbb\xbf" + _sweep_config().encode())
    (root / "bom.jsonl").write_bytes(b"\xef\xbb\xbf" + (root / "pairs.jsonl").read_bytes())
    (root / "linkedmarker").mkdir()
    (root / "linkedmarker" / ".interv-files.json").symlink_to("../afile")
    (root / "nullhash").mkdir()
    (root / "nullhash" / "report.md").write_text("my notes, not interv's\n")
    null = {"format": "interv-files/1", "files": {"report.md": {"sha256": None, "by": "x"}}}
    (root / "nullhash" / ".interv-files.json").write_text(json.dumps(null))
    (root / "linkout").mkdir()
    (root / "linkout" / "report.md").symlink_to("../afile")
    (root / "linkout" / "plot.png").symlink_to("../afile")
    (root / "linkreport").mkdir()
    (root / "linkreport" / "report.json").symlink_to("../saved/report.json")


@pytest.fixture(scope="module")
def trust_template(tmp_path_factory):
    root = tmp_path_factory.mktemp("trust-template")
    _populate(root)
    _populate_trust(root)
    return root


@pytest.fixture
def trust_workdir(trust_template, tmp_path, monkeypatch):
    """A fresh copy of the populated tree (links kept, relative), as the working directory."""
    workdir = tmp_path / "work"
    shutil.copytree(trust_template, workdir, symlinks=True)
    monkeypatch.chdir(workdir)
    monkeypatch.syspath_prepend(str(workdir))  # the evil module *could* be imported
    yield workdir
    assert not (workdir / f"IMPORTED-{EVIL}").exists(), f"{EVIL} was imported"
    sys.modules.pop(EVIL, None)


_DAMAGED = r"is damaged: "
TRUST_CLI_CASES = [
    # the examples: damaged report.json headers
    (["report", "hdr-type"], r"report\.header\.n_prompts must be an integer; got 'sixteen'", True),
    (["report", "hdr-list"], r"report\.header must be a JSON object; got list", True),
    (["report", "hdr-gone"], r"report: missing field 'header'", True),
    (["report", "hdr-sink"], r"report\.header\.sink_positions must be a list; got '0'", True),
    (["report", "hdr-extra"], r"report\.header has unknown fields \['owner'\]", True),
    (["report", "row-site"], r"report\.rows\[0\]\.site: unknown component 'nope'", True),
    (["report", "row-flags"], r"report\.rows\[0\]\.flags must be a list; got 7", True),
    # damaged sweep files (rendered elsewhere, so the damage is what stops it)
    (
        ["report", "sw-nunits", "--out", "r"],
        _DAMAGED + r"sweep manifest\.n_units must be an integer; got '1'",
        True,
    ),
    (
        ["report", "sw-status", "--out", "r"],
        _DAMAGED + r"sweep manifest\.status must be one of .*; got 'done'",
        True,
    ),
    (
        ["report", "sw-shard", "--out", "r"],
        _DAMAGED + r"sweep manifest: shard must be written i/n",
        True,
    ),
    (
        ["report", "sw-dtype", "--out", "r"],
        _DAMAGED + r"sweep baselines\.dtype must be one of .*; got 'float99'",
        True,
    ),
    (
        ["report", "sw-clean", "--out", "r"],
        _DAMAGED + r"sweep baselines\.clean must be a list; got 'abc'",
        True,
    ),
    (
        ["report", "sw-scope", "--out", "r"],
        r"is damaged: sweep baselines\.scope: missing field 'n_prompts'",
        True,
    ),
    (
        ["report", "sw-metric", "--out", "r"],
        _DAMAGED + r"sweep baselines\.metric must be a JSON object",
        True,
    ),
    (
        ["report", "sw-values", "--out", "r"],
        r"line 1 is damaged: unit u00000\.values\[0\]\[0\] must be a number; got 'a'",
        True,
    ),
    (
        ["report", "sw-kinds", "--out", "r"],
        r"unit u00000: 'kinds' holds 2 entries for 1 rows of values",
        True,
    ),
    (["report", "sw-rowlen", "--out", "r"], r"values for another number of prompts", True),
    (
        ["report", "sw-site", "--out", "r"],
        r"unit u00000\.sites\[0\]: unknown component 'nope'",
        True,
    ),
    (["report", "sw-garbage", "--out", "r"], r"line 1 is not a JSON record .* delete that", True),
    (["report", "sw-link", "--out", "r"], r"units\.jsonl' is a symbolic link", True),
    # a complete sweep missing a unit line or its baselines: a command that works
    (
        ["report", "sw-nounit", "--out", "r"],
        r"misses 1 of its 1 units \(first: \['u00000'\]\) although its manifest says the "
        r"sweep completed .*"
        r"`interv sweep CONFIG\.toml --out sw-nounit` with the same config: it computes only",
        True,
    ),
    (
        ["report", "sw-nobase", "--out", "r"],
        r"has its units but no baselines\.json although .*`interv sweep CONFIG\.toml --out",
        True,
    ),
    (["sweep-merge", "sw-nounit", "--out", "m"], r"do not cover the sweep: missing units", True),
    # TOML: string values where numbers belong in options; kind = ":X"
    (["sweep", "optstr.toml", "--out", "s"], r"option 'prefix_len' must be an integer", True),
    (["sweep", "seedstr.toml", "--out", "s"], r"task\.seed must be an integer; got '1'", True),
    (["sweep", "colon.toml", "--out", "s"], r"':X' is not an import path 'package\.module", True),
    (["sweep", "relative.toml", "--out", "s"], r"'\.\.x:Y' is not an import path", True),
    (["sweep", "spaces.toml", "--out", "s"], r"'a b:C' is not an import path", True),
    # code named by a config: not imported unless allowed
    (
        ["sweep", "evil.toml", "--out", "s"],
        rf"names module '{EVIL}', which is not imported; interv does not import code a config "
        rf"or a manifest names unless you allow it: pass --allow-import {EVIL}",
        True,
    ),
    # writes through links and forged markers
    (["demo", "--out", "linkedmarker"], r"\.interv-files\.json \(a symbolic link", True),
    (["demo", "--out", "nullhash"], r"report\.md \(listed without a hash", True),
    (["demo", "--out", "linkout"], r"report\.md \(a symbolic link\)", True),
    (["report", "saved", "--out", "nullhash"], r"listed without a hash", True),
    (["report", "linkreport"], r"report\.json' is a symbolic link; interv reads", True),
    (["pruning", "induction-2l", "--plot", "linkout/plot.png"], r"plot\.png' is a symbolic", True),
]


@pytest.mark.parametrize(
    ("argv", "pattern", "before_load"),
    [pytest.param(*case, id=" ".join(case[0])) for case in TRUST_CLI_CASES],
)
def test_trust_cli_case(argv, pattern, before_load, trust_workdir, model_loads, capsys):
    before = _snapshot(trust_workdir)
    try:
        status = main(argv)
    except SystemExit as exit_:
        status = exit_.code
    captured = capsys.readouterr()
    assert status == 2, captured.err
    assert "Traceback" not in captured.err
    error_lines = [line for line in captured.err.splitlines() if "error:" in line]
    assert any(re.search(pattern, line) for line in error_lines), captured.err
    assert _snapshot(trust_workdir) == before, "the failed command changed files"
    if before_load:
        assert model_loads == [], f"a model was loaded before the check: {model_loads}"


def _small_result() -> Any:
    from interv.sweeps import load_sweep

    return load_sweep("received")  # stored values only; its manifest's module is not imported


TRUST_PYTHON_CASES = {
    # wrong argument types
    "build_report of a string": (
        lambda d: interv.build_report("effects", None),
        r"effects must be an InterventionResult .* got str",
    ),
    "build_report of a list of ints": (
        lambda d: interv.build_report([1, 2], None),
        r"effects must all be InterventionResults; item 0 is a int",
    ),
    "build_report with concentration of the wrong type": (
        lambda d: interv.build_report(_small_result(), {"entropy": 1}),
        r"concentration must be a HeadConcentration .* got dict",
    ),
    "load_sweep of a number": (
        lambda d: interv.load_sweep(123),
        r"sweep directory must be a path \(a str or a pathlib\.Path\); got 123",
    ),
    "load_sweep of None": (lambda d: interv.load_sweep(None), r"must be a path .* got None"),
    "from_jsonl of a number": (
        lambda d: interv.PromptPairs.from_jsonl(7),
        r"task file must be a path .* got 7",
    ),
    "from_jsonl of None": (lambda d: interv.PromptPairs.from_jsonl(None), r"got None"),
    "load_config of a number": (
        lambda d: interv.sweeps.load_config(42),
        r"sweep config must be a path .* got 42",
    ),
    "save_report into a number": (
        lambda d: interv.save_report(_small_report(), 5),
        r"report file must be a path .* got 5",
    ),
    "to_jsonl to None": (
        lambda d: _pairs("A", "B").to_jsonl(None),
        r"task file must be a path .* got None",
    ),
    # task options and seeds of the wrong type
    "load_task with a string option": (
        lambda d: interv.load_task("induction", prefix_len="20"),
        r"task 'induction' option 'prefix_len' must be an integer; got '20'",
    ),
    "load_task with a float seed": (
        lambda d: interv.load_task("induction", seed=1.5),
        r"seed must be an integer; got 1\.5",
    ),
    # kinds named by import path
    "kind ':X'": (
        lambda d: interv.sweeps.parse_config(
            {**HAND_SWEEP, "sweep": {"interventions": [{"kind": ":X"}]}}
        ),
        r"':X' is not an import path 'package\.module:ClassName'",
    ),
    "a kind in a module nobody allowed": (
        lambda d: interv.sweeps.load_config("evil.toml"),
        rf"names module '{EVIL}', which is not imported",
    ),
    "a manifest that does not match its hash": (
        lambda d: _edited_manifest_merge(d),
        r"the stored config hashes to .* not to the stored hash .*: the manifest was edited",
    ),
    # the no-overwrite rule from Python
    "save_report over a user's report.md": (
        lambda d: interv.save_report(_small_report(), "mine"),
        r"'mine/report\.md' exists and interv did not write it",
    ),
    "Report.save over a null-hash marker's file": (
        lambda d: _small_report().save("nullhash"),
        r"'nullhash/report\.md' exists and interv did not write it",
    ),
    "save_report through a link": (
        lambda d: interv.save_report(_small_report(), "linkout", overwrite=True),
        r"'linkout/report\.md' is a symbolic link; interv never writes through a link",
    ),
    "save_report with a figure name that is a path": (
        lambda d: interv.save_report(_small_report(), "new", figures={"../../x": None}),
        r"figure name '\.\./\.\./x' must be a plain file stem",
    ),
    "to_jsonl over a user's file": (
        lambda d: _pairs("A", "B").to_jsonl("afile"),
        r"'afile' exists and interv did not write it",
    ),
    "zoo.train into a user's directory": (
        lambda d: interv.zoo.train("induction-2l", "mine", progress=False),
        r"'mine' holds files interv did not write \(report\.md\)",
    ),
}


def _small_report() -> Any:
    return interv.Report.from_dict(json.loads(_saved_report()))


def _edited_manifest_merge(directory: Path) -> Any:
    from interv.sweeps import merge_sweeps

    _edit_json(directory / "sw-status" / "manifest.json", _set(("status",), "complete"))
    _edit_json(directory / "sw-status" / "manifest.json", _set(("config", "sweep", "seed"), 9))
    return merge_sweeps(["sw-status"], "merged")


@pytest.mark.parametrize("name", list(TRUST_PYTHON_CASES))
def test_trust_python_case(name, trust_workdir, model_loads):
    call, pattern = TRUST_PYTHON_CASES[name]
    before = _snapshot(trust_workdir)
    with pytest.raises(IntervError, match=pattern):
        call(trust_workdir)
    if name != "a manifest that does not match its hash":  # that case edits the manifest
        assert _snapshot(trust_workdir) == before, "the failed call changed files"
    assert model_loads == [], f"a model was loaded: {model_loads}"


def test_a_toml_file_or_a_task_file_with_a_byte_order_mark_reads_like_one_without(trust_workdir):
    from interv.sweeps import load_config

    assert load_config("bom.toml") == load_config("ok.toml")
    assert interv.PromptPairs.from_jsonl("bom.jsonl").clean == ("A B C A",)


def test_a_received_sweep_is_read_as_data_and_imports_nothing_it_names(
    trust_workdir, capsys, monkeypatch
):
    """load_sweep, interv report, sweep-merge and a rerun never import the manifest's module
    (the fixture fails the test if it was imported). No PNG figures: seconds of drawing."""
    import interv.report.render as render
    from interv.sweeps import load_sweep

    monkeypatch.setattr(render, "standard_figures", lambda report: {})
    assert load_sweep("received").kinds == ("ZeroAblation",)
    assert main(["sweep-merge", "received", "--out", "merged"]) == 0
    assert main(["report", "received", "--out", "rendered"]) == 0  # loads the zoo model
    assert "L0H0" in (trust_workdir / "rendered" / "report.md").read_text()
    assert main(["sweep", "evil.toml", "--out", "received"]) == 2
    assert "which is not imported" in capsys.readouterr().err
    assert EVIL not in sys.modules


def test_allow_import_imports_the_named_module_and_says_so(trust_workdir, capsys):
    assert main(["sweep", "evil.toml", "--out", "s", "--allow-import", EVIL]) == 2
    err = capsys.readouterr().err
    assert f"interv: importing module '{EVIL}' (allowed by --allow-import)" in err
    assert f"{EVIL} has no 'Kind'" in err
    assert (trust_workdir / f"IMPORTED-{EVIL}").exists()
    (trust_workdir / f"IMPORTED-{EVIL}").unlink()  # imported because it was allowed


@pytest.mark.slow
def test_python_dash_m_interv_imports_nothing_from_the_working_directory(tmp_path):
    shadows = ("json", "typing", "argparse", "decimal", "tomllib", "pathlib", "dataclasses")
    for name in shadows:
        (tmp_path / f"{name}.py").write_text(f"open('SHADOWED-{name}', 'w').write('x')\n")
    done = subprocess.run(  # `metrics` imports torch too, and everything torch imports
        [sys.executable, "-m", "interv", "metrics", "0.5", "0.5"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert "normalized entropy" in done.stdout.lower()
    assert not list(tmp_path.glob("SHADOWED-*"))


@pytest.mark.slow
def test_a_demo_or_report_killed_while_writing_leaves_a_directory_the_rerun_repairs(
    trust_workdir, monkeypatch
):
    """A kill leaves at most an unlocked .interv-tmp-* that the next claim clears: the
    in-place report is killed for real in a subprocess. (The PNG figures are left out:
    seconds of drawing that this is not about.)"""
    import interv.report.render as render

    monkeypatch.setattr(render, "standard_figures", lambda report: {})
    assert main(["report", "saved", "--out", "out"]) == 0
    script = textwrap.dedent(
        """
        import os, signal, sys
        import interv._outputs as outputs
        import interv.report.render as render
        render.standard_figures = lambda report: {}
        real = outputs._write_all
        def killed(fd, data):  # half the first file written, then the process is killed
            real(fd, data[: len(data) // 2])
            os.kill(os.getpid(), signal.SIGKILL)
        outputs._write_all = killed
        from interv.cli import main
        sys.exit(main(["report", "out"]))
        """
    )
    done = subprocess.run([sys.executable, "-c", script], cwd=trust_workdir, check=False)
    assert done.returncode == -signal.SIGKILL
    left = [p.name for p in (trust_workdir / "out").iterdir() if p.name.startswith(".interv-tmp")]
    assert left, "the kill came before any temporary was written"
    assert main(["report", "out"]) == 0
    names = sorted(p.name for p in (trust_workdir / "out").iterdir())
    assert not [n for n in names if n.startswith(".interv-tmp")] and "report.html" in names
    assert _report_of(trust_workdir / "out") == _report_of(trust_workdir / "saved")


def _report_of(directory: Path) -> Any:
    return interv.Report.from_dict(json.loads((directory / "report.json").read_text()))


def test_a_full_disk_during_a_demo_explains_itself_and_leaves_nothing(trust_workdir, monkeypatch):
    import interv._outputs as outputs
    import interv.report.render as render
    from interv.demo import run_demo

    monkeypatch.setattr(render, "standard_figures", lambda report: {})  # seconds of drawing

    def full(fd, data):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(outputs, "_write_all", full)
    with pytest.raises(IntervError, match=r"cannot write .*disk is full: free some space and run"):
        run_demo(out="fulldisk", n_prompts=2, layers=[1], n_bootstrap=10, progress=False)
    assert not (trust_workdir / "fulldisk").exists()


def test_a_full_disk_during_a_sweep_stops_it_and_the_rerun_resumes(trust_workdir, monkeypatch):
    from interv.sweeps import load_sweep, run_sweep
    from interv.sweeps.store import SweepStore

    (trust_workdir / "two.toml").write_text(
        _sweep_config(task='name = "induction"\nn_pairs = 2', sweep="unit_size = 2")
    )
    append = SweepStore.append
    calls = []

    def full_on_the_second(self, record):
        calls.append(record["unit"])
        if len(calls) == 2:
            raise IntervError(
                outputs_failure(OSError(errno.ENOSPC, "No space left on device"), "units.jsonl")
            )
        append(self, record)

    monkeypatch.setattr(SweepStore, "append", full_on_the_second)
    with pytest.raises(IntervError, match=r"disk is full: .*a sweep resumes where it stopped"):
        run_sweep("two.toml", "full", progress=False)
    manifest = json.loads((trust_workdir / "full" / "manifest.json").read_text())
    assert manifest["status"] == "failed" and "disk is full" in manifest["error"]
    monkeypatch.setattr(SweepStore, "append", append)
    result = run_sweep("two.toml", "full", progress=False)
    assert result.n_interventions == 8 and load_sweep("full").n_interventions == 8


def outputs_failure(error: OSError, path: str) -> str:
    from interv._outputs import failure

    return str(failure(error, path))


def test_a_complete_sweep_missing_a_unit_or_its_baselines_is_completed_by_its_command(
    trust_workdir, capsys
):
    from interv.sweeps import load_sweep

    (trust_workdir / "four.toml").write_text(
        _sweep_config(task='name = "induction"\nn_pairs = 2', sweep="unit_size = 2")
    )
    assert main(["sweep", "four.toml", "--out", "done", "--quiet"]) == 0
    whole = load_sweep("done")
    units = trust_workdir / "done" / "units.jsonl"
    lines = units.read_text().splitlines(keepends=True)
    units.write_text("".join(lines[1:]))  # a unit line lost
    (trust_workdir / "done" / "baselines.json").unlink()  # and the baselines
    assert main(["report", "done", "--out", "r"]) == 2
    err = capsys.readouterr().err
    command = re.search(r"`(interv sweep CONFIG\.toml --out done)`", err)
    assert command, err
    argv = command[1].replace("CONFIG.toml", "four.toml").split()[1:]
    assert main([*argv, "--quiet"]) == 0  # the command the message names
    repaired = load_sweep("done")
    torch.testing.assert_close(repaired.values, whole.values, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(repaired.clean, whole.clean, atol=1e-5, rtol=1e-5)
    manifest = json.loads((trust_workdir / "done" / "manifest.json").read_text())
    assert manifest["status"] == "complete" and manifest["computed_in_last_run"] == 1


# =====================================================================================
# Values: what a number is computed from (issue 21, the checked-values half).
#
# Each example of the issue is a case below. A tokenized task knows its model's context,
# vocabulary and padding; positions and sinks are checked against the prompts they apply
# to (one helper, interv.engine.sites.check_prompt_positions); results carry the
# fingerprint of their prompts and every join compares it; statistics need a stated
# minimum of prompts (interv.stats.MIN_ITEMS). Property tests over every entry point that
# takes a sink or a position follow the table.
# =====================================================================================


def _ragged(model: Any, padding_side: str = "right") -> interv.TokenizedPairs:
    """Two pairs of 5 and 3 real tokens (BOS included) on the zoo model."""
    pairs = interv.PromptPairs(["A B C D", "A B"], ["A B C E", "A C"], ["D", "C"], ["E", "B"])
    return pairs.tokenize(model, padding_side=padding_side)


def _hand_task(model: Any, **changes: Any) -> interv.TokenizedPairs:
    """A hand-built task (no vocabulary or context known to it) of four unpadded pairs."""
    task = interv.load_task("induction", n_pairs=4).tokenize(model)
    fields = {
        "clean_tokens": task.clean_tokens,
        "corrupted_tokens": task.corrupted_tokens,
        "attention_mask": task.attention_mask,
        "answer_positions": task.answer_positions,
        "target_ids": task.target_ids,
        "foil_ids": task.foil_ids,
    }
    return interv.TokenizedPairs(**{**fields, **changes})


def _left_padded_mask(model: Any) -> torch.Tensor:
    task = interv.load_task("induction", n_pairs=4).tokenize(model)
    mask = torch.ones(task.clean_tokens.shape, dtype=torch.bool)
    mask[:, 0] = False
    return mask


def _beyond_vocabulary(model: Any) -> interv.TokenizedPairs:
    task = interv.load_task("induction", n_pairs=4).tokenize(model)
    tokens = task.clean_tokens.clone()
    tokens[1, 3] = 999
    return _hand_task(model, clean_tokens=tokens)


def _report_of_one_prompt(model: Any) -> Any:
    task = interv.load_task("induction", n_pairs=1).tokenize(model)
    heads = [interv.ZeroAblation(layer, head) for layer in range(2) for head in range(4)]
    result = interv.run(model, task, heads)
    return interv.build_report(result, interv.concentration(model, task), n_bootstrap=20)


def _report_with_a_duplicate(model: Any) -> Any:
    task = interv.load_task("induction", n_pairs=4).tokenize(model)
    heads = [interv.ZeroAblation(layer, head) for layer in range(2) for head in range(4)]
    result = interv.run(model, task, [*heads, interv.ZeroAblation(0, 0)])
    return interv.build_report(result, interv.concentration(model, task), n_bootstrap=20)


def _report_of_other_prompts(model: Any) -> Any:
    task = interv.load_task("induction", n_pairs=4, seed=0).tokenize(model)
    other = interv.load_task("induction", n_pairs=4, seed=1).tokenize(model)
    result = interv.run(model, task, [interv.ZeroAblation(0, 0)])
    return interv.build_report(result, interv.concentration(model, other), n_bootstrap=20)


def _results_of_other_prompts(model: Any) -> Any:
    first = interv.load_task("induction", n_pairs=4, seed=0).tokenize(model)
    second = interv.load_task("induction", n_pairs=4, seed=1).tokenize(model)
    one = interv.run(model, first, [interv.ZeroAblation(0, 0)])
    two = interv.run(model, second, [interv.ZeroAblation(0, 1)])
    return interv.build_report([one, two], interv.concentration(model, first), n_bootstrap=20)


_PADDING = r"is not a real token of 1 of 2 prompts \(1\): prompt 1's real tokens are at positions"
# (call(zoo_model), pattern, before_load)
VALUE_CASES = {
    "concentration of a prompt longer than the context": (
        lambda m: interv.concentration(m, " ".join(["A"] * 60)),
        r"prompt 0 has 61 tokens, longer than the model's context of n_ctx=48 tokens",
        False,
    ),
    "concentration of a token tensor longer than the context": (
        lambda m: interv.concentration(m, torch.arange(3, 5)[:, None].repeat(1, 50)),
        r"prompt 0 has 50 tokens, longer than the model's context of n_ctx=48",
        False,
    ),
    "a sink beyond the prompt (concentration)": (
        lambda m: interv.concentration(m, _ragged(m), sink=99),
        r"sink position 99 is not a real token of 2 of 2 prompts .* valid positions are 0\.\.2",
        False,
    ),
    "a sink beyond a shorter prompt (attention rows)": (
        lambda m: interv.analysis.attention_rows(m, _ragged(m), sink=4),
        r"sink position 4 is not a real token of 1 of 2 prompts \(1\)",
        False,
    ),
    "a sink beyond the prompt (attention view)": (
        lambda m: attention_view(m, _ragged(m), heads=["L0H0"], sink=7),
        r"sink position 7 is not a real token of 2 of 2 prompts",
        False,
    ),
    "a patch position that is padding in a right-padded prompt": (
        lambda m: interv.run(m, _ragged(m), interv.ActivationPatch("resid_pre", 0, positions=(4,))),
        r"ActivationPatch position 4 " + _PADDING + r" 0\.\.2 of the padded length 5",
        False,
    ),
    "a position that is padding in a left-padded prompt": (
        lambda m: interv.run(m, _ragged(m, "left"), interv.ZeroAblation(1, 2, positions=(1,))),
        r"ZeroAblation position 1 " + _PADDING + r" 2\.\.4 of the padded length 5",
        False,
    ),
    "a head beyond the model": (
        lambda m: interv.run(m, _ragged(m), interv.ZeroAblation(1, 9)),
        r"head 9 .* layer 1 has 4 heads",
        False,
    ),
    "target and foil: different texts, the same token": (
        lambda m: interv.PromptPairs(["A B"], ["A C"], ["k"], [" k"]).tokenize(m),
        r"pair 0: target 'k' and foil ' k' are different texts but the same token \(id 38\)",
        False,
    ),
    "target and foil the same id in a hand-built task": (
        lambda m: _hand_task(
            m, foil_ids=torch.tensor([5, 6, 7, 8]), target_ids=torch.tensor([5, 1, 1, 1])
        ),
        r"pair 0 has the same target and foil token \(id 5\)",
        True,
    ),
    "token ids beyond the vocabulary in a hand-built TokenizedPairs": (
        lambda m: interv.run(m, _beyond_vocabulary(m), interv.ZeroAblation(0, 0)),
        r"clean_tokens: token id 999 at index \(1, 3\) is not a token of the model; the "
        r"vocabulary has ids 0\.\.63",
        False,
    ),
    "a hand-built TokenizedPairs from lists": (
        lambda m: interv.TokenizedPairs([[0, 3]], [[0, 4]], [[True, True]], [1], [5]),
        r"clean_tokens must be a torch\.Tensor; got list",
        True,
    ),
    "a left-padded mask declared right-padded": (
        lambda m: _hand_task(m, attention_mask=_left_padded_mask(m)),
        r"attention_mask of pair 0 \(\[0, 1, 1, .*\) is not right-padded",
        True,
    ),
    "a negative token id": (
        lambda m: interv.concentration(m, torch.tensor([[0, -5, 3]])),
        r"tokens: token id -5 at index \(0, 1\) is not a token of the model",
        False,
    ),
    "a task tokenized for another vocabulary": (
        lambda m: interv.run(
            m,
            dataclasses.replace(interv.load_task("induction", n_pairs=2).tokenize(m), d_vocab=70),
            interv.ZeroAblation(0, 0),
        ),
        r"was tokenized for a model with a vocabulary of 70 ids, but this model has 64",
        False,
    ),
    "a duplicated intervention in a report": (
        _report_with_a_duplicate,
        r"rows 0 and 8 are the same intervention \(L0H0 output \(z\) set to zero",
        False,
    ),
    "build_report given concentration of other prompts": (
        _report_of_other_prompts,
        r"the effects and the concentration come from different prompts \(fingerprint",
        False,
    ),
    "a report joining results of other prompts": (
        _results_of_other_prompts,
        r"result 0 and result 1 come from different prompts",
        False,
    ),
    "capitals with more pairs than countries": (
        lambda m: interv.load_task("capitals", n_pairs=100),
        r"'capitals' has 33 countries, so at most 33 pairs .* n_pairs=100 would repeat",
        True,
    ),
    "the device 'banana'": (
        lambda m: interv.load_model("induction-2l", device="banana"),
        r"unknown device 'banana'; choose 'cpu', 'cuda', 'cuda:N' or 'mps'",
        True,
    ),
    "the device 'cuda' without CUDA": (
        lambda m: interv.load_model("induction-2l", device="cuda:3"),
        r"device 'cuda:3' (needs CUDA, but this torch has no usable CUDA|: this machine has)",
        True,
    ),
}


@pytest.mark.parametrize("name", list(VALUE_CASES))
def test_value_case(name, zoo_model, model_loads):
    call, pattern, before_load = VALUE_CASES[name]
    with pytest.raises(IntervError, match=pattern):
        call(zoo_model)
    if before_load:
        assert model_loads == [], f"a model was loaded before the check: {model_loads}"


def test_intervals_and_rank_correlations_of_one_prompt_are_na(zoo_model):
    """One prompt: no "95% CI [-0.14, -0.14]" and no rho -1 [-1, -1]."""
    from interv.stats import TOO_FEW, bootstrap_indices, bootstrap_mean_ci, spearman

    report = _report_of_one_prompt(zoo_model)
    assert all(math.isnan(r.effect_ci_low) and math.isnan(r.effect_ci_high) for r in report.rows)
    assert report.agreement and all(math.isnan(a.ci_low) for a in report.agreement)
    assert any("no interval from fewer than 3 prompts" in note for note in report.notes)
    assert math.isnan(
        bootstrap_mean_ci(torch.tensor([0.3, 0.5]), bootstrap_indices(2, 50, 0), 0.95)[0]
    )
    assert math.isnan(float(spearman(torch.tensor([1.0, 2.0]), torch.tensor([2.0, 1.0]))))
    assert "fewer than 3 prompts" in TOO_FEW


def test_similarity_cli_refuses_a_sink_beyond_the_prompts(tmp_path, monkeypatch, capsys):
    """`interv similarity --sink 99` no longer reports "0.0% of verdicts flip"."""
    monkeypatch.chdir(tmp_path)
    Path("zoo.txt").write_text("A B C D E F G H A B C\nK L M N O P Q K L M N\n")
    assert main(["similarity", "induction-2l", "--prompts", "zoo.txt", "--sink", "99"]) == 2
    err = capsys.readouterr().err
    assert "sink position 99 is not a real token of 2 of 2 prompts" in err and "flip" not in err
    Path("long.txt").write_text(" ".join(["A"] * 60) + "\n")
    assert main(["similarity", "induction-2l", "--prompts", "long.txt"]) == 2
    assert "longer than the model's context of n_ctx=48" in capsys.readouterr().err


def test_report_of_a_sweep_reads_its_task_next_to_it_and_checks_the_fingerprint(
    tmp_path, monkeypatch, capsys
):
    """The task path is looked up in the sweep directory (then the working directory), and a
    file with other pairs is refused instead of reported beside the stored effects."""
    import interv.report.render as render

    monkeypatch.setattr(render, "standard_figures", lambda report: {})
    pairs = interv.load_task("induction", n_pairs=3)
    (tmp_path / "cfg").mkdir()
    pairs.to_jsonl(tmp_path / "cfg" / "pairs.jsonl")
    (tmp_path / "cfg" / "s.toml").write_text(
        _sweep_config(task='path = "pairs.jsonl"', extra="sites = {layers = [0]}")
    )
    monkeypatch.chdir(tmp_path / "cfg")
    assert main(["sweep", "s.toml", "--out", "../sweep", "--quiet"]) == 0
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    assert main(["report", "../sweep", "--out", "r1"]) == 2
    assert "cannot find the task file the sweep in" in capsys.readouterr().err
    interv.load_task("induction", n_pairs=3, seed=5).to_jsonl(elsewhere / "pairs.jsonl")
    assert main(["report", "../sweep", "--out", "r2"]) == 2  # other pairs at the cwd path
    err = capsys.readouterr().err
    assert "(other pairs, fingerprint" in err and not (elsewhere / "r2").exists()
    pairs.to_jsonl(tmp_path / "sweep" / "pairs.jsonl")  # the task beside the sweep
    assert main(["report", "../sweep", "--out", "r3"]) == 0
    assert (elsewhere / "r3" / "report.md").is_file()


def _padded_task(lengths: list[int], side: str) -> interv.TokenizedPairs:
    """Zoo-vocabulary pairs of the given real lengths (BOS first), padded on ``side``."""
    width = max(lengths)
    generator = torch.Generator().manual_seed(sum(lengths) * 7 + len(lengths))
    clean = torch.randint(2, 64, (len(lengths), width), generator=generator)
    corrupted = torch.randint(2, 64, (len(lengths), width), generator=generator)
    real = torch.arange(width)[None, :] < torch.tensor(lengths)[:, None]
    mask = real if side == "right" else real.flip(1)
    first = mask.int().argmax(1)
    rows = torch.arange(len(lengths))
    clean[rows, first] = corrupted[rows, first] = 0  # <bos>
    answers = first + torch.tensor(lengths) - 1
    return interv.TokenizedPairs(
        clean_tokens=clean,
        corrupted_tokens=corrupted,
        attention_mask=mask,
        answer_positions=answers,
        target_ids=torch.full((len(lengths),), 5),
        foil_ids=torch.full((len(lengths),), 6),
        padding_side=side,
    )


_LENGTHS = st.lists(st.integers(min_value=4, max_value=9), min_size=1, max_size=3)
_SIDES = st.sampled_from(["right", "left"])
_SINK_ENTRY_POINTS = {
    "concentration": lambda m, task, sink: interv.concentration(m, task, sink=sink),
    "attention_rows": lambda m, task, sink: interv.analysis.attention_rows(m, task, sink=sink),
    "attention_view": lambda m, task, sink: attention_view(m, task, heads=["L1H0"], sink=sink),
}


@settings(max_examples=20, deadline=None)
@given(
    lengths=_LENGTHS,
    side=_SIDES,
    sink=st.integers(min_value=0, max_value=10),
    entry=st.sampled_from(sorted(_SINK_ENTRY_POINTS)),
)
def test_every_entry_point_taking_a_sink_refuses_exactly_the_sinks_beyond_a_prompt(
    zoo_model, lengths, side, sink, entry
):
    task = _padded_task(lengths, side)
    call = _SINK_ENTRY_POINTS[entry]
    if sink >= min(lengths):
        with pytest.raises(IntervError, match=rf"sink position {sink} is not a real token of"):
            call(zoo_model, task, sink)
    else:
        call(zoo_model, task, sink)


_POSITION_KINDS = {
    "ZeroAblation": lambda p: interv.ZeroAblation(0, 1, positions=(p,)),
    "MeanAblation": lambda p: interv.MeanAblation(1, 0, positions=(p,)),
    "ActivationPatch": lambda p: interv.ActivationPatch("resid_pre", 1, positions=(p,)),
    "AddVector": lambda p: interv.AddVector(0, torch.ones(64), positions=(p,)),
    "ValueScale": lambda p: interv.ValueScale(1, 2, (p,), factor=0.0),
}


@settings(max_examples=25, deadline=None)
@given(
    lengths=_LENGTHS,
    side=_SIDES,
    data=st.data(),
    kind=st.sampled_from(sorted(_POSITION_KINDS)),
)
def test_every_intervention_refuses_exactly_the_positions_that_are_padding_somewhere(
    zoo_model, lengths, side, data, kind
):
    task = _padded_task(lengths, side)
    position = data.draw(st.integers(min_value=0, max_value=task.n_positions - 1))
    intervention = _POSITION_KINDS[kind](position)
    if bool(task.attention_mask[:, position].all()):
        assert interv.run(zoo_model, task, intervention).values.shape == (1, len(lengths))
    else:
        with pytest.raises(IntervError, match=rf"{kind} (key )?position {position} is not a real"):
            interv.run(zoo_model, task, intervention)


def test_a_sweep_position_that_is_padding_somewhere_is_refused_before_any_unit(
    tmp_path, monkeypatch, capsys
):
    monkeypatch.chdir(tmp_path)
    config = _sweep_config(kind="zero_ablation", extra="positions = [25]")
    Path("pos.toml").write_text(config)
    assert main(["sweep", "pos.toml", "--out", "sw"]) == 2
    assert "ZeroAblation position 25 is not a real token of 2 of 4 prompts" in (
        capsys.readouterr().err
    )
    assert not Path("sw").exists()


def test_a_sweep_holding_one_intervention_twice_is_refused(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    twice = _sweep_config() + '[[sweep.interventions]]\nkind = "zero_ablation"\n'
    Path("twice.toml").write_text(twice + "sites = {layers = [1]}\n")
    assert main(["sweep", "twice.toml", "--out", "sw"]) == 2
    err = capsys.readouterr().err
    assert "sweep.interventions[0] and sweep.interventions[1] both hold 'L1H0 output" in err
    assert not Path("sw").exists()


@settings(max_examples=20, deadline=None)
@given(lengths=_LENGTHS, data=st.data())
def test_a_prompt_fingerprint_ignores_padding_and_sees_every_real_token(lengths, data):
    right = _padded_task(lengths, "right")
    width = right.n_positions
    left = torch.stack(
        [row.roll(width - n) for row, n in zip(right.clean_tokens, lengths, strict=True)]
    )
    left_mask = right.attention_mask.flip(1)
    fingerprint = interv.tasks.tokenized.prompts_fingerprint
    assert fingerprint(left, left_mask) == right.prompts_fingerprint
    row = data.draw(st.integers(min_value=0, max_value=len(lengths) - 1))
    changed = right.clean_tokens.clone()
    changed[row, lengths[row] - 1] = (changed[row, lengths[row] - 1] + 1 - 2) % 62 + 2
    assert fingerprint(changed, right.attention_mask) != right.prompts_fingerprint
    padded = right.clean_tokens.clone()
    padded[~right.attention_mask] = 1  # another pad id
    assert fingerprint(padded, right.attention_mask) == right.prompts_fingerprint


# =====================================================================================
# Own pairs on the command line (issue 24): --pairs FILE.jsonl in demo, paths,
# interactions and pruning; heads out of range; a prompt longer than the context. The
# rules of the table above hold (exit status 2, the message, nothing changed, before any
# model load where the file alone is at fault).
# =====================================================================================

_PAIR = {"clean": "A B C A", "corrupted": "D E F A", "target": "B", "foil": "C"}
_LONG = " ".join("ABCDEFGH"[i % 8] for i in range(60))


@pytest.fixture
def pairs_workdir(workdir):
    """The workdir with a pairs file without foils, one with a typo and one too long."""
    no_foil = {key: value for key, value in _PAIR.items() if key != "foil"}
    (workdir / "nofoil.jsonl").write_text(json.dumps(no_foil) + "\n")
    (workdir / "typo.jsonl").write_text(json.dumps({**_PAIR, "targte": "B"}) + "\n")
    long = {**_PAIR, "clean": _LONG, "corrupted": "Z" + _LONG[1:]}
    (workdir / "long.jsonl").write_text(json.dumps(_PAIR) + "\n" + json.dumps(long) + "\n")
    return workdir


_PATHS = ["paths", "induction-2l", "--sender", "L0H2"]
_HEADS = ["interactions", "induction-2l", "--heads", "L1H0", "L1H1"]
PAIRS_CLI_CASES = [
    (["demo", "--pairs", "missing.jsonl"], r"--pairs: task file 'missing\.jsonl' does not", True),
    (
        [*_PATHS, "--pairs", "badline.jsonl"],
        r"--pairs: badline\.jsonl, line 2: not valid JSON",
        True,
    ),
    ([*_HEADS, "--pairs", "notutf8.jsonl"], r"--pairs: .*'notutf8\.jsonl' is not UTF-8", True),
    (["pruning", "induction-2l", "--pairs", "typo.jsonl"], r"line 1: unknown key 'targte'", True),
    ([*_PATHS, "--pairs", "mine"], r"--pairs: .*'mine'", True),
    (
        [*_PATHS, "--pairs", "nofoil.jsonl"],
        r"nofoil\.jsonl: its lines have no 'foil', but metric 'logit_diff' needs one",
        True,
    ),
    (["demo", "--pairs", "nofoil.jsonl"], r"the pairs 'nofoil' have no foils", True),
    ([*_PATHS, "--pairs", "pairs.jsonl", "--n-pairs", "5"], r"holds only 1 pairs", True),
    (["demo", "--pairs", "pairs.jsonl", "--n-pairs", "4"], r"--n-pairs 4: .*only 1", True),
    (["demo", "--pairs", "pairs.jsonl", "--n-pairs", "0"], r"--n-pairs must be >= 1", True),
    (
        [*_PATHS, "--pairs", "pairs.jsonl", "--task", "ioi"],
        r"argument --task: not allowed with argument --pairs",
        True,
    ),
    # found only once the model is loaded: its context and its heads
    (
        [*_PATHS, "--pairs", "long.jsonl"],
        r"pair 1: prompt 'A B C .* has 61 tokens, longer than the model's context of n_ctx=48",
        False,
    ),
    (
        ["demo", "--pairs", "long.jsonl", "--out", "r"],
        r"pair 1: prompt 'A B C .* has 61 tokens, longer than the model's context of n_ctx=48",
        False,
    ),
    (
        ["paths", "induction-2l", "--pairs", "pairs.jsonl", "--sender", "L5H0"],
        r"layer 5 is out of range; the model has 2 layers \(valid layers 0\.\.1\)",
        False,
    ),
    (
        ["interactions", "induction-2l", "--pairs", "pairs.jsonl", "--heads", "L1H9", "L1H0"],
        r"head 9 is out of range; layer 1 has 4 heads \(valid heads 0\.\.3\)",
        False,
    ),
    (
        [*_PATHS, "--pairs", "pairs.jsonl", "--receivers", "L3H0"],
        r"layer 3 is out of range; the model has 2 layers",
        False,
    ),
    # interv grid: the same reads, its own options
    (["grid", "induction-2l", "--pairs", "missing.jsonl"], r"--pairs: task file 'missing", True),
    (["grid", "induction-2l", "--pairs", "nofoil.jsonl"], r"needs one; add a foil", True),
    (["grid", "induction-2l", "--component", "z"], r"argument --component: invalid choice", True),
    (["grid", "induction-2l", "--layers", "-1"], r"--layers must be .*got -1|--layers.*-1", True),
    (["grid", "induction-2l", "--out", "afile"], r"'afile' is an existing file", True),
    (
        ["grid", "induction-2l", "--pairs", "pairs.jsonl", "--prompt", "1"],
        r"prompt 1 is out of range; the task has 1 prompt pairs \(valid prompts 0\.\.0\)",
        True,
    ),
    (
        ["grid", "induction-2l", "--n-pairs", "4", "--prompt", "-1"],
        r"prompt -1 is out of range; the task has 4 prompt pairs",
        True,
    ),
    (["grid", "induction-2l", "--out", "mine"], r"'mine' holds files interv did not write", True),
    (
        ["grid", "induction-2l", "--pairs", "long.jsonl", "--out", "g"],
        r"pair 1: prompt 'A B C .* longer than the model's context of n_ctx=48",
        False,
    ),
    (
        ["grid", "induction-2l", "--pairs", "pairs.jsonl", "--layers", "2", "--out", "g"],
        r"layer 2 is out of range; the model has 2 layers \(valid layers 0\.\.1\)",
        False,
    ),
]


@pytest.mark.parametrize(
    ("argv", "pattern", "before_load"),
    [pytest.param(*case, id=" ".join(case[0])) for case in PAIRS_CLI_CASES],
)
def test_pairs_cli_case(argv, pattern, before_load, pairs_workdir, model_loads, capsys):
    before = _snapshot(pairs_workdir)
    try:
        status = main(argv)
    except SystemExit as exit_:
        status = exit_.code
    captured = capsys.readouterr()
    assert status == 2, captured.err
    assert "Traceback" not in captured.err
    error_lines = [line for line in captured.err.splitlines() if "error:" in line]
    assert any(re.search(pattern, line) for line in error_lines), captured.err
    assert _snapshot(pairs_workdir) == before, "the failed command changed files"
    if before_load:
        assert model_loads == [], f"a model was loaded before the check: {model_loads}"


def _small_report_for_heads() -> Any:
    from interv.engine.interventions import ZeroAblation
    from interv.report.table import build_report

    interventions = [ZeroAblation(0, h) for h in range(3)]
    result = make_result(
        torch.randn(3, 4, generator=torch.Generator().manual_seed(0)),
        torch.full((4,), 2.0),
        torch.zeros(4),
        ["ZeroAblation"] * 3,
        [iv.describe() for iv in interventions],
        sites=[iv.site for iv in interventions],
    )
    return build_report(
        result, make_concentration({"entropy": torch.rand(4, 1, 3)}), n_bootstrap=20
    )


PAIRS_PYTHON_CASES = {
    "head_grid layer out of range": (
        lambda r: r.head_grid({(1, 0): 1.0}),
        r"layer 1 is out of range; the report's model has 1 layers \(valid layers 0\.\.0\)",
    ),
    "head_grid head out of range": (
        lambda r: r.head_grid({(0, 3): 1.0}),
        r"head 3 is out of range; the report's layers have 3 heads \(valid heads 0\.\.2\)",
    ),
    "head_grid negative head": (lambda r: r.head_grid({(0, -1): 1.0}), r"head -1 is out of"),
    "effect_grid unknown kind": (
        lambda r: r.effect_grid("MeanAblation"),
        r"no rows of kind 'MeanAblation'; kinds: \('ZeroAblation',\)",
    ),
    "concentration_grid unknown metric": (
        lambda r: r.concentration_grid("entropie"),
        r"unknown concentration metric 'entropie'; choose one of \('entropy'",
    ),
    "largest_effects unknown kind": (
        lambda r: r.largest_effects(3, kind="Zero"),
        r"no rows of kind 'Zero'",
    ),
    "largest_effects negative n": (lambda r: r.largest_effects(-1), r"n must be >= 0; got -1"),
    "grid_interventions component": (
        lambda r: interv.demo.grid_interventions(2, 4, component="attn_out"),
        r"unknown grid component 'attn_out'; choose one of \('resid_pre', 'resid_post'\)",
    ),
    "grid_interventions layer": (
        lambda r: interv.demo.grid_interventions(2, 4, layers=[3]),
        r"layer 3 is out of range; the model has 2 layers",
    ),
    "run_demo pairs not PromptPairs": (
        lambda r: interv.demo.run_demo(pairs=["A B", "C D"], out="never"),
        r"pairs must be an interv\.PromptPairs .*; got list",
    ),
    "run_demo pairs and n_prompts": (
        lambda r: interv.demo.run_demo(
            pairs=interv.PromptPairs(["A B"], ["C B"], ["B"], ["C"]), n_prompts=2, out="never"
        ),
        r"n_prompts=2 counts the built-in task's pairs; with your own pairs every one of the 1",
    ),
    "run_demo pairs without foils": (
        lambda r: interv.demo.run_demo(
            pairs=interv.PromptPairs(["A B"], ["C B"], ["B"]), out="never"
        ),
        r"the demo scores logit_diff .* the pairs 'custom' have no foils",
    ),
}


@pytest.mark.parametrize("name", list(PAIRS_PYTHON_CASES))
def test_pairs_python_case(name, workdir, model_loads):
    import interv.demo  # noqa: F401  (the cases reach the demo module through the package)

    call, pattern = PAIRS_PYTHON_CASES[name]
    report = _small_report_for_heads()
    before = _snapshot(workdir)
    with pytest.raises(IntervError, match=pattern):
        call(report)
    assert _snapshot(workdir) == before, "the failed call changed files"
    assert model_loads == [], f"a model was loaded: {model_loads}"
