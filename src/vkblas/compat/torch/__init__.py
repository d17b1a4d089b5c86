"""``torch`` under ``vkblas run``: vkblas's tensors, ops, autograd and dtypes under PyTorch's names, and the
sub-modules of this package as ``torch.nn``, ``torch.optim``, ``torch.utils.data``, ``torch.cuda``, ... . A name
that is not here fails with an error naming it (``torch.tril is not implemented in vkblas yet``).

What is not a plain vkblas name: ``randint`` with PyTorch's ``(high, size)`` form; ``compile`` (the model itself:
vkblas runs eagerly, and says so once); ``autocast`` (vkblas's float16 mixed precision, :mod:`.amp`); ``save`` /
``load`` (:mod:`.serialization`); ``set_float32_matmul_precision`` (recorded: vkblas's float32 matmul is always
full float32, which every setting allows); ``inference_mode`` (``no_grad``); ``bfloat16`` (a name that fails when
used).
"""

from __future__ import annotations

import builtins as _builtins  # this module's int, float and bool are PyTorch's dtypes
from types import ModuleType
from typing import Any

import vkblas as _vkblas

from ..missing import missing as _missing
from ..notice import say_once as _say_once

# vkblas's functions, classes and dtypes; its sub-packages are replaced by this package's modules below
globals().update(
    {
        k: v
        for k, v in vars(_vkblas).items()
        if not k.startswith("_") and not isinstance(v, ModuleType) and k not in ("info", "devices", "gradcheck")
    }
)

from . import (  # noqa: E402
    accelerator,
    amp,
    autograd,
    backends,
    cuda,
    distributed,
    nn,
    optim,
    serialization,
    utils,
)
from .amp import autocast, get_autocast_dtype, is_autocast_enabled  # noqa: E402
from .serialization import load, save  # noqa: E402

__version__ = "2.6.0+vkblas"  # the PyTorch API level this shim follows (torch.accelerator arrived in 2.6)
__getattr__ = _missing("torch")


class _UnsupportedDType:
    """A dtype PyTorch has and vkblas does not: it can be named (``{"bfloat16": torch.bfloat16}``), not used."""

    def __init__(self, name: str) -> None:
        self.name = name

    def __repr__(self) -> str:
        return f"torch.{self.name} (not supported by vkblas)"


bfloat16 = _UnsupportedDType("bfloat16")


def randint(*args: Any, size: Any = None, **kwargs: Any) -> Any:
    """``randint(high, size)`` or ``randint(low, high, size)``, PyTorch's two forms."""
    if size is None and len(args) >= 2 and not isinstance(args[-1], _builtins.int):
        *bounds, size = args
    else:
        bounds = list(args)
    low, high = (0, bounds[0]) if len(bounds) == 1 else bounds
    return _vkblas.randint(low, high, size if size is not None else (), **kwargs)


def compile(model: Any = None, **kwargs: Any) -> Any:  # noqa: A001 - PyTorch's name
    """``torch.compile``: vkblas has no compiler; the model (or function) is returned as it is and runs eagerly."""
    _say_once("compile", "torch.compile runs the model eagerly (vkblas has no compiler)")
    return model if model is not None else (lambda m: m)


_matmul_precision = "highest"


def set_float32_matmul_precision(precision: str) -> None:
    global _matmul_precision
    if precision not in ("highest", "high", "medium"):
        raise RuntimeError(f"Invalid float32 matmul precision {precision!r}: expected 'highest', 'high' or 'medium'")
    _matmul_precision = precision


def get_float32_matmul_precision() -> str:
    return _matmul_precision


class inference_mode(_vkblas.set_grad_enabled):  # noqa: N801 - PyTorch's name
    """``no_grad`` (vkblas records nothing under it either); ``inference_mode(False)`` changes nothing."""

    def __init__(self, mode: bool = True) -> None:
        super().__init__(False)
        self.active = mode

    def __enter__(self) -> None:
        if self.active:
            super().__enter__()

    def __exit__(self, *exc: object) -> None:
        if self.active:
            super().__exit__(*exc)
