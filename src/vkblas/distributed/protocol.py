"""The coordinator's wire protocol, version 1 (``/v1/...``): every request and response body as a strict pydantic
model, the size limits, and the error codes. Shared by the coordinator (``coordinator/``) and the volunteer's
client (``worker/``), so both sides parse with the same rules. ``docs/PROTOCOL.md`` describes the messages, the
state machine of a lease and what each error code means.

Fields are bounded (``Field(ge=..., le=...)``) and unknown fields are refused (``extra="forbid"``): a body from an
untrusted peer either parses into exactly these shapes or is a 4xx with a message.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

API = "/v1"
PROTOCOL_VERSION = 1

# size limits (bytes); the coordinator refuses larger bodies with 413 before reading them whole
MAX_JSON_BODY = 16 * 1024
MAX_NAME = 64
MAX_CLASS = 128
#: an upload is at most this many times the size of the model in fp32 (the int8 scales add a little), plus slack
UPLOAD_FACTOR = 1.1
UPLOAD_SLACK = 64 * 1024
MAX_IDEMPOTENCY_KEY = 64
#: an upload larger than this is sent as parts of at most this size (``PUT /v1/leases/{id}/parts/{sha256}``), then
#: named in order by a parts manifest (:class:`UploadParts`), so no single request body holds a large model's update
PART_BYTES = 16 << 20
MAX_PARTS = 4096
MAX_DATA_PARTS = 64  # the most data shards one work unit spans (its samples come from consecutive shards)
PARTS_CONTENT_TYPE = "application/vnd.vkblas.parts+json"
NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._@+-]*$"
KEY_PATTERN = r"^[A-Za-z0-9_-]{8,64}$"
SHA256_PATTERN = r"^[0-9a-f]{64}$"

#: error codes: the ``error.code`` of every 4xx body (meaning in docs/PROTOCOL.md)
ERROR_CODES = {
    "invalid-body": 422,
    "invalid-payload": 400,
    "checksum-mismatch": 400,
    "rejected-update": 422,
    "missing-token": 401,
    "bad-token": 401,
    "not-your-lease": 403,
    "unknown-lease": 404,
    "unknown-shard": 404,
    "unknown-version": 404,
    "not-found": 404,
    "lease-expired": 409,
    "lease-finished": 409,
    "idempotency-conflict": 409,
    "too-large": 413,
    "bad-range": 416,
    "run-finished": 409,
    "not-admin": 403,
    "banned": 403,
    "suspended": 403,
    "name-taken": 409,
    "replayed-upload": 409,
    "rate-limited": 429,
    "missing-parts": 409,
    "unavailable": 503,
    "internal": 500,
}
#: the longest a lease request may wait for work (``POST /v1/leases?wait=S``: long polling)
MAX_LEASE_WAIT = 30.0


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)


class ErrorBody(Strict):
    code: str
    message: str


class ErrorReply(Strict):
    error: ErrorBody


# ------------------------------------------------------------------------------------------------ workers
class RegisterRequest(Strict):
    name: str = Field(min_length=1, max_length=MAX_NAME, pattern=NAME_PATTERN)
    device: str = Field(min_length=1, max_length=MAX_NAME)
    client_version: str = Field(default="", max_length=MAX_NAME)
    #: what its results' rounding depends on (backend, adapter and driver, or CPU architecture and numpy): copies of
    #: a unit go to workers of the same class (homogeneous redundancy), whose honest results agree closely
    device_class: str = Field(default="", max_length=MAX_CLASS)


class RegisterReply(Strict):
    worker_id: int
    #: ``<worker_id>.<secret>``; the coordinator keeps only a hash of the secret. Send as ``Authorization: Bearer``
    token: str


class UserRequest(Strict):
    name: str = Field(min_length=1, max_length=MAX_NAME, pattern=NAME_PATTERN)


class UserReply(Strict):
    user_id: int
    #: ``u<user_id>.<secret>``: send it when registering a worker (``join --user-token``) to credit the user
    token: str


class WorkerSelf(Strict):
    worker_id: int
    name: str
    device: str
    user: str | None
    units_done: int
    credit: int  # validated samples
    credit_flops: float  # their training FLOPs (estimate: 6 x parameters x samples)
    pending: int  # samples accepted unchecked: credited at this worker's next passed check
    accepted: int
    stale: int
    rejected: int
    valid: int  # results that agreed with another worker's
    invalid: int  # results that disagreed (quarantined)
    reputation: int  # agreeing results in a row


# ------------------------------------------------------------------------------------------------ run
class ShardRef(Strict):
    name: str
    sha256: str = Field(pattern=SHA256_PATTERN)
    bytes: int = Field(ge=0)


class DataShardRef(ShardRef):
    samples: int = Field(ge=1)


class ModelManifest(Strict):
    version: int = Field(ge=0)
    shards: list[ShardRef]


class RunInfo(Strict):
    """What a worker needs to know about the run (the full spec is in ``status``)."""

    run_id: str
    dataset: str
    model: str
    algorithm: Literal["sync", "async", "diloco"]
    codec: Literal["fp32", "fp16", "int8"]
    block: int
    batch_size: int
    limit: int | None  # the run uses the first ``limit`` images of the split (a worker's local copy must too)
    shard_samples: int
    data_shards: list[DataShardRef]


# ------------------------------------------------------------------------------------------------ leases
class DataPart(Strict):
    """Positions ``offset .. offset + samples`` of the permutation of data shard ``shard`` drawn from ``seed``
    (:func:`shards.unit_indices`), so anyone can recompute them."""

    shard: int = Field(ge=0)
    seed: int = Field(ge=0)
    offset: int = Field(ge=0)
    samples: int = Field(ge=1)


class DataSlice(DataPart):
    """The samples of a unit, ``samples`` in all. A unit that runs past the end of its shard continues in ``more``:
    parts of the next shards of the data order, in order. The first part is ``shard`` / ``seed`` / ``offset`` with
    the samples ``more`` leaves (so a unit of one shard is just the four numbers)."""

    more: list[DataPart] = Field(default_factory=list, max_length=MAX_DATA_PARTS - 1)

    @model_validator(mode="after")
    def _first_part_not_empty(self) -> DataSlice:
        if sum(p.samples for p in self.more) >= self.samples:
            raise ValueError(f"a unit of {self.samples} samples cannot continue in parts of {self.more_samples}")
        return self

    @property
    def more_samples(self) -> int:
        return sum(p.samples for p in self.more)

    def parts(self) -> list[DataPart]:
        """Every part, the first included."""
        first = DataPart(shard=self.shard, seed=self.seed, offset=self.offset, samples=self.samples - self.more_samples)
        return [first, *self.more]


class Lease(Strict):
    lease_id: str
    unit_id: int
    base_version: int
    model: ModelManifest
    data: DataSlice
    batch_size: int = Field(ge=1)
    #: ``gradient`` (sync/async: one gradient of the mean loss over the unit's samples) or ``inner-steps``
    #: (diloco: ceil(samples / batch_size) AdamW steps from the model, returning start - end)
    kind: Literal["gradient", "inner-steps"]
    lr: float  # the inner learning rate (diloco); informative for gradients
    #: diloco: ``fresh``: a new AdamW for this unit (recomputable by another worker); ``kept``: the worker's own
    inner_state: Literal["fresh", "kept"] = "fresh"
    seed: int  # dropout randomness of the unit (the same for every copy of the unit)
    #: ``primary``: the unit's first copy; ``replica``: a copy re-issued to compare with (validation)
    role: Literal["primary", "replica"] = "primary"
    codec: Literal["fp32", "fp16", "int8"]
    block: int
    lease_seconds: float  # the lease expires this long after the last heartbeat
    heartbeat_seconds: float


class LeaseReply(Strict):
    #: ``work``: here is a lease; ``wait``: nothing to do now, ask again after ``retry_after_s`` (a sync/diloco
    #: round is waiting for others); ``done``: the run is finished
    status: Literal["work", "wait", "done"]
    lease: Lease | None = None
    retry_after_s: float = 0.0
    reason: str = ""
    credit: int = 0


class Heartbeat(Strict):
    """What a worker reports about itself (for ``status``): wall and idle seconds since it started, and the bytes
    its transport moved (request and response bodies and headers); all optional."""

    wall_s: float = Field(default=0.0, ge=0, le=1e9)
    idle_s: float = Field(default=0.0, ge=0, le=1e9)
    bytes_sent: int = Field(default=0, ge=0, le=1 << 60)
    bytes_received: int = Field(default=0, ge=0, le=1 << 60)


class HeartbeatReply(Strict):
    lease_id: str
    expires_in_s: float


class UploadMeta(Heartbeat):
    """The entry ``UPLOAD_META_KEY`` of an uploaded safetensors payload's ``__metadata__`` (JSON), besides the
    codec's own entries."""

    lease_id: str = Field(max_length=MAX_NAME)
    samples: int = Field(ge=1, le=1 << 40)
    compute_s: float = Field(gt=0, le=1e6)
    loss: float = Field(allow_inf_nan=False)


