"""The tests every notebook assignment gets, written once: the reference and the other
correct solutions score full marks, each typical mistake loses the points it should with
its message, grading is repeatable, an unimplemented answer scores zero and says so.

A test module calls :func:`assignment_tests` and puts the returned functions in its
globals, where pytest collects them.
"""
from __future__ import annotations

from types import ModuleType

import pytest

from .notebooks import reference, run_checks


def assignment_tests(checks: ModuleType, solutions: ModuleType, assignment: str,
                     check_fns: list[tuple[str, str]]) -> dict:
    A, CHECKS = assignment, check_fns

    def test_the_reference_solution_scores_full_marks():
        results = run_checks(checks, A, CHECKS, {})
        assert all(r.passed for r in results), "\n".join(r.text() for r in results)

    @pytest.mark.parametrize("name", sorted(solutions.CORRECT))
    def test_other_correct_solutions_score_full_marks(name):
        assert set(solutions.CORRECT[name]) == set(reference(A)), "answers every solution cell"
        results = run_checks(checks, A, CHECKS, solutions.CORRECT[name])
        assert all(r.passed for r in results), "\n".join(r.text() for r in results)

    @pytest.mark.parametrize("name", sorted(solutions.WRONG))
    def test_a_typical_mistake_loses_the_points_it_should_with_its_message(name):
        answers, *points, words = solutions.WRONG[name]
        results = run_checks(checks, A, CHECKS, answers)
        text = "\n".join(r.text() for r in results)
        for want, r in zip(points, results):
            if want is not None:
                assert r.points == want, f"{r.name}: {r.points} points, expected {want}\n{text}"
        assert not all(r.passed for r in results)
        if words:
            # the first line of feedback about the mistake: the first failing check's
            # message and its hint
            first = next(r for r in results if not r.passed)
            assert words in f"{first.message}\n{first.hint}", f"first hint lacks {words!r}:\n{text}"

    def test_the_same_submission_graded_ten_times_scores_the_same():
        # an answer that reads a wall clock of its own is graded 0 by the check that times
        # it, every time; what other checks make of its (random) times is its own doing
        wall = getattr(solutions, "READS_WALL_CLOCK", {})
        for name, answers in [("reference", {})] + [(n, a) for n, (a, *_) in solutions.WRONG.items()]:
            keep = wall.get(name, len(CHECKS))
            seen = {tuple((r.points, r.message) for r in run_checks(checks, A, CHECKS, answers)[:keep])
                    for _ in range(10)}
            assert len(seen) == 1, (name, seen)

    def test_an_unimplemented_answer_scores_zero_and_says_so():
        stub = {gid: src.split("### BEGIN SOLUTION")[0].rstrip(" ") + "    raise NotImplementedError()\n"
                for gid, src in reference(A).items()}
        results = run_checks(checks, A, CHECKS, stub)
        assert all(r.points == 0 for r in results)
        assert all("not implemented" in r.text() for r in results), [r.text() for r in results]

    return {name: fn for name, fn in locals().items() if name.startswith("test_")}
