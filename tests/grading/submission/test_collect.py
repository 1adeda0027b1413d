"""The instructor's collect step (``python -m grader.grading.submission.collect``): whose a
hand-in is and when it came are the platform's, never the names inside the student's zip;
a zip that claims another student's id is refused and nothing of either student changes;
every hand-in is kept. And what it collects is graded by ``make grade``'s pipeline."""
from __future__ import annotations

import csv
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

import nbformat
import pytest

from grader.grading.student import student_version
from grader.grading.submission.collect import collect, main
from grader.handin import handin, member_name

ROOT = Path(__file__).resolve().parents[3]
EXERCISES = ROOT / "exercises"
A1, A2 = "a1_independent_ops", "a2_small_ops"
T0 = 1_796_170_000            # 2026-12-02 00:06:40 UTC
FAR = 4_102_444_800           # 2100-01-01 00:00:00 UTC


@pytest.fixture
def course(tmp_path) -> Path:
    c = tmp_path / "course"
    for a in (A1, A2):
        shutil.copytree(EXERCISES / "source" / a, c / "source" / a)
    return c


def _answer(name: str, assignment: str = A1) -> Path:
    """A sample submission of the course (alice's correct, bob's partly wrong answers)."""
    return EXERCISES / "submitted" / name / assignment / f"{assignment}.ipynb"


def _upload(course: Path, zip_or_nb: Path, *where: str, received: float) -> Path:
    """Put a hand-in where the platform's download puts it, received at ``received``."""
    dest = course / "downloaded" / A1 / Path(*where)
    dest.parent.mkdir(parents=True, exist_ok=True)
    shutil.copy(zip_or_nb, dest)
    os.utime(dest, (received, received))
    return dest


def _zip(tmp_path: Path, answer: Path, student: str, now: float, assignment: str = A1) -> Path:
    """What ``python -m grader.handin`` makes of ``answer`` (its claim: ``student``, ``now``)."""
    laptop = tmp_path / f"laptop-{student}-{now:.0f}"
    laptop.mkdir(parents=True, exist_ok=True)
    nb = laptop / f"{assignment}.ipynb"
    shutil.copy(answer, nb)
    return handin(assignment, student, notebook=nb, now=now).zip_path


def _submitted(course: Path, student: str) -> tuple[bytes, str]:
    folder = course / "submitted" / student / A1
    return (folder / f"{A1}.ipynb").read_bytes(), (folder / "timestamp.txt").read_text()


@pytest.mark.parametrize("by", ["folder", "roster"])
def test_a_zip_claiming_another_student_and_a_far_future_time_cannot_replace_their_work(
        course, tmp_path, capsys, by):
    bobs = _zip(tmp_path, _answer("bob"), "bob", T0)
    _upload(course, bobs, "bob", bobs.name, received=T0 + 60)
    assert main([A1, "--course", str(course)]) == 0
    before = _submitted(course, "bob")
    assert before[0] == _answer("bob").read_bytes()
    assert before[1].startswith("2026-12-02 00:07:40")          # the platform's time
    # ann hands in alice's correct answer under bob's id, dated 2100, as herself
    evil = _zip(tmp_path, _answer("alice"), "bob", FAR)
    if by == "folder":
        up = _upload(course, evil, "ann", "bob_final.zip", received=T0 + 3600)
        args = []
    else:
        up = _upload(course, evil, "Ann Lee_4711_assignsubmission_file_bob.zip", received=T0 + 3600)
        roster = tmp_path / "roster.csv"
        with open(roster, "w", newline="") as f:
            w = csv.writer(f)
            w.writerows([["file", "student", "received"],
                         ["bob/" + bobs.name, "bob", "2026-12-02T00:07:40Z"],
                         [up.name, "ann", "2026-12-02T01:06:40+00:00"]])
        args = ["--roster", str(roster)]
    capsys.readouterr()
    assert main([A1, "--course", str(course), *args]) == 1         # something was refused
    out = capsys.readouterr().out
    assert (f"refused   'ann': downloaded/{A1}/{up.relative_to(course / 'downloaded' / A1)}: "
            "it says inside that it is the work of student 'bob', but the platform received "
            "it from 'ann': not collected, and no submission of either student was changed") in out
    assert _submitted(course, "bob") == before                     # bob's work, untouched
    assert not (course / "submitted" / "ann").exists()
    assert up.is_file()                                             # the upload stays
    assert [p.name for p in (course / "handins" / A1).iterdir()] == ["bob"]
    assert "1 refused" in out


