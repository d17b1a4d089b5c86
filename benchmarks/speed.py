"""Training-step throughput, vkblas against PyTorch on one workload, in one run (issue 15's measurement).

Workload, identical on both sides: an MLP 784-512-256-10 (ReLU) and a CNN conv(1->32, 3x3) ReLU conv(32->64, 3x3)
ReLU maxpool(2) fc(9216->128) ReLU fc(128->10), batch 512, cross-entropy, Adam (lr 1e-3), the data already on the
device (16 batches of random images and labels), each batch taken by slicing the device tensor; ``--steps`` timed
steps after ``--warmup`` untimed ones (first calls compile pipelines and autotune GEMMs).

Modes:

* vkblas ``eager``: the plain Python training step.
* vkblas ``graph``: the step captured once with ``vkblas.graphs`` (Adam ``capturable=True``), then per step the
  batch is copied into the static inputs and the graph replayed.
* vkblas ``compile``: the step wrapped in ``vkblas.compile`` (warm-up, capture and replay done by the decorator).
* PyTorch ``eager`` on CUDA when present, else on the CPU, in fp32 arithmetic like vkblas: TF32 off for cuBLAS and
  cuDNN (by default PyTorch lets cuDNN's convolutions run in TF32 on tensor cores; the CNN's ratios in BENCHMARKS.md
  before 2026-12-03 were measured against that).
* PyTorch ``graph`` (CUDA only): the whole step captured with ``torch.cuda.graph`` after a side-stream warm-up,
  ``Adam(capturable=True)``, the recipe of PyTorch's CUDA-graphs documentation.

The table gives samples/s, the ratio to the PyTorch mode of the same kind (eager to eager, graph and compile to the
CUDA graph when it ran, else to PyTorch eager), wall and host µs per step (host: the calling thread's CPU time
while it issued the timed steps; a mode whose host time nears its wall time is host-bound), and, for vkblas on
Vulkan, the device dispatches per training step (replays included; what kernel fusion reduces). Each measurement
stops after ``--max-seconds`` even if the steps are not done (the rate is then over the steps it ran), so the
default run is bounded: about a minute on an H200 (well under 3), far longer on lavapipe, where ``--steps 3
--warmup 2`` is the useful size.

    python3 benchmarks/speed.py                       # everything, default devices (vulkan; cuda or cpu for torch)
    python3 benchmarks/speed.py --steps 3 --warmup 2  # on lavapipe
    python3 benchmarks/speed.py --models mlp --modes eager,graph
    python3 benchmarks/speed.py --memory              # the CNN step's memory instead (cpu and vulkan, PyTorch CPU)
    python3 benchmarks/speed.py --item-every 1        # each step's loss read on the host, as a logging loop does

``--item-every N`` reads every Nth step's loss with ``.item()`` on both sides: the host then waits for the device,
which idles until the host has issued the next step's first work (PyTorch launches each kernel as it is called;
vkblas hands its first batch after a wait to the device after ``queue.FIRST_BATCH`` dispatches).

``--host``: the host cost of one eager step instead (issue 15's "eager cost"), for each of ``--models``: forward,
loss, backward, ``optimizer.step()`` and ``zero_grad`` at a tiny batch (``--batch``, default 4), vkblas on each
``--devices`` entry (default: cpu and vulkan) beside PyTorch CPU eager (one thread) doing the same step at the same
batch, in the same run; minimum over ``--repeat`` runs of ``--steps`` steps. *host* is the time until the last step
returns (Python and the runtime issuing the work: on Vulkan the device runs it later), *cpu* the calling thread's
CPU time over that span (the runtime's submit thread and the driver's threads, which a device runs beside the
Python, are not in it: on lavapipe, whose execution can block the caller when batches pile up, *cpu* is the figure
to read), *wall* until the sync after it. On the cpu backend all three include numpy's arithmetic (Adam over the
MLP's 0.5 M parameters is most of it); ``--hidden 32,16`` shrinks the MLP until that is negligible. ``--profile N``
adds cProfile's top N functions (by own time) of the vkblas step on each device.

    python3 benchmarks/speed.py --host                              # cpu and vulkan (lavapipe here), batch 4
    python3 benchmarks/speed.py --host --devices cpu --profile 25   # where cpu's step time goes
    python3 benchmarks/speed.py --host --models cnn --devices vulkan --profile 40

``--memory`` prints, for one CNN training step at batch 512 (after a warm-up step, so Adam's state exists; the
gradients set to None first), the bytes above the step's *baseline* (weights, Adam's two moments and the batch):
what is live after forward (the graph's saved tensors, the loss), and the peak of forward, backward and the
optimizer step. vkblas counts its backend statistics (``memory_stats``: live storages on cpu, the buffer pool's
buckets on Vulkan); PyTorch on the CPU counts the profiler's allocation events (``profile_memory=True``) in time
order, as benchmarks/gpt_memory.py does; on a machine with CUDA, PyTorch's CUDA caching allocator is counted too
(``max_memory_allocated`` per phase, the same baseline). Memory is deterministic, so the CPU's counts are a GPU's up
to allocator rounding.
"""

