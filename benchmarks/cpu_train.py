"""Training-step throughput on the CPU: vkblas's ``cpu`` backend (numpy) against PyTorch CPU, in one run.

The models of ``vkblas train`` (``vkblas.training.models``: the MLP 784-512-256-10 and the CNN conv 1->32 ->
pool -> conv 32->64 -> pool -> 3136-128-10), plus ``cnn9216``, PyTorch's MNIST example net (conv 1->32, conv
32->64, one pool, 9216-128-10, no padding). Both frameworks start from the same weights and train with Adam
(lr 1e-3) on the same batches: one fixed set of MNIST-shaped float32 images and int64 labels per batch size,
turned into tensors at every step by each framework's ``from_numpy`` path. Steps alternate between the
frameworks in rounds so that load from other processes hits both alike; a row reports the fastest step (the
least disturbed by other processes) in wall time, and the least CPU time (all of the process's threads) a step
took: on a shared machine the CPU-time ratio is the steadier one. The profile counts CPU time too.

Threads: numpy's BLAS (OpenBLAS) uses ``--threads`` threads (default: the CPUs this process may run on) through
``OPENBLAS_NUM_THREADS``/``OMP_NUM_THREADS``, set before numpy loads, and PyTorch gets the same number through
``torch.set_num_threads``.

``--profile`` adds, for the vkblas cpu step of each model and batch size, the time per backend primitive (and per
elementwise op), with the rest of the step (Python: autograd, views, dispatch) as its own line.

    python benchmarks/cpu_train.py                          # mlp + cnn at batch 128 and 512, ~1 minute
    python benchmarks/cpu_train.py --models cnn --batch-sizes 128 --profile
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections import defaultdict
from collections.abc import Callable, Sequence
from typing import Any

MODEL_NAMES = ("mlp", "cnn", "cnn9216")


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--models", default="mlp,cnn", help=f"comma-separated, from {', '.join(MODEL_NAMES)}")
    p.add_argument("--batch-sizes", default="128,512")
    p.add_argument("--steps", type=int, default=6, help="timed steps per framework and configuration")
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--threads", type=int, default=None, help="BLAS/PyTorch threads (default: usable CPUs)")
    p.add_argument("--profile", action="store_true", help="time per backend primitive of the vkblas steps")
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)
    args.models = args.models.split(",")
    args.batch_sizes = [int(b) for b in args.batch_sizes.split(",")]
    bad = [m for m in args.models if m not in MODEL_NAMES]
    if bad:
        p.error(f"unknown model(s) {bad}: choose from {', '.join(MODEL_NAMES)}")
    if args.steps < 1 or args.warmup < 0 or any(b < 1 for b in args.batch_sizes):
        p.error("--steps and batch sizes must be positive, --warmup >= 0")
    return args


def build(name: str, nn: Any) -> Any:
    from _common import mnist_example_cnn  # PyTorch's examples/mnist net, dropout left out
    from vkblas.training.models import build as build_model

    return mnist_example_cnn(nn) if name == "cnn9216" else build_model(name, nn=nn)


class Side:
    """One framework's model, optimizer and step on the shared batches."""

    def __init__(self, framework: str, name: str, state: dict[str, Any], batches: list[tuple[Any, Any]]) -> None:
        self.framework = framework
        if framework == "torch":
            import torch

            self.lib = torch
            self.model = build(name, torch.nn)
            self.model.load_state_dict({k: torch.from_numpy(v.copy()) for k, v in state.items()})
            self.to_tensor: Callable[[Any], Any] = torch.from_numpy
        else:
            import vkblas
            from vkblas.training.checkpoint import load_into

            self.lib = vkblas
            self.model = load_into(build(name, vkblas.nn), state, "cpu").to("cpu")
            # the cpu backend even where a GPU is the default device (vkblas's default: the best adapter)
            self.to_tensor = lambda array: vkblas.from_numpy(array, device="cpu")
        self.model.train()
        self.optimizer = self.lib.optim.Adam(self.model.parameters(), lr=1e-3)
        self.loss_fn = self.lib.nn.CrossEntropyLoss()
        self.batches = batches
        self.i = 0

    def step(self) -> tuple[float, float]:
        """(wall seconds, CPU seconds of this process) of one training step."""
        x, y = self.batches[self.i % len(self.batches)]
        self.i += 1
        t0, c0 = time.perf_counter(), time.process_time()
        xt, yt = self.to_tensor(x), self.to_tensor(y)
        self.optimizer.zero_grad()
        loss = self.loss_fn(self.model(xt), yt)
        loss.backward()
        self.optimizer.step()
        loss.item()  # a sync (the cpu backends are synchronous anyway)
        return time.perf_counter() - t0, time.process_time() - c0


SHAPED = ("matmul", "unfold", "fold", "max_pool2d", "max_pool2d_backward")


