"""The runner's view of one worker process: its name, device, process, pipe and mailboxes, and what the monitor
loop knows about it (set up? alive? last heard from?)."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from .transport import SharedArrays


@dataclass
class WorkerHandle:
    """The runner's view of one worker process."""

    name: str
    index: int
    device: str
    process: Any
    conn: Any
    mailboxes: list[SharedArrays]
    threads: int
    ready: bool = False  # said Hello
    alive: bool = True
    started_at: float = field(default_factory=time.monotonic)
    last_heard: float = field(default_factory=time.monotonic)
    exit_noticed_at: float | None = None
    error: str | None = None

    @property
    def pid(self) -> int | None:
        return self.process.pid

    @property
    def sentinel(self) -> int:
        return self.process.sentinel

    def send(self, msg: Any) -> bool:
        """Send ``msg``; False if the pipe is gone (the process died: its sentinel reports it)."""
        try:
            self.conn.send(msg)
            return True
        except (BrokenPipeError, ConnectionResetError, EOFError, OSError):
            return False
