"""``vkblas distributed serve``: prepare the database (migrations) and the run, then serve under uvicorn."""

from __future__ import annotations

import json
import logging
import os
import sys

from .config import RunSpec, ServeSettings
from .db import Database, migrate
from .runs import create_or_resume
from .store import Store


def prepare(settings: ServeSettings, spec: RunSpec) -> bool:
    """Migrate the database and create (or check) the run; True when the run was created now."""
    db = Database(settings.db)
    try:
        migrate(db)
        return create_or_resume(db, Store(settings.store), spec, settings.data)
    finally:
        db.dispose()


def serve(settings: ServeSettings, spec: RunSpec) -> int:
    import uvicorn

    from .app import SETTINGS_ENV, app_from_env, create_app

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s[%(process)d] %(message)s")
    logging.getLogger("alembic").setLevel(logging.WARNING)
    created = prepare(settings, spec)
    where = settings.db.split("@")[-1]  # no password in the log
    print(
        f"vkblas coordinator: {'new' if created else 'resumed'} run ({spec.algorithm}, {spec.model} on {spec.dataset}),"
        f" database {where}, store {settings.store}; serving on http://{settings.host}:{settings.port}"
        f" with {settings.workers} process(es)",
        file=sys.stderr,
        flush=True,
    )
    if settings.workers == 1:
        uvicorn.run(create_app(settings), host=settings.host, port=settings.port, log_level="warning")
    else:
        os.environ[SETTINGS_ENV] = json.dumps(settings.model_dump())
        target = f"{app_from_env.__module__}:{app_from_env.__name__}"
        uvicorn.run(
            target, factory=True, host=settings.host, port=settings.port, workers=settings.workers, log_level="warning"
        )
    return 0
