"""The 16-rank run, recorded: too slow for every build (16 processes on the build
machine's cores), so a slow test runs it and writes its result here, with the date, the
machine and a digest of the script that ran. The page shows the record with that label,
and says it is stale when the script has changed since (the digest no longer matches):
a recorded number is never passed off as one of this build's.
"""
from __future__ import annotations

import datetime
import hashlib
import json
import platform
import textwrap
from pathlib import Path

RECORDS = Path(__file__).resolve().parent / "records"
RECORD_16 = RECORDS / "torch_2x2x2x2.json"       # the 4-D run on 16 ranks
RECORD_ELASTIC = RECORDS / "torch_elastic.json"  # a rank killed, torchrun restarting
RECORD_PADDLE_ELASTIC = RECORDS / "paddle_elastic.json"   # the same, a launch rerun
RECORD_RESHARD = RECORDS / "torch_resume_4to2.json"      # 4 ranks' checkpoints on 2


def script_digest(script) -> str:
    return hashlib.sha256(Path(script).read_bytes()).hexdigest()


def write_record(result: dict, script, command: str, path) -> dict:
    """Save ``result`` (what the script wrote) with its label: date, machine, the
    script's digest and the command that ran it."""
    from grader.lab import cpu_model
    from grader.lab.core.devices import cpu_cores

    record = {"date": datetime.date.today().isoformat(),
              "machine": f"{cpu_cores()} cores, {cpu_model()} ({platform.system()})",
              "script": Path(script).name, "digest": script_digest(script),
              "command": command, "result": result}
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    Path(path).write_text(json.dumps(record, indent=1) + "\n")
    return record


def read_record(path, script) -> dict | None:
    """The record with ``stale`` set (its script changed since it ran); None if no
    record was ever written."""
    p = Path(path)
    if not p.exists():
        return None
    record = json.loads(p.read_text())
    record["stale"] = record["digest"] != script_digest(script)
    return record


def record_words(record: dict | None) -> str:
    """The label the page puts on a recorded run, in lines that fit the page."""
    if record is None:
        return "No recorded run exists yet."
    words = (f"Recorded on {record['date']} on {record['machine']} "
             f"(`{record['command']}`), not during this build")
    if record["stale"]:
        words += (f"; stale: {record['script']} has changed since, so these "
                  "numbers are of an earlier version of the script")
    return textwrap.fill(words + ".", 88)
