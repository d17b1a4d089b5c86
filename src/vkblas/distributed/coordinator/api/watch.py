"""Long polling of ``POST /v1/leases?wait=S``: a request that would be told ``wait`` is held (at most ``S``
seconds) and asked again when the run moves, instead of every worker polling every 0.1 s.

One task per process reads the run's version and state and the number of open units every ``every`` seconds (one
small query, however many requests wait) and wakes all waiters when they change; with several processes each
watches the database, so a change made by another process is seen within one tick.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging

from sqlalchemy import func, select

from ..db import Database
from ..models import RUN_ID, Run, Unit

log = logging.getLogger("vkblas.coordinator")


class RunWatch:
    def __init__(self, db: Database, every: float = 0.1) -> None:
        self.db, self.every = db, every
        self._changed = asyncio.Event()
        self._task: asyncio.Task | None = None
        self._last: tuple | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    def _read(self) -> tuple:
        with self.db.read_session() as s:
            run = s.get(Run, RUN_ID)
            opened = s.scalar(select(func.count()).select_from(Unit).where(Unit.status == "open"))
            return (run.version, run.state, run.samples_leased, opened) if run is not None else ()

    async def _watch(self) -> None:
        failing = False
        while True:
            try:
                now = await asyncio.to_thread(self._read)
                if failing:
                    log.info("run watch: reading the run works again")
                    failing = False
                if now != self._last:
                    self._last = now
                    self.poke()
            except Exception:  # the database may be away for a moment (restart): waiters time out meanwhile
                if not failing:  # once an outage, not ten tracebacks a second until it ends
                    log.exception("run watch: reading the run failed; waiting requests time out until it works")
                failing = True
            await asyncio.sleep(self.every)

    def poke(self) -> None:
        """Wake every waiter (from the event loop's thread)."""
        self._changed.set()
        self._changed = asyncio.Event()

    def poke_threadsafe(self) -> None:
        """:meth:`poke` from another thread (the applier's, when it publishes a version)."""
        if self._loop is not None:
            with contextlib.suppress(RuntimeError):  # the loop closed (shutting down): nobody waits any more
                self._loop.call_soon_threadsafe(self.poke)

    async def wait(self, timeout: float) -> None:
        """Until the run changes or ``timeout`` seconds pass."""
        event = self._changed
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(event.wait(), timeout)

    def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._task = self._loop.create_task(self._watch())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