from __future__ import annotations

import argparse
import gc
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import PhasePeaks, mnist_example_cnn, print_table, torch_or_none  # noqa: E402

BATCH = 512
BATCHES = 16  # distinct batches held on the device
NUM_CLASSES = 10
MODES = ("eager", "graph", "compile")
WARM_STEPS = 10  # untimed steps before --host measures


def build(model: str, nn: Any, hidden: tuple[int, int] = (512, 256)) -> Any:
    """The issue's two models, for ``nn`` = ``vkblas.nn`` or ``torch.nn`` (same layers, same order); ``hidden``: the
    MLP's hidden widths."""
    if model == "mlp":
        return nn.Sequential(
            nn.Flatten(),
            nn.Linear(784, hidden[0]),
            nn.ReLU(),
            nn.Linear(hidden[0], hidden[1]),
            nn.ReLU(),
            nn.Linear(hidden[1], NUM_CLASSES),
        )
    return mnist_example_cnn(nn, NUM_CLASSES)


def host_data(seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((BATCHES * BATCH, 1, 28, 28)).astype(np.float32)
    return x, rng.integers(0, NUM_CLASSES, BATCHES * BATCH).astype(np.int64)


@dataclass
class Result:
    framework: str
    mode: str
    samples_per_s: float
    steps: int
    dispatches: float | None = None
    host_us: float = 0.0  # the calling thread's CPU time per step while it issued the steps (``timed``)


def timed(
    step: Callable[[int], Any], sync: Callable[[], None], steps: int, warmup: int, limit: float, item_every: int = 0
) -> tuple:
    """(samples/s, steps run, host µs per step) of ``step(i)`` after ``warmup`` calls; stops after ``limit``
    seconds. Host is the calling thread's CPU time per step up to the final synchronize: where it nears the wall
    time per step, the step is host-bound (on CUDA, PyTorch's thread may also spin in a sync it makes). With
    ``item_every`` N, every Nth step's loss (what ``step`` returns) is read on the host, as a loop that logs it does.

    The garbage of earlier measurements is collected first: left to the cyclic collector, a full collection of
    everything the earlier models, graphs and PyTorch made ran inside a later timed loop (the H200, 2026-12-04:
    ~170 ms in the eager CNN's 300 steps, 0.86x instead of 1.01x run alone). The collector stays on while timing,
    so each framework pays for its own steps' garbage."""
    for i in range(warmup):
        step(i)
    sync()
    gc.collect()
    t0, c0 = time.perf_counter(), time.thread_time()
    done = 0
    while done < steps:
        loss = step(warmup + done)
        done += 1
        if item_every and done % item_every == 0:
            loss.item()
        if time.perf_counter() - t0 > limit:
            break
    host = time.thread_time() - c0
    sync()
    return BATCH * done / (time.perf_counter() - t0), done, host / done * 1e6


# ---------------------------------------------------------------- vkblas
def vkblas_runs(model_name: str, modes: list[str], device: str, args: argparse.Namespace) -> list[Result]:
    import vkblas as vk
    from vkblas import graphs, nn

    xh, yh = host_data()
    X, Y = vk.tensor(xh, device=device), vk.tensor(yh.astype(np.int32), device=device)
    backend = X._backend
    runtime = getattr(backend, "rt", None)  # the Vulkan runtime counts dispatches
    results = []

    def batch(i: int) -> tuple[Any, Any]:
        s = (i % BATCHES) * BATCH
        return X[s : s + BATCH], Y[s : s + BATCH]

    def sync() -> None:
        backend.synchronize()

    for mode in modes:
        vk.manual_seed(0)
        model = build(model_name, nn).to(device)
        opt = vk.optim.Adam(model.parameters(), lr=1e-3, capturable=mode != "eager")

        def train_step(x: Any, y: Any, model: Any = model, opt: Any = opt) -> Any:
            opt.zero_grad()
            loss = nn.functional.cross_entropy(model(x), y)
            loss.backward()
            opt.step()
            return loss

        if mode == "eager":

            def step(i: int, train_step: Callable = train_step) -> Any:
                return train_step(*batch(i))

        elif mode == "graph":
            if not graphs.can_capture(device):
                continue
            sx, sy = vk.empty((BATCH, 1, 28, 28), device=device), vk.empty((BATCH,), dtype=vk.int32, device=device)
            holder: dict[str, Any] = {}

            def step(i: int, train_step: Callable = train_step, sx: Any = sx, sy: Any = sy, h: dict = holder) -> Any:
                x, y = batch(i)
                sx.copy_(x)
                sy.copy_(y)
                if i < 2:  # warm-up: the optimizer state exists before capture
                    return train_step(sx, sy)
                if "g" not in h:
                    h["g"] = graphs.Graph()
                    with graphs.capture(h["g"], device=device):
                        h["loss"] = train_step(sx, sy)
                else:
                    h["g"].replay()
                return h["loss"]

        else:
            if not hasattr(vk, "compile"):
                continue
            compiled = vk.compile(train_step)

            def step(i: int, compiled: Callable = compiled) -> Any:
                return compiled(*batch(i))

        warmup = max(args.warmup, 3 if mode != "eager" else 1)
        before = None
        for i in range(warmup):
            step(i)
        sync()
        if runtime is not None:  # dispatches per step, counted over two steady steps
            before = runtime.dispatches
            step(warmup)
            step(warmup + 1)
            per_step = (runtime.dispatches - before) / 2

        def run(i: int, step: Callable = step, w: int = warmup) -> Any:
            return step(w + 2 + i)

        rate, done, host = timed(run, sync, args.steps, 0, args.max_seconds, args.item_every)
        results.append(Result("vkblas", mode, rate, done, per_step if before is not None else None, host))
    return results


# ---------------------------------------------------------------- PyTorch
def torch_runs(model_name: str, torch: Any, device: str, args: argparse.Namespace) -> list[Result]:
    nn, F = torch.nn, torch.nn.functional
    torch.backends.cuda.matmul.allow_tf32 = False  # fp32 against fp32
    torch.backends.cudnn.allow_tf32 = False
    xh, yh = host_data()
    X, Y = torch.from_numpy(xh).to(device), torch.from_numpy(yh).to(device)
    cuda = device.startswith("cuda")
    results = []

    def sync() -> None:
        if cuda:
            torch.cuda.synchronize()

    def batch(i: int) -> tuple[Any, Any]:
        s = (i % BATCHES) * BATCH
        return X[s : s + BATCH], Y[s : s + BATCH]

    torch.manual_seed(0)
    model = build(model_name, nn).to(device)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)

    def eager(i: int) -> Any:
        x, y = batch(i)
        opt.zero_grad(set_to_none=True)
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        return loss

    rate, done, host = timed(eager, sync, args.steps, args.warmup, args.max_seconds, args.item_every)
    results.append(Result(f"torch ({device})", "eager", rate, done, host_us=host))
    if not cuda:
        return results

    torch.manual_seed(0)
    model = build(model_name, nn).to(device)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3, capturable=True)
    sx, sy = X[:BATCH].clone(), Y[:BATCH].clone()
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # warm-up on a side stream, as the documentation's recipe does
        for _ in range(3):
            opt.zero_grad(set_to_none=True)
            F.cross_entropy(model(sx), sy).backward()
            opt.step()
    torch.cuda.current_stream().wait_stream(side)
    g = torch.cuda.CUDAGraph()
    opt.zero_grad(set_to_none=True)
    with torch.cuda.graph(g):
        static_loss = F.cross_entropy(model(sx), sy)
        static_loss.backward()
        opt.step()

    def replay(i: int) -> Any:
        x, y = batch(i)
        sx.copy_(x)
        sy.copy_(y)
        g.replay()
        return static_loss

    rate, done, host = timed(replay, sync, args.steps, args.warmup, args.max_seconds, args.item_every)
    results.append(Result(f"torch ({device})", "graph", rate, done, host_us=host))
    return results


