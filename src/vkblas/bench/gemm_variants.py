"""``vkblas bench gemm-variants``: every GEMM variant the tuner may pick, kernel for kernel, at each shape.

What to try next when a GEMM misses its goal. For each shape, in three stages:

1. every (variant, split count) candidate the tuner would time (``gemm.candidates``), and
2. for the ``--top`` fastest of those, the tuner's second stage (``gemm.wave_fits``: split-K counts and stream-K
   that fill whole waves of the measured compute units, timed here for every shape) and each of ``gemm.LAYOUTS``
   (subgroup thread blocks, banded workgroup order: ``gemm.rearranged``), which are not tuner candidates until a
   measurement like this one shows they pay;
3. any ``--variants`` named (``gemm.variant_named``: tiles not in the table, ``NAME/SPLITS`` for a split count),
   the same way: a tile is timed here before it becomes a candidate.

Each plan is self-checked against numpy first (``Tuner.verify``). Its kernel time is the best of ``--rounds``
rounds, each the tuner's timing (the plan repeated in one compute pass between two GPU timestamps), after about a
second of the same work so that the clocks are up. Beside it: cuBLAS fp32 (TF32 off) kernels replayed from a CUDA
graph, where PyTorch has CUDA. The table shows the ``--top`` fastest plans per shape, and the tuner's own choice.

    python3 -m vkblas.bench.gemm_variants --sizes 4096            # the square, 8 plans shown
    python3 -m vkblas.bench.gemm_variants --only mlp,cnn --top 4  # the model layers
    python3 -m vkblas.bench.gemm_variants --sizes 4096 --variants 128x192k16.8x12.db.p0,256x128k16.16x8.db.p0
    python3 -m vkblas.bench.gemm_variants --sizes 3072 --variants 128x256k16.8x16.db.p0.sk132  # stream-K, 132 WGs
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Sequence
from typing import Any

import numpy as np

from .gemm import Shape, _operands, _torch, _torch_kernel, _Vk, add_shape_arguments, format_table, selected_shapes

COLUMNS = ["shape", "MxKxN", "layout", "plan", "µs", "GF/s", "vs cuBLAS", "vs tuner's"]


def _timed(vk: _Vk, plans: dict[str, Any], out: Any, va: Any, vb: Any, rounds: int) -> dict[str, float]:
    """Seconds per run of each plan: the best of ``rounds`` rounds over all of them (clocks warmed first)."""
    from vkblas.backend.vulkan.autotune import tuner

    t = tuner(vk.be)
    first = next(iter(plans.values()))
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < 1.0:
        t.time(first, out, va, vb)
    best = dict.fromkeys(plans, float("inf"))
    for _ in range(rounds):
        for key, gp in plans.items():
            best[key] = min(best[key], t.time(gp, out, va, vb))
    return best


def parse_plans(text: str) -> list[tuple[Any, int]]:
    """``--variants``: comma-separated ``NAME`` or ``NAME/SPLITS`` -> (variant, split count) pairs; ValueError
    naming the bad entry."""
    from vkblas.backend.vulkan import gemm

    pairs = []
    for item in filter(None, (x.strip() for x in text.split(","))):
        name, _, splits = item.partition("/")
        if splits and not (splits.isdigit() and 1 <= int(splits) <= gemm.MAX_SPLITS):
            raise ValueError(f"--variants {item!r}: the split count must be 1..{gemm.MAX_SPLITS}, got {splits!r}")
        pairs.append((gemm.variant_named(name), int(splits or 1)))
    return pairs


def explore(
    shapes: Sequence[Shape],
    device: str = "vulkan",
    top: int = 8,
    rounds: int = 3,
    use_torch: bool = True,
    extra: Sequence[tuple[Any, int]] = (),
) -> tuple[list[str], list[list[Any]], str]:
    """The table's (header, rows) and the adapter's name: the ``top`` fastest plans per shape, the tuner's
    choice, and every ``extra`` (variant, splits) pair that runs on the device (see the module)."""
    from vkblas.backend.vulkan import gemm
    from vkblas.backend.vulkan.autotune import tuner
    from vkblas.dtypes import float32

    vk = _Vk(device)
    if not vk.has_timestamps:
        raise SystemExit(f"vkblas bench gemm-variants: {vk.name} has no timestamp queries to time kernels with")
    torch = _torch() if use_torch else None
    has_cuda = bool(torch is not None and torch.cuda.is_available())
    t = tuner(vk.be)
    units = t.compute_units()
    rng = np.random.default_rng(0)
    rows: list[list[Any]] = []
    for s in shapes:
        a, b = _operands(rng, s)
        out, va, vb = vk.views(a, b, s.layout, float32)
        chosen = t.plan(out, va, vb)  # tunes the shape class if the cache has no entry
        nbatch = max(1, s.batch)
        pairs = gemm.candidates(float32, s.m, s.n, s.k, nbatch, vk.be.dev.limits)
        pairs.append((chosen.variant, chosen.splits))
        plans = t.candidate_plans(pairs, out, va, vb)
        times = _timed(vk, plans, out, va, vb, rounds)
        lead = sorted(times, key=times.__getitem__)[:top]
        derived = []
        streamable = gemm.can_stream(float32, nbatch, s.k)
        for key in lead:
            gp = plans[key]
            if units > 1:  # the tuner's second stage for each, whether or not its waves are full
                derived += gemm.wave_fits(gemm.unstreamed(gp.variant), s.m, s.n, s.k, nbatch, units, streamable)
            for warp, band in gemm.LAYOUTS:
                try:
                    derived.append((gemm.rearranged(gp.variant, warp, band), gp.splits))
                except ValueError:  # this warp does not tile the variant's threads
                    continue
        more = t.candidate_plans(derived + list(extra), out, va, vb)
        times.update(_timed(vk, more, out, va, vb, rounds) if more else {})
        theirs = _torch_kernel(torch, s, a, b) if has_cuda else None
        mine = f"{chosen.variant.name}/{chosen.splits}"
        ranked = sorted(times, key=times.__getitem__)
        # a split count past what K allows is built with fewer splits: the plan's name says how many
        names = {v.name for v, _ in extra}
        asked = [key for key in times if key.rpartition("/")[0] in names]
        shown = list(dict.fromkeys(ranked[:top] + [mine] + sorted(asked, key=times.__getitem__)))
        dims = (f"{s.batch}x" if s.batch > 1 else "") + f"{s.m}x{s.k}x{s.n}"
        for key in shown:
            gf = s.flops / times[key] / 1e9
            label = key + (" (tuner)" if key == mine else "")
            rows.append(
                [
                    s.label,
                    dims,
                    s.layout,
                    label,
                    times[key] * 1e6,
                    gf,
                    gf / theirs if theirs else "-",
                    times[mine] / times[key],
                ]
            )
        ran = {key.rpartition("/")[0] for key in times}
        skipped = [f"{v.name}/{n}" for v, n in extra if v.name not in ran]
        print(
            f"  {s.label}: {len(times)} plans timed" + (f"; not run here: {', '.join(skipped)}" * bool(skipped)),
            flush=True,
        )
    return COLUMNS, rows, f"{vk.name} ({vk.be.dev.info.get('driver')})"


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="vkblas bench gemm-variants", description=__doc__.split("\n")[0])
    add_shape_arguments(p)
    p.add_argument("--top", type=int, default=8, help="plans shown per shape, and given the layouts (default 8)")
    p.add_argument("--rounds", type=int, default=3, help="timing rounds; each plan's best is kept (default 3)")
    p.add_argument("--no-torch", action="store_true", help="skip cuBLAS")
    p.add_argument(
        "--variants",
        default="",
        help="also time these plans at every shape, comma-separated NAME or NAME/SPLITS (tiles outside the table: "
        "BMxBNkBK.TMxTN[.db|.ss][.pPAD][.hl][.kgN][.skG], e.g. 128x192k16.8x12.db.p0/1; .hl: load addresses "
        "hoisted out of the K loop; .kgN: N K groups in a workgroup; .skG: stream-K over G workgroups)",
    )
    args = p.parse_args(argv)
    if args.top < 1 or args.rounds < 1:
        p.error(f"--top and --rounds: expected counts >= 1, got {args.top} and {args.rounds}")
    try:
        extra = parse_plans(args.variants)
    except ValueError as e:
        p.error(str(e))
    shapes = selected_shapes(p, args)
    cols, rows, adapter = explore(shapes, args.device, args.top, args.rounds, not args.no_torch, extra)
    print(f"GEMM plans by kernel time, vkblas on {adapter}; cuBLAS fp32 (TF32 off) from a CUDA graph where present")
    print(format_table(cols, rows), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
