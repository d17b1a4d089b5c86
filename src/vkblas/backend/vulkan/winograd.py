"""A 3x3, stride-1 convolution product by Winograd's minimal filtering, F(2x2, 3x3) (Lavin and Gray, 2015).

The forward and the input gradient of such a layer are both a correlation of a source with a 3x3 filter bank
(the input gradient's: the output gradient with the weight's channels swapped and its taps turned 180 degrees,
padded by ``2 - p``). Winograd computes each 2x2 block of output pixels from its 4x4 block of source pixels with
16 multiplies per (row, channel) instead of 36: four dispatches, all fp32 arithmetic,

1. ``U[e, r, c] = (G g G^T)[e]`` for each filter ``g`` of the (rows, channels) bank,
2. ``V[e, c, t] = (B^T d B)[e]`` for each 4x4 source block ``d`` of tile ``t`` (zeros past the edges),
3. ``M[e] = U[e] @ V[e]``, 16 GEMMs of (rows, channels) x (channels, tiles) in one batched plan of the tuner's,
4. ``out[2x2 block of t, r] = A^T M[:, r, t] A`` (+ the forward's bias).

On a ResNet layer (64 -> 64 channels, 56x56, batch 32) that is 2.25x fewer multiplies in GEMMs of K = 64, for
16 x (channels + rows) x tiles floats of temporaries (``WORKSPACE_BYTES`` caps them). Whether it is faster than
the implicit GEMM is measured, not assumed: ``conv.py`` times both on a layout's first call (``MODE``).

Results differ from the direct sum by rounding only (the transforms add and subtract pixels, so relative errors are
a few times fp32's epsilon, about what a different summation order gives). Non-finite values would not: the
transforms subtract neighbouring pixels, so one inf in a 4x4 block turns into inf - inf = NaN across the block's
outputs, where the direct sum has inf (and an inf weight is NaN in every output of its row). Every non-finite term
reaches ``M`` (a sum with an inf or NaN term is never finite), so the output transform checks its 16 values and,
where one is not finite, computes its 2x2 outputs as the direct sum instead: the implicit GEMM's semantics exactly
(the forward adds a padding tap as ``0 * w``, the input gradient adds only real terms, as PyTorch's col2im). That
path is slow (rows x 9 loads per output) and taken only where a layer already has infs or NaNs.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

from ...dtypes import float32
from ..base import View
from . import gemm
from .autotune import tuner
from .kernels.plan import Plan, span
from .kernels.wgsl import MAIN_1D, WORKGROUP, grid, header

#: the version in the tuner's cache keys of timed choices: a change to the kernels that moves their speed, or to what
#: a choice means, bumps it (2: the key holds the views' strides and whether the GEMMs were tuned; "graphs")
VERSION = 2
MODES = ("auto", "always", "never")


def _mode(value: str) -> str:
    if value not in MODES:
        raise ValueError(f"VKBLAS_WINOGRAD={value!r}: expected one of {', '.join(MODES)} (unset or empty: auto)")
    return value


#: "auto": time Winograd against the implicit GEMM on a layout's first call and keep the faster (``conv.py``);
#: "always" where it applies (tests); "never". ``VKBLAS_WINOGRAD`` sets it
MODE = _mode(os.environ.get("VKBLAS_WINOGRAD") or "auto")
#: the most bytes of temporaries (U, V, M) one product may take: like cuDNN's workspace limit; past it, the
#: implicit GEMM, which needs none (the MNIST CNN at batch 512 would take 450 MB and lose its memory goal)
WORKSPACE_BYTES = 256 << 20
#: fewer channels or rows than this: the GEMMs' K or M is too small to pay for four dispatches
MIN_CHANNELS = 16

# the transforms of F(2x2, 3x3), as WGSL expressions over 4 (or 3) named values
_BT = ("{0} - {2}", "{1} + {2}", "{2} - {1}", "{1} - {3}")  # B^T d
_G = ("{0}", "0.5 * ({0} + {1} + {2})", "0.5 * ({0} - {1} + {2})", "{2}")  # G g
_AT = ("{0} + {1} + {2}", "{1} - {2} - {3}")  # A^T m


@dataclass(frozen=True, slots=True)
class Problem:
    """One product as a correlation: ``out[n, r] = sum_c bank[r, c] (*) src[n, c]`` padded by ``pad``; the bank is
    the weight through ``(row, channel, ky, kx)`` strides from ``base`` past its offset (the input gradient's turns
    and swaps it). ``terms``: "padded" (a tap outside the source adds ``0 * w``: the forward) or "real" (it adds
    nothing: the input gradient)."""

    rows: int
    channels: int
    images: int
    src: tuple[int, int]  # (H, W) of the source
    out: tuple[int, int]  # (H, W) of the output
    pad: tuple[int, int]
    src_strides: tuple[int, int, int, int]
    w_strides: tuple[int, int, int, int]
    base: int
    terms: str

    @property
    def tiles(self) -> tuple[int, int, int]:
        """(tile rows, tile columns, tiles of the batch)."""
        th, tw = -(-self.out[0] // 2), -(-self.out[1] // 2)
        return th, tw, self.images * th * tw

    def workspace(self) -> tuple[int, int, int]:
        """Elements of U, V and M."""
        t = self.tiles[2]
        return 16 * self.rows * self.channels, 16 * self.channels * t, 16 * self.rows * t


def problem(backend: Any, kind: str, out: View, a: View, b: View, geometry: Any) -> Problem | None:
    """The product as a :class:`Problem`, or None where Winograd does not apply: a kernel other than 3x3, a
    stride or dilation, padding past 2, dtypes other than f32, too few channels, temporaries past
    ``WORKSPACE_BYTES`` or a binding."""
    k, s, p, d = geometry
    if kind not in ("forward", "input") or k != (3, 3) or s != (1, 1) or d != (1, 1) or max(p) > 2 or min(p) < 0:
        return None
    if any(v.dtype is not float32 for v in (out, a, b)):
        return None
    s0, s1, s2, s3 = b.strides
    if kind == "forward":  # out (N, O, OH, OW) = W (O, C) bank (*) x (N, C, H, W)
        rows, ch = b.shape[0], b.shape[1]
        w_strides, base, pad, terms = (s0, s1, s2, s3), 0, p, "padded"
    else:  # gx (N, C, H, W) = W^T turned (C, O) bank (*) g (N, O, OH, OW), padded by 2 - p
        rows, ch = b.shape[1], b.shape[0]
        w_strides, base, pad, terms = (s1, s0, -s2, -s3), 2 * s2 + 2 * s3, (2 - p[0], 2 - p[1]), "real"
    prob = Problem(rows, ch, a.shape[0], a.shape[2:], out.shape[2:], pad, a.strides, w_strides, base, terms)
    if min(rows, ch) < MIN_CHANNELS or any(x < 0 for x in a.strides):
        return None
    sizes = prob.workspace()
    binding = backend.dev.limits.get("max-storage-buffer-binding-size", 1 << 27)
    if 4 * sum(sizes) > WORKSPACE_BYTES or 4 * max(sizes) > binding:
        return None
    return prob


def _consts(**values: int | str) -> str:
    """Constants, not params: a plan is made per layer anyway, and constant divisors and strides let the compiler
    turn the index arithmetic into multiplies (as the pooling kernels)."""
    return "".join(f"    const {name} = {v};\n" for name, v in values.items())


def _transform(rows: tuple[str, ...], cols: tuple[str, ...], value: str, n_in: int) -> list[str]:
    """WGSL lines for ``t[i][j] = rows_i (cols_j (value(y, x)))``: the 1-D transform ``cols`` over each source row,
    then ``rows`` over each column of that; returns lines defining ``t{i}_{j}``."""
    lines = []
    for y in range(n_in):
        vals = [value.format(y=y, x=x) for x in range(n_in)]
        lines += [f"    let h{y}_{j} = {e.format(*vals)};" for j, e in enumerate(cols)]
    for j in range(len(cols)):
        vals = [f"h{y}_{j}" for y in range(n_in)]
        lines += [f"    let t{i}_{j} = {e.format(*vals)};" for i, e in enumerate(rows)]
    return lines


def _weight_source(p: Problem) -> str:
    """U[e, r, c] = (G g G^T)[e] for the filter (r, c): one invocation each."""
    sr, sc, sy, sx = p.w_strides
    src = header([("gu", "f32"), ("gw", "f32")], False) + MAIN_1D
    src += _consts(RC=p.rows * p.channels, CH=p.channels)
    src += "    if (gid >= u32(RC)) { return; }\n    let r = i32(gid) / CH; let c = i32(gid) % CH;\n"
    src += f"    let wb = pi(1u) + {p.base} + r * {sr} + c * {sc};\n"
    src += "".join(f"    let g{y}_{x} = gw[u32(wb + {y * sy + x * sx})];\n" for y in range(3) for x in range(3))
    src += "\n".join(_transform(_G, _G, "g{y}_{x}", 3)) + "\n"
    src += "".join(f"    gu[u32(pi(0u) + {e} * RC) + gid] = t{e // 4}_{e % 4};\n" for e in range(16))
    return src + "}\n"


def _tile_prelude(p: Problem, lin: str) -> str:
    """(n, tile row, tile column) of tile ``{lin} % T`` as ``n``, ``ty``, ``tx``, and the tile's first source
    pixel ``y0``, ``x0`` (past the padding: may be negative)."""
    th, tw, _ = p.tiles
    return (
        f"    let t = {lin} % T; let n = i32(t / {th * tw}u); let q = i32(t % {th * tw}u);\n"
        f"    let ty = q / {tw}; let tx = q % {tw};\n"
        f"    let y0 = 2 * ty - {p.pad[0]}; let x0 = 2 * tx - {p.pad[1]};\n"
    )


def _input_source(p: Problem) -> str:
    """V[e, c, t] = (B^T d B)[e] for the 4x4 source block d of tile t in channel c: one invocation each, tiles
    fastest (neighbouring invocations store neighbouring elements)."""
    sn, sc, sy, sx = p.src_strides
    h, w = p.src
    src = header([("gv", "f32"), ("gx", "f32")], False) + MAIN_1D
    src += _consts(T=f"{p.tiles[2]}u", CT=f"{p.tiles[2] * p.channels}u")
    src += "    if (gid >= CT) { return; }\n    let c = i32(gid / T);\n" + _tile_prelude(p, "gid")
    src += f"    let xb = pi(1u) + n * {sn} + c * {sc};\n"
    for y in range(4):
        for x in range(4):
            inside = f"u32(y0 + {y}) < {h}u && u32(x0 + {x}) < {w}u"
            src += f"    var d{y}_{x} = 0.0;\n"
            src += f"    if ({inside}) {{ d{y}_{x} = gx[u32(xb + (y0 + {y}) * {sy} + (x0 + {x}) * {sx})]; }}\n"
    src += "\n".join(_transform(_BT, _BT, "d{y}_{x}", 4)) + "\n"
    src += "".join(f"    gv[u32(pi(0u)) + {e}u * CT + gid] = t{e // 4}_{e % 4};\n" for e in range(16))
    return src + "}\n"


def _output_source(p: Problem, bias: bool) -> str:
    """out[n, r, 2x2 block of t] = A^T M[:, r, t] A (+ bias[r]): one invocation per (r, t), tiles fastest; where
    one of the 16 values is not finite, the direct sum (see the module)."""
    sn, sc, sy, sx = p.src_strides
    wr, wc, wy, wx = p.w_strides
    h, w = p.src
    oh, ow = p.out
    bufs = [("go", "f32"), ("gm", "f32"), ("gx", "f32"), ("gw", "f32")] + [("gb", "f32")] * bias
    src = header(bufs, False) + MAIN_1D
    src += _consts(T=f"{p.tiles[2]}u", RT=f"{p.tiles[2] * p.rows}u")
    src += "    if (gid >= RT) { return; }\n    let r = i32(gid / T);\n" + _tile_prelude(p, "gid")
    src += "".join(f"    let m{e // 4}_{e % 4} = gm[u32(pi(1u)) + {e}u * RT + gid];\n" for e in range(16))
    # the exponent's bits all set: inf or NaN (a bit test, which no float mode can fold away)
    bits = " || ".join(f"(~bitcast<u32>(m{e // 4}_{e % 4}) & 0x7f800000u) == 0u" for e in range(16))
    src += f"    let finite = !({bits});\n"
    src += "    var y: array<f32, 4>;\n    if (finite) {\n"
    src += "\n".join(_transform(_AT, _AT, "m{y}_{x}", 4)) + "\n"
    src += "".join(f"    y[{2 * i + j}] = t{i}_{j};\n" for i in range(2) for j in range(2))
    # the direct sum over (channel, ky, kx): a padding tap adds 0 * w ("padded") or nothing ("real")
    skip = "continue" if p.terms == "real" else "v = 0.0"
    src += f"""    }} else {{
    for (var o = 0; o < 4; o++) {{
    var s = 0.0;
    for (var c = 0; c < {p.channels}; c++) {{
    let xb = pi(2u) + n * {sn} + c * {sc}; let wb = pi(3u) + {p.base} + r * {wr} + c * {wc};
    for (var ky = 0; ky < 3; ky++) {{ for (var kx = 0; kx < 3; kx++) {{
    let yy = y0 + o / 2 + ky; let xx = x0 + o % 2 + kx;
    var v = 0.0;
    if (u32(yy) < {h}u && u32(xx) < {w}u) {{ v = gx[u32(xb + yy * {sy} + xx * {sx})]; }} else {{ {skip}; }}
    s += gw[u32(wb + ky * {wy} + kx * {wx})] * v;
    }} }}
    }}
    y[o] = s;
    }}
    }}
