"""The page readers of tests/book_html.py, on made-up pages, and the chapters' sources:
each framework's prose names the other framework only beside its own, and the claims
true of one tab only are in that tab (no build needed; the built pages' outputs are
checked by tests/test_book.py)."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests import book_html

ROOT = Path(__file__).resolve().parent.parent
PAGES = sorted((ROOT / "chapters").glob("*.md"))

PAGE = """<html><body><article class="bd-article">
<h1>T<a class="headerlink" href="#t">#</a></h1>
<p>Shared prose about both frameworks.</p>
<div class="cell tag_torch docutils container"><div class="cell_input"><pre>x</pre></div>
<div class="cell_output docutils container"><div class="output stream highlight-myst-ansi">
<div class="highlight"><pre><span></span>short line
{wide}
torch ran it
</pre></div></div></div></div>
<div class="cell tag_paddle docutils container">
<div class="cell_output docutils container"><div class="output stream"><pre>Paddle: fine
PyTorch only here
</pre></div></div></div>
<div class="only-paddle docutils container"><p>Paddle's run is like {torch_thing}.
The lines of the figure are Paddle&#39;s too.</p></div>
<div class="only-torch docutils container"><p>The 2-D mesh on 4 ranks ran
here.</p></div>
</article></body></html>"""


def _page(wide: str = "w" * 100, torch_thing: str = "PyTorch's") -> str:
    return PAGE.format(wide=wide, torch_thing=torch_thing)


def test_the_gpu_replays_lines_are_read_apart_from_other_outputs():
    page = _page().replace('class="cell tag_paddle docutils container"',
                           'class="cell tag_paddle tag_gpu-output docutils container"')
    assert book_html.gpu_output_lines(page) == ["Paddle: fine", "PyTorch only here"]
    assert book_html.gpu_output_lines(_page()) == []


def test_a_semicolon_does_not_end_a_sentence():
    text = book_html.read_source(":::{div} only-paddle\nThe planner counts what PyTorch's "
                                 "autograd saves; Paddle's saves less.\n:::\n")
    assert book_html.foreign_sentences(text) == []


def test_output_lines_over_the_width_are_found_and_short_ones_are_not():
    assert book_html.wide_lines(book_html.read_html(_page())) == []
    text = book_html.read_html(_page("w" * 101))
    assert book_html.wide_lines(text) == ["w" * 101]
    assert ("torch", "torch ran it") in text.outputs and ("paddle", "Paddle: fine") in text.outputs


def test_a_tab_sentence_naming_only_the_other_framework_is_found():
    text = book_html.read_html(_page())
    # the Paddle cell's output line names PyTorch alone; the prose compares (names both)
    assert book_html.foreign_sentences(text) == [("paddle", "PyTorch only here")]
    text = book_html.read_html(_page(torch_thing="torchrun's"))
    assert ("paddle", "Paddle's run is like torchrun's.") not in book_html.foreign_sentences(text)
    text = book_html.read_html(_page().replace("Paddle's run is like", "It is like"))
    assert ("paddle", "It is like PyTorch's.") in book_html.foreign_sentences(text)


def test_a_claim_of_one_tab_is_found_in_the_other_or_missing_from_its_own(monkeypatch):
    monkeypatch.setattr(book_html, "ONLY_IN", {"p": {"torch": ["2-D mesh on 4 ranks",
                                                               "lines of the figure"]}})
    problems = book_html.misplaced_claims("p", book_html.read_html(_page()))
    assert problems == ["'lines of the figure' is not in the torch tab",
                        "'lines of the figure' is true of the torch tab only, and is shown "
                        "to paddle readers"]


def test_the_source_reader_splits_prose_by_tab_and_leaves_code_out():
    md = ("---\nkernelspec: {}\n---\n# T\n\nShared.\n\n```{code-cell} ipython3\n:tags: [paddle]"
          "\nimport torch\n```\n\n:::{div} only-paddle\nLike PyTorch.\n:::\n\n"
          "::::{div} only-torch\nOurs.\n::::\n")
    text = book_html.read_source(md)
    assert text.tabs == {"torch": ["Ours.\n"], "paddle": ["Like PyTorch.\n"]}
    assert "Shared." in text.shared[0] and "import torch" not in text.shared[0]
    assert book_html.foreign_sentences(text) == [("paddle", "Like PyTorch.")]


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.stem)
def test_each_tab_of_a_chapter_names_the_other_framework_only_beside_its_own(page):
    text = book_html.read_source(page.read_text(encoding="utf-8"))
    found = book_html.foreign_sentences(text)
    assert not found, (f"{page.name}: a sentence of one framework's tab names only the "
                       "other framework's things; name this tab's side too (a comparison) "
                       "or move it to the other tab: " + " | ".join(
                           f"[{fw}] {s}" for fw, s in found))
    assert book_html.misplaced_claims(page.stem, text) == []


def test_every_page_named_in_only_in_exists():
    assert {p.stem for p in PAGES} >= set(book_html.ONLY_IN)


def test_every_reference_has_a_url_or_says_why_not():
    """The references page links each source; the one without a public address says so
    (a new entry without a URL fails here)."""
    import re
    text = (ROOT / "references.bib").read_text(encoding="utf-8")
    entries = {m.group(1): m.group(2) for m in
               re.finditer(r"@\w+\{([^,\s]+),(.*?)\n\}", text, re.S)}
    assert len(entries) == text.count("\n@") + text.startswith("@")
    no_url = {k for k, body in entries.items() if not re.search(r"\burl\s*=", body)}
    assert no_url == {"dataparallel-illustrated"}
    assert "no public URL" in entries["dataparallel-illustrated"]


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.stem)
def test_a_scratch_folder_a_hidden_cell_makes_is_removed_by_the_page(page):
    """A page whose hidden first cell makes a scratch folder for its runs (``RUNS =
    "_layers"``) removes it in its last cell: the build left chapters/_layers behind."""
    from grader.lab.core.gpucells import parse_page
    cells = parse_page(page)
    makes = [c for c in cells if "remove-cell" in c.tags
             and re.search(r'^RUNS = "_\w+"', c.source, re.M)
             and "os.makedirs(RUNS)" in c.source]
    if not makes:
        return
    last = cells[-1]
    assert "remove-cell" in last.tags and "shutil.rmtree(RUNS" in last.source, page.name
