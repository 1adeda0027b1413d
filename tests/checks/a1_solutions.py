"""Answers to assignment 1 (by solution cell id): other correct ones and typical mistakes."""

CORRECT = {
    # grader.lab.measure already warms up and synchronizes; it takes the clock to use.
    "uses_measure": {
        "time_work": '''
def time_work(device, clock, fn, *args, warmup=1, repeats=3):
    from grader.lab import measure
    stats = measure(lambda: device.submit(fn, *args), sync=device, warmup=warmup,
                    repeats=repeats, clock=clock)
    return stats.median
''',
        "experiment": '''
def independent_ops_experiment(device, clock, op, x, n=8):
    from grader.lab import measure
    one = time_work(device, clock, op, x, repeats=5)
    every = measure(lambda: [device.submit(op, x) for _ in range(n)], sync=device,
                    warmup=0, repeats=1, clock=clock).median
    return {"one": one, "all": every, "parallel": bool(every < n * one / 2)}
''',
    },
    # Minimum instead of median, futures waited for one by one, ratio-based verdict.
    "min_and_futures": {
        "time_work": '''
def time_work(device, clock, fn, *args, warmup=1, repeats=3):
    for _ in range(warmup):
        device.submit(fn, *args).result()
    best = float("inf")
    device.synchronize()
    for _ in range(repeats):
        start = clock()
        device.submit(fn, *args).result()
        device.synchronize()
        best = min(best, clock() - start)
    return best
''',
        "experiment": '''
def independent_ops_experiment(device, clock, op, x, n=8):
    one = time_work(device, clock, op, x, warmup=2, repeats=1)
    device.synchronize()
    start = clock()
    futures = [device.submit(op, x) for _ in range(n)]
    for f in futures:
        f.result()
    device.synchronize()
    total = clock() - start
    speedup = n * one / total
    return {"one": one, "all": total, "parallel": speedup > 1.5}
''',
    },
}

# name -> (answers, points of check_time_work, points of check_experiment, words the
# first failing message or hint must contain)
WRONG = {
    "no_synchronize": ({"time_work": '''
def time_work(device, clock, fn, *args, warmup=1, repeats=3):
    for _ in range(warmup):
        device.submit(fn, *args)
    samples = []
    for _ in range(repeats):
        t0 = clock()
        device.submit(fn, *args)
        samples.append(clock() - t0)
    return sorted(samples)[len(samples) // 2]
'''}, 0, None, "synchronize"),
    "no_warmup": ({"time_work": '''
def time_work(device, clock, fn, *args, warmup=1, repeats=3):
    samples = []
    for _ in range(repeats):
        device.synchronize()
        t0 = clock()
        device.submit(fn, *args)
        device.synchronize()
        samples.append(clock() - t0)
    return sorted(samples)[len(samples) // 2]
'''}, 3, None, "cold device"),
    "warmup_not_waited_for": ({"time_work": '''
def time_work(device, clock, fn, *args, warmup=1, repeats=3):
    for _ in range(warmup):
        device.submit(fn, *args)
    samples = []
    for _ in range(repeats):
        t0 = clock()
        device.submit(fn, *args)
        device.synchronize()
        samples.append(clock() - t0)
    return sorted(samples)[len(samples) // 2]
'''}, 2, None, "synchronize before you start timing"),
    "wall_clock_instead_of_given_clock": ({"time_work": '''
def time_work(device, clock, fn, *args, warmup=1, repeats=3):
    import time
    for _ in range(warmup):
        device.submit(fn, *args)
    device.synchronize()
    t0 = time.perf_counter()
    device.submit(fn, *args)
    device.synchronize()
    return time.perf_counter() - t0
'''}, 0, None, "clock"),
    "dependent_ops": ({"experiment": '''
def independent_ops_experiment(device, clock, op, x, n=8):
    one = time_work(device, clock, op, x)
    device.synchronize()
    t0 = clock()
    y = x
    for _ in range(n):
        y = device.submit(op, y)
    device.synchronize()
    every = clock() - t0
    return {"one": one, "all": every, "parallel": every < 0.75 * n * one}
'''}, 4, 2, "must not depend"),
    "verdict_always_true": ({"experiment": '''
def independent_ops_experiment(device, clock, op, x, n=8):
    one = time_work(device, clock, op, x)
    device.synchronize()
    t0 = clock()
    for _ in range(n):
        device.submit(op, x)
    device.synchronize()
    return {"one": one, "all": clock() - t0, "parallel": True}
'''}, 4, 3, "one by one"),
}
