"""The judge <-> kernel channel (grader.grading.judge.channel) and the data-only wire format, in one
process: a socket pair, the "kernel" end served by a thread with its own namespace."""
from __future__ import annotations

import json
import os
import pickle
import socket
import struct
import threading
import time

import numpy as np
import pytest

from grader import wire as codec
from grader.grading.judge import channel
from grader.wire import Decoder, Encoder, ProtocolError
from grader.grading.judge.channel import Channel, ChannelClosed, KernelObject, RemoteTimeout

KERNEL_CODE = '''
import threading
import numpy as np

def add(a, b):
    return a + b

def not_done():
    raise NotImplementedError

def broken(x):
    return x[10]

def bump(a):
    a += 1

def twice(d):
    return [d, d]

def fresh(d):
    return {k: v.copy() for k, v in d.items()}

def uses(torch, clock, op, x):
    y = op(x)
    torch.cuda.synchronize()
    return clock(), x

def framework_code(torch, x):
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    with torch.cuda.stream(side):
        y = 2 * (x @ x) - x / 2 + 1
        z = -y
    torch.cuda.current_stream().wait_stream(side)
    end.record()
    end.synchronize()
    return start.elapsed_time(end), z.cpu().numpy(), float((x * x).sum()), x.device == torch.device("cuda:0")

def not_an_operand(fn):
    return fn + 1

def in_threads(fn, xs):
    out = [None] * len(xs)
    def run(i):
        out[i] = fn(xs[i])
    ts = [threading.Thread(target=run, args=(i,)) for i in range(len(xs))]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    return out

def reach(obj, name):
    return getattr(obj, name)

def call_it(fn, *args):
    return fn(*args)

def forever():
    import time
    while True:
        time.sleep(0.01)

def die():
    raise SystemExit(3)

class Liar(float):
    def __eq__(self, other):
        return True
    __le__ = __ge__ = __lt__ = __gt__ = __eq__

def lying_float():
    return Liar(1.0)

def gen(n):
    return (i * i for i in range(n))

def walk_judge(fn):
    import gc
    return fn.__globals__

def flood(fn, n):
    out = [None] * n
    def run(i):
        try:
            out[i] = fn(i)
        except Exception as e:
            out[i] = f"{type(e).__name__}: {e}"
    ts = [threading.Thread(target=run, args=(i,)) for i in range(n)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    return out
'''


@pytest.fixture
def pair():
    a, b = socket.socketpair()
    ns: dict = {}
    exec(KERNEL_CODE, ns)
    kernel = Channel(b, "k", namespace=ns)
    threading.Thread(target=kernel.serve_main, daemon=True).start()
    judge = Channel(a, "j", course_modules=(__name__,))   # this module's functions as a check's
    judge.deadline = time.monotonic() + 60
    yield judge, kernel
    judge.close()
    kernel.close()


def fn(judge, name):
    return judge.request("global", name=name)


def roundtrip(value):
    enc = Encoder("j", lambda o: ("j", 1, type(o).__name__, callable(o)))
    tree = json.loads(json.dumps(enc.encode(value)))
    return Decoder("k", enc.buffers, lambda *h: ("handle", h)).decode(tree)


def test_the_codec_keeps_plain_values_arrays_and_aliasing():
    shared = [1, 2]
    value = {"i": 2**70, "f": float("nan"), "c": 1 + 2j, "b": b"\x00\x01", "t": (1, "x"),
             "s": {1, 2}, "z": frozenset({3}), "a": np.arange(6, dtype=np.float32).reshape(2, 3),
             "g": np.float64(2.5), "bool": np.True_, "two": [shared, shared], None: None}
    got = roundtrip(value)
    assert got["i"] == 2**70 and np.isnan(got["f"]) and got["c"] == 1 + 2j and got["b"] == b"\x00\x01"
    assert got["t"] == (1, "x") and got["s"] == {1, 2} and got["z"] == frozenset({3})
    assert got["a"].dtype == np.float32 and np.array_equal(got["a"], value["a"])
    assert type(got["g"]) is np.float64 and got["bool"] is np.True_
    assert got["two"][0] is got["two"][1]          # one object sent twice stays one object
    cyclic: list = []
    cyclic.append(cyclic)
    back = roundtrip(cyclic)
    assert back[0] is back


