"""NAdam (Dozat, 2016): Adam with Nesterov momentum and a momentum schedule."""

from __future__ import annotations

import math
from typing import Any

from ..dtypes import float32
from ..ops._core import elementwise, full, write_into
from ..tensor import Tensor
from .fused import (
    ADAM_RSQRT_BC,
    AXPBY,
    EMA_SQ,
    LERP,
    NADAM_APPLY,
    NADAM_COEF_G,
    NADAM_COEF_M,
    NADAM_MU_PRODUCT,
)
from .optimizer import Optimizer, ParamsT, check_betas, check_hyper


def _mu(t: float, beta1: float, psi: float) -> float:
    return beta1 * (1.0 - 0.5 * 0.96 ** (t * psi))


class NAdam(Optimizer):
    r"""NAdam as in PyTorch's documentation, with momentum decay :math:`\psi`:

    .. math::
        \mu_t &\leftarrow \beta_1 (1 - \tfrac12 0.96^{t \psi}) \\
        g_t &\leftarrow g_t + \lambda \theta_{t-1} \quad
            (\text{decoupled\_weight\_decay: } \theta_{t-1} \leftarrow \theta_{t-1} (1 - \gamma \lambda)) \\
        m_t &\leftarrow \beta_1 m_{t-1} + (1 - \beta_1) g_t, \qquad
        v_t \leftarrow \beta_2 v_{t-1} + (1 - \beta_2) g_t^2 \\
        \theta_t &\leftarrow \theta_{t-1} - \gamma \left( \frac{(1 - \mu_t) g_t}{1 - \prod_{i \le t} \mu_i}
            + \frac{\mu_{t+1} m_t}{1 - \prod_{i \le t+1} \mu_i} \right) / \left(\sqrt{v_t / (1 - \beta_2^t)}
            + \epsilon\right)

    Three fused dispatches per parameter; ``state["mu_product"]`` is the running product. ``capturable=True``:
    the step count, learning rate, the product and the coefficients are device scalars of the group (four small
    dispatches per group and step).
    """

    def __init__(
        self,
        params: ParamsT,
        lr: float = 2e-3,
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-8,
        weight_decay: float = 0.0,
        momentum_decay: float = 4e-3,
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
            momentum_decay=momentum_decay,
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
        check_hyper("momentum_decay", group["momentum_decay"])

    def _init_state(self, p: Tensor, state: dict[str, Any], group: dict[str, Any]) -> None:
        state["mu_product"] = self._scalars[id(group)]["mu_product"] if group["capturable"] else 1.0
        state["exp_avg"] = full(p.shape, 0.0, p.dtype, p._backend)
        state["exp_avg_sq"] = full(p.shape, 0.0, p.dtype, p._backend)

    def _init_scalars(self, group: dict[str, Any], sc: dict[str, Any], backend: Any) -> None:
        for name, value in (("mu_product", 1.0), ("coef_g", 0.0), ("coef_m", 0.0), ("rsqrt_bc2", 0.0)):
            sc[name] = full((), value, float32, backend)
        if group["decoupled_weight_decay"] and group["weight_decay"]:
            sc["decay"] = full((), 1.0, float32, backend)  # 1 - lr * weight_decay

    def _advance(self, group: dict[str, Any], sc: dict[str, Any]) -> None:
        super()._advance(group, sc)
        (beta1, beta2), psi, t = group["betas"], float(group["momentum_decay"]), sc["step"]
        write_into(sc["mu_product"], NADAM_MU_PRODUCT, sc["mu_product"], t, float(beta1), psi)
        write_into(sc["coef_g"], NADAM_COEF_G, sc["lr"], sc["mu_product"], t, float(beta1), psi)
        write_into(sc["coef_m"], NADAM_COEF_M, sc["lr"], sc["mu_product"], t, float(beta1), psi)
        write_into(sc["rsqrt_bc2"], ADAM_RSQRT_BC, t, float(beta2))
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
            coefs = (sc["coef_g"], sc["coef_m"], sc["rsqrt_bc2"], eps, sc.get("decay", 1.0))
            write_into(p, NADAM_APPLY, p, grad, m, v, *coefs)
            return
        t, psi = state["step"], float(group["momentum_decay"])
        mu, mu_next = _mu(t, beta1, psi), _mu(t + 1, beta1, psi)
        state["mu_product"] *= mu
        prod = state["mu_product"]
        c_g, c_m = -lr * (1.0 - mu) / (1.0 - prod), -lr * mu_next / (1.0 - prod * mu_next)
        decay = 1.0 - lr * wd if wd and decoupled else 1.0
        write_into(p, NADAM_APPLY, p, grad, m, v, c_g, c_m, 1.0 / math.sqrt(1.0 - beta2**t), eps, decay)
