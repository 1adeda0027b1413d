"""The formgrader's notice (grader/grading/submission/formgrader_notice.py): its pages say the
Autograde button grades without the sandbox and that ``make grade`` is the protected path.
Rendered with nbgrader's own templates, then served by a real Jupyter server with
nbgrader's formgrader."""
from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
from jinja2 import DictLoader, Environment, FileSystemLoader
from nbgrader.server_extensions.formgrader import handlers

from grader.grading.submission.formgrader_notice import NOTICE, NoticeLoader, install, transform_for
from grader.lab.core.ports import free_port

ROOT = Path(__file__).resolve().parents[3]
A1 = "a1_independent_ops"
PAGE = dict(base_url="/user/instructor", assignment_id=A1, course_dir="/srv/course")


def _env() -> Environment:
    """The formgrader's environment, built as nbgrader builds it (init_tornado_settings)."""
    return Environment(loader=FileSystemLoader([handlers.template_path]))


@pytest.mark.parametrize("page", ["manage_submissions.tpl", "manage_assignments.tpl",
                                  "gradebook_assignments.tpl", "manage_students.tpl"])
def test_every_formgrader_page_carries_the_notice_and_is_otherwise_nbgraders(page):
    plain = _env().get_template(page).render(**PAGE)
    settings = {"nbgrader_jinja2_env": _env()}
    assert install(settings) and install(settings)          # twice: wrapped once
    assert isinstance(settings["nbgrader_jinja2_env"].loader, NoticeLoader)
    assert not isinstance(settings["nbgrader_jinja2_env"].loader.base, NoticeLoader)
    marked = settings["nbgrader_jinja2_env"].get_template(page).render(**PAGE)
    assert marked.count("course-grading-notice") == 1
    # nothing else changed (Jinja's "{%-" takes the whitespace before the block)
    assert "".join(marked.replace(NOTICE.rstrip(), "").split()) == "".join(plain.split())
    # above the page's own content (the table the Autograde buttons are in)
    assert marked.index("course-grading-notice") < marked.index('id="main-table"')
    text = " ".join(NOTICE.split())
    assert "<b>Not sandboxed.</b> The <i>Autograde</i> buttons" in text
    assert "as your user" in text and "<code>make grade</code>" in text


def test_no_formgrader_nothing_to_wrap_and_a_changed_template_is_said_so():
    assert install({}) is False
    env = Environment(loader=NoticeLoader(DictLoader({"base.tpl": "<body>no blocks</body>"})))
    with pytest.raises(RuntimeError, match="has no '\\{%- block body -%\\}'"):
        env.get_template("base.tpl")


def test_the_first_request_after_nbgraders_formgrader_loaded_installs_the_notice():
    """Extensions load in name order, nbgrader's after this one; under
    jupyterhub-singleuser the event loop runs meanwhile, so the server's transform installs
    the notice when a request arrives, before the handler renders."""
    settings: dict = {}
    notice = transform_for(settings)
    notice(None)                                     # a request before nbgrader loaded
    assert "nbgrader_jinja2_env" not in settings
    settings["nbgrader_jinja2_env"] = _env()         # nbgrader's formgrader has loaded
    notice(None)
    loader = settings["nbgrader_jinja2_env"].loader
    assert isinstance(loader, NoticeLoader)
    notice(None)
    assert settings["nbgrader_jinja2_env"].loader is loader    # once
    page = settings["nbgrader_jinja2_env"].get_template("manage_assignments.tpl").render(**PAGE)
    assert "course-grading-notice" in page


def _get(url: str, token: str) -> tuple[int, str]:
    req = urllib.request.Request(url, headers={"Authorization": f"token {token}"})
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode(errors="replace")


@pytest.mark.slow
def test_a_jupyter_server_with_nbgraders_formgrader_serves_the_notice(tmp_path):
    """nbgrader's formgrader extension loads after this one (name order): the notice is on
    the pages the server really sends. (Under jupyterhub-singleuser: tests/hub/test_e2e_browser.py.)"""
    course = tmp_path / "course"
    shutil.copytree(ROOT / "exercises" / "source" / A1, course / "source" / A1)
    shutil.copy(ROOT / "exercises" / "nbgrader_config.py", course)
    config = tmp_path / "jupyter_server_config.py"
    config.write_text('c.ServerApp.jpserver_extensions = '
                      '{"grader.grading.submission.formgrader_notice": True}\n')
    port, token = free_port(), "notice-test"
    log = open(tmp_path / "server.log", "w")
    server = subprocess.Popen(
        [sys.executable, "-m", "jupyter_server", f"--config={config}", "--no-browser",
         "--ServerApp.ip=127.0.0.1", f"--ServerApp.port={port}", "--ServerApp.port_retries=0",
         f"--IdentityProvider.token={token}", f"--ServerApp.root_dir={course}", "--allow-root"],
        cwd=course, stdout=log, stderr=subprocess.STDOUT)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 180
        while True:
            try:
                status, body = _get(f"{base}/api/status", token)
                if status == 200:
                    break
            except OSError:
                pass
            assert server.poll() is None, (tmp_path / "server.log").read_text()[-3000:]
            assert time.monotonic() < deadline, (tmp_path / "server.log").read_text()[-3000:]
            time.sleep(1)
        for path in (f"/formgrader/manage_submissions/{A1}", "/formgrader/manage_assignments"):
            status, body = _get(base + path, token)
            assert status == 200, body[-2000:]
            assert body.count("course-grading-notice") == 1, body[:3000]
            assert "<code>make grade</code>" in body and "Manage" in body
        said = (tmp_path / "server.log").read_text()
        assert "formgrader notice: its pages say Autograde is not sandboxed" in said
    finally:
        server.terminate()
        try:
            server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()
        log.close()
