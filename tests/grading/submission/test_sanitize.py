"""Student HTML is sanitized and fenced by a Content-Security-Policy wherever a page is made
from a submission (grader/grading/submission/sanitize.py; the formgrader's server extension:
test_formgrader_guard.py).

Static checks on the HTML; tests/grading/submission/test_feedback_browser.py and
tests/hub/test_formgrader_payloads.py open the pages in Chromium."""
from __future__ import annotations

import os
import re
from pathlib import Path

import nbformat
import pytest
from bs4 import BeautifulSoup
from nbformat.v4 import new_markdown_cell, new_output

from grader.grading.submission import sanitize
from grader.grading.submission.formgrader_guard import NOTEBOOK_START
from grader.grading.submission.sanitize import SanitizeStudentHTML, clean_html, protect
from tests.grading import payloads

ROOT = Path(__file__).resolve().parents[3]
LISTENER = "http://127.0.0.1:9"


@pytest.mark.parametrize("payload, kept", [
    ("<script>document.title=1</script>ok", "ok"),
    ('<img src="x" onerror="alert(1)">', '<img src="x">'),
    ("<svg onload=alert(1)><circle/></svg>after", "after"),
    ('<a href="javascript:alert(1)">js</a>', '<a rel="noopener noreferrer">js</a>'),
    ('<a href=" JaVaScRiPt:alert(1)">js</a>', '<a rel="noopener noreferrer">js</a>'),
    ('<iframe srcdoc="<script>alert(1)</script>"></iframe>x', "x"),
    ('<details open ontoggle="alert(1)"><summary>s</summary></details>',
     "<details><summary>s</summary></details>"),
    ('<img src="data:text/html;base64,PHNjcmlwdD4=">', "<img>"),
    ('<a href="data:text/html,<script>x</script>">d</a>', '<a rel="noopener noreferrer">d</a>'),
    ('<form action="/x"><input name="a"></form><object data="x"></object>', ""),
    ('<meta http-equiv="refresh" content="0;url=javascript:alert(1)"><base href="//e/">', ""),
    ('<a id="base_url" class="tabbable score" href="https://example.org/">l</a>',
     '<a class="" href="https://example.org/" rel="noopener noreferrer">l</a>'),
])
def test_clean_html_removes_what_runs_script_and_what_the_page_looks_up(payload, kept):
    assert clean_html(payload) == kept


def test_clean_html_keeps_honest_markup():
    honest = ('<div class="highlight"><pre><span class="k">def</span> f</pre></div>'
              '<table class="dataframe"><tbody><tr style="text-align:right"><td>1</td></tr>'
              '</tbody></table><img src="data:image/png;base64,iVBORw0KGgo=" alt="a">'
              '<a href="https://example.org/" rel="noopener noreferrer">link</a><b>b</b>')
    assert clean_html(honest) == honest


def _cells(nb):
    return [SanitizeStudentHTML().preprocess_cell(c, {}, i)[0] for i, c in enumerate(nb.cells)]


def test_outputs_that_run_script_are_dropped_and_html_outputs_cleaned():
    cells = _cells(payloads.with_outputs(LISTENER))
    outs = [o for c in cells for o in c.get("outputs", []) if o.output_type == "display_data"]
    mimes = {m for o in outs for m in o.data}
    assert "application/javascript" not in mimes
    assert all("<script" not in o.data.get("text/html", "") for o in outs)
    assert all("onerror" not in o.data.get("text/html", "") for o in outs)
    # the PNG whose "base64" breaks out of the attribute is gone; the honest one is kept
    pngs = [o.data["image/png"] for o in outs if "image/png" in o.data]
    assert pngs == [payloads.PNG]
    assert not any(o.metadata for o in outs), "isolated (an iframe) and the like are dropped"


def test_image_size_metadata_is_kept_only_as_numbers():
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("x")])
    nb.cells[0].outputs = [new_output("display_data", data={"image/png": payloads.PNG},
                                      metadata={"image/png": {"width": 40, "height": "1 onload=x",
                                                              "filenames": "/etc/passwd"}})]
    (cell,) = _cells(nb)
    assert cell.outputs[0].metadata == {"image/png": {"width": 40}}


def test_a_grade_id_that_could_leave_its_attribute_loses_its_nbgrader_metadata():
    bad = new_markdown_cell("answer", metadata={"nbgrader": {
        "solution": True, "grade": False, "grade_id": 'x"><img src=x onerror=alert(1)>'}})
    good = new_markdown_cell("answer", metadata={"nbgrader": {
        "solution": True, "grade": False, "grade_id": "a1-explain_2"}})
    cells = _cells(nbformat.v4.new_notebook(cells=[bad, good]))
    assert "nbgrader" not in cells[0].metadata
    assert cells[1].metadata.nbgrader["grade_id"] == "a1-explain_2"