UPLOAD_META_KEY = "vkblas"


class UploadParts(Strict):
    """The body of a result sent in parts: their sha256, in order; the payload is their concatenation (and must
    hash to the request's ``X-Content-SHA256``)."""

    parts: list[str] = Field(min_length=1, max_length=MAX_PARTS)


class PartReply(Strict):
    sha256: str
    bytes: int


class UploadReply(Strict):
    update_id: int
    #: ``recorded``: it will be applied; ``held``: it waits for another worker's copy of the unit to compare with
    status: Literal["recorded", "held"]
    bytes: int
    credit: int


# ------------------------------------------------------------------------------------------------ status
class WorkerStatus(Strict):
    worker_id: int
    name: str
    device: str
    samples_per_s: float
    idle_fraction: float  # idle_s / wall_s
    units_done: int
    credit: int
    accepted: int
    stale: int
    rejected: int
    bytes_sent: int  # as the worker's transport counted them (request and response heads and bodies)
    bytes_received: int
    online: bool
    user: str | None = None
    credit_flops: float = 0.0
    valid: int = 0
    invalid: int = 0
    reputation: int = 0
    banned: bool = False
    #: the worker's own clock at its last report (upload or heartbeat): seconds since it started, and of those
    #: the seconds it waited (for a unit, the model, data, an upload); differences give idle over a window
    wall_s: float = 0.0
    idle_s: float = 0.0


