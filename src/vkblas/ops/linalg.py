"""Matrix products. The backend primitive takes >=2-D operands with equal batch shapes (broadcast by strides)."""

from __future__ import annotations

from ..autograd import Node, record
from ..backend.base import View
from ..tensor import Tensor, empty
from ._core import broadcast_shapes, expand_view, same_backend
from .autocast import lower
from .reduction import _raw_reduce
from .shape import _strides_for_view


def _matmul_nd(a: Tensor, b: Tensor) -> Tensor:
    if a.shape[-1] != b.shape[-2]:
        raise RuntimeError(
            f"mat1 and mat2 shapes cannot be multiplied ({'x'.join(map(str, a.shape))} and "
            f"{'x'.join(map(str, b.shape))})"
        )
    batch = () if len(a.shape) == 2 == len(b.shape) else broadcast_shapes(a.shape[:-2], b.shape[:-2], op="matmul")
    m, k, n = a.shape[-2], a.shape[-1], b.shape[-1]
    out = empty((*batch, m, n), a.dtype, a._backend)
    if out.numel():
        if k == 0:
            a._backend.elementwise("copy", out._view, [0.0])
        else:
            av: View = expand_view(a._view, (*batch, m, k))
            bv: View = expand_view(b._view, (*batch, k, n))
            a._backend.matmul(out._view, av, bv)

    def rule(node: Node, g: Tensor) -> tuple[Tensor | None, Tensor | None]:
        x, y = node.saved
        return (_matmul_nd(g, y.mT) if node.needs[0] else None, _grad_b(x, y, g) if node.needs[1] else None)

    return record(out, "MmBackward", (a, b), rule, (a, b))


def _grad_b(x: Tensor, y: Tensor, g: Tensor) -> Tensor:
    """``x^T g``, laid out as ``y``: for ``y`` the transpose of a contiguous matrix (``linear``'s ``weight.mT``),
    as ``(g^T x)^T``, so the weight's gradient arrives contiguous and becomes its ``.grad`` without a copy."""
    if y.ndim == 2 and not y._view.is_contiguous() and y._view.strides == (1, y.shape[0]):
        return _matmul_nd(g.mT, x).mT
    return _matmul_nd(x.mT, g)


def matmul(input: Tensor, other: Tensor) -> Tensor:  # noqa: A002
    if not isinstance(input, Tensor) or not isinstance(other, Tensor):
        raise TypeError("matmul: both operands must be Tensors")
    input, other = lower("matmul", input, other)  # noqa: A001 - under autocast: float16 operands
    same_backend("matmul", [input, other])
    if input.ndim == 0 or other.ndim == 0:
        raise RuntimeError(
            f"both arguments to matmul need to be at least 1D, but they are {input.ndim}D and {other.ndim}D"
        )
    if input.dtype is not other.dtype:  # PyTorch does not promote in matmul
        raise RuntimeError(
            f"expected m1 and m2 to have the same dtype, but got: {input.dtype!r} != {other.dtype!r} "
            f"(shapes {tuple(input.shape)} and {tuple(other.shape)})"
        )
    if not input.dtype.is_floating:
        raise RuntimeError(
            f"matmul is implemented for floating point dtypes only (got {input.dtype!r} and {other.dtype!r})"
        )
    a, b = input, other
    a2 = a.unsqueeze(0) if a.ndim == 1 else a
    b2 = b.unsqueeze(-1) if b.ndim == 1 else b
    rows = a2.numel() // a2.shape[-1] if a2.shape[-1] else 0
    if b2.ndim == 2 and a2.ndim > 2 and rows and _strides_for_view(a2._view, (rows, a2.shape[-1])) is not None:
        # (*, m, k) @ (k, n) as one GEMM of prod(*) * m rows (a view, no copy): larger tiles, and the gradient of
        # the matrix (a Linear layer's weight) is one product with K = prod(*) * m, not one per batch element that
        # a reduction then sums (that cost a GPT step 5 ms of reductions and slow K = 256 GEMMs on the H200)
        out = _matmul_nd(a2.reshape(rows, a2.shape[-1]), b2).reshape(*a2.shape[:-1], b2.shape[-1])
    else:
        out = _matmul_nd(a2, b2)
    if a.ndim == 1:
        out = out.squeeze(-2)
    if b.ndim == 1:
        out = out.squeeze(-1)
    return out


