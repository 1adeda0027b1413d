"""The course hub end to end, in a real headless Chromium against a hub on loopback.

An instructor releases an assignment; student1 logs in, fetches it, writes a solution and
submits; student2 submits a broken notebook; the instructor collects, autogrades and
releases feedback; student1 sees full marks in the feedback, student2 sees zero and the
error that caused it, and grading student2 leaves student1's grade as it was.

How each step is driven:
- By clicks in the browser: logging in, JupyterLab's Nbgrader menu, the formgrader inside
  JupyterLab (checked to render in its iframe: the frame-ancestors trap) and its own
  pages (the Generate, Release, Collect, Autograde, Generate / Release Feedback icons and
  their result dialogs), and the students' Assignments panel (Fetch, Submit, Fetch
  Feedback). Scores are read from the formgrader's table and the feedback pages as shown.
- Through the Jupyter contents API, as that user: writing the student's answers. The PUT
  runs inside the student's JupyterLab page with the session's XSRF token (typing
  multi-line code through JupyterLab's CodeMirror with Selenium fights auto-indent and
  bracket closing); the notebook is then opened in JupyterLab and the answer checked on
  screen. student1 then runs every cell (Run > Run All Cells: the public checks and, in
  the course's assignments, an experiment on a real device) in their kernel, which must
  give no error, and saves. The gradebook's scores are also read through the formgrader's API to check the
  page agrees with it.

The assignment is the course's first one (``exercises/source/a1_*``), copied into the
hub's temporary course directory; while the course has none it is the launcher's demo
assignment (:mod:`hub.demo_course`). Everything (hub state, homes, exchange, browser
profile) lives in a temporary directory; every process started is gone at the end.
"""
from __future__ import annotations

import os
import re
import shutil
import time
from pathlib import Path

import nbformat
import pytest
from selenium.webdriver.common.keys import Keys

from tests.hub.browser import HubBrowser, retry

pytestmark = [pytest.mark.slow, pytest.mark.browser, pytest.mark.timeout(900)]

ROOT = Path(__file__).resolve().parents[2]
EXERCISES = ROOT / "exercises"
BROKEN = "def broken(:\n    pass\n"     # a SyntaxError in every answer cell


def _course_assignment(tmp: Path) -> tuple[Path, str]:
    """A private copy of the course (never written into exercises/) and the assignment."""
    real = sorted(p.name for p in (EXERCISES / "source").glob("a1_*") if p.is_dir())
    course = tmp / "course-src"
    if real:
        shutil.copytree(EXERCISES, course, ignore=shutil.ignore_patterns(
            "release", "submitted", "autograded", "feedback", "gradebook.db",
            ".ipynb_checkpoints", "__pycache__"))
        return course, real[0]
    from hub.demo_course import ASSIGNMENT, write_course

    write_course(course)
    return course, ASSIGNMENT


@pytest.fixture(scope="module")
def hub(chromium, tmp_path_factory):
    from hub.run import PROXY, start

    if not PROXY.exists():
        msg = (f"the hub's proxy is missing ({PROXY}): run `make hub-deps` "
               "(npm ci; make test does it)")
        if os.environ.get("CI"):
            pytest.fail(msg)
        pytest.skip(msg)

    tmp = tmp_path_factory.mktemp("hub")
    course, assignment = _course_assignment(tmp)
    h = start(tmp / "state", course=course, students=("student1", "student2"))
    h.assignment = assignment
    try:
        yield h
    finally:
        users = set()
        for p in h.processes():
            try:
                if "jupyterhub-singleuser" in " ".join(p.cmdline()):
                    users.add(p.environ().get("JUPYTERHUB_USER"))
            except Exception:   # gone meanwhile
                pass
        killed = h.stop()
        # The hub's own shutdown stopped the proxy and every user's server (and kernels):
        # nothing was left for stop() to kill.
        assert not killed, f"still running after the hub stopped (killed now): {killed}"
        print(f"\nhub stopped with the servers of {sorted(u for u in users if u)} running; "
              "nothing left behind")


@pytest.fixture(scope="module")
def browser(chrome, hub):
    from tests.chrome import fresh

    drv = fresh(chrome, page_load_timeout=120)
    yield HubBrowser(drv, hub.url, hub.password, hub.root / "screenshots")


