"""What a kernel leaves in its folder is not kept (grader/grading/sandbox/workdir.py)."""
from __future__ import annotations

import os
import stat
import time

from grader.grading.sandbox import workdir


def test_what_the_kernel_made_or_changed_goes_and_what_was_there_stays(tmp_path):
    (tmp_path / "nb.ipynb").write_text("NB")
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "in.csv").write_text("1")
    (tmp_path / "kept.txt").write_text("same")
    before = workdir.snapshot(tmp_path)
    time.sleep(0.01)
    os.remove(tmp_path / "nb.ipynb")
    os.mkfifo(tmp_path / "nb.ipynb")                     # would block nbgrader's write
    (tmp_path / "data" / "new.txt").write_text("made")
    (tmp_path / "data" / "in.csv").write_text("changed")
    os.symlink("/etc/shadow", tmp_path / "shadow")
    (tmp_path / "many").mkdir()
    for i in range(500):
        (tmp_path / "many" / f"f{i}").write_text("x")
    assert workdir.restore(tmp_path, before) == 5   # pipe, new.txt, in.csv, shadow, many/
    assert sorted(str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*")) == ["data", "kept.txt"]


def test_keep_only_leaves_the_named_regular_files(tmp_path):
    (tmp_path / "nb.ipynb").write_text("NB")
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "a.txt").write_text("a")
    (tmp_path / "sub" / "b.txt").write_text("b")
    os.link(tmp_path / "sub" / "b.txt", tmp_path / "hard")
    os.symlink(tmp_path / "nb.ipynb", tmp_path / "link.ipynb")
    os.mkfifo(tmp_path / "pipe")
    workdir.keep_only(tmp_path, {"nb.ipynb", "sub/a.txt", "hard", "link.ipynb", "pipe"})
    left = {str(p.relative_to(tmp_path)): p.lstat() for p in tmp_path.rglob("*")}
    assert sorted(left) == ["nb.ipynb", "sub", "sub/a.txt"]
    assert all(stat.S_ISREG(st.st_mode) or stat.S_ISDIR(st.st_mode) for st in left.values())
    workdir.keep_only(tmp_path / "missing", {"x"})      # nothing there: nothing to do
