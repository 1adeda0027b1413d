"""Tensors of the simulated frameworks: a NumPy value, where it lives, when it is written.

:class:`SimTensor` holds what both frameworks share: arithmetic (each operation on a device
is a kernel on the current stream, on the host it takes host time), copies between the host
and the devices, and reading a host tensor *now* (garbage before its copy has landed). The
framework facades subclass it with their own names (``.device`` / ``.place``, ``to``,
``numpy``...). Nothing public on a tensor says how long anything took.
"""
from __future__ import annotations

import operator
from typing import Any, Callable

import numpy as np

from .engine import Gpu, Machine, SimError, Stream, garbage

__all__ = ["SimTensor", "scalar_like", "matmul_shape", "admit"]

_DTYPES = {"float32", "float64", "float16", "int32", "int64", "bool", "uint8", "int8", "int16"}


def admit(machine: Machine, shape: Any) -> tuple:
    """``shape`` as a tuple of sizes, if the simulated GPU can hold a tensor of it (checked
    before anything is allocated: values are computed on the grading machine's CPU)."""
    shape = tuple(int(s) for s in (shape if isinstance(shape, (tuple, list)) else (shape,)))
    n = int(np.prod(shape, dtype=np.float64)) if shape else 1
    if any(s < 0 for s in shape):
        raise SimError(f"negative dimension in {shape}")
    if n > machine.costs.max_elems:
        raise SimError(f"CUDA out of memory: a tensor of {n} elements; the simulated GPU holds "
                       f"at most {machine.costs.max_elems} per tensor (it computes every value "
                       "on the grading machine's CPU): use the sizes the task gives")
    return shape


def scalar_like(x: Any) -> bool:
    return isinstance(x, (bool, int, float, complex, np.generic))


