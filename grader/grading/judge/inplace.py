"""In-place semantics across the judge <-> kernel channel (:mod:`grader.grading.judge.channel`).

A callee on the other side gets copies of the arrays and tensors it was passed. What it
changed in place is sent back and copied into the caller's objects (:func:`copy_back`),
found by comparing :func:`fingerprint` s taken before and after the call; a tensor the callee
made on the storage of one it was passed comes back as a view of the caller's tensor
(:func:`storages` names them for :class:`grader.wire.Encoder`).
"""
from __future__ import annotations

from typing import Any

from ...wire.values import array_of, paddle_module, tensor_framework

__all__ = ["storages", "mutable_array", "fingerprint", "copy_back"]


def storages(memo: dict[int, Any]) -> dict[int, tuple[int, Any]]:
    """Storage address -> (position, tensor) of the torch tensors a request carried."""
    out = {}
    for i, o in memo.items():
        if tensor_framework(o) == "torch" and o.device.type == "cpu":
            out.setdefault(o.untyped_storage().data_ptr(), (i, o))
    return out


def mutable_array(obj: Any) -> bool:
    return type(obj).__name__ == "ndarray" or tensor_framework(obj) is not None


def fingerprint(obj: Any) -> bytes:
    a = array_of(obj)
    return repr((a.shape, a.dtype.str)).encode() + a.tobytes()


def copy_back(orig: Any, new: Any) -> None:
    """Give ``orig`` the values the callee left in its copy (in-place semantics)."""
    fw = tensor_framework(orig)
    try:
        src = array_of(new)
        if fw is None:
            if getattr(orig, "shape", None) == src.shape and orig.flags.writeable:
                orig[...] = src
        elif fw == "torch":
            import torch

            if tuple(orig.shape) == src.shape:
                with torch.no_grad():
                    orig.copy_(torch.from_numpy(src).to(orig.dtype))
        elif tuple(orig.shape) == src.shape:
            paddle = paddle_module()
            paddle.assign(paddle.to_tensor(src).astype(orig.dtype), output=orig)
    except (TypeError, ValueError, RuntimeError, AttributeError):
        pass   # a copy-back that cannot apply leaves the caller's object as it was