# ---------------------------------------------------------------- memory (--memory)
MEMORY_PHASES = ("forward", "backward", "optimizer step")


def cnn_step_peaks(model: Any, opt: Any, x: Any, y: Any, cross_entropy: Callable, meter: PhasePeaks) -> dict:
    """Live after forward and each phase's peak of the CNN's second training step (the first makes Adam's state),
    above the step's baseline."""
    for _ in range(2):
        opt.zero_grad(set_to_none=True)
        meter.start()
        loss = meter.measure("forward", lambda: cross_entropy(model(x), y))
        meter.live("live after forward")
        meter.measure("backward", loss.backward)
        meter.measure("optimizer step", opt.step)
        del loss
    return meter.res


def vkblas_memory(device: str, batch: int = BATCH) -> dict[str, int]:
    """Bytes above the baseline of one CNN step on ``device``: live after forward and each phase's peak."""
    import vkblas as vk
    from vkblas import nn

    xh, yh = host_data()
    x, y = vk.tensor(xh[:batch], device=device), vk.tensor(yh[:batch].astype(np.int32), device=device)
    vk.manual_seed(0)
    model = build("cnn", nn).to(device)
    opt = vk.optim.Adam(model.parameters(), lr=1e-3)
    return cnn_step_peaks(model, opt, x, y, nn.functional.cross_entropy, PhasePeaks.of_backend(x._backend))


