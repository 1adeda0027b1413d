"""Answers to assignment 2 (by solution cell id): other correct ones and typical mistakes."""

CORRECT = {
    # Futures kept and waited for; streams chosen in blocks instead of round-robin.
    "blocks_of_streams": {
        "time_on_streams": '''
def time_on_streams(device, clock, op, x, n_ops, n_streams):
    device.submit(op, x).result()
    device.synchronize()
    start = clock()
    per = -(-n_ops // n_streams)
    futures = [device.submit(op, x, stream=i // per) for i in range(n_ops)]
    for f in futures:
        f.result()
    device.synchronize()
    return clock() - start
''',
        "stream_speedups": '''
def stream_speedups(device, clock, small_op, large_op, x, n_ops, n_streams):
    t = {(name, s): time_on_streams(device, clock, op, x, n_ops, s)
         for name, op in (("small", small_op), ("large", large_op)) for s in (1, n_streams)}
    return {name: t[name, 1] / t[name, n_streams] for name in ("small", "large")}
''',
    },
    # grader.lab.measure (warm-up, synchronize), median of repeats.
    "uses_measure": {
        "time_on_streams": '''
def time_on_streams(device, clock, op, x, n_ops, n_streams):
    from grader.lab import measure
    def launch():
        for i in range(n_ops):
            device.submit(op, x, stream=i % n_streams)
    return measure(launch, sync=device, warmup=1, repeats=3, clock=clock).median
''',
        "stream_speedups": '''
def stream_speedups(device, clock, small_op, large_op, x, n_ops, n_streams):
    out = {}
    for name, op in {"large": large_op, "small": small_op}.items():
        many = time_on_streams(device, clock, op, x, n_ops, n_streams)
        one = time_on_streams(device, clock, op, x, n_ops, 1)
        out[name] = float(one / many)
    return out
''',
    },
}

WRONG = {
    "one_stream_only": ({"time_on_streams": '''
def time_on_streams(device, clock, op, x, n_ops, n_streams):
    device.submit(op, x)
    device.synchronize()
    t0 = clock()
    for i in range(n_ops):
        device.submit(op, x)
    device.synchronize()
    return clock() - t0
'''}, 2, 2, "stream=i % n_streams"),
    "no_synchronize": ({"time_on_streams": '''
def time_on_streams(device, clock, op, x, n_ops, n_streams):
    device.submit(op, x)
    t0 = clock()
    for i in range(n_ops):
        device.submit(op, x, stream=i % n_streams)
    return clock() - t0
'''}, 0, None, "synchronize"),
    "no_warmup": ({"time_on_streams": '''
def time_on_streams(device, clock, op, x, n_ops, n_streams):
    device.synchronize()
    t0 = clock()
    for i in range(n_ops):
        device.submit(op, x, stream=i % n_streams)
    device.synchronize()
    return clock() - t0
'''}, 3, None, "cold device"),
    "speedup_inverted": ({"stream_speedups": '''
def stream_speedups(device, clock, small_op, large_op, x, n_ops, n_streams):
    return {name: time_on_streams(device, clock, op, x, n_ops, n_streams)
            / time_on_streams(device, clock, op, x, n_ops, 1)
            for name, op in (("small", small_op), ("large", large_op))}
'''}, 4, 2, "speedup = time on 1 stream"),
}