"""
    add = " + gb[u32(pi(4u) + r)]" if bias else ""
    for i in range(2):
        for j in range(2):
            at = f"2 * ty + {i}", f"2 * tx + {j}"
            cond = " && ".join(f"{q} < {lim}" for q, lim in zip(at, (oh, ow), strict=True) if lim % 2)
            store = f"go[u32(pi(0u) + ((n * {p.rows} + r) * {oh} + {at[0]}) * {ow} + {at[1]})] = y[{2 * i + j}]{add};"
            src += f"    if ({cond}) {{ {store} }}\n" if cond else f"    {store}\n"
    return src + "}\n"


def _plan(dev: Any, source: str, nbuf: int, invocations: int, views: tuple[View, ...]) -> Plan:
    """A plan whose params are the bound views' offsets (everything else is a constant of its source)."""
    spans = tuple(span(v.shape, v.strides) for v in views)
    return Plan(dev.kernel(source, nbuf), "<" + "i" * nbuf, (), grid(-(-invocations // WORKGROUP)), spans)


@dataclass(frozen=True, slots=True)
class Recipe:
    """What recording one product by Winograd takes: its problem, the three transforms' plans (the output's with
    a bias binding where the call has one) and the GEMM's."""

    problem: Problem
    weight: Plan
    input: Plan
    output: Plan
    gp: Any


def _temporaries(backend: Any, p: Problem) -> tuple[View, View, View]:
    """U (16, rows, channels), V (16, channels, tiles) and M (16, rows, tiles), pooled (returned on drop)."""
    t = p.tiles[2]
    shapes = ((16, p.rows, p.channels), (16, p.channels, t), (16, p.rows, t))
    u, v, m = (View.of(backend.alloc(16 * a * b, float32), (e, a, b)) for e, a, b in shapes)
    return u, v, m


def recipe(backend: Any, p: Problem, out: View, a: View, b: View, bias: View | None) -> Recipe:
    """The plans of ``p`` for this call's views (the GEMM tuned on its temporaries; call paused)."""
    dev = backend.dev
    u, v, m = _temporaries(backend, p)
    t = p.tiles[2]
    wplan = _plan(dev, _weight_source(p), 2, p.rows * p.channels, (u, b))
    iplan = _plan(dev, _input_source(p), 2, p.channels * t, (v, a))
    oviews = (out, m, a, b) + ((bias,) if bias is not None else ())
    oplan = _plan(dev, _output_source(p, bias is not None), len(oviews), p.rows * t, oviews)
    return Recipe(p, wplan, iplan, oplan, tuner(backend).plan(m, u, v))


def launches(backend: Any, r: Recipe, out: View, a: View, b: View, bias: View | None) -> list[Any]:
    """The product's dispatches as (plan, views, scalars, grid), on fresh temporaries (held by the views)."""
    u, v, m = _temporaries(backend, r.problem)
    oviews = (out, m, a, b) + ((bias,) if bias is not None else ())
    steps = [(r.weight, (u, b), (), r.weight.groups), (r.input, (v, a), (), r.input.groups)]
    steps += gemm.launches(backend, r.gp, m, u, v)
    return [*steps, (r.output, oviews, (), r.output.groups)]


def record(backend: Any, r: Recipe, out: View, a: View, b: View, bias: View | None) -> None:
    """Record the product's four dispatches (and the GEMM's split-K pass, where it has one)."""
    u, v, m = _temporaries(backend, r.problem)
    backend.launch("conv winograd weight", r.weight, (u, b))
    backend.launch("conv winograd input", r.input, (v, a))
    gemm.record(backend, r.gp, m, u, v)
    backend.launch("conv winograd output", r.output, (out, m, a, b) + ((bias,) if bias is not None else ()))
