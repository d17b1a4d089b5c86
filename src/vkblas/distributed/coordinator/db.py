"""The database: an engine for SQLite (a file in WAL mode, the embedded default) or PostgreSQL (by URL), sessions,
and the Alembic migrations applied at start.

SQLite with several writers (threads or uvicorn processes) fails with "database is locked" when a transaction that
began as a reader tries to write (a read-to-write upgrade fails at once, whatever busy_timeout says). So every
writing transaction here starts with ``BEGIN IMMEDIATE`` (it takes the write lock up front and waits for it up to
the busy timeout), and read-only sessions (:func:`read_session`) start a plain deferred ``BEGIN``, which WAL lets
run beside a writer. Writers of one process also queue on a lock of their own before ``BEGIN IMMEDIATE``: SQLite's
busy handler polls with sleeps growing to 100 ms, so under load a waiting writer slept past the moment the lock
was free; a Python lock hands it over at once, and the busy timeout is left to arbitrate between processes. On
PostgreSQL transactions are READ COMMITTED; the few read-modify-write sequences that must not interleave lock their
row (``SELECT ... FOR UPDATE``) or are single conditional UPDATEs. Locks are taken run, then lease, then unit,
then worker rows (in id order); where two transactions still wait on each other (PostgreSQL detects the cycle
and aborts one, SQLSTATE 40P01), :meth:`Database.transaction` runs the loser again, as PostgreSQL's manual asks of
applications, so a request is not failed for it.
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from threading import RLock
from typing import TypeVar

from sqlalchemy import Engine, create_engine, event
from sqlalchemy.exc import DBAPIError
from sqlalchemy.orm import Session, sessionmaker

SQLITE_BUSY_TIMEOUT_S = 60.0
HEAD = "0005"
#: SQLSTATEs of a transaction PostgreSQL aborted for another's sake: running it again is the documented remedy
RETRIED_SQLSTATES = {"40P01": "deadlock detected", "40001": "serialization failure"}
TRANSACTION_ATTEMPTS = 5
log = logging.getLogger("vkblas.coordinator")
T = TypeVar("T")


def retried_failure(e: BaseException) -> str | None:
    """What aborted ``e``'s transaction if running it again may succeed (a deadlock's loser), else None."""
    if not isinstance(e, DBAPIError):
        return None
    return RETRIED_SQLSTATES.get(getattr(e.orig, "sqlstate", None) or "")


def make_engine(url: str) -> Engine:
    """An engine for ``url`` (already normalised by ``config.normalise_db_url``)."""
    if url.startswith("sqlite"):
        engine = create_engine(url, connect_args={"timeout": SQLITE_BUSY_TIMEOUT_S, "check_same_thread": False})

        @event.listens_for(engine, "connect")
        def _on_connect(dbapi_conn, _record) -> None:  # type: ignore[no-untyped-def]
            dbapi_conn.isolation_level = None  # let the BEGIN below be the only one pysqlite sends
            cur = dbapi_conn.cursor()
            cur.execute("PRAGMA journal_mode=WAL")
            cur.execute("PRAGMA synchronous=NORMAL")  # WAL + NORMAL: a crashed process loses nothing committed
            cur.execute("PRAGMA foreign_keys=ON")
            cur.close()

        @event.listens_for(engine, "begin")
        def _on_begin(conn) -> None:  # type: ignore[no-untyped-def]
            conn.exec_driver_sql("BEGIN" if conn.get_execution_options().get("readonly") else "BEGIN IMMEDIATE")

        return engine
    if url.startswith("postgresql"):
        return create_engine(url, pool_pre_ping=True, pool_size=5, max_overflow=5)
    raise ValueError(f"unsupported database URL {url!r}: use a SQLite path/URL or postgresql://...")


class Database:
    """An engine and its session factories."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.engine = make_engine(url)
        self.dialect = self.engine.dialect.name
        self._writer = sessionmaker(self.engine, expire_on_commit=False)
        self._reader = sessionmaker(self.engine.execution_options(readonly=True), expire_on_commit=False)
        self._write_lock = RLock() if self.dialect == "sqlite" else None  # reentrant: a nested writer still works

    @contextmanager
    def session(self) -> Iterator[Session]:
        """A writing transaction: committed on success, rolled back on an exception."""
        if self._write_lock is None:
            with self._writer.begin() as s:
                yield s
            return
        with self._write_lock, self._writer.begin() as s:
            yield s

    def transaction(self, work: Callable[[Session], T], *, attempts: int = TRANSACTION_ATTEMPTS) -> T:
        """``work(session)`` in a writing transaction, run again (up to ``attempts`` times in all, after a short
        random pause) when the database aborted it for a deadlock or a serialization failure. ``work`` must do
        all its reading inside: objects loaded by a failed attempt are not reused."""
        for attempt in range(1, attempts + 1):
            try:
                with self.session() as s:
                    return work(s)
            except DBAPIError as e:
                why = retried_failure(e)
                if why is None or attempt == attempts:
                    raise
                log.info("transaction aborted (%s); running it again (attempt %d of %d)", why, attempt + 1, attempts)
                time.sleep(random.uniform(0.0, 0.005 * 2**attempt))  # apart again: the same cycle is less likely
        raise AssertionError("unreachable")

    @contextmanager
    def read_session(self) -> Iterator[Session]:
        """A read-only transaction (never blocks a writer on SQLite's WAL)."""
        with self._reader() as s, s.begin():
            yield s

    def dispose(self) -> None:
        self.engine.dispose()


def alembic_config(connection=None):  # type: ignore[no-untyped-def]
    from alembic.config import Config

    cfg = Config()
    cfg.set_main_option("script_location", str(Path(__file__).parent / "migrations"))
    cfg.attributes["connection"] = connection
    return cfg


def migrate(db: Database, revision: str = "head") -> None:
    """Apply the migrations up to ``revision`` (idempotent: an up-to-date database is left as is); ``"base"``
    undoes them all."""
    _run_alembic(db, "downgrade" if revision == "base" else "upgrade", revision)


def downgrade(db: Database, revision: str) -> None:
    """Undo the migrations above ``revision``."""
    _run_alembic(db, "downgrade", revision)


def _run_alembic(db: Database, direction: str, revision: str) -> None:
    from alembic import command

    with db.engine.connect() as conn:
        sqlite = conn.dialect.name == "sqlite"
        # SQLite's batch mode copies a table and drops the old one, which its foreign keys refuse; the pragma is
        # only honoured outside a transaction, so it goes to the driver's connection before Alembic begins one
        if sqlite:
            conn.connection.driver_connection.execute("PRAGMA foreign_keys=OFF")
        try:
            getattr(command, direction)(alembic_config(conn), revision)
            conn.commit()
        finally:
            if sqlite:
                conn.connection.driver_connection.execute("PRAGMA foreign_keys=ON")


def current_revision(db: Database) -> str | None:
    from alembic.runtime.migration import MigrationContext

    with db.engine.connect() as conn:
        return MigrationContext.configure(conn).get_current_revision()
