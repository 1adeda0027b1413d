"""On the course hub, the formgrader's view of a hostile submission runs none of its script,
and the formgrader still works.

A hub on loopback (hub/jupyterhub_config.py, the single-user servers configured by
hub/singleuser/) serves the launcher's demo assignment, so the course's own configuration
plays no part: the hub's configuration alone protects. Mallory's submission is the demo
notebook answered correctly plus every payload of tests/grading/payloads.py, and two more
files (``evil.html``, ``evil.svg``) that run script when opened. The instructor generates
the assignment and autogrades mallory through the formgrader's API, then in Chromium:

- opens the formgrader's view of the submission, clicks every link: no payload runs (title,
  ``window.pwned``, requests to a local listener), the honest content is shown, and the
  formgrader's own scripts work: the test cell's score input shows the autograded score,
  "No credit" / "Full credit" save through the API, a comment typed is saved, the eye icon
  (an inline ``onclick`` of nbgrader's template) shows the student's name;
- opens ``evil.html`` and ``evil.svg`` through the formgrader's submission-files route: a
  sandbox, nothing runs;
- generates feedback through the formgrader and opens it through Jupyter's files route: no
  payload runs, and the page carries its Content-Security-Policy;
- control: the same autograded notebook through Jupyter's own nbconvert route (stock HTML,
  scripts confined to a sandboxed origin but running): the payloads run there.
"""
from __future__ import annotations

import os
import time
from pathlib import Path

import nbformat
import pytest
from selenium.webdriver.common.keys import Keys

from tests.grading import payloads
from tests.hub.browser import HubBrowser, retry

pytestmark = [pytest.mark.slow, pytest.mark.browser, pytest.mark.timeout(900)]

STUDENT = "mallory"
EVIL = {"evil.html": "<html><body><script>{js}</script>evil page</body></html>",
        "evil.svg": ('<svg xmlns="http://www.w3.org/2000/svg" onload="{js}">'
                     "<script>{js2}</script><circle r='5'/></svg>")}


@pytest.fixture(scope="module")
def listener():
    lst = payloads.Listener()
    yield lst
    lst.close()


@pytest.fixture(scope="module")
def hub(chromium, tmp_path_factory):
    from hub.run import PROXY, start

    if not PROXY.exists():
        msg = f"the hub's proxy is missing ({PROXY}): run `make hub-deps`"
        if os.environ.get("CI"):
            pytest.fail(msg)
        pytest.skip(msg)
    tmp = tmp_path_factory.mktemp("hub-xss")
    (tmp / "empty" / "source").mkdir(parents=True)    # no assignments: the demo one is used
    h = start(tmp / "state", course=tmp / "empty", instructors=("instructor",),
              students=(STUDENT,))
    try:
        yield h
    finally:
        assert not h.stop(), "processes left after the hub stopped"


@pytest.fixture(scope="module")
def browser(chrome, hub):
    from tests.chrome import fresh

    d = fresh(chrome, page_load_timeout=120)
    yield HubBrowser(d, hub.url, hub.password, hub.root / "screenshots")


def _submit(hub, listener) -> Path:
    """Mallory's submission, put where nbgrader's collect would."""
    from hub.demo_course import ASSIGNMENT, NOTEBOOK, notebook

    nb = notebook()
    nb.cells += payloads.cells(listener.url)
    folder = hub.course_dir() / "submitted" / STUDENT / ASSIGNMENT
    folder.mkdir(parents=True)
    nbformat.write(nb, folder / NOTEBOOK)
    for name, text in EVIL.items():
        (folder / name).write_text(text.format(js=payloads.js(f"file-{name}", listener.url),
                                               js2=payloads.js(f"file-{name}-2", listener.url)))
    return folder


def _headers(b: HubBrowser, url: str) -> dict:
    """The response headers of a GET of ``url`` from inside the page, sent the way Jupyter's
    own frontend sends requests (with the XSRF token JupyterHub requires of them)."""
    b.d.set_script_timeout(60)
    return b.d.execute_async_script(
        "const [url, done] = arguments;"
        "const m = document.cookie.match(/(?:^|;\\s*)_xsrf=([^;]+)/);"
        "fetch(url, {credentials: 'same-origin',"
        "            headers: {'X-XSRFToken': m ? decodeURIComponent(m[1]) : ''}})"
        ".then(r => done(Object.fromEntries(r.headers.entries())))"
        ".catch(e => done({error: String(e)}))", url)


