"""OpInfo entries of the scans (``cumsum``, ``cumprod``) and ``prod``, sorting (``sort``, ``argsort``, ``topk``),
``multinomial``, the rearranging ops (``flip``, ``roll``, ``tril``/``triu``, ``diagonal``, ``Tensor.unfold``,
``repeat_interleave``), ``einsum``, and the scatters (``scatter``, ``scatter_reduce``, ``index_add`` / ``_copy`` /
``_fill``, ``masked_scatter``, ``nonzero``) with their in-place methods; ``tests/op_table.py`` appends them.

References are numpy in float64. Samples avoid ties where an op's result or gradient would depend on how they break
(sorted values, amax), and duplicate indices where PyTorch leaves the winner open (``scatter``, ``index_copy``)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

import vkblas as vb
from op_samples import Sample, fresh, uniform
from opinfo import _Z, ANY, F16, I32, NUMERIC, OpInfo, errors
from references import pcg_uniform

Rng = np.random.Generator
I = np.int32  # noqa: E741


# ---------------------------------------------------------------- references
def np_prod(x: np.ndarray, dim: int | None = None, keepdim: bool = False) -> np.ndarray:
    out = np.prod(x, axis=dim, keepdims=keepdim and dim is not None)
    return out.astype(np.int32) if x.dtype.kind in "iub" else out


def np_scan(fn: Callable[..., np.ndarray]) -> Callable[..., np.ndarray]:
    def ref(x: np.ndarray, dim: int) -> np.ndarray:
        out = fn(x, axis=dim if x.ndim else None).reshape(x.shape)
        return out.astype(np.int32) if x.dtype.kind in "iub" else out

    return ref


def np_sort(x: np.ndarray, dim: int = -1, descending: bool = False) -> tuple[np.ndarray, np.ndarray]:
    idx = np.argsort(-x if descending else x, axis=dim, kind="stable")
    return np.take_along_axis(x, idx, dim), idx.astype(I)


def np_topk(x: np.ndarray, k: int, dim: int = -1, largest: bool = True) -> tuple[np.ndarray, np.ndarray]:
    values, idx = np_sort(x, dim, descending=largest)
    return np.take(values, range(k), dim), np.take(idx, range(k), dim)


def np_multinomial(w: np.ndarray, num_samples: int, replacement: bool = False) -> np.ndarray:
    """The documented algorithm with the generator's uniforms (seed 11): cdf counting with replacement, the
    largest Efraimidis-Spirakis keys log(u)/w without."""
    w2 = w.reshape(-1, w.shape[-1])
    if replacement:
        u = pcg_uniform((w2.shape[0], num_samples), 11)
        cdf = np.cumsum(w2, -1)
        out = (cdf[:, None, :] <= (u * cdf[:, -1:])[..., None]).sum(-1)
    else:
        with np.errstate(divide="ignore"):
            keys = np.log(pcg_uniform(w2.shape, 11)) / w2
        out = np.argsort(-keys, -1, kind="stable")[:, :num_samples]
    return out.reshape(w.shape[:-1] + (num_samples,)).astype(I)


def np_unfold(x: np.ndarray, dimension: int, size: int, step: int) -> np.ndarray:
    if x.ndim == 0:
        return np.broadcast_to(x, (size,)).copy()
    dimension %= x.ndim
    win = np.lib.stride_tricks.sliding_window_view(x, size, axis=dimension)
    return np.take(win, range(0, win.shape[dimension], step), dimension)


def np_scatter(x: np.ndarray, dim: int, index: np.ndarray, src: Any) -> np.ndarray:
    out = x.copy()
    grids = list(np.indices(index.shape, sparse=True))
    grids[dim] = index
    out[tuple(grids)] = src[tuple(slice(0, n) for n in index.shape)] if isinstance(src, np.ndarray) else src
    return out


_UFUNC = {"sum": np.add, "prod": np.multiply, "mean": np.add, "amax": np.maximum, "amin": np.minimum}
_START = {"sum": 0.0, "prod": 1.0, "mean": 0.0, "amax": -np.inf, "amin": np.inf}


def np_scatter_reduce(
    x: np.ndarray, dim: int, index: np.ndarray, src: np.ndarray, reduce: str, include_self: bool = True
) -> np.ndarray:
    grids = list(np.indices(index.shape, sparse=True))
    grids[dim] = index
    where = tuple(grids)
    s = src[tuple(slice(0, n) for n in index.shape)]
    hit = np.zeros(x.shape, bool)
    hit[where] = True
    out = x.astype(np.float64).copy()
    if not include_self:
        out[hit] = _START[reduce]
    _UFUNC[reduce].at(out, where, s)
    if reduce == "mean":
        count = np.zeros(x.shape)
        np.add.at(count, where, 1.0)
        out = np.where(hit, out / np.maximum(count + (1 if include_self else 0), 1), out)
    return out.astype(x.dtype)


def np_index_add(x: np.ndarray, dim: int, index: np.ndarray, source: np.ndarray, alpha: float = 1) -> np.ndarray:
    out = np.moveaxis(x.copy(), dim, 0)
    np.add.at(out, index, np.moveaxis(source, dim, 0) * alpha)
    return np.moveaxis(out, 0, dim)


def np_index_copy(x: np.ndarray, dim: int, index: np.ndarray, source: np.ndarray) -> np.ndarray:
    out = np.moveaxis(x.copy(), dim, 0)
    out[index] = np.moveaxis(source, dim, 0)
    return np.moveaxis(out, 0, dim)


def np_index_fill(x: np.ndarray, dim: int, index: np.ndarray, value: float) -> np.ndarray:
    out = np.moveaxis(x.copy(), dim, 0)
    out[index] = value
    return np.moveaxis(out, 0, dim)


def np_masked_scatter(x: np.ndarray, mask: np.ndarray, source: np.ndarray) -> np.ndarray:
    m = np.broadcast_to(mask, x.shape)
    out = x.copy()
    out[m] = source.reshape(-1)[: int(m.sum())]
    return out


# ---------------------------------------------------------------- samples
def distinct(rng: Rng, shape: tuple[int, ...]) -> np.ndarray:
    """Distinct values (no ties), spread over [-2, 2)."""
    n = int(np.prod(shape))
    return (rng.permutation(n) * (4.0 / max(n, 1)) - 2.0 + rng.uniform(0, 0.01, n)).reshape(shape)


def scan_samples(rng: Rng) -> Iterator[Sample]:
    for shape, dim in [((3, 4), 1), ((3, 4), 0), ((2, 3, 4), -2), ((5,), 0), ((), 0), ((0, 3), 1), ((2, 1), 1)]:
        yield Sample((uniform(rng, shape, 0.5, 1.5),), {"dim": dim})


def cumprod_zero_samples(rng: Rng) -> Iterator[Sample]:
    """Rows with one and with two zeros: the gradient through them is not a division."""
    x = uniform(rng, (3, 5), 0.5, 1.5)
    x[0, 2] = 0.0
    x[1, 1] = x[1, 3] = 0.0
    yield Sample((x,), {"dim": 1})
    yield Sample((x.T.copy(),), {"dim": 0})


def prod_samples(rng: Rng) -> Iterator[Sample]:
    x = uniform(rng, (3, 4), 0.5, 1.5)
    yield Sample((x,), {})
    yield Sample((x,), {"dim": 1})
    yield Sample((x,), {"dim": 0, "keepdim": True})
    z = x.copy()
    z[0, 1] = 0.0
    z[2, 0] = z[2, 3] = 0.0
    yield Sample((z,), {"dim": 1})
    yield Sample((z[:1],), {})
    yield Sample((uniform(rng, (), 0.5, 1.5),), {})
    yield Sample((uniform(rng, (), 0.5, 1.5),), {"dim": 0})  # a 0-d tensor takes dim 0
    yield Sample((_Z((2, 0)),), {"dim": 1})
    yield Sample((_Z((0, 3)),), {"dim": 0})


def sort_samples(rng: Rng) -> Iterator[Sample]:
    for shape, kw in [
        ((3, 5), {}),
        ((3, 5), {"dim": 0, "descending": True}),
        ((2, 3, 4), {"dim": 1}),
        ((7,), {"descending": True}),
        ((40,), {}),
    ]:
        yield Sample((distinct(rng, shape),), kw)


def topk_samples(rng: Rng) -> Iterator[Sample]:
    yield Sample((distinct(rng, (3, 6)), 2), {})
    yield Sample((distinct(rng, (4, 3)), 3), {"dim": 0, "largest": False})
    yield Sample((distinct(rng, (2, 5, 3)), 1), {"dim": 1})


def multinomial_samples(rng: Rng) -> Iterator[Sample]:
    w = rng.uniform(0.1, 1.0, (3, 6))
    w[0, 2] = w[1, 0] = 0.0
    yield Sample((w, 4), {})
    yield Sample((w, 9), {"replacement": True})
    yield Sample((w[0], 3), {})
    yield Sample((w[1], 5), {"replacement": True})


def scatter_samples(rng: Rng) -> Iterator[Sample]:
    """Index rows with distinct entries along ``dim`` (the result of duplicates is open)."""
    x = uniform(rng, (3, 4))
    yield Sample((x, 0, np.array([[2, 0, 1, 0], [0, 1, 2, 2]]), uniform(rng, (2, 4))))
    yield Sample((x, 1, np.array([[3, 1], [0, 2], [1, 0]]), uniform(rng, (3, 3))))
    yield Sample((uniform(rng, (2, 3, 2)), -2, np.array([[[1, 0], [2, 1]], [[0, 2], [1, 0]]]), uniform(rng, (2, 2, 2))))


def scatter_reduce_samples(rng: Rng) -> Iterator[Sample]:
    """Duplicate indices (the reductions combine them); distinct values (amax/amin ties); a zero (prod)."""
    x = uniform(rng, (3, 4), 0.5, 1.5)
    idx = np.array([[0, 1, 2, 0], [2, 2, 0, 1], [0, 0, 0, 1]])
    src = uniform(rng, (3, 4), 0.5, 1.5)
    src[1, 2] = 0.0
    for reduce in ("sum", "prod", "mean", "amax", "amin"):
        for include_self in (True, False):
            yield Sample((x, 0, idx, src), {"reduce": reduce, "include_self": include_self})
    yield Sample((x, 1, idx[:2, :3], src), {"reduce": "sum"})


def index_samples(make_source: bool = True, unique: bool = False) -> Callable[[Rng], Iterator[Sample]]:
    def gen(rng: Rng) -> Iterator[Sample]:
        for shape, dim, index in [
            ((4, 3), 0, [2, 0, 3] if unique else [2, 0, 2]),
            ((3, 5), 1, [4, 1]),
            ((2, 3, 4), -1, [0, 3, 1]),
        ]:
            x = uniform(rng, shape)
            idx = np.array(index)
            src_shape = list(shape)
            src_shape[dim] = len(index)
            yield Sample((x, dim, idx, uniform(rng, tuple(src_shape))) if make_source else (x, dim, idx))

    return gen


def masked_scatter_samples(rng: Rng) -> Iterator[Sample]:
    yield Sample((uniform(rng, (3, 4)), rng.random((3, 4)) < 0.5, uniform(rng, (12,))))
    yield Sample((uniform(rng, (3, 4)), rng.random((4,)) < 0.5, uniform(rng, (4, 4))))
    yield Sample((uniform(rng, (2, 3)), np.zeros((2, 3), bool), uniform(rng, (2,))))


def einsum_samples(rng: Rng) -> Iterator[Sample]:
    for eq, shapes in [
        ("ij,jk->ik", [(3, 4), (4, 2)]),
        ("bij,bjk->bik", [(2, 3, 4), (2, 4, 2)]),
        ("bhqd,bhkd->bhqk", [(2, 2, 3, 4), (2, 2, 5, 4)]),
        ("ii->i", [(3, 3)]),
        ("ij->", [(3, 4)]),
        ("...ij,...jk", [(2, 3, 4), (4, 2)]),
        ("i,j->ij", [(3,), (2,)]),
        ("ijk,kl,lm->im", [(2, 3, 4), (4, 3), (3, 2)]),
        ("ij,ij->i", [(3, 4), (1, 4)]),
    ]:
        yield Sample(tuple(uniform(rng, s) for s in shapes), {"equation": eq})


def np_einsum(*ops: np.ndarray, equation: str) -> np.ndarray:
    if equation == "ij,ij->i":  # numpy's einsum does not broadcast labelled size-1 dims
        ops = (ops[0], np.broadcast_to(ops[1], ops[0].shape))
    return np.asarray(np.einsum(equation, *ops))


def _seeded(fn: Callable[..., Any]) -> Callable[..., Any]:
    """``fn`` with a generator seeded 11 (no global state touched)."""
    return lambda *a, **kw: fn(*a, generator=vb.Generator(11), **kw)


# ---------------------------------------------------------------- the entries
def _inplace(name: str, functional: OpInfo, **extra: Any) -> OpInfo:
    """The in-place method's entry: the functional's samples and reference, on a non-leaf copy; ``extra`` are the
    keyword arguments the functional's lambda fixes."""
    return OpInfo(
        name,
        lambda x, *a, **kw: getattr(fresh(x), name)(*a, **kw, **extra),
        functional.ref,
        functional.samples,
        dtypes=functional.dtypes,
    )


