"""``vkblas bench gemm``: one table of GEMM speed and accuracy for every path, in one run.

For each shape (square 256..8192, the MNIST MLP/CNN layers forward and backward, a tall-skinny, a large-K and a
batched case) it prints GFLOP/s and the norm-wise relative error against a float64 product of the same inputs
(``||C - C64||_F / ||C64||_F``) for: vkblas fp32, vkblas f16 (f16 storage; labelled), numpy fp32 on the CPU, and
PyTorch when installed (CPU fp32; on CUDA fp32 with TF32 off and TF32 on), plus the ratio vkblas fp32 / PyTorch fp32
(CUDA when present, else CPU). Layouts: ``nn`` = A @ B, ``nt`` = A @ B.T (a Linear forward), ``tn`` = A.T @ B (a
weight gradient); transposed operands are read through strides, as the autograd backward does.

Times are wall clock over a batch of back-to-back calls (about 0.5 TFLOP of work) ended by one synchronize, for vkblas
and for cuBLAS alike (what a training loop sees); the first call of a shape includes autotuning and is not timed.
That wall time includes each call's host cost, which at the small layer shapes (20 us kernels) outweighs the kernel.
So the table also compares the kernels alone ("kernel" columns, on a GPU with timestamp queries): vkblas's chosen
plan (split-K reduce included) repeated in one compute pass between two GPU timestamps, against cuBLAS's kernels
replayed from a CUDA graph between two CUDA events; both after about a second of the same work, so that the GPU's
clocks are up (timed cold, the first candidates of a run measured 2-3x slower on an H200).
"""

from __future__ import annotations

import argparse
import datetime
import functools
import json
import os
import platform
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

_SQUARE = (256, 512, 1024, 2048, 4096, 8192)


@dataclass(frozen=True)
class Shape:
    label: str
    batch: int
    m: int
    k: int
    n: int
    layout: str = "nn"

    @property
    def flops(self) -> float:
        return 2.0 * self.batch * self.m * self.n * self.k


def square_shapes(squares: Sequence[int]) -> list[Shape]:
    return [Shape(f"square {s}", 1, s, s, s) for s in squares]


def default_shapes(squares: Sequence[int] = _SQUARE) -> list[Shape]:
    """The squares, then the model layers and the special shapes (what ``vkblas bench gemm`` runs by default)."""
    shapes = square_shapes(squares)
    shapes += [
        # MNIST MLP 784-512-256-10, batch 512 (Linear: x @ W.T; backward dX = dY @ W, dW = dY.T @ X)
        Shape("mlp fc1 fwd", 1, 512, 784, 512, "nt"),
        Shape("mlp fc2 fwd", 1, 512, 512, 256, "nt"),
        Shape("mlp fc3 fwd", 1, 512, 256, 10, "nt"),
        Shape("mlp fc1 dX", 1, 512, 512, 784, "nn"),
        Shape("mlp fc1 dW", 1, 512, 512, 784, "tn"),
        Shape("mlp fc2 dW", 1, 256, 512, 512, "tn"),
        Shape("mlp fc3 dW", 1, 10, 512, 256, "tn"),
        # MNIST CNN conv2 (32->64, 3x3, 26x26 -> 24x24, batch 64) as im2col GEMM, forward and weight gradient
        Shape("cnn conv2 fwd", 1, 64 * 24 * 24, 288, 64, "nn"),
        Shape("cnn conv2 dW", 1, 288, 64 * 24 * 24, 64, "tn"),
        Shape("tall-skinny", 1, 65536, 256, 32, "nn"),
        Shape("large-K", 1, 256, 65536, 256, "nn"),
        Shape("batched 64x", 64, 256, 64, 256, "nn"),
    ]
    return shapes


def _operands(rng: np.random.Generator, s: Shape) -> tuple[np.ndarray, np.ndarray]:
    """Logical A (batch, m, k) and B (batch, k, n) in float32 (batch dim dropped when 1)."""
    a = rng.standard_normal((s.batch, s.m, s.k), dtype=np.float32)
    b = rng.standard_normal((s.batch, s.k, s.n), dtype=np.float32)
    return (a[0], b[0]) if s.batch == 1 else (a, b)


def _rel_err(c: Any, ref: np.ndarray) -> float:
    c = np.asarray(c, dtype=np.float64)
    return float(np.linalg.norm((c - ref).ravel()) / max(np.linalg.norm(ref.ravel()), 1e-300))


