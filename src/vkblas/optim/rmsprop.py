"""RMSprop (Hinton's lecture 6e), optionally centered and with momentum."""

from __future__ import annotations

from typing import Any

from ..ops._core import elementwise, full, write_into
from ..tensor import Tensor
from .fused import ADAM_APPLY, AXPBY, EMA_SQ, LERP
from .optimizer import Optimizer, ParamsT, check_hyper


class RMSprop(Optimizer):
    r"""RMSprop as in PyTorch's documentation:

    .. math::
        g_t &\leftarrow g_t + \lambda \theta_{t-1} \\
        v_t &\leftarrow \alpha v_{t-1} + (1 - \alpha) g_t^2, \qquad \tilde v_t \leftarrow v_t \\
        \text{centered: } \bar g_t &\leftarrow \alpha \bar g_{t-1} + (1 - \alpha) g_t, \quad
            \tilde v_t \leftarrow v_t - \bar g_t^2 \\
        \text{momentum } \mu > 0: b_t &\leftarrow \mu b_{t-1} + g_t / (\sqrt{\tilde v_t} + \epsilon), \quad
            \theta_t \leftarrow \theta_{t-1} - \gamma b_t \\
        \text{else: } \theta_t &\leftarrow \theta_{t-1} - \gamma g_t / (\sqrt{\tilde v_t} + \epsilon)
    """

    def __init__(
        self,
        params: ParamsT,
        lr: float = 1e-2,
        alpha: float = 0.99,
        eps: float = 1e-8,
        weight_decay: float = 0.0,
        momentum: float = 0.0,
        centered: bool = False,
        *,
        maximize: bool = False,
    ) -> None:
        super().__init__(
            params,
            dict(
                lr=lr,
                alpha=alpha,
                eps=eps,
                weight_decay=weight_decay,
                momentum=momentum,
                centered=centered,
                maximize=maximize,
            ),
        )

    def _check_group(self, group: dict[str, Any]) -> None:
        super()._check_group(group)
        check_hyper("epsilon", group["eps"])
        check_hyper("momentum", group["momentum"])
        check_hyper("weight_decay", group["weight_decay"])
        check_hyper("alpha", group["alpha"])

    def _init_state(self, p: Tensor, state: dict[str, Any], group: dict[str, Any]) -> None:
        names = ["square_avg"] + (["momentum_buffer"] if group["momentum"] > 0 else [])
        names += ["grad_avg"] if group["centered"] else []
        for name in names:
            state[name] = full(p.shape, 0.0, p.dtype, p._backend)

    def _update(self, p: Tensor, grad: Tensor, state: dict[str, Any], group: dict[str, Any]) -> None:
        # plain RMSprop is two fused dispatches per parameter; centred and momentum variants add a few
        alpha, wd, eps, lr = group["alpha"], group["weight_decay"], float(group["eps"]), float(group["lr"])
        if wd:
            grad = elementwise(AXPBY, grad, p, 1.0, float(wd))
        sq = write_into(state["square_avg"], EMA_SQ, state["square_avg"], grad, float(alpha))
        if group["centered"]:
            avg = write_into(state["grad_avg"], LERP, state["grad_avg"], grad, 1.0 - alpha)
            sq = sq - avg.square()
        if group["momentum"] > 0:
            buf = state["momentum_buffer"]
            # buf = momentum * buf + grad / (sqrt(sq) + eps), as adam_apply with decay=momentum and step=-1
            write_into(buf, ADAM_APPLY, buf, grad, sq, -1.0, 1.0, eps, float(group["momentum"]))
            write_into(p, AXPBY, p, buf, 1.0, -lr)
        else:
            write_into(p, ADAM_APPLY, p, grad, sq, lr, 1.0, eps, 1.0)
