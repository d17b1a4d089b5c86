"""One entry per op: the vkblas callable, a float64 numpy reference, sample inputs and tolerances (PyTorch's OpInfo).

``tests/test_ops.py`` reads this table and checks, for every entry and device: values against the reference (in
the default float dtype and in every dtype of ``dtypes``), gradients against finite differences of vkblas and of the
reference, the device's float32 gradients against the cpu's float64 ones, non-contiguous inputs against contiguous
ones, and that ``error_inputs`` raise. Every public op must have an entry (the test fails otherwise); adding an op
means adding one ``OpInfo`` here.

Sample arguments are numpy arrays (tensor operands: float arrays become the device's float dtype, float16 arrays
float16, int arrays int32, bool arrays bool) or Python scalars, which are passed through unchanged. ``kwargs`` are
passed to both callables.
"""

from __future__ import annotations

import math
import operator
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np

import vkblas as vb
from references import conv_ref, pcg_normal, pcg_uniform, pool_ref

Rng = np.random.Generator
I32, F16, BOOL = vb.int32, vb.float16, vb.bool
NUMERIC = (I32, F16)
ANY = (I32, F16, BOOL)  # movement and indexing: any dtype


@dataclass(frozen=True)
class Sample:
    args: tuple[Any, ...]
    kwargs: dict[str, Any] = field(default_factory=dict)

    def describe(self) -> str:
        parts = [f"array{a.shape}:{a.dtype}" if isinstance(a, np.ndarray) else repr(a) for a in self.args]
        return f"({', '.join(parts)}{''.join(f', {k}={v!r}' for k, v in self.kwargs.items())})"


@dataclass(frozen=True)
class ErrorInput:
    """A sample the op must refuse: the exception type and a regex its message matches."""

    sample: Sample
    error: type[BaseException]
    match: str


@dataclass(frozen=True)
class OpInfo:
    name: str
    op: Callable[..., Any]
    ref: Callable[..., Any]
    samples: Callable[[Rng], Iterator[Sample]]
    differentiable: bool = True
    #: forward tolerances: cpu in float64, and float32 devices against the float64 reference
    atol: float = 1e-10
    rtol: float = 1e-7
    atol32: float = 2e-5
    rtol32: float = 2e-4
    #: gradcheck tolerances (float64, central differences), and float32 analytic vs float64 analytic gradients
    grad_atol: float = 1e-5
    grad_rtol: float = 1e-3
    grad_atol32: float = 1e-4
    grad_rtol32: float = 1e-3
    #: False for ops that only accept contiguous inputs (view)
    noncontiguous: bool = True
    #: dtypes the op takes besides the default float: the samples' float arrays converted (int32: rint(2x),
    #: bool: x > 0, float16: rounded); the result's dtype follows the reference's (float results of int inputs are
    #: float32, of float16 inputs float16)
    dtypes: tuple[vb.DType, ...] = ()
    #: int32 inputs compute in float (float32 result) where numpy and PyTorch keep ints (pow)
    int_to_float: bool = False
    #: inputs the op must refuse
    error_inputs: Callable[[Rng], Iterator[ErrorInput]] | None = None

    def _rng(self) -> Rng:
        return np.random.default_rng(zlib.crc32(self.name.encode()))

    def sample_list(self) -> list[Sample]:
        return list(self.samples(self._rng()))

    def error_list(self) -> list[ErrorInput]:
        return list(self.error_inputs(self._rng())) if self.error_inputs is not None else []


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
_erf = np.vectorize(math.erf, otypes=[np.float64])


def np_sigmoid(x: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-x))


def np_gelu(x: np.ndarray) -> np.ndarray:
    return 0.5 * x * (1.0 + _erf(x / math.sqrt(2.0)))


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


def _axis(dim: Any) -> Any:
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


def _split(x: vb.Tensor, split: Any, dim: int) -> tuple[vb.Tensor, ...]:
    return vb.split(x, split, dim)


def _np_split(x: np.ndarray, split: Any, dim: int) -> tuple[np.ndarray, ...]:
    n = x.shape[dim]
    sizes = [min(split, n - i) for i in range(0, n, split)] if isinstance(split, int) else split
    return tuple(np.split(x, np.cumsum(sizes)[:-1], axis=dim))


