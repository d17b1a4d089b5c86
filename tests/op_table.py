"""One entry per op: the vkblas callable, a float64 numpy reference, sample inputs and tolerances (PyTorch's OpInfo).

``tests/test_ops.py`` reads this table and checks, for every entry and device: values against the reference (in
the default float dtype and in every dtype of ``dtypes``), gradients against finite differences of vkblas and of the
reference, the device's float32 gradients against the cpu's float64 ones, non-contiguous inputs against contiguous
ones, and that ``error_inputs`` raise. Every public op must have an entry (the test fails otherwise); adding an op
means adding one ``OpInfo`` here.

Sample arguments (``tests/op_samples.py``, with the numpy references) are numpy arrays (tensor operands: float arrays
become the device's float dtype, float16 arrays float16, int arrays int32, bool arrays bool) or Python scalars, which
are passed through unchanged. ``kwargs`` are passed to both callables.
"""

from __future__ import annotations

import operator
from collections.abc import Callable
from typing import Any

import numpy as np

import vkblas as vb
from op_samples import (
    Sample,
    away,
    axis_arg,
    binary_samples,
    bool_pairs,
    cat_samples,
    chunk_samples,
    clamp_samples,
    compare_samples,
    conv_samples,
    divide_samples,
    expand_samples,
    flatten_samples,
    fresh,
    gather_samples,
    getitem_samples,
    iadd,
    index_array_samples,
    inplace_ref,
    inplace_samples,
    int_pairs,
    integral,
    kinked,
    logical_samples,
    masked_fill_samples,
    matmul_samples,
    nonempty_samples,
    nonzero,
    np_arg,
    np_chunk,
    np_expand,
    np_flatten,
    np_gelu,
    np_gelu_tanh,
    np_logsumexp,
    np_one_hot,
    np_pow,
    np_remainder,
    np_scatter_add,
    np_shift,
    np_sigmoid,
    np_softmax,
    np_split,
    np_squeeze,
    np_trunc_divide,
    np_var,
    one_dim_samples,
    one_hot_samples,
    permute_samples,
    pool_samples,
    positive,
    reduction_samples,
    repeat_samples,
    reshape_samples,
    scatter_add_samples,
    split_op,
    split_samples,
    squeeze_samples,
    stack_samples,
    transpose_samples,
    unary_samples,
    uniform,
    unsqueeze_samples,
    var_samples,
    where_samples,
)
from op_table_index import INDEX_OPS
from op_table_math import MATH_OPS
from op_table_nn import NN_OPS
from opinfo import _Z, ANY, F16, I32, NUMERIC, ErrorInput, OpInfo, errors  # noqa: F401  (OpInfo: re-exported)
from references import conv_ref, pcg_normal, pcg_uniform, pool_ref

Rng = np.random.Generator
BROADCAST_ERRORS = errors(((_Z((3, 4)), _Z((2, 4))), {}, RuntimeError, "cannot be broadcast"))
DIM_ERRORS = errors(((_Z((3, 4)),), {"dim": 2}, IndexError, "Dimension out of range"))
INPLACE_ERRORS = errors(((_Z((3,)), _Z((2, 3))), {}, RuntimeError, "doesn't match the broadcast shape"))