def linear(input: Tensor, weight: Tensor, bias: Tensor | None = None) -> Tensor:  # noqa: A002
    """``input @ weight.T + bias`` (input (*, k), weight (n, k), bias (n,)), checked by the caller. Operands of
    one dtype and device, with (*) foldable into rows without a copy, give one autograd node (PyTorch's addmm):
    the GEMM, the bias added in place, and a backward of two GEMMs and a column sum, each reading its operands
    where they lie. That is the arithmetic of the composition below (a transpose view, a matmul, a broadcast
    add), with one node and no views in between: a fraction of an eager step's host time."""
    x = input
    rows = x.numel() // x.shape[-1] if x.ndim and x.shape[-1] else 0
    if (
        rows
        and weight.ndim == 2
        and x.ndim >= 2
        and x.dtype is weight.dtype
        and x.dtype.is_floating
        and x._backend is weight._backend
        and (bias is None or (bias.dtype is x.dtype and bias._backend is x._backend and bias.shape == weight.shape[:1]))
    ):
        if x.ndim == 2:
            return _linear_node(x, weight, bias)
        if _strides_for_view(x._view, (rows, x.shape[-1])) is not None:
            return _linear_node(x.reshape(rows, x.shape[-1]), weight, bias).reshape(*x.shape[:-1], weight.shape[0])
    out = matmul(x, weight.mT)
    return out if bias is None else out + bias


def _linear_node(x: Tensor, w: Tensor, bias: Tensor | None) -> Tensor:
    backend = x._backend
    m, n = x.shape[0], w.shape[0]
    out = empty((m, n), x.dtype, backend)
    wv = w._view
    wt = View(wv.storage, wv.shape[::-1], wv.strides[::-1], wv.offset)
    if bias is None or not backend.matmul_bias(out._view, x._view, wt, bias._view):
        backend.matmul(out._view, x._view, wt)
        if bias is not None:
            backend.elementwise("add", out._view, [out._view, expand_view(bias._view, (m, n))])
    return record(out, "AddmmBackward", (x, w, bias), _linear_rule, (x, w))


def _linear_rule(node: Node, g: Tensor) -> tuple[Tensor | None, Tensor | None, Tensor | None]:
    # (the engine runs rules under no_grad: the transposed view and the column sum need no autograd layer)
    x, w = node.saved
    need_x, need_w, need_b = node.needs
    if need_w:
        gv = g._view
        gt = Tensor._make(View(gv.storage, gv.shape[::-1], gv.strides[::-1], gv.offset), g._backend)
    gw = gb = None
    if need_w and need_b and g.dtype is x.dtype:  # both from one GEMM: dY^T @ X, and dY^T's row sums beside it
        gw, gb = empty((gt.shape[0], x.shape[1]), g.dtype, g._backend), empty(gt.shape[:1], g.dtype, g._backend)
        if not g._backend.matmul_sum_rows(gw._view, gt._view, x._view, gb._view):
            gw = gb = None
    if need_w and gw is None:
        gw = _matmul_nd(gt, x)  # (n, k): contiguous, kept as the weight's .grad without a copy
    if need_b and gb is None:
        gb = _raw_reduce("sum", g, (0,), False)
    # the input gradient last: the op that uses it next (a ReLU's mask) can then join its GEMM's epilogue
    return (_matmul_nd(g, w) if need_x else None, gw, gb)


def mm(input: Tensor, mat2: Tensor) -> Tensor:  # noqa: A002
    if input.ndim != 2 or mat2.ndim != 2:
        raise RuntimeError(f"mm: expected 2D tensors, got {input.ndim}D and {mat2.ndim}D")
    return matmul(input, mat2)


def bmm(input: Tensor, mat2: Tensor) -> Tensor:  # noqa: A002
    if input.ndim != 3 or mat2.ndim != 3 or input.shape[0] != mat2.shape[0]:
        raise RuntimeError(f"bmm: expected 3D tensors with equal batch size, got {input.shape} and {mat2.shape}")
    return matmul(input, mat2)