def _solutions(source: Path) -> dict[str, dict[str, str]]:
    """{notebook name: {grade_id: the source version's answer}}, solution markers removed."""
    out = {}
    for path in sorted(source.glob("*.ipynb")):
        nb = nbformat.read(path, as_version=4)
        out[path.name] = {
            c.metadata.nbgrader["grade_id"]: "\n".join(
                line for line in c.source.splitlines()
                if not re.match(r"\s*#+ (BEGIN|END) SOLUTION", line))
            for c in nb.cells
            if c.metadata.get("nbgrader", {}).get("solution")}
    return out


def _assignment_row(b: HubBrowser, assignment: str, button: str) -> str:
    return (f"//div[contains(@class,'list_item')][.//*[normalize-space()='{assignment}']]"
            f"//button[normalize-space()='{button}']")


def _open_assignments(b: HubBrowser) -> None:
    b.menu("Nbgrader", "Assignment List")
    b.wait(lambda d: b.xpath("//*[contains(text(),'Released assignments')]"), 60,
           "the Assignments panel")


def _write_answers(b: HubBrowser, assignment: str, answers: dict[str, dict[str, str]],
                   broken: bool) -> None:
    for name, by_id in answers.items():
        path = f"api/contents/{assignment}/{name}"
        model = b.api("GET", f"{path}?content=1")
        nb = model["content"]
        for cell in nb["cells"]:
            gid = cell.get("metadata", {}).get("nbgrader", {}).get("grade_id")
            if gid in by_id:
                cell["source"] = BROKEN if broken else by_id[gid]
        b.api("PUT", path, {"type": "notebook", "format": "json", "content": nb})
    # What the student now sees in JupyterLab is the answer just written.
    first_nb, first = next((n, a) for n, a in answers.items() if a)
    first_line = (BROKEN if broken else next(iter(first.values()))).strip().splitlines()[0]
    b.d.get(f"{b.url}/user/{b.user}/lab/tree/{assignment}/{first_nb}")
    b.wait(lambda d: first_line.strip() in b.text(), 120, "the answer shown in the notebook")


def _run_all_and_save(b: HubBrowser) -> str:
    """Run every cell of the open notebook in its kernel, as a student checks their work,
    save it, and return the kernel's name. Fails on any error output."""
    b.wait(lambda d: "Idle" in b.text() or b.xpath("//*[contains(@class,'jp-KernelName')]"),
           120, "the notebook's kernel")
    b.menu("Run", "Run All Cells")
    prompts = "//div[contains(@class,'jp-CodeCell')]//div[contains(@class,'jp-InputPrompt')]"

    def finished(d):
        seen = [e.get_attribute("textContent").strip() for e in d.find_elements("xpath", prompts)]
        return seen and all(re.fullmatch(r"\[\d+\]:", t) for t in seen)

    def errors() -> list[str]:
        return [e.get_attribute("textContent") for e in b.d.find_elements(
            "css selector",
            ".jp-OutputArea-output[data-mime-type='application/vnd.jupyter.stderr']")]

    def finished_or_failed(d):
        # Run All stops at a cell that raises: the cells after it are never run
        return finished(d) or bool(errors())

    try:
        b.wait(finished_or_failed, 300, "every cell to run")
    except AssertionError as e:     # say which cells ran: a click that ran none, or a stall
        seen = [x.get_attribute("textContent").strip()
                for x in b.d.find_elements("xpath", prompts)]
        raise AssertionError(f"{e}; the cells' prompts: {seen}") from None
    assert not errors(), f"the notebook failed in the student's kernel: {errors()}"
    b.d.find_element("css selector", "body").send_keys(Keys.CONTROL, "s")
    b.wait(lambda d: not d.find_elements("css selector", ".lm-TabBar-tab.jp-mod-dirty"), 60,
           "the notebook saved")
    return b.d.find_element("css selector", ".jp-Toolbar-kernelName, .jp-KernelName") \
        .get_attribute("textContent").strip()


