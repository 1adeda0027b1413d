"""How a notebook downloaded from the book finds the course's package outside the hub.

The book publishes, next to the student notebooks (``<html>/exercises/``), a wheel of this
repository's package (``pdl-course``: the ``grader`` package the notebooks import), built
by :func:`build_wheel` when the book is built, so it is always the version the notebooks
were made with; it needs no repository address (``_config.yml``'s ``repository.url`` is
empty until an instructor publishes one). Each student notebook the book publishes starts,
right under its title, with the cell :func:`setup_cell` writes: when ``grader`` cannot be
imported (a laptop, Colab), it installs the wheel with pip, from the notebook's own folder
(where the exercises page says to save it) or, when the book's address is configured
(``html.baseurl`` in ``_config.yml``), from the book itself, and prints what it does. On
the course's hub, where the package is installed, it only says so.
"""
from __future__ import annotations

import hashlib
import re
import shutil
import subprocess
import sys
import tempfile
import tomllib
from pathlib import Path

import nbformat

__all__ = ["wheel_name", "build_wheel", "setup_cell", "with_setup_cell", "notebook_framework",
           "notebook_chooses_framework",
           "handin_cell", "with_handin_cell", "SETUP_ID", "HANDIN_ID"]

SETUP_ID = "course-setup"       # the cell's id in the student notebooks
HANDIN_ID = "course-handin"     # the last cell's: how to hand the notebook in
_SOURCES = ("grader", "pyproject.toml", "README.md", "constraints.txt")


def wheel_name(root: Path) -> str:
    """The file name of the course wheel built from ``root`` (``pyproject.toml``'s name and
    version, as the wheel format spells them)."""
    project = tomllib.loads((Path(root) / "pyproject.toml").read_text())["project"]
    name = re.sub(r"[-_.]+", "_", project["name"]).lower()
    return f"{name}-{project['version']}-py3-none-any.whl"


def _digest(root: Path) -> str:
    h = hashlib.sha256()
    for rel in _SOURCES:
        path = root / rel
        files = sorted(p for p in path.rglob("*") if p.is_file() and "__pycache__" not in p.parts) \
            if path.is_dir() else [path]
        for f in files:
            h.update(str(f.relative_to(root)).encode() + b"\0" + f.read_bytes())
    return h.hexdigest()[:16]


def build_wheel(root: Path, out_dir: Path, cache_dir: Path) -> Path:
    """The course wheel in ``out_dir``; rebuilt only when the package's sources changed
    (``cache_dir`` keeps the last one). The sources are copied first: building in the
    repository would leave ``build/`` and ``*.egg-info`` behind."""
    root, out_dir, cache_dir = Path(root), Path(out_dir), Path(cache_dir)
    name = wheel_name(root)
    cached = cache_dir / _digest(root) / name
    if not cached.is_file():
        with tempfile.TemporaryDirectory(prefix="course-wheel-") as tmp:
            src = Path(tmp) / "src"
            src.mkdir()
            for rel in _SOURCES:
                if (root / rel).is_dir():
                    shutil.copytree(root / rel, src / rel,
                                    ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
                else:
                    shutil.copy(root / rel, src / rel)
            done = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps",
                                   "--no-build-isolation", "--quiet", "-w", tmp, str(src)],
                                  capture_output=True, text=True)
            if done.returncode or not (Path(tmp) / name).is_file():
                raise RuntimeError(f"building the course wheel {name} failed:\n"
                                   + (done.stdout + done.stderr)[-3000:])
            shutil.rmtree(cache_dir, ignore_errors=True)
            cached.parent.mkdir(parents=True)
            shutil.copy(Path(tmp) / name, cached)
    out_dir.mkdir(parents=True, exist_ok=True)
    return Path(shutil.copy(cached, out_dir / name))


