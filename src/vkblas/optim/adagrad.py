"""Adagrad (Duchi et al., 2011): per-coordinate learning rates from the sum of squared gradients."""

from __future__ import annotations

from typing import Any

from ..dtypes import float32
from ..ops._core import elementwise, full, write_into
from ..tensor import Tensor
from .fused import ACC_SQ, ADAGRAD_LR, ADAM_APPLY, AXPBY
from .optimizer import Optimizer, ParamsT, check_hyper


class Adagrad(Optimizer):
    r"""Adagrad as in PyTorch's documentation. For each parameter :math:`\theta`, learning rate :math:`\gamma`,
    learning-rate decay :math:`\eta`, weight decay :math:`\lambda`:

    .. math::
        \tilde\gamma &\leftarrow \gamma / (1 + (t - 1) \eta) \\
        g_t &\leftarrow g_t + \lambda \theta_{t-1} \\
        s_t &\leftarrow s_{t-1} + g_t^2 \qquad (s_0 = \text{initial\_accumulator\_value}) \\
        \theta_t &\leftarrow \theta_{t-1} - \tilde\gamma g_t / (\sqrt{s_t} + \epsilon)

    ``s`` is ``sum``. Two fused dispatches per parameter. ``capturable=True`` (not in PyTorch's Adagrad, which
    has ``fused`` instead): the step count and the decayed learning rate live on the device, for ``vkblas.graphs``.
    """

    def __init__(
        self,
        params: ParamsT,
        lr: float = 1e-2,
        lr_decay: float = 0.0,
        weight_decay: float = 0.0,
        initial_accumulator_value: float = 0.0,
        eps: float = 1e-10,
        *,
        maximize: bool = False,
        capturable: bool = False,
    ) -> None:
        defaults = dict(
            lr=lr,
            lr_decay=lr_decay,
            eps=eps,
            weight_decay=weight_decay,
            initial_accumulator_value=initial_accumulator_value,
            maximize=maximize,
            capturable=capturable,
        )
        super().__init__(params, defaults)

    def _check_group(self, group: dict[str, Any]) -> None:
        super()._check_group(group)
        check_hyper("lr_decay", group["lr_decay"])
        check_hyper("weight_decay", group["weight_decay"])
        check_hyper("initial_accumulator_value", group["initial_accumulator_value"])
        check_hyper("epsilon", group["eps"])

    def _init_state(self, p: Tensor, state: dict[str, Any], group: dict[str, Any]) -> None:
        state["sum"] = full(p.shape, float(group["initial_accumulator_value"]), p.dtype, p._backend)

    def _init_scalars(self, group: dict[str, Any], sc: dict[str, Any], backend: Any) -> None:
        sc["clr"] = full((), 0.0, float32, backend)  # lr / (1 + (t - 1) * lr_decay)

    def _advance(self, group: dict[str, Any], sc: dict[str, Any]) -> None:
        super()._advance(group, sc)
        write_into(sc["clr"], ADAGRAD_LR, sc["lr"], sc["step"], float(group["lr_decay"]))

    def _update(self, p: Tensor, grad: Tensor, state: dict[str, Any], group: dict[str, Any]) -> None:
        wd = group["weight_decay"]
        if wd:
            grad = elementwise(AXPBY, grad, p, 1.0, float(wd))
        s = write_into(state["sum"], ACC_SQ, state["sum"], grad)
        if group["capturable"]:
            clr = self._scalars[id(group)]["clr"]
        else:
            clr = float(group["lr"]) / (1.0 + (state["step"] - 1) * group["lr_decay"])
        write_into(p, ADAM_APPLY, p, grad, s, clr, 1.0, float(group["eps"]), 1.0)  # p - clr g / (sqrt(s) + eps)