def test_the_codec_sends_objects_it_does_not_know_as_handles_and_rebuilds_value_types():
    from grader.lab.core.timeline import Timeline

    tl = Timeline("t")
    tl.add("compute", 0.0, 1.0)
    got = roundtrip([tl, object(), np.zeros(2, dtype=object)])
    assert isinstance(got[0], Timeline) and got[0] == tl
    assert got[1][0] == "handle" and got[2][0] == "handle"   # object dtype is never data


def test_the_planners_strategy_travels_as_a_value_from_its_module_in_the_package():
    from grader.lab.planner import Strategy

    s = Strategy(2, 2, ("col", "row"))
    got = roundtrip([s])[0]
    assert got == s and isinstance(got.placements, tuple)


@pytest.mark.parametrize("tree, buffers", [
    ({"a": ["|O", [1], 0], "n": 0}, [b"\x00" * 8]),                 # object dtype
    ({"a": ["<f4", [4], 0], "n": 0}, [b"\x00" * 8]),                # size does not match
    ({"v": "os.system", "x": {}, "n": 0}, []),                      # not a value type
    ({"v": "grader.lab.planner.cost.Strategy", "x": {"dp": 1}, "n": 0}, []),  # missing fields
    ({"f": "__import__('os')"}, []),
    ({"T": ["torch", "__class__", False], "a": ["<f4", [1], 0], "n": 0}, [b"\x00" * 4]),
    ({"pickle": "gASVAAAAAA=="}, []),
    ({"V": [0, [4], [1], 0], "n": 0}, []),                          # a view outside a reply
])
def test_malformed_or_dangerous_values_are_refused(tree, buffers):
    with pytest.raises(ProtocolError):
        Decoder("j", buffers, lambda *h: None).decode(tree)


def test_safe_files_carry_data_and_never_unpickle(tmp_path):
    data = codec.dumps(["ok", {"got": np.ones(3, np.float32), "sent_to": [1, 2]}])
    status, value = codec.loads(data)
    assert status == "ok" and value["sent_to"] == [1, 2] and value["got"].dtype == np.float32
    with pytest.raises(TypeError):
        codec.dumps(object())

    class Boom:
        def __reduce__(self):
            return (os.system, ("touch " + str(tmp_path / "pwned"),))

    with pytest.raises(ProtocolError):
        codec.loads(pickle.dumps(Boom()))
    assert not (tmp_path / "pwned").exists()


def test_a_call_returns_data_and_raises_the_students_exception_class(pair):
    judge, _ = pair
    assert fn(judge, "add")(2, 3) == 5
    with pytest.raises(NotImplementedError):
        fn(judge, "not_done")()
    with pytest.raises(IndexError) as info:
        fn(judge, "broken")([1])
    assert info.value.where == ""    # exec'd code has no source lines; a kernel cell has
    with pytest.raises(NameError):
        fn(judge, "missing_name")


def test_the_check_sees_the_students_error_as_a_student_error(pair):
    from grader.checks.support import StudentError, call

    judge, _ = pair
    with pytest.raises(StudentError, match="not_done is not implemented yet"):
        call(fn(judge, "not_done"))
    with pytest.raises(StudentError, match="broken raised IndexError: list index out of range$"):
        call(fn(judge, "broken"), [1])


def test_arrays_changed_in_place_are_copied_back_and_returned_arguments_keep_identity(pair):
    judge, _ = pair
    a = np.zeros(3)
    fn(judge, "bump")(a)
    assert a.tolist() == [1, 1, 1]
    params = {"w": np.ones(2)}
    same = fn(judge, "twice")(params)
    assert same[0] is params and same[1] is params
    new = fn(judge, "fresh")(params)
    assert new is not params and new["w"] is not params["w"]


