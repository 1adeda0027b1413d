"""bench/book_build.py's issue-24 check (a fresh clone built twice with one core kept
busy): its parts, on small cases. The whole check is run by hand (it builds the book)."""
from __future__ import annotations

import importlib.util
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
_spec = importlib.util.spec_from_file_location("book_build", ROOT / "bench" / "book_build.py")
book_build = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(book_build)


def _files(toc: dict) -> list[str]:
    return [c["file"] for part in toc["parts"] for c in part["chapters"]]


def test_the_small_table_of_contents_keeps_the_pages_asked_for_and_what_they_need():
    full = (ROOT / "_toc.yml").read_text()
    small = yaml.safe_load(book_build.small_toc(full, ["toolkit", "sharding"]))
    assert small["root"] == yaml.safe_load(full)["root"]
    assert _files(small) == ["chapters/toolkit", "chapters/sharding", "chapters/exercises",
                             "chapters/references"]
    assert all(part["chapters"] for part in small["parts"])      # no empty part left
    assert _files(yaml.safe_load(book_build.small_toc(full, []))) == [
        "chapters/exercises", "chapters/references"]


def test_the_busy_process_spins_while_the_check_runs_and_stops_after():
    with book_build.BusyCore() as busy:
        deadline = time.monotonic() + 60
        while busy.cpu_seconds() < 0.2 and time.monotonic() < deadline:
            time.sleep(0.1)
        assert busy.alive()
        assert busy.cpu_seconds() >= 0.2                 # it computes, it does not sleep
    assert not busy.alive()


def test_the_builds_run_without_this_checkouts_virtual_environment(monkeypatch):
    import sys

    here = str(Path(sys.executable).parent)
    monkeypatch.setenv("PATH", f"{here}:/usr/bin")
    monkeypatch.setenv("VIRTUAL_ENV", str(Path(here).parent))
    env = book_build.clean_env()
    assert "VIRTUAL_ENV" not in env and env["PATH"] == "/usr/bin"