def torch_cpu_memory(torch: Any, batch: int = BATCH) -> dict[str, int]:
    """The same step in PyTorch on the CPU, counted from the profiler's allocation events."""
    from gpt_memory import CpuAllocations

    nn, F = torch.nn, torch.nn.functional
    xh, yh = host_data()
    x, y = torch.from_numpy(xh[:batch]), torch.from_numpy(yh[:batch])
    torch.manual_seed(0)
    model = build("cnn", nn)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    opt.zero_grad(set_to_none=True)
    F.cross_entropy(model(x), y).backward()  # the warm-up step: Adam's state
    opt.step()
    opt.zero_grad(set_to_none=True)
    mem = CpuAllocations()
    with mem.prof:
        with mem.phase("forward"):
            loss = F.cross_entropy(model(x), y)
        with mem.phase("backward"):
            loss.backward()
        with mem.phase("optimizer step"):
            opt.step()
    return mem.peaks()


def torch_cuda_memory(torch: Any, batch: int = BATCH) -> dict[str, int]:
    """The same step in PyTorch on CUDA: the caching allocator's peak of allocated bytes in each phase (what
    tensors hold, not what the allocator reserved), above the same baseline."""
    cuda = torch.cuda
    xh, yh = host_data()
    x, y = torch.from_numpy(xh[:batch]).cuda(), torch.from_numpy(yh[:batch]).cuda()
    torch.manual_seed(0)
    model = build("cnn", torch.nn).cuda()
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    meter = PhasePeaks(cuda.synchronize, cuda.reset_peak_memory_stats, cuda.max_memory_allocated, cuda.memory_allocated)
    return cnn_step_peaks(model, opt, x, y, torch.nn.functional.cross_entropy, meter)


def memory_table(devices: list[str], torch: Any, batch: int = BATCH) -> None:
    results = {f"vkblas {d}": vkblas_memory(d, batch) for d in devices}
    if torch is not None:
        results["torch cpu"] = torch_cpu_memory(torch, batch)
        if torch.cuda.is_available():
            results["torch cuda"] = torch_cuda_memory(torch, batch)
    rows = []
    for key in ("live after forward", *MEMORY_PHASES):
        rows.append((key if key.startswith("live") else f"peak in {key}", *(r[key] / 2**20 for r in results.values())))
    rows.append(("peak of the step", *(max(r[k] for k in MEMORY_PHASES) / 2**20 for r in results.values())))
    print_table(
        f"\ncnn: batch {batch}, Adam; MiB above the baseline (weights, Adam state, the batch)",
        ("", *results),
        rows,
    )


# ---------------------------------------------------------------- host cost of the eager step (--host)
def host_step_vkblas(
    model_name: str, device: str, batch: int, hidden: tuple[int, ...]
) -> tuple[Callable[[], None], Callable[[], None]]:
    """The eager training step of ``model_name`` at ``batch`` on ``device``, and its sync."""
    import vkblas as vk
    from vkblas import nn

    xh, yh = host_data()
    x, y = vk.tensor(xh[:batch], device=device), vk.tensor(yh[:batch].astype(np.int32), device=device)
    vk.manual_seed(0)
    model = build(model_name, nn, hidden).to(device)
    opt = vk.optim.Adam(model.parameters(), lr=1e-3)

    def step() -> None:
        opt.zero_grad()
        nn.functional.cross_entropy(model(x), y).backward()
        opt.step()

    return step, x._backend.synchronize


