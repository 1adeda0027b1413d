"""nbgrader's gradebook on a real PostgreSQL server (the course's optional database): the
API the grading pipeline uses works there, and two grading processes writing submissions
for different students at the same time lose nothing."""
from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from grader.grading.config import load
from tests.grading.postgres import postgres_server  # noqa: F401 (the fixture)

ROOT = Path(__file__).resolve().parents[3]
COURSE = load(ROOT / "exercises").course_id


@pytest.fixture(autouse=True)
def alembic_on_path(monkeypatch):
    """nbgrader stamps a new gradebook by running ``alembic`` from PATH: this venv's."""
    monkeypatch.setenv("PATH", os.path.dirname(sys.executable) + os.pathsep
                       + os.environ.get("PATH", ""))


def make_assignment(url: str) -> None:
    """One assignment with one notebook holding two grade cells (what generate_assignment
    records in the gradebook)."""
    from nbgrader.api import Gradebook
    with Gradebook(url, COURSE) as gb:
        gb.add_assignment("a1")
        gb.add_notebook("nb", "a1")
        gb.add_grade_cell("q1", "nb", "a1", max_score=2, cell_type="code")
        gb.add_grade_cell("q2", "nb", "a1", max_score=3, cell_type="code")


def test_nbgrader_gradebook_works_on_postgres(postgres_server):  # noqa: F811
    from nbgrader.api import Course, Gradebook
    url = postgres_server.new_database("gradebook")
    make_assignment(url)
    with Gradebook(url, COURSE) as gb:
        for student in ("alice", "bob"):
            gb.update_or_create_student(student, first_name=student.title())
            gb.update_or_create_submission("a1", student)
        gb.find_grade("q1", "nb", "a1", "alice").auto_score = 2
        gb.find_grade("q2", "nb", "a1", "alice").auto_score = 1.5
        gb.find_grade("q1", "nb", "a1", "bob").auto_score = 0
        gb.find_grade("q2", "nb", "a1", "bob").auto_score = 3
        gb.db.commit()
    with Gradebook(url, COURSE) as gb:   # a new connection reads what was committed
        assert gb.find_assignment("a1").max_score == 5
        assert gb.find_submission("a1", "alice").score == 3.5
        assert gb.find_submission("a1", "bob").score == 3
        assert gb.average_assignment_score("a1") == pytest.approx(3.25)
        assert sorted(s.id for s in gb.students) == ["alice", "bob"]
        assert [c.id for c in gb.db.query(Course)] == [COURSE]


# Run in two processes at once; each writes the submissions of its own students, the way
# autograde records one student (update_or_create_student, update_or_create_submission,
# then the cells' scores), one student per transaction.
WRITER = r"""
import os, sys, time
from nbgrader.api import Gradebook
url, go, first, count = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
open(f"{go}.ready{first}", "w").close()
while not os.path.exists(go):
    time.sleep(0.005)
print(time.time())
for i in range(first, first + count):
    with Gradebook(url, sys.argv[5]) as gb:
        student = f"s{i:02d}"
        gb.update_or_create_student(student)
        gb.update_or_create_submission("a1", student)
        gb.find_grade("q1", "nb", "a1", student).auto_score = i % 3
        gb.find_grade("q2", "nb", "a1", student).auto_score = 1
        gb.db.commit()
print(time.time())
"""


@pytest.mark.slow
def test_two_processes_adding_submissions_at_once_lose_nothing(postgres_server, tmp_path):  # noqa: F811
    from nbgrader.api import Grade, Gradebook
    url = postgres_server.new_database("gradebook")
    make_assignment(url)
    go = tmp_path / "go"
    n = 15
    procs = [subprocess.Popen([sys.executable, "-c", WRITER, url, str(go), str(k * n), str(n), COURSE],
                              cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for k in range(2)]
    ready = [Path(f"{go}.ready{k * n}") for k in range(2)]
    deadline = time.monotonic() + 120
    while not all(r.exists() for r in ready) and all(p.poll() is None for p in procs):
        assert time.monotonic() < deadline, "the writers did not start"
        time.sleep(0.01)
    go.touch()   # both are ready: they write at the same time
    out = [p.communicate(timeout=300) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], [err for _, err in out]
    spans = [[float(t) for t in stdout.split()] for stdout, _ in out]
    assert max(s[0] for s in spans) < min(s[1] for s in spans), "the writers did not overlap"
    with Gradebook(url, COURSE) as gb:
        subs = gb.assignment_submissions("a1")
        assert sorted(s.student_id for s in subs) == [f"s{i:02d}" for i in range(2 * n)]
        for i in range(2 * n):
            assert gb.find_submission("a1", f"s{i:02d}").score == i % 3 + 1
        assert gb.db.query(Grade).count() == 2 * 2 * n   # two cells per submission, none twice
