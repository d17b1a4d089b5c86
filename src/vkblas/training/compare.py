"""``vkblas bench train``: the same training run in vkblas on every device and in PyTorch (CPU, and CUDA where
present) — same model and initial weights, same batches in the same order, same optimizer and schedule — printed
as one table: training and evaluation samples/s, time to reach the target accuracy, final accuracy, peak memory.

PyTorch is optional: without it those rows are skipped. ``benchmarks/train_vs_torch.py`` runs this module.
"""

from __future__ import annotations

import argparse
import json
import resource
import sys
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from .fit import DATASETS, DEFAULT_LR, OPTIMIZERS, make_loaders, make_optimizer, run_epochs
from .models import MODELS, build


@dataclass
class Row:
    framework: str
    device: str
    mode: str  # vkblas: "graph" (captured step replayed) or "eager"; PyTorch: "eager"
    train_samples_per_s: float
    eval_samples_per_s: float
    seconds_to_target: float | None  # cumulative training time (evaluation excluded) at the first epoch >= target
    final_accuracy: float
    peak_memory: str


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="vkblas bench train", description=__doc__.split("\n\n")[0])
    p.add_argument("--dataset", choices=sorted(DATASETS), default="mnist")
    p.add_argument("--model", choices=list(MODELS), default="mlp")
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--batch-size", type=int, default=128)
    p.add_argument("--limit", type=int, default=None, help="use the first N images of each split (a short run)")
    p.add_argument("--optimizer", choices=OPTIMIZERS, default="adam")
    p.add_argument("--lr", type=float, default=None)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--target", type=float, default=0.98, help="accuracy for the time-to-target column (0-1)")
    p.add_argument("--devices", default=None, help="comma-separated vkblas devices (default: all of vkblas.devices())")
    p.add_argument("--no-torch", action="store_true", help="skip the PyTorch rows")
    p.add_argument("--data", default=None, metavar="DIR", help="dataset directory (before $VKBLAS_DATA)")
    p.add_argument("--no-graph", action="store_true", help="vkblas: eager steps instead of a captured graph")
    p.add_argument("--json", default=None, metavar="FILE", help="also write the rows as JSON to FILE")
    args = p.parse_args(argv)
    for name in ("epochs", "batch_size", "limit"):
        if getattr(args, name) is not None and getattr(args, name) < 1:
            p.error(f"--{name.replace('_', '-')} must be a positive integer")
    return args


def initial_state(model: str, seed: int) -> dict[str, np.ndarray]:
    """The initial weights every run starts from (made once by vkblas on the cpu)."""
    from ..random import manual_seed

    manual_seed(seed)
    return {k: v.detach().numpy() for k, v in build(model).to("cpu").state_dict().items()}


def _process_peak_rss() -> str:
    kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return f"{kib / 1024:.0f} MiB (process RSS)"


def _measure(
    args: argparse.Namespace,
    framework: str,
    device: str,
    model: Any,
    optimizer: Any,
    loss_fn: Any,
    loaders: tuple[Any, Any],
    no_grad: Callable[[], Any] | None,
    memory: Callable[[], str],
    graph: bool = False,
) -> Row:
    lr = args.lr if args.lr is not None else DEFAULT_LR[args.optimizer]
    history = list(
        run_epochs(model, optimizer, loss_fn, *loaders, args.epochs, lr, show=False, no_grad=no_grad, graph=graph)
    )
    reached = [h["train_seconds_total"] for h in history if h["test_accuracy"] >= args.target]
    return Row(
        framework=framework,
        device=device,
        mode="graph" if graph else "eager",
        train_samples_per_s=float(np.mean([h["train_samples_per_s"] for h in history[1:] or history])),
        eval_samples_per_s=float(np.mean([h["eval_samples_per_s"] for h in history[1:] or history])),
        seconds_to_target=reached[0] if reached else None,
        final_accuracy=history[-1]["test_accuracy"],
        peak_memory=memory(),
    )


