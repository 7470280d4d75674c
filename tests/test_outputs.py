"""interv._outputs: a run writes only where nobody else's files are, and cleans up after a
failure."""

from __future__ import annotations

import json

import pytest

from interv._outputs import MARKER, claim_dir, claim_file, fresh_dir
from interv.errors import IntervError


def test_a_new_directory_is_created_and_its_files_listed_with_their_hashes(tmp_path):
    with claim_dir(tmp_path / "a" / "b", by="test") as output:
        output.write_text("report.md", "hello\n")
    listed = json.loads((tmp_path / "a" / "b" / MARKER).read_text())["files"]
    assert set(listed) == {"report.md"} and listed["report.md"]["by"] == "test"
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