_CELL = '''\
# Set-up. This notebook needs the course's Python package, `grader`{needs}.
# On the course's hub everything is installed. Anywhere else (a laptop, Colab) this cell
# installs what is missing with pip, quietly, and says what: the course package from the
# wheel the book publishes next to this notebook, {wheel}
# (on the exercises page: save it in this notebook's folder){or_book}.{when}
import importlib
import importlib.util
import shutil
import subprocess
import sys
from pathlib import Path

WHEEL = "{wheel}"
BOOK = "{book}"  # the book's address, when its build was told it
DEFAULT = "{framework}"  # the framework this notebook's answers use by default
CHOOSE = {choose}  # True: the answers' FRAMEWORK line chooses the framework
PINS = {{"torch": "torch=={torch}", "paddle": "paddlepaddle=={paddle}"}}  # the book's
SIZE = {{"torch": "about 750 MB", "paddle": "about 850 MB"}}  # installed, CPU builds


def pip(*args):
    done = subprocess.run([sys.executable, "-m", "pip", "install", "-q", *args],
                          capture_output=True, text=True)
    if done.returncode:
        raise RuntimeError("pip failed:\\n" + done.stderr[-2000:])


TRIED = set()  # installed by this kernel already


def need(framework):
    \"\"\"Install the book's `framework` (pinned) where this Python lacks it.\"\"\"
    if (framework not in PINS or framework in TRIED
            or importlib.util.find_spec(framework) is not None):
        return
    TRIED.add(framework)
    # the CPU build where there is no NVIDIA GPU (PyTorch's CPU wheels come from its
    # own index; PyPI's paddlepaddle is the CPU one)
    gpu = shutil.which("nvidia-smi") is not None
    extra = [] if gpu or framework == "paddle" else [
        "--extra-index-url", "https://download.pytorch.org/whl/cpu"]
    build = "GPU build" if gpu else f"CPU build, {{SIZE[framework]}} installed"
    print(f"installing {{PINS[framework]}} ({{build}}; a few minutes), once")
    pip(PINS[framework], *extra)
    importlib.invalidate_caches()
    if importlib.util.find_spec(framework) is None:
        print(f"installed, but this kernel does not see {{framework}} yet: restart the "
              "kernel and run the notebook again from the top")


if importlib.util.find_spec("grader") is None:
    if Path(WHEEL).is_file():
        source = str(Path(WHEEL).resolve())
    elif BOOK:
        source = BOOK + "/exercises/" + WHEEL
    else:
        raise RuntimeError(
            f"the course package is not installed here and {{WHEEL}} is not in this "
            f"notebook's folder ({{Path.cwd()}}): download it from the book's exercises "
            "page into that folder, then run this cell again")
    print(f"installing the course package (with NumPy and Matplotlib) from {{source}}")
    pip(source)
if CHOOSE and "get_ipython" in globals():
    # installed right after the cell that sets FRAMEWORK has run, so a notebook
    # answered in the other framework installs that one only
    def follow_framework(result=None):
        need(get_ipython().user_ns.get("FRAMEWORK"))

    events = get_ipython().events
    for f in list(events.callbacks["post_run_cell"]):
        if getattr(f, "__name__", "") == "follow_framework":   # this cell, run again
            events.unregister("post_run_cell", f)
    events.register("post_run_cell", follow_framework)
else:
    need(DEFAULT)
importlib.invalidate_caches()
if importlib.util.find_spec("grader") is None:
    raise RuntimeError("installed, but this kernel does not see it yet: restart "
                       "the kernel and run the notebook again from the top")
print("course package:", importlib.import_module("grader").__version__)
'''

_WHEN = '''
# Your framework (the FRAMEWORK line of the first answer cell: "torch" or "paddle") is
# installed once, pinned, right after that cell runs: the CPU build where there is no
# NVIDIA GPU (PyTorch about 750 MB installed, PaddlePaddle about 850 MB; a few minutes).'''


def _pins(root: Path) -> dict[str, str]:
    pins = {}
    for line in (Path(root) / "constraints.txt").read_text().splitlines():
        name, _, version = line.partition("==")
        pins[name.strip().lower()] = version.strip()
    return {"torch": pins.get("torch", ""), "paddle": pins.get("paddlepaddle", "")}


def notebook_chooses_framework(nb: nbformat.NotebookNode) -> bool:
    """Whether the notebook's answers choose their framework with a ``FRAMEWORK = "..."``
    line (the student may change it), rather than importing one framework."""
    source = "\n".join(c.source for c in nb.cells if c.cell_type == "code")
    return re.search(r'^FRAMEWORK = "(torch|paddle)"', source, re.M) is not None


