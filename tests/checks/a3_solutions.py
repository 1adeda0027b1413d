"""Answers to assignment 3 (by solution cell id): other correct ones, in PyTorch and in
Paddle, and typical mistakes."""

CORRECT = {
    # Each result copied as soon as it is computed (blocking) in the sequential version;
    # pinned buffers made first and filled with copy_ in the overlapped one.
    "torch_pinned_buffers": {
        "sequential": '''
FRAMEWORK = "torch"


def sequential(torch, clock, op, xs):
    torch.cuda.synchronize()
    t0 = clock()
    ys = [op(x) for x in xs]
    torch.cuda.synchronize()
    out = [y.to("cpu").numpy() for y in ys]
    return out, clock() - t0
''',
        "overlapped": '''
def overlapped(torch, clock, op, xs):
    side = torch.cuda.Stream()
    main = torch.cuda.current_stream()
    bufs = [torch.empty(x.shape, dtype=x.dtype, pin_memory=True) for x in xs]
    torch.cuda.synchronize()
    start = clock()
    keep = []
    for x, buf in zip(xs, bufs):
        y = op(x)
        keep.append(y)
        side.wait_stream(main)
        with torch.cuda.stream(side):
            buf.copy_(y, non_blocking=True)
    side.synchronize()
    torch.cuda.synchronize()
    return [b.numpy() for b in bufs], clock() - start
''',
    },
    # Paddle: pin_memory(blocking=False) on a copy stream, events per product.
    "paddle_pin_memory": {
        "sequential": '''
FRAMEWORK = "paddle"


def sequential(paddle, clock, op, xs):
    paddle.device.synchronize()
    t0 = clock()
    ys = [op(x) for x in xs]
    res = [y.numpy() for y in ys]
    paddle.device.synchronize()
    return res, clock() - t0
''',
        "overlapped": '''
def overlapped(paddle, clock, op, xs):
    copier = paddle.device.Stream()
    paddle.device.synchronize()
    t0 = clock()
    host, ys = [], []
    for x in xs:
        y = op(x)
        ys.append(y)
        ev = paddle.device.Event()
        ev.record()
        with paddle.device.stream_guard(copier):
            copier.wait_event(ev)
            host.append(y.pin_memory(blocking=False))
    paddle.device.synchronize()
    t1 = clock()
    return [h.numpy() for h in host], t1 - t0
''',
    },
    # Paddle: a copy to the pinned place with blocking=False, the copy stream's own event
    # waited for at the end.
    "paddle_pinned_place": {
        "sequential": '''
FRAMEWORK = "paddle"


def sequential(paddle, clock, op, xs):
    paddle.device.synchronize()
    t0 = clock()
    out = []
    for y in [op(x) for x in xs]:
        out.append(y.cpu())
    paddle.device.synchronize()
    return out, clock() - t0
''',
        "overlapped": '''
def overlapped(paddle, clock, op, xs):
    stream = paddle.device.Stream()
    paddle.device.synchronize()
    t0 = clock()
    results, alive = [], []
    for x in xs:
        y = op(x)
        alive.append(y)
        ready = paddle.device.Event()
        ready.record(paddle.device.current_stream())
        stream.wait_event(ready)
        with paddle.device.stream_guard(stream):
            results.append(y.to(paddle.CUDAPinnedPlace(), blocking=False))
    last = paddle.device.Event()
    last.record(stream)
    last.synchronize()
    return results, clock() - t0
''',
    },
}

