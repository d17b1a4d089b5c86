"""``vkblas distributed join``: donate a device to a run. The loop:

1. register (once) and read the run's description;
2. lease a unit; download the model shards and data shards it names that are not cached; compute on the device;
   upload the result (idempotency key, checksum); a thread sends heartbeats for every lease held meanwhile;
3. again, until the coordinator says the run is done (or ``max_units``).

``async`` runs are pipelined: the next unit is leased and its shards downloaded while this one computes, and the
upload runs in the background while the next one computes, so a fast device is not left waiting on round trips.
``sync``/``diloco`` are not (their next unit needs the next version, which needs this result).

A network failure is retried (with backoff) by the client; a coordinator that restarts is waited for, and the work
goes on with the same token; a coordinator that no longer knows the token (a new database) gets a new
registration. A banned or suspended worker stops, saying why. A lease the coordinator gave away meanwhile (it
expired) is dropped and the next one taken. ``Ctrl-C`` once: finish and upload the unit being computed, give back
a prefetched one, and stop; twice: give back everything now and stop.
"""

from __future__ import annotations

import signal
import sys
import threading
import time
import uuid
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tqdm import tqdm

from ...version import __version__
from ..protocol import Heartbeat, Lease, LeaseReply, UploadMeta
from ..shards import UnitSamples
from ..sizing import IdleClock
from .cache import DataCache, ModelCache
from .client import Client
from .compute import Trainer, device_class
from .errors import ServerError, WorkerError
from .fits import check_device_holds

LOST = ("lease-expired", "lease-finished", "unknown-lease", "unknown-shard")  # the unit is gone; take the next
REFUSED = ("banned", "suspended")  # the coordinator gives this worker no more work


@dataclass
class JoinOptions:
    server: str
    device: str = "cpu"
    name: str = ""
    cache: str | None = None
    data: str | None = None
    max_units: int | None = None
    retry_for: float = 300.0
    uplink_mbit: float | None = None
    error_feedback: bool = False
    delay_per_sample: float = 0.0
    progress: bool = True
    user_token: str | None = None  # credit the work to this user (POST /v1/users)
    ca_cert: str | None = None  # the coordinator's certificate (or its CA's), for HTTPS with a self-made one


@dataclass
class Job:
    lease: Lease
    params: dict[str, Any]
    data: UnitSamples


@dataclass
class Summary:
    units: int = 0
    samples: int = 0
    credit: int = 0
    lost: int = 0
    bytes_sent: int = 0
    bytes_received: int = 0
    wall_s: float = 0.0
    idle_s: float = 0.0
    stopped_by: str = "done"


class Heartbeats:
    """A thread that keeps every held lease alive."""

    def __init__(self, client: Client, report: Any) -> None:
        self.client, self.report = client, report
        self.leases: dict[str, float] = {}  # lease id -> heartbeat interval
        self.lock, self.stop = threading.Lock(), threading.Event()
        self.thread = threading.Thread(target=self._run, name="heartbeats", daemon=True)
        self.thread.start()

    def hold(self, lease: Lease) -> None:
        with self.lock:
            self.leases[lease.lease_id] = lease.heartbeat_seconds

    def drop(self, lease_id: str) -> None:
        with self.lock:
            self.leases.pop(lease_id, None)

    def _run(self) -> None:
        last: dict[str, float] = {}
        while not self.stop.wait(0.2):
            with self.lock:
                due = [
                    (k, iv) for k, iv in self.leases.items() if time.monotonic() - last.get(k, time.monotonic()) >= iv
                ]
                for k in self.leases:
                    last.setdefault(k, time.monotonic())
            for lease_id, interval in due:
                last[lease_id] = time.monotonic()
                try:
                    self.client.heartbeat(lease_id, self.report(), retry_for=interval)
                except ServerError as e:
                    if e.code in LOST:
                        self.drop(lease_id)
                except WorkerError:
                    pass  # the coordinator is unreachable for now; the main loop's calls will wait for it

    def close(self) -> None:
        self.stop.set()
        self.thread.join(timeout=5)


