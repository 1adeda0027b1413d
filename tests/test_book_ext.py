"""The exercises page's launch links: none without a repository, one per configured service."""
from urllib.parse import parse_qs, urlparse

from grader.book_ext import launch_links

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