def test_the_formgrader_shows_a_hostile_submission_without_running_it(hub, browser, listener):
    from hub.demo_course import ASSIGNMENT, NOTEBOOK

    b, a, nb_id = browser, ASSIGNMENT, NOTEBOOK[:-len(".ipynb")]
    b.login("instructor")
    b.d.get(f"{hub.url}/user/instructor/formgrader/manage_assignments")
    assert b.api("POST", f"formgrader/api/assignment/{a}/assign")["success"]
    _submit(hub, listener)
    res = b.api("POST", f"formgrader/api/submission/{a}/{STUDENT}/autograde")
    assert res["success"], res.get("log", "")[-3000:] + res.get("error", "")
    graded = hub.course_dir() / "autograded" / STUDENT / a
    assert (graded / "evil.html").exists(), "nbgrader copies a submission's other files"
    (sub,) = b.api("GET", f"formgrader/api/submitted_notebooks/{a}/{nb_id}")
    base = f"{hub.url}/user/instructor/formgrader/submissions/{sub['id']}/"

    # 1. the formgrader's view: nothing runs, the grading form works
    seen = payloads.observe(b.d, base, listener)
    print(f"\nformgrader view: ran {sorted(seen['ran'])}; "
          f"{len(seen['refused'])} policy refusals in the console")
    assert seen["ran"] == set(), seen
    missing = [t for t in payloads.HONEST_TEXT if t not in seen["text"]]
    assert not missing, f"honest content not shown: {missing}"
    got = _headers(b, base)
    assert "script-src 'nonce-" in got.get("content-security-policy", ""), got
    b.d.get(base)
    score = b.wait(lambda d: next((e for e in d.find_elements("id", "check_squares")
                                   if e.get_attribute("placeholder")), None), 60,
                   "the autograded score in the grading form (its scripts ran)")
    assert float(score.get_attribute("placeholder")) == 2.0

    def manual():
        grades = b.api("GET", f"formgrader/api/grades?submission_id={sub['id']}")
        return next(g["manual_score"] for g in grades if g["name"] == "check_squares")

    cell = "//div[contains(@class,'nbgrader_cell')][.//input[@id='check_squares']]"

    def press(button: str, want: float) -> None:
        """Click the form's button until the gradebook has its score (a click while the
        previous save re-renders the form can be lost)."""
        from selenium.common.exceptions import WebDriverException

        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            el = b.wait(lambda d: (b.xpath(f"{cell}//button[contains(@class,'{button}')]")
                                   or [None])[0], 30, button)
            b.d.execute_script("arguments[0].scrollIntoView({block: 'center'})", el)
            try:
                el.click()
            except WebDriverException:     # the form moved under the pointer: again
                time.sleep(0.5)
                continue
            if retry(lambda: manual() == want, 5):
                return
        raise AssertionError(f"{button} not saved: {manual()}")

    press("no-credit", 0)
    press("full-credit", 2)
    box = b.wait(lambda d: (d.find_elements("css selector", "textarea.comment") or [None])[0],
                 30, "a comment box")
    box.click()
    box.send_keys("tidy work", Keys.TAB)       # leaving the box: the form saves it
    comments = lambda: [c.get("manual_comment") for c in b.api(  # noqa: E731
        "GET", f"formgrader/api/comments?submission_id={sub['id']}")]
    assert retry(lambda: "tidy work" in comments(), 30), comments()
    b.click("//span[contains(@class,'glyphicon-eye-open')]", "the show-name icon")
    assert retry(lambda: any(e.is_displayed() and STUDENT in e.text for e in
                             b.d.find_elements("css selector", "a.name-shown")), 10), \
        "the template's inline onclick (toggle_name) did not run"

    # 2. a submission's other files: sandboxed, nothing runs
    for name in EVIL:
        got = payloads.observe(b.d, base + name, listener)
        assert got["ran"] == set(), (name, got)
        b.d.get(base)          # a page that can read its cookies, to ask for the headers
        assert _headers(b, base + name)["content-security-policy"].startswith("sandbox")

    # 3. feedback the formgrader generates, opened through Jupyter's files route
    assert b.api("POST", f"formgrader/api/assignment/{a}/{STUDENT}/generate_feedback")["success"]
    page = hub.course_dir() / "feedback" / STUDENT / a / NOTEBOOK.replace(".ipynb", ".html")
    assert 'http-equiv="Content-Security-Policy"' in page.read_text()
    fb = payloads.observe(b.d, f"{hub.url}/user/instructor/files/course/feedback/{STUDENT}/{a}/"
                               f"{page.name}", listener)
    assert fb["ran"] == set(), fb
    assert not [t for t in payloads.HONEST_TEXT if t not in fb["text"]]

    # 4. control: Jupyter's stock HTML of the same notebook runs the payloads
    control = payloads.observe(b.d, f"{hub.url}/user/instructor/nbconvert/html/course/"
                                    f"autograded/{STUDENT}/{a}/{NOTEBOOK}?download=false",
                               listener)
    print(f"control (stock nbconvert HTML of the autograded notebook): ran {sorted(control['ran'])}")
    assert {"md-script", "md-img-onerror", "out-html-script", "out-md-img"} <= control["ran"]
