"""Autograd semantics: leaves, accumulation, retain_graph, detach, grad modes, deep graphs, gradcheck itself."""

from __future__ import annotations

import sys

import numpy as np
import pytest

import vkblas as vb
from conftest import float_dtype


def t(data, device: str, requires_grad: bool = False) -> vb.Tensor:
    return vb.tensor(data, dtype=float_dtype(device), device=device, requires_grad=requires_grad)


def test_seed_example_prints_twos(device: str) -> None:
    x = vb.tensor([1, 2, 3], requires_grad=True, dtype=vb.float32, device=device)
    y = x * 2 + 3
    y.backward()
    assert x.grad.tolist() == [2.0, 2.0, 2.0]
    assert str(x.grad.cpu()) == "tensor([2., 2., 2.])"


def test_seed_example_int_data_requires_grad_becomes_float() -> None:
    x = vb.tensor([1, 2, 3], requires_grad=True, device="cpu")
    assert x.dtype.is_floating
    (x * 2 + 3).backward()
    assert x.grad.tolist() == [2.0, 2.0, 2.0]


def test_product_rule(device: str) -> None:
    x = t([1.0, -2.0, 0.5], device, requires_grad=True)
    y = t([3.0, 4.0, -1.0], device, requires_grad=True)
    f = x * y + x
    f.backward(vb.ones_like(f))
    np.testing.assert_allclose(x.grad.numpy(), [4.0, 5.0, 0.0])  # y + 1
    np.testing.assert_allclose(y.grad.numpy(), [1.0, -2.0, 0.5])  # x


def test_leaves_and_non_leaves(device: str) -> None:
    x = t([1.0, 2.0], device, requires_grad=True)
    c = t([1.0, 2.0], device)
    y = x * 3
    assert x.is_leaf and c.is_leaf and not y.is_leaf
    assert x.grad_fn is None and y.grad_fn is not None and y.requires_grad
    assert "Mul" in y.grad_fn.name
    assert (c * 3).grad_fn is None and not (c * 3).requires_grad
    y.sum().backward()
    assert y.grad is None  # non-leaves keep no grad unless asked
    np.testing.assert_allclose(x.grad.numpy(), [3.0, 3.0])


def test_retain_grad_on_non_leaf(device: str) -> None:
    x = t([1.0, 2.0], device, requires_grad=True)
    y = x * x
    y.retain_grad()
    (y * 2).sum().backward()
    np.testing.assert_allclose(y.grad.numpy(), [2.0, 2.0])
    np.testing.assert_allclose(x.grad.numpy(), [4.0, 8.0])


def test_grad_accumulates_across_backwards(device: str) -> None:
    x = t([1.0, 2.0, 3.0], device, requires_grad=True)
    (x * 2).sum().backward()
    (x * x).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), [4.0, 6.0, 8.0])
    x.grad = None
    (x * 5).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), [5.0, 5.0, 5.0])


def test_tensor_used_twice_sums_its_gradients(device: str) -> None:
    x = t([2.0, -1.0], device, requires_grad=True)
    y = x * x * x + x  # x used four times
    y.backward(t([1.0, 1.0], device))
    np.testing.assert_allclose(x.grad.numpy(), [13.0, 4.0])


def test_explicit_gradient_argument(device: str) -> None:
    x = t([[1.0, 2.0], [3.0, 4.0]], device, requires_grad=True)
    y = x * 2
    y.backward(gradient=t([[1.0, 0.0], [0.5, -1.0]], device))
    np.testing.assert_allclose(x.grad.numpy(), [[2.0, 0.0], [1.0, -2.0]])


def test_backward_gradient_shape_mismatch_names_shapes(device: str) -> None:
    x = t([1.0, 2.0], device, requires_grad=True)
    with pytest.raises(RuntimeError, match=r"\(3,\).*\(2,\)"):
        (x * 2).backward(t([1.0, 1.0, 1.0], device))


def test_second_backward_raises_clearly_and_retain_graph_allows_it(device: str) -> None:
    x = t([1.0, 2.0], device, requires_grad=True)
    y = (x * x).sum()
    y.backward(retain_graph=True)
    y.backward()
    np.testing.assert_allclose(x.grad.numpy(), [4.0, 8.0])
    with pytest.raises(RuntimeError, match="backward through the graph a second time"):
        y.backward()
    z = (x * 3).sum()  # the process (and the device) stays usable
    x.grad = None
    z.backward()
    np.testing.assert_allclose(x.grad.numpy(), [3.0, 3.0])


def test_graph_is_freed_after_backward() -> None:
    x = vb.tensor([1.0, 2.0], dtype=vb.float64, requires_grad=True)
    y = x.exp()
    node = y.grad_fn
    assert node.saved
    y.sum().backward()
    assert node.inputs is None and node.saved == ()


def test_backward_on_tensor_without_grad_raises(device: str) -> None:
    x = t([1.0, 2.0], device)
    with pytest.raises(RuntimeError, match="does not require grad"):
        (x * 2).sum().backward()


