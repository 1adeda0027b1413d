import math

import pytest

from grader.lab.core.bench import Benchmark, Stats, measure


class Recorder:
    """A fake device and clock that log the order in which they are used."""

    def __init__(self):
        self.log, self.t = [], 0.0

    def synchronize(self):
        self.log.append("sync")

    def clock(self):
        self.log.append("clock")
        self.t += 1.0
        return self.t

    def work(self):
        self.log.append("work")


def test_measure_synchronizes_before_every_clock_read():
    r = Recorder()
    stats = measure(r.work, sync=r, warmup=1, repeats=2, clock=r.clock)
    assert r.log == ["work", "sync",                       # warm-up, then drain the queue
                     "sync", "clock", "work", "sync", "clock",
                     "sync", "clock", "work", "sync", "clock"]
    assert stats.samples == [1.0, 1.0] and stats.warmup == 1


def test_every_clock_read_after_work_is_preceded_by_a_sync():
    r = Recorder()
    measure(r.work, sync=r, warmup=2, repeats=3, clock=r.clock)
    for i, ev in enumerate(r.log):
        if ev == "clock" and i > 0 and "work" in r.log[:i]:
            last_work = max(j for j in range(i) if r.log[j] == "work")
            assert "sync" in r.log[last_work:i]


def test_warmup_runs_are_not_timed():
    r = Recorder()
    measure(r.work, sync=r, warmup=3, repeats=1, clock=r.clock)
    assert r.log.count("work") == 4 and r.log.count("clock") == 2


def test_benchmark_context_synchronizes_on_entry_and_before_the_exit_clock(capsys):
    r = Recorder()
    with Benchmark("GPU1 time", sync=r, clock=r.clock) as b:
        r.work()
    assert r.log == ["sync", "clock", "work", "sync", "clock"]
    assert b.elapsed == 1.0
    assert capsys.readouterr().out.strip() == "GPU1 time: 1.0000 s"


def test_benchmark_accepts_a_list_of_devices():
    a, b = Recorder(), Recorder()
    with Benchmark("both", sync=[a, b], verbose=False, clock=lambda: 0.0):
        pass
    assert a.log == b.log == ["sync", "sync"]


def test_stats_median_and_spread():
    s = Stats("x", [3.0, 1.0, 2.0, 10.0, 2.5])
    assert s.median == 2.5 and s.spread == 9.0
    assert "median of 5" in str(s)
    assert s.throughput(5e9) == "2.0 GFLOP/s"


def test_repeats_must_be_positive():
    with pytest.raises(ValueError):
        measure(lambda: None, repeats=0)
