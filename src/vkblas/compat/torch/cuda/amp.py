"""``torch.cuda.amp`` (PyTorch's older spelling of ``torch.amp`` for CUDA) under ``vkblas run``."""

from __future__ import annotations

from typing import Any

from ...missing import missing
from .. import amp as _amp

__getattr__ = missing("torch.cuda.amp")


class autocast(_amp.autocast):  # noqa: N801
    def __init__(self, enabled: bool = True, dtype: Any = None, cache_enabled: bool | None = True) -> None:
        super().__init__("cuda", dtype, enabled, cache_enabled)


class GradScaler(_amp.GradScaler):
    def __init__(
        self,
        init_scale: float = 2.0**16,
        growth_factor: float = 2.0,
        backoff_factor: float = 0.5,
        growth_interval: int = 2000,
        enabled: bool = True,
    ) -> None:
        super().__init__("cuda", init_scale, growth_factor, backoff_factor, growth_interval, enabled)
