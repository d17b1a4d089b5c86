"""Adadelta (Zeiler, 2012): per-coordinate steps from running averages of squared gradients and squared steps."""

from __future__ import annotations

from typing import Any

from ..ops._core import elementwise, full, write_into
from ..tensor import Tensor
from .fused import ADADELTA_ACC, ADADELTA_APPLY, AXPBY, EMA_SQ
from .optimizer import Optimizer, ParamsT, check_hyper, check_unit


class Adadelta(Optimizer):
    r"""Adadelta as in PyTorch's documentation. For each parameter :math:`\theta`, decay :math:`\rho`,
    learning rate :math:`\gamma`, weight decay :math:`\lambda`:

    .. math::
        g_t &\leftarrow g_t + \lambda \theta_{t-1} \\
        v_t &\leftarrow \rho v_{t-1} + (1 - \rho) g_t^2 \\
        \Delta x_t &\leftarrow \frac{\sqrt{u_{t-1} + \epsilon}}{\sqrt{v_t + \epsilon}} g_t \\
        u_t &\leftarrow \rho u_{t-1} + (1 - \rho) \Delta x_t^2 \\
        \theta_t &\leftarrow \theta_{t-1} - \gamma \Delta x_t

    ``v`` is ``square_avg``, ``u`` ``acc_delta``. Three fused dispatches per parameter (no temporary: the update
    and ``u`` each recompute the step). ``capturable=True``: the learning rate is read from a device tensor.
    """

    def __init__(
        self,
        params: ParamsT,
        lr: float = 1.0,
        rho: float = 0.9,
        eps: float = 1e-6,
        weight_decay: float = 0.0,
        *,
        capturable: bool = False,
        maximize: bool = False,
    ) -> None:
        defaults = dict(lr=lr, rho=rho, eps=eps, weight_decay=weight_decay, capturable=capturable, maximize=maximize)
        super().__init__(params, defaults)

    def _check_group(self, group: dict[str, Any]) -> None:
        super()._check_group(group)
        check_unit("rho", group["rho"])
        check_hyper("epsilon", group["eps"])
        check_hyper("weight_decay", group["weight_decay"])

    def _init_state(self, p: Tensor, state: dict[str, Any], group: dict[str, Any]) -> None:
        state["square_avg"] = full(p.shape, 0.0, p.dtype, p._backend)
        state["acc_delta"] = full(p.shape, 0.0, p.dtype, p._backend)

    def _update(self, p: Tensor, grad: Tensor, state: dict[str, Any], group: dict[str, Any]) -> None:
        rho, eps, wd = float(group["rho"]), float(group["eps"]), group["weight_decay"]
        if wd:
            grad = elementwise(AXPBY, grad, p, 1.0, float(wd))
        v, u = state["square_avg"], state["acc_delta"]
        write_into(v, EMA_SQ, v, grad, rho)
        lr = self._scalars[id(group)]["lr"] if group["capturable"] else float(group["lr"])
        write_into(p, ADADELTA_APPLY, p, u, v, grad, lr, eps)
        write_into(u, ADADELTA_ACC, u, v, grad, rho, eps)
