"""``python -m grader.handin``: the zip a student outside the hub hands in, and what it
refuses. (Through the instructor's collect step, which takes whose and when from the
platform, and ``make grade``'s pipeline: tests/grading/submission/test_collect.py.)"""
import json
import os
import re
import subprocess
import sys
import zipfile
from pathlib import Path

import nbformat
import pytest

from grader.grading.student import student_version
from grader.handin import CLAIM, HandinError, handin, main, member_name

ROOT = Path(__file__).resolve().parent.parent
A1, A2 = "a1_independent_ops", "a2_small_ops"


def _released(tmp_path: Path, assignment: str = A1, name: str | None = None) -> Path:
    nb = student_version(nbformat.read(ROOT / "exercises" / "source" / assignment
                                       / f"{assignment}.ipynb", as_version=4))
    path = tmp_path / (name or f"{assignment}.ipynb")
    nbformat.write(nb, path)
    return path


def test_the_zip_holds_the_notebook_under_a_path_that_states_the_claim(tmp_path):
    path = _released(tmp_path)
    done = handin(A1, "ann.lee", notebook=path, now=1_796_170_000)   # 2026-12-02 00:06:40 UTC
    assert done.zip_path == tmp_path / f"{A1}-ann.lee-20261202T000640Z.zip"
    with zipfile.ZipFile(done.zip_path) as z:
        assert z.namelist() == [member_name("ann.lee", A1, "20261202T000640Z", f"{A1}.ipynb")]
        assert z.read(z.namelist()[0]) == path.read_bytes()
    # the claim the instructor's collect step compares with the platform's owner
    m = CLAIM.match(done.member)
    assert m and (m["student"], m["assignment"], m["time"], m["notebook"]) == (
        "ann.lee", A1, "20261202T000640Z", f"{A1}.ipynb")
    # an id the grader could not use is still read as a claim (and so compared)
    assert CLAIM.match(f"x/handin/student=Ann Lee/assignment={A1}/time=20261202T000640Z/n.ipynb")
    # a released notebook's answer cells all hold the stub; the summary says so
    assert done.answers == 2 and done.stubs == ["time_work", "experiment"]
    assert "2 of 2 answer cells still hold" in done.summary()


def test_a_downloaded_copy_with_another_file_name_is_handed_in_under_the_released_name(tmp_path):
    path = _released(tmp_path, name=f"{A1} (1).ipynb")
    done = handin(A1, "bob", notebook=path, out_dir=tmp_path / "out")
    assert done.zip_path.parent == tmp_path / "out" and done.member.endswith(f"/{A1}.ipynb")


@pytest.mark.parametrize("student, says", [
    ("", "the student id is empty"),
    ("ann lee", "is not letters, digits"),
    ("../bob", "is not letters, digits"),
    ("=cmd()", "is not letters, digits"),
    ("x" * 65, "longer than 64"),
])
def test_a_student_id_the_grader_cannot_file_is_refused(tmp_path, student, says):
    path = _released(tmp_path)
    with pytest.raises(HandinError, match=re.escape(says)):
        handin(A1, student, notebook=path)
    assert not list(tmp_path.glob("*.zip"))


def test_what_it_cannot_hand_in_is_refused_saying_what_to_do(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    _released(tmp_path, A2)
    with pytest.raises(HandinError, match=rf"no notebook {A1}\.ipynb .*this folder has {A2}\.ipynb"):
        handin(A1, "ann")
    with pytest.raises(HandinError, match=rf"is the notebook of {A2}, not of {A1}"):
        handin(A1, "ann", notebook=f"{A2}.ipynb")
    (tmp_path / "broken.ipynb").write_text('{"cells": [')
    with pytest.raises(HandinError, match="is not a notebook"):
        handin(A1, "ann", notebook="broken.ipynb")
    nbformat.write(nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("1 + 1")]),
                   tmp_path / "mine.ipynb")
    with pytest.raises(HandinError, match="not one of the course's exercise notebooks"):
        handin(A1, "ann", notebook="mine.ipynb")
    big = tmp_path / "big.ipynb"
    big.write_bytes(b" " * (17 * 2**20))
    with pytest.raises(HandinError, match="17.0 MB; the grader reads notebooks of at most 16 MB"):
        handin(A1, "ann", notebook=big)
    assert not list(tmp_path.glob("*.zip"))


def test_the_command_exits_2_with_the_reason_and_is_skipped_while_grading(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("NBGRADER_EXECUTION", raising=False)
    assert main([A1, "--student", "ann"]) == 2
    assert "not handed in: no notebook" in capsys.readouterr().err
    _released(tmp_path)
    assert main([A1, "--student", "ann"]) == 0
    said = capsys.readouterr().out
    assert said.startswith(f"handed in {A1}.ipynb (saved ") and "Upload this zip" in said
    monkeypatch.setenv("NBGRADER_EXECUTION", "autograde")   # a `!` cell left in the notebook
    assert main([A1, "--student", "ann"]) == 0
    assert "skipped while grading" in capsys.readouterr().out
    assert len(list(tmp_path.glob("*.zip"))) == 1


def test_it_runs_as_a_module_with_the_standard_library_and_grader_only(tmp_path):
    """A student's environment has no nbgrader: the command must not import it."""
    _released(tmp_path)
    code = ("import sys, runpy; sys.modules['nbgrader'] = None; sys.modules['nbformat'] = None; "
            "sys.argv = ['handin', 'a1_independent_ops', '--student', 'ann']; "
            "runpy.run_module('grader.handin', run_name='__main__')")
    env = {k: v for k, v in os.environ.items() if k != "NBGRADER_EXECUTION"}
    done = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True,
                          text=True, timeout=120, env=dict(env, PYTHONPATH=str(ROOT)))
    assert done.returncode == 0, done.stderr
    assert len(list(tmp_path.glob(f"{A1}-ann-*.zip"))) == 1
    json.loads(zipfile.ZipFile(next(tmp_path.glob("*.zip"))).read(
        zipfile.ZipFile(next(tmp_path.glob("*.zip"))).namelist()[0]))


def test_every_assignments_released_notebook_is_accepted_under_its_own_name_only(tmp_path):
    names = sorted(p.name for p in (ROOT / "exercises" / "source").iterdir() if p.is_dir())
    assert len(names) >= 11
    for name in names:
        path = _released(tmp_path, name)
        assert handin(name, "ann", notebook=path, out_dir=tmp_path / "out").answers >= 1, name
        other = names[(names.index(name) + 1) % len(names)]
        with pytest.raises(HandinError, match=f"is the notebook of {name}, not of {other}"):
            handin(other, "ann", notebook=path)