def host_step_torch(
    model_name: str, torch: Any, batch: int, hidden: tuple[int, ...]
) -> tuple[Callable[[], None], Callable[[], None]]:
    xh, yh = host_data()
    x, y = torch.from_numpy(xh[:batch].copy()), torch.from_numpy(yh[:batch].copy())
    torch.manual_seed(0)
    model = build(model_name, torch.nn, hidden)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)

    def step() -> None:
        opt.zero_grad(set_to_none=True)
        torch.nn.functional.cross_entropy(model(x), y).backward()
        opt.step()

    return step, lambda: None


def host_us(step: Callable[[], None], sync: Callable[[], None], steps: int, repeat: int) -> tuple[float, float, float]:
    """(host, cpu, wall) µs per step, each the minimum over ``repeat`` runs of ``steps`` steps: host until the last
    step returns (what Python and the runtime spend issuing the work), cpu the calling thread's CPU time over the same
    span (not the submit thread's nor the driver's: what a faster device cannot hide), wall until the sync after it.
    The first steps compile pipelines, tune GEMMs and settle the buffer pool (and the bind groups of its buffers):
    not timed."""
    for _ in range(WARM_STEPS):
        step()
    sync()
    host = cpu = wall = float("inf")
    for _ in range(repeat):
        t0, c0 = time.perf_counter(), time.thread_time()
        for _ in range(steps):
            step()
        t1, c1 = time.perf_counter(), time.thread_time()
        sync()
        host, cpu, wall = min(host, t1 - t0), min(cpu, c1 - c0), min(wall, time.perf_counter() - t0)
    return host / steps * 1e6, cpu / steps * 1e6, wall / steps * 1e6


def host_profile(step: Callable[[], None], sync: Callable[[], None], steps: int, top: int, title: str) -> None:
    """cProfile's ``top`` functions by own time over ``steps`` steps (the final sync not included), per step."""
    import cProfile
    import pstats

    for _ in range(WARM_STEPS):
        step()
    sync()
    prof = cProfile.Profile()
    prof.enable()
    for _ in range(steps):
        step()
    prof.disable()
    sync()
    stats = pstats.Stats(prof).stats  # type: ignore[attr-defined]
    rows = sorted(stats.items(), key=lambda kv: -kv[1][2])[:top]
    calls = sum(v[1] for v in stats.values()) / steps
    print_table(
        f"\n{title}: cProfile, top {top} by own time ({calls:,.0f} calls per step)",
        ("function", "calls/step", "own µs/step", "cum µs/step"),
        [
            (
                f"{Path(f).name}:{line} {fn}",
                f"{v[1] / steps:.0f}",
                f"{v[2] / steps * 1e6:.1f}",
                f"{v[3] / steps * 1e6:.1f}",
            )
            for (f, line, fn), v in rows
        ],
    )


def host_main(args: argparse.Namespace) -> int:
    import vkblas as vk

    devices = args.devices.split(",") if args.devices else ["cpu"] + [d for d in vk.devices() if d != "cpu"][:1]
    hidden = tuple(int(n) for n in args.hidden.split(","))
    torch = torch_or_none()
    if torch is not None:
        torch.set_num_threads(1)  # the step is host-bound: threads only add noise to the comparison
    for model_name in args.models.split(","):
        ref = None
        if torch is not None:
            ref, _, _ = host_us(*host_step_torch(model_name, torch, args.batch, hidden), args.steps, args.repeat)
        rows = []
        for dev in devices:
            step, sync = host_step_vkblas(model_name, dev, args.batch, hidden)
            host, cpu, wall = host_us(step, sync, args.steps, args.repeat)
            rows.append(
                (f"vkblas {dev}", f"{host:,.0f}", f"{cpu:,.0f}", f"{wall:,.0f}", f"{host / ref:.2f}x" if ref else "")
            )
            if args.profile:
                host_profile(step, sync, args.steps, args.profile, f"vkblas {model_name} {dev}")
        if ref is not None:
            rows.append((f"torch {torch.__version__} cpu (1 thread)", f"{ref:,.0f}", "", f"{ref:,.0f}", "1.00x"))
        what = "MLP " + "-".join(str(n) for n in (784, *hidden, NUM_CLASSES)) if model_name == "mlp" else "CNN"
        print_table(
            f"\nhost cost of one eager {what} step (batch {args.batch}, Adam, zero_grad), min of {args.repeat} x "
            f"{args.steps} steps",
            ("framework", "host µs/step", "cpu µs/step (main thread)", "wall µs/step", "host vs torch cpu"),
            rows,
        )
    return 0


