"""interv._outputs: a run writes only where nobody else's files are, through one primitive
that never follows a link, and cleans up after a failure or a kill.

The property tests at the end plant links, user files and directories at every name each
writer of interv would write (its outputs, the marker, the fixed temporary names of
earlier versions and the random temporary name the primitive tries first) and check that
no link is ever followed and no user file replaced.
"""

from __future__ import annotations

import contextlib
import csv
import dataclasses
import errno
import fcntl
import hashlib
import io
import json
import os
import signal
import subprocess
import sys
import tempfile
import textwrap
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch
from _report_fixtures import make_concentration, make_result
from hypothesis import given, settings
from hypothesis import strategies as st
from markdown_it import MarkdownIt

import interv
import interv._outputs as outputs
import interv.report.render as render
from interv._outputs import (
    MARKER,
    SCRATCH_PREFIX,
    claim_dir,
    claim_file,
    fresh_dir,
    lock_file,
    write_file,
)
from interv.analysis.concentration import METRICS
from interv.engine.interventions import ZeroAblation
from interv.errors import IntervError
from interv.report.render import save_report, write_report
from interv.report.table import build_report
from interv.sweeps.config import parse_config
from interv.sweeps.store import SweepStore

PLANTED = "fedcba9876543210"  # the random part of the first temporary name, when forced


def test_a_new_directory_is_created_and_its_files_listed_with_their_hashes(tmp_path):
    with claim_dir(tmp_path / "a" / "b", by="test") as output:
        output.write_text("report.md", "hello\n")
    listed = json.loads((tmp_path / "a" / "b" / MARKER).read_text())["files"]
    assert set(listed) == {"report.md"} and listed["report.md"]["by"] == "test"
    assert listed["report.md"]["sha256"] == hashlib.sha256(b"hello\n").hexdigest()
    # a second run may rewrite its own, unchanged files
    with claim_dir(tmp_path / "a" / "b") as output:
        output.write_text("report.md", "hello again\n")
    assert (tmp_path / "a" / "b" / "report.md").read_text() == "hello again\n"


def test_someone_elses_file_or_an_edited_one_is_never_overwritten(tmp_path):
    (tmp_path / "notes.txt").write_text("mine")
    with pytest.raises(IntervError, match=r"holds files interv did not write \(notes\.txt\)"):
        claim_dir(tmp_path)
    ours = tmp_path / "ours"
    with claim_dir(ours) as output:
        output.write_text("report.md", "interv's\n")
    (ours / "report.md").write_text("interv's\nand my edit\n")
    with pytest.raises(IntervError, match=r"report\.md \(changed since interv wrote it\)"):
        claim_dir(ours)
    assert (ours / "report.md").read_text() == "interv's\nand my edit\n"


def test_a_file_a_path_below_a_file_and_an_unwritable_place_are_refused(tmp_path):
    (tmp_path / "file").write_text("x")
    with pytest.raises(IntervError, match="is an existing file"):
        claim_dir(tmp_path / "file")
    with pytest.raises(IntervError, match=r"cannot be created: .*/file' is a file"):
        claim_dir(tmp_path / "file" / "sub")
    with pytest.raises(IntervError, match="cannot create"):
        claim_dir("/proc/interv-cannot-be-here")


def test_a_failed_run_removes_what_it_created_and_keeps_what_was_there(tmp_path):
    target = tmp_path / "new" / "out"
    with pytest.raises(RuntimeError), claim_dir(target) as output:
        output.write_text("report.md", "half")
        raise RuntimeError("the run failed")
    assert not (tmp_path / "new").exists()
    kept = tmp_path / "kept"
    with claim_dir(kept) as output:
        output.write_text("old.md", "from an earlier run")
    with pytest.raises(RuntimeError), claim_dir(kept) as output:
        output.write_text("new.md", "half")
        raise RuntimeError("the run failed")
    assert sorted(p.name for p in kept.iterdir()) == [MARKER, "old.md"]
    assert set(json.loads((kept / MARKER).read_text())["files"]) == {"old.md"}


def test_staged_files_appear_only_when_the_writer_succeeds(tmp_path):
    with claim_dir(tmp_path / "out") as output:
        with pytest.raises(RuntimeError), output.staging() as folder:
            (folder / "partial.json").write_text("{")
            raise RuntimeError("writer failed")
        assert sorted(p.name for p in (tmp_path / "out").iterdir()) == []
        with output.staging() as folder:
            (folder / "report.json").write_text("{}")
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == [MARKER, "report.json"]


