"""``torch.nn.parallel`` under ``vkblas run``: the classes exist so that programs importing them start; making one
raises (vkblas's own multi-GPU training is ``vkblas distributed``)."""

from __future__ import annotations

from typing import Any, NoReturn

from ...missing import missing, not_implemented

__getattr__ = missing("torch.nn.parallel")


class DistributedDataParallel:
    def __init__(self, *args: Any, **kwargs: Any) -> NoReturn:
        raise NotImplementedError(not_implemented("torch.nn.parallel.DistributedDataParallel"))


class DataParallel:
    def __init__(self, *args: Any, **kwargs: Any) -> NoReturn:
        raise NotImplementedError(not_implemented("torch.nn.parallel.DataParallel"))
