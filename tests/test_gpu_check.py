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


def test_validate_names_what_is_missing():
    problems = gpu_check.validate({"schema": 1, "results": {"torch": {"timing": {}}}})
    assert any(p.startswith("date") for p in problems)
    assert any("lacks" in p and "two_devices" in p for p in problems)


def test_default_path_is_dated_and_named_after_the_gpu():
    p = gpu_check.default_path({"gpu_name": "NVIDIA H200 (SXM)", "date": "2026-11-29T10:00:00+00:00"})
    assert p.parent == gpu_check.RESULTS_DIR and p.name == "2026-11-29-nvidia-h200-sxm.json"


def _committed_cells() -> dict:
    folder = gpu_check.ROOT / "bench" / "results" / "gpu" / "cells"
    return {p.name: p.stat().st_mtime_ns for p in folder.glob("*.json")}


@pytest.mark.slow
def test_a_tiny_cpu_run_writes_a_well_formed_record(tmp_path):
    out = tmp_path / "r.json"
    before = _committed_cells()
    # the chapters' GPU cells run too (as a CPU smoke run): their records go to tmp_path,
    # never into bench/results/gpu/cells
    assert gpu_check.main([str(out), "--allow-cpu", "--tiny", "--frameworks", "torch,paddle",
                           "--cells-out", str(tmp_path / "cells")]) == 0
    rec = json.loads(out.read_text())
    cells = {p.name for p in (tmp_path / "cells").glob("*.json")}
    assert {"async.json", "toolkit.json"} <= cells
    assert _committed_cells() == before  # the committed GPU records were not touched
    assert gpu_check.validate(rec) == []
    assert rec["tiny"] is True and rec["cpu_only"] is (_gpus() == 0)
    for fw in ("torch", "paddle"):
        res = rec["results"][fw]
        assert res["n"] == 64 and all(r["correct"] for r in res["copy_overlap"]["runs"])
        assert res["two_devices"]["both"]["median_s"] > 0