def _student_submits(b: HubBrowser, hub, user: str, answers, broken: bool) -> None:
    a = hub.assignment
    b.login(user)
    _open_assignments(b)
    b.click(_assignment_row(b, a, "Fetch"), "the Fetch button", 120)
    b.wait(lambda d: b.xpath(_assignment_row(b, a, "Submit")), 120, "the fetched assignment")
    assert (hub.home(user) / a).is_dir()
    _write_answers(b, a, answers, broken)
    if not broken:
        # The whole notebook runs in the student's kernel without an error: the public
        # checks (grader) and, for the course's assignments, its last cell on a real
        # device (torch on a CPU worker here).
        print(f"\n{user}'s notebook ran in the kernel {_run_all_and_save(b)!r}")
    b.d.get(f"{hub.url}/user/{user}/lab")
    _open_assignments(b)
    b.click(_assignment_row(b, a, "Submit"), "the Submit button", 120)
    inbound = hub.root / "exchange" / hub.course_id / "inbound"
    assert retry(lambda: list(inbound.glob(f"{user}+{a}+*")), 60), \
        f"no submission of {user} in the exchange"
    b.wait(lambda d: b.xpath(_assignment_row(b, a, "Fetch Feedback")), 60,
           "the assignment listed as submitted")


def _scores(b: HubBrowser, assignment: str) -> dict[str, tuple[float, float]]:
    subs = b.api("GET", f"formgrader/api/submissions/{assignment}")
    return {s["student"]: (s["score"], s["max_score"]) for s in subs if s.get("autograded")}


def _has_class(cls: str) -> str:
    return f"contains(concat(' ', normalize-space(@class), ' '), ' {cls} ')"


def _formgrader_click(b: HubBrowser, row: str, column: str, timeout: float = 300) -> str:
    """Click the formgrader's icon in ``column`` of the table row for ``row`` (an
    assignment or a student), wait for the result dialog, close it; return its text."""
    cell = f"//tr[.//td[normalize-space()='{row}']]//td[{_has_class(column)}]//a"
    b.click(cell, f"the formgrader's {column} button for {row}")
    # a Bootstrap dialog, shown once its fade-in ends (class "in")
    modal = f"//div[{_has_class('modal')} and {_has_class('in')}][.//h4[{_has_class('modal-title')}]]"
    dialog = b.wait(lambda d: (b.xpath(modal) or [None])[0], timeout, f"the {column} result")
    title = dialog.find_element("css selector", ".modal-title").get_attribute("textContent")
    text = dialog.get_attribute("textContent")
    assert title.strip() == "Success", f"formgrader {column} for {row}: {title}: {text[:3000]}"
    ok = f"{modal}//div[{_has_class('modal-footer')}]//button"

    def closed(d):
        # a click during Bootstrap's fade-in can be lost: click OK until the dialog is gone
        for button in b.xpath(ok):
            try:
                button.click()
            except Exception:
                pass
        return not d.find_elements("xpath", f"//div[{_has_class('modal')}]")

    b.wait(closed, 60, f"the {column} dialog to close")
    return text


def _formgrader_score(b: HubBrowser, student: str) -> tuple[float, float]:
    """The score the formgrader's submissions table shows for ``student``: 'x / y'."""
    cell = f"//tr[.//td[normalize-space()='{student}']]//td[{_has_class('score')}]"
    text = b.wait(lambda d: next((e.text for e in b.xpath(cell) if "/" in e.text), None), 60,
                  f"{student}'s score in the formgrader")
    got, top = (float(x) for x in text.split("/"))
    return got, top


def _student_reads_feedback(b: HubBrowser, hub, user: str) -> list[str]:
    """Fetch feedback in the Assignments panel; return the text of each feedback page."""
    a = hub.assignment
    b.login(user)
    _open_assignments(b)
    b.click(_assignment_row(b, a, "Fetch Feedback"), "the Fetch Feedback button", 120)
    pages = retry(lambda: sorted((hub.home(user) / a / "feedback").glob("*/*.html")), 60)
    assert pages, f"{user}: no feedback fetched into {hub.home(user) / a}"
    texts = []
    for page in pages:
        rel = page.relative_to(hub.home(user)).as_posix()
        b.d.get(f"{hub.url}/user/{user}/files/{rel}")
        b.wait(lambda d: "Score:" in b.text(), 60, f"the feedback page {rel}")
        b.screenshot(f"feedback-{page.stem}")
        texts.append(b.text())
    return texts


def _total(texts: list[str]) -> tuple[float, float]:
    """The notebook scores the feedback pages show: '<notebook> (Score: x / y)'."""
    got = [re.search(r"\(Score: ([\d.]+) / ([\d.]+)\)", t) for t in texts]
    assert all(got), f"no notebook score on a feedback page: {texts}"
    return sum(float(m[1]) for m in got), sum(float(m[2]) for m in got)


