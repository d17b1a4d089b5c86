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
    state: Mapped[str] = mapped_column(String(16))  # running | paused | finished (done or stopped)
    stop_reason: Mapped[str] = mapped_column(Text, server_default="")  # set when the organiser stopped it
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


class User(Base):
    """A volunteer's account: its workers' validated credit adds up on the leaderboard under its name."""

    __tablename__ = "users"
    __table_args__ = (UniqueConstraint("name", name="uq_users_name"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    name: Mapped[str] = mapped_column(String(64))
    token_hash: Mapped[str] = mapped_column(String(64))  # sha256 of the token's secret, hex
    created_at: Mapped[float] = mapped_column(Float)


class Credential(Base):
    """A token that is not a worker's or a user's: ``admin`` (the organiser's, for run control)."""

    __tablename__ = "credentials"

    name: Mapped[str] = mapped_column(String(32), primary_key=True)
    token_hash: Mapped[str] = mapped_column(String(64))
    created_at: Mapped[float] = mapped_column(Float)


class Worker(Base):
    __tablename__ = "workers"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    name: Mapped[str] = mapped_column(String(64))
    device: Mapped[str] = mapped_column(String(64))
    token_hash: Mapped[str] = mapped_column(String(64))  # sha256 of the token's secret, hex
    user_id: Mapped[int | None] = mapped_column(ForeignKey("users.id", name="fk_workers_user"), nullable=True)
    address: Mapped[str] = mapped_column(String(64), server_default="")  # where it registered from
    device_class: Mapped[str] = mapped_column(String(128), server_default="")  # homogeneous redundancy's class
    #: reputation: results in a row that agreed with another worker's (0 after a disagreement), and totals
    consecutive_valid: Mapped[int] = mapped_column(Integer, server_default="0")
    valid: Mapped[int] = mapped_column(Integer, server_default="0")
    invalid: Mapped[int] = mapped_column(Integer, server_default="0")
    credit_flops: Mapped[float] = mapped_column(Float, server_default="0")
    #: credit for results accepted unchecked: granted at this worker's next passed check, forfeited at a failed one
    pending_samples: Mapped[int] = mapped_column(BigInteger, server_default="0")
    pending_flops: Mapped[float] = mapped_column(Float, server_default="0")
    banned: Mapped[str | None] = mapped_column(Text, nullable=True)  # why the organiser banned it
    created_at: Mapped[float] = mapped_column(Float)
    last_seen: Mapped[float] = mapped_column(Float)
    rate: Mapped[str] = mapped_column(Text)  # RateMeter state as JSON (speed -> unit sizes)
    samples_per_s: Mapped[float] = mapped_column(Float)
    wall_s: Mapped[float] = mapped_column(Float)
    idle_s: Mapped[float] = mapped_column(Float)
    bytes_sent: Mapped[int] = mapped_column(BigInteger)
    bytes_received: Mapped[int] = mapped_column(BigInteger)
    units_done: Mapped[int] = mapped_column(Integer)
    credit: Mapped[int] = mapped_column(BigInteger)  # validated samples
    accepted: Mapped[int] = mapped_column(Integer)
    stale: Mapped[int] = mapped_column(Integer)
    rejected: Mapped[int] = mapped_column(Integer)


class Unit(Base):
    """A piece of work: samples of consecutive data shards of the data order, named by their seeds. Re-leased when a
    lease on it expires."""

    __tablename__ = "units"
    __table_args__ = (Index("ix_units_status", "status"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    epoch: Mapped[int] = mapped_column(Integer)
    shard: Mapped[int] = mapped_column(Integer)
    seed: Mapped[int] = mapped_column(BigInteger)
    offset: Mapped[int] = mapped_column(Integer)
    samples: Mapped[int] = mapped_column(Integer)  # in all, the parts in ``more`` included
    #: the unit's parts in the next shards, when it runs past its shard's end: JSON, a list of DataPart
    more: Mapped[str] = mapped_column(Text, server_default="[]")
    #: open (a copy is wanted) | leased (every wanted copy is out) | checking (results to compare) | done
    status: Mapped[str] = mapped_column(String(16))
    attempts: Mapped[int] = mapped_column(Integer)
    quorum: Mapped[int] = mapped_column(Integer, server_default="1")  # agreeing results wanted (1: unchecked)
    results: Mapped[int] = mapped_column(Integer, server_default="0")  # results received, of every copy
    #: the version every copy computes from, once the first copy is out (replicas must start from the same weights)
    base_version: Mapped[int | None] = mapped_column(Integer, nullable=True)
    lr: Mapped[float | None] = mapped_column(Float, nullable=True)  # and the same learning rate
    #: sync/diloco: the round its result belongs to, pinned with ``base_version``: that version, or the next one for
    #: a unit leased ahead while its base round was open (``--overlap``). Null: ``base_version`` (rows before 0005)
    for_round: Mapped[int | None] = mapped_column(Integer, nullable=True)
    device_class: Mapped[str | None] = mapped_column(String(128), nullable=True)  # its first copy's worker's
    pinned_at: Mapped[float | None] = mapped_column(Float, nullable=True)  # when its first copy went out


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
    role: Mapped[str] = mapped_column(String(16), server_default="primary")  # primary | replica


class Update(Base):
    """An accepted upload, recorded before it is applied; its payload is a file in the store."""

    __tablename__ = "updates"
    __table_args__ = (
        UniqueConstraint("worker_id", "idempotency_key", name="uq_updates_worker_key"),
        UniqueConstraint("lease_id", name="uq_updates_lease"),
        Index("ix_updates_status", "status"),
        Index("ix_updates_unit", "unit_id"),
        Index("ix_updates_content", "content_sha256"),
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
    #: held (awaiting the other copies of its unit) -> recorded (to apply) -> applied | stale; or duplicate (agreed,
    #: its twin is applied), invalid (disagreed: quarantined), inconclusive, quarantined (its worker was banned)
    status: Mapped[str] = mapped_column(String(16))
    unit_id: Mapped[int | None] = mapped_column(ForeignKey("units.id", name="fk_updates_unit"), nullable=True)
    #: sha256 of the tensors alone (names, dtypes, shapes, bytes; no metadata): the same result sent again under
    #: another lease's metadata has the same one
    content_sha256: Mapped[str | None] = mapped_column(String(64), nullable=True)
    suspicion: Mapped[str] = mapped_column(Text, server_default="")  # why it was sent to validation, if it was
    distance: Mapped[float | None] = mapped_column(Float, nullable=True)  # to the canonical result of its unit
    applied_version: Mapped[int | None] = mapped_column(Integer, nullable=True)
    staleness: Mapped[int | None] = mapped_column(Integer, nullable=True)


class Checkpoint(Base):
    """A model version in the store: its weight shards (what workers download) and its full state (weights and
    optimizer, what a restarted applier loads; none for a version published with its weights alone, see
    :mod:`.applier`), and the last update sequence number it includes."""

    __tablename__ = "checkpoints"

    version: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=False)
    manifest: Mapped[str] = mapped_column(Text)  # ModelManifest as JSON
    state_sha256: Mapped[str | None] = mapped_column(String(64), nullable=True)
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


class History(Base):
    """The run over time, one row every few seconds (the dashboard's throughput and workers-online curves)."""

    __tablename__ = "history"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    created_at: Mapped[float] = mapped_column(Float)
    version: Mapped[int] = mapped_column(Integer)
    samples_applied: Mapped[int] = mapped_column(BigInteger)
    samples_validated: Mapped[int] = mapped_column(BigInteger)
    workers_online: Mapped[int] = mapped_column(Integer)


class Leader(Base):
    """Who runs a singleton job (the applier) until when: a lease renewed by its holder, taken over when it
    expires (BOINC runs one daemon per state transition; here any process may be it, one at a time)."""

    __tablename__ = "leaders"

    name: Mapped[str] = mapped_column(String(32), primary_key=True)
    holder: Mapped[str] = mapped_column(String(64))
    expires_at: Mapped[float] = mapped_column(Float)
