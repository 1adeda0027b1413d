"""The recorded 16-rank run: labelled with its date and machine, and stale as soon as
its script changes."""
from __future__ import annotations

from grader.lab import capstone


def test_a_record_is_stale_once_its_script_changes(tmp_path):
    script, path = tmp_path / "s.py", tmp_path / "r.json"
    script.write_text("print(1)\n")
    capstone.write_record({"x": 1}, script, "torchrun s.py", path)
    rec = capstone.read_record(path, script)
    assert not rec["stale"] and rec["result"] == {"x": 1}
    words = capstone.record_words(rec)
    assert rec["date"] in words and rec["machine"] in words and "stale" not in words
    script.write_text("print(2)\n")
    rec = capstone.read_record(path, script)
    assert rec["stale"] and "stale" in capstone.record_words(rec)


def test_no_record_says_so(tmp_path):
    assert capstone.read_record(tmp_path / "none.json", tmp_path / "s.py") is None
    assert capstone.record_words(None) == "No recorded run exists yet."
