"""Writes the sample submissions of assignment 10 into ``exercises/submitted/``:
``python -m tests.checks.samples_a10`` from the repository root (after changing the source
notebook). Each is the *released* notebook (nbgrader generate_assignment, in a temporary
course) with its solution cells filled in from ``a10_solutions``;
``tests/grading/test_a10_graded.py`` grades alice and bob through the real pipeline, and
``test_a10_tensor_parallel`` grades each answer here (carol's among them) by name."""
import shutil

from tests.checks import a10_solutions as s10
from tests.checks import samples_a5_a8 as samples

A = "a10_tensor_parallel"
SCORES = {"alice": (4, 6), "bob": (3, 3), "carol": (0, 0)}   # (f_g, tp_mlp) as graded


def main() -> None:
    course = samples.released_course(A)
    # alice: correct, in Paddle (PyLayers, slices)
    samples.put("alice", A, {"f_g": s10.FG_PADDLE.strip("\n"), "tp_mlp": s10.MLP_PADDLE.strip("\n")})
    # bob: f's backward passes the gradient through (no all-reduce), and b2 inside g
    samples.put("bob", A, {"f_g": s10.FG_F_IDENTITY_BACKWARD.strip("\n"),
                           "tp_mlp": s10.MLP_BIAS_BEFORE.strip("\n")})
    # carol: f and g left as released; tp_mlp computes the whole MLP on every rank
    samples.put("carol", A, {"tp_mlp": s10.MLP_ALL_LOCAL.strip("\n")})
    shutil.rmtree(course, ignore_errors=True)
    print("sample submissions written to", samples.SUB)


if __name__ == "__main__":
    main()
