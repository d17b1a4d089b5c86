"""The optimizers' fused update formulas, registered in the backend's elementwise table (``define``): each is one
dispatch per tensor, and never reads back to the host. Formulas are written over the math namespace ``m`` (see
``backend/elementwise.py``); operands are tensors' elements or Python numbers (hyper-parameters), or 0-d device
tensors (a capturable group's lr, step count and bias corrections).
"""

from __future__ import annotations

from typing import Any

from ..backend.elementwise import define
from ..ops._core import foreach

#: a * x + b * y: weight decay into the gradient, momentum buffers, Nesterov, the SGD update
AXPBY = define("axpby", lambda m, x, y, a, b: a * x + b * y)
#: beta * v + (1 - beta) * g^2: Adam's and RMSprop's second moment
EMA_SQ = define("ema_sq", lambda m, v, g, beta: beta * v + (1.0 - beta) * g * g)
#: x - s * y, with the learning rate ``s`` a device tensor (capturable SGD)
SUB_SCALED = define("sub_scaled", lambda m, x, y, s: x - s * y)
#: lr / (1 - beta1^t) and 1 / sqrt(1 - beta2^t): Adam's bias corrections from the step count t kept on the device
ADAM_STEP_SIZE = define("adam_step_size", lambda m, lr, t, beta1: lr / (1.0 - m.pow(beta1, t)))
ADAM_RSQRT_BC = define("adam_rsqrt_bc", lambda m, t, beta2: 1.0 / m.sqrt(1.0 - m.pow(beta2, t)))
#: p * decay - step * mom / (sqrt(v) * inv_sqrt_bc2 + eps): Adam / AdamW / RMSprop's parameter update
ADAM_APPLY = define(
    "adam_apply",
    lambda m, p, mom, v, step, inv_sqrt_bc2, eps, decay: p * decay - step * mom / (m.sqrt(v) * inv_sqrt_bc2 + eps),
)
#: a + w * (b - a), for the first moment, is ``lerp`` (an op: ``Tensor.lerp_``)
LERP = "lerp"


# ---------------------------------------------------------------- Adadelta, Adagrad, Adamax, NAdam, RAdam
def _adadelta_step(m: Any, u: Any, v: Any, g: Any, eps: Any) -> Any:
    """Adadelta's step sqrt(u + eps) / sqrt(v + eps) * g (u: the squared steps, v: the squared gradients)."""
    return m.sqrt(u + eps) / m.sqrt(v + eps) * g


def _adadelta_acc(m: Any, u: Any, v: Any, g: Any, rho: Any, eps: Any) -> Any:
    d = _adadelta_step(m, u, v, g, eps)
    return rho * u + (1.0 - rho) * d * d


def _nadam_mu(m: Any, t: Any, beta1: Any, psi: Any) -> Any:
    """NAdam's momentum schedule mu_t = beta1 (1 - 0.5 * 0.96^(t psi))."""
    return beta1 * (1.0 - 0.5 * m.pow(0.96, t * psi))


def _nadam_coef_m(m: Any, lr: Any, prod: Any, t: Any, beta1: Any, psi: Any) -> Any:
    mu_next = _nadam_mu(m, t + 1.0, beta1, psi)
    return -lr * mu_next / (1.0 - prod * mu_next)


def _radam_rho(m: Any, t: Any, beta2: Any) -> Any:
    """The length of RAdam's approximated simple moving average at step t."""
    rho_inf = 2.0 / (1.0 - beta2) - 1.0
    return rho_inf - 2.0 * t * m.pow(beta2, t) / (1.0 - m.pow(beta2, t))


def _radam_a(m: Any, t: Any, beta2: Any, first: Any) -> Any:
    """The variance rectification times sqrt(1 - beta2^t) from step ``first`` on (where rho_t > 5), else 0."""
    rho_inf, rho = 2.0 / (1.0 - beta2) - 1.0, _radam_rho(m, t, beta2)
    rect = m.sqrt(m.maximum((rho - 4.0) * (rho - 2.0) * rho_inf / ((rho_inf - 4.0) * (rho_inf - 2.0) * rho), 0.0))
    return m.where(t >= first, rect * m.sqrt(1.0 - m.pow(beta2, t)), 0.0)


