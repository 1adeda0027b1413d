"""Checks of assignment a2_small_ops: correct answers in PyTorch and Paddle score full marks,
each typical mistake loses the points it should with the first hint it should, grading is
repeatable."""
from . import a2_solutions as solutions
from .assignment_suite import assignment_tests
from .notebooks import hidden_checks

globals().update(assignment_tests(hidden_checks("a2_small_ops"), solutions, "a2_small_ops",
                                  [("check_time_on_streams", "time_on_streams"),
                                   ("check_speedups", "stream_speedups")]))


def test_a_run_that_raises_costs_only_the_parts_that_read_it():
    """Each run is scored on its own (issue 37): before, one raise scored the check 0/4.
    An answer that raises on one stream keeps the 2 points of the 4-stream runs."""
    from .notebooks import hidden_checks, namespace

    a2 = hidden_checks("a2_small_ops")
    ns = namespace("a2_small_ops", {})
    right = ns["time_on_streams"]

    def one_stream_raises(*args, **kwargs):
        if args[-1] == 1:
            raise ValueError("one stream")
        return right(*args, **kwargs)
    r = a2.check_time_on_streams(one_stream_raises, ns["FRAMEWORK"])
    assert r.points == 2 and "1 stream: " in r.message, r.text()
    assert "the warm-up (read from every run): " in "\n".join(r.details), r.text()
