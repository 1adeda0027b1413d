"""A submission is read as data (grader/grading/submission/intake.py): regular files only, never a link,
never blocking, within the limits, and what is refused is said."""
from __future__ import annotations

import json
import os
import socket
import stat
import threading
from pathlib import Path

import nbformat
import pytest

from grader.grading.submission import intake
from grader.grading.config import SubmissionLimits

ROOT = Path(__file__).resolve().parents[3]
A1 = "a1_independent_ops"
ALICE = ROOT / "exercises" / "submitted" / "alice" / A1 / f"{A1}.ipynb"
SMALL = SubmissionLimits(max_files=5, max_file_mb=0.01, max_total_mb=0.05, max_notebook_mb=0.1,
                         max_json_depth=8, max_json_items=2000)


@pytest.fixture
def course(tmp_path) -> Path:
    (tmp_path / "submitted" / "s" / "a").mkdir(parents=True)
    return tmp_path


def folder(course: Path) -> Path:
    return course / "submitted" / "s" / "a"


def reasons(sub: intake.Submission) -> dict[str, str]:
    return {r.path: r.reason for r in sub.refused}


def test_regular_files_are_read_in_subfolders_too(course):
    (folder(course) / "x.ipynb").write_text("{}")
    (folder(course) / "data").mkdir()
    (folder(course) / "data" / "y.csv").write_text("1,2")
    (folder(course) / ".ipynb_checkpoints").mkdir()            # nbgrader ignores these
    (folder(course) / ".ipynb_checkpoints" / "x-checkpoint.ipynb").write_text("{}")
    sub = intake.read(course, "s", "a", SMALL)
    assert sub.files == {"x.ipynb": b"{}", "data/y.csv": b"1,2"} and sub.refused == []


def test_links_pipes_sockets_devices_and_hard_links_are_refused_unread(course, tmp_path):
    secret = tmp_path / "secret"
    secret.write_text("SECRET")
    f = folder(course)
    os.symlink(secret, f / "link")
    os.symlink("/proc/kmsg", f / "kmsg")                       # blocked the digest forever
    os.symlink(tmp_path, f / "dir")
    os.mkfifo(f / "pipe")
    with socket.socket(socket.AF_UNIX) as s:
        s.bind(str(f / "sock"))
    os.link(secret, f / "hard")
    if os.geteuid() == 0:
        os.mknod(f / "dev", stat.S_IFCHR | 0o600, os.makedev(1, 5))
    sub = intake.read(course, "s", "a", SMALL)
    got = reasons(sub)
    assert sub.files == {}
    for name in ("link", "kmsg", "dir"):
        assert "symbolic link" in got[name] and "not followed" in got[name]
    assert "named pipe" in got["pipe"] and "socket" in got["sock"]
    assert "hard link (the file has 2 names)" in got["hard"]
    if os.geteuid() == 0:
        assert "device" in got["dev"]
    assert any("'pipe' is a named pipe" in n for n in sub.notes())


def test_reading_never_blocks_on_a_pipe_that_nobody_writes(course):
    os.mkfifo(folder(course) / "x.ipynb")
    done = []
    t = threading.Thread(target=lambda: done.append(intake.read(course, "s", "a", SMALL).digest()),
                         daemon=True)
    t.start()
    t.join(30)
    assert done, "reading the submission blocked on a named pipe"


def test_a_student_or_assignment_folder_that_is_a_link_is_not_read(course):
    os.symlink(folder(course), course / "submitted" / "mallory")
    sub = intake.read(course, "mallory", "a", SMALL)
    assert sub.problem == "submitted/mallory is a symbolic link: it was not read" and not sub.files
    os.symlink(folder(course), course / "submitted" / "s" / "b")
    assert "submitted/s/b is a symbolic link" in intake.read(course, "s", "b", SMALL).problem
    assert not intake.read(course, "nobody", "a", SMALL).exists


def test_limits_refuse_what_is_over_and_keep_the_rest(course):
    f = folder(course)
    (f / "big.bin").write_bytes(b"0" * 20_000)                  # over 0.01 MB a file
    (f / "x.ipynb").write_bytes(b"1" * 50_000)                  # notebooks: 0.1 MB
    for i in range(6):
        (f / f"f{i}.txt").write_text(str(i))
    sub = intake.read(course, "s", "a", SMALL)
    got = reasons(sub)
    assert "over the limit of 0.01 MB for one file" in got["big.bin"]
    assert "x.ipynb" in sub.files and len(sub.files) == 5
    assert sum("over the limit of 5 files" in r for r in got.values()) == 2
    assert any(n.startswith("not read (2 entries): ") for n in sub.notes())


