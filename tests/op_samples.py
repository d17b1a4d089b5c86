"""Sample inputs and float64 numpy references for the op table (``tests/op_table.py``).

Sample arguments are numpy arrays (tensor operands) or Python scalars; generators take a numpy ``Generator``."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np

import vkblas as vb

Rng = np.random.Generator


@dataclass(frozen=True)
class Sample:
    args: tuple[Any, ...]
    kwargs: dict[str, Any] = field(default_factory=dict)

    def describe(self) -> str:
        parts = [f"array{a.shape}:{a.dtype}" if isinstance(a, np.ndarray) else repr(a) for a in self.args]
        return f"({', '.join(parts)}{''.join(f', {k}={v!r}' for k, v in self.kwargs.items())})"


# ---------------------------------------------------------------- input generators
def uniform(rng: Rng, shape: tuple[int, ...], low: float = -2.0, high: float = 2.0) -> np.ndarray:
    return rng.uniform(low, high, shape)


def away(a: np.ndarray, points: tuple[float, ...] = (0.0,), gap: float = 0.1) -> np.ndarray:
    """``a`` with values closer than ``gap`` to a kink (of abs, relu, clamp ...) pushed ``gap`` away from it."""
    a = np.array(a, dtype=np.float64)
    for p in points:
        near = np.abs(a - p) < gap
        a[near] = p + np.where(a[near] >= p, gap, -gap)
    return a


def positive(rng: Rng, shape: tuple[int, ...]) -> np.ndarray:
    return uniform(rng, shape, 0.3, 3.0)


UNARY_SHAPES = [(), (7,), (3, 4), (2, 1, 3), (1, 1), (0, 3), (2, 0, 2)]
# (shape, shape) pairs that broadcast, with size-1 and empty dims; None stands for a Python scalar
BINARY_SHAPES = [
    ((3, 4), (3, 4)),
    ((3, 4), (4,)),
    ((2, 1, 3), (4, 1)),
    ((1,), (2, 3)),
    ((), (3,)),
    ((0, 3), (1, 3)),
    ((2, 0), (2, 1)),
    ((3, 2), None),
    (None, (2, 3)),
]


def unary_samples(make: Callable[[Rng, tuple[int, ...]], np.ndarray] = uniform, **kwargs: Any):
    def gen(rng: Rng) -> Iterator[Sample]:
        for shape in UNARY_SHAPES:
            yield Sample((make(rng, shape),), dict(kwargs))

    return gen


def binary_samples(
    make_a: Callable[[Rng, tuple[int, ...]], np.ndarray] = uniform,
    make_b: Callable[[Rng, tuple[int, ...]], np.ndarray] = uniform,
    scalars: tuple[Any, Any] = (1.5, -0.75),
):
    def gen(rng: Rng) -> Iterator[Sample]:
        for sa, sb in BINARY_SHAPES:
            a = scalars[0] if sa is None else make_a(rng, sa)
            b = scalars[1] if sb is None else make_b(rng, sb)
            yield Sample((a, b))

    return gen


def nonzero(rng: Rng, shape: tuple[int, ...]) -> np.ndarray:
    return away(uniform(rng, shape), gap=0.4)


def kinked(*points: float) -> Callable[[Rng, tuple[int, ...]], np.ndarray]:
    return lambda rng, shape: away(uniform(rng, shape), points)


def integral(rng: Rng, shape: tuple[int, ...]) -> np.ndarray:
    """Small whole numbers as floats: comparisons see ties."""
    return rng.integers(-2, 3, shape).astype(np.float64)


# ---------------------------------------------------------------- references
np_erf = np.vectorize(math.erf, otypes=[np.float64])


def np_sigmoid(x: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-x))


def np_gelu(x: np.ndarray) -> np.ndarray:
    return 0.5 * x * (1.0 + np_erf(x / math.sqrt(2.0)))


def np_gelu_tanh(x: np.ndarray) -> np.ndarray:
    return 0.5 * x * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x**3)))


def np_logsumexp(x: np.ndarray, axis: Any, keepdims: bool = False) -> np.ndarray:
    m = np.max(x, axis=axis, keepdims=True)
    out = np.log(np.sum(np.exp(x - m), axis=axis, keepdims=True)) + m
    return out if keepdims else np.squeeze(out, axis=axis)


def np_softmax(x: np.ndarray, dim: int) -> np.ndarray:
    e = np.exp(x - np.max(x, axis=dim, keepdims=True))
    return e / np.sum(e, axis=dim, keepdims=True)


def np_scatter_add(x: np.ndarray, dim: int, index: np.ndarray, src: np.ndarray) -> np.ndarray:
    out = x.copy()
    grids = list(np.indices(index.shape, sparse=True))
    grids[dim] = index
    np.add.at(out, tuple(grids), src[tuple(slice(0, n) for n in index.shape)])
    return out


def np_pow(a: Any, b: Any) -> np.ndarray:
    """PyTorch's pow: C's for floats; integers stay integers, and a negative integer exponent gives 1 for a base of
    1, +-1 for -1 (by parity), else 0 (numpy refuses it)."""
    a, b = np.asarray(a), np.asarray(b)
    if a.dtype.kind == "f" or b.dtype.kind == "f":
        return np.power(a, b)
    out = np.power(a, np.abs(b)).astype(np.result_type(a, b))
    parity = np.where(b % 2 == 0, 1, -1)
    return np.where(b >= 0, out, np.where(a == 1, 1, np.where(a == -1, parity, 0))).astype(out.dtype)


def axis_arg(dim: Any) -> Any:
    return tuple(dim) if isinstance(dim, list) else dim


# ---------------------------------------------------------------- samples of the structured ops
def nonempty_samples(rng: Rng) -> Iterator[Sample]:
    return (s for s in unary_samples()(rng) if s.args[0].size)


def reduction_samples(rng: Rng, empty_ok: bool = True, make: Any = None) -> Iterator[Sample]:
    make = make or uniform
    yield Sample((make(rng, (3, 4)),), {})
    yield Sample((make(rng, (3, 4)),), {"dim": 0})
    yield Sample((make(rng, (3, 4)),), {"dim": -1, "keepdim": True})
    yield Sample((make(rng, (2, 3, 4)),), {"dim": (0, 2)})
    yield Sample((make(rng, (2, 3, 4)),), {"dim": (1,), "keepdim": True})
    yield Sample((make(rng, (1, 5)),), {"dim": 0})
    yield Sample((make(rng, ()),), {})
    if empty_ok:
        yield Sample((make(rng, (0, 3)),), {"dim": 0})
        yield Sample((make(rng, (2, 0)),), {"dim": 0, "keepdim": True})


def one_dim_samples(rng: Rng) -> Iterator[Sample]:
    """Reductions over exactly one dim (max/min with dim, argmax, softmax ...)."""
    yield Sample((uniform(rng, (3, 4)),), {"dim": 0})
    yield Sample((uniform(rng, (3, 4)),), {"dim": 1, "keepdim": True})
    yield Sample((uniform(rng, (2, 3, 4)),), {"dim": -2})
    yield Sample((uniform(rng, (5,)),), {"dim": 0})
    yield Sample((uniform(rng, (1, 4)),), {"dim": 0, "keepdim": True})
    yield Sample((uniform(rng, (0, 3)),), {"dim": 1})


def var_samples(rng: Rng) -> Iterator[Sample]:
    yield Sample((uniform(rng, (3, 4)),), {})
    yield Sample((uniform(rng, (3, 4)),), {"dim": 1})
    yield Sample((uniform(rng, (2, 3, 4)),), {"dim": (0, 2), "keepdim": True})
    yield Sample((uniform(rng, (4, 3)),), {"dim": 0, "unbiased": False})
    yield Sample((uniform(rng, (5,)),), {"dim": -1, "correction": 0})


def matmul_samples(rng: Rng) -> Iterator[Sample]:
    for sa, sb in [
        ((3, 4), (4, 2)),
        ((4,), (4, 3)),
        ((3, 4), (4,)),
        ((4,), (4,)),
        ((2, 3, 4), (4, 5)),
        ((2, 1, 2, 3), (3, 3, 2)),
        ((3,), (2, 3, 2)),
        ((3, 0), (0, 2)),
        ((0, 4), (4, 2)),
        ((1, 1), (1, 1)),
    ]:
        yield Sample((uniform(rng, sa), uniform(rng, sb)))


def conv_samples(rng: Rng) -> Iterator[Sample]:
    x = uniform(rng, (1, 2, 5, 4))
    yield Sample((x, uniform(rng, (3, 2, 2, 2)), uniform(rng, (3,))))
    yield Sample((x, uniform(rng, (3, 2, 3, 2)), None), {"stride": 2, "padding": 1})
    yield Sample((x, uniform(rng, (4, 1, 2, 2)), uniform(rng, (4,))), {"groups": 2, "dilation": (1, 2)})


def pool_samples(rng: Rng) -> Iterator[Sample]:
    """(x, kernel, stride, padding); distinct values, so a window's maximum is unique."""
    x = rng.permutation(40).reshape(1, 2, 5, 4) / 10.0 - 2.0
    yield Sample((x, 2, 2, 0))
    yield Sample((x, 3, 2, 1))
    yield Sample((x, 2, 1, 1))


