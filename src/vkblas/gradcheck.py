"""``gradcheck``: compare autograd's gradients with central finite differences (use float64 on the cpu device)."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from .autograd import no_grad
from .tensor import Tensor


def _numeric(fn: Callable[..., Tensor], inputs: list[Tensor], i: int, eps: float, weights: np.ndarray) -> np.ndarray:
    x = inputs[i]
    base = x.detach().numpy().astype(np.float64)
    grad = np.zeros_like(base)
    flat = base.reshape(-1)
    for k in range(flat.size):
        vals = []
        for delta in (eps, -eps):
            probe = flat.copy()
            probe[k] += delta
            args = list(inputs)
            args[i] = x.new_tensor(probe.reshape(base.shape))
            with no_grad():
                vals.append(float((fn(*args).detach().numpy().astype(np.float64) * weights).sum()))
        grad.reshape(-1)[k] = (vals[0] - vals[1]) / (2 * eps)
    return grad


def gradcheck(
    fn: Callable[..., Tensor],
    inputs: Sequence[Tensor],
    eps: float = 1e-6,
    atol: float = 1e-5,
    rtol: float = 1e-3,
    raise_exception: bool = True,
    seed: int = 0,
) -> bool:
    """True if the analytic gradient of ``sum(fn(*inputs) * w)`` (random ``w``) matches finite differences for every
    input that requires grad. Raises with the worst mismatch unless ``raise_exception=False``."""
    inputs = list(inputs)
    out = fn(*inputs)
    weights = np.random.default_rng(seed).standard_normal(out.shape)
    for t in inputs:
        if isinstance(t, Tensor):
            t.grad = None
    out.backward(out.new_tensor(weights))
    for i, x in enumerate(inputs):
        if not isinstance(x, Tensor) or not x.requires_grad:
            continue
        analytic = np.zeros(x.shape) if x.grad is None else x.grad.numpy().astype(np.float64)
        numeric = _numeric(fn, inputs, i, eps, weights)
        if not np.allclose(analytic, numeric, atol=atol, rtol=rtol):
            if not raise_exception:
                return False
            worst = np.unravel_index(np.argmax(np.abs(analytic - numeric)), analytic.shape) if analytic.size else ()
            raise AssertionError(
                f"gradcheck failed for input {i} (shape {x.shape}): at index {worst} analytic "
                f"{analytic[worst]!r} vs numeric {numeric[worst]!r}\nanalytic:\n{analytic}\nnumeric:\n{numeric}"
            )
    return True
