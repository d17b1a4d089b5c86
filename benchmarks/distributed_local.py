"""Training on several workers of one machine (issue 10, and the local half of issue 12): for each configuration
of workers and each algorithm, samples/s, speedup over single-worker training, final test accuracy, idle time of
every worker, the staleness histogram and the bytes each worker sent; then runs where half the workers are killed
mid-epoch, beside the same runs without faults; then a traffic table (bytes per worker to reach the accuracy of
per-step sync: sync fp32 vs diloco fp32 vs diloco int8).

    PYTHONPATH=src python benchmarks/distributed_local.py --preset cpu     # 1 and 2 cpu workers (a small machine)
    PYTHONPATH=src python benchmarks/distributed_local.py --preset h200    # cpu x1-3, vulkan:0, vulkan:0+cpu (<= 6 min)
    PYTHONPATH=src python benchmarks/distributed_local.py --configs "cpu;cpu,cpu" --algorithms sync --json out.json

A configuration is a comma-separated worker list (``vulkan:0,cpu``); configurations are separated by ``;``.
"Speedup" divides by the samples/s of ``vkblas train`` on the configuration's first device with the same batch
(the rows ``single``; a cpu one with the same BLAS threads as a cpu worker), i.e. single-process training of the
same workload:

* ``sync`` rows use the global batch ``--sync-batch`` (512 in the presets: a step of the MLP costs ~2 ms of fixed
  Python work in vkblas whatever its batch, which N workers each pay, so 128 samples split three ways leave the
  workers mostly paying that), and are compared with ``vkblas train`` at that batch;
* ``async`` and ``diloco`` rows run with ``--batch-per-worker`` in the presets (every worker trains on batches of
  ``--batch-size``, as DiLoCo's workers do; the global batch is N times that) and are compared with ``vkblas
  train`` at ``--batch-size``.

The "batch" column says which. Speed is measured, never asserted; on a shared machine compare rows of one run only.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from typing import Any

from _common import print_table

MODES: dict[str, dict[str, Any]] = {
    # a 2-core machine: one BLAS thread per worker, 10 000 images, 3 epochs
    "cpu": {
        "configs": "cpu;cpu,cpu",
        "algorithms": "sync,async,diloco",
        "limit": 10_000,
        "epochs": 3,
        "threads": 1,
        "kill": "cpu,cpu",
        "repeat": 2,
        "sync_batch": 512,
        "batch_per_worker": True,
        # ~10 rounds in the run (the published momentum 0.9 needs far more than that)
        "inner_steps": 10,
        "outer_momentum": 0.5,
    },
    # the H200 host: 16 cores, 4 threads per cpu worker, 20 000 images, 2 epochs (~25 runs of ~10 s: <= 6 min)
    "h200": {
        "configs": "cpu;cpu,cpu;cpu,cpu,cpu;vulkan:0;vulkan:0,cpu",
        "algorithms": "sync,async,diloco",
        "limit": 20_000,
        "epochs": 2,
        "threads": 4,
        "kill": "cpu,cpu,cpu",
        "repeat": 1,
        "sync_batch": 512,
        "batch_per_worker": True,
        # ~10 rounds in the run (the published momentum 0.9 needs far more than that)
        "inner_steps": 10,
        "outer_momentum": 0.5,
    },
}


@dataclass
class Row:
    config: str
    algorithm: str
    samples_per_s: float
    test_accuracy: float
    idle: list[float]  # per worker, 0-1
    staleness: dict[str, int]
    mb_sent_per_worker: float
    updates: str  # accepted/stale/rejected
    train_seconds: float
    batch: int = 128
    per_worker: bool = False  # the batch is each worker's (batch_per_worker), not the global one
    faults: str = ""
    speedup: float | None = None
    codec: str = "fp32"
    history: list[dict[str, Any]] = field(default_factory=list)
    rounds_closed_by: dict[str, int] = field(default_factory=dict)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument(
        "--preset", "--mode", dest="mode", choices=sorted(MODES), default="cpu", help="a preset of the options below"
    )
    p.add_argument("--configs", default=None, help="worker lists separated by ';' (default: the preset's)")
    p.add_argument(
        "--algorithms",
        default=None,
        help="comma-separated of sync, sync-sharded, sync-holder (sync with each worker stepping a slice, or the "
        "runner stepping the model), async, diloco (default: the preset's)",
    )
    p.add_argument("--model", choices=("mlp", "cnn"), default="mlp")
    p.add_argument("--epochs", type=int, default=None)
    p.add_argument("--limit", type=int, default=None, help="images per split (default: the mode's; 0: all)")
    p.add_argument("--batch-size", type=int, default=128, help="async/diloco batch (each worker's: --batch-per-worker)")
    p.add_argument("--sync-batch", type=int, default=None, help="sync's global batch (default: the preset's)")
    p.add_argument(
        "--batch-per-worker",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="async/diloco: every worker trains on --batch-size batches (default: the preset's)",
    )
    p.add_argument("--threads-per-worker", type=int, default=None, help="BLAS threads of each cpu worker")
    p.add_argument("--inner-steps", type=int, default=None, help="diloco H (default: the preset's)")
    p.add_argument(
        "--outer-momentum", type=float, default=None, help="diloco outer Nesterov momentum (default: the preset's)"
    )
    p.add_argument(
        "--kill",
        default=None,
        help="the configuration whose runs are repeated with half its workers "
        "killed mid-epoch ('' for none; default: the mode's)",
    )
    p.add_argument("--no-traffic", action="store_true", help="skip the diloco int8 runs of the traffic table")
    p.add_argument(
        "--repeat", type=int, default=None, help="runs per row, the fastest kept (a shared machine; default: mode's)"
    )
    p.add_argument("--data", default=None, help="dataset directory (before $VKBLAS_DATA)")
    p.add_argument("--json", default=None, metavar="PATH", help="also write every row as JSON")
    args = p.parse_args(argv)
    mode = MODES[args.mode]
    args.configs = args.configs if args.configs is not None else mode["configs"]
    args.algorithms = args.algorithms if args.algorithms is not None else mode["algorithms"]
    args.sync_batch = args.sync_batch or mode["sync_batch"]
    args.inner_steps = args.inner_steps or mode["inner_steps"]
    args.outer_momentum = args.outer_momentum if args.outer_momentum is not None else mode["outer_momentum"]
    args.batch_per_worker = args.batch_per_worker if args.batch_per_worker is not None else mode["batch_per_worker"]
    args.epochs = args.epochs if args.epochs is not None else mode["epochs"]
    args.limit = (args.limit or None) if args.limit is not None else mode["limit"]
    args.threads_per_worker = args.threads_per_worker or mode["threads"]
    args.kill = args.kill if args.kill is not None else mode["kill"]
    args.repeat = args.repeat or mode["repeat"]
    return args


def killer(workers: int, at_samples: int) -> Any:
    """A callback that SIGKILLs the second half of the workers once ``at_samples`` have arrived."""
    doomed = [f"w{i}" for i in range(workers - workers // 2, workers)]
    done: list[str] = []

    def callback(runner: Any) -> None:
        if not done and runner.processed >= at_samples:
            for name in doomed:
                runner.kill_worker(name)
            done.extend(doomed)

    return callback


def single(args: argparse.Namespace, device: str, batch: int, out: str) -> Row:
    """``vkblas train`` on ``device`` in its own process, a cpu one with the workers' BLAS thread count: the
    single-worker training every speedup is measured against."""
    threads = str(args.threads_per_worker if device == "cpu" else 1)
    env = {**os.environ, **{v: threads for v in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")}}
    cmd = [sys.executable, "-m", "vkblas", "train", "mnist", "--model", args.model, "--epochs", str(args.epochs)]
    cmd += ["--batch-size", str(batch), "--device", device, "--out", out, "--quiet"]
    cmd += ["--limit", str(args.limit)] if args.limit else []
    cmd += ["--data", args.data] if args.data else []
    subprocess.run(cmd, env=env, check=True, stdout=sys.stderr)
    with open(os.path.join(out, "metrics.json")) as f:
        m = json.load(f)
    row = Row(device, "single", rate(m), m["test_accuracy"], [0.0], {}, 0.0, "-", m["train_seconds"], batch)
    row.history = [{k: e[k] for k in ("epoch", "test_accuracy", "train_seconds_total")} for e in m["epochs"]]
    _progress(row, 0.0)
    return row


def rate(metrics: dict[str, Any]) -> float:
    """Training samples/s of a run: the mean over its epochs after the first (which pays one-off costs: the
    dataset's transform, kernel and buffer warm-up), or the first if there is only one."""
    epochs = metrics["epochs"][1:] or metrics["epochs"]
    return sum(e["train_samples_per_s"] for e in epochs) / len(epochs)


def _train_size(args: argparse.Namespace) -> int:
    from vkblas.training import load_dataset

    return len(load_dataset("mnist", True, args.data, args.limit))


def _progress(row: Row, seconds: float) -> None:
    extra = f" {row.codec}" if row.codec != "fp32" else ""
    extra += f" {row.faults}" if row.faults else ""
    print(
        f"  {row.config:<28} {row.algorithm:<7}{extra}: {row.samples_per_s:,.0f} samples/s, "
        f"{100 * row.test_accuracy:.2f}% ({seconds:.0f} s)",
        file=sys.stderr,
        flush=True,
    )


def _forward_backward(model: str, batch: int, seconds: float, out: Any) -> None:
    """In a process of its own: ms per forward + backward of ``model`` on one cpu batch, over ``seconds``."""
    import vkblas
    from vkblas.training import build

    net = build(model).to("cpu")
    loss_fn = vkblas.nn.CrossEntropyLoss()
    x, y = vkblas.randn(batch, 1, 28, 28, device="cpu"), vkblas.randint(0, 10, (batch,), device="cpu")
    steps, t0 = 0, time.perf_counter()
    for i in range(1_000_000):
        if i == 3:
            steps, t0 = 0, time.perf_counter()  # after a warm-up
        for p in net.parameters():
            p.grad = None
        loss_fn(net(x), y).backward()
        steps += 1
        if i > 3 and time.perf_counter() - t0 > seconds:
            break
    out.put(1e3 * (time.perf_counter() - t0) / steps)


def ceiling(args: argparse.Namespace, processes: int) -> str:
    """What the host allows at best: a worker's forward + backward (its share of the batch, on the cpu) run by one
    process alone, then by ``processes`` processes at once, each with the workers' BLAS threads. N cpu workers
    cannot beat N x (ms alone / ms together) over one."""
    import multiprocessing as mp

    from vkblas.distributed.local.procs import BLAS_THREAD_VARS, environ

    ctx = mp.get_context("spawn")
    share = args.batch_size if args.batch_per_worker else max(1, args.batch_size // processes)
    times = {}
    for k in (1, processes):
        out = ctx.Queue()
        procs = [ctx.Process(target=_forward_backward, args=(args.model, share, 3.0, out)) for _ in range(k)]
        with environ({v: str(args.threads_per_worker) for v in BLAS_THREAD_VARS}):
            for p in procs:
                p.start()
        times[k] = [out.get(timeout=120) for _ in procs]
        for p in procs:
            p.join()
    alone, together = times[1][0], sum(times[processes]) / processes
    return (
        f"host ceiling: forward + backward of {share} samples takes {alone:.2f} ms in one process, "
        f"{together:.2f} ms each in {processes} at once: at most {processes * alone / together:.2f}x with "
        f"{processes} cpu workers"
    )


def best(args: argparse.Namespace, measure: Any, *a: Any, **kw: Any) -> Row:
    """The fastest of ``args.repeat`` runs of ``measure(args, *a, **kw)`` (others on a shared machine slow some)."""
    return max((measure(args, *a, **kw) for _ in range(args.repeat)), key=lambda r: r.samples_per_s)


def run(args: argparse.Namespace, config: str, algorithm: str, out: str, kill: bool = False, codec: str = "fp32"):
    from vkblas.distributed.local import LocalConfig, run_local
    from vkblas.training import TrainConfig

    workers = tuple(config.split(","))
    label, algorithm = algorithm, algorithm.removesuffix("-holder").removesuffix("-sharded")
    batch = args.sync_batch if algorithm == "sync" else args.batch_size
    per_worker = algorithm != "sync" and args.batch_per_worker
    train = TrainConfig(
        model=args.model,
        epochs=args.epochs,
        batch_size=batch,
        limit=args.limit,
        data=args.data,
        out=out,
        progress=False,
    )
    extra: dict[str, Any] = {"batch_per_worker": True} if per_worker else {}
    if label in ("sync-holder", "sync-sharded"):  # vs sync's replicated step
        extra["sync_apply"] = label.removeprefix("sync-")
    if algorithm == "diloco":
        extra |= {"inner_steps": args.inner_steps, "outer_momentum": args.outer_momentum, "codec": codec}
        extra["error_feedback"] = codec != "fp32"
    cfg = LocalConfig(train, workers, algorithm, threads_per_worker=args.threads_per_worker, **extra)
    callback, faults = None, ""
    if kill:
        callback = killer(len(workers), _train_size(args) // 2)
    t0 = time.monotonic()
    with contextlib.redirect_stdout(sys.stderr):  # the epoch lines
        m = run_local(cfg, callback=callback)
    r = m["run"]
    if kill:
        faults = f"killed {len(r['deaths'])}/{len(workers)} at sample {min(d['after_samples'] for d in r['deaths']):,}"
    workers_m = r["workers"]  # every worker that took part, dead ones included
    row = Row(
        config=config,
        algorithm=label,
        samples_per_s=rate(m),
        test_accuracy=m["test_accuracy"],
        idle=[w["idle_fraction"] for w in workers_m],
        staleness=r["totals"]["staleness_histogram"],
        mb_sent_per_worker=r["totals"]["bytes_sent"] / len(workers_m) / 1e6,
        updates=f"{r['totals']['accepted']}/{r['totals']['stale']}/{r['totals']['rejected']}",
        train_seconds=m["train_seconds"],
        batch=batch,
        per_worker=per_worker,
        faults=faults,
        codec=codec,
        history=[
            {k: e[k] for k in ("epoch", "test_accuracy", "bytes_sent_total", "train_seconds_total")}
            for e in m["epochs"]
        ],
        rounds_closed_by=r.get("rounds_closed_by", {}),
    )
    _progress(row, time.monotonic() - t0)
    return row


def _hist(h: dict[str, int]) -> str:
    return " ".join(f"{k}:{v}" for k, v in h.items()) if h else "-"


def table(rows: list[Row]) -> str:
    header = [
        "workers",
        "algorithm",
        "batch",
        "samples/s",
        "speedup",
        "test acc",
        "idle % per worker",
        "staleness (s:count)",
        "MB sent/worker",
        "acc/stale/rej",
        "faults",
    ]
    cells = [
        [
            r.config,
            r.algorithm + ("" if r.codec == "fp32" else f" {r.codec}"),
            f"{r.batch}/worker" if r.per_worker else str(r.batch),
            f"{r.samples_per_s:,.0f}",
            "-" if r.speedup is None else f"{r.speedup:.2f}x",
            f"{100 * r.test_accuracy:.2f}%",
            " ".join(f"{100 * i:.0f}" for i in r.idle),
            _hist(r.staleness),
            f"{r.mb_sent_per_worker:,.1f}",
            r.updates,
            r.faults or "-",
        ]
        for r in rows
    ]
    return print_table("", header, cells)


def traffic(rows: list[Row], config: str) -> str | None:
    """Bytes per worker to reach the accuracy of per-step sync (its final accuracy minus 0.5 points)."""
    picks = {(r.algorithm, r.codec): r for r in rows if r.config == config and not r.faults}
    sync = picks.get(("sync", "fp32"))
    if sync is None:
        return None
    target = sync.test_accuracy - 0.005
    n = len(config.split(","))
    out = []
    for key in (("sync", "fp32"), ("diloco", "fp32"), ("diloco", "int8")):
        r = picks.get(key)
        if r is None:
            continue
        reached = [h for h in r.history if h["test_accuracy"] >= target]
        mb = reached[0]["bytes_sent_total"] / n / 1e6 if reached else None
        out.append([f"{key[0]} {key[1]}", f"{100 * r.test_accuracy:.2f}%", "-" if mb is None else f"{mb:,.1f}", mb])
    base = out[0][3]
    cells = [row[:3] + ["-" if row[3] is None or not base else f"{base / row[3]:,.0f}x"] for row in out]
    return print_table(
        f"traffic on {config}: MB sent per worker to reach {100 * target:.2f}% (sync's final accuracy - 0.5 points)",
        ["run", "final acc", "MB/worker to target", "less than sync"],
        cells,
    )


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    configs = [c.strip() for c in args.configs.split(";") if c.strip()]
    algorithms = [a.strip() for a in args.algorithms.split(",") if a.strip()]
    rows: list[Row] = []
    started = time.monotonic()
    most = max(sum(1 for d in c.split(",") if d == "cpu") for c in configs)
    limit = ceiling(args, most) if most > 1 else ""
    print(limit, file=sys.stderr)
    print(
        f"{args.model}, {args.epochs} epoch(s), batch {args.batch_size}, "
        f"{'all' if args.limit is None else f'{args.limit:,}'} images, {args.threads_per_worker} BLAS thread(s) "
        f"per cpu worker, {os.cpu_count()} cores",
        file=sys.stderr,
    )
    with tempfile.TemporaryDirectory(prefix="vkblas-bench-") as tmp:
        batches = sorted({args.sync_batch if a.startswith("sync") else args.batch_size for a in algorithms})
        for device in dict.fromkeys(c.split(",")[0] for c in configs):
            for batch in batches:
                rows.append(best(args, single, device, batch, f"{tmp}/single-{device}-{batch}"))
        for i, config in enumerate(configs):
            for algorithm in algorithms:
                rows.append(best(args, run, config, algorithm, f"{tmp}/{i}-{algorithm}"))
        if args.kill:
            for algorithm in (a for a in algorithms if a not in ("sync-holder", "sync-sharded")):
                rows.append(best(args, run, args.kill, algorithm, f"{tmp}/kill-{algorithm}", kill=True))
        traffic_config = next((c for c in reversed(configs) if len(c.split(",")) > 1), None)
        if traffic_config and "diloco" in algorithms and not args.no_traffic:
            rows.append(best(args, run, traffic_config, "diloco", f"{tmp}/traffic", codec="int8"))
    baseline = {(r.config, r.batch): r.samples_per_s for r in rows if r.algorithm == "single"}
    for r in rows:
        base = baseline.get((r.config.split(",")[0], r.batch))
        r.speedup = r.samples_per_s / base if base else None
    print(
        f"\n{args.model} on MNIST, {args.epochs} epoch(s) of {_train_size(args):,} images, sync batch "
        f"{args.sync_batch} (global), async/diloco batch {args.batch_size}"
        f"{' per worker' if args.batch_per_worker else ' (global)'}, diloco H={args.inner_steps}, "
        f"{args.threads_per_worker} BLAS thread(s) per cpu worker; samples/s over the epochs after the first, "
        f"the best of {args.repeat} run(s); "
        f"{time.monotonic() - started:.0f} s in all"
    )
    if limit:
        print(limit)
    text = table(rows)
    if traffic_config:
        traffic(rows, traffic_config)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(
                {"args": vars(args), "ceiling": limit, "rows": [asdict(r) for r in rows], "table": text}, f, indent=2
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
