"""What each request does to the coordinator's state: keyword-only functions taking a session (the transaction is
the caller's). Errors are :class:`ApiError` with a code and a message naming the values.

Concurrency: leasing reads and moves the run's data cursor, so it locks the run row (``FOR UPDATE`` on
PostgreSQL; on SQLite every writer holds the database lock from ``BEGIN IMMEDIATE``). Uploads and heartbeats lock
their lease row, so an upload and the expiry of its lease cannot both win.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import math
import secrets

from sqlalchemy import func, select, update
from sqlalchemy.orm import Session

from ..protocol import DataSlice, Heartbeat, LeaseReply, RegisterReply, UploadMeta, UploadReply, WorkerSelf
from ..protocol import Lease as LeaseMsg
from ..shards import shard_order, unit_seed
from ..sizing import RateMeter, batch_for_time
from .config import RunSpec
from .errors import ApiError
from .models import RUN_ID, Lease, Run, Unit, Update, Worker
from .runs import data_manifest, manifest_of

MAX_ACTIVE_ASYNC = 2  # async: a worker may hold two leases (one computing, one prefetched)
WAIT_S = 0.1  # a round closes within the applier's tick; asking again soon keeps workers from idling
MIN_GRADIENT_SAMPLES = 8


def _hash_secret(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


# ------------------------------------------------------------------------------------------------ workers
def register(s: Session, *, name: str, device: str, now: float) -> RegisterReply:
    secret = secrets.token_urlsafe(32)
    w = Worker(
        name=name,
        device=device,
        token_hash=_hash_secret(secret),
        created_at=now,
        last_seen=now,
        rate=json.dumps(RateMeter().state()),
        samples_per_s=0.0,
        wall_s=0.0,
        idle_s=0.0,
        bytes_sent=0,
        bytes_received=0,
        units_done=0,
        credit=0,
        accepted=0,
        stale=0,
        rejected=0,
    )
    s.add(w)
    s.flush()
    return RegisterReply(worker_id=w.id, token=f"{w.id}.{secret}")


def authenticate(s: Session, *, authorization: str | None) -> Worker:
    """The worker whose token is in the ``Authorization: Bearer <id>.<secret>`` header."""
    if not authorization:
        raise ApiError("missing-token", "this endpoint needs a worker token: 'Authorization: Bearer <token>'")
    scheme, _, token = authorization.partition(" ")
    wid, _, secret = token.strip().partition(".")
    if scheme.lower() != "bearer" or not (wid.isdigit() and len(wid) <= 15) or not secret or len(token) > 200:
        raise ApiError("bad-token", "the Authorization header must be 'Bearer <worker_id>.<secret>'")
    w = s.get(Worker, int(wid))
    # the comparison of hashes is constant-time; an unknown id compares against a dummy so both take as long
    stored = w.token_hash if w is not None else "0" * 64
    if not hmac.compare_digest(stored, _hash_secret(secret)) or w is None:
        raise ApiError("bad-token", "unknown or revoked worker token (register again)")
    return w


def worker_self(w: Worker) -> WorkerSelf:
    return WorkerSelf(
        worker_id=w.id,
        name=w.name,
        device=w.device,
        units_done=w.units_done,
        credit=w.credit,
        accepted=w.accepted,
        stale=w.stale,
        rejected=w.rejected,
    )


def _report(w: Worker, hb: Heartbeat, now: float) -> None:
    w.last_seen = now
    w.wall_s, w.idle_s = max(w.wall_s, hb.wall_s), max(0.0, hb.idle_s)
    w.bytes_sent, w.bytes_received = max(w.bytes_sent, hb.bytes_sent), max(w.bytes_received, hb.bytes_received)


# ------------------------------------------------------------------------------------------------ leases
def expire_leases(s: Session, *, now: float) -> int:
    """Leases whose heartbeats stopped: expired, and their units open again for someone else."""
    ids = s.scalars(
        select(Lease.id).where(Lease.status == "active", Lease.expires_at < now).with_for_update(skip_locked=True)
    ).all()
    if not ids:
        return 0
    units = select(Lease.unit_id).where(Lease.id.in_(ids))
    s.execute(update(Unit).where(Unit.id.in_(units), Unit.status == "leased").values(status="open"))
    s.execute(update(Lease).where(Lease.id.in_(ids)).values(status="expired"))
    return len(ids)


def unit_samples(spec: RunSpec, rate: float | None) -> int:
    """How many samples a worker of speed ``rate`` gets: about ``unit_seconds`` of work, one batch while its speed
    is unknown. A gradient unit (sync/async) is capped at one batch (``batch_size``): a larger gradient batch would
    change the optimisation, not just its speed. A DiLoCo unit is a whole number of inner steps, at most
    ``inner_steps``."""
    b = spec.batch_size
    if spec.algorithm == "diloco":
        return batch_for_time(rate, spec.unit_seconds, minimum=b, maximum=b * spec.inner_steps, multiple=b)
    if rate is None:
        return b
    return batch_for_time(rate, spec.unit_seconds, minimum=min(MIN_GRADIENT_SAMPLES, b), maximum=b)


def _carve(s: Session, run: Run, spec: RunSpec, n: int) -> Unit | None:
    """The next ``n`` samples of the data order (fewer at a shard's end or the run's end) as a new unit."""
    left = run.samples_total - run.samples_leased
    if left <= 0:
        return None
    shards = data_manifest(run)
    order = shard_order(spec.seed, run.cursor_epoch, len(shards))
    shard = order[run.cursor_pos]
    take = min(n, shards[shard].samples - run.cursor_offset, left)
    unit = Unit(
        epoch=run.cursor_epoch,
        shard=shard,
        seed=unit_seed(spec.seed, run.cursor_epoch, shard),
        offset=run.cursor_offset,
        samples=take,
        status="open",
        attempts=0,
    )
    s.add(unit)
    run.samples_leased += take
    run.cursor_offset += take
    if run.cursor_offset >= shards[shard].samples:
        run.cursor_offset, run.cursor_pos = 0, run.cursor_pos + 1
        if run.cursor_pos >= len(shards):
            run.cursor_pos, run.cursor_epoch = 0, run.cursor_epoch + 1
    s.flush()
    return unit


def lease(s: Session, *, worker: Worker, spec: RunSpec, now: float) -> LeaseReply:
    """A unit of work for ``worker``, or why not now (``wait``) or never (``done``)."""
    run = s.get(Run, RUN_ID, with_for_update=True)
    assert run is not None
    expire_leases(s, now=now)
    worker.last_seen = now
    if run.state == "finished":
        return LeaseReply(status="done", reason="the run is finished", credit=worker.credit)
    mine = select(func.count()).select_from(Lease).where(Lease.worker_id == worker.id)
    if spec.algorithm == "async":
        if s.scalar(mine.where(Lease.status == "active")) >= MAX_ACTIVE_ASYNC:
            return _wait(worker, f"worker already holds {MAX_ACTIVE_ASYNC} active leases")
        # a unit handed out now is applied after everything in flight: do not make work the staleness bound will
        # throw away (prime-rl's rule: no episode older than the bound is produced, rather than dropped)
        in_flight = s.scalar(select(func.count()).select_from(Lease).where(Lease.status == "active"))
        in_flight += s.scalar(select(func.count()).select_from(Update).where(Update.status == "recorded"))
        if in_flight > spec.staleness_bound:
            return _wait(
                worker, f"{in_flight} results in flight; more would exceed --max-staleness {spec.staleness_bound}"
            )
    elif s.scalar(mine.where(Lease.base_version == run.version, Lease.status.in_(("active", "done")))):
        return _wait(worker, f"round {run.version} is waiting for the others' results")
    meter = RateMeter.from_state(json.loads(worker.rate))
    unit = s.scalars(select(Unit).where(Unit.status == "open").order_by(Unit.id).limit(1)).first()
    if unit is None:
        unit = _carve(s, run, spec, unit_samples(spec, meter.rate))
    if unit is None:
        return _wait(worker, "every unit of the run is out; waiting for the last results")
    unit.status, unit.attempts = "leased", unit.attempts + 1
    row = Lease(
        id=secrets.token_hex(16),
        unit_id=unit.id,
        worker_id=worker.id,
        base_version=run.version,
        samples=unit.samples,
        issued_at=now,
        expires_at=now + spec.lease_seconds,
        status="active",
    )
    s.add(row)
    diloco = spec.algorithm == "diloco"
    msg = LeaseMsg(
        lease_id=row.id,
        unit_id=unit.id,
        base_version=run.version,
        model=manifest_of(s, run.version),
        data=DataSlice(shard=unit.shard, seed=unit.seed, offset=unit.offset, samples=unit.samples),
        batch_size=spec.batch_size,
        kind="inner-steps" if diloco else "gradient",
        lr=current_lr(spec, run.samples_applied, run.samples_total),
        seed=(unit.seed + unit.attempts) % (2**31),
        codec=spec.codec,
        block=spec.block,
        lease_seconds=spec.lease_seconds,
        heartbeat_seconds=max(0.5, spec.lease_seconds / 4),
    )
    return LeaseReply(status="work", lease=msg, credit=worker.credit)


def _wait(worker: Worker, reason: str) -> LeaseReply:
    return LeaseReply(status="wait", retry_after_s=WAIT_S, reason=reason, credit=worker.credit)


def current_lr(spec: RunSpec, applied: int, total: int) -> float:
    """The learning rate after ``applied`` of ``total`` samples: ``vkblas train``'s cosine decay, driven by samples
    instead of epochs (the inner rate for DiLoCo; the outer rate stays constant, as published)."""
    frac = min(1.0, applied / total) if total else 1.0
    return spec.learning_rate * 0.5 * (1 + math.cos(math.pi * frac))


def own_lease(s: Session, *, worker: Worker, lease_id: str, now: float, lock: bool = True) -> Lease:
    """``worker``'s active lease ``lease_id`` (locked for this transaction), or the error saying why not."""
    row = s.get(Lease, lease_id, with_for_update=lock) if len(lease_id) <= 32 else None
    if row is None:
        raise ApiError("unknown-lease", f"no lease {lease_id[:40]!r}")
    if row.worker_id != worker.id:
        raise ApiError("not-your-lease", f"lease {lease_id} belongs to another worker")
    if row.status == "active" and row.expires_at < now:
        raise ApiError("lease-expired", f"lease {lease_id} expired {now - row.expires_at:.1f} s ago (no heartbeat)")
    if row.status == "expired":
        raise ApiError("lease-expired", f"lease {lease_id} expired (no heartbeat in time); its unit went to another")
    if row.status != "active":
        raise ApiError("lease-finished", f"lease {lease_id} is already {row.status}")
    return row


