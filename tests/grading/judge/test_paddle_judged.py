"""Paddle answers graded through the judge, as `make grade` and the formgrader grade them.

The judge runs each test cell in a thread of its own, and answers the kernel's calls in more
threads; Paddle's dynamic-graph mode is per thread (grader/lab/core/threads.py), so before the
judge turned it on in each of them, every correct Paddle answer to assignment 6 scored
5/14. Every assignment that accepts Paddle answers (its answer cell sets ``FRAMEWORK``) is
graded here with Paddle answers: correct ones in two styles score full marks, each typical
mistake loses its points, cell by cell. tests/grading/judge/test_executor.py compares the sample
students judged and in the kernel (both frameworks: alice answers two assignments in
Paddle).
"""
from __future__ import annotations

import inspect
import re
import shutil
import subprocess
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import nbformat
import pytest

from grader.grading.authoring import fill_solutions, write
from grader.grading.config import load
from grader.grading.judge.executor import JudgedExecute
from tests.grading.nbgrader_cli import autograde_options, nbgrader
from tests.checks import a6_solutions as s6
from tests.checks.a7_paddle_solution import reference_paddle
from tests.checks.notebooks import reference

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[3]
EXERCISES = ROOT / "exercises"
PADDLE = 'FRAMEWORK = "paddle"\n\n\n'


def _src(fn, name: str, prefix: str = "") -> str:
    text = re.sub(r"^def \w+\(", f"def {name}(", inspect.getsource(fn), count=1)
    return prefix + text


def _ref(assignment: str) -> dict[str, str]:
    """The instructor's answers without nbgrader's markers."""
    return {k: "\n".join(l for l in v.splitlines() if "### " not in l)
            for k, v in reference(assignment).items()}


def _paddle_ref(assignment: str, first: str, **changes: str) -> dict[str, str]:
    answers = {**_ref(assignment), **changes}
    answers[first] = answers[first].replace('FRAMEWORK = "torch"', 'FRAMEWORK = "paddle"')
    assert 'FRAMEWORK = "paddle"' in answers[first]
    return answers


A6_FULL = {"test_scatter": 2.0, "test_replicate": 2.0, "test_parallel_apply": 3.0,
           "test_gather": 1.0, "test_reduce_gradients": 3.0, "test_training": 3.0}
A6 = {
    # the notebook's answers, Paddle chosen in the first answer cell
    "pd_reference": (_paddle_ref("a6_data_parallel", "scatter"), A6_FULL),
    # paddle.split by sizes, paddle.assign copies, a thread pool, a stacked weighted sum
    "pd_split": ({
        "scatter": PADDLE + _src(s6.scatter_paddle_split, "scatter"),
        "replicate": _src(s6.replicate_paddle_copies, "replicate"),
        "parallel_apply": "from concurrent.futures import ThreadPoolExecutor\n\n"
                          + _src(s6.parallel_apply_pool, "parallel_apply"),
        "gather": _src(s6.gather_paddle_concat, "gather"),
        "reduce_gradients": _src(s6.reduce_paddle_stacked, "reduce_gradients")}, A6_FULL),
    # paddle.chunk: only even splits; 10 rows on 3 devices raise
    "pd_chunk": (_paddle_ref("a6_data_parallel", "scatter",
                             scatter=PADDLE + _src(s6.scatter_paddle_chunk, "scatter")),
                 {**A6_FULL, "test_scatter": 0.0, "test_training": 0.0}),
    # a plain mean of uneven chunks' gradients
    "pd_plain_mean": (_paddle_ref("a6_data_parallel", "scatter",
                                  reduce_gradients=_src(s6.reduce_paddle_plain_mean,
                                                        "reduce_gradients")),
                      {**A6_FULL, "test_reduce_gradients": 0.0, "test_training": 0.0}),
}

