"""Feedback pages draw a student's math as MathML, made when the page is made, with nothing
loaded from anywhere (grader/grading/submission/mathml.py, sanitize.FeedbackHTMLExporter).

The page is built in memory by the exporter the course's nbgrader configuration makes;
tests/grading/submission/test_feedback_browser.py opens one in Chromium."""
from __future__ import annotations

import re
import time

import nbformat
import pytest
from bs4 import BeautifulSoup
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook, new_output

from grader.grading.submission import mathml
from tests.grading.submission.test_sanitize import _feedback_exporter, _unsafe_elements

RESOURCES = {"nbgrader": {"notebook": "nb", "score": 1, "max_score": 2, "late_penalty": 0}}


def math_notebook() -> nbformat.NotebookNode:
    """Inline, display and environment math in markdown, in an instructor's comment, in a
    markdown output and in a text/latex output (as sympy and IPython.display.Math make)."""
    answer = new_markdown_cell(
        "Inline $a^2+b^2=c^2$, display $$\\sum_{i=1}^{n} x_i$$ and\n\n"
        "\\begin{align}y &= \\frac{1}{2}\\\\ z &= \\sqrt{y}\\end{align}\n\n# Loss $\\mathcal{L}$",
        metadata={"nbgrader": {"solution": True, "grade": True, "grade_id": "q1", "points": 2,
                               "score": 1, "comment": "Check $\\nabla_\\theta \\mathcal{L}$."}})
    code = new_code_cell("show()", outputs=[
        new_output("display_data", data={"text/markdown": "the mean $\\bar{x}$",
                                         "text/plain": "md"}),
        new_output("execute_result", execution_count=1, data={
            "text/latex": "$\\displaystyle \\frac{\\pi}{4}$", "text/plain": "pi/4"})])
    return new_notebook(cells=[answer, code])


def export(nb) -> str:
    return _feedback_exporter().from_notebook_node(nb, resources=RESOURCES)[0]


def test_math_is_mathml_and_the_page_loads_nothing_from_anywhere():
    page = export(math_notebook())
    soup = BeautifulSoup(page, "html.parser")
    body = soup.body.get_text()
    # every expression is MathML: no TeX is left for a script to typeset
    for tex in ("a^2", "\\sum", "\\frac", "\\sqrt", "\\mathcal", "\\nabla", "\\bar", "\\pi"):
        assert tex not in body, tex
    maths = soup.find_all("math")
    assert len(maths) == 7, [str(m)[:60] for m in maths]
    assert [m["display"] for m in maths].count("block") == 2     # $$..$$ and align
    assert soup.find("mfrac") and soup.find("msqrt") and soup.find("munderover")
    assert soup.select_one(".output_latex mfrac"), "the text/latex output is MathML"
    assert soup.select_one(".panel-footer math"), "the instructor's comment's math too"
    assert soup.select_one(".output_markdown math"), "the markdown output's math too"
    # nothing the page could fetch: no script at all, no link, no src or CSS url off the page
    assert soup.find_all("script") == [] and soup.find_all("link") == []
    assert not [t for t in soup.find_all(src=True) if not t["src"].startswith("data:")]
    assert not re.search(r"url\(\s*['\"]?(https?:)?//", page, re.I)
    policy = soup.find("meta", attrs={"http-equiv": "Content-Security-Policy"})["content"]
    assert "http" not in policy and "mathjax" not in policy.lower(), policy
    assert _unsafe_elements(page) == []


HOSTILE = {
    "href": r"\href{javascript:alert(1)}{x}",
    "href-data": r"\href{data:text/html,<script>alert(1)</script>}{x}",
    "style": r"\style{background:url(http://127.0.0.1:9/style)}{x}",
    "class": r"\class{score tabbable}{x}",
    "cssId": r"\cssId{base_url}{x}",
    "unicode": r"\unicode{x3c}script\unicode{x3e}alert(1)\unicode{x3c}/script\unicode{x3e}",
    "text-script": r"\text{<script>alert(1)</script>}",
    "text-img": r"\text{<img src=x onerror=alert(1)>}",
    "text-close-math": r"\text{</math><img src=x onerror=alert(1)>}",
    "verb": r"\verb|<svg onload=alert(1)>|",
    "entity": r"\text{&lt;script&gt;&#x3c;img src=x onerror=alert(1)&#x3e;}",
    "color": r"\color{red;background:url(http://127.0.0.1:9/c)}{x}",
    "colorbox": r"\colorbox{url(http://127.0.0.1:9/c)}{x}",
    "huge-rule": r"\rule{10000em}{10000em}",
    "huge-space": r"\hspace{-9999em}x",
    "mathtip": r"\mathtip{x}{<img src=x onerror=alert(1)>}",
    "toggle": r"\toggle{x}{y}\endtoggle",
}


def _math_is_allowed_only(fragment: str) -> list[str]:
    """Elements and attributes inside <math> outside the allow-lists."""
    bad = []
    for m in BeautifulSoup(fragment, "html.parser").find_all("math"):
        for el in [m, *m.find_all(True)]:
            if el.name not in mathml.ELEMENTS:
                bad.append(el.name)
            for attr, value in el.attrs.items():
                if attr not in mathml.ATTRIBUTES or re.search(r"[:(;<>\"'\\]", str(value)):
                    bad.append(f"{el.name} {attr}={value}")
    return bad