def test_detach_cuts_the_graph(device: str) -> None:
    x = t([1.0, 2.0], device, requires_grad=True)
    d = (x * 2).detach()
    assert not d.requires_grad and d.grad_fn is None and d.is_leaf
    y = (x * d).sum()
    y.backward()
    np.testing.assert_allclose(x.grad.numpy(), [2.0, 4.0])  # d treated as a constant
    np.testing.assert_allclose(d.numpy(), [2.0, 4.0])


def test_no_grad_and_enable_grad(device: str) -> None:
    x = t([1.0, 2.0], device, requires_grad=True)
    with vb.no_grad():
        assert not vb.is_grad_enabled()
        y = x * 2
        with vb.enable_grad():
            z = x * 2
        assert not vb.is_grad_enabled()
    assert vb.is_grad_enabled()
    assert not y.requires_grad and y.grad_fn is None
    assert z.requires_grad and z.grad_fn is not None

    @vb.no_grad()
    def f(a: vb.Tensor) -> vb.Tensor:
        return a * 3

    assert not f(x).requires_grad
    with vb.set_grad_enabled(False):
        assert not (x + 1).requires_grad


@pytest.mark.parametrize("decorator", ["no_grad", "enable_grad", "inference_mode", "set_grad_enabled"])
def test_one_decorated_function_in_two_threads_restores_each_threads_mode(decorator: str) -> None:
    """One ``@no_grad`` function (one object) in two threads of opposite modes: each gets its own mode back. The mode
    saved on entry once lived on the object; the second thread's entry overwrote it, and the first thread left with
    grad mode off for good (a DiLoCo worker thread beside the coordinator's evaluator: "element 0 of tensors does
    not require grad")."""
    import threading

    wrap = {"set_grad_enabled": vb.set_grad_enabled(False)}.get(decorator) or getattr(vb, decorator)()
    inner = decorator == "enable_grad"  # the mode inside the function; each thread starts in the other
    first_in, second_out = threading.Event(), threading.Event()
    seen: list[bool] = []

    @wrap
    def region(first: bool) -> None:
        assert vb.is_grad_enabled() == inner
        if first:
            first_in.set()
            assert second_out.wait(20)

    def first_thread() -> None:
        with vb.set_grad_enabled(not inner):
            region(True)
            seen.append(vb.is_grad_enabled())

    a = threading.Thread(target=first_thread)
    a.start()
    assert first_in.wait(20)
    with vb.set_grad_enabled(inner):  # this thread is in the function's mode already
        region(False)
        assert vb.is_grad_enabled() == inner
    second_out.set()
    a.join(20)
    assert seen == [not inner]
    assert vb.is_grad_enabled()


def test_grad_mode_decorators_with_and_without_parentheses(device: str) -> None:
    x = t([1.0, 2.0], device, requires_grad=True)

    @vb.no_grad
    def bare(a: vb.Tensor) -> vb.Tensor:
        return a * 3

    @vb.inference_mode
    def inference(a: vb.Tensor) -> vb.Tensor:
        return a * 3

    @vb.inference_mode()
    def inference_called(a: vb.Tensor) -> vb.Tensor:
        return a * 3

    with vb.no_grad():

        @vb.enable_grad
        def tracked(a: vb.Tensor) -> vb.Tensor:
            return a * 3

        assert tracked(x).requires_grad
    assert not bare(x).requires_grad and not inference(x).requires_grad and not inference_called(x).requires_grad
    assert bare.__name__ == "bare" and vb.is_grad_enabled()
    with vb.inference_mode():
        assert not (x * 2).requires_grad
    with vb.inference_mode(False):
        assert (x * 2).requires_grad


def test_no_grad_allows_inplace_update_of_leaf(device: str) -> None:
    w = t([1.0, 2.0], device, requires_grad=True)
    (w * w).sum().backward()
    with vb.no_grad():
        w -= w.grad * 0.5
    np.testing.assert_allclose(w.detach().numpy(), [0.0, 0.0])
    assert w.is_leaf and w.requires_grad


def test_inplace_on_leaf_requiring_grad_raises(device: str) -> None:
    w = t([1.0, 2.0], device, requires_grad=True)
    for op in (
        lambda: w.add_(1.0),
        lambda: w.mul_(2.0),
        lambda: w.zero_(),
        lambda: w.fill_(3.0),
        lambda: w.copy_(t([0.0, 0.0], device)),
        lambda: w.sub_(1.0),
    ):
        with pytest.raises(RuntimeError, match="leaf Variable that requires grad"):
            op()
    np.testing.assert_allclose(w.detach().numpy(), [1.0, 2.0])  # untouched


