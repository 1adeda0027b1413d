"""Launch buttons: filling in the documented keys of _config.yml turns them on."""
import shutil
from pathlib import Path

import pytest
import yaml

from grader.build import build

ROOT = Path(__file__).resolve().parent.parent
PAGE = ("---\njupytext:\n  text_representation:\n    format_name: myst\n"
        "kernelspec:\n  display_name: Python 3\n  language: python\n  name: python3\n---\n"
        "# Page\n\n```{code-cell} ipython3\n1 + 1\n```\n")


def _book(tmp_path: Path, fill: bool) -> Path:
    cfg = yaml.safe_load((ROOT / "_config.yml").read_text())
    cfg["execute"]["execute_notebooks"] = "off"
    cfg["sphinx"]["config"].pop("html_static_path")  # tiny book has no _static
    cfg["sphinx"]["config"].pop("html_css_files")
    cfg["sphinx"]["config"].pop("html_js_files")
    cfg["html"].pop("favicon")                        # nor the book's icon
    if fill:
        cfg["repository"]["url"] = "https://github.com/example-org/course"
        cfg["launch_buttons"]["jupyterhub_url"] = "https://hub.example.org"
        cfg["launch_buttons"]["binderhub_url"] = "https://binder.example.org"
    (tmp_path / "_config.yml").write_text(yaml.safe_dump(cfg))
    (tmp_path / "_toc.yml").write_text("format: jb-book\nroot: page\n")
    (tmp_path / "page.md").write_text(PAGE)
    return tmp_path


@pytest.mark.slow
@pytest.mark.parametrize("fill", [False, True])
def test_launch_buttons_follow_the_config(tmp_path, fill):
    book = _book(tmp_path, fill)
    build(book, quiet=True, strict=False)
    html = (book / "_build" / "html" / "page.html").read_text()
    assert ("hub.example.org/hub/user-redirect/git-pull" in html) is fill
    assert ("binder.example.org/v2/gh" in html or "binder.example.org/v2/" in html) is fill


def test_the_config_documents_where_to_set_them():
    text = (ROOT / "_config.yml").read_text()
    for key in ("repository:", "jupyterhub_url", "binderhub_url", "colab_url"):
        assert key in text


def _hub_state(book: Path) -> None:
    """What `make hub` leaves in the repository: ``.hub/`` with the instructor's copy of the
    course (a notebook whose cell raises, a page in no table of contents)."""
    import nbformat

    from hub.run import prepare

    course = book / "course-src"
    nb = course / "source" / "a1_x" / "a1_x.ipynb"
    nb.parent.mkdir(parents=True)
    nbformat.write(nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("1/0")]), nb)
    (course / "README.md").write_text("# The course\n")
    prepare(book / ".hub", course, ["instructor"])
    shutil.rmtree(course)
    assert (book / ".hub" / "home" / "instructor" / "course" / "source" / "a1_x" / "a1_x.ipynb").exists()


@pytest.mark.slow
def test_the_strict_build_ignores_the_hubs_state(tmp_path):
    """After `make hub`, `make book` still builds: `.hub/` is in exclude_patterns (without
    it, Sphinx reads .hub's notebook and page and the strict build fails on them; the test
    below checks the patterns on Sphinx's own file discovery)."""
    book = _book(tmp_path, fill=False)
    shutil.copy(ROOT / "references.bib", book)      # the strict build reads it
    _hub_state(book)
    build(book, quiet=True)
    built = {p.relative_to(book / "_build" / "html").as_posix()
             for p in (book / "_build" / "html").rglob("*.html")}
    assert "page.html" in built
    assert not [p for p in built if ".hub" in p or "a1_x" in p], built


def test_the_hubs_state_and_sources_are_excluded_from_the_book(tmp_path):
    """Sphinx's own file discovery, with the config's exclude_patterns, on such a tree."""
    from sphinx.util.matching import get_matching_files

    for path in (".hub/home/instructor/course/source/a1/a1.ipynb", ".hub/home/student1/x.md",
                 "node_modules/configurable-http-proxy/README.md", "hub/notes.md",
                 "chapters/intro.md"):
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / path).write_text("# x\n")
    patterns = yaml.safe_load((ROOT / "_config.yml").read_text())["exclude_patterns"]
    assert list(get_matching_files(tmp_path, exclude_patterns=patterns)) == ["chapters/intro.md"]
