"""Writes the sample submissions of assignment 12 into ``exercises/submitted/``:
``python -m tests.checks.samples_a12`` from the repository root (after changing the source
notebook). Each is the *released* notebook (nbgrader generate_assignment, in a temporary
course) with its solution cells filled in from ``a12_solutions``;
``test_a12_activation_memory`` checks the scores they get."""
import shutil

from tests.checks import a12_solutions as s12
from tests.checks import samples_a5_a8 as samples

A = "a12_activation_memory"


def main() -> None:
    course = samples.released_course(A)
    # alice: correct, every row of the table summed
    samples.put("alice", A, {k: v.strip("\n") for k, v in
                             s12.CORRECT["by_table"].items()})
    # bob: forgets the attention scores (the a s^2 b terms)
    samples.put("bob", A, {k: v.strip("\n") for k, v in
                           s12.WRONG["no_scores"][0].items()})
    # carol: left as released (it raises)
    samples.put("carol", A, {})
    shutil.rmtree(course, ignore_errors=True)
    print("sample submissions written to", samples.SUB)


if __name__ == "__main__":
    main()
