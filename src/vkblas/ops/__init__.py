"""Every op of vkblas, forward and backward, written against the backend contract (backend/base.py).

Tensor methods and the ``vkblas.*`` functions both come from here.
"""

from ..creation import bernoulli_, normal_, uniform_
from ._core import empty, full, norm_dim
from .indexing import gather, getitem, index_select, one_hot, scatter_add, setitem
from .linalg import bmm, matmul, mm
from .pointwise import (  # noqa: F401
    BINARY,
    COMPARE,
    UNARY,
    add,
    add_,
    addcdiv_,
    addcmul_,
    binary,
    clamp,
    clamp_,
    clip,
    copy_,
    div_,
    exp_,
    fill_,
    gelu,
    leaky_relu,
    lerp_,
    logical_not,
    masked_fill,
    masked_fill_,
    mul_,
    neg_,
    pow_,
    relu_,
    sqrt_,
    sub,
    sub_,
    where,
    zero_,
)
from .reduction import (
    all,
    amax,
    amin,
    any,
    argmax,
    argmin,
    log_softmax,
    logsumexp,
    max,
    mean,
    min,
    softmax,
    std,
    sum,
    var,
)
from .shape import (
    cat,
    chunk,
    clone,
    contiguous,
    expand,
    expand_as,
    flatten,
    narrow,
    permute,
    repeat,
    reshape,
    split,
    squeeze,
    stack,
    t,
    to,
    transpose,
    unbind,
    unsqueeze,
    view,
    view_as,
)

globals().update({k: v for k, v in UNARY.items() if k != "gelu"})  # gelu(approximate=...) is defined above
globals().update({k: v for k, v in BINARY.items() if k not in ("add", "sub")})
globals().update(COMPARE)

__all__ = [n for n in dir() if not n.startswith("_")]

from .conv import avg_pool2d, conv2d, max_pool2d  # noqa: E402  (conv is composed from the ops above)

__all__ += ["avg_pool2d", "conv2d", "max_pool2d"]
