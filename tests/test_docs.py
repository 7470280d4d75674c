"""Every code block of every docs/ page is run, or checked and skipped with a stated reason.

- ``python`` blocks run, in page order, in one namespace per page; ``interv ...`` lines of
  ``bash``/``text``/``console`` blocks run in page order (``interv.cli.main``, status 0) in a
  scratch directory holding the repository's ``examples/``. Both are slow (models, demos,
  sweeps): :func:`test_docs_page_runs` is marked ``slow`` (and ``real_model`` where a page
  loads SmolLM2).
- The quick loop (:func:`test_every_docs_block_is_checked`) compiles every ``python``
  block, parses every ``interv`` line with no deprecation warning (the docs use the one
  vocabulary of docs/command-line.md), parses ``json`` and ``toml`` blocks, and checks that
  every other shell line is an install, a benchmark script that exists, or the site build.
- A block that cannot run in a test (hours of work, a GPU) is preceded by the comment
  ``<!-- docs-test: skip: REASON -->``; it is still compiled or parsed, and the reason is
  required.

A failure names the page and the line of the block or command (``docs/x.md:21``).
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
import shlex
import tomllib
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).parent.parent
DOCS = ROOT / "docs"
PAGES = sorted(DOCS.glob("*.md"))
_FENCE = re.compile(r"^```(\w*)\n(.*?)^```", flags=re.DOTALL | re.MULTILINE)
_MARK = re.compile(r"<!-- docs-test: skip: (?P<reason>[^>]*\S)\s*-->\s*$")
SHELL = {"bash", "text", "console", "sh", ""}
# shell lines that are not interv commands: installs, benchmark scripts, the site, linters
OTHER_LINES = re.compile(
    r"^(pip install|python -m pytest|python benchmarks/|OMP_NUM_THREADS=\d+ python benchmarks/"
    r"|mkdocs |ruff |lint-imports|git clone|cd )"
)


@dataclass(frozen=True)
class Block:
    page: Path
    line: int  # of the block's first code line
    language: str
    code: str
    skip: str | None  # the stated reason

    @property
    def where(self) -> str:
        return f"docs/{self.page.name}:{self.line}"


def blocks(page: Path) -> list[Block]:
    text = page.read_text(encoding="utf-8")
    found = []
    for match in _FENCE.finditer(text):
        before = text[: match.start()].rstrip("\n").rsplit("\n", 1)[-1]
        mark = _MARK.search(before)
        line = text[: match.start()].count("\n") + 2
        found.append(
            Block(page, line, match[1], match[2], mark["reason"] if mark is not None else None)
        )
    return found


def commands(block: Block) -> list[tuple[int, list[str]]]:
    """``(line, argv)`` of every ``interv ...`` line of a shell block, comments dropped."""
    out = []
    for offset, raw in enumerate(block.code.splitlines()):
        words = shlex.split(raw.removeprefix("$ "), comments=True)
        if words and words[0] == "interv":
            out.append((block.line + offset, words[1:]))
    return out


def _quietly(call):
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = call()
        except SystemExit as exit_:
            code = exit_.code
    return code, out.getvalue(), err.getvalue()


@pytest.mark.parametrize("page", PAGES, ids=lambda page: page.name)
def test_every_docs_block_is_checked(page):
    from interv.cli import build_parser

    for block in blocks(page):
        if block.language in ("python", "py"):
            compile(block.code, block.where, "exec")
        elif block.language == "json":
            for line in block.code.splitlines():
                json.loads(line)
        elif block.language == "toml":
            tomllib.loads(block.code)
        elif block.language in SHELL:
            for number, argv in commands(block):
                code, _, err = _quietly(lambda argv=argv: build_parser().parse_args(argv) and None)
                assert code is None, (
                    f"docs/{page.name}:{number}: `interv {shlex.join(argv)}`: {err}"
                )
                assert err == "", f"docs/{page.name}:{number}: old spelling: {err}"
            for offset, raw in enumerate(block.code.splitlines()):
                line = raw.split("  #", 1)[0].strip()
                if not line or line.startswith(("interv ", "#")):
                    continue
                where = f"docs/{page.name}:{block.line + offset}"
                assert OTHER_LINES.match(line), f"{where}: neither interv nor a known tool: {line}"
                script = re.search(r"python (benchmarks/\S+\.py)", line)
                assert script is None or (ROOT / script[1]).is_file(), f"{where}: {script[1]}"
        else:
            pytest.fail(f"{block.where}: a ```{block.language} block the docs test does not know")
    text = page.read_text(encoding="utf-8")
    assert text.count("<!-- docs-test: skip:") == sum(b.skip is not None for b in blocks(page)), (
        f"docs/{page.name}: a docs-test comment not right above a block"
    )


def _runnable(page: Path) -> list[Block]:
    return [
        b
        for b in blocks(page)
        if b.skip is None
        and (b.language in ("python", "py") or (b.language in SHELL and commands(b)))
    ]


def _params():
    for page in PAGES:
        runnable = _runnable(page)
        if runnable:
            real = any("smollm2" in block.code for block in runnable)
            marks = [pytest.mark.slow, *([pytest.mark.real_model] if real else [])]
            yield pytest.param(page, marks=marks, id=page.name)


@pytest.mark.parametrize("page", list(_params()))
def test_docs_page_runs(page, tmp_path, monkeypatch):
    """The page's python blocks and interv commands, in order, as a reader would run them."""
    from interv.cli import main

    (tmp_path / "examples").symlink_to(ROOT / "examples")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    namespace: dict = {"__name__": "__docs__"}
    for block in _runnable(page):
        if block.language in ("python", "py"):
            try:
                exec(compile(block.code, block.where, "exec"), namespace)
            except Exception as error:
                pytest.fail(f"{block.where}: the block fails: {type(error).__name__}: {error}")
            continue
        for number, argv in commands(block):
            code, _, err = _quietly(lambda argv=argv: main(argv))
            assert code == 0, (
                f"docs/{page.name}:{number}: `interv {shlex.join(argv)}` exited {code}:\n"
                f"{err[-2000:]}"
            )
    assert os.getcwd() == str(tmp_path)
