"""``clip_grad_norm_`` and ``clip_grad_value_``: gradient clipping on the device, without a host round trip."""

from __future__ import annotations

import math
from collections.abc import Iterable

from ..autograd import no_grad
from ..ops.shape import stack
from ..tensor import Tensor


def _grads(parameters: Tensor | Iterable[Tensor]) -> list[Tensor]:
    params = [parameters] if isinstance(parameters, Tensor) else list(parameters)
    return [p.grad for p in params if p.grad is not None]


def clip_grad_norm_(
    parameters: Tensor | Iterable[Tensor],
    max_norm: float,
    norm_type: float = 2.0,
    error_if_nonfinite: bool = False,
    foreach: bool | None = None,
) -> Tensor:
    """Scale all gradients together so that their joint ``norm_type``-norm is at most ``max_norm``.

    Returns the total norm (a 0-d tensor on the gradients' device) as PyTorch does. The scale
    ``min(1, max_norm / (total + 1e-6))`` stays on the device; only ``error_if_nonfinite=True`` reads it back.
    """
    grads = _grads(parameters)
    if not grads:
        from ..creation import tensor

        return tensor(0.0, device="cpu")
    norm_type = float(norm_type)
    with no_grad():
        if math.isinf(norm_type):
            norms = [g.abs().amax() for g in grads]
            total = norms[0] if len(norms) == 1 else stack(norms).amax()
        else:
            norms = [g.abs().pow(norm_type).sum() for g in grads]
            total = (norms[0] if len(norms) == 1 else stack(norms).sum()).pow(1.0 / norm_type)
        if error_if_nonfinite and not math.isfinite(total.item()):
            raise RuntimeError(
                f"The total norm of order {norm_type} for gradients from `parameters` is non-finite, "
                "so it cannot be clipped. To disable this error and scale the gradients by the "
                "non-finite norm anyway, set `error_if_nonfinite=False`"
            )
        coef = (float(max_norm) / (total + 1e-6)).clamp(max=1.0)
        for g in grads:
            g.mul_(coef.to(g.dtype))
    return total


def clip_grad_value_(parameters: Tensor | Iterable[Tensor], clip_value: float) -> None:
    """Clamp every gradient element into ``[-clip_value, clip_value]`` in place."""
    with no_grad():
        for g in _grads(parameters):
            g.clamp_(-float(clip_value), float(clip_value))
