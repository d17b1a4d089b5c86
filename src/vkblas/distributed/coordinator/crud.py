"""What each request does to the coordinator's state: keyword-only functions taking a session (the transaction is
the caller's). Errors are :class:`ApiError` with a code and a message naming the values.

Concurrency: leasing reads and moves the run's data cursor, so it locks the run row (``FOR UPDATE`` on
PostgreSQL; on SQLite every writer holds the database lock from ``BEGIN IMMEDIATE``). Uploads and heartbeats lock
their lease row, so an upload and the expiry of its lease cannot both win. Rows are locked run, lease, unit, then
worker (a worker's own row is written last, at the commit); see ``db`` for the retry of a deadlock's loser.
"""

from __future__ import annotations

import hashlib
import json
import math
import secrets
from collections.abc import Mapping

import numpy as np
from sqlalchemy import exists, func, select, update
from sqlalchemy.orm import Session

from ..protocol import MAX_DATA_PARTS, DataPart, DataSlice, Heartbeat, LeaseReply, UploadMeta, UploadReply
from ..protocol import Lease as LeaseMsg
from ..robust import NormBand
from ..shards import shard_order, unit_seed
from ..sizing import RateMeter, batch_for_time
from . import copies, rounds, trust
from .config import RunSpec
from .errors import ApiError
from .models import RUN_ID, Lease, Run, Unit, Update, Worker
from .rounds import unit_round
from .runs import data_manifest, manifest_of

MAX_ACTIVE_ASYNC = 2  # async: a worker may hold two leases (one computing, one prefetched)
WAIT_S = 0.1  # a round closes within the applier's tick; asking again soon keeps workers from idling
MIN_GRADIENT_SAMPLES = 8
NORM_HISTORY = 32  # the norm band compares with this many recent validated results
_random = secrets.SystemRandom()  # which units are checked: not predictable by the workers


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
    units = s.scalars(select(Lease.unit_id).where(Lease.id.in_(ids))).all()
    s.execute(update(Lease).where(Lease.id.in_(ids)).values(status="expired"))
    copies.refresh_ids(s, units)
    return len(ids)


def unit_samples(spec: RunSpec, rate: float | None, fastest: float | None = None) -> int:
    """How many samples a worker of speed ``rate`` gets: about ``unit_seconds`` of work, one batch while its speed
    is unknown. A gradient unit (sync/async) is capped at one batch (``batch_size``): a larger gradient batch would
    change the optimisation, not just its speed. A DiLoCo unit is a whole number of inner steps, at most
    ``inner_steps``.

    DiLoCo's round waits for its slowest unit, so every unit of a round should take the same time. When the cap
    cuts the ``fastest`` online worker's unit short of ``unit_seconds``, every worker's unit is sized to the time
    the fastest one's capped unit takes: a GPU beside CPUs then does not wait at each round's barrier for their
    longer units."""
    b = spec.batch_size
    if spec.algorithm == "diloco":
        most = b * spec.inner_steps
        seconds = spec.unit_seconds
        if fastest is not None and fastest > 0:
            seconds = min(seconds, most / fastest)
        return batch_for_time(rate, seconds, minimum=b, maximum=b * spec.inner_steps, multiple=b)
    if rate is None:
        return b
    return batch_for_time(rate, spec.unit_seconds, minimum=min(MIN_GRADIENT_SAMPLES, b), maximum=b)


def _carve(s: Session, run: Run, spec: RunSpec, n: int) -> Unit | None:
    """The next ``n`` samples of the data order (fewer at the run's end) as a new unit. A unit runs on into the
    next shards (of this epoch, then the next) rather than stop at its shard's end: one that stopped there was
    short, and in DiLoCo every other worker of its round waited for the longer units while it idled (a GPU cut
    at the end of 60 000-image shards idled 40 % of the time beside a cpu worker)."""
    take = min(n, run.samples_total - run.samples_leased)
    if take <= 0:
        return None
    shards = data_manifest(run)
    parts: list[DataPart] = []
    epoch = run.cursor_epoch
    while sum(p.samples for p in parts) < take and len(parts) < MAX_DATA_PARTS:
        shard = shard_order(spec.seed, run.cursor_epoch, len(shards))[run.cursor_pos]
        here = min(take - sum(p.samples for p in parts), shards[shard].samples - run.cursor_offset)
        seed = unit_seed(spec.seed, run.cursor_epoch, shard)
        parts.append(DataPart(shard=shard, seed=seed, offset=run.cursor_offset, samples=here))
        run.cursor_offset += here
        if run.cursor_offset >= shards[shard].samples:
            run.cursor_offset, run.cursor_pos = 0, run.cursor_pos + 1
            if run.cursor_pos >= len(shards):
                run.cursor_pos, run.cursor_epoch = 0, run.cursor_epoch + 1
    take = sum(p.samples for p in parts)
    first = parts[0]
    unit = Unit(
        epoch=epoch,
        shard=first.shard,
        seed=first.seed,
        offset=first.offset,
        samples=take,
        more=json.dumps([p.model_dump() for p in parts[1:]]),
        status="open",
        attempts=0,
    )
    s.add(unit)
    run.samples_leased += take
    s.flush()
    return unit