def test_the_kernel_calls_back_into_judge_objects_nested_and_from_threads(pair):
    from grader.sim import Costs, fixed_kernel, place, simulate

    judge, _ = pair
    torch, machine = simulate("torch", costs=Costs(warmup_s=0))
    x = place(torch, np.ones(2, np.float32))
    t, back = fn(judge, "uses")(torch, machine.clock.read, fixed_kernel(0.01), x)
    assert back is x and t == pytest.approx(machine.clock.read()) and t >= 0.01   # advanced
    lock, started, all_in = threading.Lock(), [0], threading.Event()

    def probe(v):        # runs in the judge; returns only when all 4 are in flight at once
        with lock:
            started[0] += 1
            if started[0] == 4:
                all_in.set()
        assert all_in.wait(10)
        return v * 2

    assert fn(judge, "in_threads")(probe, [1, 2, 3, 4]) == [2, 4, 6, 8]
    # a kernel function calling a judge function that calls a kernel function
    add = fn(judge, "add")
    assert fn(judge, "call_it")(lambda a: add(a, 1), 41) == 42


def test_a_thread_flood_from_the_kernel_gets_at_most_the_cap_of_threads_in_the_judge(pair):
    """300 kernel threads calling one judge function at once: at most MAX_CALL_THREADS run
    in the judge, each other call fails at once with a RuntimeError that says why."""
    judge, _ = pair
    lock, state = threading.Lock(), {"now": 0, "most": 0, "threads": 0}

    def slow(i):
        with lock:
            state["now"] += 1
            state["most"] = max(state["most"], state["now"])
            judge_threads = sum(t.name == "remote-j-call" for t in threading.enumerate())
            state["threads"] = max(state["threads"], judge_threads)
        time.sleep(0.3)
        with lock:
            state["now"] -= 1
        return i

    out = fn(judge, "flood")(slow, 300)
    refused = [o for o in out if isinstance(o, str)]
    assert 0 < state["most"] <= channel.MAX_CALL_THREADS
    assert state["threads"] <= channel.MAX_CALL_THREADS
    assert refused and all("too many calls at once" in o for o in refused)
    assert sorted(o for o in out if isinstance(o, int)) == [i for i, o in enumerate(out) if isinstance(o, int)]


def test_judge_objects_show_the_kernel_no_private_attribute_and_no_module(pair):
    judge, _ = pair
    reach = fn(judge, "reach")
    for name in ("__globals__", "__dict__", "__code__", "__closure__", "_exports"):
        with pytest.raises(AttributeError):
            reach(probe_target, name)
    # the class the kernel sees is its own proxy class, not the judge's function type
    assert isinstance(reach(probe_target, "__class__"), KernelObject)
    with pytest.raises(AttributeError):
        fn(judge, "walk_judge")(probe_target)
    # a module or a dangerous built-in handed over is an opaque token
    with pytest.raises(PermissionError):
        fn(judge, "call_it")(os.system, "true")
    with pytest.raises(PermissionError):
        fn(judge, "call_it")(eval, "1")
    with pytest.raises(PermissionError):
        fn(judge, "reach")(os, "system")


def probe_target():
    return 1


def test_operators_and_with_on_judge_objects_that_opt_in_and_only_those(pair):
    """A simulated framework's tensors take operators and its stream contexts take `with`
    from the kernel (both run in the judge); a plain judge object refuses them as a plain
    object would (TypeError)."""
    from grader.sim import place, simulate

    judge, _ = pair
    torch, machine = simulate("torch")
    x = place(torch, np.full((2, 2), 2.0, np.float32))
    ms, z, total, same = fn(judge, "framework_code")(torch, x)
    assert type(ms) is float and ms > 0 and total == 16.0 and same is True
    np.testing.assert_array_equal(z, -(2 * 8.0 - 1 + 1) * np.ones((2, 2)))
    assert not machine.violations and {o.stream for o in machine.ops if o.kind == "compute"} >= {1}
    with pytest.raises(TypeError, match="does not allow the operator 'add'"):
        fn(judge, "not_an_operand")(probe_target)


def test_kernel_objects_compare_by_identity_and_never_pretend_to_be_numbers(pair):
    judge, _ = pair
    liar = fn(judge, "lying_float")()      # a float subclass stays in the kernel
    assert isinstance(liar, KernelObject)
    assert liar != 1.0 and not (liar == 1.0) and repr(liar) == "<Liar object from the notebook>"
    with pytest.raises(TypeError):
        float(liar)
    with pytest.raises(TypeError):
        _ = liar <= 2.0
    assert list(fn(judge, "gen")(4)) == [0, 1, 4, 9]     # a generator is read as a list