def heartbeat(s: Session, *, worker: Worker, lease_id: str, hb: Heartbeat, spec: RunSpec, now: float) -> float:
    row = own_lease(s, worker=worker, lease_id=lease_id, now=now)
    row.expires_at = now + spec.lease_seconds
    _report(worker, hb, now)
    return spec.lease_seconds


def return_lease(s: Session, *, worker: Worker, lease_id: str, now: float) -> None:
    """The worker gives the unit back (it is stopping): the unit is open again at once."""
    row = own_lease(s, worker=worker, lease_id=lease_id, now=now)
    row.status = "returned"
    s.execute(update(Unit).where(Unit.id == row.unit_id).values(status="open"))


# ------------------------------------------------------------------------------------------------ uploads
def find_upload(s: Session, *, worker: Worker, key: str) -> Update | None:
    return s.scalars(select(Update).where(Update.worker_id == worker.id, Update.idempotency_key == key)).first()


def upload_reply(u: Update, worker: Worker) -> UploadReply:
    return UploadReply(update_id=u.seq, status="recorded", bytes=u.payload_bytes, credit=worker.credit)


def record_upload(
    s: Session,
    *,
    worker: Worker,
    lease_id: str,
    key: str,
    sha: str,
    nbytes: int,
    meta: UploadMeta,
    norm: float,
    now: float,
) -> Update:
    """Record a validated upload (its payload already in the store): the lease and its unit are done."""
    row = own_lease(s, worker=worker, lease_id=lease_id, now=now)
    if meta.samples != row.samples:
        raise ApiError(
            "invalid-payload", f"the upload reports {meta.samples} samples; lease {lease_id} has {row.samples}"
        )
    u = Update(
        lease_id=row.id,
        worker_id=worker.id,
        idempotency_key=key,
        payload_sha256=sha,
        payload_bytes=nbytes,
        base_version=row.base_version,
        samples=row.samples,
        compute_s=meta.compute_s,
        loss=meta.loss,
        norm=norm,
        created_at=now,
        status="recorded",
    )
    s.add(u)
    row.status = "done"
    s.execute(update(Unit).where(Unit.id == row.unit_id).values(status="done"))
    meter = RateMeter.from_state(json.loads(worker.rate))
    meter.observe(row.samples, meta.compute_s)
    worker.rate = json.dumps(meter.state())
    worker.samples_per_s = meter.rate or 0.0
    worker.units_done += 1
    _report(worker, meta, now)
    s.flush()
    return u


def count_rejected(s: Session, *, worker_id: int) -> None:
    s.execute(update(Worker).where(Worker.id == worker_id).values(rejected=Worker.rejected + 1))