def unit_data(unit: Unit) -> DataSlice:
    """What a lease on ``unit`` tells its worker to train on."""
    more = [DataPart.model_validate(p) for p in json.loads(unit.more or "[]")]
    return DataSlice(shard=unit.shard, seed=unit.seed, offset=unit.offset, samples=unit.samples, more=more)


def lease(s: Session, *, worker: Worker, spec: RunSpec, now: float) -> LeaseReply:
    """A unit of work for ``worker``, or why not now (``wait``) or never (``done``). A copy of a unit that is being
    checked (a replica) goes first; the worker must not have computed that unit already nor share a user with
    whoever did, must be of the unit's device class (``homogeneous``; any class after ``lease_seconds``, or at
    once when no other worker of that class who could compute it is online), and
    while a trusted worker is online only a trusted one gets it (colluders who are new cannot check each other)."""
    reply = _lease(s, worker=worker, spec=spec, now=now)
    worker.last_seen = now  # written at the commit: the worker's row is locked after the units, as everywhere
    return reply


def _lease(s: Session, *, worker: Worker, spec: RunSpec, now: float) -> LeaseReply:
    run = s.get(Run, RUN_ID, with_for_update=True)
    assert run is not None
    expire_leases(s, now=now)
    if run.state == "finished":
        return LeaseReply(status="done", reason=run.stop_reason or "the run is finished", credit=worker.credit)
    refused = trust.refusal(spec, worker)
    if refused is not None:
        raise ApiError(*refused)
    if run.state == "paused":
        return _wait(worker, f"the organiser paused the run{': ' + run.stop_reason if run.stop_reason else ''}")
    mine = select(func.count()).select_from(Lease).where(Lease.worker_id == worker.id)
    active = s.scalar(mine.where(Lease.status == "active"))
    if spec.validates and worker.valid == 0:
        held = s.scalar(
            select(func.count()).select_from(Update).where(Update.worker_id == worker.id, Update.status == "held")
        )
        if active + held >= spec.max_unchecked:
            return _wait(
                worker, f"{active + held} of this worker's units await their first check (--max-unchecked"
                f" {spec.max_unchecked}); more work once one is validated",
            )  # fmt: skip
    if active >= (MAX_ACTIVE_ASYNC if spec.algorithm == "async" else 1):
        return _wait(worker, f"worker already holds {active} active lease(s)")
    unit, role, ahead = _replica_slot(s, worker, spec, now), "replica", 0
    if unit is None:
        role = "primary"
        if spec.algorithm == "async":
            # a unit handed out now is applied after everything in flight: do not make work the staleness bound
            # will throw away (prime-rl's rule: no episode older than the bound is produced, rather than dropped)
            in_flight = s.scalar(select(func.count()).select_from(Lease).where(Lease.status == "active"))
            in_flight += s.scalar(
                select(func.count()).select_from(Update).where(Update.status.in_(("recorded", "held")))
            )
            if in_flight > spec.staleness_bound:
                return _wait(
                    worker, f"{in_flight} results in flight; more would exceed --max-staleness {spec.staleness_bound}"
                )
        else:
            ahead = _rounds_ahead(s, worker, run, spec, now)
            if isinstance(ahead, str):
                return _wait(worker, ahead)
        meter = RateMeter.from_state(json.loads(worker.rate))
        q = select(Unit).where(Unit.status == "open", Unit.base_version.is_(None)).order_by(Unit.id).limit(1)
        unit = s.scalars(q).first()
        if unit is None:
            fastest = _fastest_online(s, now, spec) if spec.algorithm == "diloco" else None
            unit = _carve(s, run, spec, unit_samples(spec, meter.rate, fastest))
    if unit is None:
        return _wait(worker, "every unit of the run is out; waiting for the last results")
    unit.attempts += 1
    if unit.base_version is None:  # the first copy: pin what every copy computes from; check it or not
        unit.base_version, unit.for_round = run.version, run.version + ahead
        unit.lr = current_lr(spec, run.samples_applied, run.samples_total)
        unit.device_class, unit.pinned_at = worker.device_class, now
        if _random.random() < trust.replication_probability(spec, worker):
            unit.quorum = max(unit.quorum, 2)
    row = Lease(
        id=secrets.token_hex(16),
        unit_id=unit.id,
        worker_id=worker.id,
        base_version=unit.base_version,
        samples=unit.samples,
        issued_at=now,
        expires_at=now + spec.lease_seconds,
        status="active",
        role=role,
    )
    s.add(row)
    copies.refresh(s, unit)
    msg = LeaseMsg(
        lease_id=row.id,
        unit_id=unit.id,
        base_version=unit.base_version,
        model=manifest_of(s, unit.base_version),
        data=unit_data(unit),
        batch_size=spec.batch_size,
        kind=spec.kind,  # type: ignore[arg-type]
        lr=unit.lr if unit.lr is not None else 0.0,
        inner_state=spec.inner_state,
        seed=(unit.seed + unit.id) % (2**31),  # the same for every copy
        role=role,  # type: ignore[arg-type]
        codec=spec.codec,
        block=spec.block,
        lease_seconds=spec.lease_seconds,
        heartbeat_seconds=max(0.5, spec.lease_seconds / 4),
    )
    return LeaseReply(status="work", lease=msg, credit=worker.credit)


