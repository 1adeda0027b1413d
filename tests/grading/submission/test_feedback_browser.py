"""A graded student's feedback page runs none of the student's script in a real browser.

Mallory submits alice's correct assignment 1 plus every payload of tests/grading/payloads.py
(script tags, ``onerror``/``onload``/``ontoggle`` handlers, ``javascript:`` links, an
``iframe srcdoc``, HTML, markdown, SVG and JavaScript outputs, a PNG whose data breaks out of
its attribute, an "isolated" HTML output) beside honest content. ``make grade``'s pipeline
(sandboxed kernel, judge, feedback) grades it, in the class tests/grading/conftest.py shares
with test_attacks.py (beside alice and the hostile submissions). Chromium opens the feedback page served over
HTTP, clicks every link, and sees no payload run (no title change, nothing in
``window.pwned``, no request to the listener) while the honest content renders and the
score is alice's. The control: the same autograded notebook rendered with nbgrader's feedback
template as it ships (no sanitizing, no policy) runs them in the same browser.
"""
from __future__ import annotations

from pathlib import Path

import pytest

from grader.grading.submission.sanitize import meta_policy
from tests.grading import payloads

pytestmark = [pytest.mark.slow, pytest.mark.browser]

ROOT = Path(__file__).resolve().parents[3]
EXERCISES = ROOT / "exercises"
A1 = "a1_independent_ops"


@pytest.fixture(scope="module")
def graded(hostile_class):
    """(the course, the run): mallory graded in tests/grading/conftest.py's shared class,
    beside alice (and the hostile attacks), under that class's limits."""
    run, _, course, _ = hostile_class
    return course, run


@pytest.fixture(scope="module")
def browser(chrome):
    from tests.chrome import fresh

    return fresh(chrome)


def _stock_feedback(course: Path) -> Path:
    """Mallory's feedback from nbgrader as it ships (its own defaults, not the course's
    config), into ``feedback-stock/``."""
    from nbgrader.apps.api import NbGraderAPI
    from nbgrader.coursedir import CourseDirectory
    from traitlets.config import Config

    cfg = Config()
    cfg.CourseDirectory.root = str(course)
    cfg.CourseDirectory.feedback_directory = "feedback-stock"
    res = NbGraderAPI(coursedir=CourseDirectory(config=cfg), config=cfg).generate_feedback(
        A1, "mallory")
    assert res["success"], res
    return course / "feedback-stock" / "mallory" / A1 / f"{A1}.html"


def test_feedback_runs_no_student_script_and_shows_the_honest_work(graded, browser, listener):
    course, run = graded
    alice, mallory = run.find("alice", A1), run.find("mallory", A1)
    assert mallory.status == "graded", mallory.reason
    assert alice.status == "graded" and alice.score == alice.max_score > 0, alice
    assert (mallory.score, mallory.max_score) == (alice.score, alice.max_score)
    page = course / "feedback" / "mallory" / A1 / f"{A1}.html"
    stock = _stock_feedback(course)
    # the policy alone, on the unsanitized page: what a payload the sanitizer missed meets
    policy_only = stock.with_name("policy-only.html")
    policy_only.write_text(meta_policy(stock.read_text(encoding="utf-8")), encoding="utf-8")
    site = payloads.StaticSite(course)
    try:
        seen = payloads.observe(browser, f"{site.url}/feedback/mallory/{A1}/{A1}.html", listener)
        control = payloads.observe(browser, f"{site.url}/{stock.relative_to(course)}", listener)
        fenced = payloads.observe(browser, f"{site.url}/{policy_only.relative_to(course)}",
                                  listener)
    finally:
        site.close()
    every = payloads.every_name(listener.url)
    text = page.read_text(encoding="utf-8")
    left = sorted(n for n in every if f"pwned:{n}" in text.split("</head>", 1)[1]
                  and not _only_in_code(text, n))
    print(f"\nmallory {mallory.score:g}/{mallory.max_score:g}, alice {alice.score:g}/{alice.max_score:g}"
          f"\nfeedback: payloads run {sorted(seen['ran'])}; left in the page as markup (the "
          f"policy's to refuse) {left}; policy refusals in the console: {len(seen['refused'])}"
          f"\nstock nbgrader feedback (control): ran {sorted(control['ran'])}"
          f"\nthe same page with only the policy: ran {sorted(fenced['ran'])}, "
          f"{len(fenced['refused'])} refusals in the console")
    assert seen["ran"] == set(), seen
    missing = [t for t in payloads.HONEST_TEXT if t not in seen["text"]]
    assert not missing, f"honest content not shown: {missing}"
    assert seen["images"] >= 2, "the honest PNG and SVG outputs are shown as images"
    # the control: the payloads are real, and the four ran without the protection
    assert {"md-script", "md-img-onerror", "out-html-script", "out-html-img",
            "out-md-img", "md-javascript-link", "md-iframe-srcdoc"} <= control["ran"], control
    # the second layer holds by itself: every one of them is refused by the policy
    assert fenced["ran"] == set(), fenced
    assert len(fenced["refused"]) >= len(control["ran"]) - 1, fenced["refused"]


