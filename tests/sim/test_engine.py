"""The simulated GPUs (grader.sim.engine through the simulated torch): known durations
on a virtual clock, the mistakes they make visible, and the same answer every run."""
import numpy as np
import pytest

from grader.sim import Costs, VirtualClock, fixed_kernel, host_value, place, simulate


def _torch(**costs):
    return simulate("torch", costs=Costs(**{"warmup_s": 0.0, "launch_s": 0.0, **costs}))


def test_a_launch_returns_before_the_work_is_done_and_synchronize_waits_for_it():
    torch, m = _torch(launch_s=1e-5)
    x = place(torch, np.ones(4, np.float32))
    t0 = m.clock.read()
    fixed_kernel(0.010)(x)
    assert m.clock.read() - t0 == pytest.approx(1e-5)
    assert not torch.cuda.current_stream().query()
    torch.cuda.synchronize()
    assert m.clock.read() - t0 == pytest.approx(0.010 + 1e-5)


def test_the_first_launch_of_a_kernel_pays_the_warmup_once():
    torch, m = _torch(warmup_s=0.05)
    x = place(torch, np.ones(4, np.float32))
    op, times = fixed_kernel(0.010, name="sq"), []
    for _ in range(3):
        t0 = m.clock.read()
        op(x)
        torch.cuda.synchronize()
        times.append(m.clock.read() - t0)
    assert times == pytest.approx([0.06, 0.01, 0.01])


def test_one_stream_runs_in_order_and_narrow_kernels_on_several_streams_share_the_gpu():
    for n_streams, expected in ((1, 0.032), (4, 0.008), (8, 0.008)):
        torch, m = _torch()
        x = place(torch, np.ones(4, np.float32))
        narrow = fixed_kernel(0.004, width=0.25)
        streams = [torch.cuda.Stream() for _ in range(n_streams)]
        t0 = m.clock.read()
        for i in range(8):
            with torch.cuda.stream(streams[i % n_streams]):
                narrow(x)
        torch.cuda.synchronize()
        assert m.clock.read() - t0 == pytest.approx(expected), n_streams
    torch, m = _torch()
    x = place(torch, np.ones(4, np.float32))
    streams = [torch.cuda.Stream() for _ in range(4)]
    for s in streams:
        with torch.cuda.stream(s):
            fixed_kernel(0.004, width=1.0)(x)
    torch.cuda.synchronize()
    assert m.clock.read() == pytest.approx(0.016)       # wide kernels never share


def test_a_kernels_width_and_duration_come_from_its_size():
    torch, m = _torch(flops=2 * 32 ** 3 / 0.001, capacity=64 * 64)
    small, large = place(torch, np.eye(32, dtype=np.float32)), place(torch, np.eye(64, dtype=np.float32))
    small @ small
    large @ large
    s, l = m.ops[-2:]
    assert (s.width, l.width) == (0.25, 1.0)
    assert (s.seconds, l.seconds) == pytest.approx((0.004, 0.008))


def test_streams_do_not_wait_for_each_other_a_racing_read_is_garbage_and_recorded():
    torch, m = _torch()
    x = place(torch, np.full(4, 2.0, np.float32))
    y = fixed_kernel(0.010, width=0.5, fn=lambda v: v + 1)(x)      # on the current stream
    side = torch.cuda.Stream()
    with torch.cuda.stream(side):
        z = y * 2                                                 # nothing made side wait
    torch.cuda.synchronize()
    assert np.isnan(z.cpu().numpy()).all()
    assert [v.kind for v in m.violations] == ["race"]
    torch, m = _torch()
    x = place(torch, np.full(4, 2.0, np.float32))
    y = fixed_kernel(0.010, width=0.5, fn=lambda v: v + 1)(x)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        z = y * 2
    torch.cuda.synchronize()
    assert z.cpu().numpy().tolist() == [6, 6, 6, 6] and not m.violations


def test_a_nonblocking_copy_to_pinned_memory_is_garbage_until_it_lands():
    torch, m = _torch(copy_bw=16 / 0.002, copy_latency_s=0.0)
    x = place(torch, np.arange(4, dtype=np.float32))
    host = fixed_kernel(0.001, fn=lambda v: v * v)(x).to("cpu", non_blocking=True)
    assert host.is_pinned() and np.isnan(host.numpy()).all()
    assert m.violations[-1].kind == "early_read"
    torch.cuda.synchronize()
    assert host.numpy().tolist() == [0, 1, 4, 9] and host_value(host).tolist() == [0, 1, 4, 9]


