"""What defines a coordinated run (:class:`RunSpec`: the options of ``vkblas train`` plus the distributed ones) and
how a coordinator process is set up (:class:`ServeSettings`). Both are pydantic models: bounded fields, errors that
name the value. The spec is stored in the database, so every coordinator process reads the same one."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator, model_validator

from ...training.fit import DATASETS, DEFAULT_LR, OPTIMIZERS
from ...training.models import MODELS
from ..text import GPT_SIZES, VOCAB, is_text

DEFAULT_QUORUM = {"sync": 1.0, "async": 1.0, "diloco": 0.75}
DEFAULT_MAX_STALENESS = {"sync": 1, "async": 8, "diloco": 2}
# diloco overlaps its rounds unless told not to (--no-overlap): the barrier idles every worker but the slowest
DEFAULT_OVERLAP = {"sync": False, "async": False, "diloco": True}


class RunSpec(BaseModel):
    """A training run as ``vkblas train`` defines it, plus how the work is spread (see docs/PROTOCOL.md)."""

    model_config = ConfigDict(extra="forbid")

    dataset: str = "mnist"
    model: str = "mlp"
    epochs: int = Field(default=1, ge=1, le=10_000)
    samples: int | None = Field(default=None, ge=1, description="total training samples (default: epochs x split)")
    batch_size: int = Field(default=128, ge=1, le=65_536)
    lr: float | None = Field(default=None, gt=0, le=10)
    optimizer: Literal["adam", "adamw", "sgd"] = "adam"
    seed: int = Field(default=0, ge=0, le=2**31 - 1)
    limit: int | None = Field(default=None, ge=1)
    algorithm: Literal["sync", "async", "diloco"] = "diloco"  # volunteers: the least traffic (PROTOCOL.md)
    max_staleness: int | None = Field(default=None, ge=0, le=10_000)
    inner_steps: int = Field(default=50, ge=1, le=100_000, description="diloco: the most inner steps of a unit")
    outer_lr: float = Field(default=0.7, gt=0, le=10)
    outer_momentum: float = Field(default=0.9, ge=0, lt=1)
    codec: Literal["fp32", "fp16", "int8"] = "fp32"
    block: int = Field(default=256, ge=1, le=1 << 20)
    unit_seconds: float = Field(default=3.0, gt=0, le=3600, description="target wall time of a work unit")
    quorum: float | None = Field(default=None, gt=0, le=1)
    round_seconds: float | None = Field(default=None, gt=0, le=86_400)
    #: diloco: a worker whose unit of the open round is in leases one unit ahead (from the version it has) instead
    #: of waiting at the round's barrier; its result joins the next round with staleness 1 (docs/PROTOCOL.md)
    overlap: bool | None = None
    lease_seconds: float = Field(default=30.0, ge=1, le=86_400)
    eval_seconds: float = Field(default=10.0, gt=0, le=86_400)
    max_norm: float | None = Field(default=None, gt=0)
    shard_samples: int = Field(default=10_000, ge=1, le=1_000_000)
    # untrusted workers (docs/PROTOCOL.md, "Validation"): a unit is computed twice and compared
    validate_fraction: float = Field(
        default=0.05, ge=0, le=1, description="share of a trusted worker's units re-issued to another worker"
    )
    trust_after: int = Field(default=5, ge=0, le=1000, description="agreeing results in a row before trust")
    max_unchecked: int = Field(default=3, ge=1, le=1000, description="units out before a new worker's first check")
    suspend_after: int = Field(default=3, ge=1, le=1000, description="invalid results that suspend a worker")
    tolerance: float | None = Field(default=None, gt=0, lt=2, description="override the measured tolerance")
    norm_factor: float = Field(default=4.0, gt=1, le=1e6, description="a norm this far from the median is suspect")
    aggregate: Literal["mean", "trimmed-mean"] = "trimmed-mean"
    trim: float = Field(default=0.1, ge=0, lt=0.5, description="trimmed-mean: share dropped at each end")
    #: diloco: a new AdamW per unit (recomputable by another worker) or the worker's, kept from unit to unit
    #: (DiLoCo's own way, only without validation). Kept state gained the README's MNIST run (50 inner steps a
    #: unit) 0.5 points but made the tiny GPT test (4 inner steps) diverge 2 times in 4, so fresh is the default
    inner_state: Literal["fresh", "kept"] = "fresh"
    #: copies of a unit go to workers of its first copy's device class (BOINC's homogeneous redundancy: honest
    #: results of several Adam steps on different devices can diverge chaotically); after ``lease_seconds``
    #: without such a worker, to any
    homogeneous: bool = True

    @field_validator("dataset", "model")
    @classmethod
    def _known(cls, v: str, info: ValidationInfo) -> str:
        choices = [*DATASETS, *VOCAB] if info.field_name == "dataset" else [*MODELS, *GPT_SIZES]
        if v not in choices:
            raise ValueError(f"unknown {info.field_name} {v!r}: choose from {', '.join(choices)}")
        return v

    @model_validator(mode="after")
    def _optimizer(self) -> RunSpec:
        assert self.optimizer in OPTIMIZERS
        if is_text(self.dataset) != (self.model in GPT_SIZES):
            raise ValueError(
                f"model {self.model!r} does not train on {self.dataset!r}: text datasets ({', '.join(VOCAB)}) train "
                f"a GPT ({', '.join(GPT_SIZES)}), image datasets an image model ({', '.join(MODELS)})"
            )
        if is_text(self.dataset) and self.algorithm != "diloco":
            raise ValueError(f"a GPT run through the coordinator is diloco only, not {self.algorithm!r}")
        if self.overlap and self.algorithm != "diloco":
            raise ValueError(f"overlap is for diloco's rounds, not {self.algorithm!r}")
        if self.overlap and self.staleness_bound < 1:
            raise ValueError("overlap makes every result one round late: it needs max_staleness >= 1 (got 0)")
        if self.inner_state == "kept" and self.validates:
            raise ValueError(
                "inner_state 'kept' makes a unit depend on its worker's private AdamW state, so no other worker can"
                " recompute it: use inner_state 'fresh', or turn validation off (validate_fraction 0, trust_after 0)"
            )
        return self

    @property
    def validates(self) -> bool:
        """Whether units are ever re-issued for comparison."""
        return self.validate_fraction > 0 or self.trust_after > 0

    # resolved defaults, per algorithm
    @property
    def learning_rate(self) -> float:
        return self.lr if self.lr is not None else DEFAULT_LR["adamw" if self.algorithm == "diloco" else self.optimizer]

    @property
    def staleness_bound(self) -> int:
        """``max_staleness``, else the algorithm's default, one more with overlapped rounds: a unit leased ahead
        starts a round late and should survive as many rounds that close without it as any other unit (with 2,
        a tiny GPT run's ahead unit was once dropped stale: 480 of its 512 samples applied)."""
        if self.max_staleness is not None:
            return self.max_staleness
        return DEFAULT_MAX_STALENESS[self.algorithm] + int(self.overlaps)

    @property
    def round_quorum(self) -> float:
        return self.quorum if self.quorum is not None else DEFAULT_QUORUM[self.algorithm]

    @property
    def overlaps(self) -> bool:
        """Whether a worker may lease one unit ahead of the open round (off by default where staleness 0 would drop
        every such result)."""
        if self.overlap is not None:
            return self.overlap
        return DEFAULT_OVERLAP[self.algorithm] and (self.max_staleness is None or self.max_staleness >= 1)

    @property
    def round_deadline(self) -> float:
        return self.round_seconds if self.round_seconds is not None else 3 * self.unit_seconds + 2

    @property
    def kind(self) -> str:
        return "inner-steps" if self.algorithm == "diloco" else "gradient"

    def public(self) -> dict[str, str | int | float | bool | None]:
        return self.model_dump()


def normalise_db_url(url: str) -> str:
    """``postgresql://`` and ``postgres://`` mean psycopg 3; a bare path means a SQLite file."""
    for prefix in ("postgresql://", "postgres://"):
        if url.startswith(prefix):
            return "postgresql+psycopg://" + url[len(prefix) :]
    if "://" not in url:
        return f"sqlite:///{Path(url).expanduser().resolve()}"
    return url


class ServeSettings(BaseModel):
    """One coordinator process: where its state lives and how it listens."""

    model_config = ConfigDict(extra="forbid")

    db: str
    store: str
    host: str = "127.0.0.1"
    port: int = Field(default=8470, ge=0, le=65_535)
    workers: int = Field(default=1, ge=1, le=64)
    data: str | None = None
    applier: bool = True  # run the applier loop (tests of the bare API turn it off)
    keep_checkpoints: int = Field(default=3, ge=1, le=1000)
    tick_seconds: float = Field(default=0.05, gt=0, le=10)
    #: async: the optimizer state is written at most this often (every version's weights are published at once;
    #: a restart replays the updates applied since the newest state). 0: with every version
    checkpoint_seconds: float = Field(default=5.0, ge=0, le=3600)
    #: the test-set evaluation: its BLAS and cpu-backend threads, and the most of the wall time it may take
    eval_threads: int = Field(default=2, ge=1, le=256)
    eval_share: float = Field(default=0.1, gt=0, le=1)
    #: HTTPS: uvicorn's TLS, with these PEM files (or terminate TLS at a reverse proxy: docs/PROTOCOL.md)
    tls_cert: str | None = None
    tls_key: str | None = None
    #: addresses (or CIDR networks) of reverse proxies whose X-Forwarded-For is believed; nobody else's is
    trusted_proxies: list[str] = Field(default_factory=list)
    #: requests per second (sustained) and burst, per client address and per token; 0 turns a limit off. Each
    #: serving process keeps its own buckets: with N processes a client may get up to N times these
    rate_per_address: float = Field(default=50.0, ge=0)
    burst_per_address: int = Field(default=200, ge=1)
    rate_per_token: float = Field(default=20.0, ge=0)
    burst_per_token: int = Field(default=60, ge=1)
    #: the organiser's token: read from this file if it exists when the run is made, else made and written there
    admin_token_file: str | None = None

    @model_validator(mode="after")
    def _tls(self) -> ServeSettings:
        if (self.tls_cert is None) != (self.tls_key is None):
            raise ValueError("TLS needs both --tls-cert and --tls-key")
        for f in (self.tls_cert, self.tls_key):
            if f is not None and not Path(f).is_file():
                raise ValueError(f"TLS file {f!r} does not exist")
        from .addresses import parse_networks

        parse_networks(self.trusted_proxies)  # names the bad entry
        return self

    @property
    def admin_token_path(self) -> Path:
        return Path(self.admin_token_file) if self.admin_token_file else Path(self.store) / "admin-token"

    @field_validator("db")
    @classmethod
    def _db(cls, v: str) -> str:
        return normalise_db_url(v)
