"""The optimizers of ``vkblas train`` (Adam, AdamW, SGD with momentum) over one flat float32 vector on the host:
a few numpy passes with ``out=`` buffers, instead of three fused vkblas ops per parameter tensor.

Why: every process of the local runner that steps the model (a sync worker, the async holder, diloco's cpu
workers and outer step) steps all 0.5 M parameters of the MLP on every step. vkblas's optimizers on the ``cpu``
device take ~3.2 ms for that (each fused formula allocates its temporaries); these passes take ~0.55 ms on the
same machine, and allocate nothing after the first step.

The formulas are vkblas's own, written in the same order with the same float32 scalars (``optim/adam.py``,
``optim/sgd.py``; numpy computes a float32 array with a Python float in float32), so a step here gives the same
bits as ``make_optimizer(name, ...)`` stepping the same vector on the ``cpu`` device (tested). Elementwise numpy
is deterministic, so every process that steps the same vector from the same gradient gets the same bits: replicas
of one model never drift apart, whatever device computed their gradients.

State lives in caller-provided arrays (:class:`FlatState`): private arrays, or views of shared memory (the
sharded sync step reads one buffer and writes the other).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

#: make_optimizer's settings: name -> (rule, weight decay, momentum)
TRAINING: dict[str, tuple[str, float, float]] = {
    "adam": ("adam", 0.0, 0.0),
    "adamw": ("adamw", 0.01, 0.0),
    "sgd": ("sgd", 0.0, 0.9),
}
KEYS = {"adam": ("exp_avg", "exp_avg_sq"), "adamw": ("exp_avg", "exp_avg_sq"), "sgd": ("momentum_buffer",)}
BETAS = (0.9, 0.999)
EPS = 1e-8


def state_keys(optimizer: str) -> tuple[str, ...]:
    """The per-element state arrays ``optimizer`` (a ``vkblas train`` name) keeps, in their shared-memory order."""
    if optimizer not in TRAINING:
        raise ValueError(f"unknown optimizer {optimizer!r}: choose from {', '.join(TRAINING)}")
    return KEYS[TRAINING[optimizer][0]]


@dataclass
class FlatState:
    """Parameters and per-element state of a flat vector (or a slice of it), and the step count."""

    params: np.ndarray
    state: tuple[np.ndarray, ...]
    step: int = 0


class FlatOptimizer:
    """A ``rule`` (``adam``, ``adamw`` or ``sgd``) stepping :class:`FlatState`\\ s of up to ``size`` elements:
    :meth:`training` builds ``make_optimizer``'s, :meth:`outer` DiLoCo's outer Nesterov SGD."""

    def __init__(
        self, rule: str, size: int, weight_decay: float = 0.0, momentum: float = 0.0, nesterov: bool = False
    ) -> None:
        if rule not in KEYS:
            raise ValueError(f"unknown rule {rule!r}: choose from {', '.join(KEYS)}")
        self.rule, self.weight_decay, self.momentum, self.nesterov = rule, weight_decay, momentum, nesterov
        self.keys = KEYS[rule] if rule != "sgd" or momentum else ()
        self._tmp = (np.empty(size, np.float32), np.empty(size, np.float32))

    @classmethod
    def training(cls, optimizer: str, size: int) -> FlatOptimizer:
        """``make_optimizer(optimizer, ...)`` of ``vkblas train``: Adam, AdamW (weight decay 0.01), SGD (momentum
        0.9)."""
        state_keys(optimizer)
        rule, wd, momentum = TRAINING[optimizer]
        return cls(rule, size, wd, momentum)

    @classmethod
    def outer(cls, size: int, momentum: float) -> FlatOptimizer:
        """DiLoCo's outer step: SGD with Nesterov momentum (momentum 0: plain averaging steps)."""
        return cls("sgd", size, momentum=momentum, nesterov=momentum > 0)

    def fresh(self, params: np.ndarray) -> FlatState:
        """A state at step 0 for ``params`` (zeros: what a new optimizer starts from)."""
        return FlatState(params, tuple(np.zeros_like(params) for _ in self.keys), 0)

    def step(self, s: FlatState, grad: np.ndarray, lr: float, out: FlatState | None = None) -> FlatState:
        """One step of ``s`` on ``grad`` at learning rate ``lr``, written into ``out`` (default: ``s`` itself, in
        place); returns the state written. ``grad`` is not modified."""
        out = s if out is None else out
        n = s.params.size
        t1, t2 = self._tmp[0][:n], self._tmp[1][:n]
        if self.rule == "sgd":
            self._sgd(s, grad, lr, out, t1, t2)
        else:
            self._adam(s, grad, lr, s.step + 1, out, t1, t2)
        out.step = s.step + 1
        return out

    def _adam(
        self, s: FlatState, g: np.ndarray, lr: float, t: int, out: FlatState, t1: np.ndarray, t2: np.ndarray
    ) -> None:
        (beta1, beta2), wd = BETAS, self.weight_decay
        decoupled = self.rule == "adamw"
        m, v = s.state
        m_out, v_out = out.state
        f32 = np.float32
        if wd and not decoupled:  # Adam's L2 term: g + wd * p (AXPBY 1.0, wd)
            np.multiply(s.params, f32(wd), out=t2)
            np.add(g, t2, out=t2)  # 1.0 * g is exact
            g = t2
        # m = lerp(m, g, 1 - beta1) = m + w * (g - m)
        np.subtract(g, m, out=t1)
        t1 *= f32(1.0 - beta1)
        np.add(m, t1, out=m_out)
        # v = beta2 * v + (1 - beta2) * g * g, evaluated left to right as the formula is
        np.multiply(g, f32(1.0 - beta2), out=t1)
        t1 *= g
        np.multiply(v, f32(beta2), out=v_out)
        v_out += t1
        # p = p * decay - step * m / (sqrt(v) * inv_sqrt_bc2 + eps)
        bias1, bias2 = 1 - beta1**t, 1 - beta2**t
        step, inv_sqrt_bc2 = lr / bias1, 1 / math.sqrt(bias2)
        decay = 1.0 - lr * wd if decoupled else 1.0
        np.sqrt(v_out, out=t1)
        t1 *= f32(inv_sqrt_bc2)
        t1 += f32(EPS)
        np.multiply(m_out, f32(step), out=t2)
        t2 /= t1
        np.multiply(s.params, f32(decay), out=out.params)
        out.params -= t2

    def _sgd(self, s: FlatState, g: np.ndarray, lr: float, out: FlatState, t1: np.ndarray, t2: np.ndarray) -> None:
        f32 = np.float32
        if self.weight_decay:  # g + wd * p
            np.multiply(s.params, f32(self.weight_decay), out=t2)
            np.add(g, t2, out=t2)
            g = t2
        if self.momentum:
            (buf,), (buf_out,) = s.state, out.state
            if s.step == 0:  # the first step's buffer is the gradient itself (grad.clone())
                np.copyto(buf_out, g)
            else:  # mu * buf + (1 - dampening) * g, dampening 0
                np.multiply(buf, f32(self.momentum), out=buf_out)
                buf_out += g
            if self.nesterov:  # g + mu * buf
                np.multiply(buf_out, f32(self.momentum), out=t1)
                np.add(g, t1, out=t1)
                g = t1
            else:
                g = buf_out
        # p = 1.0 * p + (-lr) * g
        np.multiply(g, f32(-lr), out=t1)
        np.add(s.params, t1, out=out.params)


