"""One command-line vocabulary (issue 40): every command spells one concept one way, the
reference table of docs/command-line.md is the parsers', and old spellings still work
for one release with one deprecation line."""

from __future__ import annotations

import argparse
import collections
import contextlib
import io
from pathlib import Path

import pytest

from interv.cli import build_parser, main
from interv.cli._reference import BEGIN, END, command_table, commands
from interv.cli._vocabulary import ALPHA_DEFAULT, METRICS

PAGE = Path(__file__).parent.parent / "docs" / "command-line.md"

# commands that load a model: the model is their first positional argument, named "model"
MODEL_COMMANDS = {
    "demo",
    "similarity",
    "entropy-change",
    "pruning",
    "paths",
    "interactions",
    "grid",
    "circuit",
}
# option -> its closed set of values, listed by argparse wherever the option exists
CLOSED = ("--method", "--metric", "--convention", "--complement", "--component", "--unit")
# metavars that name a kind of value rather than one option (a path, a head)
VALUE_KINDS = {"DIR", "FILE.jsonl", "FILE.png", "HEAD", "MODULE"}
# old spellings (only as hidden, deprecated aliases)
OLD = {"--n-prompts", "--verify-top", "--zoo", "--model"}


def _parsers() -> dict[str, argparse.ArgumentParser]:
    return dict(commands(build_parser()))


def _options(parser: argparse.ArgumentParser) -> dict[str, argparse.Action]:
    return {
        option: action
        for action in parser._actions
        if action.help != argparse.SUPPRESS
        for option in action.option_strings
    }


def test_the_reference_table_is_the_parsers():
    text = PAGE.read_text(encoding="utf-8")
    stored = text.split(BEGIN, 1)[1].split(END, 1)[0].strip()
    assert stored == command_table(), (
        "docs/command-line.md's table is stale: run `python -m interv.cli._reference`"
    )
    for name in _parsers():
        assert f"| `interv {name}` |" in stored, name


def test_one_option_means_one_thing_on_every_command():
    seen: dict[str, list[tuple[str, argparse.Action]]] = collections.defaultdict(list)
    for name, parser in _parsers().items():
        for option, action in _options(parser).items():
            seen[option].append((name, action))
    for option, uses in seen.items():
        shapes = {(a.metavar, a.nargs, a.type, a.dest, type(a).__name__) for _, a in uses}
        assert len(shapes) == 1, f"{option} is spelled differently: {uses}"
    # one metavar, one option (besides kinds of value: a directory, a file, a head)
    owners = collections.defaultdict(set)
    for option, uses in seen.items():
        for _, action in uses:
            if action.metavar is not None and action.nargs != 0:
                owners[action.metavar].add(option)
    for metavar, options in owners.items():
        assert metavar in VALUE_KINDS or len(options) == 1, f"metavar {metavar}: {options}"


def test_a_concept_has_one_spelling():
    parsers = _parsers()
    for name, parser in parsers.items():
        options = _options(parser)
        assert not OLD & set(options), f"{name} shows an old spelling: {OLD & set(options)}"
        # the pair count, the verified top
        assert "--n-prompts" not in options and "--verify-top" not in options
        if any(o in options for o in ("--task", "--pairs")):
            assert "--n-pairs" in options, name
        # the model is the first positional argument
        positionals = [a for a in parser._actions if not a.option_strings]
        if name in MODEL_COMMANDS:
            assert positionals and positionals[0].dest == "model", name
        # --quiet exactly where a directory is written
        assert ("--quiet" in options) == ("--out" in options), name
        for option in CLOSED:
            if option in options:
                assert options[option].choices, f"{name} {option} lists no values"
        # a head is one word: L1H0
        for option in ("--sender", "--heads", "--receivers"):
            if option in options:
                assert options[option].metavar == "HEAD", (name, option)
    # the screen: one default for the verified top, the audit and alpha (interv.Screen's)
    from interv.audit import Screen

    assert Screen().alpha == ALPHA_DEFAULT
    circuit = _options(parsers["circuit"])
    assert circuit["--alpha"].default == Screen().alpha
    assert (circuit["--top-k"].default, circuit["--audit"].default) == (20, 60)
    assert (Screen().top_k, Screen().audit) == (20, 60)
    sweep = _options(parsers["sweep"])
    for option in ("--top-k", "--audit", "--alpha"):
        assert sweep[option].help == circuit[option].help or "default" in sweep[option].help


def test_listed_values_are_the_librarys():
    from interv.analysis.pruning import RANKINGS
    from interv.cli.analysis import RANKING_NAMES
    from interv.engine.targets import METRICS as LIBRARY_METRICS

    assert tuple(LIBRARY_METRICS) == METRICS
    assert tuple(RANKINGS) == RANKING_NAMES


def test_rendered_help_has_no_escapes_and_errors_have_one_prefix(capsys):
    for name in ("", *_parsers()):
        with pytest.raises(SystemExit):
            main([*name.split(), "--help"])
        out = capsys.readouterr().out
        assert "%%" not in out and "%(" not in out, name
    with pytest.raises(SystemExit) as exit:
        main(["circuit", "induction-2l", "--method", "foo", "--out", "x"])
    assert exit.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("interv: error: circuit: argument --method: invalid choice: 'foo'")
    assert err.count("\n") == 1 and "eap-ig" in err


@pytest.mark.parametrize(
    ("old", "new", "said"),
    [
        (["demo", "--n-prompts", "0"], ["demo", "--n-pairs", "0"], "--n-prompts is deprecated"),
        (["demo", "--model", "nosuch"], None, "--model is deprecated"),
        (
            ["entropy-change", "--zoo", "nosuch", "--from", "0"],
            ["entropy-change", "nosuch", "--from", "0"],
            "--zoo is deprecated",
        ),
        (
            ["paths", "induction-2l", "--sender", "0", "2", "--top", "0"],
            ["paths", "induction-2l", "--sender", "L0H2", "--top", "0"],
            "write --sender L0H2",
        ),
        (
            ["interactions", "induction-2l", "--heads", "1:0", "L1H2", "--n-pairs", "0"],
            ["interactions", "induction-2l", "--heads", "L1H0", "L1H2", "--n-pairs", "0"],
            "write L1H0",
        ),
        (
            ["circuit", "induction-2l", "--verify-top", "0", "--out", "c"],
            ["circuit", "induction-2l", "--top-k", "0", "--out", "c"],
            "--verify-top is deprecated; write --top-k",
        ),
    ],
    ids=["n-prompts", "demo-model", "zoo", "sender", "head-colon", "verify-top"],
)
def test_old_spellings_work_for_one_release_with_one_line(old, new, said, tmp_path, monkeypatch):
    """Each old spelling reaches the same check as the new one (a bad value, so no model
    loads), with one warning line naming the new spelling; the new one has no warning."""
    monkeypatch.chdir(tmp_path)

    def run(argv):
        err = io.StringIO()
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
            code = main(argv)
        return code, err.getvalue().splitlines()

    code, lines = run(old)
    assert code == 2 and len(lines) == 2, lines
    assert lines[0].startswith("interv: warning: ") and said in lines[0]
    assert "until the next release" in lines[0] and lines[1].startswith("interv: error: ")
    if new is not None:
        new_code, new_lines = run(new)
        assert new_code == 2 and new_lines == lines[1:]
    assert list(tmp_path.iterdir()) == []
