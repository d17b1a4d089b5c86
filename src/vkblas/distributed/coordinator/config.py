"""What defines a coordinated run (:class:`RunSpec`: the options of ``vkblas train`` plus the distributed ones) and
how a coordinator process is set up (:class:`ServeSettings`). Both are pydantic models: bounded fields, errors that
name the value. The spec is stored in the database, so every coordinator process reads the same one."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator, model_validator

from ...training.fit import DATASETS, DEFAULT_LR, OPTIMIZERS
from ...training.models import MODELS

DEFAULT_QUORUM = {"sync": 1.0, "async": 1.0, "diloco": 0.75}
DEFAULT_MAX_STALENESS = {"sync": 1, "async": 8, "diloco": 2}


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
    lease_seconds: float = Field(default=30.0, ge=1, le=86_400)
    eval_seconds: float = Field(default=10.0, gt=0, le=86_400)
    max_norm: float | None = Field(default=None, gt=0)
    shard_samples: int = Field(default=10_000, ge=1, le=1_000_000)

    @field_validator("dataset", "model")
    @classmethod
    def _known(cls, v: str, info: ValidationInfo) -> str:
        choices = DATASETS if info.field_name == "dataset" else MODELS
        if v not in choices:
            raise ValueError(f"unknown {info.field_name} {v!r}: choose from {', '.join(choices)}")
        return v

    @model_validator(mode="after")
    def _optimizer(self) -> RunSpec:
        assert self.optimizer in OPTIMIZERS
        return self

    # resolved defaults, per algorithm
    @property
    def learning_rate(self) -> float:
        return self.lr if self.lr is not None else DEFAULT_LR["adamw" if self.algorithm == "diloco" else self.optimizer]

    @property
    def staleness_bound(self) -> int:
        return self.max_staleness if self.max_staleness is not None else DEFAULT_MAX_STALENESS[self.algorithm]

    @property
    def round_quorum(self) -> float:
        return self.quorum if self.quorum is not None else DEFAULT_QUORUM[self.algorithm]

    @property
    def round_deadline(self) -> float:
        return self.round_seconds if self.round_seconds is not None else 3 * self.unit_seconds + 2

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

    @field_validator("db")
    @classmethod
    def _db(cls, v: str) -> str:
        return normalise_db_url(v)
