"""nbgrader's exchange collect (the hub's *Collect*) with the course's ``OwnedCollect``:
a submission folder that names another student than its owner is refused and hides nothing
of that student's, and the time collected is the system's, not the one in the folder's name
or its ``timestamp.txt``. Needs root (the submissions are given to two system users)."""
from __future__ import annotations

import logging
import os
import sys
import time
from pathlib import Path

import pytest
from traitlets.config import Config

from grader.grading.submission.exchange import OwnedCollect

ROOT_ONLY = pytest.mark.skipif(os.geteuid() != 0, reason="gives files to other users: root")
A = "a1_independent_ops"


def _submit(inbound: Path, student: str, stamp: str, owner_uid: int, body: str) -> Path:
    """A folder as ``nbgrader submit`` leaves it in the exchange, owned by ``owner_uid``."""
    folder = inbound / f"{student}+{A}+{stamp}+{os.urandom(4).hex()}"
    folder.mkdir()
    (folder / f"{A}.ipynb").write_text(body)
    (folder / "timestamp.txt").write_text(stamp)
    for p in (folder / f"{A}.ipynb", folder / "timestamp.txt", folder):
        os.chown(p, owner_uid, owner_uid)
    return folder


@pytest.fixture(autouse=True)
def _alembic_on_path(monkeypatch):
    """(the gradebook is made by nbgrader's alembic command, beside this interpreter)"""
    monkeypatch.setenv("PATH", os.path.dirname(sys.executable) + os.pathsep + os.environ["PATH"])


def _collect(course: Path, exchange: Path, check_owner: bool = True) -> str:
    """Collect the assignment as the instructor's ``nbgrader collect``; what it logged."""
    c = Config()
    c.CourseDirectory.root = str(course)
    c.CourseDirectory.course_id = "pdl"
    c.CourseDirectory.assignment_id = A
    c.Exchange.root = str(exchange)
    c.ExchangeCollect.check_owner = check_owner
    from nbgrader.auth import Authenticator
    from nbgrader.coursedir import CourseDirectory

    coursedir = CourseDirectory(config=c)
    app = OwnedCollect(coursedir=coursedir, authenticator=Authenticator(config=c), config=c)
    said = []
    handler = logging.Handler()
    handler.emit = lambda record: said.append(record.getMessage())
    app.log.addHandler(handler)
    try:
        app.start()
    finally:
        app.log.removeHandler(handler)
    return "\n".join(said)


@ROOT_ONLY
def test_a_submission_naming_another_student_is_refused_and_the_time_is_the_systems(
        tmp_path):
    course, exchange = tmp_path / "course", tmp_path / "exchange"
    course.mkdir()
    inbound = exchange / "pdl" / "inbound"
    inbound.mkdir(parents=True)
    # 'daemon' (uid 1) submits; 'bin' (uid 2) submits under daemon's id, dated 2100
    _submit(inbound, "daemon", "2026-12-02 00:00:00.000000 UTC", 1, "daemon's own")
    before = time.time()
    _submit(inbound, "daemon", "2100-01-01 00:00:00.000000 UTC", 2, "bin's, as daemon")
    said = _collect(course, exchange)
    got = course / "submitted" / "daemon" / A
    assert (got / f"{A}.ipynb").read_text() == "daemon's own"
    stamp = (got / "timestamp.txt").read_text()
    assert stamp.endswith(" UTC") and not stamp.startswith("2026-12-02 00:00:00")
    assert abs(time.mktime(time.strptime(stamp[:19], "%Y-%m-%d %H:%M:%S")) - time.timezone
               - before) < 120                               # when it was written, UTC
    assert "says it is 'daemon''s submission but is owned by 'bin': not collected" in said
    assert sorted(p.name for p in (course / "submitted").iterdir()) == ["daemon"]


@ROOT_ONLY
def test_the_refused_folder_alone_collects_nothing(tmp_path):
    course, exchange = tmp_path / "course", tmp_path / "exchange"
    course.mkdir()
    inbound = exchange / "pdl" / "inbound"
    inbound.mkdir(parents=True)
    _submit(inbound, "daemon", "2100-01-01 00:00:00.000000 UTC", 2, "bin's, as daemon")
    said = _collect(course, exchange)
    assert not (course / "submitted" / "daemon").exists()
    assert "owned by 'bin': not collected" in said


def test_the_course_configuration_installs_it():
    from traitlets.config import PyFileConfigLoader

    root = Path(__file__).resolve().parents[3] / "exercises"
    c = PyFileConfigLoader("nbgrader_config.py", path=str(root)).load_config()
    assert c.ExchangeFactory.collect is OwnedCollect