def _rounds_ahead(s: Session, worker: Worker, run: Run, spec: RunSpec, now: float) -> int | str:
    """sync/diloco: which round ``worker``'s next unit is for, counted from the open round ``run.version``: 0 if
    it has no unit of it yet; 1 (a unit leased ahead, computed from the version it has) if its unit of the open
    round is in, ``--overlap`` is on and the round is not closing anyway; else why it waits (at most one ahead)."""
    q = (
        select(unit_round())
        .join(Lease, Lease.unit_id == Unit.id)
        .where(Lease.worker_id == worker.id, Lease.role == "primary", Lease.status.in_(("active", "done")))
        .where(unit_round() >= run.version)
        .distinct()
    )
    mine = set(s.scalars(q))
    if not mine:
        return 0
    if not spec.overlaps or mine != {run.version}:
        return f"round {run.version} is waiting for the others' results"
    pending = list(s.scalars(select(Update).where(Update.status == "recorded").order_by(Update.seq)))
    if rounds.closed(s, spec, run, run.version, pending, now):
        # the applier's next pass closes it (this worker's result was the last one it waited for): a unit from
        # the new version, fresh, is worth the few milliseconds more than one a round late
        return f"round {run.version} is closing"
    return 1


def _fastest_online(s: Session, now: float, spec: RunSpec) -> float | None:
    """The highest measured samples/s among the workers online (seen within a lease's length), not banned."""
    q = select(func.max(Worker.samples_per_s)).where(
        Worker.last_seen > now - spec.lease_seconds, Worker.banned.is_(None), Worker.samples_per_s > 0
    )
    return s.scalar(q)


def _replica_slot(s: Session, worker: Worker, spec: RunSpec, now: float) -> Unit | None:
    """The oldest unit that wants another copy and that ``worker`` may compute (see :func:`lease`)."""
    q = select(Unit).where(Unit.status == "open", Unit.base_version.is_not(None))
    q = q.where(~exists().where(Lease.unit_id == Unit.id, Lease.worker_id == worker.id))
    if spec.homogeneous:
        # the same device class, unless the unit has waited for one longer than a lease lasts, or no other worker
        # of its class who could compute it is online (waiting then only makes the result it checks stale)
        same_class_online = select(Worker.id).where(
            Worker.device_class == Unit.device_class,
            Worker.id != worker.id,
            Worker.last_seen > now - spec.lease_seconds,
            Worker.banned.is_(None),
            ~exists().where(Lease.unit_id == Unit.id, Lease.worker_id == Worker.id),
        )
        q = q.where(
            (Unit.device_class == worker.device_class)
            | (Unit.pinned_at < now - spec.lease_seconds)
            | ~exists(same_class_online)
        )
    if worker.user_id is not None:
        same_user = select(Lease.id).join(Worker, Worker.id == Lease.worker_id)
        q = q.where(~exists(same_user.where(Lease.unit_id == Unit.id, Worker.user_id == worker.user_id)))
    if not trust.trusted(spec, worker):  # only if no trusted worker who could take it is online
        online_trusted = select(Worker.id).where(
            Worker.id != worker.id,
            Worker.consecutive_valid >= spec.trust_after,
            Worker.last_seen > now - spec.lease_seconds,
            Worker.banned.is_(None),
        )
        if spec.homogeneous:
            online_trusted = online_trusted.where(Worker.device_class == Unit.device_class)
        q = q.where(~exists(online_trusted))
    return s.scalars(q.order_by(Unit.id).limit(1).with_for_update()).first()


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
    copies.refresh_ids(s, [row.unit_id])