def test_a_plot_file_is_written_once_and_then_only_over_itself(tmp_path):
    path = tmp_path / "plot.png"
    with claim_file(path) as output:
        output.write_bytes(path.name, b"png")
    with claim_file(path) as output:  # interv's own, unchanged: may be rewritten
        output.write_bytes(path.name, b"png 2")
    (tmp_path / "theirs.png").write_bytes(b"theirs")
    with pytest.raises(IntervError, match="exists and interv did not write it"):
        claim_file(tmp_path / "theirs.png")


def test_a_default_directory_with_someone_elses_files_moves_to_a_fresh_name(tmp_path):
    base = tmp_path / "interv-report"
    base.mkdir()
    (base / "mine.txt").write_text("x")
    (tmp_path / "interv-report-2").mkdir()
    (tmp_path / "interv-report-2" / "mine.txt").write_text("x")
    assert fresh_dir(base).path == tmp_path / "interv-report-3"


# ---- the primitive: exclusive temporaries, publish without replacing, clear failures ----


@contextlib.contextmanager
def forced_first_temporary():
    """Make every temporary name the primitive tries first ``.interv-tmp-<PLANTED>`` (then
    random ones), so a test can plant a link exactly where it will look."""
    real = outputs.secrets.token_hex
    calls = iter(range(1 << 30))

    def token_hex(n: int) -> str:
        return PLANTED if next(calls) % 2 == 0 else real(n)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(outputs.secrets, "token_hex", token_hex)
        yield


def test_the_temporary_is_created_exclusively_and_a_link_at_its_name_is_never_opened(tmp_path):
    victim = tmp_path / "victim.txt"
    victim.write_text("the user's data\n")
    out = tmp_path / "out"
    out.mkdir()
    (out / f"{SCRATCH_PREFIX}{PLANTED}").symlink_to(victim)
    with forced_first_temporary():
        write_file(out / "report.md", b"interv's report\n")
    assert victim.read_text() == "the user's data\n"
    assert (out / f"{SCRATCH_PREFIX}{PLANTED}").is_symlink()
    assert (out / "report.md").read_bytes() == b"interv's report\n"
    assert not (out / "report.md").is_symlink()
    assert sorted(p.name for p in out.iterdir()) == [f"{SCRATCH_PREFIX}{PLANTED}", "report.md"]


def test_a_new_name_is_never_replaced_and_a_replace_swaps_the_entry_not_the_links_target(
    tmp_path,
):
    (tmp_path / "appeared.txt").write_text("someone else's")
    with pytest.raises(IntervError, match="appeared while interv was writing it"):
        write_file(tmp_path / "appeared.txt", b"interv's")
    assert (tmp_path / "appeared.txt").read_text() == "someone else's"
    victim = tmp_path / "victim.txt"
    victim.write_text("kept")
    (tmp_path / "link").symlink_to(victim)
    with pytest.raises(IntervError, match="appeared while"):
        write_file(tmp_path / "link", b"x")  # a new name: a link there is left alone
    write_file(tmp_path / "link", b"interv's", replace=True)  # the entry is replaced
    assert victim.read_text() == "kept" and not (tmp_path / "link").is_symlink()
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(SCRATCH_PREFIX)]


def test_without_hard_links_the_primitive_renames_after_a_check(tmp_path, monkeypatch):
    def no_links(*args, **kwargs):
        raise OSError(errno.EPERM, "Operation not permitted")

    monkeypatch.setattr(outputs.os, "link", no_links)
    write_file(tmp_path / "new.txt", b"written")
    assert (tmp_path / "new.txt").read_bytes() == b"written"
    with pytest.raises(IntervError, match="appeared while"):
        write_file(tmp_path / "new.txt", b"again")
    assert (tmp_path / "new.txt").read_bytes() == b"written"


def test_a_full_disk_names_the_file_says_what_to_do_and_leaves_nothing(tmp_path, monkeypatch):
    def full(fd, data):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(outputs, "_write_all", full)
    with pytest.raises(IntervError, match=r"cannot write .*report\.md'.*disk is full: free"):
        write_file(tmp_path / "report.md", b"x" * 100)
    assert list(tmp_path.iterdir()) == []


def test_written_files_follow_the_umask_not_mkstemps_0600(tmp_path):
    previous = os.umask(0o022)
    try:
        write_file(tmp_path / "shared.md", b"x")
    finally:
        os.umask(previous)
    assert (tmp_path / "shared.md").stat().st_mode & 0o777 == 0o644


