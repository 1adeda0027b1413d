"""Writes the sample submissions of assignment 9 into ``exercises/submitted/``:
``python -m tests.checks.samples_a9`` from the repository root (after changing the source
notebook). Each is the *released* notebook (nbgrader generate_assignment, in a temporary
course) with its solution cells filled in from ``a9_solutions``; ``test_a9_zero_pipeline``
checks the scores they get."""
import shutil

from tests.checks import a9_solutions as s9
from tests.checks import samples_a5_a8 as samples

A = "a9_zero_pipeline"


def main() -> None:
    course = samples.released_course(A)
    # alice: correct, written differently from the reference (padded shards, a greedy
    # schedule bounded by what a stage may hold)
    samples.put("alice", A, {"zero_bytes": "import math\n\n" + samples.src(
        s9.zero_padded, "zero_bytes"),
        "one_f_one_b": samples.src(s9.schedule_greedy, "one_f_one_b")})
    # bob: one typical mistake in each task: ZeRO-2 splitting the parameters, and GPipe
    samples.put("bob", A, {"zero_bytes": samples.src(s9.zero_stage2_splits_params,
                                                     "zero_bytes"),
                           "one_f_one_b": samples.src(s9.schedule_gpipe, "one_f_one_b")})
    # carol: the wrong keys, and the second task left as released (it raises)
    samples.put("carol", A, {"zero_bytes": samples.src(s9.zero_wrong_keys, "zero_bytes")})
    shutil.rmtree(course, ignore_errors=True)
    print("sample submissions written to", samples.SUB)


if __name__ == "__main__":
    main()
