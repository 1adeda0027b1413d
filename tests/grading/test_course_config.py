"""A broken course.toml stops every grading path, not only `make grade` (issue 20)."""
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.grading.nbgrader_cli import nbgrader

EXERCISES = Path(__file__).resolve().parents[2] / "exercises"


@pytest.fixture
def broken_course(tmp_path):
    course = tmp_path / "course"
    course.mkdir()
    shutil.copy(EXERCISES / "nbgrader_config.py", course)
    (course / "course.toml").write_text("[limits]\ncell_timout_s = 30\n")   # a typo
    return course


def test_nbgrader_by_hand_stops_on_a_typo_in_course_toml(broken_course):
    done = nbgrader(broken_course, "autograde", "a1_independent_ops", timeout=300)
    assert done.returncode != 0
    said = done.stdout + done.stderr
    assert "course.toml" in said and "cell_timout_s" in said and "nbgrader stops here" in said


def test_loading_the_config_raises_systemexit_not_an_exception(broken_course):
    """traitlets catches an Exception from a config file and goes on with defaults; only a
    BaseException that is not one stops it."""
    code = ("import traitlets.config.loader as L; "
            f"L.PyFileConfigLoader('nbgrader_config.py', path={str(broken_course)!r}).load_config()")
    done = subprocess.run([sys.executable, "-c", code], cwd=broken_course,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 1 and "nbgrader stops here" in done.stderr
    assert "Traceback" not in done.stderr     # a SystemExit's message, not a crash
