"""Answers to assignment 4 (by solution cell id): other correct ones and typical mistakes."""

CORRECT = {
    # Count records before the run instead of reading the clock; sweep-line overlap.
    "record_count_and_sweep": {
        "record_trace": '''
def record_trace(device, clock, run):
    device.synchronize()
    before = len(device.records)
    run()
    device.synchronize()
    tl = Timeline("run")
    for r in device.records[before:]:
        tl.add(r.kind, r.start_ns / 1e9, r.end_ns / 1e9, r.kind, r.label)
    return tl
''',
        "chrome": '''
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
''',
    },
    # Timeline.from-style building plus Timeline.overlap for the Chrome trace.
    "timeline_for_both": {
        "record_trace": '''
def record_trace(device, clock, run):
    device.synchronize()
    since = clock() * 1e9
    run()
    device.synchronize()
    tl = Timeline("traced run")
    for kind in ("compute", "copy"):
        tl.add_records(kind, [r for r in device.records if r.start_ns >= since and r.kind == kind])
    return tl
''',
        "chrome": '''
def overlap_from_chrome_trace(trace, cat_a, cat_b):
    tl = Timeline("chrome")
    for e in trace["traceEvents"]:
        if e.get("ph") == "X" and e.get("cat") in (cat_a, cat_b):
            tl.add(e["cat"], e["ts"] * 1e-6, (e["ts"] + e["dur"]) * 1e-6)
    if cat_a not in tl.rows or cat_b not in tl.rows:
        return 0.0
    return tl.overlap(cat_a, cat_b)
''',
    },
}

WRONG = {
    "earlier_work_kept": ({"record_trace": '''
def record_trace(device, clock, run):
    run()
    device.synchronize()
    tl = Timeline("run")
    tl.add_records("compute", [r for r in device.records if r.kind == "compute"])
    tl.add_records("copy", [r for r in device.records if r.kind == "copy"])
    return tl
'''}, 2, None, "intervals per row"),
    "records_read_before_done": ({"record_trace": '''
def record_trace(device, clock, run):
    t0 = int(clock() * 1e9)
    run()
    recs = list(device.records)
    device.synchronize()
    tl = Timeline("run")
    tl.add_records("compute", [r for r in recs if r.kind == "compute" and r.start_ns >= t0])
    tl.add_records("copy", [r for r in recs if r.kind == "copy" and r.start_ns >= t0])
    return tl
'''}, 0, None, "synchronize before reading"),
    "one_row": ({"record_trace": '''
def record_trace(device, clock, run):
    device.synchronize()
    t0 = int(clock() * 1e9)
    run()
    device.synchronize()
    tl = Timeline("run")
    tl.add_records("device", [r for r in device.records if r.start_ns >= t0])
    return tl
'''}, 1, None, "rows of the timeline"),
    "no_merge_within_category": ({"chrome": '''
def overlap_from_chrome_trace(trace, cat_a, cat_b):
    ev = [e for e in trace["traceEvents"] if e.get("ph") == "X"]
    a = [(e["ts"], e["ts"] + e["dur"]) for e in ev if e["cat"] == cat_a]
    b = [(e["ts"], e["ts"] + e["dur"]) for e in ev if e["cat"] == cat_b]
    return sum(max(0, min(e1, e2) - max(s1, s2)) for s1, e1 in a for s2, e2 in b) * 1e-6
'''}, None, 3, "merge each category"),
    "microseconds_as_seconds": ({"chrome": '''
def overlap_from_chrome_trace(trace, cat_a, cat_b):
    tl = Timeline("chrome")
    for e in trace["traceEvents"]:
        if e.get("ph") == "X" and e.get("cat") in (cat_a, cat_b):
            tl.add(e["cat"], e["ts"], e["ts"] + e["dur"])
    return tl.overlap(cat_a, cat_b) if {cat_a, cat_b} <= set(tl.rows) else 0.0
'''}, None, 1, "microseconds"),
}
