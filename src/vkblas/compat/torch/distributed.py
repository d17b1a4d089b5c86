"""``torch.distributed`` under ``vkblas run``: not available (``is_available()`` is False), as in a PyTorch build
without it. The names programs import at the top (nanoGPT's ``init_process_group``, ``destroy_process_group``)
exist so that such programs start, and raise when called. vkblas's own multi-GPU and volunteer training is
``vkblas distributed``."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NoReturn

from ..missing import missing, not_implemented

__getattr__ = missing("torch.distributed")


def is_available() -> bool:
    return False


def is_initialized() -> bool:
    return False


def _refuse(name: str) -> Callable[..., NoReturn]:
    def refuse(*args: Any, **kwargs: Any) -> NoReturn:
        raise NotImplementedError(not_implemented(f"torch.distributed.{name}") + "; see 'vkblas distributed'")

    refuse.__name__ = name
    return refuse


init_process_group = _refuse("init_process_group")
destroy_process_group = _refuse("destroy_process_group")
barrier = _refuse("barrier")
all_reduce = _refuse("all_reduce")
broadcast = _refuse("broadcast")
get_rank = _refuse("get_rank")
get_world_size = _refuse("get_world_size")