def test_inplace_on_non_leaf_is_differentiable(device: str) -> None:
    x = t([1.0, -2.0, 3.0], device, requires_grad=True)
    y = x * 2
    y.mul_(x)  # y = 2 x^2
    y.add_(x)  # y = 2 x^2 + x
    y.sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), [5.0, -7.0, 13.0])


def test_modifying_a_saved_tensor_is_detected(device: str) -> None:
    x = t([1.0, 2.0], device, requires_grad=True)
    a = x * 1
    y = a.exp()  # saves its output
    y.add_(1.0)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        y.sum().backward()


def test_max_ties_share_the_gradient(device: str) -> None:
    x = t([1.0, 3.0, 3.0, 2.0], device, requires_grad=True)
    x.max().backward()
    np.testing.assert_allclose(x.grad.numpy(), [0.0, 0.5, 0.5, 0.0])
    y = t([[1.0, 1.0], [0.0, 2.0]], device, requires_grad=True)
    vb.maximum(y, t([1.0, 0.0], device)).sum().backward()
    np.testing.assert_allclose(y.grad.numpy(), [[0.5, 1.0], [0.0, 1.0]])


def test_integer_array_index_gradient_is_scatter_add(device: str) -> None:
    x = t([10.0, 20.0, 30.0], device, requires_grad=True)
    y = x[vb.tensor([0, 2, 2, 0, 0], device=device)]
    y.backward(t([1.0, 2.0, 3.0, 4.0, 5.0], device))
    np.testing.assert_allclose(x.grad.numpy(), [10.0, 0.0, 5.0])


def test_broadcast_gradients_are_summed_to_input_shape(device: str) -> None:
    a = t(np.ones((2, 1, 3)), device, requires_grad=True)
    b = t(np.arange(4.0).reshape(4, 1), device, requires_grad=True)
    (a * b).sum().backward()
    assert a.grad.shape == (2, 1, 3) and b.grad.shape == (4, 1)
    np.testing.assert_allclose(a.grad.numpy(), np.full((2, 1, 3), 6.0))
    np.testing.assert_allclose(b.grad.numpy(), np.full((4, 1), 6.0))


def test_deep_graph_does_not_hit_recursion_limit(device: str) -> None:
    n = 5000
    assert n > sys.getrecursionlimit()
    x = t([1.0], device, requires_grad=True)
    y = x
    for _ in range(n):
        y = y * 1.0001 + 0.0
    y.backward()
    np.testing.assert_allclose(x.grad.numpy(), [1.0001**n], rtol=1e-3)


def test_vkblas_grad_leaves_dot_grad_alone() -> None:
    x = vb.tensor([1.0, 2.0], dtype=vb.float64, requires_grad=True)
    x.grad = vb.tensor([9.0, 9.0], dtype=vb.float64)
    (gx,) = vb.grad((x * x).sum(), [x])
    np.testing.assert_allclose(gx.numpy(), [2.0, 4.0])
    np.testing.assert_allclose(x.grad.numpy(), [9.0, 9.0])


def test_requires_grad_only_for_floats() -> None:
    with pytest.raises(RuntimeError, match="floating point"):
        vb.tensor([1, 2], dtype=vb.int32).requires_grad_()
    x = vb.tensor([1.0]).requires_grad_()
    assert x.requires_grad and x.is_leaf
    with pytest.raises(RuntimeError, match="leaf"):
        (x * 2).requires_grad_(False)


def test_gradient_dtype_follows_input_dtype() -> None:
    x = vb.tensor([1.0, 2.0], dtype=vb.float64, requires_grad=True)
    (x.to(vb.float32) * 2).sum().backward()
    assert x.grad.dtype is vb.float64
    np.testing.assert_allclose(x.grad.numpy(), [2.0, 2.0])


def test_gradient_flows_across_devices(device: str) -> None:
    x = vb.tensor([1.0, 2.0], dtype=vb.float32, device="cpu", requires_grad=True)
    y = (x.to(device) * 3).sum()
    y.backward()
    assert x.grad.device == vb.device("cpu")
    np.testing.assert_allclose(x.grad.numpy(), [3.0, 3.0])


# ---------------------------------------------------------------- gradcheck, checked on itself
def test_gradcheck_passes_a_correct_gradient() -> None:
    x = vb.tensor(np.linspace(-1, 1, 5), dtype=vb.float64, requires_grad=True)
    assert vb.gradcheck(lambda a: (a * a).sin(), [x])


def test_gradcheck_catches_a_wrong_gradient() -> None:
    from vkblas.autograd import record

    def bad_square(a: vb.Tensor) -> vb.Tensor:
        out = (a * a).detach()
        return record(out, "BadSquareBackward", (a,), lambda n, g: (g * n.saved[0] * 3,), (a,))

    x = vb.tensor([0.5, -1.0, 2.0], dtype=vb.float64, requires_grad=True)
    with pytest.raises(AssertionError, match="gradcheck failed"):
        vb.gradcheck(bad_square, [x])
    assert vb.gradcheck(bad_square, [x], raise_exception=False) is False
