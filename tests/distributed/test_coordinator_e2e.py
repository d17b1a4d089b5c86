"""End to end over loopback: a real ``vkblas distributed serve`` (uvicorn) and ``vkblas distributed join``
processes, on SQLite and PostgreSQL: a full run, Ctrl-C, workers killed with ``kill -9``, the coordinator killed
with ``kill -9`` and restarted, a slowed worker, two uvicorn processes on one PostgreSQL, an interrupted download.

Every test bounds its waiting (generous timeouts: the machine may be loaded) and asserts no speed."""

from __future__ import annotations

import hashlib
import json
import re
import signal
import subprocess
import sys

import httpx
import pytest
from sqlalchemy import func, select

from vkblas.distributed.coordinator.config import normalise_db_url
from vkblas.distributed.coordinator.db import Database
from vkblas.distributed.coordinator.models import Lease, Unit, Update, Worker

from .conftest import REPO, Procs, _env, needs_data

pytestmark = [needs_data, pytest.mark.timeout(600)]
RUN = ["--algorithm", "async", "--limit", "2000", "--shard-samples", "500", "--batch-size", "64",
       "--lease-seconds", "4", "--eval-seconds", "1", "--unit-seconds", "0.5"]  # fmt: skip
# validation by redundancy needs two live workers: a run that kills one of two, or measures unit sizes per worker
# (a copy has its first copy's size), turns it off
UNCHECKED = ["--validate-fraction", "0", "--trust-after", "0"]


def finished(st: dict) -> bool:
    return st["state"] == "finished"


def assert_exactly_once(db_url: str) -> None:
    """Every result recorded was decided once; in async each applied one made exactly one version."""
    db = Database(normalise_db_url(db_url))
    try:
        with db.read_session() as s:
            statuses = dict(s.execute(select(Update.status, func.count()).group_by(Update.status)).all())
            applied = s.scalars(select(Update.applied_version).where(Update.status == "applied")).all()
            applied_samples = s.scalar(select(func.sum(Update.samples)).where(Update.status == "applied"))
            lease_results = s.scalar(select(func.count(func.distinct(Update.lease_id))))
            uploads = s.scalar(select(func.count()).select_from(Update))
    finally:
        db.dispose()
    assert statuses.get("recorded", 0) == statuses.get("held", 0) == 0
    assert statuses.get("invalid", 0) == 0, statuses  # honest workers never disagree beyond the tolerance
    assert lease_results == uploads  # one result per lease
    assert sorted(applied) == list(range(1, len(applied) + 1)), "an update applied twice or a version skipped"
    return applied_samples