def test_students_submit_and_see_grades_the_instructor_released(hub, browser):
    b, a = browser, hub.assignment
    t0, steps = time.monotonic(), []

    def step(name):
        steps.append((name, time.monotonic() - t0))

    answers = _solutions(hub.course_dir() / "source" / a)
    assert any(answers.values()), f"{a} has no answer cells to fill in"

    # Instructor: the formgrader renders inside JupyterLab (the frame-ancestors trap) and
    # works there: generate the student version and release it from the framed page.
    b.login("instructor")
    b.menu("Nbgrader", "Formgrader")
    frame = b.wait(lambda d: (b.xpath("//div[contains(@class,'jp-MainAreaWidget')]//iframe")
                              or [None])[0], 60, "the formgrader iframe")
    b.d.switch_to.frame(frame)
    b.wait(lambda d: "Manage Assignments" in b.text() and b.xpath(
        f"//tr//td[normalize-space()='{a}']"), 90, "the formgrader's content inside its iframe")
    b.screenshot("formgrader-in-lab")
    # the assignments table fits the tab (1055 px in a 1400 px window): nbgrader's layout for
    # a whole window had cut its last columns, 1111 px of page in a 1055 px frame
    wide, room = b.d.execute_script("return [document.documentElement.scrollWidth, "
                                    "document.documentElement.clientWidth]")
    assert wide <= room + 1, f"the formgrader is {wide} px wide in a {room} px tab"
    # the page says its Autograde is not sandboxed (grader.grading.submission.formgrader_notice)
    assert "Not sandboxed." in b.text() and "make grade" in b.text()
    _formgrader_click(b, a, "assign")
    _formgrader_click(b, a, "release")
    b.wait(lambda d: b.xpath(f"//tr[.//td[normalize-space()='{a}']]//*[normalize-space()='released']"),
           60, "the assignment shown as released")
    b.d.switch_to.default_content()
    assert (hub.root / "exchange" / hub.course_id / "outbound" / a).is_dir()
    step("instructor released")

    _student_submits(b, hub, "student1", answers, broken=False)
    step("student1 fetched, answered, submitted")
    _student_submits(b, hub, "student2", answers, broken=True)
    step("student2 submitted a broken notebook")

    # Instructor, on the formgrader's own pages: collect, autograde student1, then
    # student2, then generate and release feedback for both.
    b.login("instructor")
    b.d.get(f"{hub.url}/user/instructor/formgrader/manage_assignments")
    _formgrader_click(b, a, "collect")
    b.d.get(f"{hub.url}/user/instructor/formgrader/manage_submissions/{a}")
    _formgrader_click(b, "student1", "autograde")
    first = _formgrader_score(b, "student1")
    step("collected, student1 autograded")
    _formgrader_click(b, "student2", "autograde")
    b.d.refresh()
    shown = {s: _formgrader_score(b, s) for s in ("student1", "student2")}
    b.screenshot("formgrader-submissions")
    step("student2 autograded")
    assert first[1] > 0 and first[0] == first[1], f"student1's correct answers: {first}"
    assert shown["student1"] == first, "grading student2 changed student1's grade"
    assert shown["student2"] == (0, first[1]), f"student2's broken notebook: {shown['student2']}"
    assert _scores(b, a) == shown, "the formgrader page and the gradebook disagree"
    b.d.get(f"{hub.url}/user/instructor/formgrader/manage_assignments")
    _formgrader_click(b, a, "generate-feedback")
    _formgrader_click(b, a, "release-feedback")
    step("feedback released")

    # Students: each sees their own score, and student2 sees why it is zero.
    got1 = _student_reads_feedback(b, hub, "student1")
    assert _total(got1) == pytest.approx(first), f"student1's feedback: {_total(got1)}"
    step("student1 read the feedback")
    got2 = _student_reads_feedback(b, hub, "student2")
    assert _total(got2) == pytest.approx((0, first[1]))
    assert any("SyntaxError" in t for t in got2), "student2's feedback does not say what broke"
    step("student2 read the feedback")

    print(f"\nend-to-end flow on {a!r} (course {hub.course_id!r}): "
          f"{steps[-1][1]:.1f} s in all; student1 {first[0]:g}/{first[1]:g}, student2 0/{first[1]:g}")
    prev = 0.0
    for name, t in steps:
        print(f"  {t - prev:6.1f} s  {name}")
        prev = t