def notebook_framework(nb: nbformat.NotebookNode) -> str:
    """The framework a notebook's answers use by default (its ``FRAMEWORK = "..."`` line,
    else the one it imports), or "" for a notebook that needs neither."""
    source = "\n".join(c.source for c in nb.cells if c.cell_type == "code")
    m = re.search(r'^FRAMEWORK = "(torch|paddle)"', source, re.M)
    if m:
        return m.group(1)
    for fw in ("torch", "paddle"):
        if re.search(rf"^\s*(import|from) {fw}\b", source, re.M):
            return fw
    return ""


def setup_cell(wheel: str, book_url: str = "", framework: str = "torch",
               root: Path | None = None, choose: bool = False) -> nbformat.NotebookNode:
    """The first code cell of a student notebook published by the book: the course
    package, and the framework (pinned to the book's version) where it is not installed.
    With ``choose`` the notebook's ``FRAMEWORK`` line picks the framework: the cell
    installs the one that line names, right after the cell holding it has run (an IPython
    ``post_run_cell`` hook), so a student who answers in Paddle never installs PyTorch;
    otherwise ``framework`` is installed at once."""
    book_url = book_url.rstrip("/")
    or_book = f";\n# or leave it, and this cell fetches it from {book_url}" if book_url else ""
    needs = (", and a framework" if choose else
             {"torch": " and PyTorch", "paddle": " and PaddlePaddle"}.get(framework, ""))
    pins = _pins(root or Path(__file__).resolve().parent.parent)
    cell = nbformat.v4.new_code_cell(_CELL.format(
        wheel=wheel, book=book_url, or_book=or_book, framework=framework, needs=needs,
        choose=bool(choose), when=_WHEN if choose else "",
        torch=pins["torch"], paddle=pins["paddle"]).rstrip("\n"))
    cell["id"] = SETUP_ID
    return cell


def with_setup_cell(nb: nbformat.NotebookNode, wheel: str,
                    book_url: str = "") -> nbformat.NotebookNode:
    """``nb`` with :func:`setup_cell` right after its title (its first markdown cell)."""
    at = 1 if nb.cells and nb.cells[0].cell_type == "markdown" else 0
    nb.cells.insert(at, setup_cell(wheel, book_url, notebook_framework(nb),
                                   choose=notebook_chooses_framework(nb)))
    return nb


_HANDIN = """\
## Hand in

**On the course's hub**, submit from the *Assignments* panel. **Anywhere else** (a laptop,
Colab), save this notebook (*File > Save*, Ctrl-S), then run, in this notebook's folder,

```
python -m grader.handin {assignment} --student YOUR_ID
```

in a terminal, or in a new cell with `!` in front, with the student id your instructor gave
you. It writes `{assignment}-YOUR_ID-<time>.zip` next to this notebook: upload that file
the way your instructor asks, logged in as yourself (whose it is and when it came are what
the platform records, not what the zip says). It refuses, saying why, a notebook it cannot hand in (not
found, not this assignment's, too large) and an id with characters the grader cannot file;
it says when the notebook was last saved and which answers still hold the stub, so unsaved
work shows. To hand in again, make a new zip and upload it: the newest one counts (by when
the platform received it). In Colab the notebook
is not a file of the machine that runs it: download it (*File > Download > .ipynb*), upload
it into the *Files* pane (it lands in `/content`), run the command in a cell, and download
the zip from the *Files* pane."""


def handin_cell(assignment: str) -> nbformat.NotebookNode:
    """The last cell of a student notebook published by the book: how to hand it in
    (:mod:`grader.handin`). A markdown cell: nothing runs when the notebook is graded."""
    cell = nbformat.v4.new_markdown_cell(_HANDIN.format(assignment=assignment))
    cell["id"] = HANDIN_ID
    return cell


def with_handin_cell(nb: nbformat.NotebookNode, assignment: str) -> nbformat.NotebookNode:
    """``nb`` with :func:`handin_cell` as its last cell."""
    nb.cells.append(handin_cell(assignment))
    return nb
