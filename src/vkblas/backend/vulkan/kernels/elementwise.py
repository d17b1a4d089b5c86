"""Elementwise kernels generated from the shared op table (``backend/elementwise.py``).

Specialised by op, operand dtypes / scalar types, output dtype and *rank after coalescing* (dims that are
contiguous in every operand are merged and size-1 dims dropped, so most calls are rank 1 or 2 and the index math is
a couple of divisions). Shapes and strides are params, not literals, so one pipeline serves every shape of a rank;
Python-number operands are params too (no recompiling per value).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ....dtypes import DType, bool_, float16
from ... import elementwise as ew
from ..device import Device
from .plan import Plan, span
from .wgsl import (
    COMPUTE_TYPE,
    MAIN_1D,
    PARAM_WORDS,
    STORAGE_TYPE,
    WORKGROUP,
    Emitter,
    Expr,
    WgslMath,
    coalesce,
    grid,
    header,
    load,
    store_value,
    strided_offsets,
)

_SCALAR_FMT = {"f32": "f", "f16": "f", "i32": "i", "bool": "I"}
_SCALAR_READ = {"f32": "pf({w}u)", "f16": "f16(pf({w}u))", "i32": "pi({w}u)", "bool": "(pu({w}u) != 0u)"}


def compute_dtype(op: str, out: DType, args: Sequence[Any]) -> DType:
    """The dtype the formula runs in: the tensor operands' (the bool condition of ``where`` aside)."""
    spec = ew.OPS[op]
    for i, a in enumerate(args):
        if hasattr(a, "storage") and i != spec.bool_operand:
            return a.dtype
    return bool_ if spec.returns_bool else out


def scalar_type(value: Any, compute: DType) -> str:
    """WGSL type a Python-number operand acts as: the compute dtype, except where numpy would promote."""
    ct = COMPUTE_TYPE[compute]
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int):
        return "i32" if ct == "bool" else ct
    return ct if ct in ("f32", "f16") else "f32"


def source(op: str, out_dtype: DType, kinds: Sequence[tuple[str, Any]], rank: int, compute: DType) -> str:
    """WGSL for ``out = OPS[op](*args)``; ``kinds[i]`` is ``("t", dtype)`` for a tensor or ``("s", wgsl type)``."""
    tensors = [k[1] for k in kinds if k[0] == "t"]
    nt = len(tensors) + 1  # out is view 0
    nscal = len(kinds) - len(tensors)
    w_n = nt + nscal
    w_shape = w_n + 1
    w_strides = [w_shape + rank * (1 + i) for i in range(nt)]
    em = Emitter(COMPUTE_TYPE[compute])
    vals: list[Any] = []
    t, s = 1, nt
    for kind, what in kinds:
        if kind == "t":
            vals.append(Expr(load(f"b{t}", f"u32(o{t})", what), COMPUTE_TYPE[what], em))
            t += 1
        else:
            vals.append(Expr(_SCALAR_READ[what].format(w=s), what, em))
            s += 1
    result = ew.OPS[op].fn(WgslMath(em), *vals)
    code, ty = em.value(result)
    names = [f"o{i}" for i in range(nt)]
    dtypes = [out_dtype, *tensors]
    f16 = any(d is float16 for d in dtypes) or "f16" in (em.default_type, ty)
    return (
        header([(f"b{i}", STORAGE_TYPE[d]) for i, d in enumerate(dtypes)], f16)
        + "".join(em.helpers.values())
        + MAIN_1D
        + f"    if (gid >= pu({w_n}u)) {{ return; }}\n"
        + strided_offsets("gid", rank, w_shape, names, [f"pi({i}u)" for i in range(nt)], w_strides)
        + "\n".join(em.lines)
        + f"\n    b0[u32(o0)] = {store_value(code, ty, out_dtype)};\n}}\n"
    )


def build(dev: Device, op: str, out: Any, args: Sequence[Any]) -> tuple[Plan, tuple[int, ...]]:
    """The plan for this call's op/dtypes/shapes/strides, and the arg positions of its scalar operands."""
    compute = compute_dtype(op, out.dtype, args)
    views = [out] + [a for a in args if hasattr(a, "storage")]
    kinds: list[tuple[str, Any]] = []
    scalars: list[int] = []
    for i, a in enumerate(args):
        if hasattr(a, "storage"):
            kinds.append(("t", a.dtype))
        else:
            kinds.append(("s", scalar_type(a, compute)))
            scalars.append(i)
    shape, strides = coalesce(out.shape, [v.strides for v in views])
    rank = len(shape)
    nwords = len(views) * (1 + rank) + len(scalars) + 1 + rank
    if nwords > PARAM_WORDS:
        raise ValueError(f"rank {len(out.shape)} is too high for the params window ({nwords} > {PARAM_WORDS} words)")
    kernel = dev.kernel(source(op, out.dtype, kinds, rank, compute), len(views))
    n = out.numel
    fmt = "<" + "i" * len(views) + "".join(_SCALAR_FMT[k[1]] for k in kinds if k[0] == "s") + "I" * (1 + rank)
    fmt += "i" * (rank * len(views))
    static = (n, *shape, *[s for st in strides for s in st])
    spans = tuple(span(v.shape, v.strides) for v in views)
    return Plan(kernel, fmt, static, grid(-(-n // WORKGROUP)), spans), tuple(scalars)