def test_full_run_status_and_ctrl_c(db_url: str, procs: Procs):
    procs.serve(db_url, *RUN, "--epochs", "2")
    workers = [procs.join(f"w{i}") for i in range(2)]
    quitter = procs.join("quitter", "--max-units", "1000")
    procs.wait(lambda st: any(w["name"] == "quitter" and w["units_done"] >= 1 for w in st["workers"]))
    quitter.send_signal(signal.SIGINT)  # once: finish the unit, give back a prefetched one, stop
    assert quitter.wait(timeout=120) == 130, quitter.log.read_text()[-2000:]  # type: ignore[attr-defined]
    db = Database(normalise_db_url(db_url))
    try:  # it left nothing behind: its units were uploaded or given back, none waits to expire
        with db.read_session() as s:
            left = s.scalars(
                select(Lease.status).join(Worker, Worker.id == Lease.worker_id).where(Worker.name == "quitter")
            ).all()
    finally:
        db.dispose()
    assert left and set(left) <= {"done", "returned"}, left
    st = procs.wait(finished)
    for p in workers:
        assert p.wait(timeout=120) == 0, p.log.read_text()[-2000:]  # type: ignore[attr-defined]
    assert st["samples_leased"] == st["samples_total"] == 4000
    assert st["test"]["accuracy"] > 0.5 and st["accepted"] > 0 and st["rejected"] == 0
    applied = assert_exactly_once(db_url)
    assert applied == st["samples_applied"]
    assert st["validation"].get("duplicate", 0) > 0  # new workers' units were computed twice and agreed
    cli = subprocess.run(
        [sys.executable, "-m", "vkblas", "distributed", "status", "--server", procs.url, "--json"],
        capture_output=True, text=True, env=_env(), timeout=60, cwd=REPO,
    )  # fmt: skip
    assert cli.returncode == 0 and json.loads(cli.stdout)["state"] == "finished"
    table = subprocess.run(
        [sys.executable, "-m", "vkblas", "distributed", "status", "--server", procs.url],
        capture_output=True, text=True, env=_env(), timeout=60,
    )  # fmt: skip
    assert "quitter" in table.stdout and "test accuracy" in table.stdout

    # an interrupted download from the real server resumes where it broke, and is verified
    ref = httpx.get(f"{procs.url}/v1/run").json()["data_shards"][1]
    from vkblas.distributed.worker.client import Client

    cuts = []

    class CutOnce(httpx.HTTPTransport):
        def handle_request(self, request: httpx.Request) -> httpx.Response:
            r = super().handle_request(request)
            cuts.append(request.headers.get("range"))
            if len(cuts) > 1:
                return r

            class Broken(httpx.SyncByteStream):
                def __iter__(self):  # type: ignore[no-untyped-def]
                    got = 0
                    for chunk in r.stream:
                        yield chunk
                        got += len(chunk)
                        if got >= 2000:
                            raise httpx.ReadError("connection reset (test)")

                def close(self) -> None:
                    r.close()

            return httpx.Response(r.status_code, headers=r.headers, stream=Broken())

    path = Client(procs.url, transport=CutOnce(), retry_for=30).download(ref["sha256"], procs.tmp / "dl")
    assert hashlib.sha256(path.read_bytes()).hexdigest() == ref["sha256"]
    assert cuts[0] is None and cuts[1].startswith("bytes=") and cuts[1] != "bytes=0-"


def test_half_the_workers_killed(db_url: str, procs: Procs):
    procs.serve(db_url, *RUN, *UNCHECKED)
    keep, lost = procs.join("keep"), procs.join("lost")
    procs.wait(lambda st: any(w["name"] == "lost" and w["units_done"] >= 2 for w in st["workers"]))
    procs.kill(lost)  # kill -9: its lease stops being heartbeaten and expires
    st = procs.wait(finished)
    assert keep.wait(timeout=120) == 0
    assert st["test"]["accuracy"] > 0.3 and st["samples_leased"] == 2000
    assert_exactly_once(db_url)


def test_coordinator_killed_and_restarted(db_url: str, procs: Procs):
    # no optimizer state after the first version's: the kill falls between two, and the restart replays every
    # update applied since from its payload (then records the state; later versions publish their weights alone)
    coordinator = procs.serve(db_url, *RUN, "--checkpoint-seconds", "3600")
    workers = [procs.join(f"w{i}") for i in range(2)]
    before = procs.wait(lambda st: st["samples_applied"] >= 600)
    procs.kill(coordinator)  # kill -9, mid-run
    again = procs.serve(db_url, *RUN, "--checkpoint-seconds", "3600", log="serve-again.log")  # resumes
    st = procs.wait(finished)
    for p in workers:  # they waited for it and carried on with their tokens
        assert p.wait(timeout=120) == 0, p.log.read_text()[-2000:]  # type: ignore[attr-defined]
    assert st["version"] > before["version"] and st["samples_leased"] == 2000
    applied = assert_exactly_once(db_url)
    assert applied == st["samples_applied"]
    assert {w["name"] for w in st["workers"]} == {"w0", "w1"}
    log = again.log.read_text()  # type: ignore[attr-defined]
    replayed = re.search(r"replayed (\d+) updates to version (\d+)", log)
    assert replayed and int(replayed[1]) >= 600 // 64 and "differs" not in log, log[-3000:]