def _time(fn: Callable[[], Any], flops: float, budget: float = 0.3, max_reps: int = 200) -> float:
    """GFLOP/s of ``fn`` (which must include its own sync): best of a few batches after one warm-up."""
    fn()
    t0 = time.perf_counter()
    fn()
    t1 = time.perf_counter() - t0
    reps = int(min(max_reps, max(1, budget / max(t1, 1e-9))))
    best = t1
    for _ in range(min(3, reps)):
        t0 = time.perf_counter()
        for _ in range(max(1, reps // 3)):
            fn()
        best = min(best, (time.perf_counter() - t0) / max(1, reps // 3))
    return flops / best / 1e9


class _Vk:
    """vkblas at the backend level: the views a backward pass would hand to ``matmul``."""

    def __init__(self, device: str) -> None:
        from vkblas import backend as backends

        self.be = backends.get(device)
        self.name = self.be.dev.info["name"] if hasattr(self.be, "dev") else device

    def views(self, a: np.ndarray, b: np.ndarray, layout: str, dtype: Any) -> tuple[Any, Any, Any]:
        from vkblas.backend.base import View, contiguous_strides

        def put(x: np.ndarray, transposed: bool) -> Any:
            stored = np.ascontiguousarray(np.swapaxes(x, -1, -2)) if transposed else x
            st = contiguous_strides(stored.shape)
            strides = (*st[:-2], st[-1], st[-2]) if transposed else st
            return View(self.be.from_numpy(stored, dtype), x.shape, tuple(strides), 0)

        va, vb = put(a, layout[0] == "t"), put(b, layout[1] == "t")
        oshape = (*a.shape[:-1], b.shape[-1])
        out = View.of(self.be.alloc(int(np.prod(oshape)), dtype), oshape)
        return out, va, vb

    def run(self, s: Shape, a: np.ndarray, b: np.ndarray, dtype: Any) -> tuple[float, np.ndarray]:
        out, va, vb = self.views(a, b, s.layout, dtype)
        self.be.matmul(out, va, vb)  # first call: autotune + compile
        self.be.synchronize()

        # batch several calls per sync for small shapes: that is how a training loop records them
        inner = _inner(s)

        def batch() -> None:
            for _ in range(inner):
                self.be.matmul(out, va, vb)
            self.be.synchronize()

        gf = _time(batch, s.flops * inner)
        return gf, self.be.to_numpy(out)

    @property
    def has_timestamps(self) -> bool:
        """Whether the device can time kernels with GPU timestamp queries (what :meth:`kernel` needs)."""
        return "timestamp-query" in getattr(getattr(self.be, "dev", None), "features", ())

    def kernel(self, s: Shape, a: np.ndarray, b: np.ndarray, warm_s: float = 1.0) -> float:
        """GFLOP/s of the GEMM kernel(s) alone (GPU timestamps; see :attr:`has_timestamps`), after ``warm_s``
        seconds of the same work."""
        from vkblas.backend.vulkan.autotune import tuner
        from vkblas.dtypes import float32

        out, va, vb = self.views(a, b, s.layout, float32)
        t = tuner(self.be)
        gp = t.plan(out, va, vb)  # the plan matmul uses (the tuner's table: tuned by run() already)
        t0 = time.perf_counter()
        while time.perf_counter() - t0 < warm_s:
            t.time(gp, out, va, vb)
        return s.flops / min(t.time(gp, out, va, vb) for _ in range(5)) / 1e9


def _inner(s: Shape) -> int:
    """Calls per sync: enough GPU work (~0.5 TFLOP) that one sync's latency does not dominate (both libraries)."""
    return max(1, min(200, int(5e11 / s.flops)))


def _torch() -> Any:
    try:
        import torch
    except ImportError:
        return None
    return torch


def _torch_operands(torch: Any, s: Shape, a: np.ndarray, b: np.ndarray, dev: str) -> tuple[Any, Any]:
    """A and B on ``dev`` in the shape's layout: a ``t`` operand stored transposed and read through its strides."""

    def put(x: np.ndarray, transposed: bool) -> Any:
        t = torch.from_numpy(np.ascontiguousarray(np.swapaxes(x, -1, -2)) if transposed else x).to(dev)
        return t.transpose(-1, -2) if transposed else t

    return put(a, s.layout[0] == "t"), put(b, s.layout[1] == "t")


def cuda_graph(torch: Any, fn: Callable[[], Any], warmups: int = 3) -> Any:
    """``fn`` captured in a CUDA graph, after ``warmups`` calls on a side stream (as capture wants)."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(warmups):
            fn()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        fn()
    return graph


def _torch_run(torch: Any, s: Shape, a: np.ndarray, b: np.ndarray, dev: str, tf32: bool) -> tuple[float, Any]:
    ta, tb = _torch_operands(torch, s, a, b, dev)
    cuda = dev.startswith("cuda")
    if cuda:
        torch.backends.cuda.matmul.allow_tf32 = tf32
        torch.backends.cudnn.allow_tf32 = tf32
    out = torch.matmul(ta, tb)

    inner = _inner(s) if cuda else 1

    def step() -> None:
        for _ in range(inner):
            torch.matmul(ta, tb, out=out)
        if cuda:
            torch.cuda.synchronize()

    gf = _time(step, s.flops * inner)
    return gf, out.cpu().numpy()


def _torch_kernel(torch: Any, s: Shape, a: np.ndarray, b: np.ndarray, warm_s: float = 1.0) -> float:
    """GFLOP/s of cuBLAS fp32 (TF32 off) kernels alone: ``_inner(s)`` products captured in a CUDA graph, replayed
    between two events (no launch cost per product), after ``warm_s`` seconds of replays."""
    ta, tb = _torch_operands(torch, s, a, b, "cuda")
    torch.backends.cuda.matmul.allow_tf32 = False
    out = torch.matmul(ta, tb)
    inner = _inner(s)

    def products() -> None:
        for _ in range(inner):
            torch.matmul(ta, tb, out=out)

    graph = cuda_graph(torch, products, warmups=1)
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < warm_s:
        graph.replay()
        torch.cuda.synchronize()
    begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    best = float("inf")
    for _ in range(3):
        begin.record()
        graph.replay()
        end.record()
        torch.cuda.synchronize()
        best = min(best, begin.elapsed_time(end) * 1e-3 / inner)
    return s.flops / best / 1e9


def _reference(torch: Any, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """float64 product (on CUDA when present: numpy float64 at 8192 takes minutes on small machines)."""
    if torch is not None and torch.cuda.is_available():
        return torch.matmul(torch.from_numpy(a).cuda().double(), torch.from_numpy(b).cuda().double()).cpu().numpy()
    return a.astype(np.float64) @ b.astype(np.float64)


def run(
    shapes: Sequence[Shape],
    device: str = "vulkan",
    f16: bool = True,
    cpu: bool = True,
    use_torch: bool = True,
    seed: int = 0,
    json_path: str = "",
) -> tuple[list[str], list[list[Any]], dict[str, Any]]:
    """Measure every path on every shape; returns (header, rows, metadata). ``json_path``: rewritten after every
    shape, so an interrupted run keeps what it measured."""
    from vkblas.dtypes import float16, float32

    vk = _Vk(device)
    torch = _torch() if use_torch else None
    has_cuda = bool(torch is not None and torch.cuda.is_available())
    has_f16 = f16 and vk.be.supports(float16)
    cols = ["shape", "MxKxN", "layout", "vk fp32 GF/s", "err"]
    if has_f16:
        cols += ["vk f16 GF/s", "err"]
    if cpu:
        cols += ["numpy fp32 GF/s", "err"]
    if torch is not None and cpu:
        cols += ["torch cpu fp32 GF/s", "err"]
    if has_cuda:
        cols += ["cuBLAS fp32 GF/s", "err", "cuBLAS tf32 GF/s", "err"]
    cols += ["vk/torch fp32"]
    kernels = vk.has_timestamps
    if kernels:
        cols += ["vk kernel GF/s"] + ["cuBLAS kernel GF/s", "vk/cuBLAS kernel"] * has_cuda
    print("  " + "  ".join(cols), flush=True)  # the header first: each row is printed as soon as it is measured
    rng = np.random.default_rng(seed)
    rows: list[list[Any]] = []
    for s in shapes:
        a, b = _operands(rng, s)
        ref = _reference(torch, a, b)
        row: list[Any] = [s.label, (f"{s.batch}x" if s.batch > 1 else "") + f"{s.m}x{s.k}x{s.n}", s.layout]
        gf32, c = vk.run(s, a, b, float32)
        row += [gf32, _rel_err(c, ref)]
        if has_f16:
            gf, c = vk.run(s, a, b, float16)
            row += [gf, _rel_err(c, ref)]
        if cpu:
            big = s.flops > 2e11  # one rep is enough there
            fn = functools.partial(np.matmul, a, b)
            t0 = time.perf_counter()
            c = fn()
            gf = s.flops / (time.perf_counter() - t0) / 1e9 if big else _time(fn, s.flops)
            row += [gf, _rel_err(c, ref)]
        torch_fp32 = None
        if torch is not None and cpu:
            gf, c = _torch_run(torch, s, a, b, "cpu", False)
            row += [gf, _rel_err(c, ref)]
            torch_fp32 = gf
        if has_cuda:
            gf, c = _torch_run(torch, s, a, b, "cuda", False)
            row += [gf, _rel_err(c, ref)]
            torch_fp32 = gf
            gf, c = _torch_run(torch, s, a, b, "cuda", True)
            row += [gf, _rel_err(c, ref)]
            torch.backends.cuda.matmul.allow_tf32 = False
        row.append(gf32 / torch_fp32 if torch_fp32 else "-")
        if kernels:
            vk_kernel = vk.kernel(s, a, b)
            row.append(vk_kernel)
            if has_cuda:
                theirs = _torch_kernel(torch, s, a, b)
                row += [theirs, vk_kernel / theirs]
        rows.append(row)
        print("  " + "  ".join(_fmt(x) for x in row), flush=True)
        if json_path:
            _dump(json_path, cols, rows, _meta(vk, torch, has_cuda))
    return cols, rows, _meta(vk, torch, has_cuda)


def _dump(path: str, cols: Sequence[str], rows: Sequence[Sequence[Any]], meta: dict[str, Any]) -> None:
    with open(path, "w") as f:
        json.dump({"meta": meta, "columns": list(cols), "rows": list(rows)}, f, indent=1, default=str)


def _meta(vk: _Vk, torch: Any, has_cuda: bool) -> dict[str, Any]:
    meta = {
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "adapter": vk.name,
        "driver": getattr(vk.be, "dev", None) and vk.be.dev.info.get("driver"),
        "host": platform.node(),
        "torch": getattr(torch, "__version__", None),
        "cuda_device": torch.cuda.get_device_name(0) if has_cuda else None,
        "autotune": os.environ.get("VKBLAS_AUTOTUNE", "default"),
    }
    tuner = getattr(vk.be, "_gemm_tuner", None)
    if tuner is not None:
        meta["tuning"] = tuner.log
    return meta


def _fmt(x: Any) -> str:
    if isinstance(x, float):
        return f"{x:.3g}" if abs(x) < 0.01 else f"{x:.1f}" if abs(x) >= 10 else f"{x:.3f}"
    return str(x)


def format_table(cols: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    cells = [list(cols)] + [[_fmt(c) for c in r] for r in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(cols))]
    lines = [
        "| " + " | ".join(c.ljust(w) for c, w in zip(cells[0], widths, strict=True)) + " |",
        "|-" + "-|-".join("-" * w for w in widths) + "-|",
    ]
    lines += ["| " + " | ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)) + " |" for r in cells[1:]]
    return "\n".join(lines)


def add_shape_arguments(p: argparse.ArgumentParser) -> None:
    """``--device``, ``--sizes`` and ``--only``: which shapes a GEMM benchmark runs, on which device."""
    p.add_argument("--device", default="vulkan", help="vkblas device (default: the best Vulkan adapter)")
    p.add_argument(
        "--sizes",
        default=None,
        help="run only these square sizes, comma separated (default: "
        + ",".join(map(str, _SQUARE))
        + " and the model shapes)",
    )
    p.add_argument("--only", default="", help="run only shapes whose label contains one of these (comma separated)")


def selected_shapes(p: argparse.ArgumentParser, args: argparse.Namespace) -> list[Shape]:
    """The shapes that ``--sizes`` and ``--only`` select (``p.error`` on a bad ``--sizes``)."""
    if args.sizes is None:
        shapes = default_shapes()
    else:
        try:
            squares = [int(x) for x in args.sizes.split(",") if x.strip()]
        except ValueError:
            p.error(f"--sizes: expected comma-separated integers, got {args.sizes!r}")
        if not squares or min(squares) < 1:
            p.error(f"--sizes: expected positive sizes, got {args.sizes!r}")
        shapes = square_shapes(squares)
    if args.only:
        keys = [k.strip() for k in args.only.split(",") if k.strip()]
        shapes = [s for s in shapes if any(k in s.label for k in keys)]
    return shapes


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="vkblas bench gemm", description=__doc__.split("\n")[0])
    add_shape_arguments(p)
    p.add_argument("--no-f16", action="store_true", help="skip the vkblas f16 path")
    p.add_argument("--no-cpu", action="store_true", help="skip numpy and PyTorch on the CPU")
    p.add_argument("--no-torch", action="store_true", help="skip PyTorch")
    p.add_argument("--json", default="", help="also write the results (and the tuner's measurements) here")
    args = p.parse_args(argv)
    shapes = selected_shapes(p, args)
    cols, rows, meta = run(
        shapes, args.device, f16=not args.no_f16, cpu=not args.no_cpu, use_torch=not args.no_torch, json_path=args.json
    )
    title = f"GEMM, {meta['date']}, vkblas on {meta['adapter']} ({meta['driver']})" + (
        f", PyTorch {meta['torch']} on {meta['cuda_device']}" if meta.get("cuda_device") else ""
    )
    print(title)
    print(format_table(cols, rows), flush=True)
    if args.json:
        _dump(args.json, cols, rows, meta)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