def test_the_platforms_time_orders_hand_ins_never_the_time_in_the_zip(course, tmp_path):
    early = _zip(tmp_path, _answer("alice"), "ann", FAR)          # her clock says 2100
    _upload(course, early, "ann", "first.zip", received=T0)
    later = _zip(tmp_path, _answer("bob"), "ann", T0 + 100)
    _upload(course, later, "ann", "second.zip", received=T0 + 200)
    rows = collect(course, A1)
    assert _submitted(course, "ann") == (_answer("bob").read_bytes(),
                                         "2026-12-02 00:10:00.000000 UTC")
    said = {r.path.name: (r.status, r.said) for r in rows}
    assert said["second.zip"][0] == "collected" and said["first.zip"][0] == "kept"
    assert "the zip's own time 2100-01-01 00:00:00 UTC is later than the platform received " \
           "it: not used" in said["first.zip"][1]
    kept = sorted(p.name for p in (course / "handins" / A1 / "ann").iterdir())
    assert [k[:16] for k in kept] == ["20261202T000640Z", "20261202T001000Z"]   # both kept
    # collecting again changes nothing
    again = collect(course, A1)
    assert {r.status for r in again} == {"kept"} and "already the submission" in again[-1].said


def test_a_newer_hand_in_moves_the_submission_there_aside_and_an_older_one_replaces_nothing(
        course, tmp_path):
    first = _upload(course, _answer("bob"), "ann", f"{A1}.ipynb", received=T0)   # a bare notebook
    collect(course, A1)
    first.unlink()
    newer = _upload(course, _zip(tmp_path, _answer("alice"), "ann", T0), "ann", "n.zip",
                    received=T0 + 500)
    rows = collect(course, A1)
    assert rows[0].status == "collected" and "the submission that was there is in" in rows[0].said
    assert _submitted(course, "ann")[0] == _answer("alice").read_bytes()
    aside = list((course / "handins" / A1 / "ann").glob("replaced-20261202T000640Z-*"))
    assert len(aside) == 1 and (aside[0] / f"{A1}.ipynb").read_bytes() == _answer("bob").read_bytes()
    newer.unlink()
    _upload(course, _answer("bob"), "ann", "old.ipynb", received=T0 + 100)   # received before
    rows = collect(course, A1)
    assert rows[0].status == "kept" and "not newer than the submission there" in rows[0].said
    assert _submitted(course, "ann")[0] == _answer("alice").read_bytes()


def test_an_upload_whose_owner_the_platform_does_not_say_is_refused_saying_what_to_do(
        course, tmp_path, capsys):
    z = _zip(tmp_path, _answer("alice"), "ann", T0)
    _upload(course, z, z.name, received=T0 + 1)                    # no folder, no roster
    _upload(course, z, "Ann Lee", z.name, received=T0)             # the platform's display name
    _upload(course, z, "ann", "deeper", z.name, received=T0)
    rows = {r.path.relative_to(course / "downloaded" / A1).as_posix(): r for r in collect(course, A1)}
    assert {r.status for r in rows.values()} == {"refused"}
    assert "whose is it? Put each student's uploads in downloaded/" in rows[z.name].said
    assert "is not letters, digits" in rows[f"Ann Lee/{z.name}"].said
    assert "in a roster (--roster)" in rows[f"Ann Lee/{z.name}"].said
    assert "whose is it?" in rows[f"ann/deeper/{z.name}"].said
    assert not (course / "submitted").exists()
    # a roster maps the platform's names to ids
    roster = tmp_path / "r.csv"
    roster.write_text(f"file,student\nAnn Lee/{z.name},ann\n{z.name},ann\n")
    got = {r.path.relative_to(course / "downloaded" / A1).as_posix(): r.status
           for r in collect(course, A1, roster)}
    assert got == {f"Ann Lee/{z.name}": "kept", z.name: "collected", f"ann/deeper/{z.name}": "refused"}
    assert _submitted(course, "ann")[0] == _answer("alice").read_bytes()


