"""Adamax (Kingma & Ba, 2015, section 7): Adam with the infinity norm in place of the second moment."""

from __future__ import annotations

from typing import Any

from ..dtypes import float32
from ..ops._core import elementwise, full, write_into
from ..tensor import Tensor
from .fused import ADAM_STEP_SIZE, ADAMAX_INF, AXPBY, DIV_APPLY, LERP
from .optimizer import Optimizer, ParamsT, check_betas, check_hyper


class Adamax(Optimizer):
    r"""Adamax as in PyTorch's documentation:

    .. math::
        g_t &\leftarrow g_t + \lambda \theta_{t-1} \\
        m_t &\leftarrow \beta_1 m_{t-1} + (1 - \beta_1) g_t \\
        u_t &\leftarrow \max(\beta_2 u_{t-1}, |g_t| + \epsilon) \\
        \theta_t &\leftarrow \theta_{t-1} - \frac{\gamma}{1 - \beta_1^t} \frac{m_t}{u_t}

    ``m`` is ``exp_avg``, ``u`` ``exp_inf``. Three fused dispatches per parameter. ``capturable=True``: the step
    count, learning rate and bias correction live on the device.
    """

    def __init__(
        self,
        params: ParamsT,
        lr: float = 2e-3,
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-8,
        weight_decay: float = 0.0,
        *,
        maximize: bool = False,
        capturable: bool = False,
    ) -> None:
        defaults = dict(
            lr=lr, betas=tuple(betas), eps=eps, weight_decay=weight_decay, maximize=maximize, capturable=capturable
        )
        super().__init__(params, defaults)

    def _check_group(self, group: dict[str, Any]) -> None:
        super()._check_group(group)
        check_hyper("epsilon", group["eps"])
        check_betas(group["betas"])
        check_hyper("weight_decay", group["weight_decay"])

    def _init_state(self, p: Tensor, state: dict[str, Any], group: dict[str, Any]) -> None:
        state["exp_avg"] = full(p.shape, 0.0, p.dtype, p._backend)
        state["exp_inf"] = full(p.shape, 0.0, p.dtype, p._backend)

    def _init_scalars(self, group: dict[str, Any], sc: dict[str, Any], backend: Any) -> None:
        sc["step_size"] = full((), 0.0, float32, backend)  # lr / (1 - beta1^t)

    def _advance(self, group: dict[str, Any], sc: dict[str, Any]) -> None:
        super()._advance(group, sc)
        write_into(sc["step_size"], ADAM_STEP_SIZE, sc["lr"], sc["step"], float(group["betas"][0]))

    def _update(self, p: Tensor, grad: Tensor, state: dict[str, Any], group: dict[str, Any]) -> None:
        (beta1, beta2), wd = group["betas"], group["weight_decay"]
        if wd:
            grad = elementwise(AXPBY, grad, p, 1.0, float(wd))
        m, u = state["exp_avg"], state["exp_inf"]
        write_into(m, LERP, m, grad, 1.0 - beta1)
        write_into(u, ADAMAX_INF, u, grad, float(beta2), float(group["eps"]))
        if group["capturable"]:
            step = self._scalars[id(group)]["step_size"]
        else:
            step = float(group["lr"]) / (1.0 - beta1 ** state["step"])
        write_into(p, DIV_APPLY, p, m, u, step)