def _np_chunk(x: np.ndarray, chunks: int, dim: int) -> tuple[np.ndarray, ...]:
    return _np_split(x, -(-x.shape[dim] // chunks), dim)


def _np_var(
    x: np.ndarray, dim: Any = None, keepdim: bool = False, unbiased: bool = True, correction: int | None = None
) -> np.ndarray:
    ddof = correction if correction is not None else int(unbiased)
    return np.var(x, axis=_axis(dim), ddof=ddof, keepdims=keepdim)


def _np_arg(fn: Callable[..., np.ndarray]) -> Callable[..., np.ndarray]:
    return lambda x, dim, keepdim=False: fn(x, axis=dim, keepdims=keepdim).astype(np.int32)


def _fresh(x: vb.Tensor) -> vb.Tensor:
    """A non-leaf copy to modify in place: autograd must then see through the in-place op."""
    return x.clone()


def _inplace_ref(fn: Callable[[np.ndarray, Any], np.ndarray]) -> Callable[[np.ndarray, Any], np.ndarray]:
    """The reference of ``a.op_(b)``: the result broadcast to ``a``'s shape, in ``a``'s dtype."""
    return lambda a, b: np.broadcast_to(fn(a, b), a.shape).astype(a.dtype)


# ---------------------------------------------------------------- error inputs
def errors(*cases: tuple[tuple[Any, ...], dict[str, Any], type[BaseException], str]):
    """error_inputs from (args, kwargs, exception, message regex) rows."""
    return lambda rng: (ErrorInput(Sample(args, kwargs), exc, match) for args, kwargs, exc, match in cases)


_Z = np.zeros
BROADCAST_ERRORS = errors(((_Z((3, 4)), _Z((2, 4))), {}, RuntimeError, "cannot be broadcast"))
DIM_ERRORS = errors(((_Z((3, 4)),), {"dim": 2}, IndexError, "Dimension out of range"))
INPLACE_ERRORS = errors(((_Z((3,)), _Z((2, 3))), {}, RuntimeError, "doesn't match the broadcast shape"))


def _random_fill(method: str, **kw: Any) -> Callable[[vb.Tensor], vb.Tensor]:
    """``method`` on a copy of the input, from a generator seeded 11 (no global state touched)."""
    return lambda x: getattr(_fresh(x).detach(), method)(generator=vb.Generator(11), **kw)


def _float_ref(ref: Callable[..., np.ndarray]) -> Callable[..., np.ndarray]:
    """``ref`` computed in float64 and returned in its input's dtype (references that pad with -inf)."""
    return lambda x, *a, **kw: ref(x.astype(np.float64), *a, **kw).astype(x.dtype)


# ---------------------------------------------------------------- the table
def _unary(name: str, op: Callable[..., Any], ref: Callable[..., Any], make: Any = uniform, **kw: Any) -> OpInfo:
    return OpInfo(name, op, ref, unary_samples(make), **kw)


OPS: list[OpInfo] = [
    # --- pointwise unary
    _unary("neg", vb.neg, np.negative, dtypes=NUMERIC),
    _unary("neg (operator -x)", operator.neg, np.negative),
    _unary("exp", vb.exp, np.exp, dtypes=NUMERIC),
    _unary("log", vb.log, np.log, positive, dtypes=NUMERIC),
    _unary("sqrt", vb.sqrt, np.sqrt, positive, dtypes=NUMERIC),
    _unary("rsqrt", vb.rsqrt, lambda x: 1.0 / np.sqrt(x), positive, dtypes=NUMERIC),
    _unary("abs", vb.abs, np.abs, kinked(0.0), dtypes=ANY),
    _unary("sign", vb.sign, np.sign, kinked(0.0), dtypes=NUMERIC),
    _unary("sin", vb.sin, np.sin, dtypes=NUMERIC),
    _unary("cos", vb.cos, np.cos, dtypes=NUMERIC),
    _unary("tanh", vb.tanh, np.tanh, dtypes=NUMERIC),
    _unary("sigmoid", vb.sigmoid, np_sigmoid, dtypes=NUMERIC),
    _unary("relu", vb.relu, lambda x: np.maximum(x, 0), kinked(0.0), dtypes=NUMERIC),
    # exact gelu uses an erf approximation with |error| < 1.5e-7 (ops/elementwise.py)
    _unary(
        "gelu",
        vb.gelu,
        np_gelu,
        atol=1e-6,
        dtypes=NUMERIC,
        error_inputs=errors(((_Z(3),), {"approximate": "fast"}, ValueError, "approximate must be")),
    ),
    _unary("gelu_tanh", lambda x: vb.gelu(x, approximate="tanh"), np_gelu_tanh, dtypes=NUMERIC),
    _unary("silu", vb.silu, lambda x: x * np_sigmoid(x), dtypes=NUMERIC),
    _unary("square", vb.square, np.square, dtypes=NUMERIC),
    _unary("reciprocal", vb.reciprocal, np.reciprocal, nonzero, dtypes=(F16,)),
    OpInfo(
        "leaky_relu",
        vb.leaky_relu,
        lambda x, negative_slope=0.01: np.where(x > 0, x, x * negative_slope),
        lambda rng: (
            Sample((away(uniform(rng, s)),), kw) for s in [(3, 4), (5,), (0, 2)] for kw in [{}, {"negative_slope": 0.2}]
        ),
        dtypes=NUMERIC,
    ),
    OpInfo(
        "clamp",
        vb.clamp,
        lambda x, min=None, max=None: np.clip(x, min, max),  # noqa: A006
        clamp_samples,
        dtypes=NUMERIC,
        error_inputs=errors(((_Z(3),), {}, RuntimeError, "at least one of 'min' or 'max'")),
    ),
    OpInfo("clip", vb.clip, lambda x, min=None, max=None: np.clip(x, min, max), clamp_samples),  # noqa: A006
    # --- pointwise binary, with broadcasting and Python scalars on either side
    OpInfo("add", vb.add, np.add, binary_samples(), dtypes=NUMERIC, error_inputs=BROADCAST_ERRORS),
    OpInfo("add (operator +)", operator.add, np.add, binary_samples()),
    OpInfo(
        "add (alpha)",
        lambda a, b: vb.add(a, b, alpha=2.5),
        lambda a, b: a + 2.5 * b,
        lambda rng: (s for s in binary_samples()(rng) if isinstance(s.args[0], np.ndarray)),
    ),
    OpInfo("sub", vb.sub, np.subtract, binary_samples(), dtypes=NUMERIC, error_inputs=BROADCAST_ERRORS),
    OpInfo("sub (operator -)", operator.sub, np.subtract, binary_samples()),
    OpInfo("mul", vb.mul, np.multiply, binary_samples(), dtypes=NUMERIC, error_inputs=BROADCAST_ERRORS),
    OpInfo("mul (operator *)", operator.mul, np.multiply, binary_samples()),
    OpInfo("div", vb.div, np.divide, binary_samples(make_b=nonzero), dtypes=NUMERIC),
    OpInfo("div (operator /)", operator.truediv, np.divide, binary_samples(make_b=nonzero, scalars=(1.5, 4.0))),
    OpInfo(
        "pow", vb.pow, np.power, binary_samples(make_a=positive, scalars=(2.0, 3.0)), dtypes=NUMERIC, int_to_float=True
    ),
    OpInfo("pow (operator **)", operator.pow, np.power, binary_samples(make_a=positive, scalars=(0.5, 2.0))),
    OpInfo("atan2", vb.atan2, np.arctan2, binary_samples(make_a=nonzero, make_b=nonzero), dtypes=NUMERIC),
    OpInfo("maximum", vb.maximum, np.maximum, binary_samples(), dtypes=ANY),
    OpInfo("minimum", vb.minimum, np.minimum, binary_samples(), dtypes=ANY),
    OpInfo(
        "where",
        vb.where,
        np.where,
        where_samples,
        dtypes=ANY,
        error_inputs=errors(((True, _Z(3), _Z(3)), {}, TypeError, "condition must be a bool Tensor")),
    ),
    OpInfo(
        "masked_fill", vb.masked_fill, lambda x, m, value: np.where(m, value, x), masked_fill_samples, dtypes=NUMERIC
    ),
    # --- comparisons and logic give bool tensors
    *(
        OpInfo(name, fn, ref, compare_samples, differentiable=False, dtypes=ANY if "operator" not in name else ())
        for name, fn, ref in [
            ("eq", vb.eq, np.equal),
            ("ne", vb.ne, np.not_equal),
            ("lt", vb.lt, np.less),
            ("le", vb.le, np.less_equal),
            ("gt", vb.gt, np.greater),
            ("ge", vb.ge, np.greater_equal),
            ("eq (operator ==)", operator.eq, np.equal),
            ("lt (operator <)", operator.lt, np.less),
            ("ge (operator >=)", operator.ge, np.greater_equal),
        ]
    ),
    OpInfo("logical_and", vb.logical_and, np.logical_and, logical_samples, differentiable=False),
    OpInfo("logical_or", vb.logical_or, np.logical_or, logical_samples, differentiable=False),
    OpInfo(
        "logical_not",
        vb.logical_not,
        np.logical_not,
        lambda rng: (Sample((rng.random(s) < 0.5,)) for s in [(3, 4), (0,)]),
        differentiable=False,
    ),
    # --- reductions
    OpInfo(
        "sum",
        vb.sum,
        lambda x, dim=None, keepdim=False: np.sum(x, axis=_axis(dim), keepdims=keepdim),
        reduction_samples,
        dtypes=ANY,
        error_inputs=DIM_ERRORS,
    ),
    OpInfo(
        "mean",
        vb.mean,
        lambda x, dim=None, keepdim=False: np.mean(x, axis=_axis(dim), keepdims=keepdim),
        lambda rng: reduction_samples(rng, empty_ok=False),
        dtypes=(F16,),
        error_inputs=errors(((np.zeros(3, np.int32),), {}, RuntimeError, "could not infer output dtype")),
    ),
    OpInfo("var", vb.var, _np_var, var_samples, dtypes=(F16,)),
    OpInfo("std", vb.std, lambda x, **kw: np.sqrt(_np_var(x, **kw)), var_samples, dtypes=(F16,)),
    OpInfo(
        "max (all)",
        vb.max,
        np.max,
        nonempty_samples,
        dtypes=NUMERIC,
        error_inputs=errors(((_Z((0, 3)),), {}, RuntimeError, "numel\\(\\) == 0")),
    ),
    OpInfo("min (all)", vb.min, np.min, nonempty_samples, dtypes=NUMERIC),
    OpInfo(
        "max (dim)",
        lambda x, dim, keepdim=False: vb.max(x, dim, keepdim).values,
        lambda x, dim, keepdim=False: np.max(x, axis=dim, keepdims=keepdim),
        lambda rng: (s for s in one_dim_samples(rng) if s.args[0].size),
        dtypes=NUMERIC,
        error_inputs=errors(((_Z((0, 3)),), {"dim": 0}, IndexError, "non-zero size")),
    ),
    OpInfo(
        "min (dim)",
        lambda x, dim, keepdim=False: vb.min(x, dim, keepdim).values,
        lambda x, dim, keepdim=False: np.min(x, axis=dim, keepdims=keepdim),
        lambda rng: (s for s in one_dim_samples(rng) if s.args[0].size),
        dtypes=NUMERIC,
    ),
    OpInfo(
        "max (dim) indices",
        lambda x, dim, keepdim=False: vb.max(x, dim, keepdim).indices,
        _np_arg(np.argmax),
        lambda rng: (s for s in one_dim_samples(rng) if s.args[0].size),
        differentiable=False,
    ),
    OpInfo(
        "amax",
        vb.amax,
        lambda x, dim=None, keepdim=False: np.max(x, axis=_axis(dim), keepdims=keepdim),
        lambda rng: reduction_samples(rng, empty_ok=False),
        dtypes=NUMERIC,
    ),
    OpInfo(
        "amin",
        vb.amin,
        lambda x, dim=None, keepdim=False: np.min(x, axis=_axis(dim), keepdims=keepdim),
        lambda rng: reduction_samples(rng, empty_ok=False),
        dtypes=NUMERIC,
    ),
    # (all/any of an empty tensor raise here; PyTorch gives True/False: not sampled)
    OpInfo(
        "all",
        vb.all,
        lambda x, dim=None, keepdim=False: np.all(x, axis=_axis(dim), keepdims=keepdim),
        lambda rng: reduction_samples(rng, empty_ok=False, make=integral),
        differentiable=False,
        dtypes=ANY,
    ),
    OpInfo(
        "any",
        vb.any,
        lambda x, dim=None, keepdim=False: np.any(x, axis=_axis(dim), keepdims=keepdim),
        lambda rng: reduction_samples(rng, empty_ok=False, make=integral),
        differentiable=False,
        dtypes=ANY,
    ),
    OpInfo("argmax", vb.argmax, _np_arg(np.argmax), one_dim_samples, differentiable=False, dtypes=NUMERIC),
    OpInfo("argmin", vb.argmin, _np_arg(np.argmin), one_dim_samples, differentiable=False, dtypes=NUMERIC),
    OpInfo(
        "argmax (flat)",
        vb.argmax,
        lambda x: np.argmax(x).astype(np.int32),
        lambda rng: (Sample((uniform(rng, s),)) for s in [(3, 4), (5,), (2, 1, 3)]),
        differentiable=False,
    ),
    OpInfo(
        "logsumexp",
        vb.logsumexp,
        lambda x, dim, keepdim=False: np_logsumexp(x, _axis(dim), keepdim),
        lambda rng: (s for s in reduction_samples(rng, empty_ok=False) if "dim" in s.kwargs),
        dtypes=(F16,),
    ),
    OpInfo(
        "softmax",
        vb.softmax,
        np_softmax,
        lambda rng: (s for s in one_dim_samples(rng) if "keepdim" not in s.kwargs),
        dtypes=NUMERIC,
        error_inputs=DIM_ERRORS,
    ),
    OpInfo(
        "log_softmax",
        vb.log_softmax,
        lambda x, dim: np.log(np_softmax(x, dim)),
        lambda rng: (s for s in one_dim_samples(rng) if "keepdim" not in s.kwargs),
        dtypes=NUMERIC,
    ),
    # --- linear algebra
    OpInfo(
        "matmul",
        vb.matmul,
        np.matmul,
        matmul_samples,
        dtypes=(F16,),
        error_inputs=errors(
            ((_Z((3, 4)), _Z((3, 4))), {}, RuntimeError, "cannot be multiplied"),
            ((_Z((2, 3, 4)), _Z((3, 4, 2))), {}, RuntimeError, "cannot be broadcast"),
            ((np.zeros((2, 2), np.int32), np.zeros((2, 2), np.int32)), {}, RuntimeError, "floating point dtypes"),
            ((_Z(()), _Z((2,))), {}, RuntimeError, "at least 1D"),
        ),
    ),
    OpInfo("matmul (operator @)", operator.matmul, np.matmul, matmul_samples),
    OpInfo(
        "mm",
        vb.mm,
        np.matmul,
        lambda rng: (Sample((uniform(rng, (3, 4)), uniform(rng, (4, 2)))),),
        error_inputs=errors(((_Z((3,)), _Z((3, 2))), {}, RuntimeError, "expected 2D tensors")),
    ),
    OpInfo(
        "bmm",
        vb.bmm,
        np.matmul,
        lambda rng: (Sample((uniform(rng, (2, 3, 4)), uniform(rng, (2, 4, 2)))),),
        error_inputs=errors(((_Z((2, 3, 4)), _Z((3, 4, 2))), {}, RuntimeError, "equal batch size")),
    ),
    # --- convolution and pooling (references: loops over output pixels)
    OpInfo(
        "conv2d",
        lambda x, w, b, **kw: vb.conv2d(x, w, b, **kw),
        lambda x, w, b, **kw: conv_ref(x, w, b, **kw),
        conv_samples,
        dtypes=(F16,),
        error_inputs=errors(((_Z((1, 3, 5, 5)), _Z((2, 2, 3, 3)), None), {}, ValueError, "channels")),
    ),
    OpInfo(
        "max_pool2d",
        lambda x, k, s, p, **kw: vb.max_pool2d(x, k, s, p, **kw),
        _float_ref(lambda x, k, s, p: pool_ref(x, k, s, p, "max")),
        pool_samples,
        dtypes=NUMERIC,
        error_inputs=errors(((_Z((1, 1, 4, 4)), 2, 2, 0), {"ceil_mode": True}, NotImplementedError, "ceil_mode")),
    ),
    OpInfo(
        "avg_pool2d",
        lambda x, k, s, p, **kw: vb.avg_pool2d(x, k, s, p, **kw),
        lambda x, k, s, p, count_include_pad=True: pool_ref(x, k, s, p, "avg", count_include_pad),
        lambda rng: (Sample(s.args, kw) for s in pool_samples(rng) for kw in ({}, {"count_include_pad": False})),
        dtypes=(F16,),
    ),
    # --- movement
    OpInfo(
        "reshape",
        lambda x, shape: x.reshape(shape),
        lambda x, shape: x.reshape(shape),
        reshape_samples,
        dtypes=ANY,
        error_inputs=errors(((_Z((3, 4)),), {"shape": (5, -1)}, RuntimeError, "is invalid for input of size")),
    ),
    OpInfo(
        "view",
        lambda x, shape: x.view(shape),
        lambda x, shape: x.reshape(shape),
        reshape_samples,
        noncontiguous=False,
        dtypes=ANY,
    ),
    OpInfo(
        "view_as",
        lambda x, y: x.view_as(y),
        lambda x, y: x.reshape(y.shape),
        lambda rng: (Sample((uniform(rng, (3, 4)), uniform(rng, s))) for s in [(2, 6), (12,), (2, 2, 3)]),
        noncontiguous=False,
        dtypes=ANY,
    ),
    OpInfo(
        "flatten",
        vb.flatten,
        lambda x, start_dim=0, end_dim=-1: _np_flatten(x, start_dim, end_dim),
        flatten_samples,
        dtypes=ANY,
    ),
    OpInfo("squeeze", vb.squeeze, lambda x, dim=None: _np_squeeze(x, dim), squeeze_samples, dtypes=ANY),
    OpInfo("unsqueeze", vb.unsqueeze, lambda x, dim: np.expand_dims(x, dim), unsqueeze_samples, dtypes=ANY),
    OpInfo(
        "permute",
        lambda x, dims: x.permute(*dims),
        lambda x, dims: np.transpose(x, dims),
        permute_samples,
        dtypes=ANY,
        error_inputs=errors(((_Z((2, 3)),), {"dims": (0, 0)}, RuntimeError, "not a permutation")),
    ),
    OpInfo(
        "transpose",
        vb.transpose,
        lambda x, dim0, dim1: np.swapaxes(x, dim0, dim1),
        transpose_samples,
        dtypes=ANY,
        error_inputs=errors(((_Z((2, 3)),), {"dim0": 0, "dim1": 2}, IndexError, "Dimension out of range")),
    ),
    OpInfo(
        "t",
        vb.t,
        np.transpose,
        lambda rng: (Sample((uniform(rng, s),)) for s in [(3, 4), (5,), ()]),
        dtypes=ANY,
        error_inputs=errors(((_Z((2, 3, 4)),), {}, RuntimeError, "<= 2 dimensions")),
    ),
    OpInfo(".T", lambda x: x.T, lambda x: x.T, unary_samples(), dtypes=ANY),
    OpInfo(
        "expand",
        lambda x, shape: x.expand(*shape),
        lambda x, shape: _np_expand(x, shape),
        expand_samples,
        dtypes=ANY,
        error_inputs=errors(((_Z((2, 3)),), {"shape": (4, 3)}, RuntimeError, "must match the existing size")),
    ),
    OpInfo(
        "expand_as",
        lambda x, y: x.expand_as(y),
        lambda x, y: np.broadcast_to(x, y.shape).copy(),
        lambda rng: (Sample((uniform(rng, a), uniform(rng, b))) for a, b in [((3, 1), (2, 3, 4)), ((4,), (3, 4))]),
        dtypes=ANY,
    ),
    OpInfo("repeat", lambda x, sizes: x.repeat(*sizes), lambda x, sizes: np.tile(x, sizes), repeat_samples, dtypes=ANY),
    OpInfo(
        "cat",
        lambda *xs, dim: vb.cat(list(xs), dim),
        lambda *xs, dim: np.concatenate(xs, axis=dim),
        cat_samples,
        dtypes=ANY,
        error_inputs=errors(((_Z((2, 3)), _Z((2, 4))), {"dim": 0}, RuntimeError, "sizes of tensors must match")),
    ),
    OpInfo(
        "stack",
        lambda *xs, dim: vb.stack(list(xs), dim),
        lambda *xs, dim: np.stack(xs, axis=dim),
        stack_samples,
        dtypes=ANY,
        error_inputs=errors(((_Z((2, 3)), _Z((3, 2))), {"dim": 0}, RuntimeError, "equal size")),
    ),
    OpInfo(
        "split",
        _split,
        _np_split,
        split_samples,
        dtypes=ANY,
        error_inputs=errors(((_Z((5, 2)),), {"split": [2, 2], "dim": 0}, RuntimeError, "sum exactly to 5")),
    ),
    OpInfo("chunk", vb.chunk, _np_chunk, chunk_samples, dtypes=ANY),
    OpInfo(
        "unbind",
        vb.unbind,
        lambda x, dim=0: tuple(np.moveaxis(x, dim, 0)),
        lambda rng: (Sample((uniform(rng, (3, 2)),), {"dim": d}) for d in (0, 1)),
        dtypes=ANY,
    ),
    OpInfo(
        "narrow",
        vb.narrow,
        lambda x, dim, start, length: np.take(x, range(start, start + length), axis=dim),
        lambda rng: (
            Sample((uniform(rng, (4, 3)),), kw)
            for kw in [{"dim": 0, "start": 1, "length": 2}, {"dim": -1, "start": 0, "length": 3}]
        ),
        dtypes=ANY,
    ),
    OpInfo("clone", vb.clone, np.copy, unary_samples(), dtypes=ANY),
    OpInfo("contiguous", vb.contiguous, np.copy, unary_samples(), dtypes=ANY),
    OpInfo(
        "to",
        lambda x, dtype: x.to(dtype),
        lambda x, dtype: x.astype(dtype.np),
        lambda rng: (Sample((uniform(rng, s),), {"dtype": d}) for s in [(3, 4), (0,)] for d in (vb.int32, vb.bool)),
        differentiable=False,
        dtypes=ANY,
    ),
    # --- indexing
    OpInfo(
        "getitem (basic)",
        lambda x, index: x[index],
        lambda x, index: x[index],
        getitem_samples,
        dtypes=ANY,
        error_inputs=errors(
            ((_Z((4, 3)),), {"index": (0, 0, 0)}, IndexError, "too many indices"),
            ((_Z((4, 3)),), {"index": 4}, IndexError, "out of bounds"),
        ),
    ),
    OpInfo(
        "getitem (int array)",
        lambda x, i: x[i],
        lambda x, i: x[i],
        index_array_samples,
        dtypes=ANY,
        error_inputs=errors(((_Z((4, 3)), np.array([0, 4])), {}, IndexError, "out of bounds")),
    ),
    OpInfo(
        "getitem (two int arrays)",
        lambda x, i, j: x[i, :, j],
        lambda x, i, j: x[i, :, j],
        lambda rng: (Sample((uniform(rng, (3, 2, 4)), np.array([0, 2, -1]), np.array([[3], [0]]))),),
    ),
    OpInfo(
        "getitem (bool mask)",
        lambda x, m: x[m],
        lambda x, m: x[m],
        lambda rng: (
            Sample((uniform(rng, (3, 4)), rng.random((3, 4)) < 0.5)),
            Sample((uniform(rng, (3, 2)), np.array([True, False, True]))),
        ),
        dtypes=ANY,
    ),
    OpInfo(
        "gather",
        lambda x, i, dim: vb.gather(x, dim, i),
        lambda x, i, dim: np.take_along_axis(x, i, dim),
        gather_samples,
        dtypes=ANY,
        error_inputs=errors(
            ((_Z((3, 4)), np.array([[0, 3]])), {"dim": 0}, IndexError, "out of bounds"),
            ((_Z((3, 4)), np.array([0, 1])), {"dim": 0}, RuntimeError, "same number of dimensions"),
        ),
    ),
    OpInfo(
        "scatter_add",
        lambda x, i, s, dim: vb.scatter_add(x, dim, i, s),
        lambda x, i, s, dim: np_scatter_add(x, dim, i, s),
        scatter_add_samples,
        dtypes=(I32,),  # float16 has no atomics on Vulkan
        error_inputs=errors(((_Z((3, 4)), np.array([[5]]), _Z((1, 1))), {"dim": 0}, IndexError, "out of bounds")),
    ),
    OpInfo(
        "index_select",
        lambda x, i, dim: vb.index_select(x, dim, i),
        lambda x, i, dim: np.take(x, i, axis=dim),
        lambda rng: (Sample((uniform(rng, (3, 4)), np.array([2, 0, 2])), {"dim": d}) for d in (0, 1)),
        dtypes=ANY,
        error_inputs=errors(
            ((_Z((3, 4)), np.array([[0]])), {"dim": 0}, IndexError, "supposed to be a vector"),
            ((_Z((3, 4)), np.array([-4])), {"dim": 0}, IndexError, "out of bounds"),
        ),
    ),
    OpInfo(
        "one_hot",
        vb.one_hot,
        lambda x, num_classes=-1: _np_one_hot(x, num_classes),
        one_hot_samples,
        differentiable=False,
        error_inputs=errors(
            ((_Z(3),), {"num_classes": 3}, RuntimeError, "only applicable to index tensor"),
            ((np.array([0, 3]),), {"num_classes": 3}, IndexError, "out of bounds"),
        ),
    ),
    # --- in place, on a non-leaf copy (so autograd has to see through them)
    OpInfo(
        "add_",
        lambda x, y: _fresh(x).add_(y),
        _inplace_ref(np.add),
        inplace_samples,
        dtypes=(F16,),
        error_inputs=INPLACE_ERRORS,
    ),
    OpInfo("add_ (operator +=)", lambda x, y: _iadd(_fresh(x), y), _inplace_ref(np.add), inplace_samples),
    OpInfo("sub_", lambda x, y: _fresh(x).sub_(y), _inplace_ref(np.subtract), inplace_samples, dtypes=(F16,)),
    OpInfo("mul_", lambda x, y: _fresh(x).mul_(y), _inplace_ref(np.multiply), inplace_samples, dtypes=(F16,)),
    OpInfo("div_", lambda x, y: _fresh(x).div_(y), _inplace_ref(np.divide), inplace_samples, dtypes=(F16,)),
    OpInfo(
        "pow_",
        lambda x, y: _fresh(x).pow_(y),
        _inplace_ref(np.power),
        lambda rng: (Sample((positive(rng, s.args[0].shape), s.args[1])) for s in inplace_samples(rng)),
        dtypes=(F16,),
    ),
    _unary("exp_", lambda x: _fresh(x).exp_(), np.exp, dtypes=(F16,)),
    _unary("neg_", lambda x: _fresh(x).neg_(), np.negative, dtypes=NUMERIC),
    _unary("sqrt_", lambda x: _fresh(x).sqrt_(), np.sqrt, positive, dtypes=(F16,)),
    _unary("relu_", lambda x: _fresh(x).relu_(), lambda x: np.maximum(x, 0), kinked(0.0), dtypes=NUMERIC),
    OpInfo(
        "copy_",
        lambda x, y: _fresh(x).copy_(y),
        _inplace_ref(lambda a, b: np.broadcast_to(b, a.shape)),
        lambda rng: (s for s in inplace_samples(rng) if isinstance(s.args[1], np.ndarray)),
        dtypes=ANY,
        error_inputs=INPLACE_ERRORS,
    ),
    OpInfo(
        "fill_",
        lambda x, value: _fresh(x).fill_(value),
        lambda x, value: np.full_like(x, value),
        lambda rng: (Sample((uniform(rng, s),), {"value": 2.5}) for s in [(3, 4), (), (0, 2)]),
        dtypes=NUMERIC,
    ),
    OpInfo("zero_", lambda x: _fresh(x).zero_(), np.zeros_like, unary_samples(), dtypes=ANY),
    OpInfo(
        "masked_fill_",
        lambda x, m, value: _fresh(x).masked_fill_(m, value),
        lambda x, m, value: np.where(m, value, x).astype(x.dtype),
        lambda rng: (s for s in masked_fill_samples(rng) if np.broadcast(*s.args).shape == s.args[0].shape),
        dtypes=NUMERIC,
    ),
    OpInfo(
        "clamp_",
        lambda x, **kw: _fresh(x).clamp_(**kw),
        lambda x, min=None, max=None: np.clip(x, min, max),  # noqa: A006
        clamp_samples,
        dtypes=(F16,),
    ),
    # optimizer helpers: no autograd
    OpInfo(
        "lerp_",
        lambda x, y: _fresh(x).lerp_(y, 0.3),
        _inplace_ref(lambda a, b: a + 0.3 * (b - a)),
        inplace_samples,
        differentiable=False,
        dtypes=(F16,),
    ),
    OpInfo(
        "addcmul_",
        lambda x, a, b: _fresh(x).addcmul_(a, b, value=0.5),
        lambda x, a, b: x + 0.5 * a * b,
        lambda rng: (Sample((uniform(rng, (3, 4)), uniform(rng, s), uniform(rng, (3, 4)))) for s in [(3, 4), (4,)]),
        differentiable=False,
        dtypes=(F16,),
    ),
    OpInfo(
        "addcdiv_",
        lambda x, a, b: _fresh(x).addcdiv_(a, b, value=0.5),
        lambda x, a, b: x + 0.5 * a / b,
        lambda rng: (Sample((uniform(rng, (3, 4)), uniform(rng, s), nonzero(rng, (3, 4)))) for s in [(3, 4), (4,)]),
        differentiable=False,
        dtypes=(F16,),
    ),
    # random fills: the counter-based generator against its documented formula (references.py)
    OpInfo(
        "uniform_",
        _random_fill("uniform_"),
        lambda x: pcg_uniform(x.shape, 11),
        unary_samples(),
        differentiable=False,
        dtypes=(F16,),
    ),
    OpInfo(
        "uniform_ (bounds)",
        _random_fill("uniform_", a=-1.0, b=2.0),
        lambda x: -1.0 + 3.0 * pcg_uniform(x.shape, 11),
        unary_samples(),
        differentiable=False,
    ),
    OpInfo(
        "normal_",
        _random_fill("normal_", mean=0.5, std=2.0),
        lambda x: 0.5 + 2.0 * pcg_normal(x.shape, 11),
        unary_samples(),
        differentiable=False,
        atol32=1e-4,
        dtypes=(F16,),
    ),
    OpInfo(
        "bernoulli_",
        _random_fill("bernoulli_", p=0.3),
        lambda x: (pcg_uniform(x.shape, 11) < 0.3).astype(np.float64),
        unary_samples(),
        differentiable=False,
        dtypes=(F16,),
    ),
]


def _iadd(x: vb.Tensor, y: Any) -> vb.Tensor:
    x += y
    return x


def _np_flatten(x: np.ndarray, start: int, end: int) -> np.ndarray:
    if x.ndim == 0:
        return x.reshape(1)
    s, e = start % x.ndim, end % x.ndim
    return (
        x.reshape(x.shape[:s] + (-1,) + x.shape[e + 1 :])
        if x.size
        else x.reshape(x.shape[:s] + (int(np.prod(x.shape[s : e + 1])),) + x.shape[e + 1 :])
    )


def _np_squeeze(x: np.ndarray, dim: int | None) -> np.ndarray:
    if dim is None:
        return np.squeeze(x)
    return np.squeeze(x, dim) if x.shape[dim] == 1 else x


def _np_expand(x: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    lead = len(shape) - x.ndim
    target = tuple(x.shape[i - lead] if n == -1 else n for i, n in enumerate(shape))
    return np.broadcast_to(x, target).copy()


def _np_one_hot(x: np.ndarray, num_classes: int) -> np.ndarray:
    n = int(x.max()) + 1 if num_classes < 0 else num_classes
    return (x[..., None] == np.arange(n)).astype(np.int32)


BY_NAME = {info.name: info for info in OPS}
assert len(BY_NAME) == len(OPS), "op names must be unique"
