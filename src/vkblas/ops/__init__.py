"""Every op of vkblas, forward and backward, written against the backend contract (backend/base.py).

Tensor methods and the ``vkblas.*`` functions both come from here.
"""

from ..creation import bernoulli_, normal_, uniform_
from ._core import empty, full, norm_dim
from .indexing import gather, getitem, index_select, one_hot, scatter_add, setitem
from .linalg import bmm, matmul, mm
from .pointwise import (
    BINARY,
    COMPARE,
    UNARY,
    add,
    add_,
    addcdiv_,
    addcmul_,
    clamp,
    clamp_,
    clip,
    copy_,
    div_,
    fill_,
    gelu,
    leaky_relu,
    lerp_,
    logical_not,
    masked_fill,
    masked_fill_,
    mul_,
    pow_,
    sub,
    sub_,
    where,
    zero_,
)
from .pointwise import exp_, neg_, relu_, sqrt_  # noqa: F401
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

globals().update(UNARY)
globals().update({k: v for k, v in BINARY.items() if k not in ("add", "sub")})
globals().update(COMPARE)

__all__ = [n for n in dir() if not n.startswith("_")]
