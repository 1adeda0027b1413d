"""Answers to assignment 5 (by solution cell id): other correct ones, in PyTorch and in
Paddle, and typical mistakes. Each ``run_dag(torch, inputs, devices)`` is framework code that
also runs on a real GPU (or on the CPU with devices ("cpu", "cpu"))."""

CORRECT = {
    # Z on device 1 (U crosses instead); the sum finished on device 1, read with .numpy()
    "torch_z_on_device_1": {"run_dag": '''
FRAMEWORK = "torch"


def run_dag(torch, inputs, devices):
    d0, d1 = devices
    A0, B0, C0 = (torch.tensor(inputs[k], device=d0) for k in "ABC")
    A1, C1, D1 = (torch.tensor(inputs[k], device=d1) for k in "ACD")
    U = torch.matmul(A0, B0)
    V = torch.matmul(C1, D1)
    U1 = U.to(d1, non_blocking=True)     # before X: the copy comes after device 0's queue
    X = torch.matmul(U, C0)
    Y = torch.matmul(V, A1)
    Z = torch.matmul(U1, V)
    total = Y + Z + X.to(d1, non_blocking=True)
    return total.cpu().numpy()
'''},
    # Paddle: a task table and a tiny scheduler, the products split 3 / 2 the other way
    "paddle_task_table": {"run_dag": '''
FRAMEWORK = "paddle"


def run_dag(paddle, inputs, devices):
    plan = [("U", 0, ("A", "B")), ("V", 1, ("C", "D")),
            ("Y", 1, ("V", "A")), ("X", 0, ("U", "C")), ("Z", 1, ("U", "V"))]
    where = {}
    for i, dev in enumerate(devices):
        for k in "ABCD":
            where[k, i] = paddle.to_tensor(inputs[k], place=dev)
    for name, i, (a, b) in plan:
        for op in (a, b):
            if (op, i) not in where:               # made on the other device: copy it over
                where[op, i] = where[op, 1 - i].to(devices[i], blocking=False)
        where[name, i] = paddle.matmul(where[a, i], where[b, i])
    yz = where["Y", 1] + where["Z", 1]
    return where["X", 0].numpy() + yz.numpy()
'''},
    # Paddle with .cuda(i) and a copy made with to() on the other place
    "paddle_cuda_ids": {"run_dag": '''
FRAMEWORK = "paddle"


def run_dag(paddle, inputs, devices):
    first, second = devices
    ids = [int(d.split(":")[1]) for d in devices]
    host = {k: paddle.to_tensor(v, place="cpu") for k, v in inputs.items()}
    A0, B0, C0 = (host[k].cuda(ids[0]) for k in "ABC")
    A1, C1, D1 = (host[k].cuda(ids[1]) for k in "ACD")
    U = A0 @ B0
    V = C1 @ D1
    V_here = V.to(first, blocking=False)
    X = U @ C0
    Y = V @ A1
    Z = U @ V_here
    Y_here = Y.to(first, blocking=False)
    return (X + Y_here + Z).cpu().numpy()
'''},
}

WRONG = {
    # correct, but everything on the first device
    "one_device": ({"run_dag": '''
FRAMEWORK = "torch"


def run_dag(torch, inputs, devices):
    d = devices[0]
    A, B, C, D = (torch.from_numpy(inputs[k]).to(d) for k in "ABCD")
    U, V = A @ B, C @ D
    X, Y, Z = U @ C, V @ A, U @ V
    return (X + Y + Z).cpu().numpy()
'''}, 3, 1, 2, 0, "all products ran on one device"),
    # V lives on device 1 and is used on device 0 without a copy (raises on a GPU): it loses
    # that part's points and the makespan's, whose time the skipped copy saved (5/10)
    "no_copy": ({"run_dag": '''
FRAMEWORK = "torch"


def run_dag(torch, inputs, devices):
    d0, d1 = devices
    A0, B0, C0 = (torch.from_numpy(inputs[k]).to(d0) for k in "ABC")
    A1, C1, D1 = (torch.from_numpy(inputs[k]).to(d1) for k in "ACD")
    U, V = A0 @ B0, C1 @ D1
    X, Y = U @ C0, V @ A1
    Z = U @ V
    return X.cpu().numpy() + Y.cpu().numpy() + Z.cpu().numpy()
'''}, 3, 2, 0, 0, "used a tensor of the other device"),
    # right placement, but the host waits for each product before queuing the next, and
    # copies each input just before it is needed: the devices take turns
    "waits_after_each": ({"run_dag": '''
FRAMEWORK = "torch"


def run_dag(torch, inputs, devices):
    d0, d1 = devices
    t = lambda k, d: torch.from_numpy(inputs[k]).to(d)
    U = (t("A", d0) @ t("B", d0)).cpu()
    V = (t("C", d1) @ t("D", d1)).cpu()
    X = (U.to(d0) @ t("C", d0)).cpu()
    Y = (V.to(d1) @ t("A", d1)).cpu()
    Z = (U.to(d0) @ V.to(d0)).cpu()
    return (X + Y + Z).numpy()
'''}, 3, 2, 2, 0, "the host waited"),
    # Z = V @ U instead of U @ V (products do not commute)
    "swapped_product": ({"run_dag": '''
FRAMEWORK = "paddle"


def run_dag(paddle, inputs, devices):
    d0, d1 = devices
    A0, B0, C0 = (paddle.to_tensor(inputs[k], place=d0) for k in "ABC")
    A1, C1, D1 = (paddle.to_tensor(inputs[k], place=d1) for k in "ACD")
    U, V = paddle.matmul(A0, B0), paddle.matmul(C1, D1)
    X, Y = paddle.matmul(U, C0), paddle.matmul(V, A1)
    Z = paddle.matmul(V.to(d0, blocking=False), U)
    return (X + Z + Y.to(d0, blocking=False)).numpy()
'''}, 0, 2, 2, 0, "do not commute"),
    # NumPy on the host: right answer, the devices idle
    "host_products": ({"run_dag": '''
FRAMEWORK = "torch"


def run_dag(torch, inputs, devices):
    A, B, C, D = (inputs[k] for k in "ABCD")
    U, V = A @ B, C @ D
    return U @ C + V @ A + U @ V
'''}, 3, 0, 2, 0, "not every product ran on a device"),
    # the result's copy to the host is started but never waited for
    "result_read_before_it_landed": ({"run_dag": '''
FRAMEWORK = "torch"


def run_dag(torch, inputs, devices):
    d0, d1 = devices
    A0, B0, C0 = (torch.from_numpy(inputs[k]).to(d0) for k in "ABC")
    A1, C1, D1 = (torch.from_numpy(inputs[k]).to(d1) for k in "ACD")
    U, V = A0 @ B0, C1 @ D1
    V0 = V.to(d0, non_blocking=True)
    X, Y, Z = U @ C0, V @ A1, U @ V0
    out = X + Z + Y.to(d0, non_blocking=True)
    return out.to("cpu", non_blocking=True).numpy()
'''}, 0, 2, 2, 0, "before its copy to the host had landed"),
}