# ---- markers: the hash is the proof ----


def test_a_marker_entry_with_a_null_or_malformed_hash_proves_nothing(tmp_path):
    for digest in (None, "", "0" * 63, "not a hash", 42):
        folder = tmp_path / f"d{digest!s:.6}"
        folder.mkdir()
        (folder / "report.md").write_text("the user's notes")
        marker = {"format": "interv-files/1", "files": {"report.md": {"sha256": digest}}}
        (folder / MARKER).write_text(json.dumps(marker))
        with pytest.raises(IntervError, match=r"report\.md \(listed without a hash"):
            claim_dir(folder)
        with pytest.raises(IntervError, match="exists and interv did not write it"):
            claim_file(folder / "report.md")
        with pytest.MonkeyPatch.context() as patch, pytest.raises(IntervError, match="did not"):
            patch.setattr(render, "report_files", _rendered_once)
            save_report(REPORT, folder)
        assert (folder / "report.md").read_text() == "the user's notes"


def test_a_marker_that_is_a_link_or_someone_elses_file_is_refused_and_kept(tmp_path):
    victim = tmp_path / "victim.json"
    victim.write_text('{"format": "interv-files/1", "files": {}}')
    linked = tmp_path / "linked"
    linked.mkdir()
    (linked / MARKER).symlink_to(victim)
    theirs = tmp_path / "theirs"
    theirs.mkdir()
    (theirs / MARKER).write_text('{"my": "own json"}')
    for folder in (linked, theirs):
        with pytest.raises(IntervError, match=r"\.interv-files\.json \("):
            claim_dir(folder)
        with pytest.raises(IntervError, match=r"\.interv-files\.json \("):
            claim_file(folder / "plot.png")
    assert (linked / MARKER).is_symlink()
    assert victim.read_text() == '{"format": "interv-files/1", "files": {}}'
    assert (theirs / MARKER).read_text() == '{"my": "own json"}'


# ---- scratch left by a kill: the next claim clears it, a live writer's stays ----


def test_a_killed_writers_scratch_is_cleared_by_the_next_claim_and_a_live_ones_kept(tmp_path):
    out = tmp_path / "out"
    with claim_dir(out) as output:
        output.write_text("report.md", "done")
    script = textwrap.dedent(
        f"""
        import os, signal
        from pathlib import Path
        from interv._outputs import _create_exclusive
        fd, path = _create_exclusive(Path({str(out)!r}))
        os.write(fd, b"half a report")
        os.kill(os.getpid(), signal.SIGKILL)
        """
    )
    done = subprocess.run([sys.executable, "-c", script], check=False)
    assert done.returncode == -signal.SIGKILL
    left = sorted(p.name for p in out.iterdir() if p.name.startswith("."))
    assert len(left) == 2  # the marker, the killed temporary
    live = out / f"{SCRATCH_PREFIX}0123456789abcdef"
    handle = live.open("wb")
    fcntl.flock(handle, fcntl.LOCK_EX)  # a writer still at work holds its lock
    try:
        with claim_dir(out) as output:  # neither blocks the claim
            output.write_text("report.md", "again")
        assert sorted(p.name for p in out.iterdir()) == sorted([live.name, MARKER, "report.md"])
    finally:
        handle.close()
    claim_dir(out)
    assert sorted(p.name for p in out.iterdir()) == [MARKER, "report.md"]


# ---- every writer of interv, with links and files planted at every name it writes ----


def _tiny_report():
    generator = torch.Generator().manual_seed(0)
    ivs = [ZeroAblation(0, 0), ZeroAblation(0, 1), ZeroAblation(1, 0)]
    result = make_result(
        torch.randn(3, 4, generator=generator),
        torch.randn(4, generator=generator) + 3,
        torch.randn(4, generator=generator),
        ["ZeroAblation"] * 3,
        [iv.describe() for iv in ivs],
        sites=[iv.site for iv in ivs],
    )
    per_prompt = {name: torch.rand(4, 2, 2, generator=generator) for name in METRICS}
    return build_report(result, make_concentration(per_prompt), n_bootstrap=20)


REPORT = _tiny_report()
_RENDERED: dict[str, tuple[str, bytes]] = {}


def _rendered_once(report, figures=None):
    """report_files, rendered once (the figures take seconds; the tests are about writing)."""
    if not _RENDERED:
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(render, "standard_figures", lambda report: {})
            _RENDERED.update(render_report_files(report, figures))
    return dict(_RENDERED)


