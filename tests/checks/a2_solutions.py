"""Answers to assignment 2 (by solution cell id): other correct ones, in PyTorch and in
Paddle, and typical mistakes."""

CORRECT = {
    # Events on the current stream; the new streams wait for it and it waits for them:
    # no host synchronize at all.
    "torch_events_and_stream_waits": {
        "time_on_streams": '''
FRAMEWORK = "torch"


def time_on_streams(torch, clock, x, n_ops, n_streams):
    main = torch.cuda.current_stream()
    streams = [torch.cuda.Stream() for _ in range(n_streams)]
    torch.matmul(x, x)
    start = torch.cuda.Event(enable_timing=True)
    end = torch.cuda.Event(enable_timing=True)
    start.record()
    for s in streams:
        s.wait_stream(main)
    for i in range(n_ops):
        with torch.cuda.stream(streams[i % n_streams]):
            torch.matmul(x, x)
    for s in streams:
        main.wait_stream(s)
    end.record()
    end.synchronize()
    return start.elapsed_time(end) / 1000
''',
        "stream_speedups": '''
def stream_speedups(torch, clock, small, large, n_ops, n_streams):
    t = {(name, s): time_on_streams(torch, clock, x, n_ops, s)
         for name, x in (("small", small), ("large", large)) for s in (1, n_streams)}
    return {name: t[name, 1] / t[name, n_streams] for name in ("small", "large")}
''',
    },
    # Paddle, streams chosen in blocks rather than round-robin, each stream synchronized.
    "paddle_blocks": {
        "time_on_streams": '''
FRAMEWORK = "paddle"


def time_on_streams(paddle, clock, x, n_ops, n_streams):
    streams = [paddle.device.Stream() for _ in range(n_streams)]
    paddle.matmul(x, x)
    paddle.device.synchronize()
    start = clock()
    per = -(-n_ops // n_streams)
    for i in range(n_ops):
        with paddle.device.stream_guard(streams[i // per]):
            paddle.matmul(x, x)
    for s in streams:
        s.synchronize()
    return clock() - start
''',
        "stream_speedups": '''
def stream_speedups(paddle, clock, small, large, n_ops, n_streams):
    out = {}
    for name, x in {"large": large, "small": small}.items():
        many = time_on_streams(paddle, clock, x, n_ops, n_streams)
        one = time_on_streams(paddle, clock, x, n_ops, 1)
        out[name] = float(one / many)
    return out
''',
    },
    # Paddle with events recorded on each stream and waited for by the current one.
    "paddle_events_per_stream": {
        "time_on_streams": '''
FRAMEWORK = "paddle"


def time_on_streams(paddle, clock, x, n_ops, n_streams):
    here = paddle.device.current_stream()
    streams = [paddle.device.Stream() for _ in range(n_streams)]
    x @ x
    paddle.device.synchronize()
    t0 = clock()
    for i in range(n_ops):
        s = streams[i % n_streams]
        with paddle.device.stream_guard(s):
            x @ x
    for s in streams:
        done = paddle.device.Event()
        done.record(s)
        here.wait_event(done)
    paddle.device.synchronize()
    return clock() - t0
''',
        "stream_speedups": '''
def stream_speedups(paddle, clock, small, large, n_ops, n_streams):
    def speedup(x):
        return time_on_streams(paddle, clock, x, n_ops, 1) / time_on_streams(paddle, clock, x, n_ops, n_streams)
    return {"small": speedup(small), "large": speedup(large)}
''',
    },
}

