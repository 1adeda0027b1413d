"""The book builds with executed outputs, fails on warnings, and rebuilds from its cache."""
import re
import subprocess
from pathlib import Path

import pytest

from grader.build import build

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parent.parent


def test_every_chapter_in_the_toc_is_built_with_outputs(built_book):
    import yaml
    toc = yaml.safe_load((ROOT / "_toc.yml").read_text())
    files = [toc["root"]] + [c["file"] for p in toc["parts"] for c in p["chapters"]]
    for f in files:
        page = built_book / f"{f}.html"
        assert page.exists(), f"{f} missing from the built book"
    html = (built_book / "chapters" / "toolkit.html").read_text()
    assert "cell_output" in html, "code cells were not executed"
    assert re.search(r"no GPU: 2 CPU worker processes stand in|GPU\(s\) for 2 devices", html)
    assert "tag_torch" in html and "tag_paddle" in html
    # every page whose executed cells draw (timelines, graphs, plots) shows the figures
    from grader.lab.core.gpucells import parse_page
    drawing = [f for f in files if any(
        "skip-execution" not in c.tags and re.search(r"\bplt\.|\.plot\(|\bdraw\(", c.source)
        for c in parse_page(ROOT / f"{f}.md"))]
    assert {"chapters/async", "chapters/multidevice", "chapters/communication"} <= set(drawing)
    for f in drawing:
        page = (built_book / f"{f}.html").read_text()
        assert re.search(r'<img [^>]*src="[^"]+\.png"', page), f"{f} drew no figure"


def test_each_framework_cell_ran(built_book):
    """Read from the built HTML, which shows a cell's outputs whether the build executed the
    page or served it from the execution cache (``_build/jupyter_execute`` holds the cached
    pages without outputs, so a test that read it would depend on a warm cache)."""
    html = (built_book / "chapters" / "toolkit.html").read_text()
    ran = {"torch": 0, "paddle": 0}
    for cell in re.split(r'<div class="cell ', html)[1:]:
        classes = cell.split('"', 1)[0].split()
        body = cell.split('<div class="cell ', 1)[0]
        for fw in ran:
            if f"tag_{fw}" in classes and "cell_output" in body:
                ran[fw] += 1
    assert ran["torch"] >= 3 and ran["paddle"] >= 3, ran


def _cache_records():
    from jupyter_cache import get_cache
    cache = get_cache(ROOT / "_build" / ".jupyter_cache")
    return sorted((r.pk, r.created.isoformat(), r.hashkey) for r in cache.list_cache_records())


def test_a_cached_rebuild_executes_nothing(built_book):
    before = _cache_records()
    assert before, "the build cached no executed notebook"
    build(ROOT, quiet=True)
    assert _cache_records() == before  # no chapter was executed again


def _tiny_book(tmp_path: Path, page: str, toc_extra: str = "") -> Path:
    (tmp_path / "_config.yml").write_text(
        "title: t\nexecute:\n  execute_notebooks: force\n  allow_errors: false\n"
        "only_build_toc_files: true\n")
    (tmp_path / "_toc.yml").write_text(f"format: jb-book\nroot: index\n{toc_extra}")
    (tmp_path / "index.md").write_text(page)
    return tmp_path


NB_HEADER = ("---\njupytext:\n  text_representation:\n    format_name: myst\n"
             "kernelspec:\n  display_name: Python 3\n  language: python\n  name: python3\n---\n")


def test_a_cell_error_fails_the_build(tmp_path):
    book = _tiny_book(tmp_path, NB_HEADER + "# T\n\n```{code-cell} ipython3\n1/0\n```\n")
    with pytest.raises(subprocess.CalledProcessError):
        build(book, quiet=True)


def test_a_broken_reference_fails_the_build(tmp_path):
    book = _tiny_book(tmp_path, "# T\n\nSee {ref}`no-such-label`.\n")
    with pytest.raises(subprocess.CalledProcessError):
        build(book, quiet=True)


def test_a_page_missing_from_the_toc_fails_the_build(tmp_path):
    book = _tiny_book(tmp_path, "# T\n\nhello\n",
                      toc_extra="chapters:\n  - file: missing_page\n")
    with pytest.raises(subprocess.CalledProcessError):
        build(book, quiet=True)


def test_no_page_shows_launcher_chatter_or_an_objects_address(built_book):
    """Outputs are for the reader: no Paddle launcher settings listing (``LAUNCH INFO``),
    no default ``repr`` of an object (``<... object at 0x...>``)."""
    for page in sorted((built_book / "chapters").glob("*.html")):
        html = page.read_text()
        assert "LAUNCH INFO" not in html, page.name
        assert not re.search(r"object at 0x[0-9a-f]+", html), page.name


def _chapter_pages(built_book):
    return sorted((built_book / "chapters").glob("*.html"))


def test_no_output_line_is_wider_than_the_page(built_book):
    """An output box scrolls sideways and cuts a long line at the page's edge: every line
    of every output fits in tests/book_html.py's WIDTH (100) characters."""
    from tests import book_html
    wide = {page.stem: lines for page in _chapter_pages(built_book)
            if (lines := book_html.wide_lines(book_html.read_html(page.read_text())))}
    assert not wide, "\n".join(f"{p}: {len(ls)} lines, e.g. {ls[0]!r}" for p, ls in wide.items())


def test_no_page_shows_a_gpu_record_of_code_that_has_changed(built_book):
    """A record made from an earlier version of its cell (the digest the record keeps is
    not today's) is not shown: none of the lines it printed is in the page's GPU-cell
    replays (a CPU run of the same script, elsewhere on the page, may print them)."""
    import json
    from grader.lab.core import gpucells
    from tests import book_html
    stale = 0
    for path in sorted(gpucells.RECORDS.glob("*.json")):
        page = built_book / "chapters" / f"{path.stem}.html"
        text = " ".join(book_html.gpu_output_lines(page.read_text()))
        for key, entry in json.loads(path.read_text())["cells"].items():
            framework, name = key.split(":", 1)
            cell = gpucells.find_cell(path.stem, name, framework)
            if entry.get("error") or not gpucells.is_stale(entry, cell):
                continue
            stale += 1
            printed = [s.strip() for s in entry["stdout"].splitlines() if len(s.strip()) > 20]
            shown = [s for s in printed if s in text]
            assert not shown, f"{path.stem} {key}: a stale record is shown: {shown[0]!r}"
    print(f"{stale} stale records, none shown")


def test_each_tab_names_the_other_framework_only_beside_its_own(built_book):
    """The built pages' tabs, outputs included: tests/book_html.py's rule and its ONLY_IN
    claims (test_book_html checks the chapters' prose without a build)."""
    from tests import book_html
    problems = []
    for page in _chapter_pages(built_book):
        text = book_html.read_html(page.read_text())
        problems += [f"{page.stem} [{fw}]: {s}" for fw, s in book_html.foreign_sentences(text)]
        problems += [f"{page.stem}: {p}" for p in book_html.misplaced_claims(page.stem, text)]
    assert not problems, "\n".join(problems)
