"""How many compute units (NVIDIA's SMs, AMD's CUs or WGPs, Intel's Xe cores) a GPU balances workgroups over,
measured: Vulkan, through wgpu, does not say.

The GEMM tuner needs it to fill whole waves: a grid of ``n x units`` workgroups puts ``n`` on every unit, where a
few more leave all but one idle for a last short wave (on an H100, 2026-12-07: 3072^3 in 128x256 tiles is 288
tiles over 132 SMs, three waves for 2.2 waves of work; spread by stream-K over 132 workgroups it ran 1.32x faster).

The probe: ``G`` workgroups of 256 invocations, each a fixed run of independent FMA chains, enough to keep one unit's
FP32 lanes busy. Up to ``units`` workgroups take as long as one (each has a unit of its own: schedulers spread a
grid breadth-first); one more puts two on a unit, which then takes twice as long. :func:`find_units` doubles ``G``
until the time jumps by ``JUMP``, then bisects for the last ``G`` before the jump (each ``G`` timed twice).
"""

from __future__ import annotations

from collections.abc import Callable

from .kernels.wgsl import header

PROBE_THREADS = 256
CHAINS = 8  # independent FMA chains per invocation: enough in flight to fill a unit's FP32 pipelines
#: loop turns per invocation: about 80 us a workgroup on an H100 (short enough to time thousands of workgroups)
PROBE_ITERATIONS = 8192
MAX_UNITS = 4096  # the largest count the search tries (past it a GPU is reported as this many)
JUMP = 1.5  # a time this many times the single workgroup's marks the grid that needs a second wave


def probe_source() -> str:
    """WGSL of the probe: params word 0 the output's offset, word 1 the loop count, word 2 a multiplier (f32) the
    compiler cannot fold; each invocation stores its chains' sum, so that no chain is dead code."""
    chains = range(CHAINS)
    src = header([("out", "f32")], False)
    src += f"@compute @workgroup_size({PROBE_THREADS})\n"
    src += "fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32) {\n"
    src += "    let n = pu(1u); let m = pf(2u);\n"
    src += "".join(f"    var a{c} = f32(lid + {c}u);\n" for c in chains)
    src += "    for (var i = 0u; i < n; i++) {\n"
    src += "".join(f"    a{c} = fma(a{c}, m, 1.0);\n" for c in chains)
    src += "    }\n"
    total = " + ".join(f"a{c}" for c in chains)
    src += f"    out[u32(pi(0u)) + wid.x * {PROBE_THREADS}u + lid] = {total};\n}}\n"
    return src


def find_units(seconds: Callable[[int], float], most: int = MAX_UNITS) -> int:
    """The largest grid of probe workgroups that runs in one wave, given ``seconds(G)``, the time of a grid of
    ``G``. Each grid's time is the faster of two readings: a single slow one (a clock dip) reads like a second
    wave, and would end the search at too few units."""

    def best(groups: int) -> float:
        return min(seconds(groups), seconds(groups))

    one = best(1)
    fits, g = 1, 2
    while g <= most and best(g) < JUMP * one:
        fits, g = g, 2 * g
    if g > most:
        return fits
    lo, hi = fits, g  # lo runs in one wave, hi does not
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if best(mid) < JUMP * one else (lo, mid)
    return lo


__all__ = ["CHAINS", "JUMP", "MAX_UNITS", "PROBE_ITERATIONS", "PROBE_THREADS", "find_units", "probe_source"]
