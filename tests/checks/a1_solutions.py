"""Answers to assignment 1 (by solution cell id): other correct ones, in PyTorch and in
Paddle, and typical mistakes. Each is framework code that also runs on a real GPU
(tests/checks/test_gpu_answers.py)."""

CORRECT = {
    # synchronize + the clock for time_work; events for the n products.
    "torch_clock_then_events": {
        "time_work": '''
FRAMEWORK = "torch"


def time_work(torch, clock, fn, *args, warmup=1, repeats=3):
    for _ in range(warmup):
        fn(*args)
    samples = []
    for _ in range(repeats):
        torch.cuda.synchronize()
        t0 = clock()
        fn(*args)
        torch.cuda.synchronize()
        samples.append(clock() - t0)
    return sorted(samples)[len(samples) // 2]
''',
        "experiment": '''
def independent_ops_experiment(torch, clock, x, n=8):
    one = time_work(torch, clock, lambda a: a @ a, x, warmup=2, repeats=5)
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    outs = [torch.matmul(x, x) for _ in range(n)]
    end.record()
    torch.cuda.synchronize()
    total = start.elapsed_time(end) / 1e3
    return {"one": one, "all": total, "parallel": bool(n * one / total > 1.5)}
''',
    },
    # Paddle, one pair of events per repeat, all read after one synchronize.
    "paddle_events": {
        "time_work": '''
FRAMEWORK = "paddle"


def time_work(paddle, clock, fn, *args, warmup=1, repeats=3):
    for _ in range(warmup):
        fn(*args)
    pairs = []
    for _ in range(repeats):
        s = paddle.device.Event(enable_timing=True)
        e = paddle.device.Event(enable_timing=True)
        s.record()
        fn(*args)
        e.record()
        pairs.append((s, e))
    paddle.device.synchronize()
    return float(np.median([s.elapsed_time(e) for s, e in pairs])) / 1000.0
''',
        "experiment": '''
def independent_ops_experiment(paddle, clock, x, n=8):
    one = time_work(paddle, clock, paddle.matmul, x, x)
    paddle.device.synchronize()
    t0 = clock()
    for _ in range(n):
        paddle.matmul(x, x)
    paddle.device.synchronize()
    total = clock() - t0
    return {"one": one, "all": total, "parallel": total < 0.75 * n * one}
''',
    },
    # Paddle with the clock, the minimum of the repeats' middle values.
    "paddle_clock": {
        "time_work": '''
FRAMEWORK = "paddle"


def time_work(paddle, clock, fn, *args, warmup=1, repeats=3):
    for _ in range(warmup):
        fn(*args)
    paddle.device.synchronize()
    times = []
    for _ in range(repeats):
        start = clock()
        fn(*args)
        paddle.device.synchronize()
        times.append(clock() - start)
        paddle.device.synchronize()
    return float(np.median(times))
''',
        "experiment": '''
def independent_ops_experiment(paddle, clock, x, n=8):
    one = time_work(paddle, clock, lambda a: paddle.matmul(a, a), x)
    begin = paddle.device.Event(enable_timing=True)
    finish = paddle.device.Event(enable_timing=True)
    begin.record()
    ys = [x @ x for _ in range(n)]
    finish.record()
    finish.synchronize()
    total = begin.elapsed_time(finish) / 1000
    return {"one": one, "all": total, "parallel": total < n * one / 2}
''',
    },
}

