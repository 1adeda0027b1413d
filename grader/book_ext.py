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

Outside the course's hub a downloaded notebook needs the course's package: the build puts
its wheel next to the student notebooks and starts each of them with a set-up cell that
installs it when it is missing (:mod:`grader.student_setup`), and ends with a cell that says
how to hand it in (:mod:`grader.handin`). The table names the chapters
an assignment goes with by their titles, read from the chapters themselves: an assignment
goes with the chapters whose exercises snippet (``chapters/_exercises/<chapter>.md``)
lists it.
"""
from __future__ import annotations

import html
import re
import shutil
import urllib.parse
from pathlib import Path

import nbformat
from docutils import nodes
from sphinx.util.docutils import SphinxDirective

from .grading.student import assignment_info, student_version
from .student_setup import build_wheel, wheel_name, with_handin_cell, with_setup_cell

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


def assignment_order(name: str) -> tuple:
    """Sort key of an assignment folder: by its number (``a2`` before ``a10``, which text
    order puts before ``a1``), then by name."""
    m = re.match(r"a(\d+)_", name)
    return (int(m.group(1)) if m else float("inf"), name)


def _assignments(app) -> list[dict]:
    src = Path(app.srcdir) / app.config.exercises_source
    found = []
    folders = sorted((p for p in src.iterdir() if p.is_dir()), key=lambda p: assignment_order(p.name)) \
        if src.is_dir() else []
    for folder in folders:
        for nb in sorted(folder.glob("*.ipynb")):
            found.append({**assignment_info(nb), "path": nb})
    return found


def chapter_title(path: Path) -> str:
    """The first level-1 heading of a MyST chapter (after its front matter)."""
    for line in Path(path).read_text(encoding="utf-8").splitlines():
        if line.startswith("# "):
            return line[2:].strip()
    return Path(path).stem


def chapters_of(root: Path) -> dict[str, list[tuple[str, str]]]:
    """``{assignment: [(chapter, title), ...]}``, in the book's order: the chapters whose
    ``chapters/_exercises/<chapter>.md`` snippet names the assignment."""
    root = Path(root)
    toc = root / "_toc.yml"
    order = re.findall(r"file:\s*chapters/(\w+)", toc.read_text()) if toc.is_file() else []
    snippets = sorted((root / "chapters" / "_exercises").glob("*.md"),
                      key=lambda p: (order.index(p.stem) if p.stem in order else len(order), p.stem))
    out: dict[str, list[tuple[str, str]]] = {}
    for snippet in snippets:
        chapter = root / "chapters" / f"{snippet.stem}.md"
        if not chapter.is_file():
            continue
        for name in dict.fromkeys(re.findall(r"`(a\d+_\w+)`", snippet.read_text())):
            out.setdefault(name, []).append((snippet.stem, chapter_title(chapter)))
    return out


def _title_html(title: str) -> str:
    parts = html.escape(title).split("`")
    return "".join(f"<code>{p}</code>" if i % 2 else p for i, p in enumerate(parts))


class ExerciseList(SphinxDirective):
    """A table of every assignment with its student notebook to download."""

    def run(self):
        app = self.env.app
        rel = "../" * self.env.docname.count("/")
        rows = []
        chapters = chapters_of(Path(app.srcdir))
        for a in _assignments(app):
            self.env.note_dependency(str(a["path"]))
            links = [f'<a href="{rel}{OUT}/{a["name"]}.ipynb" download>student notebook</a>']
            links += [f'<a href="{html.escape(u)}">{html.escape(label)}</a>' for label, u in
                      launch_links(a["name"], app.config.html_theme_options or {},
                                   app.config.exercises_launch_path)]
            goes = ", ".join(f'<a href="{rel}chapters/{c}.html">{_title_html(t)}</a>'
                             for c, t in chapters.get(a["name"], []))
            rows.append(f"<tr><td><code>{html.escape(a['name'])}</code></td>"
                        f"<td>{html.escape(a['title'])}<br><small>"
                        f"{'Goes with ' + goes if goes else ''}</small></td>"
                        f"<td>{a['points']:g}</td><td>{' &middot; '.join(links)}</td></tr>")
        table = ('<table class="table exercise-list"><thead><tr><th>assignment</th><th>what</th>'
                 "<th>points</th><th>get it</th></tr></thead><tbody>" + "".join(rows) +
                 "</tbody></table>")
        wheel = wheel_name(Path(app.srcdir))
        package = (f'<p class="course-wheel">The course package, for running a notebook '
                   f'outside the course\'s hub: <a href="{rel}{OUT}/{wheel}" download>'
                   f"<code>{html.escape(wheel)}</code></a>. Save it in the notebook's folder; "
                   "the notebook's first cell installs it when it is missing.</p>")
        return [nodes.raw("", table + package, format="html")]


def _write_student_versions(app, exception) -> None:
    if exception is not None or app.builder.format != "html":
        return
    out = Path(app.outdir) / OUT
    shutil.rmtree(out, ignore_errors=True)
    assignments = _assignments(app)
    if not assignments:  # a book without exercises publishes no notebooks and no wheel
        return
    out.mkdir(parents=True)
    wheel = build_wheel(Path(app.srcdir), out, Path(app.outdir).parent / ".course-wheel")
    for a in assignments:
        nb = student_version(nbformat.read(a["path"], as_version=4))
        nb = with_setup_cell(nb, wheel.name, getattr(app.config, "html_baseurl", "") or "")
        nbformat.write(with_handin_cell(nb, a["name"]), out / f"{a['name']}.ipynb")


def _one_of_each_script(app, pagename, templatename, context, doctree) -> None:
    """Keep one copy of each inline script. Jupyter Book 1.0 initialises sphinx-thebe twice,
    so every page carried ``const THEBE_JS_URL = ...`` twice and the browser logged
    "Identifier 'THEBE_JS_URL' has already been declared" on every page."""
    scripts = context.get("script_files")
    if not scripts:
        return
    seen, kept = set(), []
    for js in scripts:
        attrs = getattr(js, "attributes", None) or {}
        key = (getattr(js, "filename", str(js)) or "", tuple(sorted(attrs.items())))
        if key in seen:
            continue
        seen.add(key)
        kept.append(js)
    scripts[:] = kept


def _with_outputs(app, nb: nbformat.NotebookNode) -> nbformat.NotebookNode:
    """``nb`` with its outputs: myst-nb writes ``jupyter_execute/`` with them when it runs a
    page, but without them when it takes the page from its execution cache (every rebuild);
    then they come from that cache, matched by the cells' code as myst-nb matches them."""
    if any(c.get("outputs") for c in nb.cells if c.cell_type == "code"):
        return nb
    from jupyter_cache import get_cache

    path = getattr(app.config, "nb_execution_cache_path", "") or \
        Path(app.outdir).parent / ".jupyter_cache"
    try:
        return get_cache(str(path)).merge_match_into_notebook(nb)[1]
    except KeyError:          # not in the cache: the notebook as myst-nb wrote it
        return nb


