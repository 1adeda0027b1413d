"""Submissions for assignment 5: the reference, other correct ones and typical wrong ones.

Each is a ``run_dag(devices, inputs)`` as a student would write it in the notebook.
"""
from grader.checks.a5_dependencies import add, matmul


def reference(devices, inputs):
    """U, X on device 0; V, Y on device 1; V crosses to device 0 for Z; Y joins at the end."""
    d0, d1 = devices[0], devices[1]
    A0, B0, C0 = d0.put(inputs["A"]), d0.put(inputs["B"]), d0.put(inputs["C"])
    C1, D1, A1 = d1.put(inputs["C"]), d1.put(inputs["D"]), d1.put(inputs["A"])
    fu, fv = d0.submit(matmul, A0, B0), d1.submit(matmul, C1, D1)
    U, V = fu.result(), fv.result()
    fx, fy = d0.submit(matmul, U, C0), d1.submit(matmul, V, A1)
    V0 = d0.put(d1.get(V))                     # V crosses while Y runs on device 1
    Z = d0.submit(matmul, U, V0).result()
    X, Y = fx.result(), fy.result()
    Y0 = d0.put(d1.get(Y))
    return d0.get(d0.submit(add, d0.submit(add, X, Z).result(), Y0).result())


def host_sum(devices, inputs):
    """Another correct one: Z on device 1 (U crosses instead), sums done on the host."""
    d0, d1 = devices
    A0, B0, C0 = (d0.put(inputs[k]) for k in "ABC")
    A1, C1, D1 = (d1.put(inputs[k]) for k in "ACD")
    U = d0.submit(matmul, A0, B0)
    V = d1.submit(matmul, C1, D1)
    X = d0.submit(matmul, U, C0)
    U1 = d1.put(d0.get(U))
    Y = d1.submit(matmul, V, A1)
    Z = d1.submit(matmul, U1, V)
    return d0.get(X) + d1.get(Y) + d1.get(Z)


def three_and_two(devices, inputs):
    """Another correct one: the products split 3 / 2 the other way, with a generic loop over a
    task table (how a student might write a tiny scheduler)."""
    plan = [  # (name, device, operands)
        ("U", 0, ("A", "B")), ("V", 1, ("C", "D")),
        ("Y", 1, ("V", "A")), ("X", 0, ("U", "C")), ("Z", 1, ("U", "V")),
    ]
    where = {}                                  # (name, device) -> handle
    for dev_index, dev in enumerate(devices):
        for k in "ABCD":
            where[(k, dev_index)] = dev.put(inputs[k])
    pending = {}
    for name, dev_index, ops in plan:
        dev = devices[dev_index]
        args = []
        for op in ops:
            if (op, dev_index) not in where:    # produced elsewhere: copy it over
                src = 1 - dev_index
                where[(op, dev_index)] = dev.put(devices[src].get(pending[op]))
            args.append(where[(op, dev_index)])
        pending[name] = dev.submit(matmul, *args)
        where[(name, dev_index)] = pending[name]
    d1 = devices[1]
    yz = d1.submit(add, pending["Y"], pending["Z"])
    return devices[0].get(pending["X"]) + d1.get(yz)


# ---- typical wrong answers -------------------------------------------------------------

def one_device(devices, inputs):
    """Correct, but everything on device 0."""
    d = devices[0]
    A, B, C, D = (d.put(inputs[k]) for k in "ABCD")
    U, V = d.submit(matmul, A, B), d.submit(matmul, C, D)
    X, Y, Z = d.submit(matmul, U, C), d.submit(matmul, V, A), d.submit(matmul, U, V)
    return d.get(d.submit(add, d.submit(add, X, Y), Z))


def no_copy(devices, inputs):
    """Uses V (on device 1) on device 0 without copying it."""
    d0, d1 = devices
    A0, B0, C0 = (d0.put(inputs[k]) for k in "ABC")
    A1, C1, D1 = (d1.put(inputs[k]) for k in "ACD")
    U, V = d0.submit(matmul, A0, B0), d1.submit(matmul, C1, D1)
    X, Y = d0.submit(matmul, U, C0), d1.submit(matmul, V, A1)
    Z = d0.submit(matmul, U, V)                  # V lives on device 1
    return d0.get(X) + d1.get(Y) + d0.get(Z)


def waits_after_each(devices, inputs):
    """Right placement, but the host waits for each product before queuing the next, and puts
    each input just before it is needed: the devices take turns instead of working together."""
    d0, d1 = devices
    A0, B0 = d0.put(inputs["A"]), d0.put(inputs["B"])
    U = d0.get(d0.submit(matmul, A0, B0))
    C1, D1 = d1.put(inputs["C"]), d1.put(inputs["D"])
    V = d1.get(d1.submit(matmul, C1, D1))
    U0, C0 = d0.put(U), d0.put(inputs["C"])
    X = d0.get(d0.submit(matmul, U0, C0))
    V1, A1 = d1.put(V), d1.put(inputs["A"])
    Y = d1.get(d1.submit(matmul, V1, A1))
    V0 = d0.put(V)
    Z = d0.get(d0.submit(matmul, U0, V0))
    return X + Y + Z


def swapped_product(devices, inputs):
    """Computes Z = V @ U instead of U @ V (products do not commute)."""
    d0, d1 = devices
    A0, B0, C0 = (d0.put(inputs[k]) for k in "ABC")
    A1, C1, D1 = (d1.put(inputs[k]) for k in "ACD")
    U, V = d0.submit(matmul, A0, B0).result(), d1.submit(matmul, C1, D1).result()
    X, Y = d0.submit(matmul, U, C0), d1.submit(matmul, V, A1)
    V0 = d0.put(d1.get(V))
    Z = d0.submit(matmul, V0, U)
    return d0.get(X) + d1.get(Y) + d0.get(Z)


def host_products(devices, inputs):
    """Computes everything with NumPy on the host: right answer, devices idle."""
    A, B, C, D = (inputs[k] for k in "ABCD")
    U, V = A @ B, C @ D
    return U @ C + V @ A + U @ V


def raises(devices, inputs):
    raise RuntimeError("not implemented yet")