def reshape_samples(rng: Rng) -> Iterator[Sample]:
    yield Sample((uniform(rng, (3, 4)),), {"shape": (2, 6)})
    yield Sample((uniform(rng, (3, 4)),), {"shape": (-1,)})
    yield Sample((uniform(rng, (2, 3, 2)),), {"shape": (3, -1, 2)})
    yield Sample((uniform(rng, (1, 4)),), {"shape": (4, 1)})
    yield Sample((uniform(rng, ()),), {"shape": (1, 1)})
    yield Sample((uniform(rng, (0, 3)),), {"shape": (3, 0)})


def getitem_samples(rng: Rng) -> Iterator[Sample]:
    x = uniform(rng, (4, 3))
    for index in [
        1,
        -1,
        (slice(1, None), 2),
        (slice(None, None, 2),),
        (Ellipsis, 0),
        (None, slice(1, 3)),
        (slice(0, 0),),
        (slice(-3, -1), slice(None)),
        (2, -2),
    ]:
        yield Sample((x,), {"index": index})
    yield Sample((uniform(rng, (2, 3, 4)),), {"index": (slice(None), slice(1, 3), slice(None, None, 3))})


def index_array_samples(rng: Rng) -> Iterator[Sample]:
    """Integer-array indexing (a gather); repeated indices make the backward a scatter-add."""
    yield Sample((uniform(rng, (5, 3)), np.array([0, 2, 2, -1])))
    yield Sample((uniform(rng, (4,)), np.array([[3, 0], [1, 1]])))
    yield Sample((uniform(rng, (3, 4)), np.array([], dtype=np.int64)))
    yield Sample((uniform(rng, (2, 3, 4)), np.array([1, 1, 0])))


