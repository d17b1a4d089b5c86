"""What ``vkblas run`` says on stderr about a mapping, once per run (``vkblas run: ...``)."""

from __future__ import annotations

import sys

_said: set[str] = set()
quiet = False  # spawned children of a run stay quiet: the parent said it already


def say_once(key: str, message: str) -> None:
    if quiet or key in _said:
        return
    _said.add(key)
    print(f"vkblas run: {message}", file=sys.stderr, flush=True)


def reset(quiet_now: bool = False) -> None:
    """A new run: everything may be said once again (nothing, for ``quiet_now``)."""
    global quiet
    _said.clear()
    quiet = quiet_now
