"""Answers to assignment 4 (by solution cell id): other correct ones, in PyTorch and in
Paddle, and typical mistakes."""

_SWEEP = '''
def overlap_from_chrome_trace(trace, cat_a, cat_b):
    points = []
    for e in trace["traceEvents"]:
        if e.get("ph") != "X" or e.get("cat") not in (cat_a, cat_b):
            continue
        points.append((e["ts"], 1, e["cat"]))
        points.append((e["ts"] + e["dur"], -1, e["cat"]))
    points.sort(key=lambda p: (p[0], p[1]))
    depth = {cat_a: 0, cat_b: 0}
    total, last = 0.0, None
    for t, step, cat in points:
        if last is not None and depth[cat_a] > 0 and depth[cat_b] > 0:
            total += t - last
        depth[cat] += step
        last = t
    return total / 1e6
'''

CORRECT = {
    # events recorded on streams named explicitly; a sweep line over the Chrome trace
    "torch_explicit_streams_and_sweep": {
        "trace_with_events": '''
FRAMEWORK = "torch"


def trace_with_events(torch, op, xs):
    main, side = torch.cuda.current_stream(), torch.cuda.Stream()
    new = lambda: torch.cuda.Event(enable_timing=True)
    origin = new()
    origin.record(main)
    compute, copy, ys = [], [], []
    for x in xs:
        s, e = new(), new()
        s.record(main)
        y = op(x)
        ys.append(y)
        e.record(main)
        side.wait_event(e)
        c0, c1 = new(), new()
        c0.record(side)
        with torch.cuda.stream(side):
            h = torch.empty(y.shape, dtype=y.dtype, pin_memory=True)
            h.copy_(y, non_blocking=True)
        c1.record(side)
        compute.append((s, e))
        copy.append((c0, c1))
    side.synchronize()
    main.synchronize()
    ms = lambda a: origin.elapsed_time(a) * 1e-3
    return {"compute": [(ms(a), ms(b)) for a, b in compute],
            "copy": [(ms(a), ms(b)) for a, b in copy]}
''',
        "chrome": _SWEEP,
    },
    # Paddle; the Chrome trace through grader.lab.Timeline
    "paddle_events_and_timeline": {
        "trace_with_events": '''
FRAMEWORK = "paddle"


def trace_with_events(paddle, op, xs):
    ev = lambda: paddle.device.Event(enable_timing=True)
    copier = paddle.device.Stream()
    t0 = ev()
    t0.record()
    pairs, keep = {"compute": [], "copy": []}, []
    for x in xs:
        a = ev()
        a.record()
        y = op(x)
        keep.append(y)
        b = ev()
        b.record()
        pairs["compute"].append((a, b))
        with paddle.device.stream_guard(copier):
            copier.wait_event(b)
            c = ev()
            c.record()
            y.pin_memory(blocking=False)
            d = ev()
            d.record()
        pairs["copy"].append((c, d))
    paddle.device.synchronize()
    return {k: [(t0.elapsed_time(a) / 1000.0, t0.elapsed_time(b) / 1000.0) for a, b in v]
            for k, v in pairs.items()}
''',
        "chrome": '''
def overlap_from_chrome_trace(trace, cat_a, cat_b):
    from grader.lab import Timeline
    tl = Timeline("chrome")
    for e in trace["traceEvents"]:
        if e.get("ph") == "X" and e.get("cat") in (cat_a, cat_b):
            tl.add(e["cat"], e["ts"] * 1e-6, (e["ts"] + e["dur"]) * 1e-6)
    if cat_a not in tl.rows or cat_b not in tl.rows:
        return 0.0
    return tl.overlap(cat_a, cat_b)
''',
    },
    # Paddle with events recorded on named streams and a copy to the pinned place
    "paddle_named_streams": {
        "trace_with_events": '''
FRAMEWORK = "paddle"


def trace_with_events(paddle, op, xs):
    here = paddle.device.current_stream()
    there = paddle.device.Stream()
    def mark(stream):
        e = paddle.device.Event(enable_timing=True)
        e.record(stream)
        return e
    origin = mark(here)
    compute, copy, products = [], [], []
    for x in xs:
        a = mark(here)
        y = op(x)
        products.append(y)
        b = mark(here)
        there.wait_event(b)
        c = mark(there)
        with paddle.device.stream_guard(there):
            y.to(paddle.CUDAPinnedPlace(), blocking=False)
        d = mark(there)
        compute.append((a, b))
        copy.append((c, d))
    d.synchronize()
    here.synchronize()
    sec = lambda e: origin.elapsed_time(e) / 1e3
    return {"compute": [(sec(a), sec(b)) for a, b in compute],
            "copy": [(sec(c), sec(d)) for c, d in copy]}
''',
        "chrome": _SWEEP,
    },
}

