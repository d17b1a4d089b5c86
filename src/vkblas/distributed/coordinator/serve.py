"""``vkblas distributed serve``: prepare the database (migrations) and the run, then serve under uvicorn."""

from __future__ import annotations

import json
import logging
import math
import os
import sys
import time

from . import accounts
from .config import RunSpec, ServeSettings
from .db import Database, migrate
from .models import Credential
from .runs import create_or_resume
from .store import Store

KEEP_ALIVE_S = 75  # seconds an idle connection stays open (nginx's default)
#: malloc arenas of the coordinator's process. glibc gives every thread that allocates while another does an arena
#: of its own (up to 8 per core) and keeps in it what is freed there: the upload threads (anyio's pool of 40), each
#: decoding a tensor, grew the coordinator by ~20 MiB a round, never returned (benchmarks/coordinator_scale.py: 0.96
#: model copies above the steady state after 5 rounds with gpt-50m, 0.27 with 2 arenas, at the same CPU time)
MALLOC_ARENAS = 2
_M_ARENA_MAX = -8  # glibc's malloc.h


def bound_malloc_arenas(n: int = MALLOC_ARENAS) -> bool:
    """Limit glibc's malloc to ``n`` arenas in this process (and, through ``MALLOC_ARENA_MAX``, in the processes
    it starts: uvicorn's workers); False where the C library is not glibc (nothing changes)."""
    import ctypes

    os.environ.setdefault("MALLOC_ARENA_MAX", str(n))
    try:
        return ctypes.CDLL("libc.so.6").mallopt(_M_ARENA_MAX, n) == 1
    except (OSError, AttributeError):
        return False


def prepare(settings: ServeSettings, spec: RunSpec) -> bool:
    """Migrate the database, create (or check) the run and make sure the organiser has an admin token; True when
    the run was created now."""
    db = Database(settings.db)
    try:
        migrate(db)
        created = create_or_resume(db, Store(settings.store), spec, settings.data)
        ensure_admin_token(db, settings)
        return created
    finally:
        db.dispose()


def ensure_admin_token(db: Database, settings: ServeSettings) -> None:
    """The first start reads the admin token from ``admin_token_path`` if the organiser put one there, else makes
    one and writes it there (mode 0600); later starts keep the stored hash."""
    with db.session() as s:
        if s.get(Credential, accounts.ADMIN) is not None:
            return
        path = settings.admin_token_path
        if path.is_file():
            token = path.read_text().strip()
        else:
            token = accounts.new_admin_token()
            path.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "w") as f:
                f.write(token + "\n")
            print(f"vkblas coordinator: the organiser's admin token is in {path}", file=sys.stderr, flush=True)
        accounts.set_admin_token(s, token=token, now=time.time())


def serve(settings: ServeSettings, spec: RunSpec) -> int:
    import uvicorn

    from .app import SETTINGS_ENV, app_from_env, create_app

    bound_malloc_arenas()  # before the threads start
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s[%(process)d] %(message)s")
    logging.getLogger("alembic").setLevel(logging.WARNING)
    created = prepare(settings, spec)
    where = settings.db.split("@")[-1]  # no password in the log
    scheme = "https" if settings.tls_cert else "http"
    print(
        f"vkblas coordinator: {'new' if created else 'resumed'} run ({spec.algorithm}, {spec.model} on {spec.dataset}),"
        f" database {where}, store {settings.store}; serving on {scheme}://{settings.host}:{settings.port}"
        f" with {settings.workers} process(es)",
        file=sys.stderr,
        flush=True,
    )
    # uvicorn's own X-Forwarded-For handling is off: the app believes it only from --trusted-proxy (addresses.py)
    # keep-alive outlasts the heartbeat interval (a quarter of the lease): with uvicorn's 5 s the server closed a
    # worker's idle connection just as its next heartbeat reused it (a reset, retried by the client)
    keep_alive = max(KEEP_ALIVE_S, math.ceil(spec.lease_seconds))
    opts = dict(host=settings.host, port=settings.port, log_level="warning", proxy_headers=False,
                ssl_certfile=settings.tls_cert, ssl_keyfile=settings.tls_key,
                timeout_keep_alive=keep_alive)  # fmt: skip
    if settings.workers == 1:
        uvicorn.run(create_app(settings), **opts)
    else:
        os.environ[SETTINGS_ENV] = json.dumps(settings.model_dump())
        target = f"{app_from_env.__module__}:{app_from_env.__name__}"
        uvicorn.run(target, factory=True, workers=settings.workers, **opts)
    return 0
