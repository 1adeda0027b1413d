"""Writes the sample submissions of assignment 13 into ``exercises/submitted/``:
``python -m tests.checks.samples_a13`` from the repository root (after changing the source
notebook). Each is the *released* notebook (nbgrader generate_assignment, in a temporary
course) with its solution cells filled in from ``a13_solutions``;
``test_a13_composed_layout`` checks the scores they get."""
import shutil

from tests.checks import a13_solutions as s13
from tests.checks import samples_a5_a8 as samples

A = "a13_composed_layout"


def _plain(answers: dict) -> dict:
    return {k: "\n".join(l for l in v.strip("\n").splitlines()
                         if "### BEGIN SOLUTION" not in l and "### END SOLUTION" not in l)
            for k, v in answers.items()}


def main() -> None:
    course = samples.released_course(A)
    # alice: correct, in Paddle's words
    samples.put("alice", A, _plain(s13.CORRECT["paddle"]))
    # bob: counts Adam's two moments as one; his choose_layout (the reference's) trusts his
    # smaller figures and picks layouts over the budget: 5 + 1
    samples.put("bob", A, _plain({**s13.reference(A), **s13.WRONG["one_moment"][0]}))
    # carol: left as released (both raise)
    samples.put("carol", A, {})
    shutil.rmtree(course, ignore_errors=True)
    print("sample submissions written to", samples.SUB)


if __name__ == "__main__":
    main()