class Evaluation(Strict):
    version: int
    samples: int
    accuracy: float
    loss: float
    at: float


class RunStatus(Strict):
    run_id: str
    state: Literal["running", "paused", "finished"]
    stop_reason: str = ""
    algorithm: str
    dataset: str
    model: str
    version: int
    samples_total: int
    samples_leased: int
    samples_applied: int
    progress: float
    accepted: int
    stale: int
    rejected: int
    pending: int
    test: Evaluation | None
    evaluations: list[Evaluation]
    workers: list[WorkerStatus]
    bytes_in: int  # upload payloads recorded
    bytes_out: int  # what workers report having received
    apply_cpu_s_per_update: float
    spec: dict[str, str | int | float | bool | None]
    #: updates by validation state: held, recorded, applied, stale, duplicate, invalid, inconclusive, quarantined
    validation: dict[str, int] = Field(default_factory=dict)


# ------------------------------------------------------------------------------------------------ leaderboard
class LeaderboardRow(Strict):
    user: str  # the account, or the worker's own name for a worker without one
    workers: int
    samples: int  # validated samples
    flops: float
    valid: int
    invalid: int


class HistoryPoint(Strict):
    at: float
    version: int
    samples_applied: int
    samples_validated: int
    workers_online: int


class Dashboard(Strict):
    """Everything the web page shows (``GET /v1/dashboard``)."""

    status: RunStatus
    leaderboard: list[LeaderboardRow]
    history: list[HistoryPoint]


# ------------------------------------------------------------------------------------------------ admin
class RunAction(Strict):
    action: Literal["pause", "resume", "stop"]
    reason: str = Field(default="", max_length=500)


class BanRequest(Strict):
    reason: str = Field(min_length=1, max_length=500)


class AdminWorker(Strict):
    worker_id: int
    name: str
    user: str | None
    address: str
    device: str
    reputation: int
    valid: int
    invalid: int
    rejected: int
    credit: int
    pending: int
    banned: str | None
    last_seen: float
