"""Sphinx extension for the book's exercises page (``sphinx.extra_extensions`` in
``_config.yml``).

At build time it makes the **student** version of every notebook in
``exercises/source/`` (:func:`grader.grading.student.student_version`: solutions and
hidden tests removed, as nbgrader releases it), copies them to ``<html>/exercises/``, and
the ``{exercise-list}`` directive renders a table with a download link for each. Instructor
versions are never copied. Launch links (JupyterHub, Binder, Colab) appear where
``_config.yml`` configures them (``repository.url`` and ``launch_buttons``); they open the
released notebook at ``exercises_launch_path`` in that repository, i.e. what ``nbgrader
generate_assignment`` writes to ``exercises/release/``, published on that branch.
"""
from __future__ import annotations

import html
import shutil
import urllib.parse
from pathlib import Path

import nbformat
from docutils import nodes
from sphinx.util.docutils import SphinxDirective

from .grading.student import assignment_info, student_version

OUT = "exercises"  # folder of the HTML output holding the student notebooks


def launch_links(name: str, theme_options: dict, launch_path: str) -> list[tuple[str, str]]:
    """``(label, url)`` per configured service; none unless the repository is set."""
    repo = (theme_options.get("repository_url") or "").rstrip("/")
    buttons = theme_options.get("launch_buttons") or {}
    if not repo:
        return []
    branch = theme_options.get("repository_branch") or "main"
    path = launch_path.format(name=name)
    parts = urllib.parse.urlparse(repo).path.strip("/").split("/")
    org_repo = "/".join(parts[:2])
    ui = "lab/tree" if buttons.get("notebook_interface", "jupyterlab") == "jupyterlab" else "tree"
    out = []
    if buttons.get("jupyterhub_url"):
        q = urllib.parse.urlencode({"repo": repo, "branch": branch,
                                    "urlpath": f"{ui}/{parts[-1]}/{path}"})
        out.append(("JupyterHub", f"{buttons['jupyterhub_url'].rstrip('/')}/hub/user-redirect/git-pull?{q}"))
    if buttons.get("binderhub_url") and "github.com" in repo:
        out.append(("Binder", f"{buttons['binderhub_url'].rstrip('/')}/v2/gh/{org_repo}/{branch}"
                              f"?urlpath={urllib.parse.quote(f'{ui}/{path}')}"))
    if buttons.get("colab_url") and "github.com" in repo:
        out.append(("Colab", f"{buttons['colab_url'].rstrip('/')}/github/{org_repo}/blob/{branch}/{path}"))
    return out


def _assignments(app) -> list[dict]:
    src = Path(app.srcdir) / app.config.exercises_source
    found = []
    for folder in sorted(p for p in src.iterdir() if p.is_dir()) if src.is_dir() else []:
        for nb in sorted(folder.glob("*.ipynb")):
            found.append({**assignment_info(nb), "path": nb})
    return found


class ExerciseList(SphinxDirective):
    """A table of every assignment with its student notebook to download."""

    def run(self):
        app = self.env.app
        rel = "../" * self.env.docname.count("/")
        rows = []
        for a in _assignments(app):
            self.env.note_dependency(str(a["path"]))
            links = [f'<a href="{rel}{OUT}/{a["name"]}.ipynb" download>student notebook</a>']
            links += [f'<a href="{html.escape(u)}">{html.escape(label)}</a>' for label, u in
                      launch_links(a["name"], app.config.html_theme_options or {},
                                   app.config.exercises_launch_path)]
            rows.append(f"<tr><td><code>{html.escape(a['name'])}</code></td>"
                        f"<td>{html.escape(a['title'])}<br><small>{html.escape(a['goes_with'])}"
                        f"</small></td><td>{a['points']:g}</td><td>{' &middot; '.join(links)}</td></tr>")
        table = ('<table class="table exercise-list"><thead><tr><th>assignment</th><th>what</th>'
                 "<th>points</th><th>get it</th></tr></thead><tbody>" + "".join(rows) +
                 "</tbody></table>")
        return [nodes.raw("", table, format="html")]


def _write_student_versions(app, exception) -> None:
    if exception is not None or app.builder.format != "html":
        return
    out = Path(app.outdir) / OUT
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    for a in _assignments(app):
        nb = student_version(nbformat.read(a["path"], as_version=4))
        nbformat.write(nb, out / f"{a['name']}.ipynb")


def setup(app):
    app.add_config_value("exercises_source", "exercises/source", "env")
    app.add_config_value("exercises_launch_path", "exercises/release/{name}/{name}.ipynb", "env")
    app.add_directive("exercise-list", ExerciseList)
    app.connect("build-finished", _write_student_versions)
    return {"version": "0.1", "parallel_read_safe": True, "parallel_write_safe": True}
