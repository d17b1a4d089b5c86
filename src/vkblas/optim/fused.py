"""The optimizers' fused update formulas, registered in the backend's elementwise table (``define``): each is one
dispatch per tensor, and never reads back to the host. Formulas are written over the math namespace ``m`` (see
``backend/elementwise.py``); operands are tensors' elements or Python numbers (hyper-parameters), or 0-d device
tensors (a capturable group's lr, step count and bias corrections).
"""

from __future__ import annotations

from ..backend.elementwise import define

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
