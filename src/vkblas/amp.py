"""Mixed precision, as ``torch.amp``: :class:`autocast` runs chosen ops in float16, :class:`GradScaler` scales the
loss so that float16 gradients do not underflow, and skips the steps whose gradients overflowed.

>>> import vkblas
>>> lin = vkblas.nn.Linear(4, 3).to("cpu")
>>> with vkblas.amp.autocast("cpu", dtype=vkblas.float16):
...     y = lin(vkblas.ones(2, 4, device="cpu"))
...     loss = y.sum()
>>> y.dtype, loss.dtype
(vkblas.float16, vkblas.float32)
>>> loss.backward()
>>> lin.weight.grad.dtype
vkblas.float32

**What autocast changes** (``ops/autocast.py`` has the lists): inside the region the matrix products (``matmul`` /
``mm`` / ``bmm`` / ``@``, ``F.linear``, ``conv1d`` / ``conv2d`` / ``conv_transpose2d``,
``scaled_dot_product_attention``) take their float32 inputs cast to float16 and return float16; ``softmax``,
``log_softmax``, ``layer_norm``, ``normalize``, the losses (``cross_entropy``, ``nll_loss``, ``mse_loss``,
``l1_loss``, ``binary_cross_entropy_with_logits``), ``sum`` / ``prod`` / ``cumsum`` / ``cumprod``, ``softplus`` and
``exp log pow reciprocal rsqrt sinh cosh tan asin acos erfinv`` take float16 inputs cast to float32 and return
float32 (``mean`` is not on PyTorch's list and is not here: a float16 mean stays float16, summed in float32);
``binary_cross_entropy`` refuses, as PyTorch's does. Every other op runs in the dtypes it is given. Parameters stay
float32 (the master weights), their gradients are float32 (each cast's backward casts the gradient back), and the
optimizer state is float32; the backward pass itself runs with autocast off, whatever context calls it.

**What is computed in float16, exactly.** Storage of the lowered ops' inputs and outputs is float16.

* Matrix products on Vulkan (linear, matmul, and the convolutions: implicit GEMMs on the same template, or unfold
  + matmul for grouped ones): products of float16
  operands; for large problems (the default ``*.h16`` GEMM variants, chosen when min(M, N) >= 64 and M·N·batch >=
  64·64·128) the products and their partial sums *within each 16-deep K tile* are computed in float16 and added
  into float32 accumulators once per tile; smaller problems multiply and accumulate in float32. With
  ``VKBLAS_AUTOTUNE`` the tuner may pick either kind per shape. The result is rounded to float16 once.
* Matrix products on the cpu: float16 inputs widened to float32, multiplied and accumulated in float32 (BLAS),
  the result rounded to float16.
* ``scaled_dot_product_attention``: float16 q, k, v and output; scores, softmax and accumulation in float32
  arithmetic on both devices.
* The float32 ops above: float32 throughout. Reductions of float16 tensors outside them (``mean``, ``max``) and
  the fused normalisation kernels accumulate in float32 and round once on store.
* Elementwise ops outside the lists on float16 tensors (``gelu``, ``add``, ``mul``, dropout ...): float16
  arithmetic on Vulkan (WGSL ``f16``); on the cpu numpy rounds each op's result to float16.

**Devices.** ``device_type`` is ``"vulkan"`` or ``"cpu"`` (PyTorch's ``"cuda"`` is ``"vulkan"`` under
``vkblas run``); the only lower-precision dtype is float16 (vkblas has no bfloat16), which is also the default on
the cpu, where PyTorch's is bfloat16. A Vulkan device without the ``shader-f16`` feature cannot store float16:
entering ``autocast("vulkan")`` there raises (``is_autocast_available`` tells beforehand), and a lowered op on any
such device raises too; nothing silently runs in float32.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterable
from typing import Any

from .autograd import autocast_mode, no_grad
from .backend.base import UnsupportedError
from .device import resolve as _resolve
from .dtypes import DType, float16, to_dtype
from .ops._core import foreach
from .ops.autocast import where
from .ops.shape import stack
from .tensor import Tensor

DEVICE_TYPES = ("vulkan", "cpu")
_FLOAT32_MAX = 3.4028234663852886e38

__all__ = ["GradScaler", "autocast", "get_autocast_dtype", "is_autocast_available", "is_autocast_enabled"]


def _check_type(device_type: str) -> str:
    if device_type not in DEVICE_TYPES:
        raise ValueError(
            f"autocast: device_type must be one of {', '.join(map(repr, DEVICE_TYPES))} (a type, without an index), "
            f"got {device_type!r}"
        )
    return device_type


def _f16_backend_problem(device_type: str) -> str | None:
    """Why float16 cannot run on the default device of ``device_type``, or None when it can."""
    backend = _resolve(device_type)
    if backend.supports(float16):
        return None
    why = " has no shader-f16 feature, so it" if device_type == "vulkan" else ""
    return f"{where(backend)}{why} cannot store or compute float16"


def is_autocast_available(device_type: str) -> bool:
    """Whether ``autocast(device_type)`` can be entered: float16 works on that type's default device."""
    return _f16_backend_problem(_check_type(device_type)) is None


