import os
import pickle
import sys

import pytest

from grader.lab.core import procs


def test_a_child_gets_capped_threads_this_import_path_and_the_extra_variables():
    env = procs.child_env(3, {"GLOG_minloglevel": "0", "MINE": "1"})
    assert all(env[v] == "3" for v in procs.THREAD_VARS)
    path = env["PYTHONPATH"].split(os.pathsep)
    assert all(p in path for p in sys.path if p) and "" not in path
    assert env["GLOG_minloglevel"] == "0" and env["MINE"] == "1"


def test_log_tail_of_a_missing_log_is_empty(tmp_path):
    assert procs.log_tail(str(tmp_path / "none.log")) == ""
    (tmp_path / "a.log").write_text("".join(f"line {i}\n" for i in range(30)))
    assert procs.log_tail(str(tmp_path / "a.log"), 2) == "line 28\nline 29\n"


def test_a_failure_crosses_as_its_type_message_and_traceback():
    try:
        int("x")
    except ValueError as exc:
        failure = procs.RemoteFailure.from_exception(exc)
    back = procs.RemoteFailure.from_data(pickle.loads(pickle.dumps(failure.as_data())))
    assert back == failure
    assert back.headline() == "ValueError: invalid literal for int() with base 10: 'x'"
    assert "Traceback" in back.traceback


def test_a_bare_traceback_string_still_names_its_exception():
    f = procs.RemoteFailure.from_data("Traceback ...\n  File x\nKeyError: 'k'\n")
    assert f.type_name == "KeyError" and f.message == "'k'"


def _main_namespace():
    """Functions as a notebook cell defines them: their module is __main__."""
    ns = {"__name__": "__main__"}
    exec("import math\n"
         "SCALE = 3\n"
         "def helper(v):\n"
         "    return math.floor(v) * SCALE\n"
         "def run(v, times=2):\n"
         "    return [helper(v) for _ in range(times)]\n"
         "def fact(n):\n"
         "    return 1 if n <= 1 else n * fact(n - 1)\n", ns)
    return ns


def test_a_function_from_main_travels_by_value_with_what_it_reads():
    ns = _main_namespace()
    sent = procs.portable(ns["run"])
    assert isinstance(sent, procs.CodeFunction)
    ns["SCALE"] = 100                        # sent as it was when it left
    got = procs.callable_of(pickle.loads(pickle.dumps(sent)))
    assert got(2.7) == [6, 6] and got(1.2, times=3) == [3, 3, 3]


def test_a_recursive_function_from_main_finds_itself():
    fact = procs.callable_of(pickle.loads(pickle.dumps(procs.portable(_main_namespace()["fact"]))))
    assert fact(5) == 120


def test_module_functions_travel_by_name_and_closures_are_refused():
    assert procs.portable(os.path.join) is os.path.join

    def outer():
        k = 2

        def inner():
            return k
        return inner
    inner = outer()
    inner.__module__ = "__main__"
    with pytest.raises(TypeError, match="top level of a cell"):
        procs.portable(inner)
