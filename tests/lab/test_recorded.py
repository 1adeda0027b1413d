import json

from grader.lab.recorded import load_recorded, recorded_label, show_recorded


def _write(tmp_path, name, **over):
    rec = {"gpu_name": "NVIDIA H200", "date": "2026-11-29T12:00:00+00:00", "tiny": False,
           "cpu_only": False, "results": {"torch": {"devices": "1 GPU", "timing": {"x": 1}}}}
    rec.update(over)
    (tmp_path / name).write_text(json.dumps(rec))


def test_no_records_prints_one_sentence(tmp_path, capsys):
    assert show_recorded("timing", "torch", lambda r, res: "x", tmp_path) == 0
    out = capsys.readouterr().out
    assert out.count("\n") == 1 and "No GPU results are recorded" in out


def test_smoke_test_records_are_not_shown(tmp_path):
    _write(tmp_path, "a.json", tiny=True)
    _write(tmp_path, "b.json", cpu_only=True)
    (tmp_path / "c.json").write_text("{not json")
    assert load_recorded(tmp_path) == []


def test_a_record_is_shown_with_where_and_when_it_was_measured(tmp_path, capsys):
    _write(tmp_path, "2026-11-29-nvidia-h200.json")
    assert show_recorded("timing", "torch", lambda r, res: f"value {r['x']}", tmp_path) == 1
    out = capsys.readouterr().out
    assert "recorded on NVIDIA H200 on 2026-11-29 by grader.gpu_check" in out and "value 1" in out
    assert recorded_label(load_recorded(tmp_path)[0]).startswith("recorded on NVIDIA H200")


def test_a_framework_that_ran_on_cpu_workers_there_is_not_shown_as_a_gpu_result(tmp_path, capsys):
    _write(tmp_path, "r.json", results={"paddle": {"kind": "cpu-workers", "timing": {"x": 1}},
                                        "torch": {"kind": "gpus", "timing": {"x": 2}}})
    assert show_recorded("timing", "paddle", lambda r, res: "shown", tmp_path) == 0
    assert "No GPU results" in capsys.readouterr().out
    assert show_recorded("timing", "torch", lambda r, res: "shown", tmp_path) == 1