_SCATTER = OpInfo(
    "scatter",
    lambda x, d, i, s: vb.scatter(x, d, i, s),
    np_scatter,
    scatter_samples,
    dtypes=ANY,
    error_inputs=errors(
        ((_Z((3, 4)), 0, np.array([[3]]), _Z((1, 1))), {}, IndexError, "out of bounds"),
        ((_Z((3, 4)), 0, np.array([0]), _Z((1,))), {}, RuntimeError, "same number of dimensions"),
    ),
)
_SCATTER_REDUCE = OpInfo(
    "scatter_reduce",
    lambda x, d, i, s, **kw: vb.scatter_reduce(x, d, i, s, **kw),
    np_scatter_reduce,
    scatter_reduce_samples,
    dtypes=(I32,),
    error_inputs=errors(((_Z((3, 4)), 0, np.array([[0]]), _Z((1, 1))), {"reduce": "max"}, RuntimeError, "one of")),
)
_INDEX_ADD = OpInfo(
    "index_add",
    lambda x, d, i, s: vb.index_add(x, d, i, s, alpha=1.5),
    lambda x, d, i, s: np_index_add(x, d, i, s, 1.5),
    index_samples(),
    dtypes=(F16,),
    error_inputs=errors(
        ((_Z((4, 3)), 0, np.array([5]), _Z((1, 3))), {}, IndexError, "out of bounds"),
        ((_Z((4, 3)), 0, np.array([1]), _Z((2, 3))), {}, RuntimeError, "should have the shape"),
    ),
)
_INDEX_COPY = OpInfo("index_copy", vb.index_copy, np_index_copy, index_samples(unique=True), dtypes=ANY)
_INDEX_FILL = OpInfo(
    "index_fill",
    lambda x, d, i: vb.index_fill(x, d, i, -1.5),
    lambda x, d, i: np_index_fill(x, d, i, -1.5),
    index_samples(make_source=False),
    dtypes=(F16,),
)
_MASKED_SCATTER = OpInfo(
    "masked_scatter",
    vb.masked_scatter,
    np_masked_scatter,
    masked_scatter_samples,
    dtypes=NUMERIC,
    error_inputs=errors(((_Z((2, 3)), np.ones((2, 3), bool), _Z((4,))), {}, RuntimeError, "fewer than")),
)