def is_autocast_enabled(device_type: str = "vulkan") -> bool:
    """Whether autocast is on for ``device_type`` here (in this thread)."""
    return _check_type(device_type) in autocast_mode.dtypes


def get_autocast_dtype(device_type: str) -> DType:
    """The dtype autocast lowers to for ``device_type`` (float16: the only one)."""
    return autocast_mode.dtypes.get(_check_type(device_type), float16)


class autocast(contextlib.ContextDecorator):  # noqa: N801 - PyTorch's name
    """``with autocast("vulkan"):`` (or ``@autocast("vulkan")``): the ops of the region compute as the module
    docstring says. ``enabled=False`` turns autocast off for ``device_type`` inside an enabled region;
    ``cache_enabled`` (default True) casts each float32 parameter once per outermost region, not at every use.
    Regions nest; the settings are per thread, as PyTorch's."""

    def __init__(
        self,
        device_type: str,
        dtype: DType | str | None = None,
        enabled: bool = True,
        cache_enabled: bool | None = None,
    ) -> None:
        self.device = _check_type(device_type)
        self.fast_dtype = float16 if dtype is None else to_dtype(dtype)
        if enabled and self.fast_dtype is not float16:
            raise ValueError(
                f"autocast: vkblas's lower precision is float16 (it has no bfloat16), got dtype {self.fast_dtype!r}"
            )
        self._enabled = bool(enabled)
        self._cache_enabled = cache_enabled

    def __enter__(self) -> None:
        if self._enabled and (why := _f16_backend_problem(self.device)) is not None:
            raise UnsupportedError(
                f"autocast(device_type={self.device!r}, dtype=float16): {why}. Train in float32 here "
                "(no autocast, or enabled=False), or pick a device that has it (vkblas info lists the features)"
            )
        m = autocast_mode
        m.saved.append((m.dtypes, m.cache_enabled))  # the thread's: one decorated function runs in many threads
        dtypes = dict(m.dtypes)
        if self._enabled:
            dtypes[self.device] = self.fast_dtype
            m.depth += 1
        else:
            dtypes.pop(self.device, None)
        m.dtypes = dtypes
        if self._cache_enabled is not None:
            m.cache_enabled = bool(self._cache_enabled)

    def __exit__(self, *exc: object) -> None:
        m = autocast_mode
        m.dtypes, m.cache_enabled = m.saved.pop()
        if self._enabled:
            m.depth -= 1
            if m.depth == 0:  # PyTorch empties its cast cache on leaving the outermost region
                m.cache.clear()


# ---------------------------------------------------------------- dynamic loss scaling
def _grads(optimizer: Any) -> list[Tensor]:
    return [p.grad for g in optimizer.param_groups for p in g["params"] if p.grad is not None]


