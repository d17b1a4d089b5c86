"""``torch.amp`` under ``vkblas run``: ``autocast`` and ``GradScaler``.

vkblas has no mixed precision yet, so ``autocast`` is a context (and decorator) inside which everything runs in
float32 as usual; it says so once on stderr when it is asked for a lower precision. ``GradScaler`` does what
PyTorch's does — scale the loss, unscale the gradients, skip steps whose gradients are not finite, grow and shrink
the scale — which in float32 changes no result (the scales are powers of two). Checking the gradients for inf/NaN
reads one number back from the device per step.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable
from typing import Any

from ...autograd import no_grad
from ...ops.shape import stack
from ...tensor import Tensor
from ..cuda_map import available
from ..missing import missing
from ..notice import say_once

__getattr__ = missing("torch.amp")
_FLOAT32_MAX = 3.4028234663852886e38


class autocast(contextlib.ContextDecorator):  # noqa: N801 - PyTorch's name
    def __init__(
        self, device_type: str = "cuda", dtype: Any = None, enabled: bool = True, cache_enabled: bool | None = None
    ) -> None:
        self.device_type, self.dtype, self.enabled = device_type, dtype, enabled

    def __enter__(self) -> None:
        if self.enabled:
            say_once("autocast", "torch.autocast: vkblas has no mixed precision yet; the block runs in float32")

    def __exit__(self, *exc: object) -> None:
        pass


def _grads(optimizer: Any) -> list[Tensor]:
    return [p.grad for g in optimizer.param_groups for p in g["params"] if p.grad is not None]


class GradScaler:
    """PyTorch's dynamic loss scaling (``torch.amp.GradScaler``), with its rules and its errors."""

    def __init__(
        self,
        device: str = "cuda",
        init_scale: float = 2.0**16,
        growth_factor: float = 2.0,
        backoff_factor: float = 0.5,
        growth_interval: int = 2000,
        enabled: bool = True,
    ) -> None:
        if enabled and device == "cuda" and not available():
            say_once("gradscaler", "torch.amp.GradScaler is enabled, but CUDA is not available: disabling it")
            enabled = False
        self._enabled, self._scale, self._growth_tracker = enabled, float(init_scale), 0
        self._growth_factor, self._backoff_factor, self._growth_interval = (
            growth_factor,
            backoff_factor,
            growth_interval,
        )
        self._states: dict[int, dict[str, Any]] = {}

    def is_enabled(self) -> bool:
        return self._enabled

    def get_scale(self) -> float:
        return self._scale if self._enabled else 1.0

    def scale(self, outputs: Any) -> Any:
        if not self._enabled:
            return outputs
        if isinstance(outputs, Tensor):
            return outputs * self._scale
        if isinstance(outputs, Iterable):
            return type(outputs)(self.scale(o) for o in outputs)  # type: ignore[call-arg]
        raise ValueError("outputs must be a Tensor or an iterable of Tensors")

    def _state(self, optimizer: Any) -> dict[str, Any]:
        return self._states.setdefault(id(optimizer), {"stage": "ready", "finite": None})

    def unscale_(self, optimizer: Any) -> None:
        if not self._enabled:
            return
        state = self._state(optimizer)
        if state["stage"] == "unscaled":
            raise RuntimeError("unscale_() has already been called on this optimizer since the last update().")
        if state["stage"] == "stepped":
            raise RuntimeError("unscale_() is being called after step().")
        grads = _grads(optimizer)
        with no_grad():
            for g in grads:
                g.mul_(1.0 / self._scale)
            # |g| <= max is False for inf and NaN alike; all of it stays on the device until step() reads it
            checks = [(g.abs() <= _FLOAT32_MAX).all() for g in grads]
        state["finite"] = stack(checks).all() if checks else None
        state["stage"] = "unscaled"

    def step(self, optimizer: Any, *args: Any, **kwargs: Any) -> Any:
        if not self._enabled:
            return optimizer.step(*args, **kwargs)
        state = self._state(optimizer)
        if state["stage"] == "stepped":
            raise RuntimeError("step() has already been called since the last update().")
        if state["stage"] == "ready":
            self.unscale_(optimizer)
        state["found_inf"] = state["finite"] is not None and not bool(state["finite"].item())
        state["stage"] = "stepped"
        return None if state["found_inf"] else optimizer.step(*args, **kwargs)

    def update(self, new_scale: float | Tensor | None = None) -> None:
        if not self._enabled:
            return
        if new_scale is not None:
            self._scale = float(new_scale)
        else:
            found = [s["found_inf"] for s in self._states.values() if "found_inf" in s]
            if not found:
                raise AssertionError("No inf checks were recorded prior to update.")
            if any(found):
                self._scale *= self._backoff_factor
                self._growth_tracker = 0
            else:
                self._growth_tracker += 1
                if self._growth_tracker == self._growth_interval:
                    self._scale *= self._growth_factor
                    self._growth_tracker = 0
        self._states.clear()

    def state_dict(self) -> dict[str, Any]:
        if not self._enabled:
            return {}
        return {
            "scale": self._scale,
            "growth_factor": self._growth_factor,
            "backoff_factor": self._backoff_factor,
            "growth_interval": self._growth_interval,
            "_growth_tracker": self._growth_tracker,
        }

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        if not self._enabled:
            return
        self._scale = float(state_dict["scale"])
        self._growth_factor, self._backoff_factor = state_dict["growth_factor"], state_dict["backoff_factor"]
        self._growth_interval, self._growth_tracker = state_dict["growth_interval"], state_dict["_growth_tracker"]
