"""The private overlay's settings and readers, and the verdict inputs (issue 37), without
grading: tests/grading/run/test_overlay.py grades a course with an overlay for real."""
from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from grader.grading import hidden, overlay
from grader.grading.config import load, with_overrides
from grader.grading.run import inputs
from grader.grading.run.ledger import Ledger

ROOT = Path(__file__).resolve().parents[2]


def _course(tmp_path: Path, toml: str = "") -> tuple[Path, Path]:
    course, private = tmp_path / "course", tmp_path / "private"
    for a in ("a1_x", "a2_y"):
        (course / "source" / a).mkdir(parents=True)
        (course / "source" / a / f"{a}.ipynb").write_text("{}")
        (course / "hidden").mkdir(exist_ok=True)
        (course / "hidden" / f"{a}.py").write_text(f"WHO = 'public {a}'\n")
    (course / "hidden" / "__init__.py").write_text("")
    (course / "nbgrader_config.py").write_text("c = get_config()\n")
    (private / "source" / "a1_x").mkdir(parents=True)
    (private / "source" / "a1_x" / "a1_x.ipynb").write_text('{"variant": 1}')
    (private / "hidden").mkdir()
    (private / "hidden" / "a1_x.py").write_text("WHO = 'private a1_x'\n")
    private.chmod(0o700)
    (course / "course.toml").write_text(f'[overlay]\nfolder = "{private}"\n' + toml)
    return course, private


def test_the_overlay_replaces_same_named_source_and_hidden_checks_only(tmp_path, monkeypatch):
    course, private = _course(tmp_path)
    assert load(course).overlay == private.resolve()
    assert overlay.assignments(course) == ["a1_x", "a2_y"]
    assert overlay.source(course, "a1_x") == private / "source" / "a1_x"
    assert overlay.source(course, "a2_y") == course / "source" / "a2_y"
    # nbgrader's source_directory: links to the variant and to the public folder
    assert overlay.view(course) == overlay.VIEW
    view = course / overlay.VIEW
    assert os.readlink(view / "a1_x") == str(private.resolve() / "source" / "a1_x")
    assert os.readlink(view / "a2_y") == str((course / "source" / "a2_y").resolve())
    (private / "source" / "a3_z").mkdir()
    (private / "source" / "a3_z" / "a3_z.ipynb").write_text("{}")
    overlay.view(course)
    assert sorted(p.name for p in view.iterdir()) == ["a1_x", "a2_y", "a3_z"]
    # the judge's loader: the overlay's module where it has one
    monkeypatch.setattr(hidden, "_registered", [])
    monkeypatch.setattr(hidden, "_preloaded", {})
    for k in [k for k in sys.modules if k == "hidden" or k.startswith("hidden.")]:
        monkeypatch.delitem(sys.modules, k)
    hidden.preload(course)
    assert hidden.load("a1_x").WHO == "private a1_x"
    assert hidden.load("a2_y").WHO == "public a2_y"
    for k in [k for k in sys.modules if k == "hidden" or k.startswith("hidden.")]:
        del sys.modules[k]


def test_without_an_overlay_nbgrader_reads_source(tmp_path):
    course, _ = _course(tmp_path)
    (course / "course.toml").write_text("")
    assert load(course).overlay is None and overlay.view(course) == "source"
    assert not (course / overlay.VIEW).exists()


@pytest.mark.parametrize("folder, toml, says", [
    ("private", "", "should be an absolute path"),
    ("{tmp}/nowhere", "", "is not a folder"),
    ("{tmp}/course/inside", "", "should be outside the course folder"),
    ("{tmp}/private", '[sandbox]\nmode = "none"\n', "needs the sandbox"),
    ("{tmp}/private", '[sandbox]\nextra_ro = ["{tmp}"]\n', "within a kernel's reach: the "
     "grading sandbox mounts {tmp}"),
])
def test_an_overlay_a_kernel_could_reach_or_that_is_not_one_is_refused(tmp_path, folder, toml, says):
    course, _ = _course(tmp_path)
    (course / "inside" / "hidden").mkdir(parents=True)
    (course / "inside").chmod(0o700)
    (course / "course.toml").write_text(f'[overlay]\nfolder = "{folder.format(tmp=tmp_path)}"\n'
                                        + toml.format(tmp=tmp_path))
    with pytest.raises(ValueError, match=None) as e:
        load(course)
    assert says.format(tmp=tmp_path) in str(e.value)


def test_an_overlay_group_or_others_can_read_and_a_short_secret_are_refused(tmp_path):
    course, private = _course(tmp_path)
    private.chmod(0o750)
    with pytest.raises(ValueError, match="chmod 700"):
        load(course)
    private.chmod(0o700)
    (private / "secret").write_bytes(b"short")
    with pytest.raises(ValueError, match="at least 16 random bytes"):
        load(course)


def test_cases_are_drawn_from_the_secret_per_assignment_not_per_student(tmp_path, monkeypatch):
    course, private = _course(tmp_path)
    monkeypatch.setattr(hidden, "_registered", [])
    monkeypatch.setattr(hidden, "_secret", {})
    hidden.use(course)
    public = hidden.cases("a1_x").random()
    assert public == hidden.cases("a1_x").random()          # no secret: a public seed
    monkeypatch.setattr(hidden, "_secret", {})
    (private / "secret").write_bytes(b"k" * 32)
    one = [hidden.cases("a1_x", "n").random(), hidden.cases("a2_y", "n").random()]
    monkeypatch.setattr(hidden, "_secret", {})
    assert one == [hidden.cases("a1_x", "n").random(), hidden.cases("a2_y", "n").random()]
    assert one[0] != one[1] and public not in one
    monkeypatch.setattr(hidden, "_secret", {})
    (private / "secret").write_bytes(b"j" * 32)
    assert hidden.cases("a1_x", "n").random() != one[0]