def test_protect_gives_the_nonce_only_to_the_templates_scripts():
    page = ('<html><head><script src="https://cdn.example.org/lib/mathjax/2.7.7/latest.js">'
            '</script><script>var base_url = "/x";</script></head><body>'
            '<span onclick="toggle_name(true);"></span><div id="notebook-container">'
            '<script>evil()</script><span onclick="evil()"></span>')
    out, policy = protect(page, NOTEBOOK_START, connect=True)
    nonce = re.search(r"'nonce-([^']+)'", policy).group(1)
    assert out.count(f'nonce="{nonce}"') == 2
    assert "<script>evil()</script>" in out          # no nonce: the browser refuses it
    assert "'unsafe-inline'" not in policy.split("script-src")[1].split(";")[0]
    assert "https://cdn.example.org/lib/mathjax/" in policy     # where MathJax loads from
    assert "'unsafe-hashes'" in policy and policy.count("'sha256-") == 1
    assert "default-src 'none'" in policy and "connect-src 'self'" in policy
    again, policy2 = protect(page, NOTEBOOK_START)
    assert policy2 != policy, "a fresh nonce for every page"


def test_without_the_marker_no_script_is_trusted():
    out, policy = protect("<html><head><script>a()</script></head>", NOTEBOOK_START)
    assert "nonce=" not in out and "script-src 'nonce-" in policy


def _feedback_exporter():
    """The exporter nbgrader's GenerateFeedback makes from the course's own config."""
    from nbgrader.converters import GenerateFeedback
    from nbgrader.coursedir import CourseDirectory
    from traitlets.config.loader import PyFileConfigLoader

    cfg = PyFileConfigLoader("nbgrader_config.py", path=str(ROOT / "exercises")).load_config()
    app = GenerateFeedback(coursedir=CourseDirectory(config=cfg), config=cfg)
    return app.exporter_class(parent=app, config=app.config)


def _unsafe_elements(page: str) -> list[str]:
    """Script a browser could run in ``page``'s body: script elements, event handlers,
    javascript: URLs, embedded documents."""
    nonce = re.search(r"'nonce-([^']+)'", page)
    soup = BeautifulSoup(page, "html.parser")
    bad = []
    for el in soup.find_all(True):
        if el.name == "script" and (nonce is None or el.get("nonce") != nonce.group(1)):
            bad.append(str(el)[:80])
        if el.name in ("iframe", "object", "embed", "svg", "base", "form"):
            bad.append(el.name)
        for attr, value in el.attrs.items():
            value = " ".join(value) if isinstance(value, list) else str(value)
            if attr.lower().startswith("on"):
                bad.append(f"{el.name} {attr}")
            if re.match(r"\s*(javascript|vbscript|data:text)", value, re.I) and attr in (
                    "href", "src", "action", "formaction", "srcdoc"):
                bad.append(f"{el.name} {attr}={value[:40]}")
    return bad


def test_the_courses_feedback_exporter_writes_no_runnable_student_html():
    ex = _feedback_exporter()
    assert isinstance(ex, sanitize.FeedbackHTMLExporter)
    page, _ = ex.from_notebook_node(payloads.with_outputs(LISTENER), resources={
        "nbgrader": {"notebook": "nb", "score": 1, "max_score": 2, "late_penalty": 0}})
    assert _unsafe_elements(page) == []
    # the policy is the head's first element, before anything it governs
    assert re.match(r'<!DOCTYPE html>\s*<html>\s*<head>\s*<meta http-equiv="Content-Security-Policy"',
                    page), page[:200]
    missing = [t for t in payloads.HONEST_TEXT if t not in page]
    assert not missing
    # the control: nbconvert's stock exporter leaves the payloads runnable
    from nbconvert import HTMLExporter

    stock, _ = HTMLExporter(template_name="classic").from_notebook_node(
        payloads.with_outputs(LISTENER))
    found = " ".join(_unsafe_elements(stock))
    for kind in ("script", "img onerror", "svg", "iframe", "details ontoggle", "javascript:"):
        assert kind in found, kind


def test_the_course_and_the_hub_configure_every_html_exporter():
    from traitlets.config.loader import PyFileConfigLoader

    env = dict(COURSE_HUB_COURSE_ID="c", COURSE_HUB_EXCHANGE="/tmp/x", HOME="/tmp")
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        for folder in (ROOT / "exercises", ROOT / "hub" / "singleuser"):
            cfg = PyFileConfigLoader("nbgrader_config.py", path=str(folder)).load_config()
            assert cfg.HTMLExporter.sanitize_html is True, folder
            assert cfg.HTMLExporter.filters["markdown2html"] is sanitize.SafeMarkdown
            assert cfg.HTMLExporter.preprocessors == [SanitizeStudentHTML]
            assert cfg.GenerateFeedback.exporter_class is sanitize.FeedbackHTMLExporter
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    server = PyFileConfigLoader("jupyter_server_config.py",
                                path=str(ROOT / "hub" / "singleuser")).load_config()
    assert server.ServerApp.jpserver_extensions["grader.grading.submission.formgrader_guard"] is True
