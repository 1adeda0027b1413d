"""hub/run.py: the state directory it prepares and the course it offers (no hub started)."""
from __future__ import annotations

import stat

import nbformat
import pytest

from hub.demo_course import ASSIGNMENT, NOTEBOOK, write_course
from hub.run import course_id_of, prepare


def _course(tmp_path, config: str | None = None):
    course = tmp_path / "course"
    nb = course / "source" / "a1_x" / "a1_x.ipynb"
    nb.parent.mkdir(parents=True)
    nbformat.write(nbformat.v4.new_notebook(), nb)
    for generated in ("release/a1_x", "autograded/s/a1_x", "submitted/s/a1_x"):
        (course / generated).mkdir(parents=True)
    (course / "gradebook.db").write_text("not a database")
    if config is not None:
        (course / "nbgrader_config.py").write_text(config)
    return course


def test_course_id_is_the_one_the_courses_own_config_sets(tmp_path):
    course = _course(tmp_path, "c = get_config()\nc.CourseDirectory.course_id = 'parallel-dl'\n")
    assert course_id_of(course) == "parallel-dl"


def test_course_id_falls_back_when_the_course_sets_none(tmp_path):
    assert course_id_of(_course(tmp_path, "c = get_config()\n"), default="pdl") == "pdl"
    assert course_id_of(tmp_path / "missing", default="pdl") == "pdl"


def test_instructor_gets_the_course_without_nbgraders_generated_state(tmp_path):
    course = _course(tmp_path)
    (dest,) = prepare(tmp_path / "state", course, ["teacher"])
    assert dest == tmp_path / "state" / "home" / "teacher" / "course"
    assert (dest / "source" / "a1_x" / "a1_x.ipynb").exists()
    for generated in ("release", "autograded", "submitted", "gradebook.db"):
        assert not (dest / generated).exists(), generated


def test_a_restart_keeps_the_instructors_course_directory(tmp_path):
    course = _course(tmp_path)
    (dest,) = prepare(tmp_path / "state", course, ["teacher"])
    edited = dest / "source" / "a1_x" / "a1_x.ipynb"
    edited.write_text("instructor's edit")
    prepare(tmp_path / "state", course, ["teacher"])
    assert edited.read_text() == "instructor's edit"


def test_a_course_without_assignments_gets_the_demo_assignment(tmp_path):
    empty = tmp_path / "empty"
    (empty / "source").mkdir(parents=True)
    (dest,) = prepare(tmp_path / "state", empty, ["teacher"])
    nb = nbformat.read(dest / "source" / ASSIGNMENT / NOTEBOOK, as_version=4)
    graded = [c for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade")]
    assert graded and all(c.metadata.nbgrader["points"] > 0 for c in graded)


def test_the_exchange_is_writable_by_every_user(tmp_path):
    prepare(tmp_path / "state", tmp_path / "missing", ["teacher"])
    mode = (tmp_path / "state" / "exchange").stat().st_mode
    assert mode & stat.S_IWOTH and mode & stat.S_IXOTH


def test_the_demo_assignments_answer_passes_its_own_check(tmp_path):
    """The demo assignment is gradeable: its solution satisfies its test cell."""
    nb = nbformat.read(write_course(tmp_path), as_version=4)
    scope: dict = {}
    for cell in nb.cells:
        if cell.cell_type == "code":
            exec(cell.source, scope)  # raises if the check fails
    assert scope["squares"](3) == [0, 1, 4]


@pytest.mark.slow
def test_demo_students_are_in_the_gradebook_before_anyone_submits(tmp_path):
    from nbgrader.api import Gradebook

    (dest,) = prepare(tmp_path / "state", _course(tmp_path), ["teacher"], ["ann", "bob"])
    with Gradebook(f"sqlite:///{dest / 'gradebook.db'}") as gb:
        assert sorted(s.id for s in gb.students) == ["ann", "bob"]
    assert not (dest / ".demo_students.csv").exists()


def _stand_in(tmp_path, *, child_lives: float):
    """A Hub whose 'hub' process starts a child that outlives it by ``child_lives`` s (as
    a user's kernel ends shortly after its server), then ends."""
    import subprocess
    import sys

    from hub.run import Hub

    code = ("import subprocess, sys, time\n"
            f"subprocess.Popen([sys.executable, '-c', 'import time; time.sleep({child_lives})'])\n"
            "time.sleep(30)\n")
    proc = subprocess.Popen([sys.executable, "-c", code])
    h = Hub(url="", root=tmp_path, password="", instructors=[], students=[], course_id="c",
            process=proc, log=tmp_path / "log")
    import time
    for _ in range(100):                  # until the child is seen
        if len(h.processes()) == 2:
            break
        time.sleep(0.05)
    assert len(h.processes()) == 2
    return h


def test_stop_waits_for_what_ends_on_its_own_and_kills_only_what_does_not(tmp_path):
    """A CI run found two kernels still ending right after the hub stopped: ``stop`` gives
    them ``grace`` seconds; what is still running then is killed and named."""
    h = _stand_in(tmp_path, child_lives=1.5)
    assert h.stop(grace=10) == []                  # the child ended on its own
    h = _stand_in(tmp_path, child_lives=120)
    killed = h.stop(grace=1)
    assert len(killed) == 1 and "time.sleep(120)" in killed[0], killed


def test_a_course_with_a_private_overlay_is_refused_by_the_one_os_user_hub(tmp_path):
    course = _course(tmp_path)
    private = tmp_path / "private"
    (private / "hidden").mkdir(parents=True)
    (course / "course.toml").write_text(f'[overlay]\nfolder = "{private}"\n')
    with pytest.raises(RuntimeError, match="a student's kernel could read it"):
        prepare(tmp_path / "state", course, ["teacher"])
    assert not (tmp_path / "state").exists()
