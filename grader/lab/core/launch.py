"""Run a function on N ranks with torch.distributed or paddle.distributed.

``launch(fn, nprocs=2, framework="torch")`` starts one fresh Python process per rank
(the plumbing is :mod:`grader.lab.core.procs`, shared with the CPU workers), initialises the
framework's process group (gloo on CPU, NCCL when every rank has its own GPU), calls
``fn(rank, world_size, *args)`` and returns the ranks' return values in rank order. It
works from a notebook cell and from tests alike: ``fn`` is defined in a module (sent by
name) or at the top level of a cell (sent by value, :func:`grader.lab.core.procs.portable`).

Failure is loud and bounded: a rank that raises ends the run with :class:`RankFailed`
naming the exception in its first line, with that rank's traceback; a rank that dies
without a word (``os._exit``, a segfault) ends it with :class:`RankFailed` naming its
exit code; a run that outlives ``timeout`` ends with :class:`RankTimeout` naming the
ranks still running. Either way the other ranks are killed: nothing is left hanging, and
the run's temporary folder (the job, the ranks' results and logs) is removed, whatever
happened (:func:`launch` returns the logs' text).

This is a teaching launcher for one machine. Multi-node jobs go through the frameworks'
own launchers (``torchrun``, ``python -m paddle.distributed.launch``).
"""
from __future__ import annotations

import os
import pickle
import shutil
import tempfile
import time
from typing import Any, Callable

from .devices import cpu_cores
from .ports import free_ports
from .procs import RemoteFailure, callable_of, child_env, exit_now, log_tail, portable, \
    start_python, stop

__all__ = ["launch", "RankFailed", "RankTimeout", "LaunchResult"]


class RankFailed(RuntimeError):
    """A rank raised (``failure`` says what: type, message, traceback) or died."""

    def __init__(self, rank: int, detail: str, failure: RemoteFailure | None = None) -> None:
        head = f"rank {rank} raised {failure.headline()}" if failure else f"rank {rank} failed"
        super().__init__(f"{head}:\n{detail}")
        self.rank, self.detail, self.failure = rank, detail, failure

    def last_error_line(self) -> str:
        """The rank's own last line that names an error (else its last line): what a check
        quotes to a student."""
        lines = [l for l in self.detail.splitlines() if l.strip() and not l.startswith("---")]
        last = next((l for l in reversed(lines) if "Error" in l or "Exception" in l),
                    lines[-1] if lines else "")
        return last.strip()


class RankTimeout(TimeoutError):
    def __init__(self, ranks: list[int], timeout: float, detail: str) -> None:
        super().__init__(
            f"rank(s) {ranks} still running after {timeout:.0f} s (a hang: a collective waiting "
            f"for a rank that never joins, or an endless loop); all ranks were stopped.\n{detail}"
        )
        self.ranks, self.timeout = ranks, timeout


class LaunchResult(list):
    """The ranks' return values in rank order, plus how the run went (``logs``: what each
    rank printed, as text: the files are removed with the run's folder)."""

    def __init__(self, values: list[Any], backend: str, seconds: float, logs: list[str]) -> None:
        super().__init__(values)
        self.backend, self.seconds, self.logs = backend, seconds, logs

    def __repr__(self) -> str:
        return f"LaunchResult({list(self)!r}, backend={self.backend!r}, seconds={self.seconds:.2f})"