def gather_samples(rng: Rng) -> Iterator[Sample]:
    yield Sample((uniform(rng, (3, 4)), np.array([[0, 1, 1, 0], [2, 2, 0, 1]])), {"dim": 0})
    yield Sample((uniform(rng, (3, 4)), np.array([[3, 3], [0, 1], [2, 0]])), {"dim": 1})
    yield Sample((uniform(rng, (2, 3, 2)), rng.integers(0, 3, (2, 4, 2))), {"dim": -2})
    yield Sample((uniform(rng, (3, 2)), np.zeros((0, 2), dtype=np.int64)), {"dim": 0})


def scatter_add_samples(rng: Rng) -> Iterator[Sample]:
    yield Sample((uniform(rng, (3, 4)), np.array([[0, 1, 2, 0], [2, 2, 0, 1]]), uniform(rng, (2, 4))), {"dim": 0})
    yield Sample((uniform(rng, (3, 4)), np.array([[3, 3], [0, 1], [2, 0]]), uniform(rng, (3, 3))), {"dim": 1})


def cat_samples(rng: Rng) -> Iterator[Sample]:
    yield Sample((uniform(rng, (2, 3)), uniform(rng, (1, 3)), uniform(rng, (3, 3))), {"dim": 0})
    yield Sample((uniform(rng, (2, 3)), uniform(rng, (2, 1))), {"dim": -1})
    yield Sample((uniform(rng, (2, 0)), uniform(rng, (2, 2))), {"dim": 1})
    yield Sample((uniform(rng, (4,)),), {"dim": 0})


def stack_samples(rng: Rng) -> Iterator[Sample]:
    yield Sample((uniform(rng, (2, 3)), uniform(rng, (2, 3))), {"dim": 0})
    yield Sample((uniform(rng, (2, 3)), uniform(rng, (2, 3)), uniform(rng, (2, 3))), {"dim": -1})
    yield Sample((uniform(rng, ()), uniform(rng, ())), {"dim": 0})
    yield Sample((uniform(rng, (0, 2)),), {"dim": 1})


