"""``torch.backends.cuda`` under ``vkblas run`` (see the package's documentation)."""

from __future__ import annotations

from typing import Any

from ...missing import missing

__getattr__ = missing("torch.backends.cuda")


class _Matmul:
    """``torch.backends.cuda.matmul``: its known switches, recorded; an unknown one is an error."""

    __slots__ = ("allow_tf32", "allow_fp16_reduced_precision_reduction", "allow_bf16_reduced_precision_reduction")

    def __init__(self) -> None:
        self.allow_tf32 = False
        self.allow_fp16_reduced_precision_reduction = True
        self.allow_bf16_reduced_precision_reduction = True

    def __setattr__(self, name: str, value: Any) -> None:
        if name not in self.__slots__:
            raise AttributeError(f"torch.backends.cuda.matmul has no switch {name!r} under vkblas run")
        object.__setattr__(self, name, value)


matmul = _Matmul()


def is_built() -> bool:
    return False