def run_vkblas(args: argparse.Namespace, device: str, state: dict[str, np.ndarray]) -> Row:
    from .. import backend, nn
    from .checkpoint import load_into
    from .loop import GraphedStep

    model = load_into(build(args.model), state, device).to(device)
    lr = args.lr if args.lr is not None else DEFAULT_LR[args.optimizer]
    graph = not args.no_graph and GraphedStep.supported(model)
    optimizer = make_optimizer(args.optimizer, model.parameters(), lr, capturable=graph)
    loaders = make_loaders(args.dataset, args.batch_size, args.seed, device, args.data, args.limit)
    be = backend.get(device)

    def memory() -> str:
        pool = be.describe().get("pool")  # a device with a buffer pool says so in its description
        if pool is None:
            return _process_peak_rss()
        return f"{pool['allocated_bytes'] / 2**20:.0f} MiB (buffer pool)"

    return _measure(args, "vkblas", device, model, optimizer, nn.CrossEntropyLoss(), loaders, None, memory, graph)


def run_torch(args: argparse.Namespace, torch: Any, device: str, state: dict[str, np.ndarray]) -> Row:
    torch.manual_seed(args.seed)
    model = build(args.model, nn=torch.nn)
    model.load_state_dict({k: torch.from_numpy(v.copy()) for k, v in state.items()})
    model.to(device)
    lr = args.lr if args.lr is not None else DEFAULT_LR[args.optimizer]
    optimizer = make_optimizer(args.optimizer, model.parameters(), lr, optim=torch.optim)

    def convert(a: np.ndarray) -> Any:
        t = torch.from_numpy(a)
        t = t.long() if a.dtype.kind in "iu" else t.float()
        return t.to(device, non_blocking=True)

    loaders = make_loaders(args.dataset, args.batch_size, args.seed, None, args.data, args.limit, convert=convert)
    if device == "cuda":
        torch.cuda.reset_peak_memory_stats()

    def memory() -> str:
        if device == "cuda":
            return f"{torch.cuda.max_memory_allocated() / 2**20:.0f} MiB (allocated)"
        return _process_peak_rss()

    return _measure(
        args, "torch", device, model, optimizer, torch.nn.CrossEntropyLoss(), loaders, torch.no_grad, memory
    )


def _torch() -> Any:
    try:
        import torch
    except ImportError:
        return None
    return torch


def format_table(rows: Sequence[Row], target: float) -> str:
    header = [
        "framework",
        "device",
        "mode",
        "train samples/s",
        "eval samples/s",
        f"s to {100 * target:g}%",
        "final acc",
        "peak memory",
    ]
    cells = [header] + [
        [
            r.framework,
            r.device,
            r.mode,
            f"{r.train_samples_per_s:,.0f}",
            f"{r.eval_samples_per_s:,.0f}",
            "-" if r.seconds_to_target is None else f"{r.seconds_to_target:.1f}",
            f"{100 * r.final_accuracy:.2f}%",
            r.peak_memory,
        ]
        for r in rows
    ]
    widths = [max(len(row[i]) for row in cells) for i in range(len(header))]
    lines = [" | ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)) for row in cells]
    lines.insert(1, "-|-".join("-" * w for w in widths))
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    from ..device import devices as all_devices

    args = parse_args(argv)
    devices = args.devices.split(",") if args.devices else all_devices()
    state = initial_state(args.model, args.seed)
    rows: list[Row] = []
    for dev in devices:
        print(f"vkblas on {dev} ...", file=sys.stderr, flush=True)
        rows.append(run_vkblas(args, dev, state))
    torch = None if args.no_torch else _torch()
    if torch is None and not args.no_torch:
        print("PyTorch is not installed: skipping its rows", file=sys.stderr)
    if torch is not None:
        for dev in ["cpu"] + (["cuda"] if torch.cuda.is_available() else []):
            print(f"torch on {dev} ...", file=sys.stderr, flush=True)
            rows.append(run_torch(args, torch, dev, state))
    print(
        f"{args.model} on {args.dataset}: {args.epochs} epoch(s), batch {args.batch_size}, {args.optimizer}, "
        f"{'all' if args.limit is None else args.limit} images per split; samples/s averaged over epochs after the "
        "first"
    )
    print(format_table(rows, args.target))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"args": vars(args), "rows": [asdict(r) for r in rows]}, f, indent=2)
    return 0