# ---------------------------------------------------------------- table
def table(model: str, ours: list[Result], theirs: list[Result], item_every: int = 0) -> None:
    ref = {r.mode: r for r in theirs}
    rows = []
    for r in [*ours, *theirs]:
        base = ref.get("eager") if r.mode == "eager" else ref.get("graph", ref.get("eager"))
        ratio = f"{r.samples_per_s / base.samples_per_s:.2f}x {base.framework} {base.mode}" if r in ours else ""
        disp = f"{r.dispatches:.0f}" if r.dispatches is not None else ""
        wall = BATCH / r.samples_per_s * 1e6
        rows.append(
            (r.framework, r.mode, f"{r.samples_per_s:,.0f}", r.steps, ratio, f"{wall:,.0f}", f"{r.host_us:,.0f}", disp)
        )
    print_table(
        f"\n{model}: batch {BATCH}, Adam, data on the device"
        + (f", loss.item() every {item_every} step(s)" if item_every else ""),
        ("framework", "mode", "samples/s", "steps", "ratio", "wall µs/step", "host µs/step", "dispatches/step"),
        rows,
    )


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument(
        "--steps", type=int, default=None, help="timed training steps per measurement (default 300; --host: 20 per run)"
    )
    p.add_argument("--warmup", type=int, default=5, help="untimed steps before timing (default 5)")
    p.add_argument("--device", default=None, help="vkblas device (default: vulkan when present, else cpu)")
    p.add_argument("--torch-device", default=None, help="PyTorch device (default: cuda when present, else cpu)")
    p.add_argument("--models", default="mlp,cnn", help="comma-separated: mlp, cnn")
    p.add_argument("--modes", default=",".join(MODES), help=f"vkblas modes, comma-separated: {', '.join(MODES)}")
    p.add_argument("--max-seconds", type=float, default=15.0, help="stop one measurement after this (default 15)")
    p.add_argument(
        "--item-every", type=int, default=0, help="read the loss on the host every N timed steps (default 0: never)"
    )
    p.add_argument("--memory", action="store_true", help="the CNN step's memory table instead of its speed")
    p.add_argument("--memory-devices", default="cpu,vulkan", help="vkblas devices for --memory (default cpu,vulkan)")
    p.add_argument("--memory-batch", type=int, default=BATCH, help=f"batch size for --memory (default {BATCH})")
    p.add_argument("--host", action="store_true", help="host cost of the eager step at a tiny batch (see above)")
    p.add_argument("--batch", type=int, default=4, help="batch of --host (default 4)")
    p.add_argument("--devices", default=None, help="vkblas devices of --host, comma-separated (default: cpu,vulkan)")
    p.add_argument("--repeat", type=int, default=20, help="timed runs of --host; the minimum is shown (default 20)")
    p.add_argument("--profile", type=int, default=0, help="with --host: print cProfile's top N functions")
    p.add_argument("--hidden", default="512,256", help="the MLP's two hidden widths in --host (default 512,256)")
    args = p.parse_args(argv)
    if args.host:
        args.steps = args.steps or 20
        return host_main(args)
    args.steps = args.steps or 300

    import vkblas as vk

    if args.memory:
        present = vk.devices()
        wanted = [d for d in args.memory_devices.split(",") if d]
        memory_table([d for d in wanted if any(p.startswith(d) for p in present)], torch_or_none(), args.memory_batch)
        return 0

    device = args.device or ("vulkan" if any(d.startswith("vulkan") for d in vk.devices()) else "cpu")
    modes = [m for m in args.modes.split(",") if m]
    if bad := set(modes) - set(MODES):
        p.error(f"unknown modes {sorted(bad)}; choose from {MODES}")
    torch = torch_or_none()
    tdev = args.torch_device or ("cuda" if torch is not None and torch.cuda.is_available() else "cpu")
    print(f"vkblas device: {vk.device(device)!r}; PyTorch: {tdev if torch else 'not installed'}", flush=True)
    for model in args.models.split(","):
        ours = vkblas_runs(model, modes, device, args)
        theirs = torch_runs(model, torch, tdev, args) if torch is not None else []
        table(model, ours, theirs, args.item_every)
    return 0


if __name__ == "__main__":
    sys.exit(main())
