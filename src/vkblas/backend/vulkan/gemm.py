"""The GEMM kernel family: one parametrised WGSL template, a table of variants, and the host-side launcher.

``out[..., m, n] = sum_k a[..., m, k] * b[..., k, n]`` for strided ``a``/``b`` (any element strides, so ``A.T @ B``
reads A through its strides, no copy) and contiguous ``out``. One generator, :func:`source`, emits every kernel;
what varies is a :class:`Variant` (tile shape, per-thread register block, K step, pipelining, smem padding) and a
:class:`Spec` (dtype, batch rank, how each operand is loaded, split-K).

Kernel structure (why each piece is there):

* A workgroup computes a ``bm x bn`` output tile with ``(bm/tm) * (bn/tn)`` threads; each thread keeps a
  ``tm x tn`` block of accumulators in registers as named ``vec4`` variables -- naga does not unroll loops nor
  promote arrays to registers, so the generator unrolls the inner product itself.
* A thread's rows are ``g*4*WY + 4*ty + r`` (groups of 4, interleaved across threads) so that its operands are
  read from workgroup memory as ``vec4`` (one 128-bit load) and neighbouring threads read neighbouring vec4s:
  broadcast or conflict-free, no bank conflicts on the hot reads.
* Operand tiles live in workgroup memory k-major (``[k][m]``, ``[k][n]``) with ``pad`` vec4s of padding per
  row; the transposing stores (a K-contiguous operand is written column-wise) then spread over banks.
* Global loads are ``vec4`` along whichever dimension of the operand is contiguous (``v_i``: along M/N, stored
  straight; ``v_k``: along K, stored transposed), or scalar through arbitrary strides (``s_*``) when the operand is
  not 16-byte aligned.
* ``stages=2``: double buffering -- the next K tile is loaded into registers while the current one is multiplied,
  then stored into the other workgroup buffer; one barrier per K step instead of two.
* Edges: every global load is guarded (zero outside ``M``/``N``/``K``) and every store is guarded, so any size
  (1, primes) is correct with no padding copies; interior tiles pay a few compares per loaded vec4.
* Split-K: workgroup z covers ``(batch, split)``; each split writes an f32 partial tile into a workspace and a
  small second kernel sums the partials into ``out`` (WGSL has no float atomics).
* K groups (``kgroups``): the workgroup holds several copies of the tile's threads, each over its own share of
  K (its own operand tiles in workgroup memory), and they add their accumulators up in workgroup memory at the
  end: a small output over a long K (a layer's weight gradient, 10 x 256 over a batch of 512) in one dispatch.
* Layout knobs, timed by ``vkblas bench gemm-variants`` but not tuner candidates (on an H100, 2026-12-07, none
  more than 3 % faster than its base tile at any shape timed):
  ``warp`` lays a subgroup's 32 threads out as a block of the thread grid instead of along its rows, so each
  workgroup-memory read touches fewer distinct vec4s; ``band`` walks the workgroups down bands of tile rows,
  column by column, so that the workgroups in flight share operand tiles in L2; ``hoist`` (``.hl``, not yet timed)
  computes the parts of the strided loads' addresses and guards that do not change along K once, before the K loop.
* Measured on an H100 and an H200 at 4096³ and the layer shapes and not kept (BENCHMARKS.md, 2026-12-07): 512
  threads of 8x8 (at most 128 registers each: 0.81 of cuBLAS against the 8x16 tile's 0.87), rows-first loads of
  a K-contiguous operand (conflict-free transposing stores: +1 % on one tile, 3-10 % slower elsewhere), the next K
  step's reads emitted before this step's FMAs (level: the driver schedules them), and a K-contiguous A kept
  K-contiguous in workgroup memory (15 % slower). On an H100 (2026-12-08) at 4096^3: the inner product rolled into
  a loop of 1-8 unrolled K steps (half the code: 11-21 % slower; the instruction cache is not the limit), and the
  next K tile loaded in 2-16 phases between the K steps instead of all before them (16-27 % slower).
* Registers (the driver's own counts, ``benchmarks/kernel_stats.py``; H100, driver 580.159.04): of the 17 tiles
  read, only ``256x256k8.8x16`` (not a candidate) spills. The 4096^3 tile takes 234-238 registers a thread, so
  its 256 threads fill an SM's register file alone; the 8x8 tiles of 256 threads take 139-153 at a K step of 16
  (one workgroup per SM) and 128 at 8 (two). A pre-transposing copy of a K-contiguous A was timed too: the
  elementwise copy takes 197 us, twice the 101 us that ``A @ B`` loses to ``A.T @ B`` at 4096^3.
* f16: storage f16 (``enable f16``), f32 accumulators; ``f16_math`` variants also multiply in f16 (packed
  ``vec4<f16>`` FMAs) and flush the partial products into the f32 accumulators once per K tile.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from typing import Any

from ...dtypes import DType, float16, float32, int32
from ..base import View, contiguous_strides
from .kernels.plan import Plan, span
from .kernels.wgsl import MAIN_1D, PARAM_WORDS, WORKGROUP, coalesce, grid, guard_nan, header, strided_offsets

TEMPLATE_VERSION = 6  # bump when generated code changes meaning or the variants change: invalidates autotune caches
MAX_SPLITS = 256  # split-K: the most K splits (each an f32 partial of the output in the workspace)
#: the split counts the tuner times for a product of few output tiles and a long K. 32 and 128 fill the gaps: on an
#: H100 (2026-12-07) the MNIST CNN's dense conv2 weight gradient (288 x 36864 x 64) went 17.5 -> 18.7 TFLOP/s
#: (0.59 -> 0.62 of cuBLAS); twelve counts (24, 48, 96, 192 too) gave 18.9
SPLITS = (2, 4, 8, 16, 32, 64, 128, MAX_SPLITS)

# params words: 0..2 element offsets of out, a, b (filled by ``launch``); 3 first z of this dispatch; 4 M, 5 N, 6 K,
# 7 a_sm, 8 a_sk, 9 b_sk, 10 b_sn, 11 splits, 12 k per split, 13 split stride of out; 14.. batch shape, then batch
# strides of out, a, b
_W_BATCH = 14
MAX_RANK = (PARAM_WORDS - _W_BATCH) // 4
_STYPE = {float32: "f32", float16: "f16", int32: "i32"}


@dataclass(frozen=True, slots=True)
class Variant:
    """Tuning knobs of the template (everything that is not dictated by the operands)."""

    name: str
    bm: int  # output tile rows per workgroup
    bn: int  # output tile columns per workgroup
    bk: int  # K step held in workgroup memory
    tm: int  # rows per thread (multiple of 4)
    tn: int  # columns per thread (multiple of 4)
    stages: int = 2  # 1: load-barrier-compute-barrier; 2: double-buffered workgroup memory + register prefetch
    pad: int = 1  # vec4s of padding per workgroup-memory row
    f16_math: bool = False  # f16 only: multiply in f16, accumulate per K tile into f32
    #: (columns, rows) of threads that one 32-wide subgroup covers, or (0, 0): rows of ``bn / tn`` threads. A
    #: squarer block reads fewer distinct vec4s of workgroup memory per instruction (fewer shared-memory wavefronts)
    warp: tuple[int, int] = (0, 0)
    #: workgroups walk the output in bands of this many tile rows, column by column (0: row by row), so that
    #: the workgroups in flight share their operands' tiles in L2
    band: int = 0
    #: stream-K: this many workgroups share the output tiles' K iterations evenly (0: a workgroup per tile). A
    #: tile split between workgroups is summed from their partial tiles by a second pass (``stream_fixup_source``):
    #: with as many workgroups as the GPU runs at once, no wave of tiles runs part-empty
    stream: int = 0
    #: K groups: the workgroup is this many copies of the tile's threads, each over its own share of the
    #: workgroup's K range, summed in workgroup memory at the end (a power of two; 1: none). A product of a few
    #: small output tiles and a long K (a small layer's weight gradient) then takes one dispatch, not split-K's two
    kgroups: int = 1
    #: strided loads with the parts of their addresses and guards that do not change along K computed once, before
    #: the K loop (``_load_code``); a knob to time (``.hl``), not yet measured
    hoist: bool = False

    def __post_init__(self) -> None:
        qx, qy = self.warp
        wx, wy = self.bn // self.tn, self.bm // self.tm
        if (qx or qy) and (qx * qy != 32 or wx % qx or wy % qy):
            raise ValueError(f"variant {self.name}: warp {self.warp} must be 32 threads tiling {wx} x {wy}")
        if self.stream < 0 or (self.stream and (self.band or self.f16_math)):
            raise ValueError(
                f"variant {self.name}: stream-K takes a positive workgroup count ({self.stream}), without a band "
                "walk or f16 math"
            )
        kg = self.kgroups
        if kg < 1 or kg & (kg - 1) or (kg > 1 and (self.stream or qx)):
            raise ValueError(
                f"variant {self.name}: K groups take a power of two ({kg}), without stream-K or a warp layout"
            )

    @property
    def threads(self) -> int:
        return self.kgroups * self.tile_threads

    @property
    def tile_threads(self) -> int:
        """The threads of one K group, which together hold the output tile."""
        return (self.bm // self.tm) * (self.bn // self.tn)

    def smem_bytes(self, elem: int) -> int:
        """Workgroup memory of the operand tiles (each K group's own) and of the K groups' final sum (f32 or i32:
        half the groups' output tiles at once)."""
        sums = self.kgroups // 2 * self.bm * self.bn * 4 if self.kgroups > 1 else 0
        return self.kgroups * self.stages * self.bk * (self.bm + self.bn + 8 * self.pad) * elem + sums


def k_grouped(v: Variant, kgroups: int) -> Variant:
    """``v`` with ``kgroups`` K groups in each workgroup (the name says so: ``.kg8``); ValueError where it cannot."""
    return replace(v, name=f"{v.name}.kg{kgroups}", kgroups=kgroups)


def _v(name: str, bm: int, bn: int, bk: int, tm: int, tn: int, kgroups: int = 1, **kw: Any) -> Variant:
    """A table variant (``kgroups`` > 1: :func:`k_grouped` of the tile, its name ending ``.kgN``)."""
    v = Variant(name, bm, bn, bk, tm, tn, **kw)
    return k_grouped(v, kgroups) if kgroups > 1 else v


#: the variants the tuner may pick (``name`` is what the cache file stores). Ordered roughly big -> small.
VARIANTS: tuple[Variant, ...] = (
    _v("128x128k8.8x8.db", 128, 128, 8, 8, 8),
    _v("128x256k8.8x16.db", 128, 256, 8, 8, 16),
    _v("256x128k8.16x8.db", 256, 128, 8, 16, 8),
    _v("128x256k8.8x16.db.p0", 128, 256, 8, 8, 16, pad=0),
    # K step 16 without padding: exactly 48 KiB of workgroup memory (where the adapter allows it; lavapipe's 32 KiB
    # does not). On an H200 (2026-12-04, warm clocks) 4096^3 ran 43.9 TFLOP/s against 42.3 for the k8 tile
    _v("128x256k16.8x16.db.p0", 128, 256, 16, 8, 16, pad=0),
    _v("128x128k16.8x8.db", 128, 128, 16, 8, 8),
    _v("128x128k8.8x8.ss", 128, 128, 8, 8, 8, stages=1),
    _v("128x128k8.8x8.db.p0", 128, 128, 8, 8, 8, pad=0),
    _v("128x64k16.8x4.db", 128, 64, 16, 8, 4),
    _v("64x128k16.4x8.db", 64, 128, 16, 4, 8),
    _v("64x64k16.4x4.db", 64, 64, 16, 4, 4),
    _v("64x64k16.8x8.db", 64, 64, 16, 8, 8),
    # narrow tiles with a larger per-thread block, for a convolution's GEMMs (32 or 64 channels on one side, every
    # pixel of an image on the other) and small layers: on an H200 the tuner takes 32x256 for a 1-channel conv's
    # forward and 32x128 for 14x14 input gradients; on 24x24 ones the 4x4 blocks stay faster (BENCHMARKS.md)
    _v("64x128k16.8x8.db", 64, 128, 16, 8, 8),
    _v("32x128k16.4x8.db", 32, 128, 16, 4, 8),
    _v("32x256k8.4x16.db", 32, 256, 8, 4, 16),
    _v("128x32k16.8x4.db", 128, 32, 16, 8, 4),
    _v("32x64k16.4x4.db", 32, 64, 16, 4, 4),
    # found by ``vkblas bench gemm-variants --variants`` on an H100 (2026-12-07), against the tuner's pick: a 96-row
    # tile of 12x4 per thread for a long-K weight gradient whose M is a multiple of 96 (the MNIST CNN's dense conv2
    # dW, 288 x 36864 x 64: 0.63 -> 0.71 of cuBLAS, split 64). (K step 32 took fc3 dW, 10 x 512 x 256, from 0.71 to
    # 0.76; not a candidate: a K step of 32 would be one more that a convolution's channels must be a multiple of)
    _v("96x64k16.12x4.db", 96, 64, 16, 12, 4),
    _v("32x32k16.4x4.db", 32, 32, 16, 4, 4),
    # K step 8 for a convolution's gathered GEMMs (CONV_ONLY; fewer registers per thread): on an H200 (2026-12-03)
    # the MNIST CNN's conv2 forward 0.45 -> 0.41 ms, its weight gradient 0.65 -> 0.54, input gradient 0.70 -> 0.64
    _v("64x64k8.4x4.db", 64, 64, 8, 4, 4),
    _v("32x64k8.4x4.db", 32, 64, 8, 4, 4),
    _v("32x128k8.4x8.db", 32, 128, 8, 4, 8),
    _v("32x192k8.4x12.db", 32, 192, 8, 4, 12),
    # K groups, for a few output tiles over a long K (``K_GROUP_TILES``): one dispatch where split-K takes two. On
    # an H100 (2026-12-07) the MLP's fc3 weight gradient (10 x 512 x 256) went 7.71 -> 6.81 us (0.71 -> 0.80 of
    # cuBLAS) and its forward (512 x 256 x 10) 7.15 -> 5.95 us (0.89 -> 1.07), the best of 13 K-group tiles timed
    _v("16x16k8.4x4.db.p0", 16, 16, 8, 4, 4, pad=0, kgroups=16),
    _v("16x32k16.4x4.ss.p0", 16, 32, 16, 4, 4, stages=1, pad=0, kgroups=8),
    _v("128x128k16.8x8.h16", 128, 128, 16, 8, 8, f16_math=True),
    _v("64x64k16.4x4.h16", 64, 64, 16, 4, 4, f16_math=True),
    _v("64x128k16.4x8.h16", 64, 128, 16, 4, 8, f16_math=True),
    _v("128x64k16.8x4.h16", 128, 64, 16, 8, 4, f16_math=True),
    _v("32x64k16.4x4.h16", 32, 64, 16, 4, 4, f16_math=True),
)
BY_NAME = {v.name: v for v in VARIANTS}
#: thread layouts and walk orders worth timing on top of a variant (``vkblas bench gemm-variants``); none is a
#: tuner candidate until a GPU measurement shows it pays
LAYOUTS: tuple[tuple[tuple[int, int], int], ...] = (((8, 4), 0), ((4, 8), 0), ((0, 0), 8), ((8, 4), 8))


def streamed(v: Variant, workgroups: int) -> Variant:
    """``v`` as a stream-K kernel of ``workgroups`` workgroups (the name says so: ``.sk132``)."""
    return replace(v, name=f"{v.name}.sk{workgroups}", stream=workgroups)


def unstreamed(v: Variant) -> Variant:
    """The tile of a stream-K variant, one workgroup per output tile."""
    return replace(v, name=v.name.rpartition(".sk")[0], stream=0) if v.stream else v


def table_variant(name: str) -> Variant | None:
    """The variant a tuner's cache entry names: one of :data:`VARIANTS`, or one of them as stream-K (``.skN``);
    None for any other name."""
    if name in BY_NAME:
        return BY_NAME[name]
    base, sep, groups = name.rpartition(".sk")
    if sep and base in BY_NAME and groups.isdigit() and int(groups) > 0:
        return streamed(BY_NAME[base], int(groups))
    return None


def rearranged(v: Variant, warp: tuple[int, int] = (0, 0), band: int = 0) -> Variant:
    """``v`` with its threads laid out ``warp`` per subgroup and its workgroups walking bands of ``band`` tile rows
    (the name says so: ``.w8x4``, ``.b8``). ValueError where ``warp`` does not tile ``v``'s threads."""
    tag = (f".w{warp[0]}x{warp[1]}" if warp[0] else "") + (f".b{band}" if band else "")
    return replace(v, name=v.name + tag, warp=warp, band=band)


_NAME = re.compile(
    r"(?P<base>(?P<bm>\d+)x(?P<bn>\d+)k(?P<bk>\d+)\.(?P<tm>\d+)x(?P<tn>\d+)(?:\.(?P<stages>db|ss))?"
    r"(?:\.p(?P<pad>\d+))?(?P<h16>\.h16)?(?P<hl>\.hl)?)"
    r"(?:\.w(?P<qx>\d+)x(?P<qy>\d+))?(?:\.b(?P<band>\d+))?(?:\.kg(?P<kg>\d+))?(?:\.sk(?P<sk>\d+))?"
)


def variant_named(name: str) -> Variant:
    """The variant a name spells, in the table's notation (``128x256k16.8x16.db.p0``: a 128x256 tile, K step 16,
    8x16 per thread, double-buffered (the default), no padding; ``.ss`` single-staged, ``.h16`` f16 math, ``.hl``
    hoisted load addresses, ``.w8x4`` and ``.b8`` the layouts of :func:`rearranged`, ``.kg8`` eight K groups
    (:func:`k_grouped`), ``.sk132`` stream-K over 132 workgroups (:func:`streamed`)),
    whether or not it is in :data:`VARIANTS`: a tile to time before it becomes a candidate (``vkblas bench
    gemm-variants --variants``). ValueError naming the problem otherwise."""
    if name in BY_NAME:
        return BY_NAME[name]
    m = _NAME.fullmatch(name)
    if m is None:
        raise ValueError(
            f"GEMM variant {name!r}: expected BMxBNkBK.TMxTN[.db|.ss][.pPAD][.h16][.hl][.wQXxQY][.bBAND][.kgGROUPS]"
            "[.skWORKGROUPS], "
            "e.g. 128x256k16.8x16.db.p0"
        )
    bm, bn, bk, tm, tn = (int(m[g]) for g in ("bm", "bn", "bk", "tm", "tn"))
    if min(bm, bn, tm, tn, bk) < 1 or tm % 4 or tn % 4 or bm % tm or bn % tn or bk % 4:
        raise ValueError(
            f"GEMM variant {name!r}: the per-thread block {tm}x{tn} must be positive multiples of 4 dividing the "
            f"tile {bm}x{bn}, and the K step {bk} a positive multiple of 4"
        )
    v = Variant(
        m["base"], bm, bn, bk, tm, tn, stages=1 if m["stages"] == "ss" else 2,
        pad=int(m["pad"] or 1), f16_math=bool(m["h16"]), hoist=bool(m["hl"]),
    )  # fmt: skip
    warp = (int(m["qx"]), int(m["qy"])) if m["qx"] else (0, 0)
    v = rearranged(v, warp, int(m["band"] or 0)) if warp[0] or m["band"] else v
    v = k_grouped(v, int(m["kg"])) if m["kg"] else v
    if m["sk"] is None:
        return v
    if int(m["sk"]) < 1:
        raise ValueError(f"GEMM variant {name!r}: stream-K needs at least one workgroup")
    return streamed(v, int(m["sk"]))


#: the most output tiles for which the tuner times K-group variants: where the tiles alone leave most of the GPU idle
K_GROUP_TILES = 64

#: variants the tuner times only for gathered (convolution) GEMMs: plain GEMMs keep the candidates they were
#: measured with, and each extra candidate is one more chance for timing noise to pick a slower one
CONV_ONLY = frozenset({"64x64k8.4x4.db", "32x64k8.4x4.db", "32x128k8.4x8.db", "32x192k8.4x12.db"})
#: every gathered GEMM's K step (a masked gather needs channels in multiples; K groups take no gather)
K_STEPS = frozenset(v.bk for v in VARIANTS if v.kgroups == 1)


@dataclass(frozen=True, slots=True)
class Gather:
    """An operand read through a convolution's geometry instead of strides: implicit GEMM, the im2col matrix is
    never stored. Element ``(i, k)`` of the operand (``i`` along M for a, N for b) is a *tap* and a *pixel*, one
    on each index (``tap_on_k``); the pixel is ``(n, y, x)`` over ``images`` images of a ``grid`` (``images`` 1:
    the image is the GEMM's batch, through the operand's batch stride). The source tensor is read through its
    (n, c, h, w) ``strides`` (any non-negative ones), of ``channels`` x ``src`` (h, w).

    * ``window``: ``src[n, c, y*sh + ky*dh - ph, x*sw + kx*dw - pw]`` (0 outside), tap ``(c, ky, kx)``: conv2d's
      columns (forward: tap on K; the weight gradient: tap on N, pixel on K).
    * ``transposed``: ``src[n, c, (y + ph - ky*dh) / sh, ...]`` where that divides and lands inside, tap
      ``(c, ky, kx)`` over the output gradient's channels, pixel over the input's grid: the input gradient.
    * ``planes``: ``src[n, c, q]``, the tap is the channel ``c`` alone and the pixel ``(n, q)`` runs over the
      source's own planes: the output gradient as the (C, N*OH*OW) matrix of the weight gradient.
    * ``weights``: ``src[r, c, ky, kx]``, the (rows, taps) weight matrix of the forward or the input gradient read
      through the weight's own strides (``images``: the rows, ``src``: the kernel; ``strides``: of rows, channels,
      ky, kx), so the channels-last taps need no copy of the weight.

    ``channels_last``: the tap runs ``(ky, kx, c)``, channel fastest (the weight matrix laid out to match). Where
    the channels are a multiple of the K step, a K tile then has one ``(ky, kx)``: its bounds check and offset are
    computed once per tile instead of per element, the index arithmetic that otherwise outweighs the FMAs.
    """

    kind: str
    tap_on_k: bool
    channels: int
    src: tuple[int, int]
    grid: tuple[int, int]
    images: int
    strides: tuple[int, int, int, int]
    kernel: tuple[int, int] = (1, 1)
    stride: tuple[int, int] = (1, 1)
    padding: tuple[int, int] = (0, 0)
    dilation: tuple[int, int] = (1, 1)
    channels_last: bool = False

    def masks_tiles(self, bk: int) -> bool:
        """Whether the GEMM must add each K tile only to the columns its taps reach, and can: the input gradient's
        taps past the output gradient's edge are not terms of its sum (PyTorch's col2im never adds them), and
        loading them as 0 would still put ``0 * w`` into it, NaN for an inf or NaN weight. With channels-last
        taps and the channels a multiple of the K step, a tile has one (ky, kx), so validity is per column."""
        return self.kind == "transposed" and self.tap_on_k and self.channels_last and self.channels % bk == 0

    @property
    def mode(self) -> str:
        """The scalar load layout that keeps neighbouring invocations on neighbouring pixels (coalesced reads); for
        the weights, on whichever of rows and channels lie closer in memory."""
        if self.kind == "weights":
            return "si" if self.strides[0] <= self.strides[1] else "sk"
        return "si" if self.tap_on_k else "sk"

    def extent(self) -> int:
        """Elements past the operand's (per-batch) offset that the gather may reach."""
        sn, sc, sy, sx = self.strides
        return 1 + (self.images - 1) * sn + (self.channels - 1) * sc + (self.src[0] - 1) * sy + (self.src[1] - 1) * sx

    def key(self) -> str:
        """The geometry in the autotuner's shape class (a different gather can have a different best variant)."""
        tag = f"{self.kind}{'k' if self.tap_on_k else 'i'}{'l' * self.channels_last}"
        return f"{tag}{self.kernel}{self.stride}{self.dilation}".replace(" ", "")

    def _taps(self, p: str, tap: str, tile_k: tuple[str, str, int] | None) -> list[str]:
        """WGSL lines splitting ``tap`` into ``{p}c``, ``{p}ky``, ``{p}kx`` (see :meth:`code`)."""
        kh, kw = self.kernel
        ch = self.channels
        if not self.channels_last:
            return [
                f"    let {p}c = {tap} / {kh * kw}u; let {p}r = {tap} % {kh * kw}u;"
                f" let {p}ky = {p}r / {kw}u; let {p}kx = {p}r % {kw}u;"
            ]
        if tile_k is not None and self.tap_on_k and ch % tile_k[2] == 0:  # (ky, kx) of the whole tile
            k0, kk, _ = tile_k
            first = f"    let {p}j = {k0} / {ch}u; let {p}c = {k0} % {ch}u + {kk};"
        else:
            first = f"    let {p}j = {tap} / {ch}u; let {p}c = {tap} % {ch}u;"
        return [first, f"    let {p}ky = {p}j / {kw}u; let {p}kx = {p}j % {kw}u;"]

    def code(self, p: str, gi: str, gk: str, tile_k: tuple[str, str, int] | None = None) -> tuple[list[str], str, str]:
        """(WGSL lines, validity condition, u32 element offset) of operand element (``gi``, ``gk``); ``p`` prefixes
        the names. Everything is u32 arithmetic by constants (the driver turns the divisions into multiplies).
        ``tile_k``: (the K tile's start, the element's place in it, the K step), for the per-tile taps."""
        tap, pix = (gk, gi) if self.tap_on_k else (gi, gk)
        sn, sc, sy, sx = self.strides
        gy, gx = self.grid
        if self.kind == "weights":  # the row is the pixel: one image of the kernel's size per row
            lines = self._taps(p, tap, tile_k)
            return lines, "true", f"({pix} * {sn}u + {p}c * {sc}u + {p}ky * {sy}u + {p}kx * {sx}u)"
        lines = []
        if self.images > 1:
            lines.append(f"    let {p}n = {pix} / {gy * gx}u; let {p}q = {pix} % {gy * gx}u;")
            base, q = f"{p}n * {sn}u + ", f"{p}q"
        else:
            base, q = "", pix
        if self.kind == "planes":
            if sy == gx * sx:  # rows of the plane are contiguous in each other: no (y, x) split
                return lines, "true", f"{base}{tap} * {sc}u + {q} * {sx}u"
            lines.append(f"    let {p}y = {q} / {gx}u; let {p}x = {q} % {gx}u;")
            return lines, "true", f"{base}{tap} * {sc}u + {p}y * {sy}u + {p}x * {sx}u"
        lines += self._taps(p, tap, tile_k)
        lines.append(f"    let {p}y = {q} / {gx}u; let {p}x = {q} % {gx}u;")
        # the offset as (pixel part) + (tap part), in wrapping u32 arithmetic (exact wherever the element is read):
        # a thread's tap part is the same for every K tile (or every pixel), its pixel part the same for every rep
        # of its loads, so the compiler computes each once; only the checks that some (pixel, tap) fails are
        # emitted (without padding, a window's taps all land inside)
        conds, pix, tap = [], [f"{p}n * {sn}u"] * (self.images > 1), [f"{p}c * {sc}u"]
        axes = zip(self.src, self.grid, self.stride, self.padding, self.dilation, (sy, sx), strict=True)
        for ax, (n, g, s, pd, d, st) in enumerate(axes):
            o, k, u = f"{p}{'yx'[ax]}", f"{p}k{'yx'[ax]}", f"{p}u{'yx'[ax]}"
            kmax = (self.kernel[ax] - 1) * d
            if self.kind == "window":  # u = o*s + k*d, the source coordinate plus the padding
                lines.append(f"    let {u} = {o} * {s}u + {k} * {d}u;")
                hi = (g - 1) * s + kmax >= n + pd
                # both bounds as one compare where both can fail: below the padding, u - pd wraps past n
                conds += [f"{u} - {pd}u < {n}u" if hi else f"{u} >= {pd}u"] if pd else [f"{u} < {n}u"] * hi
                pix.append(f"{o} * {s * st}u" + (f" - {pd * st}u" if pd * st else ""))
                tap.append(f"{k} * {d * st}u")
                continue
            # transposed: the output pixel o' with o'*s = o + p - k*d
            lines.append(f"    let {u} = {o} + {pd}u; let {u}k = {k} * {d}u;")
            t = f"({u} - {u}k)"
            hi = (g - 1 + pd) // s >= n
            # as for a window: where both can fail, u < uk wraps t far past n, which checks both
            conds += [f"{u} >= {u}k"] if kmax > pd and not (hi and (2**32 - kmax) // s >= n) else []
            if s > 1:  # the pixel and the tap in one term
                conds.append(f"{t} % {s}u == 0u")
                t = f"({t} / {s}u)"
                pix.append(f"{t} * {st}u")
            else:
                pix.append(f"{u} * {st}u")
                tap[-1] += f" - {k} * {d * st}u"
            conds += [f"{t} < {n}u"] if hi else []
        addr = f"({' + '.join(pix)}) + ({' + '.join(tap)})"
        return lines, " && ".join(conds) or "true", f"({addr})"


@dataclass(frozen=True, slots=True)
class Spec:
    """What the operands dictate: dtype, batch rank, load mode of a and b, output vector stores, split-K, and a
    convolution gather for an operand read through its geometry."""

    dtype: DType
    rank: int
    a_mode: str  # "vi" vec4 along M | "vk" vec4 along K | "si" scalar, M fastest | "sk" scalar, K fastest
    b_mode: str  # same with N for M
    out_vec: bool  # N % 4 == 0 (and offsets aligned): vec4 stores
    split: bool  # writes f32 partials to a workspace (split-K)
    a_gather: Gather | None = None  # then a_mode is the gather's scalar layout
    b_gather: Gather | None = None
    #: "rows": out[m, n] += bias[m] (a convolution's channels), "cols": out[m, n] += bias[n] (a linear layer's
    #: features), in the epilogue: a 4th binding, contiguous; split-K adds it in split 0's partials.
    #: "sum_rows": the 4th binding (M,) is written, not read: ``sum_k a[m, k]`` (see :func:`_row_sums`)
    bias: str = ""
    #: an elementwise op that followed the GEMM, done in its epilogue (``EPILOGUES``; never with split-K): out is
    #: still stored, and the op's result goes to one more binding laid out as out; "relu_grad" also reads its
    #: saved ReLU output from another binding of that layout
    act: str = ""

    @property
    def extra(self) -> int:
        """Bindings after out, a and b: the bias, the epilogue op's result and its second operand."""
        return bool(self.bias) + EPILOGUES.get(self.act, 0)


#: what a GEMM's 4th binding is (``Spec.bias``): none, a bias added to each row or column, the row sums of ``a``
BIAS_MODES = ("", "rows", "cols", "sum_rows")

#: elementwise ops a GEMM's epilogue can do (``Spec.act``), with the bindings each adds. Their formulas are the
#: elementwise table's (``ops/elementwise.py``: relu = where(x < 0, 0, x), relu_grad = where(out <= 0, 0, g)), so
#: the fused result has the same bits as the separate dispatch
EPILOGUES = {"relu": 1, "relu_grad": 2}


def applicable(v: Variant, spec: Spec, limits: dict[str, Any]) -> bool:
    """Whether ``v`` can run ``spec`` on a device with these limits."""
    if v.f16_math and spec.dtype is not float16:
        return False
    if v.threads > limits.get("max-compute-invocations-per-workgroup", 256):
        return False
    if spec.bias == "sum_rows" and _sum_lanes(v) < 1:
        return False
    if v.kgroups > 1 and (spec.a_gather or spec.b_gather):
        return False
    return workgroup_bytes(v, spec) <= limits.get("max-compute-workgroup-storage-size", 16384)


def workgroup_bytes(v: Variant, spec: Spec) -> int:
    """The workgroup memory ``v``'s kernel for ``spec`` declares: its operand tiles and, for a masked gather, one
    flag per stage. The flags count: 128x256k16.p0's tiles fill an H100's 48 KiB exactly, and the 8 bytes past it
    hung the ResNet layer's input gradient in the tuner (wgpu does not check the total; the driver ran it)."""
    elem = 2 if (spec.dtype is float16 and v.f16_math) else 4
    masked = spec.b_gather is not None and spec.b_gather.masks_tiles(v.bk)
    sums = 16 * v.kgroups * _sum_lanes(v) * (v.bm // 4) if spec.bias == "sum_rows" and elem == 2 else 0  # f16: own
    return v.smem_bytes(elem) + 4 * v.stages * masked + sums


def _sum_lanes(v: Variant) -> int:
    """Invocations per vec4 of rows that add up a K tile's rows for the row sums (``_row_sums``): as many as a K
    group has, and as its A tiles have room for their partial sums at the end."""
    return min(v.tile_threads, v.stages * v.bk * (v.bm // 4 + v.pad)) // (v.bm // 4)


# ---------------------------------------------------------------------------------------------------- generator


def _load_code(
    op: str,
    mode: str,
    tile: int,
    bk: int,
    nt: int,
    smem: str,
    ctype: str,
    row_v: int,
    gather: Gather | None = None,
    hoist: bool = False,
) -> tuple[list[str], list[str], list[str]]:
    """(setup lines, load-into-registers lines, store-to-workgroup-memory lines) for one operand tile of ``tile x
    bk``; the setup goes once before the K loop (after the tile's ``i0``), the loads and stores in every K step.

    ``op`` is "a" (tile rows = M) or "b" (tile rows = N); registers are ``{op}r{i}``; ``sbase`` is the vec4 offset
    of the workgroup buffer being filled. Globals used: {op}o (element offset), {op}si / {op}sk (strides), i0 (tile
    start along M or N), k0, kend, I (M or N). A ``gather`` replaces the strided address (scalar modes only).

    ``hoist`` (strided operands): the parts of each load's address and guard that do not change along K are
    computed once in the setup, and a K step adds ``k0``'s offset. Without it every K step computes the whole
    address, and on an H100 the driver's compiler did not hoist it (the 4096^3 tile's SASS, 2026-12-08: each of
    its six loads a K step is about 19 instructions, ten of them a dependent chain, and two branches: about 115 of
    the main loop's 333 instructions besides its 2,048 FMAs)."""
    vec = mode[0] == "v"
    count = tile * bk // (4 if vec else 1)
    reps = -(-count // nt)
    setup: list[str] = []
    loads, stores = [], []
    tv = f"vec4<{ctype}>"
    # element l = lid + r*nt of the tile is (l % period, l / period) along (fast, slow); when nt is a multiple of
    # the period, that is (lid % period, lid / period + r*nt/period): every rep of a thread has the same fast
    # coordinate, spelled the same, so a gather's arithmetic on it is computed once (strided loads keep the
    # plain spelling their tuning was measured with)
    period = {"vi": tile // 4, "vk": bk // 4, "si": tile, "sk": bk}[mode]
    unit = " >> 2" if vec else ""  # vec4 operands are indexed in vec4s: every such address is a multiple of 4
    if gather is None and hoist:  # the K step's offset, shared by the operand's loads
        setup_k = f"    let kq{op} = (i32(k0) * {op}sk){unit};"
    for r in range(reps):
        guard = f"l{op}{r} < {count}u" if count % nt else ""
        coords = [f"    let l{op}{r} = lid + {r * nt}u;"]
        if gather is not None and nt % period == 0:
            fast, slow = f"(lid % {period}u)", f"(lid / {period}u + {r * nt // period}u)"
        else:
            fast, slow = f"(l{op}{r} % {period}u)", f"(l{op}{r} / {period}u)"
        if mode == "vi":  # vec4 along M/N: l -> (k, i4)
            ii, kk = f"{fast} * 4u", slow
        elif mode == "vk":  # vec4 along K: l -> (i, k4)
            ii, kk = slow, f"{fast} * 4u"
        elif mode == "si":
            ii, kk = fast, slow
        else:
            ii, kk = slow, fast
        coords.append(f"    let i{op}{r} = {ii}; let k{op}{r} = {kk};")
        zero = f"    var {op}r{r} = {tv}({ctype}(0));" if vec else f"    var {op}r{r} = {ctype}(0);"
        if gather is not None:
            cond = f"i0{op} + i{op}{r} < I{op} && k0 + k{op}{r} < kend" + (f" && {guard}" if guard else "")
            lines, valid, offset = gather.code(
                f"g{op}{r}", f"(i0{op} + i{op}{r})", f"(k0 + k{op}{r})", ("k0", f"k{op}{r}", bk)
            )
            loads.append(
                [*coords, *lines, zero]
                + [f"    if ({cond} && {valid}) {{ {op}r{r} = {ctype}(g{op}[u32({op}o) + {offset}]); }}"]
            )
        elif not hoist:
            cond = f"i0{op} + i{op}{r} < I{op} && k0 + k{op}{r} < kend" + (f" && {guard}" if guard else "")
            at = f"{op}o + i32(i0{op} + i{op}{r}) * {op}si + i32(k0 + k{op}{r}) * {op}sk"
            at = f"u32(({at}){unit})" if vec else f"u32({at})"
            loads.append([*coords, zero, f"    if ({cond}) {{ {op}r{r} = {tv if vec else ctype}(g{op}[{at}]); }}"])
        else:
            row_ok = f"i0{op} + i{op}{r} < I{op}" + (f" && {guard}" if guard else "")
            at = f"({op}o + i32(i0{op} + i{op}{r}) * {op}si + i32(k{op}{r}) * {op}sk){unit}"
            setup += [*coords, f"    let ok{op}{r} = {row_ok}; let q{op}{r} = {at};"]
            value = f"{tv}(g{op}[u32(q{op}{r} + kq{op})])" if vec else f"{ctype}(g{op}[u32(q{op}{r} + kq{op})])"
            loads.append(
                [setup_k] * (r == 0) + [zero, f"    if (ok{op}{r} && k0 + k{op}{r} < kend) {{ {op}r{r} = {value}; }}"]
            )
        pre = f"if ({guard}) {{ " if guard else ""
        post = " }" if guard else ""
        if mode == "vi":
            stores.append(f"    {pre}{smem}[sbase + k{op}{r} * {row_v}u + (i{op}{r} >> 2u)] = {op}r{r};{post}")
        elif mode == "vk":
            parts = [
                f"{smem}[sbase + (k{op}{r} + {c}u) * {row_v}u + (i{op}{r} >> 2u)][i{op}{r} & 3u] = {op}r{r}[{c}];"
                for c in range(4)
            ]
            stores.append(f"    {pre}{' '.join(parts)}{post}")
        else:
            stores.append(
                f"    {pre}{smem}[sbase + k{op}{r} * {row_v}u + (i{op}{r} >> 2u)][i{op}{r} & 3u] = {op}r{r};{post}"
            )
    return setup, loads, stores


def _flat(groups: list[list[str]]) -> list[str]:
    """The lines of :func:`_load_code`'s loads, one list per load, in order."""
    return [line for group in groups for line in group]


def source(v: Variant, spec: Spec) -> str:
    """The WGSL of variant ``v`` specialised for ``spec``."""
    dt = spec.dtype
    st = _STYPE[dt]
    is_int = dt is int32
    acc = "i32" if is_int else "f32"
    ctype = "f16" if v.f16_math else acc  # type in workgroup memory and of the products
    out_t = "f32" if spec.split else st
    wx, wy = v.bn // v.tn, v.bm // v.tm
    nt = wx * wy
    gm, gn = v.tm // 4, v.tn // 4  # vec4 groups per thread
    row_a, row_b = v.bm // 4 + v.pad, v.bn // 4 + v.pad  # workgroup-memory row length in vec4s
    size_a, size_b = v.bk * row_a, v.bk * row_b
    bufs = [
        ("go", f"vec4<{out_t}>" if spec.out_vec else out_t),
        ("ga", f"vec4<{st}>" if spec.a_mode[0] == "v" else st),
        ("gb", f"vec4<{st}>" if spec.b_mode[0] == "v" else st),
    ] + [("gbias", "f32" if spec.split and spec.bias == "sum_rows" else st)] * bool(spec.bias)
    if spec.act:
        vt = f"vec4<{st}>" if spec.out_vec else st
        bufs += [("gact", vt)] + [("gsaved", vt)] * (EPILOGUES[spec.act] - 1)
    if v.stream:  # stream-K's partial tiles, each bm x bn row-major, two slots per workgroup
        bufs.append(("gw", "vec4<f32>"))
    # the extra bindings' offsets are params words 3.. (bias, act, saved, partial tiles): the words after them move
    sh = spec.extra + bool(v.stream)
    w_act = 3 + int(bool(spec.bias))  # word of the act binding's offset, then the saved one's

    def word(i: int) -> str:
        return f"{i + sh if i >= 3 else i}u"

    kg = v.kgroups
    if kg > 1 and (spec.a_gather or spec.b_gather):
        raise ValueError(f"variant {v.name}: K groups take no gathered operand")
    src = header(bufs, dt is float16)
    src += f"var<workgroup> As: array<vec4<{ctype}>, {kg * v.stages * size_a}>;\n"
    src += f"var<workgroup> Bs: array<vec4<{ctype}>, {kg * v.stages * size_b}>;\n"
    if kg > 1:  # half the K groups' output tiles, as each round of their sum stores them
        src += f"var<workgroup> Ks: array<vec4<{acc}>, {kg // 2 * gm * 4 * gn * nt}>;\n"
    gb_ = spec.b_gather
    masked = gb_ is not None and gb_.masks_tiles(v.bk)
    if gb_ is not None and gb_.kind == "transposed" and not masked:
        raise ValueError(f"a transposed gather needs channels-last taps in multiples of the K step {v.bk}: {gb_}")
    if masked:  # per stage: the last K tile (numbered from 1) whose weights held an inf or NaN
        src += f"var<workgroup> nonfinite: array<atomic<u32>, {v.stages}>;\n"
    src += _row_sums(v, spec, ctype).decl
    src += f"@compute @workgroup_size({nt * kg})\n"
    grid_size = " @builtin(num_workgroups) nwg: vec3<u32>," if v.band else ""  # a band walk needs the grid
    index = "lidx" if kg > 1 else "lid"  # K groups: lid is the thread's place in its group
    src += f"fn main(@builtin(workgroup_id) wid: vec3<u32>,{grid_size} @builtin(local_invocation_index) {index}: u32)"
    src += " {\n"
    if kg > 1:
        src += f"    let kg = lidx / {nt}u; let lid = lidx % {nt}u;\n"
        src += f"    let kga = kg * {v.stages * size_a}u; let kgb = kg * {v.stages * size_b}u;\n"
    src += f"    let z = wid.z + pu({word(3)});\n    let S = pu({word(11)});\n"
    src += "    let split = z % S;\n    let bidx = z / S;\n"
    w_str = [_W_BATCH + sh + spec.rank * (i + 1) for i in range(3)]
    inits = ["pi(0u)", "pi(1u)", "pi(2u)"]
    src += strided_offsets("bidx", spec.rank, _W_BATCH + sh, ["oo", "ao", "bo"], inits, w_str)
    src += f"""    oo += i32(split * pu({word(13)}));
    let M = pu({word(4)}); let N = pu({word(5)}); let K = pu({word(6)});
    let Ia = M; let Ib = N;
    let asi = pi({word(7)}); let ask = pi({word(8)}); let bsk = pi({word(9)}); let bsi = pi({word(10)});
"""
    if v.stream:
        src += _stream_segment(v, word(12), 3 + spec.extra)
    elif kg > 1:  # the workgroup's K range (its split's) in kg equal runs of whole K tiles, one per group
        src += f"    let kwb = split * pu({word(12)});\n    let kwe = min(K, kwb + pu({word(12)}));\n"
        src += f"    let kper = (kwe - min(kwe, kwb) + {kg * v.bk - 1}u) / {kg * v.bk}u * {v.bk}u;\n"
        src += "    let kbeg = kwb + kg * kper;\n    let kend = min(kwe, kbeg + kper);\n"
    else:
        src += f"    let kbeg = split * pu({word(12)});\n    let kend = min(K, kbeg + pu({word(12)}));\n"
    if v.band:  # band b holds tile rows [b*band, b*band + band): within it, columns outer, rows inner
        src += f"""    let pid = wid.y * nwg.x + wid.x; let first = pid / ({v.band}u * nwg.x) * {v.band}u;
    let rows = min(nwg.y - first, {v.band}u); let inband = pid - first * nwg.x;
    let i0a = (first + inband % rows) * {v.bm}u; let i0b = inband / rows * {v.bn}u;
"""
    elif not v.stream:  # (stream-K: the segment's tile)
        src += f"    let i0a = wid.y * {v.bm}u; let i0b = wid.x * {v.bn}u;\n"
    if v.warp[0]:
        qx, qy = v.warp
        src += "    let wrp = lid / 32u; let lane = lid % 32u;\n"  # subgroup wrp covers a qx x qy block
        src += f"    let tx = wrp % {wx // qx}u * {qx}u + lane % {qx}u;\n"
        src += f"    let ty = wrp / {wx // qx}u * {qy}u + lane / {qx}u;\n"
    else:
        src += f"    let tx = lid % {wx}u; let ty = lid / {wx}u;\n"
    if spec.act:  # the act (and saved) bindings are laid out as out: the same place past their own offsets
        src += f"    let oact = oo - pi(0u) + pi({w_act}u);\n"
        if EPILOGUES[spec.act] > 1:
            src += f"    let osav = oo - pi(0u) + pi({w_act + 1}u);\n"
    for i in range(gm * 4):
        for j in range(gn):
            src += f"    var c{i}_{j} = vec4<{acc}>({acc}(0));\n"
    pa, la_, sa = _load_code("a", spec.a_mode, v.bm, v.bk, nt, "As", ctype, row_a, spec.a_gather, v.hoist)
    pb, lb_, sb = _load_code("b", spec.b_mode, v.bn, v.bk, nt, "Bs", ctype, row_b, spec.b_gather, v.hoist)
    la, lb, setup = _flat(la_), _flat(lb_), "".join(line + "\n" for line in pa + pb)

    def products(buf: str, guarded: bool) -> list[str]:
        """The unrolled product of one K tile, each K step in its own block so the a*/b* names can repeat;
        ``guarded``: each product added only where the column's mask ``m{h}`` is set (a masked gather's slow path,
        in f32 even for f16 math)."""
        ptype = "f16" if v.f16_math else "f32"
        lines = (
            [f"    var p{i}_{j} = vec4<f16>(0);" for i in range(gm * 4) for j in range(gn)] * v.f16_math * (not guarded)
        )
        for kk in range(v.bk):
            lines.append("    {")
            lines += [f"    let a{g} = As[{buf}a + {kk * row_a + g * wy}u + ty];" for g in range(gm)]
            lines += [f"    let b{h} = Bs[{buf}b + {kk * row_b + h * wx}u + tx];" for h in range(gn)]
            for g in range(gm):
                for r in range(4):
                    for h in range(gn):
                        c, q = f"c{g * 4 + r}_{h}", f"p{g * 4 + r}_{h}"
                        if guarded:
                            prod = f"f32(a{g}[{r}]) * vec4<f32>(b{h})"
                            lines.append(f"    {c} += select(vec4<f32>(0.0), {prod}, m{h});")
                        elif v.f16_math:
                            lines.append(f"    {q} = fma(vec4<{ptype}>(a{g}[{r}]), b{h}, {q});")
                        elif is_int:
                            lines.append(f"    {c} += a{g}[{r}] * b{h};")
                        else:
                            lines.append(f"    {c} = fma(vec4<f32>(a{g}[{r}]), b{h}, {c});")
            lines.append("    }")
        if v.f16_math and not guarded:
            lines += [f"    c{i}_{j} += vec4<f32>(p{i}_{j});" for i in range(gm * 4) for j in range(gn)]
        return lines

    def compute(buf: str, tile_k0: str, stage: str, mark: str) -> str:
        """One K tile's products. A masked gather's tile whose weights hold an inf or NaN (``nonfinite[stage]`` is
        ``mark``) adds each product only to the columns its taps reach (see ``Gather.masks_tiles``); every other
        tile, where the missing taps' ``0 * w`` is exactly 0, takes the plain products."""
        if not masked or gb_ is None:
            return "\n".join(products(buf, False)) + "\n"
        lines = [f"    if (atomicLoad(&nonfinite[{stage}]) == {mark}) {{"]
        for h in range(gn):
            valid = []
            for c in range(4):
                code, cond, _ = gb_.code(
                    f"m{h}_{c}", f"(i0b + {h * 4 * wx + c}u + tx * 4u)", tile_k0, (tile_k0, "0u", v.bk)
                )
                lines += code
                valid.append(cond)
            lines.append(f"    let m{h} = vec4<bool>({', '.join(valid)});")
        lines += products(buf, True) + ["    } else {"] + products(buf, False) + ["    }"]
        return "\n".join(lines) + "\n"

    def flag(stage: str, mark: str) -> str:
        """A masked gather's weights tile, just stored to ``stage``: raise its flag if it holds an inf or NaN."""
        if not masked:
            return ""
        vec = spec.a_mode[0] == "v"
        count = v.bm * v.bk // (4 if vec else 1)
        ty, exp = ("vec4<u32>", "vec4<u32>(0x7f800000u)") if vec else ("u32", "0x7f800000u")
        f32 = "vec4<f32>" if vec else "f32"
        # the exponent's bits all set: inf or NaN (a bit test, which no float mode can fold away)
        tests = [f"any((bitcast<{ty}>({f32}(ar{r})) & {exp}) == {exp})" for r in range(-(-count // nt))]
        return f"    if ({' || '.join(tests)}) {{ atomicMax(&nonfinite[{stage}], {mark}); }}\n"

    sums = _row_sums(v, spec, ctype)
    # (K groups: every group runs as many K tiles, past its end as zeros, so the barriers stay uniform)
    tiles_k = f"kper / {v.bk}u" if kg > 1 else f"(kend - min(kend, kbeg) + {v.bk - 1}u) / {v.bk}u"
    src += sums.init + f"    let ntiles = {tiles_k};\n"
    if masked:  # workgroup memory starts undefined on some drivers (lavapipe): the flags start at "no tile"
        src += f"    if (lid < {v.stages}u) {{ atomicStore(&nonfinite[lid], 0u); }}\n    workgroupBarrier();\n"
    # each K group's operand tiles start at kga / kgb of As / Bs
    base_a, base_b = ("kga", "kgb") if kg > 1 else ("0u", "0u")
    at_a, at_b = ("kga + ", "kgb + ") if kg > 1 else ("", "")
    if v.stages == 2:
        src += "    var k0 = kbeg;\n    var sbase = 0u;\n" + setup
        src += "\n".join(la + lb) + "\n"
        src += "\n".join(sa).replace("sbase", base_a) + "\n" + "\n".join(sb).replace("sbase", base_b) + "\n"
        src += flag("0u", "1u") + "    workgroupBarrier();\n"
        src += "    for (var t = 0u; t < ntiles; t++) {\n"
        src += f"    let cura = {at_a}(t & 1u) * {size_a}u; let curb = {at_b}(t & 1u) * {size_b}u;\n"
        src += f"    k0 = kbeg + (t + 1u) * {v.bk}u;\n"  # loads past kend are masked off by the guards
        src += "\n".join(la + lb) + "\n"
        src += compute("cur", f"(kbeg + t * {v.bk}u)", "t & 1u", "t + 1u") + sums.add
        other_a, other_b = (f"{at}{size}u - (t & 1u) * {size}u" for at, size in ((at_a, size_a), (at_b, size_b)))
        src += f"    if (t + 1u < ntiles) {{\n    sbase = {other_a};\n" + "\n".join(sa) + "\n"
        src += f"    sbase = {other_b};\n" + "\n".join(sb) + "\n" + flag("1u - (t & 1u)", "t + 2u") + "    }\n"
        src += "    workgroupBarrier();\n    }\n"
    else:
        src += f"    let cura = {base_a}; let curb = {base_b};\n" + setup
        src += "    for (var t = 0u; t < ntiles; t++) {\n"
        src += f"    let k0 = kbeg + t * {v.bk}u;\n"
        stores = [x.replace("sbase", base_a) for x in sa] + [x.replace("sbase", base_b) for x in sb]
        src += "\n".join(la + lb + stores) + "\n" + flag("0u", "t + 1u") + "    workgroupBarrier();\n"
        src += compute("cur", "k0", "0u", "t + 1u") + sums.add + "    workgroupBarrier();\n    }\n"
    if kg > 1:
        src += _k_group_sum(kg, [f"c{i}_{j}" for i in range(gm * 4) for j in range(gn)], nt)
    # epilogue: guarded stores (out is contiguous: row stride N); with K groups, by the first group
    src += sums.store + "    if (kg == 0u) {\n" * (kg > 1)
    cv = f"vec4<{out_t}>"
    if spec.bias == "cols":  # one vec4 of the bias per column group; guarded: the edge tiles' columns past N
        for h in range(gn):
            col = f"(i0b + {h * 4 * wx}u + tx * 4u)"
            src += f"    var cb{h} = vec4<{acc}>(0);\n    if (split == 0u) {{\n"
            for c in range(4):
                src += f"    if ({col} + {c}u < N) {{ cb{h}[{c}] = {acc}(gbias[u32(pi(3u)) + {col} + {c}u]); }}\n"
            src += "    }\n"
    for g in range(gm):
        for r in range(4):
            i = g * 4 + r
            src += f"    let row{i} = i0a + {g * 4 * wy}u + ty * 4u + {r}u;\n"
            if spec.bias == "rows":  # guarded: the edge tiles' rows past M have no bias element
                src += f"    var bias{i} = {acc}(0);\n"
                src += f"    if (row{i} < M && split == 0u) {{ bias{i} = {acc}(gbias[u32(pi(3u)) + row{i}]); }}\n"
            for h in range(gn):
                col = f"(i0b + {h * 4 * wx}u + tx * 4u)"
                val = {"rows": f"(c{i}_{h} + vec4<{acc}>(bias{i}))", "cols": f"(c{i}_{h} + cb{h})"}.get(
                    spec.bias, f"c{i}_{h}"
                )
                val = val if out_t == acc else f"{cv}({val})"
                if v.stream:  # a segment short of the whole K range stores its partial tile
                    local = (g * 4 * wy + r) * (v.bn // 4) + h * wx
                    src += f"    if (!whole) {{ gw[wslot + {local}u + ty * {v.bn}u + tx] = c{i}_{h}; }} else {{\n"
                if spec.out_vec:
                    src += f"    if (row{i} < M && {col} < N) {{ let v = {val}; let e = i32(row{i} * N + {col});\n"
                    src += "    go[u32((oo + e) >> 2)] = v;\n"
                    if spec.act:
                        act = _epilogue(spec.act, "v", "gsaved[u32((osav + e) >> 2)]", cv)
                        src += f"    gact[u32((oact + e) >> 2)] = {act};\n"
                    src += "    }\n"
                else:
                    src += f"    {{ let v = {val}; let col = {col}; let base = i32(row{i} * N + col);\n"
                    for c in range(4):
                        src += f"    if (row{i} < M && col + {c}u < N) {{ go[u32(oo + base + {c})] = v[{c}];"
                        if spec.act:
                            saved = f"gsaved[u32(osav + base + {c})]"
                            src += f" gact[u32(oact + base + {c})] = {_epilogue(spec.act, f'v[{c}]', saved, out_t)};"
                        src += " }\n"
                    src += "    }\n"
                src += "    }\n" * bool(v.stream)
    if v.stream:
        src += "    it += kt1 - kt0;\n    }\n"
    return src + "    }\n" * (kg > 1) + "}\n"


def _k_group_sum(kg: int, accs: list[str], nt: int) -> str:
    """WGSL adding the accumulators ``accs`` of the ``kg`` K groups into group 0's, in halving rounds through the
    workgroup array ``Ks``: the upper half of the groups still summing stores its tiles, the lower half adds them
    (group ``g`` takes group ``g + half``'s). Every thread's ``len(accs)`` vec4s lie ``nt`` apart: neighbouring
    threads touch neighbouring vec4s."""

    def slot(g: str, e: int) -> str:
        return f"Ks[(({g}) * {len(accs)}u + {e}u) * {nt}u + lid]"

    src, half = "", kg // 2
    while half:
        src += "    workgroupBarrier();\n" * (half < kg // 2)  # the last round's adds are done with Ks
        src += f"    if (kg >= {half}u && kg < {2 * half}u) {{\n"
        src += "".join(f"    {slot(f'kg - {half}u', e)} = {c};\n" for e, c in enumerate(accs)) + "    }\n"
        src += f"    workgroupBarrier();\n    if (kg < {half}u) {{\n"
        src += "".join(f"    {c} += {slot('kg', e)};\n" for e, c in enumerate(accs)) + "    }\n"
        half //= 2
    return src


def _stream_segment(v: Variant, per_word: str, ws_word: int) -> str:
    """The head of a stream-K kernel: workgroup ``wid.x`` walks K iterations ``[wid.x * per, + per)`` of the
    output tiles laid end to end (``per``: params word ``per_word``), one loop turn per tile it touches (a
    *segment*), closed after the epilogue. A segment over the tile's whole K range stores the tile (``whole``);
    the others store partial tiles into ``gw``: slot 0 for the workgroup's first segment, slot 1 for its last."""
    q = v.bm * v.bn // 4
    return f"""    let iters = (K + {v.bk - 1}u) / {v.bk}u; let tcols = (N + {v.bn - 1}u) / {v.bn}u;
    let total = iters * tcols * ((M + {v.bm - 1}u) / {v.bm}u);
    let per = pu({per_word}); let start = wid.x * per;
    var it = start; let itend = min(total, start + per);
    let wsbase = (u32(pi({ws_word}u)) >> 2u) + wid.x * {2 * q}u;
    loop {{
    if (it >= itend) {{ break; }}
    let tile = it / iters; let kt0 = it % iters; let kt1 = min(iters, kt0 + itend - it);
    let kbeg = kt0 * {v.bk}u; let kend = min(K, kt1 * {v.bk}u);
    let i0a = tile / tcols * {v.bm}u; let i0b = tile % tcols * {v.bn}u;
    let whole = kt0 == 0u && kt1 == iters;
    let wslot = wsbase + select({q}u, 0u, it == start);
"""


def stream_fixup_source(v: Variant, dtype: DType) -> str:
    """The second pass of stream-K variant ``v``: each tile that several workgroups shared is the sum of their
    partial tiles, in workgroup order. Workgroup (x, y) sums vec4s ``x*WORKGROUP..`` of the tile in which workgroup
    ``y + 1`` began, unless that is a tile's first iteration (the workgroup before it stored no partial) or
    workgroup ``y`` began inside the same tile (it sums it). Bindings: out, the partial tiles; params words 2..5:
    M, N, K, K iterations per workgroup."""
    st = _STYPE[dtype]
    q = v.bm * v.bn // 4
    src = header([("go", st), ("gw", "vec4<f32>")], dtype is float16)
    src += f"""@compute @workgroup_size({WORKGROUP})
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32) {{
    let e = wid.x * {WORKGROUP}u + lid; let j = wid.y + 1u;
    let M = pu(2u); let N = pu(3u); let K = pu(4u); let per = pu(5u);
    let iters = (K + {v.bk - 1}u) / {v.bk}u; let tcols = (N + {v.bn - 1}u) / {v.bn}u;
    let total = iters * tcols * ((M + {v.bm - 1}u) / {v.bm}u);
    let start = j * per;
    if (e >= {q}u || start >= total || start % iters == 0u) {{ return; }}
    let t = start / iters; let first = t * iters;
    if ((j - 1u) * per > first) {{ return; }}
    var s = vec4<f32>(0.0);
    let base = u32(pi(1u)) >> 2u;
    for (var g = first / per; g <= (first + iters - 1u) / per; g++) {{
    s += gw[base + (g * 2u + select(1u, 0u, g * per >= first)) * {q}u + e];
    }}
    let row = t / tcols * {v.bm}u + e / {v.bn // 4}u; let col = t % tcols * {v.bn}u + e % {v.bn // 4}u * 4u;
    let o = u32(pi(0u)) + row * N + col;
    for (var c = 0u; c < 4u; c++) {{ if (row < M && col + c < N) {{ go[o + c] = {st}(s[c]); }} }}
}}
"""
    return src


@dataclass(frozen=True, slots=True)
class _RowSums:
    """WGSL pieces of ``Spec.bias == "sum_rows"`` (empty otherwise): declarations, the add after each K tile's
    products, and the final sum and store."""

    decl: str = ""
    init: str = ""
    add: str = ""
    store: str = ""


def _row_sums(v: Variant, spec: Spec, ctype: str) -> _RowSums:
    """``bias[m] = sum_k a[m, k]`` alongside ``out = a @ b``: the output gradient's sums that are a layer's bias
    gradient, where ``a`` is that gradient (a linear layer's ``dW = dY^T @ X``, a convolution's ``dW = dY @
    cols(X)^T``), without a reduction of their own (a dispatch, and a pass over ``dY``). The workgroups of the
    first tile column add up each K tile of A as it lies in workgroup memory (zeros outside ``M``/``K``):
    ``_sum_lanes`` invocations per vec4 of rows, each over its own K steps; at the end the lanes' partial sums
    meet in workgroup memory (the A tiles, free by then; f16 tiles: an f32 array of their own) and one
    invocation per vec4 stores its 4 rows. With split-K each split stores its partial sums (a workspace), which
    the splits' second pass adds up. The other tile columns do nothing more. K groups (``v.kgroups``) each sum
    their own tiles, and the first group's invocations add up every group's lanes."""
    if spec.bias != "sum_rows":
        return _RowSums()
    q, lanes, kg = v.bm // 4, _sum_lanes(v), v.kgroups
    row_a = v.bm // 4 + v.pad
    arr = "As" if ctype == "f32" else "Rs"
    decl = f"var<workgroup> Rs: array<vec4<f32>, {kg * lanes * q}>;\n" if arr == "Rs" else ""
    # where each K group's lanes meet: its own A tiles (kga), or its part of Rs
    group = v.stages * v.bk * row_a if arr == "As" else lanes * q
    at = f"kg * {group}u + " if kg > 1 else ""
    init = f"    let sumwg = i0b == 0u; let sq = lid % {q}u; let sj = lid / {q}u;\n    var rsum = vec4<f32>(0.0);\n"
    add = (
        f"    if (sumwg && sj < {lanes}u) {{ for (var kk = sj; kk < {v.bk}u; kk += {lanes}u) {{"
        f" rsum += vec4<f32>(As[cura + kk * {row_a}u + sq]); }} }}\n"
    )
    total = " + ".join(f"{arr}[lid + {g * group + j * q}u]" for g in range(kg) for j in range(lanes))
    where = "split * M + row" if spec.split else "row"
    value = "s[c]" if spec.split else f"{_STYPE[spec.dtype]}(s[c])"
    first = " && kg == 0u" if kg > 1 else ""
    store = (
        "    workgroupBarrier();\n"  # every invocation is done with the A tiles (uniform: outside the branch)
        f"    if (sumwg && sj < {lanes}u) {{ {arr}[{at}lid] = vec4<{'f32' if arr == 'Rs' else ctype}>(rsum); }}\n"
        "    workgroupBarrier();\n"
        f"    if (sumwg && lid < {q}u{first}) {{\n    let s = vec4<f32>({total});\n"
        "    for (var c = 0u; c < 4u; c++) {\n"
        "    let row = i0a + lid * 4u + c;\n"
        f"    if (row < M) {{ gbias[u32(pi(3u)) + {where}] = {value}; }}\n    }}\n    }}\n"
    )
    return _RowSums(decl, init, add, store)


def _epilogue(act: str, v: str, saved: str, ty: str) -> str:
    """WGSL of the epilogue op ``act`` on the stored value ``v`` (of type ``ty``; ``saved``: its second operand).
    The comparisons are NaN-guarded as the elementwise table's (``wgsl.guard_nan``): without it the H200's driver
    turned the fused ``relu(NaN)`` into 0 while the separate dispatch kept NaN."""
    zero = f"{ty}(0)"
    lanes = 4 if ty.startswith("vec4") else 1
    if act == "relu":
        return f"select({v}, {zero}, {guard_nan(f'{v} < {zero}', [v], '<', lanes)})"
    if act == "relu_grad":
        return f"select({v}, {zero}, {guard_nan(f'{saved} <= {zero}', [saved], '<=', lanes)})"
    raise ValueError(f"no GEMM epilogue for {act!r}; expected one of {sorted(EPILOGUES)}")


def reduce_source(dtype: DType, act: str = "", sum_rows: bool = False) -> str:
    """``out[i] = sum_s ws[i + s * total]``: the second pass of split-K (with the epilogue op ``act``, whose
    result and second operand are bindings 3 and 4; ``sum_rows``: bindings 3 and 4 are the row sums and their
    splits' partials, summed by the invocations past ``total``)."""
    st = _STYPE[dtype]
    extra = 2 if sum_rows else EPILOGUES.get(act, 0)
    more = [("gbias", st), ("wrs", "f32")] if sum_rows else [("gact", st), ("gsaved", st)][:extra]
    src = header([("go", st), ("ws", "f32")] + more, dtype is float16)
    src += MAIN_1D
    src += f"    let total = pu({2 + extra}u);\n"
    if sum_rows:
        src += f"""    let rows = pu({4 + extra}u);
    if (gid >= total + rows) {{ return; }}
    if (gid >= total) {{
    var r = 0.0;
    var q = u32(pi(3u)) + gid - total;
    for (var i = 0u; i < pu({3 + extra}u); i++) {{ r += wrs[q]; q += rows; }}
    gbias[u32(pi(2u)) + gid - total] = {st}(r);
    return;
    }}
"""
    else:
        src += "    if (gid >= total) { return; }\n"
    src += f"""    var s = 0.0;
    var p = u32(pi(1u)) + gid;
    for (var i = 0u; i < pu({3 + extra}u); i++) {{ s += ws[p]; p += total; }}
    let v = {st}(s);
    go[u32(pi(0u)) + gid] = v;
"""
    if act:
        src += f"    gact[u32(pi(2u)) + gid] = {_epilogue(act, 'v', 'gsaved[u32(pi(3u)) + gid]', st)};\n"
    return src + "}\n"


# ---------------------------------------------------------------------------------------------------- host side


def _mode(v: View, i_axis: int, k_axis: int, vec_ok: bool) -> str:
    """Load mode of an operand view: vec4 along its contiguous dim when 16-byte aligned, else scalar."""
    si, sk = v.strides[i_axis], v.strides[k_axis]
    ni, nk = v.shape[i_axis], v.shape[k_axis]
    aligned = vec_ok and v.offset % 4 == 0 and all(s % 4 == 0 for s in v.strides[:-2])
    if sk == 1 and (si % 4 == 0 or ni == 1) and nk % 4 == 0 and aligned:
        return "vk"
    if si == 1 and (sk % 4 == 0 or nk == 1) and ni % 4 == 0 and aligned:
        return "vi"
    return "si" if abs(si) <= abs(sk) else "sk"


Gathers = tuple[Gather | None, Gather | None]
NO_GATHER: Gathers = (None, None)


def make_spec(
    out: View, a: View, b: View, split: bool, gathers: Gathers = NO_GATHER, bias: str = "", act: str = ""
) -> Spec:
    """The spec of ``out = a @ b``; a gathered operand's view is its logical (batch..., rows, cols) matrix over the
    source's storage, with the source's per-image batch strides and zero inner strides."""
    if a.dtype not in _STYPE:
        raise TypeError(f"matmul of {a.dtype.name} tensors is not supported")
    bshape, _ = coalesce(out.shape[:-2], [out.strides[:-2], a.strides[:-2], b.strides[:-2]])
    if act and (act not in EPILOGUES or split):
        raise ValueError(f"GEMM epilogue {act!r}: expected one of {sorted(EPILOGUES)}, without split-K")
    if bias not in BIAS_MODES:
        raise ValueError(f"GEMM bias mode {bias!r}: expected one of {BIAS_MODES}")
    if bias == "sum_rows" and (act or bshape or not a.dtype.is_floating):
        raise ValueError(
            f"GEMM row sums: one float matrix product without an epilogue op (got {a.dtype.name}, "
            f"{len(bshape)} batch dims, {act!r})"
        )
    if len(bshape) > MAX_RANK - bool(bias) - EPILOGUES.get(act, 0):
        raise ValueError(f"{len(out.shape) - 2} batch dims are too many for the params window")
    n = out.shape[-1]
    out_vec = n % 4 == 0 and (split or out.offset % 4 == 0)
    ga, gb = gathers
    a_mode = ga.mode if ga else _mode(a, -2, -1, True)
    b_mode = gb.mode if gb else _mode(b, -1, -2, True)
    return Spec(a.dtype, len(bshape), a_mode, b_mode, out_vec, split, ga, gb, bias, act)


def _span(v: View, g: Gather | None) -> tuple[int, int]:
    """What a bound operand reaches past its offset: its strides' span, or a gathered operand's batch span plus
    what the gather reaches within one batch entry."""
    if g is None:
        return span(v.shape, v.strides)
    lo, hi = span(v.shape[:-2], v.strides[:-2])
    return lo, hi + g.extent() - 1


@dataclass(slots=True)
class GemmPlan:
    """Everything needed to record one matmul: the GEMM plan, the optional split-K reduce plan, the z chunking."""

    variant: Variant
    spec: Spec
    splits: int
    plan: Plan
    reduce: Plan | None
    nbatch: int
    zstep: int
    act: str = ""  # the epilogue op (``EPILOGUES``): in the GEMM's epilogue, or with split-K in the reduce pass
    workspace: int = 0  # stream-K: f32 elements of its partial tiles (then ``reduce`` is the fixup pass)


def build_plan(
    backend: Any,
    out: View,
    a: View,
    b: View,
    v: Variant,
    splits: int,
    gathers: Gathers = NO_GATHER,
    bias: str = "",
    act: str = "",
) -> GemmPlan:
    """Compile (cached by source) and lay out the dispatch of variant ``v`` with ``splits`` K splits; ``bias``:
    the plan binds a 4th view, a contiguous bias added to every row ("rows": (M,)) or column ("cols": (N,));
    ``act``: an epilogue op (``EPILOGUES``), whose views come after the bias, laid out as ``out``."""
    M, N = out.shape[-2:]
    K = a.shape[-1]
    if v.stream:
        return _stream_plan(backend, out, a, b, v, splits, gathers, bias, act)
    splits = 1 if a.dtype is int32 else max(1, min(splits, -(-K // v.bk)))
    spec = make_spec(out, a, b, splits > 1, gathers, bias, "" if splits > 1 else act)
    if v.f16_math and a.dtype is not float16:
        raise ValueError(f"variant {v.name} is f16-only")
    bshape, bstrides = coalesce(out.shape[:-2], [out.strides[:-2], a.strides[:-2], b.strides[:-2]])
    nbatch = 1
    for n in bshape:
        nbatch *= n
    max_groups = backend.rt.max_groups
    gx, gy = -(-N // v.bn), -(-M // v.bm)
    if gx > max_groups or gy > max_groups:
        raise ValueError(f"matmul with M={M}, N={N} exceeds the workgroup grid limit {max_groups}")
    per_split = -(-K // splits)
    kchunk = -(-per_split // v.bk) * v.bk  # K per split, a multiple of bk
    nbias = int(bool(bias))
    kernel = backend.dev.kernel(source(v, spec), bindings(v, spec))
    fmt = "<iii" + "i" * spec.extra + "I" + "I" * 3 + "i" * 4 + "III" + "I" * spec.rank + "i" * (3 * spec.rank)
    total = nbatch * M * N
    ostrides = bstrides[0]
    static = (
        M,
        N,
        K,
        a.strides[-2],
        a.strides[-1],
        b.strides[-2],
        b.strides[-1],
        splits,
        kchunk,
        total if splits > 1 else 0,
        *bshape,
        *ostrides,
        *bstrides[1],
        *bstrides[2],
    )
    zstep = max(1, (max_groups // splits)) * splits
    groups = (gx, gy, min(nbatch * splits, zstep))
    if splits > 1:
        ospan = (0, splits * total - 1)
    else:
        ospan = span(out.shape, out.strides)
    sums = bias == "sum_rows"
    nbias_el = M * splits if sums else (M if bias == "rows" else N)  # split row sums: a partial per split
    spans = (ospan, _span(a, spec.a_gather), _span(b, spec.b_gather)) + ((0, nbias_el - 1),) * nbias
    spans += (ospan,) * EPILOGUES.get(spec.act, 0)
    plan = Plan(kernel, fmt, static, groups, spans)
    red = None
    if splits > 1 and sums:  # the row sums' partials are summed by the same second pass
        rk = backend.dev.kernel(reduce_source(out.dtype, sum_rows=True), 4)
        red = Plan(
            rk,
            "<iiiiIII",
            (total, splits, M),
            grid(-(-(total + M) // WORKGROUP), max_groups),
            ((0, total - 1), (0, splits * total - 1), (0, M - 1), (0, splits * M - 1)),
        )
    elif splits > 1:  # an epilogue op goes into the sum of the partials
        extra = EPILOGUES.get(act, 0)
        rk = backend.dev.kernel(reduce_source(out.dtype, act), 2 + extra)
        red = Plan(
            rk,
            "<ii" + "i" * extra + "II",
            (total, splits),
            grid(-(-total // WORKGROUP), max_groups),
            ((0, total - 1), (0, splits * total - 1)) + ((0, total - 1),) * extra,
        )
    return GemmPlan(v, spec, splits, plan, red, nbatch, zstep, act)


def can_stream(dtype: DType, nbatch: int, k: int, splits: int = 1, gathers: Gathers = NO_GATHER, bias: str = "",
               act: str = "") -> bool:  # fmt: skip
    """Whether a stream-K variant can run this product: one float matrix product with K > 0, without split-K,
    gathers, bias or epilogue op."""
    return dtype.is_floating and nbatch == 1 and k > 0 and splits == 1 and gathers == NO_GATHER and not bias and not act


def bindings(v: Variant, spec: Spec) -> int:
    """Storage bindings of ``v``'s kernel for ``spec``: out, a, b, the spec's extras, stream-K's partial tiles."""
    return 3 + spec.extra + bool(v.stream)


def _stream_plan(
    backend: Any, out: View, a: View, b: View, v: Variant, splits: int, gathers: Gathers, bias: str, act: str
) -> GemmPlan:
    """:func:`build_plan` for a stream-K variant: one plain float matrix product (no batch, split-K, gather, bias
    or epilogue op: ValueError), ``v.stream`` workgroups at most, each over an equal share of the K iterations."""
    M, N = out.shape[-2:]
    K = a.shape[-1]
    spec = make_spec(out, a, b, False)
    nbatch = out.numel // (M * N) if M * N else 1
    if not can_stream(a.dtype, nbatch, K, splits, gathers, bias, act):
        raise ValueError(
            f"stream-K variant {v.name}: one float matrix product with K > 0, without split-K, gathers, bias, "
            f"epilogue op or batch (got {a.dtype.name}, K={K}, splits={splits}, bias={bias!r}, act={act!r}, "
            f"a batch of {nbatch})"
        )
    iters = -(-K // v.bk)
    work = iters * -(-M // v.bm) * -(-N // v.bn)  # K iterations of every output tile
    if work >= 2**31:
        raise ValueError(f"stream-K variant {v.name}: {work} K iterations overflow its u32 arithmetic")
    per = -(-work // v.stream)
    groups = -(-work // per)  # no workgroup without work
    kernel = backend.dev.kernel(source(v, spec), bindings(v, spec))
    static = (M, N, K, a.strides[-2], a.strides[-1], b.strides[-2], b.strides[-1], 1, per, 0)
    workspace = 2 * groups * v.bm * v.bn
    if 4 * workspace > backend.pool.binding:
        raise ValueError(
            f"stream-K variant {v.name}: the partial tiles of its {groups} workgroups ({4 * workspace} bytes) exceed "
            f"one binding ({backend.pool.binding} bytes)"
        )
    spans = (span(out.shape, out.strides), span(a.shape, a.strides), span(b.shape, b.strides), (0, workspace - 1))
    plan = Plan(kernel, "<iiiiI" + "I" * 3 + "i" * 4 + "III", static, (groups, 1, 1), spans)
    fixup = None
    if groups > 1 and per % iters:  # else every workgroup starts at a tile's first iteration: no shared tile
        fk = backend.dev.kernel(stream_fixup_source(v, out.dtype), 2)
        q = v.bm * v.bn // 4
        fspans = (span(out.shape, out.strides), (0, workspace - 1))
        fixup = Plan(fk, "<iiIIII", (M, N, K, per), (-(-q // WORKGROUP), groups - 1, 1), fspans)
    return GemmPlan(v, spec, 1, plan, fixup, 1, 1, "", workspace)


def launches(
    backend: Any, gp: GemmPlan, out: View, a: View, b: View, bias: View | None = None, act: tuple[View, ...] = ()
) -> list[tuple[Plan, tuple[View, ...], tuple[int, ...], tuple[int, int, int]]]:
    """The dispatches of ``gp`` as (plan, bound views, dynamic scalars, grid); allocates the split-K workspace.
    ``act``: the epilogue op's views (its result, then its second operand)."""
    extra = (bias,) if bias is not None else ()
    if gp.splits == 1:
        extra += act
    if out.numel == 0:
        return []
    if gp.workspace:  # stream-K: its partial tiles, then the fixup pass that sums them
        ws = View(backend.alloc(gp.workspace, float32), (gp.workspace,), (1,), 0)
        runs = [(gp.plan, (out, a, b, ws), (0,), gp.plan.groups)]
        return runs + ([(gp.reduce, (out, ws), (), gp.reduce.groups)] if gp.reduce is not None else [])
    target, tail = out, act
    if gp.splits > 1:  # f32 partials; the pooled buffer returns on drop (the queue orders its reuse)
        ws = backend.alloc(gp.splits * out.numel, float32)
        target = View(ws, out.shape, contiguous_strides(out.shape), 0)
        if gp.spec.bias == "sum_rows" and bias is not None:  # each split's row sums, summed with the partials
            m = out.shape[-2]
            extra = (View(backend.alloc(gp.splits * m, float32), (gp.splits * m,), (1,), 0),)
            tail = (bias, *extra)
    total, per, g = gp.nbatch * gp.splits, gp.zstep, gp.plan.groups
    out_list: list[tuple[Plan, tuple[View, ...], tuple[int, ...], tuple[int, int, int]]] = [
        (gp.plan, (target, a, b, *extra), (base,), (g[0], g[1], min(per, total - base)))
        for base in range(0, total, per)
    ]
    if gp.reduce is not None:
        out_list.append((gp.reduce, (out, target, *tail), (), gp.reduce.groups))
    return out_list


def record(
    backend: Any, gp: GemmPlan, out: View, a: View, b: View, bias: View | None = None, act: tuple[View, ...] = ()
) -> None:
    """Record the dispatches of ``gp`` into the backend's open compute pass (``bias``: the plan's 4th view;
    ``act``: its epilogue op's views)."""
    if bool(gp.spec.bias) != (bias is not None):
        raise ValueError(f"the GEMM plan {'needs' if gp.spec.bias else 'has no place for'} a bias")
    if len(act) != EPILOGUES.get(gp.act, 0):
        raise ValueError(f"the GEMM plan's epilogue {gp.act!r} takes {EPILOGUES.get(gp.act, 0)} views, got {len(act)}")
    if gp.splits == 1 and gp.nbatch <= gp.zstep and out.numel and not gp.workspace:  # one dispatch, as launches()
        g = gp.plan.groups
        views = (out, a, b) if bias is None else (out, a, b, bias)
        backend.launch("matmul", gp.plan, views + act, (0,), (g[0], g[1], gp.nbatch))
        return
    for plan, views, scalars, groups in launches(backend, gp, out, a, b, bias, act):
        backend.launch("matmul", plan, views, scalars, groups)


def default_choice(
    spec_dtype: DType, m: int, n: int, k: int, nbatch: int, limits: dict[str, Any]
) -> tuple[Variant, int]:
    """Heuristic variant and split count (used when autotuning is off or not worth it). Picked from what the
    tuner chose on an H200 (2026-11-29): the biggest tile that still gives enough workgroups; f16 multiplies
    in f16 (f32 accumulation across K tiles); split-K when the output alone gives few workgroups."""
    work = m * n * nbatch
    h16 = spec_dtype is float16
    if work >= 2048 * 2048 and min(m, n) >= 256:
        names = ["64x64k16.4x4.h16"] if h16 else ["128x256k16.8x16.db.p0", "128x256k8.8x16.db", "128x128k8.8x8.db"]
    elif work >= 1024 * 1024 and min(m, n) >= 128:
        names = ["64x64k16.4x4.h16"] if h16 else ["128x128k8.8x8.db"]
    elif work >= 64 * 64 * 128 and min(m, n) >= 64:
        names = ["64x64k16.4x4.h16"] if h16 else ["64x64k16.4x4.db"]
    else:
        names = ["32x64k16.4x4.db"] if min(m, n) >= 32 else ["32x32k16.4x4.db"]
    spec = Spec(spec_dtype, 0, "si", "si", False, False)
    v = next((BY_NAME[x] for x in names if applicable(BY_NAME[x], spec, limits)), BY_NAME["32x32k16.4x4.db"])
    tiles = -(-m // v.bm) * -(-n // v.bn) * nbatch
    splits = 1
    if k >= 1024 and tiles < 128:  # about 512 workgroups, each split at least 256 of K
        splits = max(1, min(MAX_SPLITS, k // 256, -(-512 // tiles)))
    return v, splits


def candidates(
    spec_dtype: DType, m: int, n: int, k: int, nbatch: int, limits: dict[str, Any], gathered: bool = False
) -> list[tuple[Variant, int]]:
    """(variant, splits) pairs worth timing for this shape: tiles not much larger than the problem, split-k where
    the output alone gives few workgroups; ``gathered``: a convolution's GEMM (also the ``CONV_ONLY`` variants)."""
    out: list[tuple[Variant, int]] = []
    for v in VARIANTS:
        if (v.f16_math and spec_dtype is not float16) or (v.name in CONV_ONLY and not gathered):
            continue
        if (v.bm > 2 * m and v.bm > 32) or (v.bn > 2 * n and v.bn > 32):
            continue
        tiles = -(-m // v.bm) * -(-n // v.bn) * nbatch
        if v.kgroups > 1:  # one dispatch for a few tiles over a long K (each group two K tiles at least)
            if not gathered and tiles <= K_GROUP_TILES and k >= 2 * v.kgroups * v.bk:
                out.append((v, 1))
            continue
        out.append((v, 1))
        if k >= 256 and tiles < 256:
            # a convolution's weight gradient has K = every pixel of the batch (~300k) and a few output tiles:
            # only hundreds of splits fill the GPU; a small layer's weight gradient (10 x 256, K = the batch) is
            # 8 workgroups of 32x32 without them
            least = 128 if tiles >= 32 else 64
            out += [(v, s) for s in SPLITS if k // s >= least and tiles * s <= 2048]
    d = default_choice(spec_dtype, m, n, k, nbatch, limits)
    if d not in out:
        out.insert(0, d)
    return out


#: workgroups per compute unit that :func:`wave_fits` fills the GPU with: split-K counts, and stream-K
WAVE_SPLITS_PER_UNIT = (1, 2, 3, 4)
WAVE_STREAMS_PER_UNIT = (1, 2)


def wave_fits(
    v: Variant, m: int, n: int, k: int, nbatch: int, units: int, streamable: bool
) -> list[tuple[Variant, int]]:
    """Plans of ``v``'s tile that give each of the GPU's ``units`` compute units the same work (the tuner's second
    stage, for its fastest tiles): split-K counts that make ``j x units`` workgroups of the tiles exactly, and,
    where ``streamable`` (:func:`can_stream`), stream-K over ``j x units`` workgroups, each at least four K
    tiles. On an H100 (2026-12-07) the MNIST CNN's dense conv2 weight gradient went 0.71 -> 0.84 of cuBLAS with
    88 splits of its 3 tiles (264 workgroups), and 3072^3 0.73 -> 0.96 by stream-K over 132 workgroups."""
    tiles = -(-m // v.bm) * -(-n // v.bn) * nbatch
    iters = -(-k // v.bk)
    out: list[tuple[Variant, int]] = []
    for j in WAVE_SPLITS_PER_UNIT:
        s, rest = divmod(j * units, tiles)
        if not rest and 2 <= s <= MAX_SPLITS and iters >= 2 * s:  # every split at least two K tiles
            out.append((v, s))
    if streamable and not (v.f16_math or v.band or v.stream or v.kgroups > 1):
        out += [(streamed(v, j * units), 1) for j in WAVE_STREAMS_PER_UNIT if iters * tiles >= 4 * j * units]
    return out