def test_each_input_of_a_verdict_changes_its_own_digest_for_the_assignments_it_touches(tmp_path):
    course, private = _course(tmp_path)
    cfg, grader = load(course), inputs.grader_digest()
    before = {a: inputs.verdict_inputs(cfg, a) for a in ("a1_x", "a2_y")}
    assert before["a1_x"]["grader"] == grader and len(grader) == 64

    def diff(cfg_=cfg):
        now = {a: inputs.verdict_inputs(cfg_, a, grader) for a in ("a1_x", "a2_y")}
        return {a: sorted(k for k in now[a] if now[a][k] != before[a][k]) for a in now}

    (private / "hidden" / "a1_x.py").write_text("WHO = 'private a1_x, fixed'\n")
    assert diff() == {"a1_x": ["hidden"], "a2_y": []}
    (course / "hidden" / "a1_x.py").write_text("WHO = 'shadowed by the overlay'\n")
    assert diff() == {"a1_x": ["hidden"], "a2_y": []}
    (course / "hidden" / "helpers.py").write_text("SHARED = 1\n")     # any check may import it
    assert diff() == {"a1_x": ["hidden"], "a2_y": ["hidden"]}
    (course / "hidden" / "helpers.py").unlink()
    (course / "source" / "a2_y" / "data.txt").write_text("copied beside the notebook")
    assert diff() == {"a1_x": ["hidden"], "a2_y": ["source"]}
    assert diff(with_overrides(cfg, cell_timeout_s=61)) == {"a1_x": ["hidden", "limits"],
                                                            "a2_y": ["limits", "source"]}
    (private / "secret").write_bytes(os.urandom(32))
    assert diff()["a2_y"] == ["secret", "source"]
    (course / "nbgrader_config.py").write_text("c = get_config()\nc.Execute.timeout = 5\n")
    assert diff()["a2_y"] == ["config", "secret", "source"]
    assert inputs.describe(inputs.dumps(before["a1_x"]),
                           inputs.dumps(inputs.verdict_inputs(cfg, "a1_x", grader))) == \
        "the course's nbgrader_config.py, the hidden checks and the overlay's secret changed"


def test_sync_says_which_jobs_went_back_with_their_inputs_then_and_now(tmp_path):
    led = Ledger(f"sqlite:///{tmp_path / 'gb.db'}")
    led.sync([("s", "a", "h1", '{"hidden": "1"}'), ("t", "a", "h1", '{"hidden": "1"}')])
    job = led.claim("me", 60)
    led.complete(job, "me", {"score": 1})
    assert led.done_inputs() == {(job.student, "a"): '{"hidden": "1"}'}
    resets = led.sync([("s", "a", "h2", '{"hidden": "2"}'), ("t", "a", "h2", '{"hidden": "2"}')])
    assert sorted((r.student, r.state, r.inputs_before, r.inputs) for r in resets) == sorted([
        (job.student, "done", '{"hidden": "1"}', '{"hidden": "2"}'),
        ({"s": "t", "t": "s"}[job.student], "pending", '{"hidden": "1"}', '{"hidden": "2"}')])
    assert led.done_inputs() == {} and led.sync([("s", "a", "h2", '{"hidden": "2"}')]) == []
    led.close()


def test_a_ledger_made_before_inputs_were_recorded_gains_the_column_and_regrades_once(tmp_path):
    import sqlite3

    db = tmp_path / "old.db"
    with sqlite3.connect(db) as conn:        # the table as earlier versions made it
        conn.execute("CREATE TABLE course_grading_jobs (student VARCHAR(255), assignment "
                     "VARCHAR(255), sha256 VARCHAR(64) NOT NULL, state VARCHAR(16) NOT NULL, "
                     "owner VARCHAR(255), lease_until DATETIME, attempts INTEGER NOT NULL, "
                     "outcome TEXT, updated_at DATETIME NOT NULL, PRIMARY KEY (student, assignment))")
        conn.execute("INSERT INTO course_grading_jobs VALUES ('s', 'a', 'old', 'done', NULL, NULL,"
                     " 1, '{\"score\": 1}', '2026-01-01 00:00:00')")
    led = Ledger(f"sqlite:///{db}")
    assert led.done_inputs() == {("s", "a"): None}
    (reset,) = led.sync([("s", "a", "new", '{"hidden": "1"}')])
    assert (reset.state, reset.inputs_before, reset.inputs) == ("done", None, '{"hidden": "1"}')
    assert inputs.describe(None, '{"hidden": "1"}') == "made before the ledger recorded its inputs"
    led.close()


def test_the_grader_digest_follows_the_packages_code(tmp_path, monkeypatch):
    import grader

    fake = tmp_path / "grader"
    (fake / "checks").mkdir(parents=True)
    (fake / "__init__.py").write_text("")
    (fake / "checks" / "a1.py").write_text("LIMIT = 1\n")
    monkeypatch.setattr(grader, "__file__", str(fake / "__init__.py"))
    first = inputs.grader_digest()
    assert inputs.grader_digest() == first
    (fake / "checks" / "a1.py").write_text("LIMIT = 2\n")
    assert inputs.grader_digest() != first
