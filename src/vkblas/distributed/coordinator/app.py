"""The coordinator's ASGI app: :func:`create_app` (one per process; uvicorn's worker processes each call
:func:`app_from_env`). Its lifespan opens the database and the store, reads the run from the database, and starts
this process's :class:`~.applier.Applier` loop in a thread (only one process's loop works at a time)."""

from __future__ import annotations

import json
import logging
import math
import os
import threading
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import FastAPI
from sqlalchemy import select
from starlette.types import Scope

from ...version import __version__
from ..protocol import MAX_JSON_BODY, PART_BYTES, UPLOAD_SLACK, ModelManifest
from . import checkpoints, trust
from .addresses import parse_networks
from .api import admin, board, files, leases, status, workers
from .api.deps import Context
from .api.errors import BodyLimit, install
from .api.limits import RateLimit
from .api.watch import RunWatch
from .applier import Applier
from .config import ServeSettings
from .db import Database
from .models import Checkpoint
from .ratelimit import RateLimiter
from .runs import load_spec
from .store import Store

SETTINGS_ENV = "VKBLAS_COORDINATOR_SETTINGS"
#: how long shutdown waits for the applier's pass in progress before leaving it be
APPLIER_STOP_S = 30.0
log = logging.getLogger("vkblas.coordinator")


def _context(settings: ServeSettings) -> Context:
    db, store = Database(settings.db), Store(settings.store)
    spec = load_spec(db)
    with db.read_session() as s:
        cp = s.scalars(select(Checkpoint).order_by(Checkpoint.version.desc()).limit(1)).one()
        # the shapes from the shards' headers: no tensor is read
        shapes = checkpoints.StoredWeights(store, ModelManifest.model_validate_json(cp.manifest)).shapes
    values = sum(math.prod(s) for s in shapes.values())
    model_bytes = 4 * values
    # fp32 is the largest codec; int8 with tiny blocks adds up to 4 bytes of scale per value: twice covers both
    return Context(
        db=db,
        store=store,
        spec=spec,
        signature={k: (shape, "float32") for k, shape in shapes.items()},
        upload_limit=2 * model_bytes + UPLOAD_SLACK,
        flops_per_sample=trust.flops_per_sample(values),
        watch=RunWatch(db),
    )


def create_app(settings: ServeSettings) -> FastAPI:
    holder: dict[str, Context] = {}

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        ctx = holder["ctx"] = app.state.ctx = _context(settings)
        ctx.watch.start()
        stop, thread = threading.Event(), None
        if settings.applier:
            applier = Applier(
                ctx.db,
                ctx.store,
                ctx.spec,
                data=settings.data,
                keep_checkpoints=settings.keep_checkpoints,
                checkpoint_seconds=settings.checkpoint_seconds,
                eval_threads=settings.eval_threads,
                eval_share=settings.eval_share,
                on_publish=ctx.watch.poke_threadsafe,
            )
            ctx.on_record = applier.poke
            thread = threading.Thread(
                target=applier.run, args=(stop, settings.tick_seconds), name="applier", daemon=True
            )
            thread.start()
        try:
            yield
        finally:
            await ctx.watch.stop()
            stop.set()
            if thread is not None:
                thread.join(timeout=APPLIER_STOP_S)
                if thread.is_alive():
                    # its pass is still stepping the model: recording that state now could store a half-stepped
                    # optimizer state, so nothing is recorded; its leader lease runs out and a restart replays
                    log.warning("applier: its pass is still running after %.0f s; its state is not recorded now "
                                "(a restart replays from the newest state)", APPLIER_STOP_S)  # fmt: skip
                else:
                    applier.release()
            ctx.db.dispose()

    app = FastAPI(
        title="vkblas coordinator",
        version=__version__,
        summary="Training one model on volunteers' GPUs: protocol v1 (see docs/PROTOCOL.md)",
        lifespan=lifespan,
    )
    install(app)
    for module in (workers, leases, files, status, board, admin):
        app.include_router(module.router)

    def limit_for(scope: Scope) -> int:
        ctx = holder.get("ctx")
        if scope.get("method") == "PUT" and ctx is not None:
            path = scope.get("path", "")
            if path.endswith("/result"):
                return ctx.upload_limit
            if path.startswith("/v1/leases/") and "/parts/" in path:
                return min(PART_BYTES, ctx.upload_limit)
        return MAX_JSON_BODY

    def streamed(scope: Scope) -> bool:  # uploads: written to the store's directory as they arrive, never held
        path = scope.get("path", "")
        return (
            scope.get("method") == "PUT"
            and path.startswith("/v1/leases/")
            and (path.endswith("/result") or "/parts/" in path)
        )

    app.add_middleware(BodyLimit, limit_for=limit_for, streamed=streamed)
    # added last, so it runs first: a flood is refused before its body is read
    app.add_middleware(
        RateLimit,
        per_address=RateLimiter(settings.rate_per_address, settings.burst_per_address),
        per_token=RateLimiter(settings.rate_per_token, settings.burst_per_token),
        proxies=parse_networks(settings.trusted_proxies),
    )
    return app


def app_from_env() -> FastAPI:
    """The app of a uvicorn worker process: settings from ``$VKBLAS_COORDINATOR_SETTINGS`` (JSON)."""
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s[%(process)d] %(message)s")
    return create_app(ServeSettings.model_validate(json.loads(os.environ[SETTINGS_ENV])))
