"""What routes share: the coordinator's state (:class:`Context`, one per process) and the worker-token
dependency."""

from __future__ import annotations

import time
from dataclasses import dataclass

from fastapi import Request

from ...validation import Signature
from ..config import RunSpec
from ..db import Database
from ..store import Store


@dataclass
class Context:
    db: Database
    store: Store
    spec: RunSpec
    signature: Signature  # what an update must look like (the model's names, shapes, float32)
    upload_limit: int  # bytes

    @staticmethod
    def of(request: Request) -> Context:
        return request.app.state.ctx


def now() -> float:
    return time.time()
