"""A large GPT through the coordinator on loopback (BENCHMARKS.md, "A 1.2B GPT on one GPU (issue 16)", the
coordinator half): a real ``vkblas distributed serve shakespeare-char --model gpt-50m --algorithm diloco --codec
int8`` and two workers (threads of this process, each with the real client and model cache).

1. **Broadcast** of version 0 (the checkpoint as content-hashed shards and pieces of 16 MiB): every shard read from
   the store's files and hashed (the disk's floor, no HTTP); fetched one stream at a time (the baseline); fetched
   with ``--fetchers`` parallel streams (the worker's way); and a fetch whose link dies after 40 % of the bytes
   (the worker gives up), then the same cache fetched again: only the rest comes (whole shards kept, the broken
   one resumed with ``Range``).
2. **Rounds**: each worker leases a unit, downloads the new version's shards, computes a pseudo-gradient and
   uploads it int8 in parts of ``--part-mib``; the round closes when both are in, the coordinator applies it
   (outer Nesterov, tensor by tensor from the stored payloads) and checkpoints it. ``--compute synthetic`` (the
   default: what this benchmark measures is the coordinator, not the model's speed) makes the pseudo-gradient from
   random numbers in no time; ``--compute real --device vulkan:0`` trains the unit's inner steps on the device.
   Reported per round: wall time (first lease to the next version), each worker's download and upload bytes.
3. **The coordinator's memory by phase**: the rounds go in lockstep (every worker downloads, then every worker
   uploads at once, then the round is applied), and the coordinator's peak RSS is taken per phase (its high-water
   mark reset through ``/proc/PID/clear_refs`` at each phase's start): ready (startup's peak, and the RSS once
   ready), serving shards (the broadcast, each round's downloads), uploads received and validated, and the round's
   validation, apply and checkpoint (one pass of the applier, not separable from outside: the in-process test
   tests/distributed/test_coordinator_scale.py splits it). Each peak is given above the steady state, the RSS when
   ready plus the outer optimizer's momentum (one model of float32: the optimizer's state, made by round 0's
   apply), in copies of the model: the issue's bound is one.

    PYTHONPATH=src python benchmarks/coordinator_scale.py                        # CPU machine, ~2-4 min
    PYTHONPATH=src python benchmarks/coordinator_scale.py --preset h200          # real inner steps on vulkan:0
    python3 benchmarks/coordinator_scale.py --preset h200 --model gpt-1.2b --compute synthetic --rounds 1
                                                    # 4.9 GB model: ~5-6 min estimated, ~50 GB RAM, ~30 GB disk
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import httpx
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import print_table  # noqa: E402
from coordinator import free_port  # noqa: E402
from vkblas.distributed.codec import encode  # noqa: E402
from vkblas.distributed.protocol import UploadMeta  # noqa: E402
from vkblas.distributed.worker.cache import DataCache, ModelCache  # noqa: E402
from vkblas.distributed.worker.client import Client  # noqa: E402
from vkblas.distributed.worker.compute import Result  # noqa: E402
from vkblas.distributed.worker.errors import UnreachableError  # noqa: E402

MB = 1e6
MiB = 1 << 20
DEVICE_LOCK = threading.Lock()


def _kib(pid: int, key: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1])
    return 0


class Phases:
    """The coordinator's peak RSS per phase: its high-water mark (VmHWM) reset when a phase starts, read when it
    ends (Linux: ``/proc/PID/clear_refs``)."""

    def __init__(self, pid: int, model_bytes: int) -> None:
        self.pid, self.model_bytes = pid, model_bytes
        self.ready = _kib(pid, "VmRSS") * 1024
        self.rows: list[list[Any]] = [["ready: startup's peak", "-", f"{_kib(pid, 'VmHWM') / 1024:.0f}", "-", "-"],
                                      ["ready", "-", f"{self.ready / MiB:.0f}", "0", "0.00"]]  # fmt: skip
        self.copies: dict[str, float] = {}
        self.momentum = False  # the outer optimizer's state exists (after round 0's apply)

    def measure(self, name: str, fn: Any, *, makes_momentum: bool = False) -> Any:
        before = _kib(self.pid, "VmRSS") * 1024
        Path(f"/proc/{self.pid}/clear_refs").write_text("5")  # VmHWM := VmRSS
        out = fn()
        peak = _kib(self.pid, "VmHWM") * 1024
        self.momentum = self.momentum or makes_momentum
        steady = self.ready + (self.model_bytes if self.momentum else 0)
        copies = (peak - steady) / self.model_bytes
        self.copies[name] = max(self.copies.get(name, -1e9), copies)
        self.rows.append([name, f"{before / MiB:.0f}", f"{peak / MiB:.0f}", f"{(peak - steady) / MiB:.0f}",
                          f"{copies:.2f}"])  # fmt: skip
        return out


class Cut(httpx.BaseTransport):
    """After ``budget`` bytes of shard bodies, every shard response breaks (the link is gone)."""

    def __init__(self, inner: httpx.BaseTransport, budget: int) -> None:
        self.inner, self.budget, self.lock = inner, budget, threading.Lock()

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        r = self.inner.handle_request(request)
        if "/v1/shards/" not in request.url.path:
            return r
        outer = self

        class Stream(httpx.SyncByteStream):
            def __iter__(self):  # type: ignore[no-untyped-def]
                for chunk in r.stream:  # type: ignore[union-attr]
                    with outer.lock:
                        take = max(0, min(len(chunk), outer.budget))
                        outer.budget -= take
                    if take < len(chunk):
                        yield chunk[:take]
                        raise httpx.ReadError("link lost (benchmark)")
                    yield chunk

            def close(self) -> None:
                r.close()

        return httpx.Response(r.status_code, headers=r.headers, stream=Stream())


def _fetch(url: str, manifest: Any, cache: Path, fetchers: int, transport: Any = None) -> tuple[float, int, str]:
    client = Client(url, transport=transport, retry_for=1.0)
    if transport is not None:
        client.sleep = lambda s: None
    t0, outcome = time.perf_counter(), "complete"
    try:
        ModelCache(client, cache, fetchers=fetchers).params(manifest)
    except UnreachableError:
        outcome = "link lost: gave up"
    finally:
        client.close()
    return time.perf_counter() - t0, client.meter.received, outcome


def broadcast(url: str, store: Path, manifest: Any, tmp: Path, fetchers: int) -> list[list[Any]]:
    import hashlib

    total = sum(r.bytes for r in manifest.shards)
    rows = []
    t0 = time.perf_counter()
    for ref in manifest.shards:  # the floor: the same bytes from the store's files, hashed, no HTTP
        h = hashlib.sha256()
        with open(store / "blobs" / ref.sha256[:2] / ref.sha256, "rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                h.update(block)
    rows.append(["store files read + sha256 (no HTTP)", time.perf_counter() - t0, total, "complete"])
    for name, n in (("1 stream (baseline)", 1), (f"{fetchers} parallel streams", fetchers)):
        s, got, outcome = _fetch(url, manifest, tmp / f"cache-{n}", n)
        rows.append([name, s, got, outcome])
    cache = tmp / "cache-cut"
    inner = httpx.HTTPTransport()
    s, got, outcome = _fetch(url, manifest, cache, fetchers, Cut(inner, int(0.4 * total)))
    rows.append([f"{fetchers} streams, link lost at 40 %", s, got, outcome])
    s, got, outcome = _fetch(url, manifest, cache, fetchers)
    rows.append(["same cache again: resumed", s, got, outcome])
    return [[name, f"{s:.2f}", f"{b / MB:.1f}", f"{b / MB / max(s, 1e-9):.0f}", o] for name, s, b, o in rows]


class BenchWorker:
    """One worker's loop, timed: lease, download, compute, upload (the real client and caches)."""

    def __init__(self, url: str, name: str, cache: Path, args: argparse.Namespace) -> None:
        self.client = Client(url, part_bytes=int(args.part_mib * (1 << 20)))
        self.client.register(name, args.device)
        self.info = self.client.run_info()
        self.models = ModelCache(self.client, cache, fetchers=args.fetchers)
        self.data = DataCache(self.client, self.info, cache)
        self.args, self.rng = args, np.random.default_rng(abs(hash(name)) % 2**32)
        self.trainer = None
        if args.compute == "real":
            from vkblas.distributed.worker.compute import Trainer

            self.trainer = Trainer(self.info, args.device)
        self.log: list[dict[str, Any]] = []
        self.body: bytes | None = None

    def fetch(self) -> None:
        """Lease a unit (waiting for the round to open) and download its version and data."""
        self.t0 = time.perf_counter()
        while True:
            reply = self.client.lease(wait=10)
            if reply.status == "done":
                raise SystemExit("the run finished before the benchmark's rounds did")
            if reply.lease is not None:
                break
        self.lease = reply.lease
        self.sent0, self.got0 = self.client.meter.sent, self.client.meter.received
        self.t1 = time.perf_counter()
        self.params = self.models.params(self.lease.model)
        self.samples = self.data.slice(self.lease.data)
        self.t2 = time.perf_counter()

    def compute(self) -> None:
        lease, params = self.lease, self.params
        if self.trainer is not None:
            with DEVICE_LOCK:  # both workers share the one device (vkblas's queue is one thread's at a time)
                result = self.trainer(lease, params, self.samples)
        else:
            update = {k: (self.rng.standard_normal(v.shape, np.float32) * 1e-4) for k, v in params.items()}
            tensors, meta = encode(update, lease.codec, lease.block)
            del update
            result = Result(tensors, meta, len(self.samples), 1.0, max(time.perf_counter() - self.t2, 1e-3))
        info = UploadMeta(lease_id=lease.lease_id, samples=result.samples, compute_s=result.compute_s, loss=1.0)
        self.body = result.payload(info)
        self.params = None  # the worker's copy of the weights: its cache keeps the shards
        self.t3 = time.perf_counter()

    def upload(self) -> None:
        got1 = self.client.meter.received
        self.client.upload(self.lease.lease_id, self.body, key=uuid.uuid4().hex)
        self.body = None
        t4 = time.perf_counter()
        self.log.append(dict(version=self.lease.base_version, wait_s=self.t1 - self.t0, download_s=self.t2 - self.t1,
                             compute_s=self.t3 - self.t2, upload_s=t4 - self.t3, down=got1 - self.got0,
                             up=self.client.meter.sent - self.sent0, start=self.t0, leased=self.t1))  # fmt: skip


