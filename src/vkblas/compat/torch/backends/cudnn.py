"""``torch.backends.cudnn`` under ``vkblas run`` (see the package's documentation)."""

from __future__ import annotations

from ...missing import missing

__getattr__ = missing("torch.backends.cudnn")

enabled = True
benchmark = False
deterministic = False
allow_tf32 = True


def is_available() -> bool:
    return False


def version() -> None:
    return None
