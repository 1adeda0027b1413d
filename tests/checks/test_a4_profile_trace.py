"""Checks of assignment a4_profile_trace: correct answers in PyTorch and Paddle score full
marks, each typical mistake loses the points it should with the first hint it should,
grading is repeatable."""
from . import a4_solutions as solutions
from .assignment_suite import assignment_tests
from .notebooks import hidden_checks

globals().update(assignment_tests(hidden_checks("a4_profile_trace"), solutions, "a4_profile_trace",
                                  [("check_trace_with_events", "trace_with_events"),
                                   ("check_chrome_overlap", "overlap_from_chrome_trace")]))