def test_slow_worker_gets_smaller_units(db_url: str, procs: Procs):
    procs.serve(db_url, *RUN, *UNCHECKED, "--algorithm", "diloco", "--inner-steps", "8", "--batch-size", "32",
                "--epochs", "2", "--unit-seconds", "1")  # fmt: skip
    procs.join("fast")
    procs.join("slow", "--delay-per-sample", "0.004")  # at most 250 samples/s: 1 s of it is < 8 steps of 32
    procs.wait(finished)
    db = Database(normalise_db_url(db_url))
    try:
        with db.read_session() as s:
            rows = s.execute(
                select(Worker.name, Lease.samples).join(Worker, Worker.id == Lease.worker_id).order_by(Lease.issued_at)
            ).all()
    finally:
        db.dispose()
    sizes: dict[str, list[int]] = {}
    for name, samples in rows:
        sizes.setdefault(name, []).append(samples)
    later = {k: v[2:] for k, v in sizes.items()}  # after calibration
    assert later["slow"] and later["fast"], sizes
    assert max(later["slow"]) < max(later["fast"]) and sum(later["slow"]) / len(later["slow"]) < 8 * 32, sizes


def test_two_uvicorn_processes_on_postgresql(pg_url: str, procs: Procs):
    procs.serve(pg_url, *RUN, workers=2)
    workers = [procs.join(f"w{i}") for i in range(2)]
    st = procs.wait(finished)
    for p in workers:
        assert p.wait(timeout=120) == 0
    assert st["test"]["accuracy"] > 0.3
    applied = assert_exactly_once(pg_url)
    assert applied == st["samples_applied"]


def test_diloco_overlap_survives_kills(db_url: str, procs: Procs):
    """Overlapped DiLoCo rounds under kill -9 of a worker and of the coordinator: units leased ahead join the next
    round (staleness 1), every sample is handed out once, every result decided once, the run finishes. On
    PostgreSQL by two serving processes: whichever answers a worker reads the same rounds."""
    args = [*RUN, *UNCHECKED, "--algorithm", "diloco", "--overlap", "--inner-steps", "4", "--epochs", "4"]
    processes = 2 if db_url.startswith("postgres") else 1
    coordinator = procs.serve(db_url, *args, workers=processes)
    # units of ~0.5 s (at most 256 samples): long beside the round trips, so one worker's unit is often in while
    # the other's still computes, and it leases ahead
    keep, lost = (procs.join(name, "--delay-per-sample", "0.002") for name in ("keep", "lost"))
    procs.wait(lambda st: any(w["name"] == "lost" and w["units_done"] >= 4 for w in st["workers"]))
    procs.kill(lost)  # its lease (perhaps one leased ahead) expires and its unit goes to the other
    before = procs.wait(lambda st: st["version"] >= 3)
    procs.kill(coordinator)
    procs.serve(db_url, *args, workers=processes, log="serve-again.log")  # resumes from the database and store
    st = procs.wait(finished)
    assert keep.wait(timeout=120) == 0
    assert st["version"] > before["version"] and st["samples_leased"] == st["samples_total"] == 8000
    db = Database(normalise_db_url(db_url))
    try:
        with db.read_session() as s:
            statuses = dict(s.execute(select(Update.status, func.count()).group_by(Update.status)).all())
            late = s.scalar(select(func.count()).where(Update.status == "applied", Update.staleness == 1))
            carved = s.scalar(select(func.sum(Unit.samples)))
            uploads, leases = (
                s.scalar(select(func.count()).select_from(Update)),
                s.scalar(select(func.count(func.distinct(Update.lease_id)))),
            )
    finally:
        db.dispose()
    assert statuses.get("recorded", 0) == statuses.get("held", 0) == statuses.get("invalid", 0) == 0, statuses
    assert carved == 8000 and uploads == leases  # no sample carved twice or skipped; one result per lease
    assert late > 0, statuses  # units leased ahead were applied one round late
    assert st["test"]["accuracy"] > 0.5
