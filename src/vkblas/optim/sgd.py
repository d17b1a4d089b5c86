"""Stochastic gradient descent with momentum, dampening, Nesterov momentum and weight decay."""

from __future__ import annotations

from typing import Any

from ..ops._core import elementwise, write_into
from ..tensor import Tensor
from .fused import AXPBY, SUB_SCALED, Program, signed_grad
from .optimizer import Optimizer, ParamsT, check_hyper


class SGD(Optimizer):
    r"""SGD as PyTorch defines it. For each parameter :math:`\theta` with gradient :math:`g_t`:

    .. math::
        g_t &\leftarrow g_t + \lambda \theta_{t-1} \quad (\text{weight decay } \lambda) \\
        b_t &\leftarrow g_t \text{ if } t = 1 \text{ else } \mu b_{t-1} + (1 - \tau) g_t \\
        g_t &\leftarrow g_t + \mu b_t \text{ (Nesterov) else } b_t \quad (\text{when } \mu \ne 0) \\
        \theta_t &\leftarrow \theta_{t-1} - \gamma g_t

    >>> import vkblas
    >>> w = vkblas.tensor([1.0], requires_grad=True, device="cpu")
    >>> opt = vkblas.optim.SGD([w], lr=0.1)
    >>> (w * 3).sum().backward(); opt.step(); w
    tensor([0.7], requires_grad=True)

    ``capturable=True``: the learning rate is read from a device tensor (for ``vkblas.graphs``).
    """

    def __init__(
        self,
        params: ParamsT,
        lr: float = 1e-3,
        momentum: float = 0.0,
        dampening: float = 0.0,
        weight_decay: float = 0.0,
        nesterov: bool = False,
        *,
        maximize: bool = False,
        capturable: bool = False,
    ) -> None:
        super().__init__(
            params,
            dict(
                lr=lr,
                momentum=momentum,
                dampening=dampening,
                weight_decay=weight_decay,
                nesterov=nesterov,
                maximize=maximize,
                capturable=capturable,
            ),
        )

    def _check_group(self, group: dict[str, Any]) -> None:
        super()._check_group(group)
        check_hyper("momentum", group["momentum"])
        check_hyper("weight_decay", group["weight_decay"])
        if group["nesterov"] and (group["momentum"] <= 0 or group["dampening"] != 0):
            raise ValueError(
                f"Nesterov momentum requires a momentum > 0 and zero dampening (got momentum="
                f"{group['momentum']}, dampening={group['dampening']})"
            )

    def _update_group(self, group: dict[str, Any], items: list[tuple[Tensor, Tensor, dict[str, Any]]]) -> None:
        """One ``foreach`` for every parameter whose momentum buffer exists (the first step with momentum copies
        the gradient into a new buffer: per parameter, as :meth:`_update`)."""
        mu = group["momentum"]
        first = [it for it in items if mu and "momentum_buffer" not in it[2]]
        ready = [it for it in items if not (mu and "momentum_buffer" not in it[2])]
        super()._update_group(group, first)
        if not ready:
            return
        prog = Program(3 if mu else 2)  # p, grad (, momentum_buffer)
        g = signed_grad(prog, 1, 0, group)
        if mu:
            prog.step(2, AXPBY, 2, g, prog.s(float(mu)), prog.s(1.0 - group["dampening"]))
            if group["nesterov"]:
                g = prog.step(g if g != 1 else prog.temp(), AXPBY, g, 2, prog.s(1.0), prog.s(float(mu)))
            else:
                g = 2
        if group["capturable"]:
            prog.step(0, SUB_SCALED, 0, g, prog.s(self._scalars[id(group)]["lr"]))
        else:
            prog.step(0, AXPBY, 0, g, prog.s(1.0), prog.s(-float(group["lr"])))
        prog.run([[p, grad, state["momentum_buffer"]] if mu else [p, grad] for p, grad, state in ready])

    def _update(self, p: Tensor, grad: Tensor, state: dict[str, Any], group: dict[str, Any]) -> None:
        # each line is one fused dispatch: at most four per parameter (weight decay, momentum, Nesterov, update)
        mu, wd = group["momentum"], group["weight_decay"]
        if wd:
            grad = elementwise(AXPBY, grad, p, 1.0, float(wd))
        if mu:
            buf = state.get("momentum_buffer")
            if buf is None:
                buf = state["momentum_buffer"] = grad.clone()
            else:
                write_into(buf, AXPBY, buf, grad, float(mu), 1.0 - group["dampening"])
            grad = elementwise(AXPBY, grad, buf, 1.0, float(mu)) if group["nesterov"] else buf
        if group["capturable"]:  # the learning rate from its device tensor (vkblas.graphs)
            write_into(p, SUB_SCALED, p, grad, self._scalars[id(group)]["lr"])
        else:
            write_into(p, AXPBY, p, grad, 1.0, -float(group["lr"]))
