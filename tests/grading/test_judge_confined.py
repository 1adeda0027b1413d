"""The judge holds no power a student can borrow (issue 19), through the real pipeline.

One class, graded by :func:`grader.grading.run.pipeline.grade_course` with the sandbox (root
and bubblewrap: skipped without them, failed when ``CI`` is set): alice's assignment 1 and 7
(honest: 8 of 8, 6 of 6; a7's ranks start through the judge's rank gate), a blank a1, and
four attacks on a1 aimed at the judge, each starting from the blank answer (wrong
``time_work``, experiment not done: 0 of 8) and each with an observable that cannot pass by
accident:

- ``gadget``: the ndarray ``fill``/``tofile`` write of the first report (an "array" of the
  clock's ``read``, a 0-d object array, exported as a handle): the marker file must not
  appear (tests/grading/judge/test_allow.py shows the same payload writing it through a
  channel without the allow-list);
- ``tensor_import``: ``torch.py`` and ``paddle.py`` that write markers when imported lie in
  the course folder (the grading process's working directory); the answer returns real
  torch and paddle tensors, which the judge decodes as tensors: no marker may appear;
- ``not_allowed``: ``len(fn)`` on the judge's operation: the cell's output names the refusal;
- ``symlink``: the kernel puts a link to a listener outside the sandbox where the channel's
  socket should be: the listener must get no connection.

No attack scores above the blank notebook, and alice scores exactly her marks.
"""
from __future__ import annotations

import json
import os
import shutil
import socket
import tempfile
import threading
from pathlib import Path

import nbformat
import pytest

from grader.grading.config import SandboxConfig
from grader.grading.sandbox import setup

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
EXERCISES = ROOT / "exercises"
A1, A7 = "a1_independent_ops", "a7_ring_allreduce"

HEAD = 'FRAMEWORK = "torch"\n\n\ndef time_work(torch, clock, fn, *args, warmup=1, repeats=3):\n'
NOT_DONE = "def independent_ops_experiment(torch, clock, x, n=8):\n    raise NotImplementedError\n"


def _body(code: str) -> str:
    return HEAD + "".join(f"    {line}\n" for line in code.strip().splitlines()) + "    return 0.02\n"


def _attacks(marker_dir: Path, listener: Path) -> dict[str, tuple[str, str]]:
    """student -> (time_work cell, code of an extra cell run before the tests)."""
    gadget = _body(f"""
for target in (clock, fn, torch):
    try:
        ch = object.__getattribute__(target, "_channel")
        arr = ch.request("array", object.__getattribute__(target, "_handle"))
        arr.fill("import os; os.system('id > {marker_dir}/gadget-ran')")
        arr.tofile("{marker_dir}/gadget-wrote", sep="\\n", format="%s")
    except BaseException:
        pass""")
    tensors = _body("""
import torch as _t
try:
    import paddle as _p
    _x = _p.zeros([1])
except Exception:
    _x = None
return _t.zeros(1), _x""")
    not_allowed = _body("len(fn)")
    symlink = ("import os, time\nimport grader.grading.judge.channel as _c\n"
               "def _link(path, timeout):\n"
               f"    os.symlink({str(listener)!r}, path)\n"
               "    time.sleep(5)\n"
               "    raise OSError('no channel today')\n"
               "_c.accept_one = _link\n")
    return {"gadget": (gadget, ""), "tensor_import": (tensors, ""),
            "not_allowed": (not_allowed, ""), "symlink": (_body(""), symlink)}


def _notebook(course: Path, student: str, time_work: str, extra: str) -> None:
    nb = nbformat.read(EXERCISES / "submitted" / "alice" / A1 / f"{A1}.ipynb", as_version=4)
    for c in nb.cells:
        gid = c.metadata.get("nbgrader", {}).get("grade_id")
        if gid == "time_work":
            c.source = time_work
        elif gid == "experiment":
            c.source = NOT_DONE
    if extra:
        nb.cells.insert(2, nbformat.v4.new_code_cell(extra))
    out = course / "submitted" / student / A1
    out.mkdir(parents=True)
    nbformat.write(nb, out / f"{A1}.ipynb")


@pytest.fixture(scope="module")
def graded():
    problem = setup.check(SandboxConfig())
    if problem:
        if os.environ.get("CI"):
            pytest.fail(problem)
        pytest.skip(problem)
    from grader.grading.run.pipeline import grade_course

    course = Path(tempfile.mkdtemp(prefix="confined-"))
    markers = Path(tempfile.mkdtemp(prefix="confined-markers-", dir="/tmp"))
    markers.chmod(0o777)                  # anyone may write here: the judge's uid too
    listen_dir = Path(tempfile.mkdtemp(prefix="confined-listen-", dir="/tmp"))
    listen_dir.chmod(0o755)
    listener = listen_dir / "listener.sock"
    srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    srv.bind(str(listener))
    os.chmod(listener, 0o777)
    srv.listen(8)
    connections: list = []

    def listen() -> None:
        while True:
            try:
                conn, _ = srv.accept()
            except OSError:
                return
            connections.append(conn)

    threading.Thread(target=listen, daemon=True).start()
    shutil.copy(EXERCISES / "nbgrader_config.py", course)
    shutil.copytree(EXERCISES / "hidden", course / "hidden")
    for a in (A1, A7):
        shutil.copytree(EXERCISES / "source" / a, course / "source" / a)
        shutil.copytree(EXERCISES / "submitted" / "alice" / a, course / "submitted" / "alice" / a)
    for module in ("torch", "paddle"):   # what the first report's gadget wrote there
        (course / f"{module}.py").write_text(
            f"open({str(markers / (module + '-imported'))!r}, 'w').write('imported')\n"
            "raise ImportError('a student file')\n")
    _notebook(course, "blank", _body(""), "")
    for name, (code, extra) in _attacks(markers, listener).items():
        _notebook(course, name, code, extra)
    old = os.getcwd()
    os.chdir(course)          # as `make grade`: the course folder is the working directory
    try:
        run = grade_course(course, workers=2, verbose=False)
    finally:
        os.chdir(old)
        srv.close()
    yield run, course, markers, connections
    for p in (course, markers, listen_dir):
        shutil.rmtree(p, ignore_errors=True)


def _said(course: Path, student: str) -> str:
    nb = nbformat.read(course / "autograded" / student / A1 / f"{A1}.ipynb", as_version=4)
    return json.dumps([c.get("outputs", []) for c in nb.cells])


def test_honest_alice_keeps_her_marks_and_a7_ranks_start_through_the_gate(graded):
    run, _, _, _ = graded
    assert run.find("alice", A1).score == 8, run.find("alice", A1)
    assert run.find("alice", A7).score == 6, run.find("alice", A7)


@pytest.mark.parametrize("student", ["gadget", "tensor_import", "not_allowed", "symlink"])
def test_no_attack_on_the_judge_scores_above_the_blank_notebook(graded, student):
    run, _, _, _ = graded
    assert run.find("blank", A1).score == 0
    assert run.find(student, A1).score <= run.find("blank", A1).score, run.find(student, A1)


def test_the_ndarray_gadget_writes_nothing_and_no_student_file_is_imported(graded):
    _, _, markers, _ = graded
    assert sorted(os.listdir(markers)) == []


def test_an_operation_outside_the_allow_list_is_refused_in_the_feedback(graded):
    _, course, _, _ = graded
    assert "does not allow len()" in _said(course, "not_allowed")


def test_a_link_where_the_socket_should_be_reaches_no_listener(graded):
    _, course, _, connections = graded
    assert connections == []
    assert "not a socket" in _said(course, "symlink")
