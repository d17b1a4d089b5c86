"""Host cost and bandwidth of elementwise ops, vkblas on every device vs numpy and PyTorch, in one run.

(a) µs per op for a chain of N dependent small elementwise ops (x = x * a + b, alternating), ending in one sync.
(b) GB/s (bytes read + written) for ``add`` on 2**26-element float32 tensors, and for a plain copy of the same
    bytes on the same device (on Vulkan a buffer-to-buffer copy command, ``copy_buffer_to_buffer``; numpy
    ``ndarray.copy``; PyTorch ``clone``); the last column is add as % of that copy bandwidth.
(c) with ``--per-op``: µs per call of common small ops (64-element or 32x32 operands; host cost, the runtime's
    floor), each repeated ``--calls`` times between two syncs, minimum of ``--repeat`` runs. Run it alternately on two
    checkouts (``PYTHONPATH=other/src``) to see whether a change made the common path slower.

    python benchmarks/ops.py [--chain 10000] [--log2n 26] [--json out.json]
    python benchmarks/ops.py --per-op [--devices vulkan] [--calls 2000] [--repeat 7]
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import best_of, print_table, torch_or_none, vkblas_devices  # noqa: E402


def chain_vkblas(dev: str, n_ops: int) -> float:
    import vkblas

    x0 = vkblas.ones(64, device=dev)

    def run() -> None:
        x = x0
        for i in range(n_ops):
            x = x * 1.0001 if i % 2 == 0 else x + 0.0001
        x.numpy()

    return best_of(run, repeat=3) / n_ops * 1e6


def chain_vkblas_replayed(dev: str, n_ops: int) -> float:
    """The same chain captured once with ``vkblas.graphs`` and replayed: the runtime's cost per dispatch with no
    Python per op (what a training step costs when it is replayed)."""
    import vkblas

    x0 = vkblas.ones(64, device=dev)
    graph = vkblas.graphs.Graph()
    with vkblas.graphs.capture(graph, device=dev):
        x = x0
        for i in range(n_ops):
            x = x * 1.0001 if i % 2 == 0 else x + 0.0001

    def run() -> None:
        graph.replay()
        x.numpy()

    us = best_of(run, repeat=3) / n_ops * 1e6
    graph.reset()
    return us


def chain_numpy(n_ops: int) -> float:
    x0 = np.ones(64, np.float32)

    def run() -> None:
        x = x0
        for i in range(n_ops):
            x = x * np.float32(1.0001) if i % 2 == 0 else x + np.float32(0.0001)

    return best_of(run, repeat=3) / n_ops * 1e6


def chain_torch(torch: object, dev: str, n_ops: int) -> float:
    x0 = torch.ones(64, device=dev)  # type: ignore[attr-defined]

    def run() -> None:
        x = x0
        for i in range(n_ops):
            x = x * 1.0001 if i % 2 == 0 else x + 0.0001
        x.cpu()

    return best_of(run, repeat=3) / n_ops * 1e6


def bandwidth(add: callable, copy: callable, n: int) -> tuple[float, float]:
    t_add = best_of(add, repeat=5)
    t_copy = best_of(copy, repeat=5)
    return 3 * 4 * n / t_add / 1e9, 2 * 4 * n / t_copy / 1e9


def bw_vkblas(dev: str, n: int, reps: int = 10) -> tuple[float, float]:
    import vkblas
    from vkblas.bench.copy import can_copy, copy_bandwidth

    a, b = vkblas.rand(n, device=dev), vkblas.rand(n, device=dev)
    vkblas.synchronize()

    def add() -> None:
        for _ in range(reps):
            a + b  # noqa: B018
        vkblas.synchronize()

    def clone() -> None:
        for _ in range(reps):
            a.clone()
        vkblas.synchronize()

    backend = vkblas.backend.get(dev)
    add_gbs = 3 * 4 * n * reps / best_of(add, repeat=5) / 1e9
    if can_copy(backend):  # a plain device copy, not a kernel of ours
        copy_gbs = copy_bandwidth(backend, 4 * n, reps)
    else:
        copy_gbs = 2 * 4 * n * reps / best_of(clone, repeat=5) / 1e9
    return add_gbs, copy_gbs


def bw_numpy(n: int) -> tuple[float, float]:
    a, b = np.random.rand(n).astype(np.float32), np.random.rand(n).astype(np.float32)
    return bandwidth(lambda: a + b, lambda: a.copy(), n)


def bw_torch(torch: object, dev: str, n: int, reps: int = 10) -> tuple[float, float]:
    a = torch.rand(n, device=dev)  # type: ignore[attr-defined]
    b = torch.rand(n, device=dev)  # type: ignore[attr-defined]
    sync = torch.cuda.synchronize if dev == "cuda" else (lambda: None)  # type: ignore[attr-defined]

    def add() -> None:
        for _ in range(reps):
            a + b  # noqa: B018
        sync()

    def copy() -> None:
        for _ in range(reps):
            a.clone()
        sync()

    ga, gc = bandwidth(add, copy, n)
    return ga * reps, gc * reps


def small_ops(dev: str) -> dict[str, Callable[[], object]]:
    """The calls (c) times, on small operands made once."""
    import vkblas

    x, y = vkblas.rand(64, device=dev), vkblas.rand(64, device=dev)
    m = vkblas.rand(32, 32, device=dev)
    idx = vkblas.tensor([3, 1, 4, 1, 5], device=dev)
    mask = x > 0.5
    return {
        "x + y": lambda: x + y,
        "x * 2.0": lambda: x * 2.0,
        "relu": lambda: x.relu(),
        "exp": lambda: x.exp(),
        "clamp": lambda: x.clamp(0.1, 0.9),
        "where": lambda: vkblas.where(mask, x, y),
        "x.sum()": lambda: x.sum(),
        "m.sum(1)": lambda: m.sum(1),
        "softmax": lambda: m.softmax(-1),
        "m @ m": lambda: m @ m,
        "x[idx]": lambda: x[idx],
        "m.T contiguous": lambda: m.T.contiguous(),
        "x.add_(y)": lambda: x.add_(y),
    }


def per_op(dev: str, calls: int, repeat: int) -> list[list[object]]:
    import vkblas

    rows = []
    for name, fn in small_ops(dev).items():

        def run(fn: Callable[[], object] = fn) -> None:
            for _ in range(calls):
                fn()
            vkblas.synchronize(dev)

        rows.append([name, best_of(run, repeat=repeat) / calls * 1e6])
    return rows


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--chain", type=int, default=10_000, help="ops in the dependent chain (default 10000)")
    p.add_argument("--log2n", type=int, default=26, help="log2 of the bandwidth tensors' size (default 26)")
    p.add_argument("--devices", nargs="*", help="vkblas devices (default: all)")
    p.add_argument("--json", help="also write the results here")
    p.add_argument("--per-op", action="store_true", help="only (c): µs per call of common small ops")
    p.add_argument("--calls", type=int, default=2000, help="calls per timed run in --per-op (default 2000)")
    p.add_argument("--repeat", type=int, default=7, help="timed runs in --per-op; the minimum is shown (default 7)")
    args = p.parse_args(argv)
    if args.per_op:
        for dev in args.devices or vkblas_devices():
            rows = per_op(dev, args.calls, args.repeat)
            print_table(f"per-op cost on {dev}, {args.calls} calls, min of {args.repeat}", ["op", "us/call"], rows)
            if args.json:
                Path(args.json).write_text(json.dumps({"device": dev, "rows": rows}, indent=1))
        return 0
    n = 1 << args.log2n
    torch = torch_or_none()
    rows = []
    for dev in args.devices or vkblas_devices():
        import vkblas

        info = vkblas.backend.get(dev).describe()
        label = f"vkblas {dev} ({info.get('adapter', info.get('device', ''))})"
        us = chain_vkblas(dev, args.chain)
        ga, gc = bw_vkblas(dev, n)
        rows.append([label, us, ga, gc, 100 * ga / gc])
        if dev != "cpu":
            rows.append(
                [f"vkblas {dev}, chain replayed (vkblas.graphs)", chain_vkblas_replayed(dev, args.chain), "", "", ""]
            )
    us = chain_numpy(args.chain)
    ga, gc = bw_numpy(n)
    rows.append(["numpy", us, ga, gc, 100 * ga / gc])
    if torch is not None:
        tdevs = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])
        for dev in tdevs:
            us = chain_torch(torch, dev, args.chain)
            ga, gc = bw_torch(torch, dev, n)
            rows.append([f"torch {torch.__version__} {dev}", us, ga, gc, 100 * ga / gc])
    header = ["engine", "chain us/op", "add GB/s", "copy GB/s", "add % of copy"]
    print_table(
        f"elementwise ops: chain of {args.chain} dependent ops; bandwidth at n=2^{args.log2n} fp32", header, rows
    )
    if args.json:
        Path(args.json).write_text(json.dumps({"header": header, "rows": rows}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