def _notebook_download(app, pagename, templatename, context, doctree) -> None:
    """Every executed chapter downloads as a notebook (.ipynb, with its outputs), beside the
    theme's .md and .pdf: sphinx-book-theme offers it only where launch buttons are
    configured, and a reader without them got the MyST source alone."""
    if app.builder.format != "html":
        return
    executed = (Path(app.outdir).parent / "jupyter_execute" / pagename).with_suffix(".ipynb")
    buttons = context.get("header_buttons")
    if not executed.is_file() or not isinstance(buttons, list):
        return
    menu = next((b for b in buttons if b.get("label") == "download-buttons"), None)
    if menu is None or any(b.get("label") == "download-notebook-button"
                           for b in menu.get("buttons", [])):
        return
    target = (Path(app.outdir) / "_sources" / pagename).with_suffix(".ipynb")
    target.parent.mkdir(parents=True, exist_ok=True)
    nbformat.write(_with_outputs(app, nbformat.read(executed, as_version=4)), target)
    menu["buttons"].insert(0, {
        "type": "link", "url": f"{context['pathto']('_sources', 1)}/{pagename}.ipynb",
        "text": ".ipynb", "tooltip": "Download notebook file (run it in a clone of the "
        "course's repository: its cells start the scripts in chapters/scripts/)",
        "icon": "fas fa-code", "label": "download-notebook-button"})


def _full_urls(app, config) -> None:
    """Show a reference's URL as it is: the theme shortens GitHub links to "owner/repo",
    and the references page then read "URL: PaddlePaddle/Paddle." for a file's address."""
    config.html_theme_options = {**(config.html_theme_options or {}), "shorten_urls": False}


def setup(app):
    app.connect("config-inited", _full_urls)
    # early: html-page-context stops at the first listener that returns a template name
    app.connect("html-page-context", _one_of_each_script, priority=100)
    # late: after the theme has made its header buttons
    app.connect("html-page-context", _notebook_download, priority=900)
    app.add_config_value("exercises_source", "exercises/source", "env")
    app.add_config_value("exercises_launch_path", "exercises/release/{name}/{name}.ipynb", "env")
    app.add_directive("exercise-list", ExerciseList)
    app.connect("build-finished", _write_student_versions)
    return {"version": "0.1", "parallel_read_safe": True, "parallel_write_safe": True}
