"""make gpu-check: what it refuses without a GPU, and that every page it runs on the GPU
machine (plain Python, no Jupyter there) runs here cell by cell."""
import io
import json
import re

import pytest

from grader import gpu_check
from grader.lab import get_backend
from grader.lab.core import gpucells


def _gpus():
    return max(get_backend(fw).gpu_count() for fw in ("torch", "paddle"))


def test_without_a_gpu_it_exits_non_zero_and_says_why(capsys, tmp_path):
    if _gpus():
        pytest.skip("this machine has a GPU")
    assert gpu_check.main(["--cells-out", str(tmp_path)]) == 2
    assert "no GPU" in capsys.readouterr().err
    assert not list(tmp_path.iterdir())


def test_a_framework_that_is_not_installed_is_skipped_and_said(capsys, tmp_path,
                                                               monkeypatch):
    import grader.lab as lab

    real = lab.get_backend

    def fake(fw):
        if fw == "paddle":
            raise ModuleNotFoundError("No module named 'paddle'")
        return real(fw)

    monkeypatch.setattr(lab, "get_backend", fake)
    code = gpu_check.main(["--pages", "", "--cells-out", str(tmp_path)])
    assert "paddle cannot be imported here" in capsys.readouterr().err
    assert code == (0 if _gpus() else 2)


def test_an_unknown_page_is_named(capsys, tmp_path):
    assert gpu_check.main(["--allow-cpu", "--pages", "no_such_page",
                           "--cells-out", str(tmp_path)]) == 2
    assert "no_such_page" in capsys.readouterr().err


@pytest.mark.slow
def test_a_cpu_smoke_run_is_marked_and_leaves_the_committed_records_alone(tmp_path):
    folder = gpucells.RECORDS
    before = {p.name: p.stat().st_mtime_ns for p in folder.glob("*.json")}
    assert gpu_check.main(["--allow-cpu", "--frameworks", "torch", "--pages", "toolkit",
                           "--cells-out", str(tmp_path)]) == 0
    rec = json.loads((tmp_path / "toolkit.json").read_text())
    assert rec["provenance"]["torch"]["cpu_only"] is (_gpus() == 0)
    assert {p.name: p.stat().st_mtime_ns for p in folder.glob("*.json")} == before


PAGES = [p.stem for p in gpucells.pages_with_gpu_cells()]
# Run here cell by cell: the pages whose CPU cells are short. The others' cells run in the
# book build (tests/test_book.py) in a kernel, and are checked below as plain Python; all
# of them ran on an H200 with bench/gpu_device.sh (bench/results/gpu/).
RUN_HERE = ["async", "communication", "multidevice", "toolkit"]


@pytest.mark.parametrize("page", PAGES)
def test_every_torch_cell_of_the_page_is_plain_python_once_translated(page):
    """No IPython beyond the two spellings gpu_check translates (``%%writefile`` on a
    cell's first line, ``!command``): anything else would be skipped on the GPU machine."""
    path = gpucells._page_path(page)
    checked = 0
    for cell in gpucells.parse_page(path):
        tags = set(cell.tags)
        if (cell.framework not in (None, "torch") or "gpu-output" in tags
                or ("skip-execution" in tags and not cell.gpu_name)):
            continue
        lines = cell.source.splitlines()
        magics = [ln for i, ln in enumerate(lines) if ln.lstrip().startswith("%")
                  and not (i == 0 and ln.startswith("%%writefile"))]
        assert not magics, f"{page} cell {cell.index}: {magics}"
        assert "get_ipython" not in cell.source, f"{page} cell {cell.index}"
        compile(gpucells._translate(cell.source, path.parent),
                f"<{page}:cell {cell.index}>", "exec")
        checked += 1
    assert checked


def test_the_pages_run_here_are_pages_with_gpu_cells():
    assert set(RUN_HERE) <= set(PAGES)


@pytest.mark.slow
@pytest.mark.parametrize("page", RUN_HERE)
def test_every_torch_cell_of_the_page_runs_in_a_plain_namespace(page):
    """What make gpu-check does on the GPU machine (no Jupyter there): every cell of the
    page's PyTorch variant runs in order; GPU cells fail here only when there is no GPU."""
    log = io.StringIO()
    records = gpucells.run_cells(page, "torch", log=log)
    runs = re.findall(r"cell (\d+)( \S+)?: (ok|error)", log.getvalue())
    plain = [(i, status) for i, name, status in runs if not name]
    assert plain and all(status == "ok" for _, status in plain), log.getvalue()[-3000:]
    gpu_cells = {f"torch:{name.strip()}" for _, name, _ in runs if name}
    assert gpu_cells == set(records)
    have = gpucells.gpu_count("torch")
    if not have:
        assert all(r["error"] for r in records.values())
    else:  # only cells that need more GPUs than this machine has are not recorded
        short = {f"torch:{c.gpu_name}" for c in gpucells.parse_page(
            gpucells._page_path(page)) if c.gpu_name and c.gpus > have}
        assert {k for k, r in records.items() if r["error"]} == short, records
        assert all(records[k]["error"].startswith("needs ") for k in short)