def test_copies_overlap_kernels_only_from_another_stream_into_pinned_memory():
    def run(how):
        torch, m = _torch(copy_bw=16 / 0.008, copy_latency_s=0.0)
        xs = [place(torch, np.ones(4, np.float32)) for _ in range(3)]
        side = torch.cuda.Stream()
        for x in xs:
            y = fixed_kernel(0.010)(x)
            if how == "same stream":
                y.to("cpu", non_blocking=True)
                continue
            e = torch.cuda.Event()
            e.record()
            with torch.cuda.stream(side):
                side.wait_event(e)
                if how == "pinned":
                    y.to("cpu", non_blocking=True)
                else:
                    torch.empty(4).copy_(y, non_blocking=True)     # pageable: the host waits
        torch.cuda.synchronize()
        return m.clock.read()
    assert run("pinned") == pytest.approx(3 * 0.010 + 0.008)
    assert run("same stream") == pytest.approx(3 * (0.010 + 0.008))
    assert run("pageable") == pytest.approx(3 * (0.010 + 0.008))


def test_events_time_the_gpu_and_elapsed_time_needs_them_done():
    torch, m = _torch()
    x = place(torch, np.ones(4, np.float32))
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    fixed_kernel(0.012)(x)
    end.record()
    with pytest.raises(RuntimeError, match="device not ready"):
        start.elapsed_time(end)
    end.synchronize()
    assert start.elapsed_time(end) == pytest.approx(12.0)          # milliseconds
    plain = torch.cuda.Event()
    plain.record()
    with pytest.raises(RuntimeError, match="enable_timing=True"):
        start.elapsed_time(plain)


def test_the_graph_scheduler_runs_independent_kernels_together_but_respects_dependencies():
    torch, m = simulate("torch", costs=Costs(warmup_s=0, launch_s=0, capacity=16 * 8,
                                             flops=2 * 4 ** 3 * 8 / 0.01), parallel=True)
    x = place(torch, np.eye(4, dtype=np.float32))
    t0 = m.clock.read()
    for _ in range(8):
        x @ x
    torch.cuda.synchronize()
    assert m.clock.read() - t0 == pytest.approx(0.01)
    t0, y = m.clock.read(), x
    for _ in range(8):
        y = y @ x
    torch.cuda.synchronize()
    assert m.clock.read() - t0 == pytest.approx(0.08)


def test_a_copy_between_devices_waits_for_both_devices_queues():
    torch, m = simulate("torch", gpus=2, costs=Costs(warmup_s=0, launch_s=0, link_bw=16 / 0.001,
                                                     copy_latency_s=0))
    a, b = place(torch, np.ones(4, np.float32), 0), place(torch, np.ones(4, np.float32), 1)
    fixed_kernel(0.005)(a)
    fixed_kernel(0.009)(b)
    a.to("cuda:1", non_blocking=True)
    copy = [o for o in m.ops if o.name == "p2p"][0]
    assert copy.start_ns == pytest.approx(9e6) and copy.end_ns == pytest.approx(10e6)


def test_the_same_program_gives_the_same_times_and_records_every_run():
    def program():
        torch, m = simulate("torch", parallel=True)
        x = place(torch, np.ones((8, 8), np.float32))
        side = torch.cuda.Stream()
        for _ in range(5):
            y = fixed_kernel(0.003, 0.5)(x)
            with torch.cuda.stream(side):
                y.to("cpu", non_blocking=True)
        torch.cuda.synchronize()
        return m.clock.read(), m.ops, m.violations
    assert len({repr(program()) for _ in range(10)}) == 1


def test_the_clock_never_runs_backwards():
    # an answer holds the clock: moving it back would make its own work look shorter
    clock = VirtualClock()
    clock.advance(0.5)
    clock.advance_to(0)
    with pytest.raises(ValueError, match="only moves forward"):
        clock.advance(-0.25)
    assert clock() == 0.5