def split_samples(rng: Rng) -> Iterator[Sample]:
    yield Sample((uniform(rng, (5, 2)),), {"split": 2, "dim": 0})
    yield Sample((uniform(rng, (2, 6)),), {"split": [1, 3, 2], "dim": 1})
    yield Sample((uniform(rng, (3, 4)),), {"split": 4, "dim": -1})


def chunk_samples(rng: Rng) -> Iterator[Sample]:
    yield Sample((uniform(rng, (5, 2)),), {"chunks": 2, "dim": 0})
    yield Sample((uniform(rng, (2, 6)),), {"chunks": 3, "dim": 1})
    yield Sample((uniform(rng, (2, 3)),), {"chunks": 5, "dim": 1})


def where_samples(rng: Rng) -> Iterator[Sample]:
    yield Sample((rng.random((3, 4)) < 0.5, uniform(rng, (3, 4)), uniform(rng, (3, 4))))
    yield Sample((rng.random((3, 1)) < 0.5, uniform(rng, (4,)), uniform(rng, (2, 1, 1))))
    yield Sample((rng.random((2, 3)) < 0.5, uniform(rng, (2, 3)), 0.5))
    yield Sample((rng.random((2, 3)) < 0.5, -1.0, uniform(rng, (3,))))
    yield Sample((rng.random((0, 3)) < 0.5, uniform(rng, (0, 3)), uniform(rng, (1, 3))))


def masked_fill_samples(rng: Rng) -> Iterator[Sample]:
    yield Sample((uniform(rng, (3, 4)), rng.random((3, 4)) < 0.5), {"value": -2.5})
    yield Sample((uniform(rng, (3, 4)), rng.random((4,)) < 0.5), {"value": 0.0})
    yield Sample((uniform(rng, (2, 1, 3)), rng.random((2, 3)) < 0.5), {"value": 7.0})


def one_hot_samples(rng: Rng) -> Iterator[Sample]:
    yield Sample((np.array([0, 2, 1, 2]),), {"num_classes": 3})
    yield Sample((rng.integers(0, 4, (2, 3)),), {"num_classes": 5})
    yield Sample((np.array([[1, 0], [3, 2]]),), {})


def inplace_samples(rng: Rng) -> Iterator[Sample]:
    """(target, other): ``other`` broadcasts to the target's shape, or is a Python scalar."""
    for sa, sb in [((3, 4), (3, 4)), ((3, 4), (4,)), ((2, 1, 3), (1, 3)), ((0, 3), (3,)), ((2, 3), None)]:
        yield Sample((uniform(rng, sa), 1.25 if sb is None else away(uniform(rng, sb), gap=0.3)))


def clamp_samples(rng: Rng) -> Iterator[Sample]:
    for kw in [{"min": -0.5, "max": 0.75}, {"min": 0.2}, {"max": -0.1}]:
        points = tuple(v for v in kw.values())
        for shape in [(3, 4), (7,), ()]:
            yield Sample((away(uniform(rng, shape), points),), kw)


def expand_samples(rng: Rng) -> Iterator[Sample]:
    yield Sample((uniform(rng, (3, 1)),), {"shape": (3, 4)})
    yield Sample((uniform(rng, (4,)),), {"shape": (2, 3, 4)})
    yield Sample((uniform(rng, (1, 2)),), {"shape": (-1, 2)})
    yield Sample((uniform(rng, ()),), {"shape": (2, 2)})
    yield Sample((uniform(rng, (1, 3)),), {"shape": (0, 3)})


def repeat_samples(rng: Rng) -> Iterator[Sample]:
    yield Sample((uniform(rng, (2, 3)),), {"sizes": (2, 1)})
    yield Sample((uniform(rng, (3,)),), {"sizes": (2, 2)})
    yield Sample((uniform(rng, (2, 1)),), {"sizes": (1, 3, 2)})
    yield Sample((uniform(rng, (2, 2)),), {"sizes": (0, 1)})


def permute_samples(rng: Rng) -> Iterator[Sample]:
    yield Sample((uniform(rng, (2, 3, 4)),), {"dims": (2, 0, 1)})
    yield Sample((uniform(rng, (3, 4)),), {"dims": (1, 0)})
    yield Sample((uniform(rng, (2, 0, 3)),), {"dims": (-1, 0, 1)})