def _rank_env(framework: str, rank: int, world: int, ports: list[int],
              backend: str) -> dict[str, str]:
    env = {
        "COURSE_RANK": str(rank), "COURSE_WORLD_SIZE": str(world),
        "COURSE_FRAMEWORK": framework, "COURSE_DIST_BACKEND": backend,
    }
    if framework == "torch":
        env.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(ports[0]), RANK=str(rank),
                   LOCAL_RANK=str(rank), WORLD_SIZE=str(world), LOCAL_WORLD_SIZE=str(world))
    else:  # what `python -m paddle.distributed.launch` sets for each trainer
        endpoints = [f"127.0.0.1:{p}" for p in ports[1:world + 1]]
        env.update(
            PADDLE_MASTER=f"127.0.0.1:{ports[0]}", PADDLE_TRAINER_ID=str(rank),
            PADDLE_TRAINERS_NUM=str(world), PADDLE_TRAINER_ENDPOINTS=",".join(endpoints),
            PADDLE_CURRENT_ENDPOINT=endpoints[rank], PADDLE_RANK_IN_NODE=str(rank),
            PADDLE_LOCAL_RANK=str(rank), PADDLE_LOCAL_SIZE=str(world),
            PADDLE_GLOBAL_RANK=str(rank), PADDLE_GLOBAL_SIZE=str(world), PADDLE_NNODES="1",
            PADDLE_DISTRI_BACKEND=backend, FLAGS_selected_gpus=str(rank),
        )
    return env


def _rank_main(job_path: str, out_path: str) -> None:
    """Entry point of one rank's process."""
    rank = int(os.environ["COURSE_RANK"])
    world = int(os.environ["COURSE_WORLD_SIZE"])
    framework, backend = os.environ["COURSE_FRAMEWORK"], os.environ["COURSE_DIST_BACKEND"]
    try:
        with open(job_path, "rb") as f:
            fn, args, kwargs, init_timeout, safe = pickle.load(f)
        fn = callable_of(fn)
        from .backends import get_backend

        get_backend(framework).set_num_threads(int(os.environ["OMP_NUM_THREADS"]))
        if framework == "torch":
            import datetime

            import torch.distributed as dist

            dist.init_process_group(backend, rank=rank, world_size=world,
                                    timeout=datetime.timedelta(seconds=init_timeout))
        else:
            import paddle.distributed as dist

            dist.init_parallel_env()
        if backend == "gloo":
            # gloo connects every pair of ranks while the group is made, and a rank that
            # returns from that first may run ``fn`` and end (a raised error) while another
            # still connects: that one would fail with "Connection closed by peer" in place
            # of the error that ended the first. Every rank waits here until all are joined.
            dist.barrier()
        value = fn(rank, world, *args, **kwargs)
        payload = ("ok", value)
    except BaseException as exc:
        payload = ("err", RemoteFailure.from_exception(exc).as_data())
    with open(out_path + ".tmp", "wb") as f:
        if safe:   # data only: the launcher decodes it without running anything (no pickle)
            from grader.wire import dumps

            try:
                f.write(dumps(list(payload)))
            except (TypeError, ValueError) as exc:
                f.write(dumps(["err", f"the rank returned something that is not data: {exc}"]))
        else:
            pickle.dump(payload, f)
    os.replace(out_path + ".tmp", out_path)
    if framework == "torch" and payload[0] == "ok":
        import torch.distributed as dist

        if dist.is_initialized():
            dist.destroy_process_group()
    exit_now()  # skip interpreter teardown: gloo's and paddle's threads can block it