class SimTensor:
    """A tensor on the host (``_dev is None``) or on simulated GPU ``_dev``."""

    _FW = "framework"          # "torch" / "paddle": the facade's name in messages
    __judge_ops__ = frozenset({"add", "radd", "sub", "rsub", "mul", "rmul", "truediv",
                               "rtruediv", "matmul", "rmatmul", "pow", "neg", "pos", "lt",
                               "le", "gt", "ge", "float", "int", "abs"})

    def __init__(self, fw: Any, machine: Machine, value: np.ndarray, dev: int | None,
                 ready_ns: int = 0, pinned: bool = False) -> None:
        value = np.asarray(value)
        admit(machine, value.shape)
        self._fw, self._m, self._value = fw, machine, value
        self._dev, self._ready_ns, self._pinned = dev, int(ready_ns), bool(pinned)

    # -- the facade builds its own kind of tensor ---------------------------------------
    def _new(self, value: np.ndarray, dev: int | None, ready_ns: int, pinned: bool = False):
        return type(self)(self._fw, self._m, value, dev, ready_ns, pinned)

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)
        raise AttributeError(f"the simulated {self._FW} does not model Tensor.{name}; "
                             f"{self._fw._tensor_hint}")

    # -- where it lives ---------------------------------------------------------------
    def _gpu(self) -> Gpu:
        return self._m.gpus[self._dev]

    def _device_name(self) -> str:
        raise NotImplementedError

    def _now_value(self, what: str) -> np.ndarray:
        """A host tensor's content as the host reads it now."""
        if self._ready_ns > self._m.clock.now_ns:
            self._m.violation("early_read", f"{what} read a host tensor before the copy into "
                              "it had landed (synchronize, or wait for an event, first)")
            return garbage(self._value)
        return self._value

    def _host_read(self, what: str) -> np.ndarray:
        """The value on the host: a device tensor is copied first (blocking, like ``.cpu()``)."""
        if self._dev is None:
            return self._now_value(what).copy()
        end, (ok,) = self._gpu().copy("d2h", self._value.nbytes, self._gpu().current,
                                      pinned=False, blocking=True, inputs=[self], label=what)
        return (self._value if ok else garbage(self._value)).copy()

    # -- arithmetic ---------------------------------------------------------------------
    def _operands(self, args: tuple, name: str) -> tuple[int | None, list["SimTensor"]]:
        tensors = [a for a in args if isinstance(a, SimTensor)]
        devs = {t._dev for t in tensors}
        if len(devs) > 1:
            names = " and ".join(sorted(t._device_name() for t in
                                        {t._dev: t for t in tensors}.values()))
            msg = self._fw._wrong_device_message(name, names)
            if self._m.wrong_device == "raise":
                raise SimError(msg)
            self._m.violation("wrong_device", msg)
        return tensors[0]._dev, tensors

    def _run(self, name: str, fn: Callable, args: tuple, work: float, parallel: int,
             flops: bool = False, fixed: tuple[float, float] | None = None) -> "SimTensor":
        """Compute ``fn`` of ``args`` where they live: a kernel on the current stream of their
        device (its duration from the cost model, or ``fixed`` = (seconds, width)), or host
        time for host tensors. Inputs not yet written when it starts are read as garbage."""
        dev, tensors = self._operands(args, name)
        m, c = self._m, self._m.costs
        if work > c.max_work:
            raise SimError(f"{name} of this size costs {work:.3g} operations; the simulated GPU "
                           "computes every value on the grading machine's CPU and stops at "
                           f"{c.max_work:.3g}: use the sizes the task gives")
        if dev is None:
            if fixed is not None:
                m.clock.advance(fixed[0])
            else:
                m.host_compute(work, c.host_flops if flops else c.host_elems)
            vals = [a._now_value(name) if isinstance(a, SimTensor) else a for a in args]
            end = m.clock.now_ns
        else:
            gpu = m.gpus[dev]
            seconds, width = fixed or c.kernel_s(work, c.flops if flops else c.elems, parallel)
            end, ready = gpu.kernel(name, seconds, width, gpu.current, tensors)
            it = iter(ready)
            vals = [(a._value if next(it) else garbage(a._value)) if isinstance(a, SimTensor)
                    else a for a in args]
        with np.errstate(all="ignore"):
            out = np.asarray(fn(*vals))
        if out.dtype == np.float64 and not any(t._value.dtype == np.float64 for t in tensors):
            out = out.astype(np.float32)
        return self._new(out, dev, end)

    def _elementwise(self, name: str, fn: Callable, *args: Any) -> "SimTensor":
        shape = np.broadcast_shapes(*[np.shape(getattr(a, "_value", a)) for a in args])
        n = int(np.prod(shape, dtype=np.int64))
        return self._run(name, fn, args, work=n, parallel=n)

    def _matmul(self, other: "SimTensor") -> "SimTensor":
        if not isinstance(other, SimTensor):
            raise TypeError(f"matmul expects two tensors, got {type(other).__name__}")
        out = matmul_shape(self._value.shape, other._value.shape)
        k = self._value.shape[-1]
        n = int(np.prod(out, dtype=np.int64))
        return self._run("matmul", _product, (self, other), work=2.0 * n * k,
                         parallel=max(n, 1), flops=True)

    def _binop(self, name: str, other: Any, fn: Callable, reflected: bool = False):
        if not (isinstance(other, SimTensor) or scalar_like(other)):
            return NotImplemented
        args = (other, self) if reflected else (self, other)
        return self._elementwise(name, fn, *args)

    def __add__(self, o): return self._binop("add", o, operator.add)
    def __radd__(self, o): return self._binop("add", o, operator.add, True)
    def __sub__(self, o): return self._binop("sub", o, operator.sub)
    def __rsub__(self, o): return self._binop("sub", o, operator.sub, True)
    def __mul__(self, o): return self._binop("mul", o, operator.mul)
    def __rmul__(self, o): return self._binop("mul", o, operator.mul, True)
    def __truediv__(self, o): return self._binop("div", o, operator.truediv)
    def __rtruediv__(self, o): return self._binop("div", o, operator.truediv, True)
    def __pow__(self, o): return self._binop("pow", o, operator.pow)
    def __lt__(self, o): return self._binop("lt", o, operator.lt)
    def __le__(self, o): return self._binop("le", o, operator.le)
    def __gt__(self, o): return self._binop("gt", o, operator.gt)
    def __ge__(self, o): return self._binop("ge", o, operator.ge)
    def __neg__(self): return self._elementwise("neg", operator.neg, self)
    def __pos__(self): return self
    def __abs__(self): return self._elementwise("abs", np.abs, self)

    def __matmul__(self, o):
        return self._matmul(o) if isinstance(o, SimTensor) else NotImplemented

    def __rmatmul__(self, o):
        return o._matmul(self) if isinstance(o, SimTensor) else NotImplemented

    __hash__ = object.__hash__

    def _reduce(self, name: str, fn: Callable) -> "SimTensor":
        n = int(self._value.size)
        return self._run(name, fn, (self,), work=n, parallel=n)

    def sum(self, *args: Any, **kwargs: Any) -> "SimTensor":
        return self._reduce("sum", lambda v: np.sum(v, *args, **kwargs))

    def mean(self, *args: Any, **kwargs: Any) -> "SimTensor":
        return self._reduce("mean", lambda v: np.mean(v, *args, **kwargs))

    def matmul(self, other: "SimTensor") -> "SimTensor":
        return self._matmul(other)

    def __getitem__(self, key: Any) -> "SimTensor":
        if isinstance(key, SimTensor):
            raise SimError("indexing with a tensor is not modeled: index with ints and slices")
        return self._elementwise("index", lambda v: v[key], self)

    def __len__(self) -> int:
        if not self._value.shape:
            raise TypeError("len() of a 0-d tensor")
        return self._value.shape[0]

    # -- copies ----------------------------------------------------------------------------
    def _to_gpu(self, dev: int, blocking: bool) -> "SimTensor":
        m = self._m
        if dev >= len(m.gpus):
            raise SimError(self._fw._no_device_message(dev))
        if self._dev == dev:
            return self
        if self._dev is None:
            gpu = m.gpus[dev]
            end, (ok,) = gpu.copy("h2d", self._value.nbytes, gpu.current, pinned=self._pinned,
                                  blocking=blocking, inputs=[self], label="copy to the device")
        else:
            end, (ok,) = m.p2p(self._value.nbytes, self._gpu(), m.gpus[dev], blocking, [self],
                               "copy between devices")
        value = self._value if ok else garbage(self._value)
        return self._new(value.copy(), dev, end)

    def _to_host(self, blocking: bool, pinned: bool) -> "SimTensor":
        if self._dev is None:
            if pinned and not self._pinned:
                self._m.host_compute(self._value.size, self._m.costs.host_elems)
                return self._new(self._now_value("pin_memory").copy(), None,
                                 self._m.clock.now_ns, pinned=True)
            return self
        gpu = self._gpu()
        end, (ok,) = gpu.copy("d2h", self._value.nbytes, gpu.current, pinned=pinned,
                              blocking=blocking, inputs=[self], label="copy to the host")
        value = self._value if ok else garbage(self._value)
        return self._new(value.copy(), None, end, pinned=pinned)

    def _copy_from(self, src: "SimTensor", blocking: bool) -> "SimTensor":
        """``self.copy_(src)``: write ``src``'s value into this tensor, where it lives."""
        if not isinstance(src, SimTensor):
            raise TypeError(f"copy_ expects a tensor, got {type(src).__name__}")
        if tuple(np.broadcast_shapes(self._value.shape, src._value.shape)) != self._value.shape:
            raise SimError(f"the size of tensor a {_shape(self._value)} must match the size "
                           f"of tensor b {_shape(src._value)}")
        m = self._m
        if self._dev is None and src._dev is None:
            m.host_compute(self._value.size, m.costs.host_elems)
            new, end = src._now_value("copy_"), m.clock.now_ns
        elif self._dev is None:
            gpu = src._gpu()
            end, (ok,) = gpu.copy("d2h", src._value.nbytes, gpu.current, pinned=self._pinned,
                                  blocking=blocking, inputs=[src], label="copy to the host")
            new = src._value if ok else garbage(src._value)
        elif src._dev is None:
            gpu = self._gpu()
            end, (ok,) = gpu.copy("h2d", src._value.nbytes, gpu.current, pinned=src._pinned,
                                  blocking=blocking, inputs=[src], label="copy to the device")
            new = src._value if ok else garbage(src._value)
        elif src._dev != self._dev:
            end, (ok,) = m.p2p(src._value.nbytes, src._gpu(), self._gpu(), blocking, [src],
                               "copy between devices")
            new = src._value if ok else garbage(src._value)
        else:
            t = src._elementwise("copy", lambda v: v, src)
            new, end = t._value, t._ready_ns
        self._value = np.broadcast_to(np.asarray(new, dtype=self._value.dtype),
                                      self._value.shape).copy()
        self._ready_ns = end
        return self

    def _stream_of(self, stream: Any) -> Stream:
        raise NotImplementedError