def transpose_samples(rng: Rng) -> Iterator[Sample]:
    yield Sample((uniform(rng, (2, 3, 4)),), {"dim0": 0, "dim1": 2})
    yield Sample((uniform(rng, (3, 4)),), {"dim0": -1, "dim1": 0})
    yield Sample((uniform(rng, (5,)),), {"dim0": 0, "dim1": 0})


def squeeze_samples(rng: Rng) -> Iterator[Sample]:
    yield Sample((uniform(rng, (1, 3, 1)),), {})
    yield Sample((uniform(rng, (1, 3, 1)),), {"dim": 0})
    yield Sample((uniform(rng, (1, 3, 1)),), {"dim": -1})
    yield Sample((uniform(rng, (2, 3)),), {"dim": 1})
    yield Sample((uniform(rng, (1, 0)),), {})


def unsqueeze_samples(rng: Rng) -> Iterator[Sample]:
    yield Sample((uniform(rng, (2, 3)),), {"dim": 0})
    yield Sample((uniform(rng, (2, 3)),), {"dim": -1})
    yield Sample((uniform(rng, (2, 3)),), {"dim": 1})
    yield Sample((uniform(rng, ()),), {"dim": 0})


def flatten_samples(rng: Rng) -> Iterator[Sample]:
    yield Sample((uniform(rng, (2, 3, 4)),), {})
    yield Sample((uniform(rng, (2, 3, 4)),), {"start_dim": 1})
    yield Sample((uniform(rng, (2, 3, 4)),), {"start_dim": 0, "end_dim": -2})
    yield Sample((uniform(rng, ()),), {})


def compare_samples(rng: Rng) -> Iterator[Sample]:
    yield from binary_samples(integral, integral, scalars=(1.0, 0.0))(rng)
    yield Sample((rng.integers(-2, 3, (3, 4)).astype(np.int32), rng.integers(-2, 3, (4,)).astype(np.int32)))
    yield Sample((rng.integers(-2, 3, (3,)).astype(np.int32), 1))


def logical_samples(rng: Rng) -> Iterator[Sample]:
    yield Sample((rng.random((3, 4)) < 0.5, rng.random((3, 4)) < 0.5))
    yield Sample((rng.random((2, 1)) < 0.5, rng.random((3,)) < 0.5))


def split_op(x: vb.Tensor, split: Any, dim: int) -> tuple[vb.Tensor, ...]:
    return vb.split(x, split, dim)


def np_split(x: np.ndarray, split: Any, dim: int) -> tuple[np.ndarray, ...]:
    n = x.shape[dim]
    sizes = [min(split, n - i) for i in range(0, n, split)] if isinstance(split, int) else split
    return tuple(np.split(x, np.cumsum(sizes)[:-1], axis=dim))