def launch(fn: Callable[..., Any], nprocs: int = 2, framework: str = "torch", args: tuple = (),
           kwargs: dict | None = None, timeout: float = 120.0, backend: str | None = None,
           gpu_count: int | None = None, env: dict[str, str] | None = None,
           safe_results: bool = False, tmp_dir: str | None = None) -> LaunchResult:
    """Run ``fn(rank, world_size, *args, **kwargs)`` on ``nprocs`` ranks; see the module doc.

    ``tmp_dir``: where the run's temporary folder goes (default: the system's temp folder).

    ``env`` adds environment variables to every rank, set before the framework is imported
    (for example Paddle's ``GLOG_vmodule``, read once at import, to log which collective a
    reshard runs); they override the launcher's own, such as ``GLOG_minloglevel``.

    ``safe_results``: the ranks run code this process must not trust (a student's), so
    their return values travel as data (:mod:`grader.wire`: numbers, strings,
    containers, arrays), never pickled; anything else fails the rank."""
    from .backends import get_backend

    if nprocs < 1:
        raise ValueError("nprocs must be at least 1")
    gpus = get_backend(framework).gpu_count() if gpu_count is None else gpu_count
    backend = backend or ("nccl" if gpus >= nprocs else "gloo")
    threads = max(1, cpu_cores() // nprocs)
    work = tempfile.mkdtemp(prefix="course-launch-", dir=tmp_dir)
    procs: list = []
    try:
        return _launch_in(fn, nprocs, framework, args, kwargs, timeout, backend, env,
                          safe_results, threads, work, procs)
    finally:
        stop(procs)    # already stopped unless this process was interrupted meanwhile
        shutil.rmtree(work, ignore_errors=True)


def _launch_in(fn, nprocs: int, framework: str, args: tuple, kwargs: dict | None,
               timeout: float, backend: str, env: dict[str, str] | None, safe_results: bool,
               threads: int, work: str, procs: list) -> LaunchResult:
    job = os.path.join(work, "job.pkl")
    try:
        with open(job, "wb") as f:
            pickle.dump((portable(fn), args, kwargs or {}, max(30.0, timeout), safe_results), f)
    except (pickle.PicklingError, AttributeError, TypeError) as exc:
        raise TypeError(
            f"cannot send {fn!r} to the ranks: {exc}. The function must be importable "
            "(defined in a module) or defined at the top level of a notebook cell or "
            "script, and its arguments picklable."
        ) from exc
    ports = free_ports(nprocs + 1)
    outs, logs = [], []
    t_start = time.perf_counter()
    for rank in range(nprocs):
        out, log = os.path.join(work, f"rank{rank}.out"), os.path.join(work, f"rank{rank}.log")
        rank_env = child_env(threads, {**_rank_env(framework, rank, nprocs, ports, backend),
                                       **(env or {})})
        procs.append(start_python(
            f"from grader.lab.core.launch import _rank_main; _rank_main({job!r}, {out!r})",
            log, rank_env, new_session=True))
        outs.append(out)
        logs.append(log)

    results: dict[int, Any] = {}
    deadline = time.monotonic() + timeout
    try:
        while len(results) < nprocs:
            for rank, (p, out) in enumerate(zip(procs, outs)):
                if rank in results:
                    continue
                if os.path.exists(out):
                    status, value = _read_result(out, safe_results)
                    if status == "err":
                        failure = RemoteFailure.from_data(value)
                        raise RankFailed(rank, failure.traceback + _log_note(logs[rank]),
                                         failure)
                    results[rank] = value
                elif p.poll() is not None:
                    raise RankFailed(rank, f"process exited with code {p.returncode} before "
                                           f"returning (killed, crashed or os._exit)."
                                           + _log_note(logs[rank]))
            if len(results) < nprocs:
                if time.monotonic() > deadline:
                    waiting = [r for r in range(nprocs) if r not in results]
                    raise RankTimeout(waiting, timeout,
                                      "".join(_log_note(logs[r]) for r in waiting))
                time.sleep(0.05)
    finally:
        stop(procs)
    return LaunchResult([results[r] for r in range(nprocs)], backend,
                        time.perf_counter() - t_start, [_log_text(log) for log in logs])


def _read_result(path: str, safe: bool) -> tuple[str, Any]:
    with open(path, "rb") as f:
        if not safe:
            return pickle.load(f)
        from grader.wire import ProtocolError, loads

        try:
            status, value = loads(f.read())
        except (ProtocolError, TypeError, ValueError) as exc:
            return "err", f"the rank's result file is not data: {exc}"
    return ("ok" if status == "ok" else "err"), value


def _log_text(log: str, most: int = 2**20) -> str:
    """What a rank printed (its last ``most`` bytes), read before its folder is removed."""
    try:
        with open(log, "rb") as f:
            f.seek(max(0, os.path.getsize(log) - most))
            return f.read().decode(errors="replace")
    except OSError:
        return ""


def _log_note(log: str) -> str:
    tail = log_tail(log, 12)
    return f"\n--- last lines of {log} ---\n{tail}" if tail.strip() else ""
