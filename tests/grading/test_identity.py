"""One student, one identity; every process bounded; nothing left behind (issue 19, the sandbox's
part). One small class graded once, through the real pipeline (``grade_course``, what
``make grade`` runs) with the sandbox and ONE worker, so that successive students share a slot:

- ``k1_writer`` and ``k2_reader`` (assignment 1, alice's correct answers) each put a secret of
  their own in the user and session keyrings and look for the other's: before, the second one
  read the first one's secret (same uid, no user namespace, no filter). Now each kernel is in a
  user namespace of its own under the seccomp filter: ``add_key``, ``keyctl`` and ``ptrace``
  answer EPERM, neither sees anything, and both keep 8/8;
- ``r_keyring`` (assignment 7) passes the ranks' tensors through the user keyring with zero
  messages (it scored 3/6 so): now its ranks are refused EPERM and it scores 0/6, the
  zero-message answer's score, with the refusal in its feedback;
- ``r_hang`` (assignment 7): ranks that never return, stopped at the check's timeout; after
  the class no ``course-launch-*`` or ``course-rank-*`` folder is left in the temporary folder
  of the grading (nor a rank's control group);
- ``alice``'s assignment 7 (honest) keeps 6/6.
Needs root and bubblewrap (skipped without them, failed when ``CI`` is set)."""
from __future__ import annotations

import ast
import os
import shutil
import tempfile
from pathlib import Path

import nbformat
import pytest

from grader.grading.config import SandboxConfig
from grader.grading.sandbox import bounds, setup
from tests.grading.attacks.a7_keyring import RING_KEYRING, SYSCALLS

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
EXERCISES = ROOT / "exercises"
A1, A7 = "a1_independent_ops", "a7_ring_allreduce"

KERNEL = '''
_mine = b"SECRET-OF-{student}"
_seen = {{"add_key": _sys(ADD_KEY, b"user", b"course-note-{student}", _mine, len(_mine), ctypes.c_int(-4)),
         "add_key_session": _sys(ADD_KEY, b"user", b"course-note-{student}", _mine, len(_mine), ctypes.c_int(-3)),
         "keyctl": _sys(KEYCTL, 0, ctypes.c_int(-3), 0), "ptrace": _sys(PTRACE, 0, 0, 0, 0),
         "found": []}}
for _other in ("k1_writer", "k2_reader"):
    for _ring in (-4, -3, -5):           # user, session, user-session keyrings
        _kid = _sys(KEYCTL, 10, ctypes.c_int(_ring), b"user", f"course-note-{{_other}}".encode(), 0)
        if _kid > 0:
            _buf = ctypes.create_string_buffer(200)
            _n = _sys(KEYCTL, 11, ctypes.c_long(_kid), _buf, 200)
            _seen["found"].append(_buf.raw[:max(_n, 0)].decode(errors="replace"))
print("KEYRING", _seen)
'''

RING_HANG = '''FRAMEWORK = "torch"


def ring_all_reduce(x, rank, world_size):
    import time
    time.sleep(3600)
    return x
'''


def _answer(course: Path, student: str, assignment: str, answers: dict[str, str],
            extra: str | None = None) -> None:
    nb = nbformat.read(EXERCISES / "submitted" / "alice" / assignment / f"{assignment}.ipynb",
                       as_version=4)
    for c in nb.cells:
        gid = c.metadata.get("nbgrader", {}).get("grade_id")
        if gid in answers:
            c.source = answers[gid]
    if extra:
        nb.cells.insert(2, nbformat.v4.new_code_cell(extra))
    out = course / "submitted" / student / assignment
    out.mkdir(parents=True)
    nbformat.write(nb, out / f"{assignment}.ipynb")


