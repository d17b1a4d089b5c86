"""The coordinator's tables (SQLAlchemy 2 ORM). The schema itself is made by the Alembic migrations in
``migrations/versions``; a test checks that these models and the migrated schema agree.

Times are seconds since the epoch (``time.time()`` of the process that wrote them): every coordinator process of
one run shares a host clock, or an NTP-synchronised one behind a reverse proxy.
"""

from __future__ import annotations

from sqlalchemy import BigInteger, Float, ForeignKey, Index, Integer, String, Text, UniqueConstraint
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

RUN_ID = "run"


class Base(DeclarativeBase):
    pass


class Run(Base):
    """The one run this coordinator trains: its spec, where the data cursor stands, the published version."""

    __tablename__ = "runs"

    id: Mapped[str] = mapped_column(String(32), primary_key=True)
    uid: Mapped[str] = mapped_column(String(32))  # random, names the run to workers (their cache directories)
    spec: Mapped[str] = mapped_column(Text)  # RunSpec as JSON
    data_manifest: Mapped[str] = mapped_column(Text)  # [DataShardRef] as JSON
    state: Mapped[str] = mapped_column(String(16))  # running | finished
    created_at: Mapped[float] = mapped_column(Float)
    samples_total: Mapped[int] = mapped_column(BigInteger)
    samples_leased: Mapped[int] = mapped_column(BigInteger)  # carved into units so far
    cursor_epoch: Mapped[int] = mapped_column(Integer)
    cursor_pos: Mapped[int] = mapped_column(Integer)  # index into the epoch's shard order
    cursor_offset: Mapped[int] = mapped_column(Integer)  # next sample position in that shard
    version: Mapped[int] = mapped_column(Integer)  # the latest checkpoint's version (what workers get)
    round_opened_at: Mapped[float] = mapped_column(Float)
    samples_applied: Mapped[int] = mapped_column(BigInteger)
    apply_cpu_s: Mapped[float] = mapped_column(Float)
    updates_applied: Mapped[int] = mapped_column(BigInteger)


class Worker(Base):
    __tablename__ = "workers"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    name: Mapped[str] = mapped_column(String(64))
    device: Mapped[str] = mapped_column(String(64))
    token_hash: Mapped[str] = mapped_column(String(64))  # sha256 of the token's secret, hex
    created_at: Mapped[float] = mapped_column(Float)
    last_seen: Mapped[float] = mapped_column(Float)
    rate: Mapped[str] = mapped_column(Text)  # RateMeter state as JSON (speed -> unit sizes)
    samples_per_s: Mapped[float] = mapped_column(Float)
    wall_s: Mapped[float] = mapped_column(Float)
    idle_s: Mapped[float] = mapped_column(Float)
    bytes_sent: Mapped[int] = mapped_column(BigInteger)
    bytes_received: Mapped[int] = mapped_column(BigInteger)
    units_done: Mapped[int] = mapped_column(Integer)
    credit: Mapped[int] = mapped_column(BigInteger)  # accepted samples
    accepted: Mapped[int] = mapped_column(Integer)
    stale: Mapped[int] = mapped_column(Integer)
    rejected: Mapped[int] = mapped_column(Integer)


class Unit(Base):
    """A piece of work: samples of one data shard, named by a seed. Re-leased when a lease on it expires."""

    __tablename__ = "units"
    __table_args__ = (Index("ix_units_status", "status"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    epoch: Mapped[int] = mapped_column(Integer)
    shard: Mapped[int] = mapped_column(Integer)
    seed: Mapped[int] = mapped_column(BigInteger)
    offset: Mapped[int] = mapped_column(Integer)
    samples: Mapped[int] = mapped_column(Integer)
    status: Mapped[str] = mapped_column(String(16))  # open | leased | done
    attempts: Mapped[int] = mapped_column(Integer)


class Lease(Base):
    """One worker holding one unit, computed from one model version (state machine in docs/PROTOCOL.md)."""

    __tablename__ = "leases"
    __table_args__ = (
        Index("ix_leases_status_expires", "status", "expires_at"),
        Index("ix_leases_worker_version", "worker_id", "base_version"),
    )

    id: Mapped[str] = mapped_column(String(32), primary_key=True)
    unit_id: Mapped[int] = mapped_column(ForeignKey("units.id"))
    worker_id: Mapped[int] = mapped_column(ForeignKey("workers.id"))
    base_version: Mapped[int] = mapped_column(Integer)
    samples: Mapped[int] = mapped_column(Integer)
    issued_at: Mapped[float] = mapped_column(Float)
    expires_at: Mapped[float] = mapped_column(Float)
    status: Mapped[str] = mapped_column(String(16))  # active | done | expired | returned


class Update(Base):
    """An accepted upload, recorded before it is applied; its payload is a file in the store."""

    __tablename__ = "updates"
    __table_args__ = (
        UniqueConstraint("worker_id", "idempotency_key", name="uq_updates_worker_key"),
        UniqueConstraint("lease_id", name="uq_updates_lease"),
        Index("ix_updates_status", "status"),
    )

    seq: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    lease_id: Mapped[str] = mapped_column(ForeignKey("leases.id"))
    worker_id: Mapped[int] = mapped_column(ForeignKey("workers.id"))
    idempotency_key: Mapped[str] = mapped_column(String(64))
    payload_sha256: Mapped[str] = mapped_column(String(64))
    payload_bytes: Mapped[int] = mapped_column(BigInteger)
    base_version: Mapped[int] = mapped_column(Integer)
    samples: Mapped[int] = mapped_column(Integer)
    compute_s: Mapped[float] = mapped_column(Float)
    loss: Mapped[float] = mapped_column(Float)
    norm: Mapped[float] = mapped_column(Float)
    created_at: Mapped[float] = mapped_column(Float)
    status: Mapped[str] = mapped_column(String(16))  # recorded | applied | stale
    applied_version: Mapped[int | None] = mapped_column(Integer, nullable=True)
    staleness: Mapped[int | None] = mapped_column(Integer, nullable=True)


class Checkpoint(Base):
    """A model version in the store: its weight shards (what workers download) and its full state (weights and
    optimizer, what a restarted applier loads), and the last update sequence number it includes."""

    __tablename__ = "checkpoints"

    version: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=False)
    manifest: Mapped[str] = mapped_column(Text)  # ModelManifest as JSON
    state_sha256: Mapped[str] = mapped_column(String(64))
    last_seq: Mapped[int] = mapped_column(Integer)
    samples_applied: Mapped[int] = mapped_column(BigInteger)
    created_at: Mapped[float] = mapped_column(Float)


class Evaluation(Base):
    __tablename__ = "evaluations"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    version: Mapped[int] = mapped_column(Integer)
    samples: Mapped[int] = mapped_column(BigInteger)
    accuracy: Mapped[float] = mapped_column(Float)
    loss: Mapped[float] = mapped_column(Float)
    created_at: Mapped[float] = mapped_column(Float)


class Leader(Base):
    """Who runs a singleton job (the applier) until when: a lease renewed by its holder, taken over when it
    expires (BOINC runs one daemon per state transition; here any process may be it, one at a time)."""

    __tablename__ = "leaders"

    name: Mapped[str] = mapped_column(String(32), primary_key=True)
    holder: Mapped[str] = mapped_column(String(64))
    expires_at: Mapped[float] = mapped_column(Float)
