"""Load on one coordinator: many simulated workers on loopback against a real ``vkblas distributed serve``
(BENCHMARKS.md, "Public coordinator: load").

Each simulated worker (an asyncio task; all share one httpx connection pool) registers, then loops: lease a unit
(``wait=0``; told to wait, it long-polls with ``wait=10``), "computes" for ``--compute-s`` seconds (jittered)
while sending heartbeats at the lease's interval, and uploads a result of the real size (the MNIST MLP's update,
fp32 by default: 2.1 MB) with checksum and idempotency key. Results are a function of the unit (so two copies of one
unit agree, as honest workers' do) and differ between units. Each worker has an address of its own through the
coordinator's trusted proxy (``X-Forwarded-For`` from 127.0.0.1), so the default per-address rate limits apply as
they would to volunteers. The coordinator runs with its defaults (validation on: new workers' units are computed
twice).

Reported per endpoint: requests, errors (non-2xx other than the protocol's expected 409s; a dropped connection
counts as one and is retried), p50 / p99 / max latency (client side, from the request's start to its whole
answer), p50 / p99 of the coordinator's own time (its ``Server-Timing`` header: from the request's headers parsed
to its answer's start, so without the load generator's and the kernel's queueing), and afterwards, from the
database: every accepted upload recorded once and every applied update applied exactly once (async: each made one
version).

    PYTHONPATH=src python benchmarks/coordinator_load.py --workers 200 --seconds 60 --json out.json
    PYTHONPATH=src python benchmarks/coordinator_load.py --db postgresql://postgres@127.0.0.1:55432/postgres
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections import defaultdict
from pathlib import Path
from typing import Any

import httpx
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import print_table  # noqa: E402
from coordinator import cpu_seconds, free_port  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
EXPECTED = {409}  # lease-expired / lease-finished: the protocol's own answers under churn, not failures


def tree_cpu(pid: int) -> float:
    """CPU seconds of a process and its live descendants (uvicorn's worker processes)."""
    children = [int(c) for c in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    total = cpu_seconds(pid)
    for c in children:
        try:
            total += tree_cpu(c)
        except (FileNotFoundError, ProcessLookupError):
            pass
    return total


class Stats:
    def __init__(self) -> None:
        self.lat: dict[str, list[float]] = defaultdict(list)
        self.server: dict[str, list[float]] = defaultdict(list)  # the coordinator's own time (Server-Timing)
        self.errors: dict[str, int] = defaultdict(int)
        self.codes: dict[str, dict[int, int]] = defaultdict(lambda: defaultdict(int))
        self.accepted = 0
        self.refusals: dict[str, int] = defaultdict(int)  # "endpoint: status error-code" -> count

    def add(self, what: str, seconds: float, status: int) -> None:
        self.lat[what].append(seconds)
        self.codes[what][status] += 1
        if status == 0 or (status >= 400 and status not in EXPECTED):
            self.errors[what] += 1


class Sim:
    def __init__(self, args: argparse.Namespace, url: str, signature: dict[str, tuple]) -> None:
        self.args, self.url, self.stats = args, url, Stats()
        self.base = {k: np.random.default_rng(1).standard_normal(shape).astype(np.float32) * 1e-3
                     for k, shape in signature.items()}  # fmt: skip
        self.stop_at = 0.0

    async def call(self, client: httpx.AsyncClient, what: str, method: str, path: str, **kw: Any) -> httpx.Response:
        # a dropped connection counts as an error (status 0) and is retried, as the worker's client does
        for attempt in range(4):
            t0 = time.perf_counter()
            try:
                r = await client.request(method, path, **kw)
            except httpx.TransportError:
                self.stats.add(what, time.perf_counter() - t0, 0)
                if attempt == 3:
                    raise
                await asyncio.sleep(0.5)
                continue
            self.stats.add(what, time.perf_counter() - t0, r.status_code)
            timing = r.headers.get("server-timing", "")
            if timing.startswith("app;dur="):
                self.stats.server[what].append(float(timing[8:]) / 1000)
            if r.status_code >= 400:
                try:
                    self.stats.refusals[f"{what}: {r.status_code} {r.json()['error']['code']}"] += 1
                except (ValueError, KeyError, TypeError):
                    self.stats.refusals[f"{what}: {r.status_code}"] += 1
            return r
        raise AssertionError("unreachable")

    def payload(self, lease: dict) -> bytes:
        from vkblas.distributed.codec import encode, to_payload
        from vkblas.distributed.protocol import UPLOAD_META_KEY

        factor = np.float32(1 + 1e-6 * lease["unit_id"])  # distinct per unit: equal bytes would be a replay
        tensors, meta = encode({k: v * factor for k, v in self.base.items()}, lease["codec"], lease["block"])
        info = {"lease_id": lease["lease_id"], "samples": lease["data"]["samples"], "compute_s": self.args.compute_s,
                "loss": 2.0}  # fmt: skip
        return to_payload(tensors, {**meta, UPLOAD_META_KEY: json.dumps(info)})

    async def worker(self, client: httpx.AsyncClient, i: int) -> None:
        fwd = {"x-forwarded-for": f"10.{i // 250}.{i % 250}.{1 + i % 7}"}
        await asyncio.sleep(random.random() * 2)  # they do not all start in the same millisecond
        r = await self.call(client, "register", "POST", "/v1/workers", json={"name": f"sim{i}", "device": "sim"},
                            headers=fwd)  # fmt: skip
        if r.status_code != 200:
            return
        auth = {**fwd, "authorization": f"Bearer {r.json()['token']}"}
        while time.monotonic() < self.stop_at:
            r = await self.call(client, "lease", "POST", "/v1/leases", headers=auth)
            if r.status_code == 200 and r.json()["status"] == "wait":
                r = await self.call(client, "lease (long poll)", "POST", "/v1/leases", params={"wait": 10},
                                    headers=auth, timeout=30)  # fmt: skip
            if r.status_code == 429:
                await asyncio.sleep(float(r.headers.get("retry-after", "1")))
                continue
            if r.status_code != 200:
                await asyncio.sleep(1)
                continue
            reply = r.json()
            if reply["status"] == "done":
                return
            if reply["status"] != "work":
                continue
            lease = reply["lease"]
            compute = self.args.compute_s * (0.5 + random.random())
            end = time.monotonic() + compute
            while (left := end - time.monotonic()) > 0:
                await asyncio.sleep(min(left, lease["heartbeat_seconds"]))
                if time.monotonic() < end:
                    await self.call(client, "heartbeat", "POST", f"/v1/leases/{lease['lease_id']}/heartbeat",
                                    json={"wall_s": 1.0}, headers=auth)  # fmt: skip
            body = await asyncio.to_thread(self.payload, lease)
            digest = hashlib.sha256(body).hexdigest()
            headers = {**auth, "idempotency-key": uuid.uuid4().hex, "x-content-sha256": digest,
                       "content-type": "application/octet-stream"}  # fmt: skip
            r = await self.call(client, "upload", "PUT", f"/v1/leases/{lease['lease_id']}/result", content=body,
                                headers=headers, timeout=60)  # fmt: skip
            if r.status_code == 200:
                self.stats.accepted += 1

    async def viewer(self, client: httpx.AsyncClient) -> None:
        """Someone watching the dashboard."""
        while time.monotonic() < self.stop_at:
            await self.call(client, "dashboard", "GET", "/v1/dashboard")
            await asyncio.sleep(2)

    async def run(self) -> None:
        limits = httpx.Limits(max_connections=self.args.workers + 20, max_keepalive_connections=self.args.workers + 20)
        async with httpx.AsyncClient(base_url=self.url, limits=limits, timeout=30) as client:
            self.stop_at = time.monotonic() + self.args.seconds
            await asyncio.gather(self.viewer(client), *(self.worker(client, i) for i in range(self.args.workers)))


def _exactly_once(db_url: str) -> dict[str, Any]:
    from sqlalchemy import func, select

    from vkblas.distributed.coordinator.config import normalise_db_url
    from vkblas.distributed.coordinator.db import Database
    from vkblas.distributed.coordinator.models import Update

    db = Database(normalise_db_url(db_url))
    try:
        with db.read_session() as s:
            statuses = dict(s.execute(select(Update.status, func.count()).group_by(Update.status)).all())
            versions = s.scalars(select(Update.applied_version).where(Update.status == "applied")).all()
            per_lease = s.scalar(select(func.count(func.distinct(Update.lease_id))))
            rows = s.scalar(select(func.count()).select_from(Update))
    finally:
        db.dispose()
    return {
        "statuses": statuses,
        "rows": rows,
        "one_result_per_lease": per_lease == rows,
        "applied_once": sorted(versions) == list(range(1, len(versions) + 1)),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--workers", type=int, default=200)
    ap.add_argument("--seconds", type=float, default=60.0, help="how long the workers keep leasing")
    ap.add_argument("--compute-s", type=float, default=8.0, help="mean simulated compute time of a unit")
    ap.add_argument("--db", default=None, help="postgresql://... (an admin URL: a database is made) or SQLite")
    ap.add_argument("--codec", default="fp32")
    ap.add_argument("--processes", type=int, default=1, help="the coordinator's uvicorn processes (serve --workers)")
    ap.add_argument("--data", default=os.environ.get("VKBLAS_DATA"))
    ap.add_argument("--json", default=None)
    args = ap.parse_args()

    tmp = Path(tempfile.mkdtemp(prefix="vkblas-load-"))
    db_url, pg_name = str(tmp / "c.db"), None
    if args.db and args.db.startswith("postgres"):
        import psycopg

        pg_name = f"vkblas_load_{uuid.uuid4().hex[:10]}"
        with psycopg.connect(args.db, autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{pg_name}"')
        db_url = f"{args.db.rsplit('/', 1)[0]}/{pg_name}"
    port = free_port()
    env = dict(os.environ, PYTHONPATH=str(REPO / "src") + os.pathsep + os.environ.get("PYTHONPATH", ""))
    if args.data:
        env["VKBLAS_DATA"] = args.data
    serve = [sys.executable, "-m", "vkblas", "distributed", "serve", "mnist", "--db", db_url, "--store",
             str(tmp / "store"), "--port", str(port), "--algorithm", "async", "--max-staleness", "1000",
             "--epochs", "100", "--lease-seconds", "20", "--eval-seconds", "30", "--codec", args.codec,
             "--trusted-proxy", "127.0.0.1", "--workers", str(args.processes)]  # fmt: skip
    log = open(tmp / "serve.log", "ab")  # noqa: SIM115 - closed below
    server = subprocess.Popen(serve, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 300
        while True:
            try:
                if httpx.get(f"{url}/healthz", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if server.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"coordinator did not start: {(tmp / 'serve.log').read_text()[-2000:]}")
            time.sleep(0.3)
        from vkblas.distributed.shards import parse_model_shard

        manifest = httpx.get(f"{url}/v1/models/latest").json()
        signature = {}
        for ref in manifest["shards"]:
            signature.update(
                {
                    k: v.shape
                    for k, v in parse_model_shard(httpx.get(f"{url}/v1/shards/{ref['sha256']}").content).items()
                }
            )
        sim = Sim(args, url, signature)
        cpu0, own0, t0 = tree_cpu(server.pid), time.process_time(), time.monotonic()
        asyncio.run(sim.run())
        wall, cpu = time.monotonic() - t0, tree_cpu(server.pid) - cpu0
        own = time.process_time() - own0  # the load generator's share of the same 2 cores
        for _ in range(120):  # let the applier drain what was recorded
            st = httpx.get(f"{url}/v1/status", timeout=30).json()
            if st["validation"].get("recorded", 0) == 0:
                break
            time.sleep(0.5)
        os.killpg(server.pid, signal.SIGTERM)
        server.wait(timeout=60)
        check = _exactly_once(db_url)
    finally:
        try:
            os.killpg(server.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        log.close()
        if pg_name:
            import psycopg

            with psycopg.connect(args.db, autocommit=True) as conn:
                conn.execute(f'DROP DATABASE IF EXISTS "{pg_name}" WITH (FORCE)')
        shutil.rmtree(tmp, ignore_errors=True)

    rows = []
    for what, lat in sorted(sim.stats.lat.items()):
        a = np.array(lat) * 1000
        srv = np.array(sim.stats.server[what] or [np.nan]) * 1000
        rows.append((what, len(a), sim.stats.errors[what], f"{np.percentile(a, 50):.1f}", f"{np.percentile(a, 99):.1f}",
                     f"{a.max():.1f}", f"{np.percentile(srv, 50):.1f}", f"{np.percentile(srv, 99):.1f}",
                     dict(sim.stats.codes[what])))  # fmt: skip
    kind = ("PostgreSQL" if pg_name else "SQLite") + (f", {args.processes} processes" if args.processes > 1 else "")
    print_table(f"{args.workers} workers, {kind}, {wall:.0f} s, coordinator CPU {cpu:.0f} s ({100 * cpu / wall:.0f} %)",
                ("endpoint", "requests", "errors", "p50 ms", "p99 ms", "max ms", "server p50", "server p99",
                 "statuses"), rows)  # fmt: skip
    requests = sum(len(v) for v in sim.stats.lat.values())
    print(f"coordinator CPU per request {1000 * cpu / max(1, requests):.1f} ms (the applier's work included);"
          f" load generator CPU {own:.0f} s; load average {os.getloadavg()[0]:.1f}")  # fmt: skip
    print(f"refusals: {dict(sim.stats.refusals)}")
    print(f"uploads accepted {sim.stats.accepted}; database: {check}")
    if args.json:
        out = {"db": kind, "workers": args.workers, "wall_s": wall, "cpu_s": cpu, "own_cpu_s": own,
               "rows": [list(map(str, r)) for r in rows], "check": check, "accepted": sim.stats.accepted,
               "refusals": sim.stats.refusals}  # fmt: skip
        Path(args.json).write_text(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