WRONG = {
    # the host tensors are read before the copies have landed
    "read_before_copies_landed": ({"overlapped": '''
def overlapped(torch, clock, op, xs):
    copy_stream = torch.cuda.Stream()
    torch.cuda.synchronize()
    t0 = clock()
    host = []
    for x in xs:
        y = op(x)
        done = torch.cuda.Event()
        done.record()
        with torch.cuda.stream(copy_stream):
            copy_stream.wait_event(done)
            host.append(y.to("cpu", non_blocking=True))
    results = [h.numpy() for h in host]
    torch.cuda.synchronize()
    return results, clock() - t0
'''}, 3, 4, "read before their copies landed"),
    # the copy stream never waits for the product it copies: its copies overlap computation
    # only because they copy garbage, so the overlap's 3 points are lost with the results'
    "copy_stream_does_not_wait": ({"overlapped": '''
def overlapped(torch, clock, op, xs):
    copy_stream = torch.cuda.Stream()
    torch.cuda.synchronize()
    t0 = clock()
    results = []
    for x in xs:
        y = op(x)
        with torch.cuda.stream(copy_stream):
            results.append(y.to("cpu", non_blocking=True))
    torch.cuda.synchronize()
    return results, clock() - t0
'''}, 3, 1, "before the product was computed"),   # its overlap is of garbage: not paid
    # non-blocking copies into pinned memory, but on the products' stream
    "copies_on_the_products_stream": ({"overlapped": '''
def overlapped(torch, clock, op, xs):
    torch.cuda.synchronize()
    t0 = clock()
    results = [op(x).to("cpu", non_blocking=True) for x in xs]
    torch.cuda.synchronize()
    return results, clock() - t0
'''}, 3, 2, "queued on the products' stream"),
    # a copy stream, but into pageable memory: the host waits for every copy
    "pageable_memory": ({"overlapped": '''
def overlapped(torch, clock, op, xs):
    copy_stream = torch.cuda.Stream()
    torch.cuda.synchronize()
    t0 = clock()
    results = []
    for x in xs:
        y = op(x)
        done = torch.cuda.Event()
        done.record()
        with torch.cuda.stream(copy_stream):
            copy_stream.wait_event(done)
            h = torch.empty(y.shape, dtype=y.dtype)
            h.copy_(y, non_blocking=True)
            results.append(h)
    torch.cuda.synchronize()
    return results, clock() - t0
'''}, 3, 2, "pageable host memory"),
    # Paddle: to("cpu", blocking=False) goes to pageable memory
    "paddle_to_cpu_is_pageable": ({"sequential": '''
FRAMEWORK = "paddle"


def sequential(paddle, clock, op, xs):
    paddle.device.synchronize()
    t0 = clock()
    ys = [op(x) for x in xs]
    res = [y.cpu() for y in ys]
    paddle.device.synchronize()
    return res, clock() - t0
''', "overlapped": '''
def overlapped(paddle, clock, op, xs):
    s = paddle.device.Stream()
    paddle.device.synchronize()
    t0 = clock()
    out = []
    for x in xs:
        y = op(x)
        e = paddle.device.Event()
        e.record()
        with paddle.device.stream_guard(s):
            s.wait_event(e)
            out.append(y.to("cpu", blocking=False))
    paddle.device.synchronize()
    return out, clock() - t0
'''}, 3, 2, "pageable host memory"),
    "clock_read_before_done": ({"sequential": '''
FRAMEWORK = "torch"


def sequential(torch, clock, op, xs):
    t0 = clock()
    ys = [op(x) for x in xs]
    elapsed = clock() - t0
    return [y.cpu() for y in ys], elapsed
''', "overlapped": '''
def overlapped(torch, clock, op, xs):
    copy_stream = torch.cuda.Stream()
    t0 = clock()
    results = []
    for x in xs:
        y = op(x)
        done = torch.cuda.Event()
        done.record()
        with torch.cuda.stream(copy_stream):
            copy_stream.wait_event(done)
            results.append(y.to("cpu", non_blocking=True))
    elapsed = clock() - t0
    torch.cuda.synchronize()
    return results, elapsed
'''}, 2, 4.5, "clock was read before the copies had landed"),
    "copied_twice": ({"overlapped": '''
def overlapped(torch, clock, op, xs):
    copy_stream = torch.cuda.Stream()
    torch.cuda.synchronize()
    t0 = clock()
    ys, results = [], []
    for x in xs:
        y = op(x)
        ys.append(y)
        done = torch.cuda.Event()
        done.record()
        with torch.cuda.stream(copy_stream):
            copy_stream.wait_event(done)
            y.to("cpu", non_blocking=True)
    torch.cuda.synchronize()
    results = [y.cpu() for y in ys]
    return results, clock() - t0
'''}, 3, 4.5, "number of copies"),
    # the sequential function handed in as the overlapped one: right results and times, no
    # overlap, so most of the task's points are lost
    "overlaps_nothing": ({"overlapped": '''
def overlapped(torch, clock, op, xs):
    return sequential(torch, clock, op, xs)
'''}, 3, 2, "copies overlapping computation"),
}