def test_a_folder_with_endless_entries_is_read_only_so_far(course):
    for i in range(200):
        (folder(course) / f"f{i:03d}").write_text("x")
    sub = intake.read(course, "s", "a", SMALL)
    assert "holds more than 55 entries" in reasons(sub)["."]
    assert len(sub.files) == 5


def test_the_digest_follows_content_and_refusals(course):
    f = folder(course)
    (f / "x.ipynb").write_text("{}")
    first = intake.read(course, "s", "a", SMALL).digest()
    assert intake.read(course, "s", "a", SMALL).digest() == first
    (f / "x.ipynb").write_text("{ }")
    second = intake.read(course, "s", "a", SMALL).digest()
    os.symlink("/etc/passwd", f / "l")
    assert len({first, second, intake.read(course, "s", "a", SMALL).digest()}) == 3
    assert intake.read(course, "nobody", "a", SMALL).digest() == ""


@pytest.mark.parametrize("name, bad", [
    ("alice", None), ("a.b-c_d@e+f", None), ("", "empty"), ("x" * 65, "longer than 64"),
    ("=HYPERLINK(1)", "not letters"), ("-x", "not letters"), ("@x", "not letters"),
    ("..", "not letters"), (".hidden", "not letters"), ("a/b", "not letters"),
    ("a b", "not letters"), ("é", "not letters"), ("a\nb", "not letters"),
])
def test_ids_are_checked_before_they_name_a_file(name, bad):
    got = intake.id_problem("student", name)
    assert (got is None) if bad is None else (bad in got)


@pytest.mark.parametrize("value, safe", [
    ("=1+1", "'=1+1"), ("+cmd", "'+cmd"), ("-x", "'-x"), ("@SUM(A1)", "'@SUM(A1)"),
    ("\tx", "'\tx"), ("-1.5", "-1.5"), ("8", "8"), ("alice", "alice"), ("", ""),
])
def test_csv_fields_that_would_be_formulas_are_neutralised(value, safe):
    assert intake.csv_safe(value) == safe


# -- the notebook's JSON -----------------------------------------------------------------------

def test_json_within_the_limits_parses_as_json_does():
    data = ALICE.read_bytes()
    assert intake.parse_json(data, 64, 10**6) == json.loads(data)
    tricky = json.dumps({"s": 'a "quoted" {[ string \\', "n": [[1, 2], {"x": []}]}).encode()
    assert intake.parse_json(tricky, 4, 100) == json.loads(tricky)


def test_ten_million_braces_are_refused_on_the_bytes():
    data = b'{"metadata": {"x": [' + b"{}," * 9_999_999 + b'{}]}, "cells": []}'   # 28.6 MB
    with pytest.raises(intake.TooComplex, match="JSON values"):
        intake.parse_json(data, 64, 1_000_000)


def test_deep_nesting_is_refused_and_broken_json_is_an_error():
    with pytest.raises(intake.TooComplex, match="nests 5000 levels"):
        intake.parse_json(b"[" * 5000 + b"]" * 5000, 64, 10**6)
    with pytest.raises(intake.TooComplex, match="nests 4 levels"):
        intake.parse_json(b'{"a": [[[1]]]}', 3, 100)
    for bad in (b'"' + b'\\"' * 100_000, b"[1, 2", b"\xff\xfe"):
        with pytest.raises(ValueError):
            intake.parse_json(bad, 64, 10**6)


def _submit(course: Path, nb) -> intake.Submission:
    (folder(course) / f"{A1}.ipynb").write_text(nbformat.writes(nb) if not isinstance(nb, str) else nb)
    return intake.read(course, "s", "a", SubmissionLimits())


@pytest.fixture
def released(course):
    (course / "source" / "a").mkdir(parents=True)
    (course / "source" / "a" / f"{A1}.ipynb").write_text("{}")
    (course / "release" / "a").mkdir(parents=True)
    (course / "release" / "a" / f"{A1}.ipynb").write_bytes(ALICE.read_bytes())
    return course


