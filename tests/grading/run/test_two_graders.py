"""Two grading processes on one class with a PostgreSQL gradebook, at once: every
submission graded once, none lost, and both write the whole class's grades."""
from __future__ import annotations

import csv
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from tests.grading.postgres import postgres_server  # noqa: F401 (the fixture)

ROOT = Path(__file__).resolve().parents[3]
EXERCISES = ROOT / "exercises"
A1, A8 = "a1_independent_ops", "a8_placements"

pytestmark = pytest.mark.slow


def test_two_graders_share_a_class_on_postgres(postgres_server):  # noqa: F811
    url = postgres_server.new_database("class")
    course = Path(tempfile.mkdtemp(prefix="pg-class-"))
    try:
        shutil.copy(EXERCISES / "nbgrader_config.py", course)
        shutil.copytree(EXERCISES / "hidden", course / "hidden")
        text = (EXERCISES / "course.toml").read_text().replace('url = ""', f'url = "{url}"')
        (course / "course.toml").write_text(text)
        for a in (A1, A8):
            shutil.copytree(EXERCISES / "source" / a, course / "source" / a)
        students = [f"s{i}_{('alice', 'bob')[i % 2]}" for i in range(6)]
        for s in students:
            for a in (A1, A8):
                shutil.copytree(EXERCISES / "submitted" / s.split("_")[1] / a, course / "submitted" / s / a)
        env = dict(os.environ, PATH=os.path.dirname(sys.executable) + os.pathsep + os.environ["PATH"])
        cmd = [sys.executable, "-m", "grader.grading", "--course", str(course), "--workers", "1"]
        procs = [subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE,
                                  stderr=subprocess.STDOUT, text=True) for _ in range(2)]
        outs = [p.communicate(timeout=600)[0] for p in procs]
        for p, out in zip(procs, outs):
            assert p.returncode == 0, out
        assert not (course / "gradebook.db").exists()     # the URL was used, not SQLite

        from sqlalchemy import create_engine, text as sql
        engine = create_engine(url)
        with engine.connect() as conn:
            jobs = conn.execute(sql("select student, assignment, state, attempts, outcome "
                                    "from course_grading_jobs")).all()
            subs = conn.execute(sql("select count(*) from submitted_assignment")).scalar()
        engine.dispose()
        assert len(jobs) == 12 and subs == 12
        assert all(j.state == "done" and j.attempts == 1 for j in jobs), jobs  # each graded once
        # both machines took part (each log shows the jobs it graded)
        graded_by = [sum(line.count(" graded in ") for line in out.splitlines()
                         if "graded in this run" not in line) for out in outs]   # not the summary
        assert sum(graded_by) == 12 and min(graded_by) >= 1, graded_by
        with open(course / "reports" / "grades.csv") as f:
            rows = list(csv.DictReader(f))
        assert len(rows) == 12
        for r in rows:
            want = {("alice", A1): 8, ("bob", A1): 7}.get((r["student"].split("_")[1], r["assignment"]))
            assert r["status"] == "graded"
            if want is not None:
                assert float(r["score"]) == want, r
    finally:
        shutil.rmtree(course, ignore_errors=True)