render_report_files = render.report_files

RAW = {
    "model": {"spec": "induction-2l"},
    "task": {"name": "induction"},
    "sweep": {"interventions": [{"kind": "zero_ablation"}]},
}
CONFIG = parse_config(RAW)
BASELINES = {
    "config_hash": CONFIG.config_hash,
    "clean": [1.0],
    "corrupted": [0.0],
    "dtype": "float32",
    "recovery_atol": 1e-6,
    "metric": {"name": "logit_diff", "unit": "logits", "definition": "d"},
    "scope": {
        "model_name": "m",
        "task_name": "t",
        "n_prompts": 1,
        "n_positions": 3,
        "answer_positions": [2],
        "padding_side": "right",
    },
}
UNIT = {
    "unit": "u00000",
    "config_hash": CONFIG.config_hash,
    "start": 0,
    "kinds": ["ZeroAblation"],
    "descriptions": ["d"],
    "base_runs": ["clean"],
    "values": [[0.5]],
}


def _sweep(directory: Path) -> None:
    with SweepStore.open(directory, CONFIG, None, "0123456789abcdef") as store:
        store.write_baselines(BASELINES)
        store.append(UNIT)
        store.record_plan(1, 1)
        store.finish()


def _staged(directory: Path) -> None:
    with claim_dir(directory) as output, output.staging() as folder:
        (folder / "model.safetensors").write_bytes(b"weights")
        (folder / "card.json").write_text("{}")


def _claimed_report(directory: Path) -> None:
    with claim_dir(directory, by="interv demo") as output:
        write_report(REPORT, output)


def _plot(directory: Path) -> None:
    with claim_file(directory / "plot.png", by="interv pruning") as output:
        output.write_bytes("plot.png", b"\x89PNG")


def _cache_lock(directory: Path) -> None:
    with lock_file(directory / ".smollm2-135m.lock", what="the cache entry", wait=True):
        pass


@dataclass(frozen=True)
class Writer:
    """One of interv's writers: the names it writes, and whether it tolerates other
    entries beside them (a claimed file) or claims the whole directory."""

    write: Callable[[Path], object]
    names: tuple[str, ...]
    neighbours_ok: bool
    replaces_files: bool = False  # overwrite=True: the user asked to replace files


REPORT_NAMES = ("report.md", "report.html", "report.json", "report.csv")
PAIRS = interv.PromptPairs(clean=["A B C A"], corrupted=["D E F A"], targets=["B"], foils=["C"])


def _writers(viewer) -> dict[str, Writer]:
    return {
        "save_report": Writer(lambda d: save_report(REPORT, d), REPORT_NAMES, True),
        "Report.save(overwrite=True)": Writer(
            lambda d: REPORT.save(d, overwrite=True), REPORT_NAMES, True, replaces_files=True
        ),
        "interv demo / interv report (write_report)": Writer(_claimed_report, REPORT_NAMES, False),
        "PromptPairs.to_jsonl": Writer(lambda d: PAIRS.to_jsonl(d / "p.jsonl"), ("p.jsonl",), True),
        "interv sweep (store)": Writer(
            _sweep, ("manifest.json", "baselines.json", "units.jsonl", ".lock"), False
        ),
        "--plot (claim_file)": Writer(_plot, ("plot.png",), True),
        "zoo train (staging)": Writer(_staged, ("model.safetensors", "card.json"), False),
        "viewer.save": Writer(lambda d: viewer.save(d / "v.html"), ("v.html",), True),
        "viewer.to_svg(overwrite=True)": Writer(
            lambda d: viewer.to_svg(d / "v.svg", overwrite=True), ("v.svg",), True, True
        ),
        "model cache lock": Writer(_cache_lock, (".smollm2-135m.lock",), True),
    }


@pytest.fixture(scope="module")
def viewer():
    model = interv.load_model("induction-2l")
    task = interv.load_task("induction", n_pairs=1, seed=0).tokenize(model)
    return interv.view_attention(model, task, heads=["L1H0"])


def _entries(root: Path) -> dict[str, tuple]:
    """Every entry under ``root``, links not followed: link target, file hash, or dir."""
    found = {}
    for path in sorted(root.rglob("*")):
        key = str(path.relative_to(root))
        if path.is_symlink():
            found[key] = ("link", os.readlink(path))
        elif path.is_dir():
            found[key] = ("dir",)
        else:
            found[key] = ("file", hashlib.sha256(path.read_bytes()).hexdigest())
    return found