def np_chunk(x: np.ndarray, chunks: int, dim: int) -> tuple[np.ndarray, ...]:
    return np_split(x, -(-x.shape[dim] // chunks), dim)


def np_var(
    x: np.ndarray, dim: Any = None, keepdim: bool = False, unbiased: bool = True, correction: int | None = None
) -> np.ndarray:
    ddof = correction if correction is not None else int(unbiased)
    return np.var(x, axis=axis_arg(dim), ddof=ddof, keepdims=keepdim)


def np_arg(fn: Callable[..., np.ndarray]) -> Callable[..., np.ndarray]:
    return lambda x, dim, keepdim=False: fn(x, axis=dim, keepdims=keepdim).astype(np.int32)


def fresh(x: vb.Tensor) -> vb.Tensor:
    """A non-leaf copy to modify in place: autograd must then see through the in-place op."""
    return x.clone()


def inplace_ref(fn: Callable[[np.ndarray, Any], np.ndarray]) -> Callable[[np.ndarray, Any], np.ndarray]:
    """The reference of ``a.op_(b)``: the result broadcast to ``a``'s shape, in ``a``'s dtype."""
    return lambda a, b: np.broadcast_to(fn(a, b), a.shape).astype(a.dtype)


def iadd(x: vb.Tensor, y: Any) -> vb.Tensor:
    x += y
    return x


def np_flatten(x: np.ndarray, start: int, end: int) -> np.ndarray:
    if x.ndim == 0:
        return x.reshape(1)
    s, e = start % x.ndim, end % x.ndim
    return (
        x.reshape(x.shape[:s] + (-1,) + x.shape[e + 1 :])
        if x.size
        else x.reshape(x.shape[:s] + (int(np.prod(x.shape[s : e + 1])),) + x.shape[e + 1 :])
    )


def np_squeeze(x: np.ndarray, dim: int | None) -> np.ndarray:
    if dim is None:
        return np.squeeze(x)
    return np.squeeze(x, dim) if x.shape[dim] == 1 else x


def np_expand(x: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    lead = len(shape) - x.ndim
    target = tuple(x.shape[i - lead] if n == -1 else n for i, n in enumerate(shape))
    return np.broadcast_to(x, target).copy()


def np_one_hot(x: np.ndarray, num_classes: int) -> np.ndarray:
    n = int(x.max()) + 1 if num_classes < 0 else num_classes
    return (x[..., None] == np.arange(n)).astype(np.int32)


# ---------------------------------------------------------------- the integer ops and integer division (issue 9)
def int_pairs(rng: Rng, divisor: bool = False, shift: bool = False) -> Iterator[Sample]:
    """int32 operands with negatives, broadcasting and Python ints (nonzero divisors; shift amounts in -2..33)."""

    def rhs(shape: tuple[int, ...]) -> np.ndarray:
        if shift:
            return rng.integers(-2, 34, shape).astype(np.int32)
        v = rng.integers(-7, 8, shape).astype(np.int32)
        return np.where(v == 0, 3, v) if divisor else v

    big = np.array([2**31 - 1, -(2**31), 7, -7], np.int32)
    yield Sample((rng.integers(-50, 50, (3, 4)).astype(np.int32), rhs((3, 4))))
    yield Sample((rng.integers(-50, 50, (2, 3)).astype(np.int32), rhs((3,))))
    yield Sample((big, rhs((4,))))
    yield Sample((rng.integers(-50, 50, (0, 2)).astype(np.int32), rhs((2,))))
    yield Sample((rng.integers(-50, 50, (3,)).astype(np.int32), 3))
    yield Sample((-9, rhs((3,))))


def bool_pairs(rng: Rng) -> Iterator[Sample]:
    yield Sample((rng.random((3, 4)) < 0.5, rng.random((3, 4)) < 0.5))
    yield Sample((rng.random((2, 1)) < 0.5, True))


def divide_samples(rng: Rng) -> Iterator[Sample]:
    """Floats with x / y kept away from whole numbers (the gradients of fmod / remainder jump there), then ints."""
    for shape in [(3, 4), (5,), ()]:
        y = away(uniform(rng, shape), gap=0.5)
        x = np.asarray(y * (rng.integers(-3, 3, shape) + rng.uniform(0.2, 0.8, shape)))
        yield Sample((x, y))
    yield Sample((uniform(rng, (2, 3)), 0.75))
    yield Sample((np.array([5.5, -5.5, 7.0, -7.0]), np.array([3.0, 3.0, -2.0, -2.0])))


def np_remainder(a: Any, b: Any) -> np.ndarray:
    """PyTorch's remainder: C's fmod moved into the divisor's sign (numpy's % differs on signed zeros)."""
    r = np.fmod(a, b)
    return np.where((r != 0) & ((np.asarray(b) < 0) != (r < 0)), r + b, r)


def np_trunc_divide(a: Any, b: Any) -> np.ndarray:
    a, b = np.asarray(a), np.asarray(b)
    if a.dtype.kind == "f" or b.dtype.kind == "f":
        return np.trunc(a / b)
    q = np.floor_divide(a, b)
    return q + ((np.fmod(a, b) != 0) & ((a < 0) != (b < 0)))


def np_shift(fn: Callable[..., np.ndarray], fill_sign: bool) -> Callable[..., np.ndarray]:
    """Shifts by < 0 or >= 32 give 0 (left) or the sign (right), as PyTorch."""

    def ref(a: Any, b: Any) -> np.ndarray:
        a, b = np.asarray(a), np.asarray(b)
        ok = (b >= 0) & (b < 32)
        out = fn(a.astype(np.int64), np.where(ok, b, 0)).astype(np.int64)
        out = ((out + 2**31) % 2**32 - 2**31).astype(np.int32)  # wrap into int32
        spill = np.where(a < 0, -1, 0) if fill_sign else 0
        return np.where(ok, out, spill).astype(np.int32)

    return ref