_REFERENCE_TRACE = '''
FRAMEWORK = "torch"


def trace_with_events(torch, op, xs):
    def event():
        return torch.cuda.Event(enable_timing=True)

    copy_stream = torch.cuda.Stream()
    origin = event()
    origin.record()
    marks = {"compute": [], "copy": []}
    for x in xs:
        a, b = event(), event()
        a.record()
        y = op(x)
        b.record()
        marks["compute"].append((a, b))
        with torch.cuda.stream(copy_stream):
            copy_stream.wait_event(b)
            c, d = event(), event()
            %(copy_events)s
        marks["copy"].append((c, d))
    torch.cuda.synchronize()
    return {row: [(origin.elapsed_time(s) %(unit)s, origin.elapsed_time(e) %(unit)s)
                  for s, e in pairs] for row, pairs in marks.items()}
'''

WRONG = {
    # the copy's events recorded on the products' stream
    "copy_events_on_the_products_stream": ({"trace_with_events": _REFERENCE_TRACE % {
        "copy_events": "c.record(torch.cuda.default_stream())\n            "
                       "y.to('cpu', non_blocking=True)\n            "
                       "d.record(torch.cuda.default_stream())",
        "unit": "/ 1000"}}, 3, None, "recorded on the products' stream"),
    # elapsed_time's milliseconds returned as they are
    "milliseconds": ({"trace_with_events": _REFERENCE_TRACE % {
        "copy_events": "c.record()\n            y.to('cpu', non_blocking=True)\n            "
                       "d.record()",
        "unit": ""}}, 3, None, "milliseconds"),
    # the traced program copies on the products' stream: the trace shows it
    "traced_program_does_not_overlap": ({"trace_with_events": '''
FRAMEWORK = "torch"


def trace_with_events(torch, op, xs):
    new = lambda: torch.cuda.Event(enable_timing=True)
    origin = new()
    origin.record()
    compute, copy = [], []
    for x in xs:
        a, b, c, d = new(), new(), new(), new()
        a.record()
        y = op(x)
        b.record()
        c.record()
        y.to("cpu", non_blocking=True)
        d.record()
        compute.append((a, b))
        copy.append((c, d))
    torch.cuda.synchronize()
    sec = lambda e: origin.elapsed_time(e) / 1000
    return {"compute": [(sec(a), sec(b)) for a, b in compute],
            "copy": [(sec(c), sec(d)) for c, d in copy]}
'''}, 3, None, "copies overlapping computation"),
    # the copy stream never waits for the product it copies: its copies overlap computation
    # because they copy garbage, and that overlap earned the point (assignment 3's mistake)
    "copy_does_not_wait_for_its_product": ({"trace_with_events": _REFERENCE_TRACE.replace(
        "            copy_stream.wait_event(b)\n", "") % {
        "copy_events": "c.record()\n            y.to('cpu', non_blocking=True)\n            "
                       "d.record()",
        "unit": "/ 1000"}}, 3, None, "did not wait for their product"),
    # elapsed_time before the events have happened
    "no_synchronize": ({"trace_with_events": _REFERENCE_TRACE.replace(
        "    torch.cuda.synchronize()\n", "") % {
        "copy_events": "c.record()\n            y.to('cpu', non_blocking=True)\n            "
                       "d.record()",
        "unit": "/ 1000"}}, 0, None, "end.synchronize()"),
    "no_merge_within_category": ({"chrome": '''
def overlap_from_chrome_trace(trace, cat_a, cat_b):
    ev = [e for e in trace["traceEvents"] if e.get("ph") == "X"]
    a = [(e["ts"], e["ts"] + e["dur"]) for e in ev if e["cat"] == cat_a]
    b = [(e["ts"], e["ts"] + e["dur"]) for e in ev if e["cat"] == cat_b]
    return sum(max(0, min(e1, e2) - max(s1, s2)) for s1, e1 in a for s2, e2 in b) * 1e-6
'''}, None, 3, "merge each category"),
    "microseconds_as_seconds": ({"chrome": '''
def overlap_from_chrome_trace(trace, cat_a, cat_b):
    from grader.lab import Timeline
    tl = Timeline("chrome")
    for e in trace["traceEvents"]:
        if e.get("ph") == "X" and e.get("cat") in (cat_a, cat_b):
            tl.add(e["cat"], e["ts"], e["ts"] + e["dur"])
    return tl.overlap(cat_a, cat_b) if {cat_a, cat_b} <= set(tl.rows) else 0.0
'''}, None, 1, "microseconds"),
}
