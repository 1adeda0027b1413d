"""What a reader sees on a page, read from the book's HTML or its MyST source: the lines
of its outputs, and the text of each framework's tab.

Used by tests/test_book.py on the built book (no build of its own) and by
tests/test_book_html.py on made-up pages and on the chapters' sources (``make test-fast``).

- Output lines: every ``<pre>`` of a cell's output is a box that scrolls sideways; a line
  longer than :data:`WIDTH` characters is cut at the page's edge (the review found lines of
  265-336 characters, a prediction table 2030 px wide).
- Tabs: a page's text is shared (both tabs show it), or one framework's: a cell tagged
  ``torch``/``paddle`` with its outputs, or an ``only-torch``/``only-paddle`` div. One
  framework's text may name the other framework only beside its own (a comparison:
  "`paddle.DataParallel` is the counterpart of PyTorch's DDP"); a sentence of the Paddle tab
  naming only PyTorch's things tells the Paddle reader about a run they do not see.
  :data:`ONLY_IN` lists, per page, claims that are true of one tab only: each must be in
  that tab's text, never in the other's or in the shared text.
"""
from __future__ import annotations

import html as htmllib
import re
from dataclasses import dataclass

from bs4 import BeautifulSoup

WIDTH = 100
FRAMEWORKS = ("torch", "paddle")

# Names a reader of one tab meets only in that framework (the other framework's name,
# its launcher, its packages and its own wrappers).
NAMES = {
    "torch": re.compile(r"PyTorch|\btorch(run)?\b|\btorch\.|\bDTensor\b|\bFSDP2?\b|"
                        r"\bDDP\b|CommDebugMode|init_device_mesh"),
    "paddle": re.compile(r"Paddle|\bpaddle\b|\bpaddle\.|\b[Ff]leet\b|ProcessMesh"),
}

# Claims that are true of one framework's tab only, per page (the review of round 3 found
# them in the shared text, or in the other tab): {page: {framework: [phrase, ...]}}.
ONLY_IN: dict[str, dict[str, list[str]]] = {
    "tensor_parallel": {"torch": ["2-D mesh on 4 ranks", "lines of the figure"]},
}


def other(framework: str) -> str:
    return "paddle" if framework == "torch" else "torch"


@dataclass
class PageText:
    """A page's text split by who sees it: ``shared`` (both tabs) and one list per
    framework; ``outputs`` are the lines of every output box, with the tab they are in
    (``None`` for a shared cell)."""
    shared: list[str]
    tabs: dict[str, list[str]]
    outputs: list[tuple[str | None, str]]


def _tab_of(classes: list[str]) -> str | None:
    for fw in FRAMEWORKS:
        if f"tag_{fw}" in classes or f"only-{fw}" in classes:
            return fw
    return None


def read_html(page_html: str) -> PageText:
    """The text of a built page, by tab: cells (``div.cell.tag_<fw>``) and prose divs
    (``div.only-<fw>``) are one framework's; the rest of the article is shared. Output
    lines go to ``outputs``; cells' code is left out."""
    soup = BeautifulSoup(page_html, "html.parser")
    article = soup.find("article") or soup
    for junk in article.select("script, style, .headerlink"):
        junk.decompose()
    text = PageText([], {fw: [] for fw in FRAMEWORKS}, [])
    for pre in article.select(".cell_output pre"):
        owner = pre.find_parent(lambda t: t.name == "div" and _tab_of(t.get("class", [])))
        fw = _tab_of(owner.get("class", [])) if owner else None
        for line in pre.get_text().splitlines():
            text.outputs.append((fw, line))
    for code in article.select(".cell_input, .cell_output"):
        code.decompose()   # code is the chapter tests' (tests/test_chapters.py); outputs: above
    for block in article.find_all(lambda t: t.name == "div" and _tab_of(t.get("class", []))):
        if block.find_parent(lambda t: t.name == "div" and _tab_of(t.get("class", []))):
            continue   # inside another tab's block: counted with it
        text.tabs[_tab_of(block.get("class", []))].append(block.get_text(" "))
        block.decompose()
    text.shared.append(article.get_text(" "))
    return text


_DIV = re.compile(r"^(:{3,})\{div\}\s+only-(torch|paddle)\s*\n(.*?)^\1\s*$", re.S | re.M)
_CELL = re.compile(r"^(`{3,})\{code-cell\}[^\n]*\n(.*?)^\1\s*$", re.S | re.M)


def read_source(md: str) -> PageText:
    """The prose of a MyST chapter by tab (its cells' code is left out: the chapter tests
    check each tab's code). No outputs: those exist only once the page ran."""
    text = PageText([], {fw: [] for fw in FRAMEWORKS}, [])
    md = re.sub(r"^---\n.*?\n---\n", "", md, count=1, flags=re.S)   # front matter
    md = _CELL.sub("", md)
    for m in _DIV.finditer(md):
        text.tabs[m.group(2)].append(m.group(3))
    text.shared.append(_DIV.sub("", md))
    return text


def gpu_output_lines(page_html: str) -> list[str]:
    """The output lines of the page's GPU-cell replays (cells tagged ``gpu-output``: what
    :func:`grader.lab.core.gpucells.gpu_output` showed), and of nothing else: a CPU run of
    the same script may print the same lines."""
    soup = BeautifulSoup(page_html, "html.parser")
    return [line for cell in soup.select("div.cell.tag_gpu-output")
            for pre in cell.select(".cell_output pre") for line in pre.get_text().splitlines()]


def wide_lines(text: PageText, width: int = WIDTH) -> list[str]:
    """Output lines longer than ``width`` characters (tabs count as 8; trailing spaces,
    which show nothing, do not count)."""
    return [line for _, line in text.outputs if len(line.expandtabs().rstrip()) > width]


def sentences(block: str) -> list[str]:
    block = re.sub(r"\s+", " ", htmllib.unescape(block))
    return [s.strip() for s in re.split(r"(?<=[.!?])\s+(?=[A-Z`(])", block) if s.strip()]


def foreign_sentences(text: PageText) -> list[tuple[str, str]]:
    """``(framework, sentence)`` for each sentence of one framework's text (prose and
    output lines) that names the other framework's things and not its own."""
    found = []
    for fw in FRAMEWORKS:
        pieces = [s for block in text.tabs[fw] for s in sentences(block)]
        pieces += [line for owner, line in text.outputs if owner == fw]
        for s in pieces:
            if NAMES[other(fw)].search(s) and not NAMES[fw].search(s):
                found.append((fw, s))
    return found


def misplaced_claims(page: str, text: PageText) -> list[str]:
    """Each :data:`ONLY_IN` claim of ``page`` that is missing from its own tab, or found
    in the shared text or the other tab."""
    def has(blocks: list[str], phrase: str) -> bool:
        return any(phrase in re.sub(r"\s+", " ", htmllib.unescape(b)) for b in blocks)

    problems = []
    for fw, phrases in ONLY_IN.get(page, {}).items():
        for phrase in phrases:
            if not has(text.tabs[fw], phrase):
                problems.append(f"{phrase!r} is not in the {fw} tab")
            if has(text.shared, phrase) or has(text.tabs[other(fw)], phrase):
                problems.append(f"{phrase!r} is true of the {fw} tab only, and is shown "
                                f"to {other(fw)} readers")
    return problems