def weighted_sum(
    contributions: Sequence[tuple[np.ndarray, float]], out: np.ndarray, scratch: np.ndarray | None = None
) -> np.ndarray:
    """The weighted mean of flat ``(vector, weight)`` pairs into ``out`` (float32, in contribution order, so every
    process that averages the same contributions gets the same bits); one contribution is copied as it is.
    ``scratch``: a float32 buffer of ``out``'s size for the products (else one is allocated).

    :func:`vkblas.distributed.weighted_mean` accumulates per tensor in float64 (~2 ms per contribution of 0.5 M
    parameters); this is ~0.05 ms per contribution, and the difference is fp32 rounding."""
    if not contributions:
        raise ValueError("weighted_sum of no contributions")
    total = float(sum(w for _, w in contributions))
    if not total > 0:
        raise ValueError(f"weights must sum to a positive number, got {[w for _, w in contributions]}")
    if len(contributions) == 1:
        np.copyto(out, contributions[0][0])
        return out
    scratch = np.empty_like(out) if scratch is None else scratch
    (first, w0), rest = contributions[0], contributions[1:]
    np.multiply(first, np.float32(w0 / total), out=out)
    for vec, w in rest:
        np.multiply(vec, np.float32(w / total), out=scratch)
        out += scratch
    return out
