"""Launch buttons: filling in the documented keys of _config.yml turns them on."""
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