A7_NO_ALL_GATHER = PADDLE + '''def ring_all_reduce(x, rank, world_size):
    p = world_size
    sizes = [len(c) for c in np.array_split(np.arange(x.shape[0]), p)]
    parts = list(paddle.split(x.clone(), sizes))
    right, left = (rank + 1) % p, (rank - 1) % p
    for s in range(p - 1):             # the reduce-scatter, and no all-gather after it
        i_send, i_recv = (rank - s) % p, (rank - s - 1) % p
        buf = paddle.zeros_like(parts[i_recv])
        if rank % 2 == 0:
            dist.send(parts[i_send], right)
            dist.recv(buf, left)
        else:
            dist.recv(buf, left)
            dist.send(parts[i_send], right)
        parts[i_recv] = parts[i_recv] + buf
    return paddle.concat(parts)
'''
A7_ALL_REDUCE = PADDLE + '''def ring_all_reduce(x, rank, world_size):
    dist.all_reduce(x)
    return x
'''
A7 = {
    "pd_reference": (_paddle_ref("a7_ring_allreduce", "ring_all_reduce"),
                     {"test_ring_all_reduce": 6.0}),
    "pd_split": ({"ring_all_reduce": _src(reference_paddle, "ring_all_reduce", PADDLE)},
                 {"test_ring_all_reduce": 6.0}),
    # the reduce-scatter alone: 1 of the value points, the send/recv point, no ring points
    "pd_no_all_gather": ({"ring_all_reduce": A7_NO_ALL_GATHER}, {"test_ring_all_reduce": 2.0}),
    "pd_all_reduce": ({"ring_all_reduce": A7_ALL_REDUCE}, {"test_ring_all_reduce": 0.0}),
}
CASES = {"a6_data_parallel": A6, "a7_ring_allreduce": A7}


def _nbgrader(course: Path, *args: str) -> subprocess.CompletedProcess:
    return nbgrader(course, *args, timeout=1200)


def _grade(assignment: str) -> tuple[Path, dict[str, dict[str, float]]]:

    course = Path(tempfile.mkdtemp(prefix="paddle-judged-"))
    shutil.copy(EXERCISES / "nbgrader_config.py", course)
    shutil.copytree(EXERCISES / "hidden", course / "hidden")
    shutil.copytree(EXERCISES / "source" / assignment, course / "source" / assignment)
    done = _nbgrader(course, "generate_assignment", assignment, "--force")
    assert done.returncode == 0, done.stderr[-3000:]
    released = nbformat.read(course / "release" / assignment / f"{assignment}.ipynb", as_version=4)
    for student, (answers, _) in CASES[assignment].items():
        write(fill_solutions(released, answers),
              course / "submitted" / student / assignment / f"{assignment}.ipynb")
    _nbgrader(course, "autograde", assignment, "--force",
              *autograde_options(JudgedExecute, course / "trace", cell_timeout_s=120))
    with load(course).gradebook() as gb:
        cells = {sub.student.id: {g.name: float(g.score) for nb in sub.notebooks for g in nb.grades}
                 for sub in gb.find_assignment(assignment).submissions}
    return course, cells


@pytest.fixture(scope="module")
def graded():
    with ThreadPoolExecutor(len(CASES)) as pool:
        jobs = {a: pool.submit(_grade, a) for a in CASES}
        results = {a: f.result() for a, f in jobs.items()}
    yield {a: cells for a, (_, cells) in results.items()}, {a: c for a, (c, _) in results.items()}
    for course, _ in results.values():
        shutil.rmtree(course, ignore_errors=True)


def _feedback(course: Path, student: str, assignment: str) -> str:
    nb = nbformat.read(course / "autograded" / student / assignment / f"{assignment}.ipynb",
                       as_version=4)
    return "\n".join(str(o.get("text", "")) + str(o.get("evalue", ""))
                     for c in nb.cells for o in c.get("outputs", []))


@pytest.mark.parametrize("assignment, student", [(a, s) for a in CASES for s in CASES[a]])
def test_paddle_answers_judged_score_what_they_should_cell_by_cell(graded, assignment, student):
    cells, courses = graded
    want = CASES[assignment][student][1]
    got = cells[assignment].get(student)
    assert got == want, (f"{assignment} {student}: {got} != {want}\n"
                         + _feedback(courses[assignment], student, assignment)[-4000:])


def test_no_judged_paddle_cell_says_static_graph_mode(graded):
    """The symptom of the per-thread mode: messages that blame the student for the judge."""
    _, courses = graded
    for assignment, students in CASES.items():
        for student in students:
            text = _feedback(courses[assignment], student, assignment)
            for symptom in ("dynamic graph mode", "JudgeObject", "must be list of Tensors"):
                assert symptom not in text, (assignment, student, symptom)
