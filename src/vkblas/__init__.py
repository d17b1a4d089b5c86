"""vkblas: a PyTorch-like machine-learning framework that trains on any GPU through Vulkan (wgpu).

>>> import vkblas
>>> x = vkblas.tensor([1.0, 2.0, 3.0], requires_grad=True, device="cpu")
>>> y = x * 2 + 3
>>> y.backward()
>>> x.grad
tensor([2., 2., 2.])
"""

from __future__ import annotations

from . import ops as _ops  # noqa: F401  (binds the Tensor methods)
from .autograd import enable_grad, grad, inference_mode, is_grad_enabled, no_grad, set_grad_enabled
from .backend.base import BackendError, DeviceOutOfMemoryError, NoAdapterError, UnsupportedError
from .creation import (
    arange,
    as_tensor,
    empty,
    empty_like,
    eye,
    from_numpy,
    full,
    full_like,
    linspace,
    ones,
    ones_like,
    rand,
    rand_like,
    randint,
    randn,
    randn_like,
    randperm,
    tensor,
    zeros,
    zeros_like,
)
from .device import device, devices, info, synchronize
from .dtypes import DType, bool_, double, float16, float32, float64, half, int8, int32, uint8
from .gradcheck import gradcheck

# the functional ops: vkblas.exp(x), vkblas.matmul(a, b), vkblas.cat([...]), ...
from .ops._core import clone
from .ops.conv import avg_pool2d, conv2d, max_pool2d
from .ops.einsum import einsum
from .ops.elementwise import *  # noqa: F403  (one function per elementwise op record)
from .ops.indexing import gather, index_select, one_hot, scatter_add
from .ops.linalg import bmm, matmul, mm
from .ops.parametric import allclose, isclose, round
from .ops.pointwise import add, clamp, clip, div, divide, gelu, leaky_relu, masked_fill, sub, true_divide, where
from .ops.rearrange import diagonal, flip, repeat_interleave, roll, tril, triu
from .ops.reduction import (
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
    prod,
    softmax,
    std,
    sum,
    var,
)
from .ops.sampling import multinomial
from .ops.scan import cumprod, cumsum
from .ops.scatter import index_add, index_copy, index_fill, masked_scatter, nonzero, scatter, scatter_reduce
from .ops.shape import (
    cat,
    chunk,
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
from .ops.sorting import argsort, sort, topk
from .ops.unary_math import *  # noqa: F403  (more records: rounding, trigonometric, erf, selu)
from .random import Generator, initial_seed, manual_seed
from .tensor import Tensor
from .version import __version__

bool = bool_  # noqa: A001 - PyTorch's name: vkblas.bool
int64 = long = int32  # accepted for PyTorch code; stored as int32 (see dtypes.py)
int = int32  # noqa: A001
float = float32  # noqa: A001


def is_tensor(obj: object) -> bool:
    return isinstance(obj, Tensor)


from . import accelerator, amp, data, graphs, nn, optim, utils  # noqa: E402  (the training stack sits on everything above)
from .amp import autocast  # noqa: E402  (PyTorch's vkblas.autocast)
from .io import load, save  # noqa: E402
from .jit import compile  # noqa: E402, A004  (PyTorch's name: vkblas.compile(step))