def _product(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``a @ b``; small products without BLAS's threads, which on a busy machine spend far
    longer waiting for each other than computing."""
    if a.ndim == 2 and b.ndim == 2 and a.shape[0] * a.shape[1] * b.shape[1] <= 1 << 22:
        return np.einsum("ij,jk->ik", a, b)
    return np.matmul(a, b)


def matmul_shape(sa: tuple, sb: tuple) -> tuple:
    """The shape of ``a @ b`` (NumPy's rules), or the framework's error."""
    if not sa or not sb:
        raise SimError("both arguments to matmul need to be at least 1D")
    a2 = sa if len(sa) > 1 else (1,) + tuple(sa)
    b2 = sb if len(sb) > 1 else tuple(sb) + (1,)
    if a2[-1] != b2[-2]:
        raise SimError(f"mat1 and mat2 shapes cannot be multiplied ({'x'.join(map(str, a2[-2:]))}"
                       f" and {'x'.join(map(str, b2[-2:]))})")
    out = tuple(np.broadcast_shapes(a2[:-2], b2[:-2])) + (a2[-2], b2[-1])
    if len(sa) == 1:
        out = out[:-2] + out[-1:]
    if len(sb) == 1:
        out = out[:-1]
    return out


def _shape(a: np.ndarray) -> str:
    return "x".join(str(s) for s in a.shape) or "scalar"