class GradScaler:
    """PyTorch's dynamic loss scaling (``torch.amp.GradScaler``), with its rules and its errors.

    ``scale(loss)`` multiplies by the scale (2**16 at first); ``unscale_(optimizer)`` divides the optimizer's
    gradients by it in place and checks them for inf / NaN; ``step(optimizer)`` unscales if that was not done, then
    steps unless a gradient was not finite (the step is skipped); ``update()`` halves the scale after a skipped
    step (``backoff_factor``) and doubles it (``growth_factor``) after ``growth_interval`` clean steps in a row.

        scaler = vkblas.amp.GradScaler("vulkan")
        with vkblas.amp.autocast("vulkan"):
            loss = model(x, y)
        scaler.scale(loss).backward()
        scaler.unscale_(opt)  # optional: before clipping the gradients
        scaler.step(opt)
        scaler.update()

    The scale is a Python float (a power of two unless set otherwise) and the check reads one bool back from the
    device per ``step`` (PyTorch keeps both on the device); gradients must be float32 (unscaling float16 gradients
    is refused, as in PyTorch). The checks of all gradients stay on the device until ``step`` reads them.
    """

    def __init__(
        self,
        device: str = "vulkan",
        init_scale: float = 2.0**16,
        growth_factor: float = 2.0,
        backoff_factor: float = 0.5,
        growth_interval: int = 2000,
        enabled: bool = True,
    ) -> None:
        if enabled:
            if not growth_factor > 1.0:
                raise ValueError(f"GradScaler: the growth factor must be > 1.0, got {growth_factor}")
            if not backoff_factor < 1.0:
                raise ValueError(f"GradScaler: the backoff factor must be < 1.0, got {backoff_factor}")
            if not (isinstance(growth_interval, int) and growth_interval > 0):
                raise ValueError(f"GradScaler: growth_interval must be a positive int, got {growth_interval!r}")
        self.device = device
        self._enabled, self._scale, self._growth_tracker = enabled, float(init_scale), 0
        self._growth_factor, self._backoff_factor = float(growth_factor), float(backoff_factor)
        self._growth_interval = growth_interval
        self._states: dict[int, dict[str, Any]] = {}

    def is_enabled(self) -> bool:
        return self._enabled

    def get_scale(self) -> float:
        return self._scale if self._enabled else 1.0

    def get_growth_factor(self) -> float:
        return self._growth_factor

    def set_growth_factor(self, new_factor: float) -> None:
        self._growth_factor = float(new_factor)

    def get_backoff_factor(self) -> float:
        return self._backoff_factor

    def set_backoff_factor(self, new_factor: float) -> None:
        self._backoff_factor = float(new_factor)

    def get_growth_interval(self) -> int:
        return self._growth_interval

    def set_growth_interval(self, new_interval: int) -> None:
        self._growth_interval = int(new_interval)

    def _get_growth_tracker(self) -> int:
        return self._growth_tracker

    def scale(self, outputs: Any) -> Any:
        """``outputs`` (a tensor, or an iterable of them, nested) times the scale."""
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
        """Divide ``optimizer``'s gradients by the scale, in place, and note whether all are finite."""
        if not self._enabled:
            return
        state = self._state(optimizer)
        if state["stage"] == "unscaled":
            raise RuntimeError("unscale_() has already been called on this optimizer since the last update().")
        if state["stage"] == "stepped":
            raise RuntimeError("unscale_() is being called after step().")
        grads = _grads(optimizer)
        if any(g.dtype is float16 for g in grads):
            raise ValueError("Attempting to unscale FP16 gradients.")
        with no_grad():
            # one multi-tensor dispatch per few contiguous gradients (the optimizers' foreach), mul_ for the rest
            dense = [g for g in grads if g._view.is_contiguous()]
            foreach(((0, "mul", (0, -1)),), [[g] for g in dense], [1.0 / self._scale])
            for g in grads:
                if not g._view.is_contiguous():
                    g.mul_(1.0 / self._scale)
            # a +inf element makes the max inf, -inf the min, NaN both (max / min propagate NaN): the check of
            # each element without a temporary the size of the gradient; it stays on the device until step()
            extremes = [r for g in grads if g.numel() for r in (g.amax(), g.amin())]
        # None: no gradient to check (step() refuses, as PyTorch's); True: only empty ones
        state["finite"] = (stack(extremes).abs() <= _FLOAT32_MAX).all() if extremes else (True if grads else None)
        state["stage"] = "unscaled"

    def step(self, optimizer: Any, *args: Any, **kwargs: Any) -> Any:
        """``optimizer.step()`` unless a gradient was inf / NaN (then nothing, and None is returned)."""
        if not self._enabled:
            return optimizer.step(*args, **kwargs)
        if "closure" in kwargs:
            raise RuntimeError("Closure use is not currently supported if GradScaler is enabled.")
        state = self._state(optimizer)
        if state["stage"] == "stepped":
            raise RuntimeError("step() has already been called since the last update().")
        if state["stage"] == "ready":
            self.unscale_(optimizer)
        if state["finite"] is None:
            raise AssertionError("No inf checks were recorded for this optimizer.")
        finite = state["finite"]
        state["found_inf"] = not (finite is True or bool(finite.item()))
        state["stage"] = "stepped"
        return None if state["found_inf"] else optimizer.step(*args, **kwargs)

    def update(self, new_scale: float | Tensor | None = None) -> None:
        """Back off after a skipped step, grow after ``growth_interval`` clean ones; or set ``new_scale``."""
        if not self._enabled:
            return
        if new_scale is not None:
            self._scale = float(new_scale.item() if isinstance(new_scale, Tensor) else new_scale)
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
                    grown = self._scale * self._growth_factor
                    if math.isfinite(grown):  # PyTorch's rule: a scale that would overflow stays
                        self._scale = grown
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
        if len(state_dict) == 0:
            raise RuntimeError(
                "The source state dict is empty, possibly because it was saved from a disabled instance of GradScaler."
            )
        self._scale = float(state_dict["scale"])
        self._growth_factor, self._backoff_factor = state_dict["growth_factor"], state_dict["backoff_factor"]
        self._growth_interval, self._growth_tracker = state_dict["growth_interval"], state_dict["_growth_tracker"]
