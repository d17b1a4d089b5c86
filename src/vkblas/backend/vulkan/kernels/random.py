"""Counter-based random numbers (the PCG spec at the bottom of ``backend/base.py``), bit-identical to the cpu
backend's uniform bits. ``pcg(seed)`` is computed on the host and passed as a param; element i of the output in C
order gets ``pcg((counter + i) ^ pcg(seed))``. The normal transform runs in f32 (the cpu backend uses f64)."""

from __future__ import annotations

from typing import Any

from ...base import PCG_INC, PCG_MUL, PCG_OUT
from ..device import Device
from .plan import Plan, span
from .wgsl import MAIN_1D, PARAM_WORDS, STORAGE_TYPE, WORKGROUP, coalesce, grid, header, store_value, strided_offsets

_PCG = f"""
fn pcg(x: u32) -> u32 {{
    let s = x * {PCG_MUL}u + {PCG_INC}u;
    let w = ((s >> ((s >> 28u) + 4u)) ^ s) * {PCG_OUT}u;
    return w ^ (w >> 22u);
}}
"""
_INV_2_24 = "5.9604644775390625e-08"  # 2**-24, exact in f32
_M32 = 0xFFFFFFFF


def pcg_host(x: int) -> int:
    s = (x * PCG_MUL + PCG_INC) & _M32
    w = (((s >> ((s >> 28) + 4)) ^ s) * PCG_OUT) & _M32
    return w ^ (w >> 22)


def _source(distribution: str, out: Any, rank: int) -> str:
    # params: 0 offset, 1 pcg(seed), 2 counter, 3 n, 4.. shape, strides
    src = header([("b0", STORAGE_TYPE[out])], STORAGE_TYPE[out] == "f16") + _PCG + MAIN_1D
    src += "    if (gid >= pu(3u)) { return; }\n"
    src += strided_offsets("gid", rank, 4, ["o0"], ["pi(0u)"], [4 + rank])
    src += "    let bits = pcg((pu(2u) + gid) ^ pu(1u));\n"
    src += f"    let u = f32(bits >> 8u) * {_INV_2_24};\n"
    if distribution == "uniform":
        value = "u"
    else:
        src += f"    let u1 = f32((pcg(bits) >> 8u) + 1u) * {_INV_2_24};\n"
        value = "sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u)"
    return src + f"    b0[u32(o0)] = {store_value(value, 'f32', out)};\n}}\n"


def build(dev: Device, out: Any, distribution: str) -> Plan:
    shape, (strides,) = coalesce(out.shape, [out.strides])
    rank = len(shape)
    if 4 + 2 * rank > PARAM_WORDS:
        raise ValueError(f"rank {len(out.shape)} is too high for the params window")
    kernel = dev.kernel(_source(distribution, out.dtype, rank), 1)
    n = out.numel
    fmt = "<iIII" + "I" * rank + "i" * rank
    return Plan(kernel, fmt, (n, *shape, *strides), grid(-(-n // WORKGROUP)), (span(out.shape, out.strides),))