def test_check_names_what_cannot_be_graded(released):
    course = released
    problem, _, _ = intake.check(intake.read(course, "s", "a", SubmissionLimits()), course,
                                 SubmissionLimits())
    assert problem == ("missing", f"notebook {A1}.ipynb is missing from the submission")
    problem, _, _ = intake.check(_submit(course, '{"cells": ['), course, SubmissionLimits())
    assert problem[0] == "invalid" and "not valid JSON" in problem[1]
    problem, _, _ = intake.check(_submit(course, '{"cells": 3}'), course, SubmissionLimits())
    assert problem[0] == "invalid" and "not a valid notebook" in problem[1]
    os.unlink(folder(course) / f"{A1}.ipynb")
    os.symlink(ALICE, folder(course) / f"{A1}.ipynb")
    problem, _, notes = intake.check(intake.read(course, "s", "a", SubmissionLimits()), course,
                                     SubmissionLimits())
    assert problem[0] == "invalid" and "symbolic link" in problem[1] and notes == []


def test_the_assignments_metadata_is_put_back_and_what_changed_is_said(released):
    nb = nbformat.read(ALICE, as_version=4)
    by = {c.metadata.nbgrader["grade_id"]: c for c in nb.cells if "nbgrader" in c.metadata}
    by["test_time_work"].metadata.nbgrader["grade_id"] = "zzz"
    by["experiment"].metadata.nbgrader["grade_id"] = "time_work"
    by["test_experiment"].metadata.nbgrader["points"] = 100
    by["intro"].metadata["nbgrader"] = "garbage"
    problem, staged, notes = intake.check(_submit(released, nb), released, SubmissionLimits())
    assert problem is None
    fixed = nbformat.reads(staged[f"{A1}.ipynb"].decode(), as_version=4)
    metas = [c.metadata.get("nbgrader") for c in fixed.cells]
    want = [c.metadata.get("nbgrader") for c in nbformat.read(ALICE, as_version=4).cells]
    # the test cell that lost its grade id is put back as released, after time_work
    assert metas[4] == want[4] and fixed.cells[4].source == nb.cells[4].source
    del metas[4]
    assert metas[7] == want[7]                          # points put back
    assert metas[4] is None and metas[6] is None and metas[0] is None   # ordinary cells now
    assert [m for m in metas if m] == [m for i, m in enumerate(want) if m and i not in (0, 4, 6)]
    text = "; ".join(notes)
    assert "grade id 'zzz', which the assignment does not have" in text
    assert "repeats grade id 'time_work'" in text and "is not a dict" in text
    assert "cell 8 (test_experiment): its nbgrader metadata was edited ('points')" in text
    assert "test cell test_time_work was deleted; the original was put back" in text
    assert "answer cell experiment is missing" in text


def test_an_honest_notebook_is_staged_unchanged_with_no_note(released):
    problem, staged, notes = intake.check(_submit(released, nbformat.read(ALICE, as_version=4)),
                                          released, SubmissionLimits())
    assert problem is None and notes == []
    assert nbformat.reads(staged[f"{A1}.ipynb"].decode(), as_version=4) == \
        nbformat.read(ALICE, as_version=4)


def test_a_deleted_answer_and_test_cell_are_named_and_the_test_put_back_in_its_place(released):
    nb = nbformat.read(ALICE, as_version=4)
    nb.cells = [c for c in nb.cells
                if c.metadata.get("nbgrader", {}).get("grade_id") not in ("experiment", "test_experiment")]
    problem, staged, notes = intake.check(_submit(released, nb), released, SubmissionLimits())
    assert problem is None
    fixed = nbformat.reads(staged[f"{A1}.ipynb"].decode(), as_version=4)
    ids = [c.metadata.get("nbgrader", {}).get("grade_id") for c in fixed.cells]
    # after task2's text, where nbgrader itself would have looked for the deleted answer cell
    assert ids[ids.index("task2") + 1] == "test_experiment" and "experiment" not in ids
    assert notes == ["answer cell experiment is missing (deleted, or its nbgrader metadata was "
                     "removed): its test ran with what the rest of the notebook defines",
                     "test cell test_experiment was deleted; the original was put back and run"]


def test_another_assignments_notebook_under_this_name_is_recognised(released):
    other = released / "release" / "a8_placements"
    other.mkdir(parents=True)
    (other / "a8_placements.ipynb").write_bytes(
        (ROOT / "exercises" / "submitted" / "alice" / "a8_placements" / "a8_placements.ipynb").read_bytes())
    a8 = nbformat.read(other / "a8_placements.ipynb", as_version=4)
    problem, staged, _ = intake.check(_submit(released, a8), released, SubmissionLimits())
    assert problem[0] == "invalid" and staged == {}
    assert f"{A1}.ipynb is the notebook of assignment a8_placements, not of a" in problem[1]