PLANTS = ("link", "dangling", "file", "dir")
FORGERIES = (None, "null", "wrong", "target's hash")


@pytest.mark.parametrize("name", list(_writers(None)))
def test_no_writer_follows_a_planted_link_or_replaces_a_users_file(name, viewer):
    writer = _writers(viewer)[name]
    candidates = [
        *writer.names,
        MARKER,
        *[f".{n}.tmp" for n in writer.names],  # interv 0.2's fixed temporary names
        f".{MARKER}.tmp",
        f"{SCRATCH_PREFIX}{PLANTED}",  # the primitive's first try, forced below
    ]

    @settings(max_examples=12)
    @given(
        plants=st.dictionaries(st.sampled_from(candidates), st.sampled_from(PLANTS), max_size=4),
        forgery=st.sampled_from(FORGERIES),
    )
    def check(plants, forgery):
        with tempfile.TemporaryDirectory() as scratch:
            root = Path(scratch)
            victim = root / "victim.txt"
            victim.write_text("the user's precious data\n")
            out = root / "out"
            out.mkdir()
            for entry, plant in plants.items():
                path = out / entry
                if plant == "link":
                    path.symlink_to(victim)
                elif plant == "dangling":
                    path.symlink_to(root / f"created-through-{entry}")
                elif plant == "file":
                    path.write_text(f"the user's own {entry}\n")
                else:
                    path.mkdir()
                    (path / "inside.txt").write_text("kept")
            if forgery is not None and MARKER not in plants:
                digest = {
                    "null": None,
                    "wrong": "0" * 64,
                    "target's hash": hashlib.sha256(victim.read_bytes()).hexdigest(),
                }[forgery]
                files = {entry: {"sha256": digest} for entry in plants}
                (out / MARKER).write_text(json.dumps({"format": "interv-files/1", "files": files}))
            before = _entries(root)
            with forced_first_temporary(), pytest.MonkeyPatch.context() as patch:
                patch.setattr(render, "report_files", _rendered_once)
                try:
                    writer.write(out)
                    failed = None
                except IntervError as error:
                    failed = error
            after = _entries(root)
            assert victim.read_text() == "the user's precious data\n"
            assert not list(root.glob("created-through-*")), "a dangling link was followed"
            for key, entry in before.items():
                if key == f"out/{MARKER}" and MARKER not in plants:
                    continue  # a forged marker in interv's format: interv keeps it up to date
                if entry[0] == "link":
                    assert after.get(key) == entry, f"{key} changed: {entry} -> {after.get(key)}"
                elif SCRATCH_PREFIX in key:
                    continue  # interv's scratch by name (not a link): a claim may clear it
                elif entry == ("dir",):
                    assert after.get(key) == entry, f"{key} changed: {entry} -> {after.get(key)}"
                elif entry[0] == "file" and key != "victim.txt":
                    may_replace = writer.replaces_files and Path(key).name in writer.names
                    assert may_replace or after.get(key) == entry, f"{key} was replaced"
            in_the_way = set(plants) & {*writer.names, MARKER}
            if not in_the_way and (writer.neighbours_ok or not plants):
                assert failed is None, f"refused with nothing in the way: {failed}"

    check()


def test_overwrite_true_replaces_a_users_file_but_never_a_link_or_a_directory(tmp_path):
    (tmp_path / "report.md").write_text("the user's notes")
    with pytest.raises(IntervError, match=r"report\.md' exists and interv did not write it"):
        REPORT.save(tmp_path)
    assert (tmp_path / "report.md").read_text() == "the user's notes"
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(render, "report_files", _rendered_once)
        paths = REPORT.save(tmp_path, overwrite=True)
        assert (tmp_path / "report.md").read_text().startswith("# interv report")
        (tmp_path / "report.md").unlink()
        (tmp_path / "report.md").symlink_to(tmp_path / "elsewhere.md")
        with pytest.raises(IntervError, match="is a symbolic link; interv never writes through"):
            REPORT.save(tmp_path, overwrite=True)
    assert set(paths) >= {"markdown", "html", "json", "csv"}
    assert not (tmp_path / "elsewhere.md").exists()