@pytest.mark.parametrize("name", sorted(HOSTILE))
def test_hostile_tex_injects_nothing_and_its_honest_neighbour_still_draws(name):
    tex = HOSTILE[name]
    nb = new_notebook(cells=[new_markdown_cell(f"ok $y^2$ then ${tex}$ and $$ {tex} $$")])
    nb.cells.append(new_code_cell("x", outputs=[new_output(
        "execute_result", execution_count=1, data={"text/latex": f"$y^3$ ${tex}$"})]))
    page = export(nb)
    body = page.split("</head>", 1)[1]
    soup = BeautifulSoup(body, "html.parser")
    assert soup.find("msup"), "the honest y^2 next to it is drawn"
    assert _unsafe_elements(page) == []
    assert _math_is_allowed_only(body) == []
    for el in soup.find_all(True):
        for attr, value in el.attrs.items():
            v = " ".join(value) if isinstance(value, list) else str(value)
            assert "javascript" not in v.lower() and "url(" not in v, (el.name, attr, v)
            assert not attr.startswith("on"), (el.name, attr)
    for el in soup.select("math, math *"):
        assert not {"style", "class", "id", "href"} & set(el.attrs), el


def test_to_mathml_writes_only_allowed_elements_attributes_and_escaped_text():
    for tex in HOSTILE.values():
        out = mathml.to_mathml(tex)
        assert _math_is_allowed_only(out) == [], (tex, out)
        assert "<script" not in out and "<img" not in out and "<svg" not in out, out
    # attribute values are checked, not only named: an honest colour and size stay
    assert 'mathcolor="red"' in mathml.to_mathml(r"\color{red}{x}")
    assert 'width="1em"' in mathml.to_mathml(r"\rule{1em}{2em}")
    assert 'displaystyle="true"' in mathml.to_mathml(r"\displaystyle x")
    assert not re.search(r"width=|height=", mathml.to_mathml(r"\rule{10000em}{10000em}"))
    for tex in (r"\color{red;background:url(x)}{x}", r"\colorbox{red(}{x}"):
        out = mathml.to_mathml(tex)
        assert not re.search(r"mathcolor=|mathbackground=", out), out
    # what latex2mathml's own string output would have written
    from latex2mathml.converter import convert

    assert "<script>" in convert(HOSTILE["text-script"])


@pytest.mark.parametrize("tex, why", [
    ("x+" * 500_000, "longer than"),
    ("{" * 1000 + "x" + "}" * 1000, "nested deeper"),
    (r"\sqrt[" * 200 + "1" + "]{2}" * 200, "nested deeper"),
    (r"\newcommand{\a}{xxxx}" + "".join(r"\newcommand{\%s}{%s}" % (chr(98 + i),
     ("\\" + chr(97 + i)) * 8) for i in range(8)) + r"\i", "not drawn"),
    (r"x^^^", "not drawn"),
])
def test_bad_or_huge_tex_is_shown_as_its_source_quickly(tex, why):
    start = time.perf_counter()
    out = mathml.to_mathml(tex)
    took = time.perf_counter() - start
    assert out.startswith('<code class="tex-source"') and why in out, out[:200]
    assert "<math" not in out and took < 2, took


def test_a_page_converts_at_most_its_budget_of_tex(monkeypatch):
    monkeypatch.setattr(mathml, "PAGE_TEX", 2000)
    many = " ".join(["$x_{1}+x_{2}$"] * 1000)          # 11,000 characters of TeX
    start = time.perf_counter()
    page = export(new_notebook(cells=[new_markdown_cell(many)]))
    took = time.perf_counter() - start
    drawn = page.count("<math")
    assert 150 <= drawn <= 2000 // 11 and page.count("tex-source") == 1000 - drawn, drawn
    assert "more than 2000 characters of TeX" in page
    assert took < 10, took


def test_a_whole_page_budget_of_the_densest_tex_converts_in_seconds():
    """The real PAGE_TEX: ~1.4 s and ~1 MB of MathML for dense ``x+x+...`` on a quiet core
    (the most per character of the shapes tried: fractions, nesting, matrices, scripts)."""
    dense = "x+" * (mathml.MAX_TEX // 2 - 5)
    drawn = chars = size = 0
    start = time.perf_counter()
    with mathml.page_budget():
        for _ in range(mathml.PAGE_TEX // len(dense) + 5):
            out = mathml.to_mathml(dense)
            drawn += out.startswith("<math")
            chars += len(dense) * out.startswith("<math")
            size += len(out)
    took = time.perf_counter() - start
    print(f"\n{drawn} expressions, {chars} characters of TeX drawn in {took:.2f} s, "
          f"{size / 1e6:.1f} MB of MathML")
    assert chars <= mathml.PAGE_TEX < chars + len(dense)
    assert took < 15 and size < 3e6
