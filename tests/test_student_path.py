"""A student outside the hub (issue 20): a fresh environment with only Jupyter, a notebook
downloaded from the book, and the wheel beside it. Its set-up cell installs the course
package and the notebook's one framework (pinned, the CPU build), and its public checks
run against a correct answer."""
import os
import shutil
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

from grader.student_setup import build_wheel, with_setup_cell

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parent.parent
A1 = "a1_independent_ops"


def _python(version: str) -> str | None:
    if version == f"{sys.version_info.major}.{sys.version_info.minor}":
        return str(Path(sys.base_prefix) / "bin" / "python3")
    return shutil.which(f"python{version}") and next(
        (str(p) for p in Path.home().glob(f".pyenv/versions/{version}*/bin/python{version}")), None)


def _answered_notebook(wheel: str) -> nbformat.NotebookNode:
    """The source notebook with its solutions (the answer a student would write) and
    without its hidden tests, as a released notebook a student has filled in."""
    nb = nbformat.read(ROOT / "exercises" / "source" / A1 / f"{A1}.ipynb", as_version=4)
    for c in nb.cells:
        if c.cell_type == "code" and "### BEGIN HIDDEN TESTS" in c.source:
            head, _, rest = c.source.partition("### BEGIN HIDDEN TESTS")
            c.source = head + rest.partition("### END HIDDEN TESTS")[2]
    return with_setup_cell(nb, wheel)


@pytest.mark.parametrize("version", ["3.11"])
def test_a_downloaded_notebook_sets_itself_up_and_its_public_checks_run(version, tmp_path):
    python = _python(version)
    if python is None:
        pytest.skip(f"no Python {version} here")
    wheel = build_wheel(ROOT, tmp_path / "nb", tmp_path / "cache")
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    # no machine of the project reaches PyTorch's own index: fail at once, do not retry
    env.update(PIP_RETRIES="0", PIP_TIMEOUT="5", PIP_DISABLE_PIP_VERSION_CHECK="1")
    venv = tmp_path / "student"
    subprocess.run([python, "-m", "venv", str(venv)], check=True, timeout=300)
    py = str(venv / "bin" / "python")
    # only Jupyter's kernel and runner: no course package, no framework
    subprocess.run([py, "-m", "pip", "install", "-q", "ipykernel", "nbclient"], env=env,
                   check=True, timeout=900)
    subprocess.run([py, "-m", "ipykernel", "install", "--sys-prefix", "--name", "student"],
                   env=env, check=True, timeout=300, capture_output=True)
    path = tmp_path / "nb" / f"{A1}.ipynb"
    nbformat.write(_answered_notebook(wheel.name), path)
    runner = ("import nbformat, nbclient, sys; nb = nbformat.read(sys.argv[1], 4); "
              "nbclient.NotebookClient(nb, kernel_name='student', timeout=1200, "
              "resources={'metadata': {'path': sys.argv[2]}}).execute(); "
              "nbformat.write(nb, sys.argv[1])")
    done = subprocess.run([py, "-c", runner, str(path), str(path.parent)], env=env,
                          capture_output=True, text=True, timeout=1800)
    assert done.returncode == 0, (done.stdout + done.stderr)[-3000:]
    out = nbformat.read(path, as_version=4)
    said = "".join(o.get("text", "") for c in out.cells if c.cell_type == "code"
                   for o in c.get("outputs", []))
    assert "installing the course package" in said and "installing torch==" in said
    assert "course package: 0.1.0" in said
    where = subprocess.run([py, "-c", "import torch, grader; print(torch.__version__, "
                            "grader.__file__)"], capture_output=True, text=True, env=env,
                           cwd=tmp_path)
    assert str(venv) in where.stdout and "+cpu" in where.stdout, where
    assert subprocess.run([py, "-c", "import paddle"], capture_output=True, env=env,
                          cwd=tmp_path).returncode != 0    # only the notebook's framework
