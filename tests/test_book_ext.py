"""The exercises page: launch links (none without a repository, one per configured
service), and the chapters each assignment goes with, named by their real titles."""
import re
from pathlib import Path
from urllib.parse import parse_qs, urlparse

import nbformat

from grader.book_ext import chapters_of, launch_links
from grader.grading.student import student_version

PATH = "exercises/release/{name}/{name}.ipynb"


def test_no_launch_links_unless_a_repository_is_configured():
    assert launch_links("a1", {"launch_buttons": {"binderhub_url": "https://mybinder.org"}}, PATH) == []


def test_each_configured_service_gets_a_link_to_the_released_notebook():
    opts = {"repository_url": "https://github.com/org/course", "repository_branch": "release",
            "launch_buttons": {"binderhub_url": "https://mybinder.org/", "colab_url":
                               "https://colab.research.google.com", "jupyterhub_url": "https://hub.example.edu",
                               "notebook_interface": "jupyterlab"}}
    links = dict(launch_links("a1", opts, PATH))
    assert set(links) == {"JupyterHub", "Binder", "Colab"}
    assert links["Binder"].startswith("https://mybinder.org/v2/gh/org/course/release?urlpath=")
    assert links["Colab"] == ("https://colab.research.google.com/github/org/course/blob/release/"
                              "exercises/release/a1/a1.ipynb")
    q = parse_qs(urlparse(links["JupyterHub"]).query)
    assert q["repo"] == ["https://github.com/org/course"] and q["branch"] == ["release"]
    assert q["urlpath"] == ["lab/tree/course/exercises/release/a1/a1.ipynb"]
    assert "source" not in " ".join(links.values())   # never the instructor version


ROOT = Path(__file__).resolve().parent.parent
SOURCE = ROOT / "exercises" / "source"
ASSIGNMENTS = sorted(p.name for p in SOURCE.iterdir() if p.is_dir())


def test_every_assignment_names_its_chapters_by_their_real_titles():
    """The exercises page reads the titles from the chapters; each notebook's own "Goes with"
    line names the same chapters, quoted as their headings spell them."""
    chapters = chapters_of(ROOT)
    for a in ASSIGNMENTS:
        assert chapters.get(a), f"no chapter's exercises snippet lists {a}"
        for chapter, title in chapters[a]:
            heading = next(l for l in (ROOT / "chapters" / f"{chapter}.md").read_text().splitlines()
                           if l.startswith("# "))
            assert heading == f"# {title}"
        intro = nbformat.read(SOURCE / a / f"{a}.ipynb", as_version=4).cells[0].source
        goes = re.search(r"(?<!\*)\*(Goes with.*?)\*(?!\*)", intro, re.S).group(1)
        assert re.findall(r'"(.*?)"', goes) == [t for _, t in chapters[a]], (a, goes)


def test_no_student_facing_text_says_seed():
    for a in ASSIGNMENTS:
        nb = student_version(nbformat.read(SOURCE / a / f"{a}.ipynb", as_version=4))
        assert not any(re.search(r"\bseeds?\b", c.source, re.I) for c in nb.cells), a
    assert not re.search(r"\bseeds?\b", (ROOT / "chapters" / "exercises.md").read_text(), re.I)
    for snippet in (ROOT / "chapters" / "_exercises").glob("*.md"):
        assert not re.search(r"\bseeds?\b", snippet.read_text(), re.I), snippet


def test_the_exercises_table_lists_assignments_by_number():
    """a1, a2, ..., a9, a10: text order would put a10 before a1."""
    from types import SimpleNamespace

    from grader.book_ext import _assignments

    app = SimpleNamespace(srcdir=str(ROOT), config=SimpleNamespace(exercises_source="exercises/source"))
    names = [a["path"].parent.name for a in _assignments(app)]
    numbers = [int(n[1:].split("_")[0]) for n in names]
    assert len(numbers) >= 12 and numbers == sorted(numbers) == list(range(1, len(numbers) + 1))