def _random_fill(method: str, **kw: Any) -> Callable[[vb.Tensor], vb.Tensor]:
    """``method`` on a copy of the input, from a generator seeded 11 (no global state touched)."""
    return lambda x: getattr(fresh(x).detach(), method)(generator=vb.Generator(11), **kw)


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
    OpInfo("pow", vb.pow, np_pow, binary_samples(make_a=positive, scalars=(2.0, 3.0)), dtypes=NUMERIC),
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
        lambda x, dim=None, keepdim=False: np.sum(x, axis=axis_arg(dim), keepdims=keepdim),
        reduction_samples,
        dtypes=ANY,
        error_inputs=DIM_ERRORS,
    ),
    OpInfo(
        "mean",
        vb.mean,
        lambda x, dim=None, keepdim=False: np.mean(x, axis=axis_arg(dim), keepdims=keepdim),
        lambda rng: reduction_samples(rng, empty_ok=False),
        dtypes=(F16,),
        error_inputs=errors(((np.zeros(3, np.int32),), {}, RuntimeError, "could not infer output dtype")),
    ),
    OpInfo("var", vb.var, np_var, var_samples, dtypes=(F16,)),
    OpInfo("std", vb.std, lambda x, **kw: np.sqrt(np_var(x, **kw)), var_samples, dtypes=(F16,)),
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
        np_arg(np.argmax),
        lambda rng: (s for s in one_dim_samples(rng) if s.args[0].size),
        differentiable=False,
    ),
    OpInfo(
        "amax",
        vb.amax,
        lambda x, dim=None, keepdim=False: np.max(x, axis=axis_arg(dim), keepdims=keepdim),
        lambda rng: reduction_samples(rng, empty_ok=False),
        dtypes=NUMERIC,
    ),
    OpInfo(
        "amin",
        vb.amin,
        lambda x, dim=None, keepdim=False: np.min(x, axis=axis_arg(dim), keepdims=keepdim),
        lambda rng: reduction_samples(rng, empty_ok=False),
        dtypes=NUMERIC,
    ),
    # (all/any of an empty tensor raise here; PyTorch gives True/False: not sampled)
    OpInfo(
        "all",
        vb.all,
        lambda x, dim=None, keepdim=False: np.all(x, axis=axis_arg(dim), keepdims=keepdim),
        lambda rng: reduction_samples(rng, empty_ok=False, make=integral),
        differentiable=False,
        dtypes=ANY,
    ),
    OpInfo(
        "any",
        vb.any,
        lambda x, dim=None, keepdim=False: np.any(x, axis=axis_arg(dim), keepdims=keepdim),
        lambda rng: reduction_samples(rng, empty_ok=False, make=integral),
        differentiable=False,
        dtypes=ANY,
    ),
    OpInfo("argmax", vb.argmax, np_arg(np.argmax), one_dim_samples, differentiable=False, dtypes=NUMERIC),
    OpInfo("argmin", vb.argmin, np_arg(np.argmin), one_dim_samples, differentiable=False, dtypes=NUMERIC),
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
        lambda x, dim, keepdim=False: np_logsumexp(x, axis_arg(dim), keepdim),
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
        error_inputs=errors(((_Z((1, 1, 4, 4)), 3, 2, 2), {}, ValueError, "at most half of the kernel")),
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
        lambda x, start_dim=0, end_dim=-1: np_flatten(x, start_dim, end_dim),
        flatten_samples,
        dtypes=ANY,
    ),
    OpInfo("squeeze", vb.squeeze, lambda x, dim=None: np_squeeze(x, dim), squeeze_samples, dtypes=ANY),
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
        lambda x, shape: np_expand(x, shape),
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
        split_op,
        np_split,
        split_samples,
        dtypes=ANY,
        error_inputs=errors(((_Z((5, 2)),), {"split": [2, 2], "dim": 0}, RuntimeError, "sum exactly to 5")),
    ),
    OpInfo("chunk", vb.chunk, np_chunk, chunk_samples, dtypes=ANY),
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
        lambda x, num_classes=-1: np_one_hot(x, num_classes),
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
        lambda x, y: fresh(x).add_(y),
        inplace_ref(np.add),
        inplace_samples,
        dtypes=(F16,),
        error_inputs=INPLACE_ERRORS,
    ),
    OpInfo("add_ (operator +=)", lambda x, y: iadd(fresh(x), y), inplace_ref(np.add), inplace_samples),
    OpInfo("sub_", lambda x, y: fresh(x).sub_(y), inplace_ref(np.subtract), inplace_samples, dtypes=(F16,)),
    OpInfo("mul_", lambda x, y: fresh(x).mul_(y), inplace_ref(np.multiply), inplace_samples, dtypes=(F16,)),
    OpInfo("div_", lambda x, y: fresh(x).div_(y), inplace_ref(np.divide), inplace_samples, dtypes=(F16,)),
    OpInfo(
        "pow_",
        lambda x, y: fresh(x).pow_(y),
        inplace_ref(np.power),
        lambda rng: (Sample((positive(rng, s.args[0].shape), s.args[1])) for s in inplace_samples(rng)),
        dtypes=(F16,),
    ),
    _unary("exp_", lambda x: fresh(x).exp_(), np.exp, dtypes=(F16,)),
    _unary("neg_", lambda x: fresh(x).neg_(), np.negative, dtypes=NUMERIC),
    _unary("sqrt_", lambda x: fresh(x).sqrt_(), np.sqrt, positive, dtypes=(F16,)),
    _unary("relu_", lambda x: fresh(x).relu_(), lambda x: np.maximum(x, 0), kinked(0.0), dtypes=NUMERIC),
    OpInfo(
        "copy_",
        lambda x, y: fresh(x).copy_(y),
        inplace_ref(lambda a, b: np.broadcast_to(b, a.shape)),
        lambda rng: (s for s in inplace_samples(rng) if isinstance(s.args[1], np.ndarray)),
        dtypes=ANY,
        error_inputs=INPLACE_ERRORS,
    ),
    OpInfo(
        "fill_",
        lambda x, value: fresh(x).fill_(value),
        lambda x, value: np.full_like(x, value),
        lambda rng: (Sample((uniform(rng, s),), {"value": 2.5}) for s in [(3, 4), (), (0, 2)]),
        dtypes=NUMERIC,
    ),
    OpInfo("zero_", lambda x: fresh(x).zero_(), np.zeros_like, unary_samples(), dtypes=ANY),
    OpInfo(
        "masked_fill_",
        lambda x, m, value: fresh(x).masked_fill_(m, value),
        lambda x, m, value: np.where(m, value, x).astype(x.dtype),
        lambda rng: (s for s in masked_fill_samples(rng) if np.broadcast(*s.args).shape == s.args[0].shape),
        dtypes=NUMERIC,
    ),
    OpInfo(
        "clamp_",
        lambda x, **kw: fresh(x).clamp_(**kw),
        lambda x, min=None, max=None: np.clip(x, min, max),  # noqa: A006
        clamp_samples,
        dtypes=(F16,),
    ),
    # optimizer helpers: no autograd
    OpInfo(
        "lerp_",
        lambda x, y: fresh(x).lerp_(y, 0.3),
        inplace_ref(lambda a, b: a + 0.3 * (b - a)),
        inplace_samples,
        differentiable=False,
        dtypes=(F16,),
    ),
    OpInfo(
        "addcmul_",
        lambda x, a, b: fresh(x).addcmul_(a, b, value=0.5),
        lambda x, a, b: x + 0.5 * a * b,
        lambda rng: (Sample((uniform(rng, (3, 4)), uniform(rng, s), uniform(rng, (3, 4)))) for s in [(3, 4), (4,)]),
        differentiable=False,
        dtypes=(F16,),
    ),
    OpInfo(
        "addcdiv_",
        lambda x, a, b: fresh(x).addcdiv_(a, b, value=0.5),
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


# ---------------------------------------------------------------- integer ops and integer division (issue 9)
_FLOAT_BITWISE = errors(((_Z(3), _Z(3)), {}, NotImplementedError, "only implemented for integer and bool"))
_ZERO_DIVISOR = errors(
    ((np.array([1, 2], np.int32), 0), {}, RuntimeError, "ZeroDivisionError"),
    ((np.array([1, 2], np.int32), np.array([1, 0], np.int32)), {}, RuntimeError, "ZeroDivisionError"),
)


def _integer(name: str, op: Callable[..., Any], ref: Callable[..., Any], **kw: Any) -> OpInfo:
    samples = kw.pop("samples", lambda rng: (*int_pairs(rng), *bool_pairs(rng)))
    return OpInfo(name, op, ref, samples, differentiable=False, error_inputs=_FLOAT_BITWISE, **kw)


OPS += [
    _integer("bitwise_and", vb.bitwise_and, np.bitwise_and),
    _integer("bitwise_and (operator &)", operator.and_, np.bitwise_and),
    _integer("bitwise_or", vb.bitwise_or, np.bitwise_or),
    _integer("bitwise_or (operator |)", operator.or_, np.bitwise_or),
    _integer("bitwise_xor", vb.bitwise_xor, np.bitwise_xor),
    _integer("bitwise_xor (operator ^)", operator.xor, np.bitwise_xor),
    OpInfo(
        "bitwise_not",
        vb.bitwise_not,
        np.invert,
        lambda rng: (Sample((a,)) for a in (rng.integers(-9, 9, (3, 4)).astype(np.int32), rng.random(5) < 0.5)),
        differentiable=False,
        error_inputs=errors(((_Z(3),), {}, NotImplementedError, "only implemented for integer")),
    ),
    *(
        _integer(name, op, ref, samples=lambda rng: int_pairs(rng, shift=True))
        for name, op, ref in [
            ("bitwise_left_shift", vb.bitwise_left_shift, np_shift(np.left_shift, False)),
            ("bitwise_left_shift (operator <<)", operator.lshift, np_shift(np.left_shift, False)),
            ("bitwise_right_shift", vb.bitwise_right_shift, np_shift(np.right_shift, True)),
            ("bitwise_right_shift (operator >>)", operator.rshift, np_shift(np.right_shift, True)),
        ]
    ),
    *(
        OpInfo(
            name,
            op,
            ref,
            lambda rng: (*divide_samples(rng), *int_pairs(rng, divisor=True)),
            differentiable=differentiable,
            dtypes=(F16,),
            error_inputs=_ZERO_DIVISOR,
        )
        for name, op, ref, differentiable in [
            ("floor_divide", vb.floor_divide, np.floor_divide, False),
            ("floor_divide (operator //)", operator.floordiv, np.floor_divide, False),
            ("div (rounding_mode='floor')", lambda a, b: vb.div(a, b, rounding_mode="floor"), np.floor_divide, False),
            ("div (rounding_mode='trunc')", lambda a, b: vb.div(a, b, rounding_mode="trunc"), np_trunc_divide, False),
            ("fmod", vb.fmod, np.fmod, True),
            ("remainder", vb.remainder, np_remainder, True),
            ("remainder (operator %)", operator.mod, np_remainder, True),
        ]
    ),
    OpInfo("divide", vb.divide, np.divide, binary_samples(make_b=nonzero)),
    OpInfo("true_divide", vb.true_divide, np.divide, binary_samples(make_b=nonzero)),
]

# more entries live in their own modules (this one stays under 1000 lines); they share opinfo.py with this one
OPS += MATH_OPS + INDEX_OPS + NN_OPS

BY_NAME = {info.name: info for info in OPS}
assert len(BY_NAME) == len(OPS), "op names must be unique"
