"""The book build: its execution cache is cleared when what chapters run changes; what its
pages write with tempfile is removed after it."""
from pathlib import Path

import pytest

from grader.build import code_fingerprint


def _tree(root):
    (root / "grader").mkdir()
    (root / "grader" / "lab.py").write_text("x = 1\n")
    (root / "chapters" / "scripts").mkdir(parents=True)
    (root / "chapters" / "scripts" / "ddp_torch.py").write_text("print('train')\n")
    (root / "constraints.txt").write_text("torch==2.13.0\n")


def test_a_change_to_a_script_a_chapter_launches_changes_the_fingerprint(tmp_path):
    _tree(tmp_path)
    before = code_fingerprint(tmp_path)
    assert code_fingerprint(tmp_path) == before                      # stable
    (tmp_path / "chapters" / "scripts" / "ddp_torch.py").write_text("print('other')\n")
    assert code_fingerprint(tmp_path) != before


def test_a_change_to_the_grader_package_changes_the_fingerprint(tmp_path):
    _tree(tmp_path)
    before = code_fingerprint(tmp_path)
    (tmp_path / "grader" / "lab.py").write_text("x = 2\n")
    assert code_fingerprint(tmp_path) != before


def test_the_build_leaves_the_figures_to_the_kernels_inline_backend():
    """A backend chosen for the test process (grading and GPU-cell runs choose "Agg")
    must not reach the book's kernels: the pages would show no figure."""
    from grader.build import build_env
    env = build_env({"MPLBACKEND": "Agg", "PATH": "/usr/bin"})
    assert "MPLBACKEND" not in env
    assert env["COURSE_BOOK_BUILD"] == "1" and env["PATH"].endswith("/usr/bin")


def test_the_pages_temporary_files_go_into_a_folder_removed_after_the_build(tmp_path, monkeypatch):
    """torchrun keeps a torchelastic_* folder per launch and pages write traces with
    tempfile: in TMPDIR, a folder of the build's own, gone when the build ends, failed too."""
    import subprocess

    from grader import build as b

    seen = []

    def fake_run(cmd, env, **kw):
        seen.append(env["TMPDIR"])
        (Path(env["TMPDIR"]) / "torchelastic_x" / "attempt_0").mkdir(parents=True)
        return subprocess.CompletedProcess(cmd, len(seen) - 1, "", "")

    monkeypatch.setattr(b.subprocess, "run", fake_run)
    monkeypatch.setattr(b, "refresh_cache", lambda root, builddir: False)
    b.build(tmp_path, quiet=True)                      # succeeds
    with pytest.raises(subprocess.CalledProcessError):
        b.build(tmp_path, quiet=True)                  # fails
    assert len(seen) == 2 and seen[0] != seen[1]
    for folder in seen:
        assert Path(folder).name.startswith("course-book-tmp-") and not Path(folder).exists()


def test_a_second_build_of_the_same_book_waits_for_the_first(tmp_path, monkeypatch, capsys):
    """Two builds of one book would run its pages at once in the same folders (two launches
    in one chapters/_runs): the second waits, and says so."""
    import subprocess
    import threading
    import time

    from grader import build as b

    ran = []
    monkeypatch.setattr(b.subprocess, "run",
                        lambda cmd, env, **kw: ran.append(time.monotonic())
                        or subprocess.CompletedProcess(cmd, 0, "", ""))
    monkeypatch.setattr(b, "refresh_cache", lambda root, builddir: False)
    with b.one_build_at_a_time(tmp_path):              # a first build, still running
        second = threading.Thread(target=b.build, args=(tmp_path,), kwargs={"quiet": True})
        second.start()
        time.sleep(1.0)
        assert not ran and second.is_alive()           # waits, runs nothing meanwhile
        released = time.monotonic()
    second.join(30)
    assert len(ran) == 1 and ran[0] >= released
    assert f"another build of {tmp_path} is running: waiting" in capsys.readouterr().err
    other = tmp_path / "other-book"
    other.mkdir()
    with b.one_build_at_a_time(tmp_path):              # another book does not wait
        b.build(other, quiet=True)
    assert len(ran) == 2
