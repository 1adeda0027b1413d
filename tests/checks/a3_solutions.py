"""Answers to assignment 3 (by solution cell id): other correct ones and typical mistakes."""

CORRECT = {
    # Each result copied as soon as it is computed (blocking), then overlapped with
    # buffers waited for one by one.
    "wait_per_buffer": {
        "sequential": '''
def sequential(device, clock, op, xs):
    device.synchronize()
    t0 = clock()
    out = []
    for x in xs:
        y = device.submit(op, x)
        out.append(device.get(y))
    device.synchronize()
    return out, clock() - t0
''',
        "overlapped": '''
def overlapped(device, clock, op, xs):
    device.synchronize()
    t0 = clock()
    ys = [device.submit(op, x) for x in xs]
    bufs = [device.copy_to_host(y, non_blocking=True) for y in ys]
    results = [b.wait().numpy() for b in bufs]
    device.synchronize()
    return results, clock() - t0
''',
    },
    # copy_to_host blocking in the sequential version; overlapped interleaved per input.
    "interleaved": {
        "sequential": '''
def sequential(device, clock, op, xs):
    device.synchronize()
    start = clock()
    ys = [device.submit(op, x) for x in xs]
    res = [device.copy_to_host(y, non_blocking=False).numpy() for y in ys]
    device.synchronize()
    return res, clock() - start
''',
        "overlapped": '''
def overlapped(device, clock, op, xs):
    import numpy as np
    device.synchronize()
    start = clock()
    bufs = []
    for x in xs:
        y = device.submit(op, x)
        bufs.append(device.copy_to_host(y, non_blocking=True))
    device.synchronize()
    end = clock()
    return [np.asarray(b) for b in bufs], end - start
''',
    },
}

WRONG = {
    "read_before_copy_landed": ({"overlapped": '''
def overlapped(device, clock, op, xs):
    device.synchronize()
    t0 = clock()
    bufs = [device.copy_to_host(device.submit(op, x), non_blocking=True) for x in xs]
    results = [b.numpy() for b in bufs]
    device.synchronize()
    return results, clock() - t0
'''}, 3, 3, "NaN"),
    "blocking_copies_no_overlap": ({"overlapped": '''
def overlapped(device, clock, op, xs):
    device.synchronize()
    t0 = clock()
    out = [device.get(device.submit(op, x)) for x in xs]
    device.synchronize()
    return out, clock() - t0
'''}, 3, 4, "copies overlapping"),
    "clock_read_before_done": ({"sequential": '''
def sequential(device, clock, op, xs):
    t0 = clock()
    ys = [device.submit(op, x) for x in xs]
    elapsed = clock() - t0
    return [device.get(y) for y in ys], elapsed
''', "overlapped": '''
def overlapped(device, clock, op, xs):
    t0 = clock()
    bufs = [device.copy_to_host(device.submit(op, x), non_blocking=True) for x in xs]
    elapsed = clock() - t0
    device.synchronize()
    return [b.numpy() for b in bufs], elapsed
'''}, 2, 4, "synchronize before reading the clock"),
    "copied_twice": ({"overlapped": '''
def overlapped(device, clock, op, xs):
    device.synchronize()
    t0 = clock()
    ys = [device.submit(op, x) for x in xs]
    bufs = [device.copy_to_host(y, non_blocking=True) for y in ys]
    device.synchronize()
    results = [device.get(y) for y in ys]
    return results, clock() - t0
'''}, 3, 4, "number of copies"),
}
