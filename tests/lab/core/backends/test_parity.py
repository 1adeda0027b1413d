"""The PyTorch and Paddle adapters expose the same names, signatures and return types."""
import inspect

import numpy as np
import pytest

from grader.lab.core.backends import API, FRAMEWORKS, get_backend

torch_be, paddle_be = get_backend("torch"), get_backend("paddle")


@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_adapter_defines_the_whole_api(framework):
    missing = [n for n in API if not hasattr(get_backend(framework), n)]
    assert not missing, f"{framework} adapter lacks {missing}"


def _public(module):
    return {n for n, v in vars(module).items()
            if not n.startswith("_") and (inspect.isfunction(v) or inspect.isclass(v))
            and getattr(v, "__module__", "") == module.__name__}


def test_both_adapters_have_the_same_public_names():
    assert _public(torch_be) == _public(paddle_be)


@pytest.mark.parametrize("name", sorted(_public(torch_be)))
def test_signatures_match(name):
    a, b = getattr(torch_be, name), getattr(paddle_be, name)
    if inspect.isclass(a):
        assert sorted(m for m in vars(a) if not m.startswith("_") or m == "__init__") == \
            sorted(m for m in vars(b) if not m.startswith("_") or m == "__init__")
        for m in vars(a):
            if callable(vars(a)[m]):
                assert inspect.signature(vars(a)[m]) == inspect.signature(vars(b)[m]), f"{name}.{m}"
    else:
        assert inspect.signature(a) == inspect.signature(b)


def test_unknown_framework_is_a_clear_error():
    with pytest.raises(ValueError, match="torch, paddle"):
        get_backend("jax")


@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_return_types_on_cpu(framework):
    be = get_backend(framework)
    assert isinstance(be.NAME, str) and be.NAME == framework
    assert isinstance(be.version(), str)
    assert isinstance(be.gpu_count(), int)
    x = be.randn((3, 4), seed=5)
    assert be.tensor_device(x) == "cpu"
    assert be.nbytes(x) == 3 * 4 * 4
    y = be.to_numpy(be.matmul(x, be.from_numpy(np.ones((4, 2), np.float32))))
    assert isinstance(y, np.ndarray) and y.dtype == np.float32 and y.shape == (3, 2)
    assert be.to_numpy(be.zeros((2,))).tolist() == [0.0, 0.0]
    assert be.synchronize("cpu") is None
    assert isinstance(be.memory_allocated("cpu"), int) and be.memory_allocated("cpu") > 0
    e0, e1 = be.Event("cpu").record(), be.Event("cpu").record()
    assert isinstance(e0.elapsed_ms(e1), float) and e0.elapsed_ms(e1) >= 0
    with pytest.raises(ValueError, match="not 'cpu' or 'gpu:N'"):
        be.native_device("cuda0")


def test_same_seed_gives_the_same_numbers_in_both_frameworks():
    a = torch_be.to_numpy(torch_be.randn((4, 4), seed=3))
    b = paddle_be.to_numpy(paddle_be.randn((4, 4), seed=3))
    assert a.dtype == b.dtype == np.float32
    np.testing.assert_array_equal(a, b)


def _cuda_calls(source: str) -> list[str]:
    """The dotted names ``torch.cuda.*`` / ``paddle.device.cuda.*`` the module's code uses
    (attribute chains in the code, not strings or docstrings that spell the API's names,
    as the simulated GPU of the graded exercises does in its messages)."""
    import ast
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Attribute):
            parts, cur = [node.attr], node.value
            while isinstance(cur, ast.Attribute):
                parts.append(cur.attr)
                cur = cur.value
            if isinstance(cur, ast.Name):
                dotted = ".".join([cur.id, *reversed(parts)])
                if dotted.startswith(("torch.cuda.", "paddle.device.cuda.")):
                    found.append(dotted)
    return found


def test_the_check_finds_a_cuda_call_and_ignores_strings():
    assert _cuda_calls("import torch\ntorch.cuda.synchronize()") == ["torch.cuda.synchronize"]
    assert _cuda_calls('"""torch.cuda.Event"""\nx = "torch.cuda.Stream()"') == []


def test_only_the_adapters_call_the_cuda_apis():
    """Chapters call torch.cuda and paddle.device themselves; inside the course package
    only the adapters (and GPU cells' provenance, which asks the frameworks what they
    have: grader.lab.core.gpucells) do."""
    import pathlib
    root = pathlib.Path(__file__).resolve().parents[3] / "grader"
    offenders = []
    for path in root.rglob("*.py"):
        if path.parent.name == "backends" or path.name == "gpucells.py":
            continue
        calls = _cuda_calls(path.read_text())
        if calls:
            offenders.append(f"{path.relative_to(root)}: {sorted(set(calls))}")
    assert offenders == []
