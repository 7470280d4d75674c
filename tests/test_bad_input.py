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

import hashlib
import json
import math
import os
import re
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
from _report_fixtures import make_concentration, make_result

import interv
from interv import metrics
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

    monkeypatch.setattr(
        interv.models.loading, "load_model", counting(interv.models.loading.load_model)
    )
    monkeypatch.setattr(interv.models, "load_model", counting(interv.models.load_model))
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
    (["demo", "--n-prompts", "0"], r"n_prompts must be >= 1; got 0", True),
    (["demo", "--n-prompts", "-3"], r"n_prompts must be >= 1; got -3", True),
    (["demo", "--n-prompts", "two"], r"--n-prompts: invalid int value: 'two'", True),
    (["demo", "--layers", "2"], r"layers \[2\] do not exist; induction-2l has 2 layers", True),
    (
        ["demo", "--layers", "-1"],
        r"layers must be >= 0 \(absolute positions\); got -1 in \(-1,\)",
        True,
    ),
    (["demo", "--layers", "1", "1"], r"layers must not repeat a position; got \[1, 1\]", True),
    (["demo", "--model", "gpt2"], r"invalid choice: 'gpt2' \(choose from", True),
    # interv report: what the directory holds
    (["report", "nosuch"], r"directory 'nosuch' does not exist", True),
    (["report", "afile"], r"'afile' is a file; expected a directory written by", True),
    (["report", "emptydir-for-report"], r"holds neither a saved report .* nor a sweep", True),
    (["report", "truncated"], r"report\.json' is not valid JSON .* cut short", True),
    (["report", "latin1"], r"report\.json' is not UTF-8 text: byte 0xe9", True),
    (["report", "notareport"], r"not a saved interv report: expected a JSON object", True),
    (["report", "incomplete"], r"manifest\.json' is incomplete: it lacks \['config'", True),
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
    (["pruning", "induction-2l", "--metric", "acc"], r"unknown --metric 'acc'; choose", True),
    (["pruning", "induction-2l", "--rankings", "size"], r"unknown rankings \['size'\]", True),
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
    (["entropy-change", "--zoo", "nosuch", "--from", "0"], r"unknown zoo model 'nosuch'", True),
    (
        ["entropy-change", "--zoo", "induction-2l", "--from", "7"],
        r"--from 7: .* no checkpoint at that step; shipped steps: 0, ",
        True,
    ),
    (
        ["entropy-change", "--zoo", "induction-2l", "--from", "0", "--n-sequences", "0"],
        r"--n-sequences must be >= 1",
        True,
    ),
    (["paths", "nosuch", "--sender", "0", "2"], r"unknown model spec 'nosuch'; valid specs", True),
    (["paths", "induction-2l", "--sender", "0", "2", "--metric", "acc"], r"--metric 'acc'", True),
    (["paths", "induction-2l", "--sender", "0", "2", "--n-pairs", "0"], r"--n-pairs must", True),
    (["paths", "induction-2l", "--sender", "0", "2", "--top", "0"], r"--top must be >= 1", True),
    (
        ["paths", "induction-2l", "--sender", "0", "2", "--receivers", "X1"],
        r"a head is written L1H3 or 1:3 \(layer, head\); got 'X1'",
        True,
    ),
    (
        ["paths", "induction-2l", "--sender", "5", "0"],
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
