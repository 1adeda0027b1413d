"""make gpu-check: what it refuses without a GPU, and that every page it runs on the GPU
machine (plain Python, no Jupyter there) runs here cell by cell."""
import io
import json
import re

import pytest

from grader import gpu_check
from grader.lab import get_backend, gpucells


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


@pytest.mark.slow
@pytest.mark.parametrize("page", [p.stem for p in gpucells.pages_with_gpu_cells()])
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
    if not gpucells.gpu_count("torch"):
        assert all(r["error"] for r in records.values())
    else:
        assert not any(r["error"] for r in records.values()), records
