"""Before a worker takes any work: can its device hold the run's model? A worker that cannot refuses to join with
one clear line, instead of failing on its first unit with a lease held (which would then have to expire).

The check builds the trainer (the model's weights on the device) and then allocates what every unit will hold
beside them, one tensor per parameter: its gradient, and for ``diloco`` AdamW's two moments, which stay on the
worker between rounds. Those are freed again at once (the pool keeps the buffers for the first unit). Activations
depend on the unit's batch and are not probed: a device that holds the state but not one batch's activations
still fails in its first unit.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ...backend.base import DeviceOutOfMemoryError
from ...creation import empty
from ...device import synchronize
from ..protocol import RunInfo
from .errors import DoesNotFitError


def per_parameter_copies(algorithm: str) -> int:
    """Tensors of each parameter's size a unit holds beside the weights: the gradient, and AdamW's two moments
    for ``diloco`` (its inner optimizer)."""
    return 3 if algorithm == "diloco" else 1


def check_device_holds(make_trainer: Callable[[], Any], run: RunInfo, device: str) -> Any:
    """``make_trainer()``, after making sure the device holds the model's weights and per-unit state; raises
    :class:`DoesNotFitError` naming the device, the model and the bytes otherwise."""
    copies = per_parameter_copies(run.algorithm)
    try:
        trainer = make_trainer()
        params = list(trainer.model.parameters())
        probe = [empty(p.shape, dtype=p.dtype, device=device) for p in params for _ in range(copies)]
        synchronize(device)
    except DeviceOutOfMemoryError as e:
        raise DoesNotFitError(_message(run, device, copies, e)) from e
    del probe
    return trainer


def _message(run: RunInfo, device: str, copies: int, e: Exception) -> str:
    what = "weights and gradients" if copies == 1 else "weights, gradients and AdamW's two moments"
    return (
        f"vkblas join: {device} cannot hold the run's model {run.model!r} ({run.algorithm}): its {what} did not "
        f"fit ({e}); join with a device that has more memory, or another run"
    )