def _outputs(course: Path, student: str, assignment: str) -> str:
    nb = nbformat.read(course / "autograded" / student / assignment / f"{assignment}.ipynb",
                       as_version=4)
    return "\n".join(o.get("text", "") or str(o.get("evalue", "")) + "\n".join(o.get("traceback", []))
                     for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", []))


def _leftovers(root: Path) -> list[str]:
    return sorted(str(p) for p in root.rglob("*")
                  if p.name.startswith(("course-launch-", "course-rank-")))


@pytest.fixture(scope="module")
def graded():
    problem = setup.check(SandboxConfig())
    if problem:
        if os.environ.get("CI"):
            pytest.fail(problem)
        pytest.skip(problem)
    from grader.grading.run.pipeline import grade_course

    tmp = Path(tempfile.mkdtemp(prefix="identity-tmp-"))    # the grading's temporary folder
    course = Path(tempfile.mkdtemp(prefix="identity-course-"))
    shutil.copy(EXERCISES / "nbgrader_config.py", course)
    shutil.copytree(EXERCISES / "hidden", course / "hidden")
    for a in (A1, A7):
        shutil.copytree(EXERCISES / "source" / a, course / "source" / a)
    for student in ("k1_writer", "k2_reader"):
        _answer(course, student, A1, {}, SYSCALLS + KERNEL.format(student=student))
    _answer(course, "r_keyring", A7, {"ring_all_reduce": RING_KEYRING})
    _answer(course, "r_hang", A7, {"ring_all_reduce": RING_HANG})
    shutil.copytree(EXERCISES / "submitted" / "alice" / A7, course / "submitted" / "alice" / A7)
    old = os.environ.get("TMPDIR")
    os.environ["TMPDIR"] = str(tmp)
    tempfile.tempdir = None
    try:
        run = grade_course(course, cell_timeout=120, notebook_timeout=600, memory_gb=2.5,
                           workers=1, verbose=False)
    finally:
        if old is None:
            os.environ.pop("TMPDIR", None)
        else:
            os.environ["TMPDIR"] = old
        tempfile.tempdir = None
    yield course, tmp, {(o.student, o.assignment): o for o in run.outcomes}
    shutil.rmtree(course, ignore_errors=True)
    shutil.rmtree(tmp, ignore_errors=True)


def _keyring_line(text: str) -> dict:
    line = next(l for l in text.splitlines() if l.startswith("KEYRING "))
    return ast.literal_eval(line[len("KEYRING "):])


def test_successive_students_on_one_slot_share_no_keyring(graded):
    course, _, outcomes = graded
    texts = {s: _outputs(course, s, A1) for s in ("k1_writer", "k2_reader")}
    for student, text in texts.items():
        seen = _keyring_line(text)
        assert seen["add_key"] == seen["add_key_session"] == -1, seen   # EPERM
        assert seen["keyctl"] == -1 and seen["ptrace"] == -1, seen
        assert seen["found"] == [], seen
        other = "k2_reader" if student == "k1_writer" else "k1_writer"
        assert f"SECRET-OF-{other}" not in text
        o = outcomes[(student, A1)]
        assert (o.status, o.score) == ("graded", 8.0), o     # honest answers keep their score


def test_an_a7_answer_through_the_keyring_scores_what_zero_messages_score(graded):
    course, _, outcomes = graded
    o = outcomes[("r_keyring", A7)]
    assert (o.status, o.score, o.max_score) == ("graded", 0.0, 6.0), o
    text = _outputs(course, "r_keyring", A7)
    assert "keyring refused: {'add_key': -1, 'keyctl': -1, 'ptrace': -1}" in text, text[-2000:]


def test_the_honest_a7_answer_keeps_full_marks_in_the_sandbox(graded):
    o = graded[2][("alice", A7)]
    assert (o.status, o.score) == ("graded", 6.0), o


def test_no_rank_or_launch_folder_nor_control_group_is_left_after_a_hanging_rank(graded):
    course, tmp, outcomes = graded
    o = outcomes[("r_hang", A7)]
    assert (o.status, o.score) == ("graded", 0.0), o
    assert "still waiting" in _outputs(course, "r_hang", A7)      # the hang really happened
    assert _leftovers(tmp) == []
    groups = []
    v1, v2 = bounds._mounts()
    own = bounds._own()
    for c in ("memory", "pids"):
        if c in v1:
            parent = bounds._below(*v1[c], own.get(c, "/"))
            groups += [d.name for d in parent.iterdir() if d.name.startswith("course-rank-")
                       and not os.path.exists(f"/proc/{d.name.rsplit('-', 1)[-1]}")]
    assert groups == []          # (a group of a rank running now, elsewhere, has a live pid)
