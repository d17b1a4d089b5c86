"""What routes share: the coordinator's state (:class:`Context`, one per process) and the client's address."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import anyio
from fastapi import Request

from ...validation import Signature
from ..config import RunSpec
from ..db import Database
from ..store import Store
from .watch import RunWatch

VALIDATE_AT_ONCE = 2
#: threads the upload route may hold at once (the validating ones and a few doing their lease checks): the rest of
#: the uploads wait in the event loop, so a burst of them never takes the threads heartbeats and leases need
UPLOAD_THREADS = VALIDATE_AT_ONCE + 2


@dataclass
class Context:
    db: Database
    store: Store
    spec: RunSpec
    signature: Signature  # what an update must look like (the model's names, shapes, float32)
    upload_limit: int  # bytes
    flops_per_sample: float  # credit's FLOP estimate
    watch: RunWatch  # wakes long-polling lease requests when the run moves
    #: uploads validated at once (each holds one decoded tensor of its update); the others wait, on disk
    validating: threading.BoundedSemaphore = field(default_factory=lambda: threading.BoundedSemaphore(VALIDATE_AT_ONCE))
    #: the upload route's own threads (a limiter apart from the default one the other sync routes share)
    upload_threads: anyio.CapacityLimiter = field(default_factory=lambda: anyio.CapacityLimiter(UPLOAD_THREADS))
    #: called when this process records an update: wakes its applier now rather than at its next tick
    on_record: Callable[[], None] = field(default=lambda: None)

    @staticmethod
    def of(request: Request) -> Context:
        return request.app.state.ctx


def now() -> float:
    return time.time()


def client_address(request: Request) -> str:
    """The address the rate limiter saw (X-Forwarded-For believed only from a trusted proxy: ``addresses``)."""
    return str(request.scope.get("state", {}).get("client_address", "unknown"))
