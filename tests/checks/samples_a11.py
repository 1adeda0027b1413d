"""Writes the sample submissions of assignment 11 into ``exercises/submitted/``:
``python -m tests.checks.samples_a11`` from the repository root (after changing the source
notebook). Each is the *released* notebook (nbgrader generate_assignment, in a temporary
course) with its solution cells filled in from ``a11_solutions``;
``test_a11_ring_attention`` checks the scores they get."""
import shutil

from tests.checks import a11_solutions as s11
from tests.checks import samples_a5_a8 as samples

A = "a11_ring_attention"


def main() -> None:
    course = samples.released_course(A)
    # alice: correct, in Paddle, by hand (her own max-subtraction and clipping)
    samples.put("alice", A, {k: v.strip("\n") for k, v in
                             s11.CORRECT["paddle_by_hand"].items()})
    # bob: the merge exponentiates the lse without subtracting the max (overflow), in PyTorch
    samples.put("bob", A, {"merge": s11.MERGE_NO_MAX.strip("\n"),
                           "ring_attention": s11.RING_SOFTMAX.strip("\n")})
    # carol: a merge that returns only the output, and the second task left as released
    samples.put("carol", A, {"merge": s11.TORCH + "def merge(o1, lse1, o2, lse2):\n"
                                                  "    return o1 + o2\n"})
    shutil.rmtree(course, ignore_errors=True)
    print("sample submissions written to", samples.SUB)


if __name__ == "__main__":
    main()
