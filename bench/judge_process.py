"""What a judge process of its own costs a notebook, against judging in the grading process.

Each "notebook" runs a1's imports cell and one test cell that calls a function in a stand-in
kernel (a thread serving the channel from a folder, as the real kernel does), either

- ``process``: in a :class:`grader.grading.judge.process.JudgeProcess` (forked from the fork
  server; started, sent the cells, closed), as :class:`~grader.grading.judge.executor.JudgedExecute`
  does now, or
- ``in-process``: in this process (``run_cell_source`` in a thread, the channel here), as the
  judge ran before.

Prints the fork server's one-time start, then the median and range of ``--notebooks`` of
each, interleaved (one of each in turn), and the difference of the medians.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.append(str(Path(__file__).resolve().parent.parent))

LOCKED = ("import os\nimport time\n\nimport numpy as np\n\n"
          "from grader.checks import a1_independent_ops as checks\n"
          "from grader.checks.support import grade, public")
TEST = "answer(2, 3) + len(checks.__name__) * 0"


def serve(folder: str, name: str) -> threading.Thread:
    from grader.grading.judge import channel

    t = threading.Thread(target=channel.serve, args=(os.path.join(folder, name), 30.0), daemon=True)
    t.start()
    return t


def in_process(folder: str, n: int) -> float:
    import builtins

    from grader.grading.judge.cells import CellNamespace, run_cell_source
    from grader.grading.judge.channel import connect

    t0 = time.perf_counter()
    base = {"__name__": "__judge__", "__builtins__": builtins}
    run_cell_source(LOCKED, base, "<locked>")
    name = f".b{n}.sock"
    kernel = serve(folder, name)
    out = {}

    def judge():
        ch = connect(folder, name, time.monotonic() + 30)
        ch.deadline = time.monotonic() + 30
        out["v"] = run_cell_source(TEST, CellNamespace(base, ch), "<test>")[1]
        ch.stop()

    t = threading.Thread(target=judge)
    t.start()
    t.join()
    kernel.join(10)
    assert out["v"] == 5, out
    return time.perf_counter() - t0


def in_judge_process(folder: str, n: int) -> float:
    from grader.grading.judge.process import JudgeProcess

    t0 = time.perf_counter()
    jp = JudgeProcess()
    jp.locked(LOCKED, "<locked>")
    name = f".p{n}.sock"
    kernel = serve(folder, name)
    jp.prepare()
    jp.send({"op": "test", "source": TEST, "filename": "<test>", "folder": folder,
             "socket": name, "deadline": time.monotonic() + 30})
    while not jp.poll():
        time.sleep(0.0005)
    answer = jp.receive()
    jp.close()
    kernel.join(10)
    assert answer["value"] == "5", answer
    return time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--notebooks", type=int, default=20)
    a = ap.parse_args()
    import __main__

    __main__.answer = lambda x, y: x + y      # the "kernel's" function (channel.serve's namespace)
    folder = tempfile.mkdtemp(prefix="bench-judge-")
    t0 = time.perf_counter()
    in_judge_process(folder, -1)
    print(f"first judge process (starts the fork server, imports the checks): "
          f"{time.perf_counter() - t0:.2f} s", flush=True)
    in_process(folder, -1)                      # warm this process's imports too
    times: dict[str, list[float]] = {"process": [], "in-process": []}
    for i in range(a.notebooks):
        times["process"].append(in_judge_process(folder, i))
        times["in-process"].append(in_process(folder, i))
    for k, v in times.items():
        print(f"{k:>10}: median {statistics.median(v) * 1e3:.0f} ms per notebook "
              f"(range {min(v) * 1e3:.0f}-{max(v) * 1e3:.0f} ms, {len(v)} notebooks)")
    diff = statistics.median(times["process"]) - statistics.median(times["in-process"])
    print(f"a judge process of its own costs {diff * 1e3:.0f} ms more per notebook (medians); "
          f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")


if __name__ == "__main__":
    main()
