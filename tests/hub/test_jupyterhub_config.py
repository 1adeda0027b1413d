"""hub/jupyterhub_config.py and hub/singleuser/: who gets what, read as JupyterHub and
nbgrader read them (traitlets' Python config loader), with the environment run.py sets."""
from __future__ import annotations

import os
from pathlib import Path
from types import SimpleNamespace

import pytest
from traitlets.config.loader import PyFileConfigLoader

HUB = Path(__file__).resolve().parents[2] / "hub"


def _load(path: Path, monkeypatch, **env):
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    return PyFileConfigLoader(path.name, str(path.parent)).load_config()


@pytest.fixture
def hub_config(monkeypatch, tmp_path):
    return _load(HUB / "jupyterhub_config.py", monkeypatch, COURSE_HUB_ROOT=str(tmp_path),
                 COURSE_HUB_PORT="18000", COURSE_HUB_INSTRUCTORS="teacher",
                 COURSE_HUB_STUDENTS="ann,bob", COURSE_HUB_COURSE_ID="parallel-dl")


def test_hub_listens_on_loopback_and_keeps_its_state_in_the_root(hub_config, tmp_path):
    c = hub_config
    assert c.JupyterHub.bind_url == "http://127.0.0.1:18000"
    assert c.JupyterHub.hub_ip == "127.0.0.1"
    assert str(tmp_path) in c.JupyterHub.db_url
    assert c.SimpleLocalProcessSpawner.home_dir_template.startswith(str(tmp_path))
    assert c.JupyterHub.cleanup_servers is True


def test_only_listed_accounts_log_in_and_instructors_are_admins(hub_config):
    assert hub_config.Authenticator.allowed_users == {"teacher", "ann", "bob"}
    assert hub_config.Authenticator.admin_users == {"teacher"}


@pytest.mark.parametrize("user, student_dir_first", [("ann", True), ("teacher", False)])
def test_students_get_the_student_config_before_the_shared_one(hub_config, user,
                                                               student_dir_first):
    spawner = SimpleNamespace(user=SimpleNamespace(name=user),
                              environment=dict(hub_config.Spawner.environment))
    hub_config.Spawner.pre_spawn_hook(spawner)
    dirs = spawner.environment["JUPYTER_CONFIG_PATH"].split(os.pathsep)
    assert dirs[-1] == str(HUB / "singleuser")
    assert (dirs[0] == str(HUB / "singleuser" / "student")) is student_dir_first
    assert spawner.environment["COURSE_HUB_EXCHANGE"].endswith("exchange")


def _nbgrader(monkeypatch, tmp_path, user):
    return _load(HUB / "singleuser" / "nbgrader_config.py", monkeypatch,
                 JUPYTERHUB_USER=user, HOME=str(tmp_path / user),
                 COURSE_HUB_INSTRUCTORS="teacher", COURSE_HUB_COURSE_ID="parallel-dl",
                 COURSE_HUB_EXCHANGE=str(tmp_path / "exchange"))


def test_a_students_nbgrader_identity_is_their_hub_account(monkeypatch, tmp_path):
    """Every account is the same OS user here: without this, nbgrader would file every
    submission under that OS user's name."""
    c = _nbgrader(monkeypatch, tmp_path, "ann")
    assert c.CourseDirectory.student_id == "ann"
    assert "root" not in c.CourseDirectory
    assert c.Exchange.root == str(tmp_path / "exchange")
    assert c.CourseDirectory.course_id == "parallel-dl"


def test_an_instructor_grades_the_course_in_their_home(monkeypatch, tmp_path):
    c = _nbgrader(monkeypatch, tmp_path, "teacher")
    assert c.CourseDirectory.root == str(tmp_path / "teacher" / "course")
    assert "student_id" not in c.CourseDirectory


def test_servers_may_be_framed_by_their_own_pages_only(monkeypatch):
    """The formgrader is an iframe of the user's own server (JupyterHub >= 4.1 forbids
    every frame unless told); the browser test checks it renders."""
    c = _load(HUB / "singleuser" / "jupyter_server_config.py", monkeypatch)
    assert c.ServerApp.tornado_settings["headers"]["Content-Security-Policy"] == \
        "frame-ancestors 'self'"


def test_students_servers_run_no_formgrader(monkeypatch):
    c = _load(HUB / "singleuser" / "student" / "jupyter_server_config.py", monkeypatch)
    assert c.ServerApp.jpserver_extensions["nbgrader.server_extensions.formgrader"] is False


def test_every_formgrader_on_the_hub_says_its_autograde_is_not_sandboxed(monkeypatch):
    """tests/grading/submission/test_formgrader_notice.py serves the notice from a server
    with nbgrader's formgrader."""
    c = _load(HUB / "singleuser" / "jupyter_server_config.py", monkeypatch)
    assert c.ServerApp.jpserver_extensions["grader.grading.submission.formgrader_notice"] is True


def test_nbgraders_owner_check_is_off_only_where_every_account_is_one_os_user(monkeypatch, tmp_path,
                                                                              hub_config):
    """The demo hub's spawner runs every account as one OS user: nbgrader's 'cheating
    attempt?' warning fired on every honest Collect there. Elsewhere it stays on."""
    assert hub_config.Spawner.environment["COURSE_HUB_ONE_OS_USER"] == "1"
    monkeypatch.setenv("COURSE_HUB_ONE_OS_USER", "1")
    assert _nbgrader(monkeypatch, tmp_path, "teacher").ExchangeCollect.check_owner is False
    monkeypatch.delenv("COURSE_HUB_ONE_OS_USER")
    assert "check_owner" not in _nbgrader(monkeypatch, tmp_path, "teacher").ExchangeCollect