def test_what_is_not_one_notebook_of_the_assignment_is_refused(course, tmp_path):
    def zipped(name: str, members: dict) -> Path:
        path = tmp_path / name
        with zipfile.ZipFile(path, "w") as z:
            for member, data in members.items():
                z.writestr(member, data)
        return path

    nb = _answer("alice").read_bytes()
    cases = {
        "other.zip": (zipped("other.zip", {member_name("ann", A2, "20261202T000640Z",
                                                       f"{A2}.ipynb"): nb}),
                      f"it says inside that it hands in '{A2}', not '{A1}'"),
        "two.zip": (zipped("two.zip", {"x.ipynb": nb, "y.ipynb": nb}), "the zip holds 2 notebooks"),
        "none.zip": (zipped("none.zip", {"notes.txt": b"hi"}), "the zip holds 0 notebooks"),
        "junk.zip": (zipped("junk.zip", {"a.ipynb": b"{not json"}), "is not a notebook"),
        "fake.zip": (None, "not a zip file"),
    }
    for name, (path, _) in cases.items():
        if path is None:
            path = tmp_path / name
            path.write_bytes(b"PK no zip")
        _upload(course, path, "ann", name, received=T0)
    rows = {r.path.name: r for r in collect(course, A1)}
    for name, (_, says) in cases.items():
        assert rows[name].status == "refused" and says in rows[name].said, (name, rows[name].said)
    assert not (course / "submitted").exists()



def test_a_submission_put_there_by_hand_and_what_is_over_the_limits_are_not_collected(
        course, tmp_path):
    from grader.grading.config import SubmissionLimits

    by_hand = course / "submitted" / "ann" / A1
    by_hand.mkdir(parents=True)
    (by_hand / f"{A1}.ipynb").write_bytes(b"{}")                # no timestamp.txt
    _upload(course, _zip(tmp_path, _answer("alice"), "ann", T0), "ann", "a.zip", received=T0)
    (row,) = collect(course, A1)
    assert row.status == "kept" and "has no timestamp.txt (put there by hand?)" in row.said
    assert (by_hand / f"{A1}.ipynb").read_bytes() == b"{}"
    _upload(course, _answer("bob"), "bob", "b.ipynb", received=T0)
    small = SubmissionLimits(max_notebook_mb=0.01, max_total_mb=1)
    rows = {r.path.name: r for r in collect(course, A1, limits=small)}
    assert rows["a.zip"].status == "refused" and "more than max_notebook_mb = 0.01" in rows["a.zip"].said
    assert rows["b.ipynb"].status == "refused" and "larger than 0.01 MB" in rows["b.ipynb"].said
    tiny = SubmissionLimits(max_total_mb=0.001)
    rows = {r.path.name: r for r in collect(course, A1, limits=tiny)}
    assert "larger than 0.001 MB" in rows["a.zip"].said

def test_a_roster_that_is_wrong_names_the_line(course, tmp_path, capsys):
    roster = tmp_path / "r.csv"
    roster.write_text("file,student,received\nx.zip,ann,2026-12-02 00:00:00\n")
    assert main([A1, "--course", str(course), "--roster", str(roster)]) == 2
    assert "line 2: received '2026-12-02 00:00:00' has no time zone" in capsys.readouterr().err
    roster.write_text("name,who\nx.zip,ann\n")
    assert main([A1, "--course", str(course), "--roster", str(roster)]) == 2
    assert "the columns are file, student" in capsys.readouterr().err
    assert main(["a99", "--course", str(course)]) == 2
    assert "no assignment 'a99'" in capsys.readouterr().err


