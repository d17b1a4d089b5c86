"""Where a training step's GPU time goes: vkblas's captured step, kernel by kernel, beside PyTorch's CUDA kernels.

The profile behind issue 15's "what limits it". For each workload (speed.py's MLP and CNN at batch 512 with Adam,
and the GPT at nanoGPT's shakespeare-char shape with AdamW), vkblas's step is captured as a graph and profiled with
``Graph.profile()`` (one timestamp-bracketed pass per dispatch), and PyTorch's eager step is profiled with
``torch.profiler`` (CUDA activity) over a few steps. Kernels are grouped into classes (GEMM, convolution,
attention, elementwise, reductions, norms, softmax/cross-entropy, optimizer, im2col, ...) and the table gives GPU
milliseconds per step for both, with the step's wall time beside them: vkblas's graph replay, PyTorch's eager
step. vkblas's per-dispatch timing adds about a microsecond per dispatch, so its sums are upper bounds.

    python3 benchmarks/profile_step.py                      # all three, default Vulkan device (~1 min on an H200)
    python3 benchmarks/profile_step.py --models mlp --tiny  # a smoke run on lavapipe
"""

from __future__ import annotations

import argparse
import sys
import time
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import print_table, torch_or_none  # noqa: E402
from speed import build  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
GPT_SHAPE = dict(n_layer=6, n_head=6, n_embd=384, block_size=256, batch=64, dropout=0.2, vocab=65)
GPT_TINY = dict(n_layer=1, n_head=2, n_embd=32, block_size=16, batch=2, dropout=0.2, vocab=65)

#: (class, substrings of a kernel name or vkblas label), first match wins
_CLASSES = (
    ("attention", ("backend.build forward", "backend.build dq", "backend.build dkv", "flash", "fmha", "attention")),
    ("conv", ("conv", "cudnn", "winograd", "implicit_convolve", "fft")),
    ("gemm", ("gemm", "sgemm", "cutlass", "cublas", "matmul", "xmma", "gemv", "sm90_", "ampere_")),
    ("im2col/fold", ("window.", "im2col", "col2im", "unfold")),
    ("norm", ("norm",)),
    ("softmax/xent", ("xent", "softmax", "cross_entropy", "nll_loss", "log_softmax")),
    ("optimizer", ("foreach", "multi_tensor", "adam")),
    ("pool", ("pool",)),
    ("reduce", ("reduce", "sum", "mean", "amax", "max")),
    ("indexing", ("indexing", "gather", "scatter", "index", "embedding")),
    ("random/dropout", ("random", "dropout", "bernoulli", "philox")),
    ("elementwise", ("elementwise", "vectorized", "unrolled", "copy", "fill", "where")),
)


def classify(name: str) -> str:
    low = name.lower()
    return next((c for c, keys in _CLASSES if any(k in low for k in keys)), "other")


def vkblas_step(model: str, device: str, tiny: bool) -> tuple[Callable[[], Any], Any]:
    """The training step and its (x, y) inputs, built the way speed.py / gpt_shakespeare.py build them."""
    import vkblas as vk
    from vkblas import nn

    vk.manual_seed(0)
    rng = np.random.default_rng(0)
    if model == "gpt":
        from vkblas.models import GPT, GPTConfig

        g = GPT_TINY if tiny else GPT_SHAPE
        cfg = GPTConfig(g["block_size"], g["vocab"], g["n_layer"], g["n_head"], g["n_embd"], g["dropout"], False)
        net = GPT(cfg).to(device)
        opt = net.configure_optimizers(0.1, 1e-3, (0.9, 0.99), capturable=True)
        x = vk.tensor(rng.integers(0, g["vocab"], (g["batch"], g["block_size"])).astype(np.int32), device=device)
        y = vk.tensor(rng.integers(0, g["vocab"], (g["batch"], g["block_size"])).astype(np.int32), device=device)

        def loss_of() -> Any:
            return net(x, y)[1]

    else:
        batch = 16 if tiny else 512
        net = build(model, nn).to(device)
        opt = vk.optim.Adam(net.parameters(), lr=1e-3, capturable=True)
        x = vk.tensor(rng.standard_normal((batch, 1, 28, 28)).astype(np.float32), device=device)
        y = vk.tensor(rng.integers(0, 10, batch).astype(np.int32), device=device)

        def loss_of() -> Any:
            return nn.functional.cross_entropy(net(x), y)

    def step() -> Any:
        opt.zero_grad()  # set_to_none, as PyTorch's side below and speed.py
        loss = loss_of()
        loss.backward()
        opt.step()
        return loss

    return step, (x, y)


def vkblas_profile(model: str, device: str, tiny: bool, reps: int) -> tuple[dict[str, float], float, list]:
    """(GPU ms per class, replay wall ms per step, the per-dispatch rows) of the captured step."""
    import vkblas as vk

    step, _ = vkblas_step(model, device, tiny)
    for _ in range(2):  # the optimizer state exists before capture; pipelines compiled and GEMMs tuned
        step()
    graph = vk.graphs.Graph()
    with vk.graphs.capture(graph, device=device):
        step()
    for _ in range(3):
        graph.replay()
    vk.synchronize(device)
    t0 = time.perf_counter()
    for _ in range(reps):
        graph.replay()
    vk.synchronize(device)
    wall = (time.perf_counter() - t0) / reps * 1e3
    rows = graph.profile()
    per: dict[str, float] = defaultdict(float)
    for r in rows:
        per[classify(r.kernel)] += r.seconds * 1e3
    return per, wall, rows