# name -> (answers, points of check_time_work, points of check_experiment, words the first
# failing check's message or first hint line must contain)
WRONG = {
    "no_synchronize": ({"time_work": '''
FRAMEWORK = "torch"


def time_work(torch, clock, fn, *args, warmup=1, repeats=3):
    for _ in range(warmup):
        fn(*args)
    samples = []
    for _ in range(repeats):
        t0 = clock()
        fn(*args)
        samples.append(clock() - t0)
    return sorted(samples)[len(samples) // 2]
'''}, 0, None, "read before the GPU had finished"),
    "no_warmup": ({"time_work": '''
FRAMEWORK = "torch"


def time_work(torch, clock, fn, *args, warmup=1, repeats=3):
    samples = []
    for _ in range(repeats):
        torch.cuda.synchronize()
        t0 = clock()
        fn(*args)
        torch.cuda.synchronize()
        samples.append(clock() - t0)
    return sorted(samples)[len(samples) // 2]
'''}, 3, None, "timed cold"),
    "warmup_not_waited_for": ({"time_work": '''
FRAMEWORK = "torch"


def time_work(torch, clock, fn, *args, warmup=1, repeats=3):
    for _ in range(warmup):
        fn(*args)
    samples = []
    for _ in range(repeats):
        t0 = clock()
        fn(*args)
        torch.cuda.synchronize()
        samples.append(clock() - t0)
    return sorted(samples)[len(samples) // 2]
'''}, 2, None, "still running when the clock started"),
    "wall_clock_instead_of_given_clock": ({"time_work": '''
FRAMEWORK = "torch"


def time_work(torch, clock, fn, *args, warmup=1, repeats=3):
    import time
    for _ in range(warmup):
        fn(*args)
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    fn(*args)
    torch.cuda.synchronize()
    return time.perf_counter() - t0
'''}, 0, None, "a clock of your own"),
    "elapsed_time_before_the_end_event_happened": ({"time_work": '''
FRAMEWORK = "torch"


def time_work(torch, clock, fn, *args, warmup=1, repeats=3):
    for _ in range(warmup):
        fn(*args)
    start = torch.cuda.Event(enable_timing=True)
    end = torch.cuda.Event(enable_timing=True)
    samples = []
    for _ in range(repeats):
        start.record()
        fn(*args)
        end.record()
        samples.append(start.elapsed_time(end) / 1000)
    return float(np.median(samples))
'''}, 0, None, "end.synchronize()"),
    "milliseconds_returned": ({"time_work": '''
FRAMEWORK = "paddle"


def time_work(paddle, clock, fn, *args, warmup=1, repeats=3):
    for _ in range(warmup):
        fn(*args)
    start = paddle.device.Event(enable_timing=True)
    end = paddle.device.Event(enable_timing=True)
    samples = []
    for _ in range(repeats):
        start.record()
        fn(*args)
        end.record()
        end.synchronize()
        samples.append(start.elapsed_time(end))
    return float(np.median(samples))
''', "experiment": '''
def independent_ops_experiment(paddle, clock, x, n=8):
    one = time_work(paddle, clock, paddle.matmul, x, x)
    paddle.device.synchronize()
    t0 = clock()
    for _ in range(n):
        paddle.matmul(x, x)
    paddle.device.synchronize()
    total = clock() - t0
    return {"one": one, "all": total, "parallel": total < 0.75 * n * one}
'''}, 0, None, "milliseconds"),
    "dependent_ops": ({"experiment": '''
def independent_ops_experiment(torch, clock, x, n=8):
    one = time_work(torch, clock, torch.matmul, x, x)
    torch.cuda.synchronize()
    t0 = clock()
    y = x
    for _ in range(n):
        y = y @ x
    torch.cuda.synchronize()
    every = clock() - t0
    return {"one": one, "all": every, "parallel": every < 0.75 * n * one}
'''}, 4, 2, "depend on each other"),
    # independent products, but the host waits for each before queuing the next: they ran
    # one by one for that reason, not because they depend on each other
    "synchronized_after_each_product": ({"experiment": '''
def independent_ops_experiment(torch, clock, x, n=8):
    one = time_work(torch, clock, torch.matmul, x, x)
    torch.cuda.synchronize()
    t0 = clock()
    for _ in range(n):
        x @ x
        torch.cuda.synchronize()
    every = clock() - t0
    return {"one": one, "all": every, "parallel": every < 0.75 * n * one}
'''}, 4, 2, "the host waited for each product before queuing the next"),
    "verdict_always_true": ({"experiment": '''
def independent_ops_experiment(torch, clock, x, n=8):
    one = time_work(torch, clock, torch.matmul, x, x)
    torch.cuda.synchronize()
    t0 = clock()
    for _ in range(n):
        x @ x
    torch.cuda.synchronize()
    return {"one": one, "all": clock() - t0, "parallel": True}
'''}, 4, 2, "contradicts your own times"),   # was 3: True is right on one framework by luck
}

# mistakes whose answers read a wall clock: only the first N checks' verdicts are fixed
READS_WALL_CLOCK = {"wall_clock_instead_of_given_clock": 1}