def _only_in_code(text: str, name: str) -> bool:
    """True when every mention of ``name`` in the page is escaped text (highlighted code)."""
    from bs4 import BeautifulSoup

    soup = BeautifulSoup(text, "html.parser")
    for el in soup.find_all(True):
        for value in el.attrs.values():
            if f"pwned:{name}" in (" ".join(value) if isinstance(value, list) else str(value)):
                return False
        if el.name == "script" and f"pwned:{name}" in (el.string or ""):
            return False
    return True


def test_feedback_math_is_drawn_with_no_request_at_all(browser, tmp_path):
    """The math of tests/grading/submission/test_mathml.py's notebook (markdown, a comment,
    a markdown and a text/latex output) is laid out as math by Chromium itself, and the page
    asks for nothing: not MathJax, not a font, not a style sheet. The control (nbconvert's
    page of the same notebook, which loads MathJax from its CDN) shows both measures work:
    its requests are seen, and offline its math stays TeX."""
    from nbconvert import HTMLExporter

    from tests.grading.submission.test_mathml import export, math_notebook

    nb = math_notebook()
    (tmp_path / "feedback.html").write_text(export(nb), encoding="utf-8")
    stock, _ = HTMLExporter(template_name="classic").from_notebook_node(nb)
    (tmp_path / "stock.html").write_text(stock, encoding="utf-8")
    look = """
        const maths = Array.from(document.querySelectorAll('math'));
        const frac = document.querySelector('mfrac');
        const num = frac && frac.querySelector('mi, mn');
        // the browser's own favicon request is not the page's
        return {requests: performance.getEntriesByType('resource').map(e => e.name)
                    .filter(n => !n.endsWith('/favicon.ico')),
                maths: maths.length,
                blocks: maths.filter(m => getComputedStyle(m).display === 'block math').length,
                frac: frac ? [frac.getBoundingClientRect().height,
                              num.getBoundingClientRect().height] : null};"""
    site = payloads.StaticSite(tmp_path)
    try:
        seen = {}
        for name in ("feedback", "stock"):
            browser.get(f"{site.url}/{name}.html")
            seen[name] = browser.execute_script(look)
        log = [e["message"] for e in browser.get_log("browser")]
    finally:
        site.close()
    print(f"\nfeedback: {seen['feedback']}\nstock (control): {seen['stock']}")
    ours = seen["feedback"]
    assert ours["requests"] == [], ours
    assert ours["maths"] == 7 and ours["blocks"] == 2, ours
    height, digit = ours["frac"]
    assert height > 1.5 * digit > 0, "a fraction is drawn as numerator over denominator"
    assert any("mathjax" in r for r in seen["stock"]["requests"]), seen["stock"]
    assert seen["stock"]["maths"] == 0
    assert not [m for m in log if "feedback.html" in m], log