def torch_profile(model: str, torch: Any, device: str, tiny: bool, reps: int) -> tuple[dict[str, float], float, list]:
    """(GPU ms per class, eager wall ms per step, the top kernels) of PyTorch's eager step (TF32 off)."""
    from torch.profiler import ProfilerActivity, profile

    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.manual_seed(0)
    F = torch.nn.functional
    rng = np.random.default_rng(0)
    if model == "gpt":
        sys.path.insert(0, str(REPO / "tests" / "programs" / "nanogpt"))
        from model import GPT, GPTConfig  # the nanoGPT-style test program, under real PyTorch

        g = GPT_TINY if tiny else GPT_SHAPE
        cfg = GPTConfig(
            block_size=g["block_size"], vocab_size=g["vocab"], n_layer=g["n_layer"], n_head=g["n_head"],
            n_embd=g["n_embd"], dropout=g["dropout"], bias=False,
        )  # fmt: skip
        net = GPT(cfg).to(device)
        opt = net.configure_optimizers(0.1, 1e-3, (0.9, 0.99), "cuda")
        shape = (g["batch"], g["block_size"])
        x = torch.from_numpy(rng.integers(0, g["vocab"], shape)).to(device)
        y = torch.from_numpy(rng.integers(0, g["vocab"], shape)).to(device)

        def loss_of() -> Any:
            return net(x, y)[1]

    else:
        batch = 16 if tiny else 512
        net = build(model, torch.nn).to(device)
        opt = torch.optim.Adam(net.parameters(), lr=1e-3)
        x = torch.from_numpy(rng.standard_normal((batch, 1, 28, 28)).astype(np.float32)).to(device)
        y = torch.from_numpy(rng.integers(0, 10, batch)).to(device)

        def loss_of() -> Any:
            return F.cross_entropy(net(x), y)

    def step() -> None:
        opt.zero_grad(set_to_none=True)
        loss_of().backward()
        opt.step()

    for _ in range(3):
        step()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(reps):
        step()
    torch.cuda.synchronize()
    wall = (time.perf_counter() - t0) / reps * 1e3
    n = 5
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(n):
            step()
        torch.cuda.synchronize()
    per: dict[str, float] = defaultdict(float)
    kernels = []
    for e in prof.key_averages():
        us = getattr(e, "self_device_time_total", None)
        if us is None:
            us = e.self_cuda_time_total
        if us <= 0:
            continue
        per[classify(e.key)] += us / n * 1e-3
        kernels.append((e.key, us / n * 1e-3, e.count // n))
    kernels.sort(key=lambda k: -k[1])
    return per, wall, kernels


def report(model: str, ours: tuple, theirs: tuple | None, top: int) -> None:
    per, wall, rows = ours
    tper, twall, tkernels = theirs if theirs is not None else ({}, float("nan"), [])
    classes = sorted(set(per) | set(tper), key=lambda c: -max(per.get(c, 0.0), tper.get(c, 0.0)))
    total, ttotal = sum(per.values()), sum(tper.values())
    table = [
        (c, f"{per.get(c, 0.0):.3f}", f"{tper.get(c, 0.0):.3f}" if tper else "",
         f"{per.get(c, 0.0) / tper[c]:.1f}x" if tper.get(c) else "")
        for c in classes
    ]  # fmt: skip
    ratio = f"{total / ttotal:.1f}x" if ttotal else ""
    table.append(("all kernels", f"{total:.3f}", f"{ttotal:.3f}" if tper else "", ratio))
    table.append(("step wall (replay / eager)", f"{wall:.3f}", f"{twall:.3f}" if tper else "", ""))
    print_table(
        f"\n{model}: GPU ms per training step by kernel class ({len(rows)} vkblas dispatches)",
        ("class", "vkblas ms", "PyTorch ms", "vkblas / PyTorch"),
        table,
    )
    by_kernel: dict[tuple[str, tuple], list[float]] = defaultdict(lambda: [0, 0.0])
    for r in rows:
        acc = by_kernel[(r.kernel, r.grid)]
        acc[0] += 1
        acc[1] += r.seconds * 1e3
    hot = sorted(by_kernel.items(), key=lambda kv: -kv[1][1])[:top]
    print_table(
        f"{model}: vkblas's {top} costliest kernels (label, grid)",
        ("kernel", "grid", "calls", "ms", "share"),
        [(k, "x".join(map(str, g)), int(n), f"{t:.3f}", f"{t / total:.0%}") for (k, g), (n, t) in hot],
    )
    if tkernels:
        print_table(
            f"{model}: PyTorch's {top} costliest kernels",
            ("kernel", "calls", "ms", "share"),
            [(k[:90], c, f"{t:.3f}", f"{t / ttotal:.0%}") for k, t, c in tkernels[:top]],
        )


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--models", default="mlp,cnn,gpt", help="comma-separated: mlp, cnn, gpt")
    p.add_argument("--device", default="vulkan")
    p.add_argument("--tiny", action="store_true", help="small shapes (a smoke run on lavapipe)")
    p.add_argument("--reps", type=int, default=20, help="steps timed for the wall-time rows (default 20)")
    p.add_argument("--top", type=int, default=10)
    args = p.parse_args(argv)
    torch = torch_or_none()
    cuda = torch is not None and torch.cuda.is_available()
    for model in args.models.split(","):
        ours = vkblas_profile(model, args.device, args.tiny, args.reps)
        theirs = torch_profile(model, torch, "cuda", args.tiny, args.reps) if cuda else None
        report(model, ours, theirs, args.top)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
