import json

import pytest

from grader import gpu_check
from grader.lab import get_backend


def _gpus():
    return max(get_backend(fw).gpu_count() for fw in ("torch", "paddle"))


def test_without_a_gpu_it_exits_non_zero_and_says_why(capsys, tmp_path):
    if _gpus():
        pytest.skip("this machine has a GPU")
    assert gpu_check.main([str(tmp_path / "r.json")]) == 2
    assert "no GPU" in capsys.readouterr().err
    assert not (tmp_path / "r.json").exists()


def test_a_framework_that_is_not_installed_is_skipped_and_said(capsys, tmp_path,
                                                               monkeypatch):
    import grader.lab as lab

    real = lab.get_backend

    def fake(fw):
        if fw == "paddle":
            raise ModuleNotFoundError("No module named 'paddle'")
        return real(fw)

    monkeypatch.setattr(lab, "get_backend", fake)
    code = gpu_check.main([str(tmp_path / "r.json"), "--cells-only", "--pages", ""])
    err = capsys.readouterr().err
    assert "paddle cannot be imported here" in err
    assert code == (0 if _gpus() else 2)


def test_validate_names_what_is_missing():
    problems = gpu_check.validate({"schema": 1, "results": {"torch": {"devices": ""}}})
    assert any(p.startswith("date") for p in problems)
    assert any("lacks" in p and "timing" in p for p in problems)


def test_default_path_is_dated_and_named_after_the_gpu():
    p = gpu_check.default_path({"gpu_name": "NVIDIA H200 (SXM)", "date": "2026-11-29T10:00:00+00:00"})
    assert p.parent == gpu_check.RESULTS_DIR and p.name == "2026-11-29-nvidia-h200-sxm.json"


@pytest.mark.slow
def test_a_tiny_cpu_run_writes_a_well_formed_record(tmp_path):
    out = tmp_path / "r.json"
    assert gpu_check.main([str(out), "--allow-cpu", "--tiny", "--frameworks", "torch,paddle",
                           "--pages", "", "--cells-out", str(tmp_path / "cells")]) == 0
    rec = json.loads(out.read_text())
    assert gpu_check.validate(rec) == []
    assert rec["tiny"] is True and rec["cpu_only"] is (_gpus() == 0)
    for fw in ("torch", "paddle"):
        res = rec["results"][fw]
        assert res["n"] == 64 and res["products"] == 4
        assert res["timing"]["synced"]["median_s"] > 0 and res["timing"]["cold_s"] > 0


@pytest.mark.slow
@pytest.mark.parametrize("page", ["multidevice", "communication"])
def test_every_torch_cell_of_the_page_runs_in_a_plain_namespace(page):
    """What make gpu-check does on the GPU machine (no Jupyter there): every cell of the
    page's PyTorch variant runs in order; GPU cells fail here only when there is no GPU."""
    import io
    import re

    from grader.lab import gpucells

    log = io.StringIO()
    records = gpucells.run_cells(page, "torch", log=log)
    runs = re.findall(r"cell (\d+)( \S+)?: (ok|error)", log.getvalue())
    plain = [(i, status) for i, name, status in runs if not name]
    assert plain and all(status == "ok" for _, status in plain), log.getvalue()[-3000:]
    gpu_cells = {f"torch:{name.strip()}" for _, name, _ in runs if name}
    assert gpu_cells == set(records) and gpu_cells
    if not gpucells.gpu_count("torch"):
        assert all(r["error"] for r in records.values())
    else:
        assert not any(r["error"] for r in records.values()), records