def test_no_answer_before_the_deadline_raises_a_timeout_no_check_can_catch(pair):
    judge, _ = pair
    judge.deadline = time.monotonic() + 0.5
    with pytest.raises(RemoteTimeout):
        try:
            fn(judge, "forever")()
        except Exception:  # noqa: BLE001 - what a check does around student code
            pytest.fail("a timeout must not look like an ordinary exception")


def test_a_kernel_that_goes_away_raises_channel_closed(pair):
    judge, kernel = pair
    forever = fn(judge, "forever")
    threading.Timer(0.3, kernel.close).start()
    with pytest.raises(ChannelClosed):
        forever()


def test_a_garbage_message_closes_the_channel_without_running_anything(tmp_path):
    a, b = socket.socketpair()
    judge = Channel(a, "j")
    judge.deadline = time.monotonic() + 5
    head = json.dumps({"k": "rep", "to": "j1", "ok": True, "v": {"pickle": "x"}}).encode()
    b.sendall(struct.pack("!IQ", 0, len(head)) + head)     # a reply nobody waits for: dropped
    time.sleep(0.1)
    assert not judge.closed.is_set()
    b.sendall(struct.pack("!IQ", 0, 5) + b"{{{{{")
    time.sleep(0.2)
    assert judge.closed.is_set() and "JSONDecodeError" in judge.reason
    b.close()
    judge.close()


def test_serve_creates_the_socket_in_the_folder_and_the_judge_connects(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    ns = {"answer": 42}
    name = ".grading-test.sock"
    t = threading.Thread(target=channel.serve, args=(name,), daemon=True)
    import __main__
    monkeypatch.setattr(__main__, "answer", 42, raising=False)
    t.start()
    ch = channel.connect(str(tmp_path), name, time.monotonic() + 10)
    ch.deadline = time.monotonic() + 10
    assert ch.request("global", name="answer") == ns["answer"]
    assert not (tmp_path / name).exists()      # removed once the judge is connected
    ch.stop()
    t.join(5)
    assert not t.is_alive()


@pytest.mark.parametrize("framework", ["torch", pytest.param("paddle", marks=pytest.mark.slow)])
def test_tensors_cross_as_tensors_keep_identity_and_in_place_changes(framework):
    from grader.lab.core.backends import get_backend

    a, b = socket.socketpair()
    ns: dict = {}
    in_place = "t.mul_(2)" if framework == "torch" else "import paddle\n    paddle.assign(t * 2, output=t)"
    exec(f"def scale(t):\n    {in_place}\n\ndef pair(d):\n    return [d['w'], d['w'] * 1]\n"
         "def view(t):\n    return t.detach()[1:]\n", ns)
    kernel = Channel(b, "k", namespace=ns)
    threading.Thread(target=kernel.serve_main, daemon=True).start()
    judge = Channel(a, "j")
    judge.deadline = time.monotonic() + 60
    try:
        t = get_backend(framework).from_numpy(np.arange(3, dtype=np.float32), "cpu")
        fn(judge, "scale")(t)                    # changed in place in the kernel
        assert np.array_equal(np.asarray(t.numpy()), [0, 2, 4])
        same, other = fn(judge, "pair")({"w": t})
        assert same is t and type(other) is type(t) and other is not t
        if framework == "torch":   # a view of what the judge sent shares the judge's storage
            view = fn(judge, "view")(t)
            assert view is not t and view.untyped_storage().data_ptr() == t.untyped_storage().data_ptr()
            # a view beyond the judge's tensor (a tampered kernel) is refused
            bad = Decoder("j", [], lambda *h: None, echo=lambda i: t)
            with pytest.raises(ProtocolError, match="bad view"):
                bad.decode({"V": [0, [10**6], [1], 0], "n": 0})
        assert str(other.dtype).endswith("float32")
    finally:
        judge.close()
        kernel.close()
