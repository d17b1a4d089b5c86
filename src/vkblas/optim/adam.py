"""Adam and AdamW (decoupled weight decay), with optional AMSGrad."""

from __future__ import annotations

import math
from typing import Any

from ..dtypes import float32
from ..ops._core import elementwise, full, write_into
from ..tensor import Tensor
from .fused import ADAM_APPLY, ADAM_RSQRT_BC, ADAM_STEP_SIZE, AXPBY, EMA_SQ, LERP, Program, signed_grad
from .optimizer import Optimizer, ParamsT, check_hyper


class Adam(Optimizer):
    r"""Adam (Kingma & Ba, 2015), as in PyTorch's documentation. For each parameter :math:`\theta`, step
    :math:`t`, learning rate :math:`\gamma`, betas :math:`\beta_1, \beta_2`, weight decay :math:`\lambda`:

    .. math::
        g_t &\leftarrow \nabla_\theta f_t(\theta_{t-1}) \quad (-g_t \text{ if maximize}) \\
        \text{Adam: } g_t &\leftarrow g_t + \lambda \theta_{t-1} \qquad
        \text{AdamW: } \theta_{t-1} \leftarrow \theta_{t-1} (1 - \gamma \lambda) \\
        m_t &\leftarrow \beta_1 m_{t-1} + (1 - \beta_1) g_t \\
        v_t &\leftarrow \beta_2 v_{t-1} + (1 - \beta_2) g_t^2 \\
        \hat m_t &\leftarrow m_t / (1 - \beta_1^t) \\
        \hat v_t &\leftarrow \max(\hat v_{t-1}^{max}, v_t) / (1 - \beta_2^t) \text{ (AMSGrad) else }
            v_t / (1 - \beta_2^t) \\
        \theta_t &\leftarrow \theta_{t-1} - \gamma \hat m_t / (\sqrt{\hat v_t} + \epsilon)

    ``m`` (``exp_avg``), ``v`` (``exp_avg_sq``) and ``max_exp_avg_sq`` are created on the first step, on the
    parameter's device; every line above is one in-place device op.

    ``capturable=True`` (for ``vkblas.graphs``): the step count, learning rate and bias corrections are 0-d device
    tensors per group, advanced by three (AdamW with weight decay: four) tiny dispatches per group and step; see
    ``vkblas.optim.optimizer``.
    """

    decoupled_weight_decay = False

    def __init__(
        self,
        params: ParamsT,
        lr: float = 1e-3,
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-8,
        weight_decay: float = 0.0,
        amsgrad: bool = False,
        *,
        maximize: bool = False,
        capturable: bool = False,
    ) -> None:
        super().__init__(
            params,
            dict(
                lr=lr,
                betas=tuple(betas),
                eps=eps,
                weight_decay=weight_decay,
                amsgrad=amsgrad,
                maximize=maximize,
                capturable=capturable,
            ),
        )

    def _check_group(self, group: dict[str, Any]) -> None:
        super()._check_group(group)
        check_hyper("epsilon", group["eps"])
        check_hyper("beta parameter at index 0", group["betas"][0], 0.0, 1.0)
        check_hyper("beta parameter at index 1", group["betas"][1], 0.0, 1.0)
        check_hyper("weight_decay", group["weight_decay"])

    def _init_state(self, p: Tensor, state: dict[str, Any], group: dict[str, Any]) -> None:
        state["exp_avg"] = full(p.shape, 0.0, p.dtype, p._backend)
        state["exp_avg_sq"] = full(p.shape, 0.0, p.dtype, p._backend)
        if group["amsgrad"]:
            state["max_exp_avg_sq"] = full(p.shape, 0.0, p.dtype, p._backend)

    def _init_scalars(self, group: dict[str, Any], sc: dict[str, Any], backend: Any) -> None:
        sc["step_size"] = full((), 0.0, float32, backend)  # lr / (1 - beta1^t)
        sc["rsqrt_bc2"] = full((), 0.0, float32, backend)  # 1 / sqrt(1 - beta2^t)
        if self.decoupled_weight_decay and group["weight_decay"]:
            sc["decay"] = full((), 1.0, float32, backend)  # 1 - lr * weight_decay

    def _advance(self, group: dict[str, Any], sc: dict[str, Any]) -> None:
        # one foreach dispatch: the step count, then the bias corrections (and AdamW's decay) from it
        (beta1, beta2), names = group["betas"], ["step", "step_size", "rsqrt_bc2", "decay"]
        prog = Program(4 if "decay" in sc else 3)
        lr = prog.s(sc["lr"])
        prog.step(0, "add", 0, prog.s(1.0))
        prog.step(1, ADAM_STEP_SIZE, lr, 0, prog.s(float(beta1)))
        prog.step(2, ADAM_RSQRT_BC, 0, prog.s(float(beta2)))
        if "decay" in sc:
            prog.step(3, AXPBY, lr, prog.s(1.0), prog.s(-float(group["weight_decay"])), prog.s(1.0))
        prog.run([[sc[n] for n in names if n in sc]])

    def _update_group(self, group: dict[str, Any], items: list[tuple[Tensor, Tensor, dict[str, Any]]]) -> None:
        """Every parameter of the group in one ``foreach`` per distinct step count (one in practice): on a GPU one
        dispatch per few parameters, the same formulas as :meth:`_update`."""
        by_step: dict[Any, list[tuple[Tensor, Tensor, dict[str, Any]]]] = {}
        for item in items:
            t = item[2]["step"]
            by_step.setdefault(t if isinstance(t, int) else id(t), []).append(item)
        for same in by_step.values():
            self._update_fused(group, same)

    def _update_fused(self, group: dict[str, Any], items: list[tuple[Tensor, Tensor, dict[str, Any]]]) -> None:
        lr, (beta1, beta2), eps, wd = group["lr"], group["betas"], group["eps"], group["weight_decay"]
        amsgrad = group["amsgrad"]
        prog = Program(5 if amsgrad else 4)  # p, grad, exp_avg, exp_avg_sq (, max_exp_avg_sq)
        g = signed_grad(prog, 1, 0, group, l2=not self.decoupled_weight_decay)
        prog.step(2, LERP, 2, g, prog.s(1.0 - beta1))
        v = prog.step(3, EMA_SQ, 3, g, prog.s(float(beta2)))
        if amsgrad:
            v = prog.step(4, "maximum", 4, 3)
        if group["capturable"]:
            sc = self._scalars[id(group)]
            step_size, rsqrt_bc2, decay = sc["step_size"], sc["rsqrt_bc2"], sc.get("decay", 1.0)
        else:
            t = items[0][2]["step"]
            step_size, rsqrt_bc2 = lr / (1 - beta1**t), 1 / math.sqrt(1 - beta2**t)
            decay = 1.0 - lr * wd if wd and self.decoupled_weight_decay else 1.0
        prog.step(0, ADAM_APPLY, 0, 2, v, prog.s(step_size), prog.s(rsqrt_bc2), prog.s(float(eps)), prog.s(decay))
        names = ["exp_avg", "exp_avg_sq", "max_exp_avg_sq"] if amsgrad else ["exp_avg", "exp_avg_sq"]
        prog.run([[p, grad, *(state[n] for n in names)] for p, grad, state in items])

    def _update(self, p: Tensor, grad: Tensor, state: dict[str, Any], group: dict[str, Any]) -> None:
        # three fused dispatches per parameter (EMA of g, EMA of g^2, the update), four with AMSGrad
        lr, (beta1, beta2), eps, wd = group["lr"], group["betas"], group["eps"], group["weight_decay"]
        t = state["step"]
        decay = 1.0
        if wd and self.decoupled_weight_decay:
            decay = 1.0 - lr * wd
        elif wd:
            grad = elementwise(AXPBY, grad, p, 1.0, float(wd))
        m, v = state["exp_avg"], state["exp_avg_sq"]
        write_into(m, LERP, m, grad, 1.0 - beta1)
        write_into(v, EMA_SQ, v, grad, float(beta2))
        if group["amsgrad"]:
            v = write_into(state["max_exp_avg_sq"], "maximum", state["max_exp_avg_sq"], v)
        if group["capturable"]:
            sc = self._scalars[id(group)]
            write_into(p, ADAM_APPLY, p, m, v, sc["step_size"], sc["rsqrt_bc2"], float(eps), sc.get("decay", 1.0))
            return
        bias1, bias2 = 1 - beta1**t, 1 - beta2**t
        write_into(p, ADAM_APPLY, p, m, v, lr / bias1, 1 / math.sqrt(bias2), float(eps), decay)


class AdamW(Adam):
    """Adam with decoupled weight decay (Loshchilov & Hutter, 2019): ``theta *= 1 - lr * weight_decay`` before the
    Adam step instead of adding ``weight_decay * theta`` to the gradient. Default ``weight_decay=1e-2``."""

    decoupled_weight_decay = True

    def __init__(
        self,
        params: ParamsT,
        lr: float = 1e-3,
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-8,
        weight_decay: float = 1e-2,
        amsgrad: bool = False,
        *,
        maximize: bool = False,
        capturable: bool = False,
    ) -> None:
        super().__init__(params, lr, betas, eps, weight_decay, amsgrad, maximize=maximize, capturable=capturable)