def test_to_jsonl_keeps_the_no_overwrite_rule(tmp_path):
    path = tmp_path / "pairs.jsonl"
    path.write_text("the user's pairs\n")
    with pytest.raises(IntervError, match="exists and interv did not write it"):
        PAIRS.to_jsonl(path)
    assert path.read_text() == "the user's pairs\n"
    PAIRS.to_jsonl(path, overwrite=True)
    assert interv.PromptPairs.from_jsonl(path).clean == PAIRS.clean
    PAIRS.to_jsonl(path)  # interv's own now, unchanged: may be rewritten


def test_a_sweep_store_refuses_links_at_its_file_names(tmp_path):
    victim = tmp_path / "victim.jsonl"
    victim.write_text("kept\n")
    for name in ("units.jsonl", ".lock", "manifest.json"):
        out = tmp_path / name.strip(".")
        out.mkdir()
        (out / name).symlink_to(victim)
        with pytest.raises(IntervError, match="symbolic link"):
            _sweep(out)
        assert victim.read_text() == "kept\n" and (out / name).is_symlink()
    hard = tmp_path / "hard"  # the unit log is changed in place: a hard link is refused too
    _sweep(hard)
    elsewhere = tmp_path / "elsewhere.jsonl"
    elsewhere.write_bytes((hard / "units.jsonl").read_bytes() + b'{"torn')
    (hard / "units.jsonl").unlink()
    os.link(elsewhere, hard / "units.jsonl")
    kept = elsewhere.read_bytes()
    with pytest.raises(IntervError, match="has other hard links"):
        _sweep(hard)  # reopening would cut the torn tail, then append
    assert elsewhere.read_bytes() == kept


# ---- inert outputs: CSV cells never start a formula, Markdown carries no markup ----

HOSTILE = (
    '=HYPERLINK("http://evil.example","click")',
    "+1+cmd|' /C calc'!A0",
    "-2+3+cmd|' /C calc'!A0",
    "@SUM(1+1)*cmd|' /C calc'!A0",
    "\t=1+1",
    "\r=1+1",
    "<script>alert(1)</script>",
    "<img src=x onerror=alert(1)>",
    "[click me](javascript:alert(1))",
    "![pixel](http://evil.example/p.png)",
    "line one\n# a heading\n| a | row |",
    "-1 -2",
)
FORMULA_START = ("=", "+", "-", "@", "\t", "\r")


def _hostile_report(text: str):
    header = dataclasses.replace(REPORT.header, model=text, task=text, metric_unit="logits")
    rows = tuple(dataclasses.replace(row, kind=text, semantics=text) for row in REPORT.rows)
    return dataclasses.replace(REPORT, header=header, rows=rows, notes=(text,))


def _is_number(cell: str) -> bool:
    try:
        float(cell)
    except ValueError:
        return False
    return True


def _check_cells(rows: list[list[str]], text: str) -> None:
    for row in rows:
        for cell in row:
            assert not cell.startswith(FORMULA_START) or _is_number(cell), repr(cell)
    assert any(cell in (text, "'" + text) for row in rows for cell in row)


@given(text=st.one_of(st.sampled_from(HOSTILE), st.text(min_size=1, max_size=12)))
@settings(max_examples=40)
def test_no_csv_cell_starts_a_formula_and_numbers_stay_numbers(text):
    report = _hostile_report(text)
    rows = list(csv.reader(io.StringIO(render.to_csv(report))))
    _check_cells(rows, text)
    effects = [row[rows[0].index("effect_mean_logits")] for row in rows[1:]]
    assert all(_is_number(cell) and not cell.startswith("'") for cell in effects)
    assert any(float(cell) < 0 for cell in effects)  # negative numbers, unquoted


def test_the_pandas_tables_of_interv_report_csv_are_inert_too(tmp_path):
    from interv.cli.report import _table_files

    for text in HOSTILE:
        files = _table_files(_hostile_report(text), tmp_path, csv=True, parquet=False)
        rows = list(csv.reader(io.StringIO(files["rows.csv"].decode("utf-8"))))
        _check_cells(rows, text)
        column = rows[0].index("effect_mean")
        assert any(float(row[column]) < 0 for row in rows[1:])


def test_markdown_shows_hostile_text_as_text():
    markdown = MarkdownIt("commonmark")
    for text in HOSTILE:
        page = markdown.render(render.to_markdown(_hostile_report(text)))
        for tag in ("<script", "<img", "<a ", "<h1>a heading"):
            assert tag not in page, (text, tag)
        assert "&lt;" in page or "<" not in text
    page = markdown.render(render.to_markdown(_hostile_report("[click me](javascript:x)")))
    assert "[click me](javascript:x)" in page  # the brackets shown, not a link