class PrimitiveTimer:
    """Wraps a backend's primitives with CPU-time timers (elementwise/reduce keyed by op, the big ones by shape)."""

    PRIMITIVES = (
        "elementwise",
        "reduce",
        "matmul",
        "gather",
        "scatter",
        "scan",
        "sort",
        "random",
        "unfold",
        "fold",
        "max_pool2d",
        "max_pool2d_backward",
    )

    def __init__(self, backend: Any) -> None:
        self.backend = backend
        self.seconds: dict[str, float] = defaultdict(float)
        self.calls: dict[str, int] = defaultdict(int)
        self.saved = {n: getattr(backend, n) for n in self.PRIMITIVES}

    def __enter__(self) -> PrimitiveTimer:
        for name, fn in self.saved.items():
            setattr(self.backend, name, self._wrap(name, fn))
        return self

    def __exit__(self, *exc: object) -> None:
        for name in self.saved:
            delattr(self.backend, name)  # back to the class's method

    def _wrap(self, name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        keyed = name in ("elementwise", "reduce", "scatter", "scan")

        def timed(*a: Any, **kw: Any) -> Any:
            key = f"{name}:{a[0]}" if keyed else name
            if name in SHAPED:  # a[1]: matmul's a, unfold's x, fold's cols, max pooling's indices / gradient
                key += " " + "@".join("x".join(map(str, v.shape)) for v in a[1 : 3 if name == "matmul" else 2])
            t0 = time.process_time()
            try:
                return fn(*a, **kw)
            finally:
                self.seconds[key] += time.process_time() - t0
                self.calls[key] += 1

        return timed


def blas_kernels() -> str:
    """numpy's BLAS and the kernels it runs: OpenBLAS picks them for the CPU when it loads, unless
    ``OPENBLAS_CORETYPE`` names others (AVX2 ``Haswell`` kernels run float32 GEMMs at about half the rate of the
    AVX-512 ones on a CPU that has AVX-512, and GEMMs are most of a CNN step); PyTorch's MKL and oneDNN choose
    their own."""
    try:
        from threadpoolctl import threadpool_info
    except ImportError:
        return "unknown (no threadpoolctl)"
    found = [
        f"{lib.get('internal_api')} {lib.get('version')}, {lib.get('architecture', '?')} kernels"
        for lib in threadpool_info()
        if lib.get("user_api") == "blas" and "numpy" in lib.get("filepath", "")
    ]
    forced = os.environ.get("OPENBLAS_CORETYPE")
    return (found[0] if found else "unknown") + (f" (OPENBLAS_CORETYPE={forced})" if forced else "")


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    threads = args.threads or len(os.sched_getaffinity(0))
    for var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ[var] = str(threads)
    if "numpy" in sys.modules:
        print("warning: numpy was loaded before the thread count was set", file=sys.stderr)
    import numpy as np
    import torch

    import vkblas
    from vkblas import backend

    torch.set_num_threads(threads)
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from _common import print_table

    print(
        f"threads: numpy BLAS {threads} (OPENBLAS_NUM_THREADS), torch {torch.get_num_threads()}; numpy "
        f"{np.__version__}, torch {torch.__version__}; numpy's BLAS: {blas_kernels()}; Adam lr 1e-3, best of "
        f"{args.steps} steps",
        flush=True,
    )
    rows, profiles = [], []
    for name in args.models:
        vkblas.manual_seed(args.seed)
        state = {k: v.detach().numpy() for k, v in build(name, vkblas.nn).state_dict().items()}
        for bs in args.batch_sizes:
            rng = np.random.default_rng(args.seed)
            batches = [
                (
                    rng.standard_normal((bs, 1, 28, 28), dtype=np.float32),
                    rng.integers(0, 10, bs).astype(np.int64),
                )
                for _ in range(2)
            ]
            sides = [Side(f, name, state, batches) for f in ("vkblas", "torch")]
            times: dict[str, list[tuple[float, float]]] = {s.framework: [] for s in sides}
            for s in sides:
                for _ in range(args.warmup):
                    s.step()
            for _ in range(args.steps):  # alternate, so background load hits both alike
                for s in sides:
                    times[s.framework].append(s.step())
            wall = {f: min(w for w, _ in t) for f, t in times.items()}
            cpu = {f: min(c for _, c in t) for f, t in times.items()}
            rows.append(
                [
                    name,
                    bs,
                    f"{1e3 * wall['vkblas']:.1f}",
                    f"{1e3 * wall['torch']:.1f}",
                    f"{bs / wall['vkblas']:,.0f}",
                    f"{bs / wall['torch']:,.0f}",
                    f"{wall['torch'] / wall['vkblas']:.2f}x",
                    f"{1e3 * cpu['vkblas']:.1f}",
                    f"{1e3 * cpu['torch']:.1f}",
                    f"{cpu['torch'] / cpu['vkblas']:.2f}x",
                ]
            )
            if args.profile:  # per primitive, its least time over the steps: the least disturbed by other load
                steps, timers = [], []
                for _ in range(args.steps):
                    with PrimitiveTimer(backend.get("cpu")) as timer:
                        steps.append(sides[0].step()[1])
                    timers.append(timer)
                profiles.append((name, bs, min(steps), timers))
            print(f"done: {name} batch {bs}", file=sys.stderr, flush=True)
    print_table(
        "training step, vkblas cpu vs torch cpu",
        [
            "model",
            "batch",
            "vkblas ms",
            "torch ms",
            "vkblas samples/s",
            "torch samples/s",
            "vkblas / torch",
            "vkblas cpu-ms",
            "torch cpu-ms",
            "ratio (cpu time)",
        ],
        rows,
    )
    for name, bs, step, timers in profiles:
        least = {k: min(t.seconds.get(k, 0.0) for t in timers) for k in timers[0].seconds}
        items = sorted(least.items(), key=lambda kv: -kv[1])
        table = [[k, timers[0].calls[k], f"{1e3 * v:.2f}", f"{100 * v / step:.1f}%"] for k, v in items]
        table.append(["(rest of the step: Python, autograd)", "", f"{1e3 * (step - sum(least.values())):.2f}", ""])
        print()
        print_table(
            f"vkblas cpu, {name} batch {bs}: {1e3 * step:.1f} CPU-ms per step (least), by primitive (least per step)",
            ["primitive (op / first arg shape)", "calls", "CPU-ms per step", "share"],
            table[:25] + table[-1:] if len(table) > 26 else table,
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
