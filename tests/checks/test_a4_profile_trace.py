"""Checks of assignment a4_profile_trace: correct answers score full marks, each typical mistake loses
the points it should with the message it should, grading is repeatable."""
from . import a4_solutions as solutions
from .assignment_suite import assignment_tests
from .notebooks import hidden_checks

checks = hidden_checks("a4_profile_trace")   # exercises/hidden

globals().update(assignment_tests(checks, solutions, "a4_profile_trace", [("check_record_trace", "record_trace"),("check_chrome_overlap", "overlap_from_chrome_trace")]))
