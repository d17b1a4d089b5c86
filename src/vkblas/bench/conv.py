"""``vkblas bench conv``: one table of conv2d speed, forward and forward+backward, vkblas vs PyTorch.

Layers: the MNIST CNN's two 3x3 convolutions (1->32 on 28x28 and 32->64 on 14x14, padding 1) at batch 128 and 512,
and a ResNet-style 3x3 layer (64->64 on 56x56, padding 1, batch 32). Columns: milliseconds per forward and per
forward+backward (grads of weight and bias, and of the input except for a first layer) for vkblas on every device
present (or those given by ``--devices``), PyTorch on the CPU and on CUDA when present, and the ratio of the first
vkblas device's time to PyTorch's (CUDA when present, else CPU) for forward+backward.

Captured, like with like: on a device that captures graphs, forward+backward is also captured once and replayed
(``graph f+b``: no host cost per call, what a ``vkblas.compile`` step sees), beside PyTorch's forward+backward
captured in a CUDA graph (``torch.autograd.grad`` of the same output), with their ratio.

Times are wall clock per call, the best of a few batches of back-to-back calls each ended by one synchronize (what a
training loop sees). ``f+b host`` is the calling thread's CPU time per eager forward+backward while it issues them
(vkblas; PyTorch on CUDA): eager is host-bound where it meets the wall time, and issuing and running did not
overlap where the wall time is host plus graph. The first call of a layer (kernel compilation, autotuning) is not
in them: its seconds, and the GEMM tuner's share of them (compiling and self-checking candidates, timing them), go
to the progress line. PyTorch runs in fp32 arithmetic like vkblas: TF32 off (cuDNN's default is TF32 on tensor cores).
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from .gemm import cuda_graph, format_table


@dataclass(frozen=True)
class Layer:
    label: str
    batch: int
    cin: int
    cout: int
    size: int
    kernel: int = 3
    padding: int = 1
    input_grad: bool = True  # a network's first layer needs no input gradient

    def shapes(self) -> tuple[tuple[int, ...], tuple[int, ...]]:
        return (self.batch, self.cin, self.size, self.size), (self.cout, self.cin, self.kernel, self.kernel)


LAYERS = (
    Layer("mnist conv1 b128", 128, 1, 32, 28, input_grad=False),
    Layer("mnist conv2 b128", 128, 32, 64, 14),
    Layer("mnist conv1 b512", 512, 1, 32, 28, input_grad=False),
    Layer("mnist conv2 b512", 512, 32, 64, 14),
    Layer("resnet 3x3 b32", 32, 64, 64, 56),
)


def _time(fn: Callable[[], Any], sync: Callable[[], None], budget: float, max_reps: int = 50) -> float:
    """Milliseconds per call: warm-up, then the best of 3 batches sized to ~budget/3 each."""
    return _timed(fn, sync, budget, max_reps)[0]


def _timed(fn: Callable[[], Any], sync: Callable[[], None], budget: float, max_reps: int = 50) -> tuple[float, float]:
    """(wall ms, host ms) per call: warm-up, then the best of 3 batches sized to ~budget/3 each. Host is the
    calling thread's CPU time per call while it issues the batch (up to its synchronize), of the fastest batch:
    what issuing a call costs, to set beside the wall time (host-bound where the two meet; where wall is host plus
    the captured replay's time, issuing and running did not overlap)."""
    fn()
    sync()
    t0, c0 = time.perf_counter(), time.thread_time()
    fn()
    host = time.thread_time() - c0
    sync()
    best = once = max(time.perf_counter() - t0, 1e-6)
    if once >= budget:  # a slow device: one timed call is all the budget allows
        return once * 1e3, host * 1e3
    reps = max(1, min(max_reps, int(budget / 3 / once)))
    for _ in range(3):
        t0, c0 = time.perf_counter(), time.thread_time()
        for _ in range(reps):
            fn()
        issued = time.thread_time() - c0
        sync()
        wall = (time.perf_counter() - t0) / reps
        if wall < best:
            best, host = wall, issued / reps
    return best * 1e3, host * 1e3


def _vkblas(
    layer: Layer, device: str, x: np.ndarray, w: np.ndarray, b: np.ndarray, g: np.ndarray, budget: float
) -> tuple[tuple[float, ...], str]:
    """(forward ms, forward+backward ms) eager, then the captured forward+backward's ms where it can capture; and
    a line on the first forward+backward call (compilation and autotuning: its seconds, and the tuner's)."""
    import vkblas as vk
    from vkblas.nn import functional as F

    tx = vk.tensor(x, device=device, requires_grad=layer.input_grad)
    tw, tb = (vk.tensor(a, device=device, requires_grad=True) for a in (w, b))
    tg = vk.tensor(g, device=device)

    def fwd() -> None:
        with vk.no_grad():
            F.conv2d(tx, tw, tb, padding=layer.padding)

    def fwd_bwd() -> None:
        tx.grad = tw.grad = tb.grad = None
        F.conv2d(tx, tw, tb, padding=layer.padding).backward(tg)

    def sync() -> None:
        vk.synchronize(device)

    first = _first_call(device, fwd_bwd, sync)
    times = (_time(fwd, sync, budget), *_timed(fwd_bwd, sync, budget))
    if not vk.graphs.can_capture(device):
        return times, first
    graph = vk.graphs.Graph()
    with vk.graphs.capture(graph, device=device):  # the gradients' buffers are the graph's: each replay rewrites them
        fwd_bwd()
    return (*times, _time(graph.replay, sync, budget)), first


def _first_call(device: str, fn: Callable[[], None], sync: Callable[[], None]) -> str:
    """Run ``fn`` once; a line with its seconds, and what the GEMM tuner spent in them (shape classes tuned,
    seconds compiling candidates on its threads, then building and self-checking them, then timing them, and how
    many were timed only once: out of the running after the first round)."""
    from vkblas import backend as backends
    from vkblas.backend.vulkan import autotune

    tuner = getattr(backends.get(device), "_gemm_tuner", None)
    seen = len(tuner.log) if tuner is not None else 0
    t0 = time.perf_counter()
    fn()
    sync()
    line = f"{device} first f+b {time.perf_counter() - t0:.2f} s"
    tuner = getattr(backends.get(device), "_gemm_tuner", None)
    tuned = tuner.log[seen:] if tuner is not None else []
    if tuned:
        build, timing = sum(e["build_s"] for e in tuned), sum(e["time_s"] for e in tuned)
        compiling = sum(e["compile_s"] for e in tuned)
        count, pruned = sum(len(e["seconds"]) for e in tuned), sum(e.get("pruned", 0) for e in tuned)
        line += f" ({len(tuned)} GEMM classes tuned, {count} candidates: {compiling:.2f} s compiling on "
        line += f"{autotune.COMPILE_THREADS} threads, {build - compiling:.2f} s checking, {timing:.2f} s timing, "
        line += f"{pruned} timed once)"
    return line


def _torch_times(
    torch: Any, layer: Layer, device: str, x: np.ndarray, w: np.ndarray, b: np.ndarray, g: np.ndarray, budget: float
) -> tuple[float, ...]:
    torch.backends.cuda.matmul.allow_tf32 = False  # fp32 against fp32: cuDNN's convolutions default to TF32
    torch.backends.cudnn.allow_tf32 = False
    tx = torch.from_numpy(x).to(device).requires_grad_(layer.input_grad)
    tw, tb = (torch.from_numpy(a).to(device).requires_grad_() for a in (w, b))
    tg = torch.from_numpy(g).to(device)
    conv = torch.nn.functional.conv2d

    def fwd() -> None:
        with torch.no_grad():
            conv(tx, tw, tb, padding=layer.padding)

    def fwd_bwd() -> None:
        tx.grad = tw.grad = tb.grad = None
        conv(tx, tw, tb, padding=layer.padding).backward(tg)

    def sync() -> None:
        if device == "cuda":
            torch.cuda.synchronize()

    if device != "cuda":  # on the CPU the host time is the computation
        return _time(fwd, sync, budget), _time(fwd_bwd, sync, budget)
    times = (_time(fwd, sync, budget), *_timed(fwd_bwd, sync, budget))
    wants = [tx, tw, tb] if layer.input_grad else [tw, tb]

    def grads() -> Any:
        return torch.autograd.grad(conv(tx, tw, tb, padding=layer.padding), wants, tg)

    return (*times, _time(cuda_graph(torch, grads).replay, sync, budget))


def _torch() -> Any:
    try:
        import torch
    except ImportError:
        return None
    return torch


def run(
    layers: Sequence[Layer],
    devices: Sequence[str],
    use_torch: bool = True,
    torch_cpu: bool = True,
    budget: float = 1.0,
    seed: int = 0,
) -> tuple[list[str], list[list[Any]]]:
    torch = _torch() if use_torch else None
    ref_devices = []
    if torch is not None and torch_cpu:
        ref_devices.append("cpu")
    if torch is not None and torch.cuda.is_available():
        ref_devices.append("cuda")
    import vkblas as vk

    captures = [vk.graphs.can_capture(d) for d in devices]
    cols = ["layer"]
    for d, c in zip(devices, captures, strict=True):
        cols += [f"vk {d} fwd ms", f"vk {d} f+b ms", f"vk {d} f+b host ms"] + [f"vk {d} graph f+b ms"] * c
    for d in ref_devices:
        cols += [f"torch {d} fwd ms", f"torch {d} f+b ms"]
        cols += ["torch cuda f+b host ms", "torch cuda graph f+b ms"] * (d == "cuda")
    if devices and ref_devices:
        cols.append(f"vk {devices[0]} / torch {ref_devices[-1]} f+b")
    graph_ratio = bool(devices) and captures[0] and "cuda" in ref_devices
    if graph_ratio:
        cols.append(f"vk {devices[0]} graph / torch cuda graph f+b")
    rng = np.random.default_rng(seed)
    rows = []
    for layer in layers:
        xs, ws = layer.shapes()
        x = rng.standard_normal(xs, dtype=np.float32)
        w = (rng.standard_normal(ws, dtype=np.float32) / np.sqrt(ws[1] * ws[2] * ws[3])).astype(np.float32)
        b = rng.standard_normal(ws[0], dtype=np.float32)
        g = rng.standard_normal((layer.batch, layer.cout, layer.size, layer.size), dtype=np.float32)
        row: list[Any] = [layer.label]
        measured = [_vkblas(layer, d, x, w, b, g, budget) for d in devices]
        ours = [times for times, _ in measured]
        theirs = [_torch_times(torch, layer, d, x, w, b, g, budget) for d in ref_devices]
        for times in ours + theirs:
            row += times
        if devices and ref_devices:
            row.append(ours[0][1] / theirs[-1][1])
        if graph_ratio:
            row.append(ours[0][3] / theirs[-1][3])
        rows.append(row)
        firsts = "; ".join(first for _, first in measured)
        print(f"  {layer.label}: done" + (f"; {firsts}" if firsts else ""), file=sys.stderr, flush=True)
    return cols, rows


def main(argv: Sequence[str] | None = None) -> int:
    import vkblas as vk

    p = argparse.ArgumentParser(prog="vkblas bench conv", description=__doc__.split("\n")[0])
    p.add_argument(
        "--devices", default="", help="vkblas devices, comma separated (default: every device present, GPUs first)"
    )
    p.add_argument("--only", default="", help="run only layers whose label contains one of these (comma separated)")
    p.add_argument("--no-torch", action="store_true", help="skip PyTorch")
    p.add_argument("--no-torch-cpu", action="store_true", help="skip PyTorch on the CPU")
    p.add_argument("--budget", type=float, default=1.0, help="seconds of timing per measurement (default 1)")
    args = p.parse_args(argv)
    devices = [d.strip() for d in args.devices.split(",") if d.strip()]
    if not devices:
        present = vk.devices()
        devices = [d for d in present if d != "cpu"] + ["cpu"]
    layers = list(LAYERS)
    if args.only:
        keys = [k.strip() for k in args.only.split(",") if k.strip()]
        layers = [la for la in layers if any(k in la.label for k in keys)]
    print(f"conv2d 3x3 float32, forward and forward+backward; vkblas on {', '.join(devices)}", flush=True)
    cols, rows = run(layers, devices, use_torch=not args.no_torch, torch_cpu=not args.no_torch_cpu, budget=args.budget)
    print(format_table(cols, rows), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