INDEX_OPS: list[OpInfo] = [
    # --- scans and products
    OpInfo(
        "cumsum",
        vb.cumsum,
        np_scan(np.cumsum),
        scan_samples,
        dtypes=ANY,
        error_inputs=errors(((_Z((3, 4)),), {"dim": 2}, IndexError, "Dimension out of range")),
    ),
    OpInfo("cumprod", vb.cumprod, np_scan(np.cumprod), scan_samples, dtypes=NUMERIC),
    OpInfo("cumprod (zeros)", vb.cumprod, np_scan(np.cumprod), cumprod_zero_samples),
    OpInfo(
        "prod",
        vb.prod,
        np_prod,
        prod_samples,
        dtypes=NUMERIC,
        error_inputs=errors(((_Z((3, 4)),), {"dim": 2}, IndexError, "Dimension out of range")),
    ),
    # --- sorting
    OpInfo(
        "sort",
        vb.sort,
        np_sort,
        sort_samples,
        dtypes=NUMERIC,
        error_inputs=errors(((_Z((3, 4)),), {"dim": 2}, IndexError, "Dimension out of range")),
    ),
    OpInfo(
        "sort (empty)",
        vb.sort,
        np_sort,
        lambda rng: (Sample((_Z(s),), kw) for s, kw in [((0, 3), {}), ((2, 0), {"descending": True})]),
        differentiable=False,
        noncontiguous=False,
    ),
    OpInfo(
        "topk (k=0)",
        vb.topk,
        np_topk,
        lambda rng: (Sample((distinct(rng, (2, 5)), 0), {}),),
        differentiable=False,
    ),
    OpInfo(
        "argsort",
        vb.argsort,
        lambda x, **kw: np_sort(x, **kw)[1],
        sort_samples,
        differentiable=False,
        dtypes=NUMERIC,
    ),
    OpInfo(
        "topk",
        vb.topk,
        np_topk,
        topk_samples,
        dtypes=NUMERIC,
        error_inputs=errors(((_Z((3, 4)), 5), {}, RuntimeError, "out of range")),
    ),
    OpInfo(
        "multinomial",
        _seeded(vb.multinomial),
        np_multinomial,
        multinomial_samples,
        differentiable=False,
        error_inputs=errors(
            ((np.array([0.5, -0.1, 0.2]), 1), {}, RuntimeError, "element < 0"),
            ((np.array([0.5, np.nan, 0.2]), 1), {}, RuntimeError, "`nan`"),
            ((np.array([0.0, 0.0]), 1), {"replacement": True}, RuntimeError, "sum of probabilities"),
            ((np.array([0.0, 0.3, 0.0]), 2), {}, RuntimeError, "not enough"),
            ((np.array([0.5, 0.2]), 3), {}, RuntimeError, "without replacement"),
        ),
    ),
    # --- rearranging
    OpInfo(
        "flip",
        vb.flip,
        lambda x, dims: np.flip(x, dims),
        lambda rng: (
            Sample((uniform(rng, s),), {"dims": d})
            for s, d in [((3, 4), 0), ((3, 4), (0, 1)), ((2, 3, 4), (-1,)), ((0, 2), 1)]
        ),
        dtypes=ANY,
        error_inputs=errors(((_Z((3, 4)),), {"dims": (0, 0)}, RuntimeError, "repeated dim")),
    ),
    OpInfo(
        "roll",
        vb.roll,
        lambda x, shifts, dims=None: np.roll(x, shifts, dims),
        lambda rng: (
            Sample((uniform(rng, s),), kw)
            for s, kw in [
                ((3, 4), {"shifts": 1, "dims": 1}),
                ((3, 4), {"shifts": (-1, 5), "dims": (0, 1)}),
                ((2, 3), {"shifts": 2}),
                ((4,), {"shifts": -7, "dims": 0}),
            ]
        ),
        dtypes=ANY,
    ),
    *(
        OpInfo(
            name,
            fn,
            ref,
            lambda rng: (
                Sample((uniform(rng, s),), kw)
                for s, kw in [((3, 4), {}), ((4, 3), {"diagonal": 1}), ((2, 3, 3), {"diagonal": -1}), ((0, 2), {})]
            ),
            dtypes=ANY,
            error_inputs=errors(((_Z(3),), {}, RuntimeError, "at least 2 dimensions")),
        )
        for name, fn, ref in [
            ("tril", vb.tril, lambda x, diagonal=0: np.tril(x, diagonal)),
            ("triu", vb.triu, lambda x, diagonal=0: np.triu(x, diagonal)),
        ]
    ),
    OpInfo(
        "diagonal",
        vb.diagonal,
        lambda x, offset=0, dim1=0, dim2=1: np.diagonal(x, offset, dim1, dim2),
        lambda rng: (
            Sample((uniform(rng, s),), kw)
            for s, kw in [
                ((3, 4), {}),
                ((3, 4), {"offset": 1}),
                ((4, 3), {"offset": -2}),
                ((2, 3, 4), {"dim1": -1, "dim2": 0}),
                ((3, 3), {"offset": 5}),
            ]
        ),
        dtypes=ANY,
        error_inputs=errors(((_Z((3, 3)),), {"dim1": 1, "dim2": 1}, RuntimeError, "cannot be identical")),
    ),
    OpInfo(
        "unfold",
        lambda x, **kw: x.unfold(**kw),
        np_unfold,
        lambda rng: (
            Sample((uniform(rng, s),), kw)
            for s, kw in [
                ((7,), {"dimension": 0, "size": 3, "step": 2}),
                ((3, 5), {"dimension": 1, "size": 2, "step": 1}),
                ((4, 3), {"dimension": 0, "size": 4, "step": 3}),
                ((2, 6, 2), {"dimension": -2, "size": 3, "step": 3}),
            ]
        ),
        dtypes=ANY,
        error_inputs=errors(((_Z((3,)),), {"dimension": 0, "size": 4, "step": 1}, RuntimeError, "maximum size")),
    ),
    OpInfo(
        "repeat_interleave",
        vb.repeat_interleave,
        lambda x, repeats, dim=None: np.repeat(x, repeats, dim),
        lambda rng: (
            Sample((uniform(rng, s), r), kw)
            for s, r, kw in [
                ((2, 3), 2, {"dim": 0}),
                ((2, 3), 3, {}),
                ((2, 3), np.array([1, 0, 2]), {"dim": 1}),
                ((4,), np.array([2, 1, 0, 3]), {}),
            ]
        ),
        dtypes=ANY,
        error_inputs=errors(((_Z((3,)), np.array([1, -1, 0])), {}, RuntimeError, "can not be negative")),
    ),
    OpInfo(
        "repeat_interleave (indices)",
        vb.repeat_interleave,
        lambda r: np.repeat(np.arange(len(r)), r).astype(I),
        lambda rng: (Sample((np.array(r),)) for r in ([1, 0, 3], [2], [0, 0])),
        differentiable=False,
    ),
    OpInfo(
        "einsum",
        lambda *ops, equation: vb.einsum(equation, *ops),
        np_einsum,
        einsum_samples,
        error_inputs=errors(
            ((_Z((3, 4)), _Z((5, 2))), {"equation": "ij,jk->ik"}, RuntimeError, "must broadcast"),
            ((_Z((3, 4)),), {"equation": "ijk->i"}, ValueError, "subscripts for an operand"),
        ),
    ),
    # --- scattering
    _SCATTER,
    OpInfo(
        "scatter (value)",
        lambda x, d, i: vb.scatter(x, d, i, value=2.5),
        lambda x, d, i: np_scatter(x, d, i, 2.5),
        lambda rng: (Sample(s.args[:3]) for s in scatter_samples(rng)),
        dtypes=NUMERIC,
    ),
    _SCATTER_REDUCE,
    _INDEX_ADD,
    _INDEX_COPY,
    _INDEX_FILL,
    _MASKED_SCATTER,
    OpInfo(
        "nonzero",
        vb.nonzero,
        lambda x: np.argwhere(x).astype(I),
        lambda rng: (
            Sample((np.where(rng.random(s) < 0.5, uniform(rng, s), 0.0),))
            for s in [(3, 4), (7,), (2, 3, 2), (0, 3), ()]
        ),
        differentiable=False,
        dtypes=ANY,
    ),
    OpInfo(
        "nonzero (as_tuple)",
        lambda x: vb.nonzero(x, as_tuple=True),
        lambda x: tuple(i.astype(I) for i in np.nonzero(x)),
        lambda rng: (Sample((np.where(rng.random(s) < 0.5, 1.0, 0.0),)) for s in [(3, 4), (5,)]),
        differentiable=False,
    ),
    # --- in place
    _inplace("scatter_", _SCATTER),
    _inplace("scatter_reduce_", _SCATTER_REDUCE),
    OpInfo(
        "scatter_add_",
        lambda x, i, s, dim: fresh(x).scatter_add_(dim, i, s),
        lambda x, i, s, dim: np_scatter_reduce(x, dim, i, s, "sum"),
        lambda rng: (
            Sample((s.args[0], s.args[2], s.args[3]), {"dim": s.args[1]})
            for s in scatter_reduce_samples(rng)
            if s.kwargs.get("reduce") == "sum" and s.kwargs.get("include_self", True)
        ),
        dtypes=(I32,),
    ),
    _inplace("index_add_", _INDEX_ADD, alpha=1.5),
    _inplace("index_copy_", _INDEX_COPY),
    _inplace("index_fill_", _INDEX_FILL, value=-1.5),
    _inplace("masked_scatter_", _MASKED_SCATTER),
]