# ------------------------------------------------------------------------------------------------ uploads
def find_upload(s: Session, *, worker: Worker, key: str) -> Update | None:
    return s.scalars(select(Update).where(Update.worker_id == worker.id, Update.idempotency_key == key)).first()


def upload_reply(u: Update, worker: Worker) -> UploadReply:
    status = "held" if u.status == "held" else "recorded"
    return UploadReply(update_id=u.seq, status=status, bytes=u.payload_bytes, credit=worker.credit)  # type: ignore[arg-type]


def content_hash(tensors: Mapping[str, np.ndarray]) -> str:
    """sha256 of an upload's tensors alone (name, dtype, shape, bytes, in name order), not of its metadata."""
    h = hashlib.sha256()
    for name in sorted(tensors):
        arr = tensors[name]
        h.update(f"{name}|{arr.dtype.str}|{arr.shape}|".encode())
        h.update(memoryview(np.ascontiguousarray(arr)).cast("B"))
    return h.hexdigest()


def replay_of(s: Session, *, content: str, lease_id: str) -> int | None:
    """An update with the same tensors for another unit than the lease's (a result sent again, perhaps under new
    metadata; two copies of one unit may be identical)."""
    unit_id = select(Lease.unit_id).where(Lease.id == lease_id).scalar_subquery()
    q = select(Update.seq).where(Update.content_sha256 == content, Update.unit_id != unit_id)
    return s.scalar(q.limit(1))


def scaled_norm(spec: RunSpec, norm: float, samples: int) -> float:
    """An update's norm made comparable across unit sizes: a DiLoCo pseudo-gradient of H inner steps grows like
    sqrt(H) (steps of a random-walk-like direction), a gradient of one batch does not grow."""
    if spec.kind == "inner-steps":
        return norm / math.sqrt(max(1, math.ceil(samples / spec.batch_size)))
    return norm


def _recent_norms(s: Session, spec: RunSpec) -> list[float]:
    rows = s.execute(
        select(Update.norm, Update.samples)
        .where(Update.status.in_(("recorded", "applied", "duplicate")), Update.suspicion == "")
        .order_by(Update.seq.desc())
        .limit(NORM_HISTORY)
    ).all()
    return [scaled_norm(spec, n, k) for n, k in rows]


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
    content: str,
    spec: RunSpec,
    flops_per_sample: float,
    now: float,
) -> Update:
    """Record a validated upload (its payload already in the store): the lease is done. A result of an unchecked
    unit is ``recorded`` (to apply) unless its norm is outside the recent band: then it is *held* and its unit
    wants a second copy; a result of a checked unit is held for the validator."""
    row = own_lease(s, worker=worker, lease_id=lease_id, now=now)
    if meta.samples != row.samples:
        raise ApiError(
            "invalid-payload", f"the upload reports {meta.samples} samples; lease {lease_id} has {row.samples}"
        )
    unit = s.get(Unit, row.unit_id, with_for_update=True)
    assert unit is not None
    unit.results += 1
    suspicion = ""
    if spec.validates:
        suspicion = NormBand(spec.norm_factor).check(scaled_norm(spec, norm, row.samples), _recent_norms(s, spec))
        if suspicion and unit.quorum < 2:
            unit.quorum = 2  # suspicious: compare with another copy (BOINC #2138: never leave such a unit at 1)
    held = unit.quorum >= 2
    u = Update(
        lease_id=row.id,
        worker_id=worker.id,
        unit_id=unit.id,
        idempotency_key=key,
        payload_sha256=sha,
        content_sha256=content,
        payload_bytes=nbytes,
        base_version=row.base_version,
        samples=row.samples,
        compute_s=meta.compute_s,
        loss=meta.loss,
        norm=norm,
        created_at=now,
        status="held" if held else "recorded",
        suspicion=suspicion,
    )
    s.add(u)
    row.status = "done"
    if not held:
        trust.unchecked(spec, worker, row.samples, row.samples * flops_per_sample)
    copies.refresh(s, unit)
    meter = RateMeter.from_state(json.loads(worker.rate))
    meter.observe(row.samples, meta.compute_s)
    worker.rate = json.dumps(meter.state())
    worker.samples_per_s = meter.rate or 0.0
    worker.units_done += 1
    _report(worker, meta, now)
    s.flush()
    return u


def count_rejected(s: Session, *, worker_id: int) -> None:
    """An upload that failed validation (NaN, wrong shape, a replay): counted, and the worker's next units are
    checked again (its run of agreeing results is over); not an *invalid* result, which needs a comparison."""
    s.execute(update(Worker).where(Worker.id == worker_id).values(rejected=Worker.rejected + 1, consecutive_valid=0))