@pytest.mark.slow
def test_nbgrader_zip_collect_is_switched_off_and_replaces_nobody(course, tmp_path):
    """nbgrader's zip_collect with the course's configuration had filed ann's zip under bob
    (the id in it) and kept it over bob's own (its time, 2100, was newer)."""
    from tests.grading.nbgrader_cli import nbgrader

    shutil.copy(EXERCISES / "nbgrader_config.py", course)
    (course / "release" / A1).mkdir(parents=True)
    nbformat.write(student_version(nbformat.read(course / "source" / A1 / f"{A1}.ipynb",
                                                 as_version=4)),
                   course / "release" / A1 / f"{A1}.ipynb")
    archive = course / "downloaded" / A1 / "archive"
    archive.mkdir(parents=True)
    shutil.copy(_zip(tmp_path, _answer("bob"), "bob", T0), archive)
    shutil.copy(_zip(tmp_path, _answer("alice"), "bob", FAR), archive / "ann.zip")
    done = nbgrader(course, "zip_collect", A1, "--strict")
    assert done.returncode != 0
    assert "zip_collect is switched off in this course" in done.stderr
    assert "python -m grader.grading.submission.collect" in done.stderr
    assert not (course / "submitted").exists()


def _recipe() -> str:
    """The bash block of GRADING.md that collects and grades, as written there."""
    text = (EXERCISES / "GRADING.md").read_text()
    blocks = re.findall(r"```bash\n(.*?)```", text, re.S)
    (block,) = [b for b in blocks if "make collect" in b]
    return block


def _repository_copy(where: Path) -> Path:
    """The repository's files ``make collect`` and ``make grade`` use, copied with their
    times (the Makefile compares them with the installed environment's), the course without
    its sample submissions; the environment is this one's (``VENV``)."""
    repo = where / "repo"
    repo.mkdir()
    for name in ("Makefile", "pyproject.toml", "constraints.txt", "README.md"):
        shutil.copy2(ROOT / name, repo / name)
    shutil.copytree(ROOT / "grader", repo / "grader", copy_function=shutil.copy2,
                    ignore=shutil.ignore_patterns("__pycache__"))
    ex = repo / "exercises"
    ex.mkdir()
    for name in ("nbgrader_config.py", "course.toml"):
        shutil.copy2(EXERCISES / name, ex / name)
    shutil.copytree(EXERCISES / "hidden", ex / "hidden", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copytree(EXERCISES / "source" / A1, ex / "source" / A1)
    return repo


@pytest.mark.slow
def test_the_recipe_as_written_collects_and_grades(tmp_path):
    """GRADING.md's two lines, run by bash as they stand there, in a copy of the repository:
    ann's hand-in made with ``python -m grader.handin`` from a notebook downloaded from the
    book, in the platform's download folder under her id, is collected and graded 8 of 8."""
    from grader.student_setup import with_setup_cell, wheel_name

    repo = _repository_copy(tmp_path)
    laptop = tmp_path / "laptop"
    laptop.mkdir()
    # alice's correct answer, as downloaded from the book (its set-up cell first)
    nb = with_setup_cell(nbformat.read(_answer("alice"), as_version=4), wheel_name(ROOT))
    nbformat.write(nb, laptop / f"{A1}.ipynb")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("NBGRADER_", "MAKE"))}
    cli = subprocess.run([sys.executable, "-m", "grader.handin", A1, "--student", "ann.lee"],
                         cwd=laptop, capture_output=True, text=True, timeout=120,
                         env=dict(env, PYTHONPATH=str(ROOT)))
    assert cli.returncode == 0, cli.stderr
    (zipped,) = laptop.glob(f"{A1}-ann.lee-*.zip")
    home = tmp_path / "home"
    download = home / "Downloads" / "a1" / "ann.lee"
    download.mkdir(parents=True)
    shutil.copy(zipped, download / f"Ann Lee_4711_assignsubmission_file_{zipped.name}")
    done = subprocess.run(["bash", "-euo", "pipefail", "-c", _recipe()], cwd=repo,
                          capture_output=True, text=True, timeout=900,
                          env=dict(env, HOME=str(home), VENV=str(ROOT / ".venv")))
    assert done.returncode == 0, (done.stdout + done.stderr)[-4000:]
    assert "1 collected, 0 kept only in handins/, 0 refused" in done.stdout, done.stdout[-3000:]
    with open(repo / "exercises" / "reports" / "grades.csv", newline="") as f:
        rows = [r for r in csv.DictReader(f) if r["student"] == "ann.lee"]
    assert [(r["assignment"], r["score"], r["max_score"], r["status"]) for r in rows] == [
        (A1, "8", "8", "graded")], rows
    assert (repo / "exercises" / "feedback" / "ann.lee" / A1 / f"{A1}.html").is_file()