WRONG = {
    # the speedups returned without running or timing anything: they had all 4 points
    "speedups_not_measured": ({"stream_speedups": '''
def stream_speedups(torch, clock, small, large, n_ops, n_streams):
    return {"small": 4.0, "large": 1.0}
'''}, 4, 0, "not measured"),
    # the streams are made, but the products never go to them (no `with`)
    "streams_never_used": ({"time_on_streams": '''
FRAMEWORK = "torch"


def time_on_streams(torch, clock, x, n_ops, n_streams):
    streams = [torch.cuda.Stream() for _ in range(n_streams)]
    x @ x
    torch.cuda.synchronize()
    t0 = clock()
    for i in range(n_ops):
        x @ x
    torch.cuda.synchronize()
    return clock() - t0
'''}, 2, 2, "ran on 1 stream(s), not 4"),
    # every product goes to the same stream (the index is wrong)
    "wrong_stream_index": ({"time_on_streams": '''
FRAMEWORK = "torch"


def time_on_streams(torch, clock, x, n_ops, n_streams):
    streams = [torch.cuda.Stream() for _ in range(n_streams)]
    x @ x
    torch.cuda.synchronize()
    t0 = clock()
    for i in range(n_ops):
        with torch.cuda.stream(streams[i % 1]):
            x @ x
    torch.cuda.synchronize()
    return clock() - t0
'''}, 2, 2, "ran on 1 stream(s), not 4"),
    # waits for the current stream only: the side streams are still running
    "waits_for_one_stream_only": ({"time_on_streams": '''
FRAMEWORK = "torch"


def time_on_streams(torch, clock, x, n_ops, n_streams):
    streams = [torch.cuda.Stream() for _ in range(n_streams)]
    x @ x
    torch.cuda.synchronize()
    t0 = clock()
    for i in range(n_ops):
        with torch.cuda.stream(streams[i % n_streams]):
            x @ x
    torch.cuda.current_stream().synchronize()
    return clock() - t0
'''}, 0, None, "clock stopped before every stream had finished"),
    # events, but the new streams never wait for x
    "streams_do_not_wait_for_x": ({"time_on_streams": '''
FRAMEWORK = "paddle"


def time_on_streams(paddle, clock, x, n_ops, n_streams):
    streams = [paddle.device.Stream() for _ in range(n_streams)]
    start = paddle.device.Event(enable_timing=True)
    end = paddle.device.Event(enable_timing=True)
    x @ x
    start.record()
    for i in range(n_ops):
        with paddle.device.stream_guard(streams[i % n_streams]):
            x @ x
    paddle.device.synchronize()
    end.record()
    end.synchronize()
    return start.elapsed_time(end) / 1000
'''}, 0, None, "started before x was ready"),
    "no_warmup": ({"time_on_streams": '''
FRAMEWORK = "torch"


def time_on_streams(torch, clock, x, n_ops, n_streams):
    streams = [torch.cuda.Stream() for _ in range(n_streams)]
    torch.cuda.synchronize()
    t0 = clock()
    for i in range(n_ops):
        with torch.cuda.stream(streams[i % n_streams]):
            x @ x
    torch.cuda.synchronize()
    return clock() - t0
'''}, 3, 4, "cold GPU"),
    "speedup_inverted": ({"stream_speedups": '''
def stream_speedups(torch, clock, small, large, n_ops, n_streams):
    return {name: time_on_streams(torch, clock, x, n_ops, n_streams)
            / time_on_streams(torch, clock, x, n_ops, 1)
            for name, x in (("small", small), ("large", large))}
'''}, 4, 2, "inverted"),
    # waits for the last stream only: with n_ops a multiple of the stream count every stream
    # ends together and the time looks right; with 7 products the last stream holds one
    # product fewer and ends first
    "waits_for_the_last_stream_only": ({"time_on_streams": '''
FRAMEWORK = "torch"


def time_on_streams(torch, clock, x, n_ops, n_streams):
    streams = [torch.cuda.Stream() for _ in range(n_streams)]
    x @ x
    torch.cuda.synchronize()
    t0 = clock()
    for i in range(n_ops):
        with torch.cuda.stream(streams[i % n_streams]):
            x @ x
    streams[-1].synchronize()
    return clock() - t0
'''}, 2, 4, "clock stopped before every stream had finished"),
}