def _rounds(url: str, workers: list[BenchWorker], rounds: int, phases: Phases) -> None:
    """The rounds in lockstep, each phase measured: every worker downloads, computes, then all upload at once;
    then the coordinator applies the round (its version moves on)."""
    from concurrent.futures import ThreadPoolExecutor

    def each(method: str) -> None:
        with ThreadPoolExecutor(len(workers)) as pool:
            list(pool.map(lambda w: getattr(w, method)(), workers))  # raises a worker's failure

    def applied(version: int) -> None:
        deadline = time.monotonic() + 600
        while httpx.get(f"{url}/v1/status").json()["version"] < version:
            if time.monotonic() > deadline:
                raise SystemExit(f"round {version - 1} was not applied in 600 s")
            time.sleep(0.1)

    for r in range(rounds):
        phases.measure(f"round {r}: serving shards (downloads)", lambda: each("fetch"))
        for w in workers:  # the workers' side, one after another (a 1.2B model's update is 5 GB a worker)
            w.compute()
        phases.measure(f"round {r}: uploads received + validated", lambda: each("upload"))
        phases.measure(f"round {r}: validate, apply, checkpoint", lambda r=r: applied(r + 1), makes_momentum=True)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--preset", choices=("cpu", "h200"), default="cpu")
    ap.add_argument("--model", default="gpt-50m")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--fetchers", type=int, default=4)
    ap.add_argument("--part-mib", type=float, default=16.0)
    ap.add_argument("--compute", choices=("synthetic", "real"), default=None)
    ap.add_argument("--device", default=None)
    ap.add_argument("--batch-size", type=int, default=4)
    ap.add_argument("--data", default=os.environ.get("VKBLAS_DATA"))
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    if args.preset == "h200":
        args.compute, args.device = args.compute or "real", args.device or "vulkan:0"
    args.compute, args.device = args.compute or "synthetic", args.device or "cpu"

    tmp = Path(tempfile.mkdtemp(prefix="vkblas-scale-"))
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    # more samples than the rounds use: the run does not finish (no final evaluation inside the last round)
    samples = (args.rounds + 1) * args.workers * args.batch_size
    serve = [sys.executable, "-m", "vkblas", "distributed", "serve", "shakespeare-char", "--model", args.model,
             "--db", str(tmp / "c.db"), "--store", str(tmp / "store"), "--port", str(port), "--algorithm", "diloco",
             "--codec", "int8", "--samples", str(samples), "--batch-size", str(args.batch_size), "--inner-steps", "1",
             "--quorum", "1.0", "--round-seconds", "3600", "--lease-seconds", "600", "--eval-seconds", "86400",
             "--validate-fraction", "0", "--trust-after", "0", "--shard-samples", "100000",
             # the first evaluation on all the host's cores: a 1.2B model's takes ~450 s on the default 2 threads
             "--eval-threads", str(os.cpu_count() or 2)]  # fmt: skip
    if args.data:
        serve += ["--data", args.data]
    src = str(Path(__file__).resolve().parents[1] / "src")
    env = {**os.environ, "PYTHONPATH": src + os.pathsep + os.environ.get("PYTHONPATH", "")}  # keep the caller's path
    log = open(tmp / "serve.log", "ab")  # noqa: SIM115 - closed below
    t_start = time.perf_counter()
    server = subprocess.Popen(serve, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    results: dict[str, Any] = {}
    try:
        while True:
            try:
                st = httpx.get(f"{url}/v1/status", timeout=5).json()
                if st["evaluations"]:  # the first evaluation (version 0) is done: the CPU is ours again
                    break
            except httpx.HTTPError:
                pass
            if server.poll() is not None or time.perf_counter() - t_start > 600:
                raise SystemExit(f"the coordinator did not start: {(tmp / 'serve.log').read_text()[-2000:]}")
            time.sleep(0.5)
        ready_s = time.perf_counter() - t_start
        from vkblas.distributed.protocol import ModelManifest

        manifest = ModelManifest.model_validate(httpx.get(f"{url}/v1/models/latest").json())
        model_bytes = sum(r.bytes for r in manifest.shards)
        phases = Phases(server.pid, model_bytes)
        print(f"{args.model}: {model_bytes / MB:.1f} MB in {len(manifest.shards)} shards; coordinator ready in "
              f"{ready_s:.1f} s (run created, first evaluation done), RSS {phases.ready / MiB:.0f} MiB",
              flush=True)  # fmt: skip
        rows = phases.measure(
            "broadcast: serving shards", lambda: broadcast(url, tmp / "store", manifest, tmp, args.fetchers)
        )
        for cache in tmp.glob("cache-*"):  # 4 copies of the model on disk: a 1.2B model's would fill it
            shutil.rmtree(cache, ignore_errors=True)
        results["broadcast"] = rows
        print_table(f"Broadcast of version 0 ({model_bytes / MB:.1f} MB, {len(manifest.shards)} shards), loopback",
                    ["fetch", "s", "MB received", "MB/s", "outcome"], rows)  # fmt: skip

        workers = [BenchWorker(url, f"w{i}", tmp / f"worker{i}", args) for i in range(args.workers)]
        _rounds(url, workers, args.rounds, phases)
        t_end = time.perf_counter()
        st = httpx.get(f"{url}/v1/status").json()
        round_rows = []
        for r in range(args.rounds):
            logs = [e for w in workers for e in w.log if e["version"] == r]
            starts = [e["start"] for w in workers for e in w.log if e["version"] == r + 1]
            end = min(starts) if starts else t_end
            begin = min(e["leased"] for e in logs)
            round_rows.append([r, f"{end - begin:.2f}", f"{max(e['download_s'] for e in logs):.2f}",
                               f"{max(e['upload_s'] for e in logs):.2f}",
                               f"{np.mean([e['down'] for e in logs]) / MB:.1f}",
                               f"{np.mean([e['up'] for e in logs]) / MB:.1f}"])  # fmt: skip
        results["rounds"] = round_rows
        print_table(
            f"Rounds: {args.workers} workers, int8 pseudo-gradients in parts of {args.part_mib:g} MiB, "
            f"compute {args.compute} on {args.device}",
            ["round", "wall s", "download s", "upload s", "MB down/worker", "MB up/worker"],
            round_rows,
        )
        results["memory"] = phases.rows
        print_table(
            f"Coordinator memory by phase (model {model_bytes / MiB:.0f} MiB; steady state: RSS when ready, plus the "
            "outer momentum once round 0 made it)",
            ["phase", "RSS before MiB", "peak RSS MiB", "peak above steady MiB", "model copies"],
            phases.rows,
        )
        worst = max(phases.copies, key=phases.copies.get)  # type: ignore[arg-type]
        summary = [
            ["model (fp32 weights)", f"{model_bytes / MB:.1f} MB"],
            ["version reached", st["version"]],
            ["largest peak above steady state", f"{phases.copies[worst]:.2f} model copies ({worst})"],
            ["coordinator CPU s per applied update", f"{st['apply_cpu_s_per_update']:.2f}"],
            ["updates applied / rejected", f"{st['accepted']} / {st['rejected']}"],
        ]
        results["summary"] = summary
        print_table("Coordinator", ["what", "value"], summary)
        print(f"machine: {platform.node()} {platform.machine()} {os.cpu_count()} cores; command: "
              f"{' '.join(sys.argv)}", flush=True)  # fmt: skip
        if args.json:
            Path(args.json).write_text(json.dumps(results, indent=2, default=str))
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        try:
            server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(server.pid, signal.SIGKILL)
        log.close()
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