#: s + g^2: Adagrad's sum of squares
ACC_SQ = define("acc_sq", lambda m, s, g: s + g * g)
#: Adadelta: the parameter and u each recompute the step from the same u (the parameter first): no temporary
ADADELTA_APPLY = define("adadelta_apply", lambda m, p, u, v, g, lr, eps: p - lr * _adadelta_step(m, u, v, g, eps))
ADADELTA_ACC = define("adadelta_acc", _adadelta_acc)
#: Adagrad's lr / (1 + (t - 1) * lr_decay) from the device step count
ADAGRAD_LR = define("adagrad_lr", lambda m, lr, t, decay: lr / (1.0 + (t - 1.0) * decay))
#: Adamax: u = max(beta2 u, |g| + eps), then p - step * m / u
ADAMAX_INF = define("adamax_inf", lambda m, u, g, beta2, eps: m.maximum(beta2 * u, m.abs(g) + eps))
DIV_APPLY = define("div_apply", lambda m, p, mom, u, step: p - step * mom / u)
#: NAdam: p * decay + (c_g g + c_m m) / (sqrt(v) inv_sqrt_bc2 + eps), with c_g = -lr (1 - mu_t) / (1 - prod mu)
#: and c_m = -lr mu_{t+1} / (1 - prod mu * mu_{t+1})
NADAM_APPLY = define(
    "nadam_apply",
    lambda m, p, g, mom, v, c_g, c_m, inv_sqrt_bc2, eps, decay: (
        p * decay + (c_g * g + c_m * mom) / (m.sqrt(v) * inv_sqrt_bc2 + eps)
    ),
)
#: capturable NAdam's device scalars: the running product of mu, then the two coefficients
NADAM_MU_PRODUCT = define("nadam_mu_product", lambda m, prod, t, beta1, psi: prod * _nadam_mu(m, t, beta1, psi))
NADAM_COEF_G = define(
    "nadam_coef_g", lambda m, lr, prod, t, beta1, psi: -lr * (1.0 - _nadam_mu(m, t, beta1, psi)) / (1.0 - prod)
)
NADAM_COEF_M = define("nadam_coef_m", _nadam_coef_m)
#: RAdam: p * decay - step * m * (a / (sqrt(v) + eps) + b): (a, b) = (rect sqrt(1 - beta2^t), 0) once the
#: variance is tractable, else (0, 1), the bias-corrected momentum alone
RADAM_APPLY = define(
    "radam_apply",
    lambda m, p, mom, v, step, a, b, eps, decay: p * decay - step * mom * (a / (m.sqrt(v) + eps) + b),
)
#: capturable RAdam's (a, b) from the device step count; the host gives the first step with rho_t > 5 (float64:
#: rho_t is a difference of two numbers near 2 / (1 - beta2), whose float32 rounding could flip the branch)
RADAM_A = define("radam_a", _radam_a)
RADAM_B = define("radam_b", lambda m, t, first: m.where(t >= first, 0.0, 1.0))


class Program:
    """A ``foreach`` program under construction (``backend/base.py``): slots ``0..nslots-1`` are each entry's
    tensors, :meth:`temp` adds a register, :meth:`s` a scalar (a Python number or a 0-d device tensor)."""

    def __init__(self, nslots: int) -> None:
        self.steps: list[tuple[int, str, tuple[int, ...]]] = []
        self.scalars: list[Any] = []
        self._next = nslots

    def s(self, value: Any) -> int:
        self.scalars.append(value)
        return -len(self.scalars)

    def temp(self) -> int:
        self._next += 1
        return self._next - 1

    def step(self, dst: int, op: str, *args: int) -> int:
        self.steps.append((dst, op, args))
        return dst

    def run(self, tensors: list[list[Any]]) -> None:
        foreach(tuple(self.steps), tensors, self.scalars)


def signed_grad(prog: Program, grad: int, param: int, group: dict[str, Any], l2: bool = True) -> int:
    """The slot holding the gradient after ``maximize`` and (with ``l2``) weight decay ``g + wd * p``; a register,
    so the stored ``.grad`` is never changed."""
    g = grad
    if group.get("maximize", False):
        g = prog.step(prog.temp(), "neg", g)
    wd = group.get("weight_decay", 0.0)
    if l2 and wd:
        g = prog.step(g if g != grad else prog.temp(), AXPBY, g, param, prog.s(1.0), prog.s(float(wd)))
    return g
