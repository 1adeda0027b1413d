"""The simulated frameworks' API (grader.sim.torch_api, paddle_api): the names PyTorch and
Paddle give these things, an error naming anything that is not modeled, and nothing on the
objects an answer gets that tells how long anything takes."""
import numpy as np
import pytest

from grader.sim import Costs, fixed_kernel, place, simulate


def test_torch_tensors_live_where_they_were_put_and_numpy_needs_the_host():
    torch, m = simulate("torch")
    a = torch.from_numpy(np.arange(4, dtype=np.float32))
    g = a.to("cuda")
    assert (str(a.device), str(g.device), g.is_cuda, g.shape, str(g.dtype)) == \
        ("cpu", "cuda:0", True, (4,), "torch.float32")
    with pytest.raises(TypeError, match="Use Tensor.cpu"):
        g.numpy()
    assert (g * 2 + 1).cpu().numpy().tolist() == [1, 3, 5, 7]
    assert float((g @ g).item()) == 14.0 and g.device is torch.device("cuda:0")
    assert torch.tensor([[1.0, 2.0]], device="cuda:0").tolist() == [[1.0, 2.0]]
    assert torch.empty(2, 2, pin_memory=True).is_pinned()


def test_torch_streams_and_contexts_change_where_work_goes_and_come_back():
    torch, m = simulate("torch")
    main, s = torch.cuda.current_stream(), torch.cuda.Stream()
    with torch.cuda.stream(s):
        assert torch.cuda.current_stream() is s
        x = place(torch, np.ones(2, np.float32))
        x + 1
    assert torch.cuda.current_stream() is main and main == torch.cuda.default_stream()
    assert m.ops[-1].stream == 1


def test_what_is_not_modeled_says_so_and_names_it():
    torch, _ = simulate("torch")
    for get, name in ((lambda: torch.cuda.graphs, "torch.cuda.graphs"),
                      (lambda: torch.nn, "torch.nn"),
                      (lambda: torch.cuda.Event().ipc_handle, "torch.cuda.Event.ipc_handle"),
                      (lambda: torch.zeros(2).storage, "Tensor.storage")):
        with pytest.raises(AttributeError, match=f"does not model {name}"):
            get()
    paddle, _ = simulate("paddle")
    with pytest.raises(AttributeError, match="does not model paddle.device.graphs"):
        paddle.device.graphs


def test_paddle_creates_on_the_gpu_copies_with_numpy_and_pins_with_pin_memory():
    paddle, m = simulate("paddle")
    x = paddle.to_tensor(np.arange(4, dtype=np.float32))
    assert str(x.place) == "Place(gpu:0)" and x.shape == [4]
    assert x.numpy().tolist() == [0, 1, 2, 3]            # a GPU tensor's numpy copies it
    h = (x * 2).pin_memory(blocking=False)
    assert h.place.is_cuda_pinned_place() and np.isnan(h.numpy()).all()
    paddle.device.synchronize()
    assert h.numpy().tolist() == [0, 2, 4, 6]
    c = x.to("cpu", blocking=False)                      # pageable: the host waited anyway
    assert c.numpy().tolist() == [0, 1, 2, 3] and m.ops[-1].host_waited
    assert paddle.to_tensor([1.0], place=paddle.CUDAPinnedPlace()).place.is_cuda_pinned_place()


def test_paddle_streams_events_and_stream_guard():
    paddle, m = simulate("paddle", costs=Costs(warmup_s=0, launch_s=0))
    x = place(paddle, np.ones(4, np.float32))
    s = paddle.device.Stream()
    start, end = paddle.device.Event(enable_timing=True), paddle.device.Event(enable_timing=True)
    start.record()
    with paddle.device.stream_guard(s):
        s.wait_stream(paddle.device.current_stream())
        fixed_kernel(0.004)(x)
    end.record(s)
    end.synchronize()
    assert start.elapsed_time(end) == pytest.approx(4.0) and m.ops[-1].stream == s._s.number
    assert paddle.device.cuda.synchronize() is None


def test_nothing_an_answer_gets_reveals_durations_or_the_machine():
    torch, m = simulate("torch", costs=Costs(flops=123.0), parallel=True)
    x = place(torch, np.ones(2, np.float32))
    op = fixed_kernel(0.777, name="op")
    objects = [torch, torch.cuda, x, x.device, torch.cuda.Stream(), torch.cuda.Event(True),
               torch.cuda.stream(torch.cuda.Stream()), op]
    for obj in objects:
        public = [n for n in dir(obj) if not n.startswith("_")]
        for n in public:
            value = getattr(obj, n, None)
            assert not isinstance(value, type(m)) and value is not m.costs, (obj, n)
        assert "0.777" not in repr(obj) and "123" not in repr(obj) and "parallel" not in repr(obj)
    assert [n for n in dir(op) if not n.startswith("_")] == []


def test_sizes_the_grading_machine_cannot_compute_are_refused_before_anything_is_allocated():
    """The simulated frameworks compute every value on the grader's CPU: a tensor or an
    operation far beyond what an exercise needs raises, as an out-of-memory error would."""
    torch, _ = simulate("torch")
    with pytest.raises(RuntimeError, match="CUDA out of memory"):
        torch.empty(100_000, 100_000, device="cuda")
    paddle, _ = simulate("paddle")
    with pytest.raises(RuntimeError, match="CUDA out of memory"):
        paddle.zeros([1 << 16, 1 << 16])
    torch, _ = simulate("torch", costs=Costs(max_work=1e6))
    x = place(torch, np.ones((128, 128), np.float32))
    with pytest.raises(RuntimeError, match="use the sizes the task gives"):
        x @ x
