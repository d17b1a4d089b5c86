"""RAdam (Liu et al., 2020): Adam with the variance of the adaptive learning rate rectified."""

from __future__ import annotations

import math
from typing import Any

from ..dtypes import float32
from ..ops._core import elementwise, full, write_into
from ..tensor import Tensor
from .fused import ADAM_STEP_SIZE, AXPBY, EMA_SQ, LERP, RADAM_A, RADAM_APPLY, RADAM_B
from .optimizer import Optimizer, ParamsT, check_betas, check_hyper


def _rho(t: int, beta2: float) -> float:
    """The length of the approximated simple moving average at step t (it grows with t, to 2 / (1 - beta2) - 1)."""
    return 2.0 / (1.0 - beta2) - 1.0 - 2.0 * t * beta2**t / (1.0 - beta2**t)


def first_rectified_step(beta2: float) -> float:
    """The first step with rho_t > 5 (inf if rho never gets there); rho_t increases with t: bisection."""
    if 2.0 / (1.0 - beta2) - 1.0 <= 5.0:
        return math.inf
    hi = 1
    while _rho(hi, beta2) <= 5.0:
        hi *= 2
    lo = hi // 2  # rho_lo <= 5 (or lo = 0)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if _rho(mid, beta2) > 5.0 else (mid, hi)
    return float(hi)


def rectification(t: int, beta2: float) -> tuple[float, float]:
    """(a, b) of the update ``m_hat * (a / (sqrt(v) + eps) + b)``: (rect * sqrt(1 - beta2^t), 0) once the
    approximated SMA length rho_t exceeds 5, else (0, 1) (un-adapted momentum)."""
    rho_inf, rho = 2.0 / (1.0 - beta2) - 1.0, _rho(t, beta2)
    if rho <= 5.0:
        return 0.0, 1.0
    rect = math.sqrt((rho - 4) * (rho - 2) * rho_inf / ((rho_inf - 4) * (rho_inf - 2) * rho))
    return rect * math.sqrt(1.0 - beta2**t), 0.0


class RAdam(Optimizer):
    r"""RAdam as in PyTorch's documentation:

    .. math::
        m_t, v_t &\leftarrow \text{Adam's moments of } g_t \; (+ \lambda \theta_{t-1}, \text{ or decoupled}) \\
        \rho_\infty &= 2 / (1 - \beta_2) - 1, \qquad
        \rho_t = \rho_\infty - 2 t \beta_2^t / (1 - \beta_2^t) \\
        \theta_t &\leftarrow \theta_{t-1} - \gamma \hat m_t \, r_t \sqrt{1 - \beta_2^t} / (\sqrt{v_t} + \epsilon)
            \text{ if } \rho_t > 5, \text{ else } \theta_{t-1} - \gamma \hat m_t \\
        r_t &= \sqrt{\frac{(\rho_t - 4)(\rho_t - 2)\rho_\infty}{(\rho_\infty - 4)(\rho_\infty - 2)\rho_t}}

    Three fused dispatches per parameter. ``capturable=True``: the step count, learning rate, bias correction and
    the rectification terms are device scalars of the group.
    """

    def __init__(
        self,
        params: ParamsT,
        lr: float = 1e-3,
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-8,
        weight_decay: float = 0.0,
        decoupled_weight_decay: bool = False,
        *,
        maximize: bool = False,
        capturable: bool = False,
    ) -> None:
        defaults = dict(
            lr=lr,
            betas=tuple(betas),
            eps=eps,
            weight_decay=weight_decay,
            decoupled_weight_decay=decoupled_weight_decay,
            maximize=maximize,
            capturable=capturable,
        )
        super().__init__(params, defaults)

    def _check_group(self, group: dict[str, Any]) -> None:
        super()._check_group(group)
        check_hyper("epsilon", group["eps"])
        check_betas(group["betas"])
        check_hyper("weight_decay", group["weight_decay"])

    def _init_state(self, p: Tensor, state: dict[str, Any], group: dict[str, Any]) -> None:
        state["exp_avg"] = full(p.shape, 0.0, p.dtype, p._backend)
        state["exp_avg_sq"] = full(p.shape, 0.0, p.dtype, p._backend)

    def _init_scalars(self, group: dict[str, Any], sc: dict[str, Any], backend: Any) -> None:
        for name in ("step_size", "rect_a", "rect_b"):
            sc[name] = full((), 0.0, float32, backend)
        if group["decoupled_weight_decay"] and group["weight_decay"]:
            sc["decay"] = full((), 1.0, float32, backend)

    def _advance(self, group: dict[str, Any], sc: dict[str, Any]) -> None:
        super()._advance(group, sc)
        (beta1, beta2), t = group["betas"], sc["step"]
        write_into(sc["step_size"], ADAM_STEP_SIZE, sc["lr"], t, float(beta1))
        first = min(first_rectified_step(float(beta2)), 2.0**30)  # a float32 "never"
        write_into(sc["rect_a"], RADAM_A, t, float(beta2), first)
        write_into(sc["rect_b"], RADAM_B, t, first)
        if "decay" in sc:
            write_into(sc["decay"], AXPBY, sc["lr"], 1.0, -float(group["weight_decay"]), 1.0)

    def _update(self, p: Tensor, grad: Tensor, state: dict[str, Any], group: dict[str, Any]) -> None:
        lr, (beta1, beta2), wd = float(group["lr"]), group["betas"], group["weight_decay"]
        decoupled = group["decoupled_weight_decay"]
        if wd and not decoupled:
            grad = elementwise(AXPBY, grad, p, 1.0, float(wd))
        m, v, eps = state["exp_avg"], state["exp_avg_sq"], float(group["eps"])
        write_into(m, LERP, m, grad, 1.0 - beta1)
        write_into(v, EMA_SQ, v, grad, float(beta2))
        if group["capturable"]:
            sc = self._scalars[id(group)]
            terms = (sc["step_size"], sc["rect_a"], sc["rect_b"], eps, sc.get("decay", 1.0))
            write_into(p, RADAM_APPLY, p, m, v, *terms)
            return
        t = state["step"]
        a, b = rectification(t, beta2)
        decay = 1.0 - lr * wd if wd and decoupled else 1.0
        write_into(p, RADAM_APPLY, p, m, v, lr / (1.0 - beta1**t), a, b, eps, decay)
