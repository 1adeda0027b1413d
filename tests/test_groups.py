"""tests/groups.py: how make test's two processes share the modules."""
from __future__ import annotations

import pytest

from tests import groups


class Item:
    """What groups.assign reads of a collected test, and the mark it adds."""

    def __init__(self, nodeid: str, fixtures: tuple[str, ...] = (), group: str | None = None):
        self.nodeid, self.fixturenames = nodeid, list(fixtures)
        self.marks = [pytest.mark.xdist_group(group).mark] if group else []

    def iter_markers(self, name):
        return (m for m in self.marks if m.name == name)

    def add_marker(self, mark):
        self.marks.append(mark.mark)

    @property
    def group(self) -> str:
        (mark,) = self.iter_markers("xdist_group")
        return mark.args[0]


def _suite():
    return [
        Item("tests/test_a.py::test_1"), Item("tests/test_a.py::test_2"),
        Item("tests/test_book.py::test_pages", ("built_book",)),
        Item("tests/test_book.py::test_error_fails"),          # same module, no fixture
        Item("tests/grading/test_x.py::test_1", ("hostile_class", "tmp_path")),
        Item("tests/test_browser.py::test_switch", ("browser", "site", "built_book")),
        Item("tests/grading/sub/test_y.py::test_1", ("hostile_class",)),
        Item("tests/test_z.py::test_1", group="mine"),
    ]


def test_a_module_is_one_unit_and_the_users_of_a_once_per_run_fixture_share_one():
    items = _suite()
    groups.assign(items, seconds={})
    got = {it.nodeid: it.group for it in items}
    assert got["tests/test_a.py::test_1"] == got["tests/test_a.py::test_2"] == "tests/test_a.py"
    # the whole module goes where its fixture goes, also its tests that do not use it
    assert got["tests/test_book.py::test_error_fails"] == "built_book"
    assert got["tests/test_browser.py::test_switch"] == "built_book"
    assert got["tests/grading/test_x.py::test_1"] == got["tests/grading/sub/test_y.py::test_1"] \
        == "hostile_class"
    assert got["tests/test_z.py::test_1"] == "mine"          # a mark of its own is kept
    assert len(list(items[-1].iter_markers("xdist_group"))) == 1


def test_the_longest_units_start_first_and_a_unit_keeps_its_order():
    items = _suite()
    seconds = {"tests/test_a.py": 5.0, "tests/test_book.py": 30.0, "tests/test_browser.py": 20.0,
               "tests/grading/test_x.py": 40.0, "tests/grading/sub/test_y.py": 1.0}
    groups.assign(items, seconds=seconds)
    order = [it.nodeid for it in items]
    assert order[:2] == ["tests/test_book.py::test_pages", "tests/test_book.py::test_error_fails"]
    assert order[2] == "tests/test_browser.py::test_switch"            # book: 50 s
    assert order[3:5] == ["tests/grading/test_x.py::test_1",
                          "tests/grading/sub/test_y.py::test_1"]       # hostile: 41 s
    assert order[5:7] == ["tests/test_a.py::test_1", "tests/test_a.py::test_2"]
    assert order[7] == "tests/test_z.py::test_1"                       # not recorded: last


def test_the_record_is_read_from_a_junit_report(tmp_path):
    report = tmp_path / "r.xml"
    report.write_text(
        '<testsuites><testsuite>'
        '<testcase classname="tests.test_groups" name="a" time="1.5"/>'
        '<testcase classname="tests.test_groups" name="b" time="2.0"/>'
        '<testcase classname="tests.test_groups.Cls" name="c" time="0.5"/>'
        '<testcase classname="tests.no_such_module" name="d" time="9"/>'
        '</testsuite></testsuites>')
    assert groups.from_junit(report) == {"tests/test_groups.py": 4.0}


def test_the_committed_record_names_modules_that_exist():
    rec = groups.recorded()
    assert rec, "tests/durations.json is missing or empty: python -m tests.groups REPORT.xml"
    assert all((groups.HERE.parent / m).is_file() for m in rec), \
        [m for m in rec if not (groups.HERE.parent / m).is_file()]


CONFTEST = '''
import sys
sys.path.insert(0, {root!r})
import pytest
from tests import groups


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
    if groups.wanted(config):
        groups.assign(items, seconds={{}})


@pytest.fixture(scope="session")
def built_book():
    return None
'''
MODULE = '''
import os, time
import pytest


@pytest.mark.parametrize("i", range(4))
def test_where(i{fixture}):
    time.sleep(0.1)
    with open({out!r}, "a") as f:
        f.write(f"{{__name__}} {{os.environ['PYTEST_XDIST_WORKER']}}\\n")
'''


def test_two_xdist_workers_run_each_module_and_each_once_per_run_unit_whole(tmp_path):
    """The real thing: ``pytest -n 2 --dist loadgroup`` over a small suite. The groups are
    made where xdist collects, in its workers (a run that made them only where ``dist``
    reads "loadgroup" split every module between the workers, and built the book in both
    at once)."""
    import subprocess
    import sys
    from collections import defaultdict

    out = tmp_path / "ran.txt"
    suite = tmp_path / "suite"
    suite.mkdir()
    (suite / "conftest.py").write_text(CONFTEST.format(root=str(groups.HERE.parent)))
    for name, fixture in (("test_m1", ""), ("test_m2", ""), ("test_b1", ", built_book"),
                          ("test_b2", ", built_book")):
        (suite / f"{name}.py").write_text(MODULE.format(fixture=fixture, out=str(out)))
    r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                        "-n", "2", "--dist", "loadgroup", "--no-loadscope-reorder",
                        str(suite)], capture_output=True, text=True, timeout=300,
                       cwd=tmp_path)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    workers = defaultdict(set)
    for line in out.read_text().splitlines():
        module, worker = line.split()
        workers[module].add(worker)
    assert sorted(workers) == ["test_b1", "test_b2", "test_m1", "test_m2"], workers
    assert all(len(w) == 1 for w in workers.values()), workers      # each module whole
    assert workers["test_b1"] == workers["test_b2"], workers        # the book's users together