class Worker:
    def __init__(self, opts: JoinOptions, client: Client | None = None) -> None:
        self.opts = opts
        self.client = client or Client(
            opts.server, retry_for=opts.retry_for, uplink_mbit=opts.uplink_mbit, ca_cert=opts.ca_cert
        )
        self.name = opts.name or f"{opts.device}-{uuid.uuid4().hex[:6]}"
        self.clock = IdleClock()
        self.summary = Summary()
        self.stopping = threading.Event()
        self.held: set[str] = set()
        self.held_lock = threading.Lock()

    # ------------------------------------------------------------------ reports
    def report(self) -> Heartbeat:
        m = self.client.meter
        return Heartbeat(
            wall_s=self.clock.wall_s, idle_s=self.clock.idle_s, bytes_sent=m.sent, bytes_received=m.received
        )

    # ------------------------------------------------------------------ steps
    def _register(self) -> None:
        self.client.register(
            self.name, self.opts.device, __version__, user_token=self.opts.user_token,
            device_class=device_class(self.opts.device),
        )  # fmt: skip

    def _lease(self) -> LeaseReply:
        try:
            reply = self.client.lease()
        except ServerError as e:
            if e.code != "bad-token":
                raise
            tqdm.write(f"vkblas join: the coordinator does not know this worker ({e.message}); registering again")
            self._register()
            reply = self.client.lease()
        if reply.lease is not None:
            with self.held_lock:
                self.held.add(reply.lease.lease_id)
            self.beats.hold(reply.lease)
        self.summary.credit = max(self.summary.credit, reply.credit)
        return reply

    def _release(self, lease_id: str) -> None:
        self.beats.drop(lease_id)
        with self.held_lock:
            self.held.discard(lease_id)

    def _prepare(self) -> tuple[LeaseReply, Job | None]:
        """Lease a unit and fetch what it needs."""
        reply = self._lease()
        if reply.lease is None:
            return reply, None
        try:
            params = self.models.params(reply.lease.model)
            data = self.data.slice(reply.lease.data)
        except ServerError as e:
            if e.code not in LOST:
                raise
            self._give_back(reply.lease.lease_id)
            return LeaseReply(status="wait", retry_after_s=0.0, reason=str(e)), None
        return reply, Job(reply.lease, params, data)

    def _upload(self, job: Job, result: Any) -> None:
        lease = job.lease
        info = UploadMeta(
            lease_id=lease.lease_id,
            samples=result.samples,
            compute_s=result.compute_s,
            loss=result.loss,
            **self.report().model_dump(),
        )
        try:
            reply = self.client.upload(lease.lease_id, result.payload(info), key=uuid.uuid4().hex)
            self.summary.credit = max(self.summary.credit, reply.credit)
            self.summary.units += 1
            self.summary.samples += result.samples
        except ServerError as e:
            if e.code not in LOST:
                raise
            self.summary.lost += 1
            tqdm.write(f"vkblas join: unit {lease.unit_id} was not taken ({e.code}: {e.message})", file=sys.stderr)
        finally:
            self._release(lease.lease_id)

    def _give_back(self, lease_id: str) -> None:
        try:
            self.client.give_back(lease_id)
        except WorkerError:
            pass  # it will expire by itself
        self._release(lease_id)

    # ------------------------------------------------------------------ the loop
    def run(self) -> Summary:
        opts, name = self.opts, self.name
        with self.clock.idle():
            self._register()
            info = self.client.run_info()
        cache = Path(opts.cache) if opts.cache else Path.home() / ".cache" / "vkblas" / "worker"
        cache = cache / info.run_id
        self.models, self.data = ModelCache(self.client, cache), DataCache(self.client, info, cache, opts.data)
        self.trainer = trainer = check_device_holds(
            lambda: Trainer(
                info, opts.device, error_feedback=opts.error_feedback, delay_per_sample=opts.delay_per_sample
            ),
            info,
            opts.device,
        )
        self.beats = Heartbeats(self.client, self.report)
        pipelined = info.algorithm == "async"
        bar = tqdm(desc=f"{name} ({opts.device})", unit="unit", disable=not opts.progress, dynamic_ncols=True)
        pool = ThreadPoolExecutor(2, thread_name_prefix="join")
        upload: Future | None = None
        nxt: Future | None = None
        try:
            while not self.stopping.is_set():
                if opts.max_units is not None and self.summary.units + (upload is not None) >= opts.max_units:
                    self.summary.stopped_by = "max-units"
                    break
                with self.clock.idle():
                    reply, job = nxt.result() if nxt is not None else self._prepare()
                    nxt = None
                if reply.status == "done":
                    break
                if job is None:
                    with self.clock.idle():
                        time.sleep(reply.retry_after_s)
                    continue
                if pipelined and not self.stopping.is_set():
                    nxt = pool.submit(self._prepare)
                result = trainer(job.lease, job.params, job.data)
                with self.clock.idle():
                    if upload is not None:
                        upload.result()
                    upload = pool.submit(self._upload, job, result)
                    if not pipelined:
                        upload.result()
                        upload = None
                rate = self.summary.samples / max(self.clock.wall_s - self.clock.idle_s, 1e-9)
                bar.update(1)
                bar.set_postfix(samples_s=f"{rate:,.0f}", credit=f"{self.summary.credit:,}", refresh=False)
            if self.stopping.is_set():
                self.summary.stopped_by = "ctrl-c"
            if upload is not None:
                upload.result()
                upload = None
        except KeyboardInterrupt:
            self.summary.stopped_by = "ctrl-c twice"
        except ServerError as e:
            if e.code not in REFUSED:
                raise
            self.summary.stopped_by = e.code
            tqdm.write(f"vkblas join: {e.message}", file=sys.stderr)
        finally:
            if nxt is not None:
                try:
                    nxt.result(timeout=30)
                except Exception:  # noqa: BLE001 - whatever it was, the lease below is given back or expires
                    pass
            with self.held_lock:
                left = list(self.held)
            for lease_id in left:
                self._give_back(lease_id)
            pool.shutdown(wait=False, cancel_futures=True)
            self.beats.close()
            bar.close()
            m = self.client.meter
            s = self.summary
            s.bytes_sent, s.bytes_received, s.wall_s, s.idle_s = (
                m.sent,
                m.received,
                self.clock.wall_s,
                self.clock.idle_s,
            )
            self.client.close()
        return self.summary


def join(opts: JoinOptions) -> Summary:
    """Run a worker until the run is done; the first Ctrl-C finishes the current unit, the second stops at once."""
    worker = Worker(opts)
    presses = []

    def on_sigint(signum: int, frame: Any) -> None:
        presses.append(time.monotonic())
        if len(presses) == 1:
            worker.stopping.set()
            tqdm.write(
                "vkblas join: finishing the current unit (Ctrl-C again to give it back and quit)", file=sys.stderr
            )
        else:
            raise KeyboardInterrupt

    previous = (
        signal.signal(signal.SIGINT, on_sigint) if threading.current_thread() is threading.main_thread() else None
    )
    try:
        return worker.run()
    finally:
        if previous is not None:
            signal.signal(signal.SIGINT, previous)
