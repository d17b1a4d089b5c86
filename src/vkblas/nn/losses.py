"""Loss modules: each holds its settings and calls the functional loss of the same name."""

from __future__ import annotations

from typing import Any

from ..tensor import Tensor
from . import functional as F
from .module import Module


class _Loss(Module):
    fn: Any = None
    #: names of constructor settings passed on to ``fn`` as keywords
    settings: tuple[str, ...] = ()

    def __init__(self, reduction: str = "mean", **settings: Any) -> None:
        super().__init__()
        F._check_reduction(type(self).__name__, reduction)
        self.reduction = reduction
        for k, v in settings.items():
            if isinstance(v, Tensor):
                self.register_buffer(k, v)
            else:
                setattr(self, k, v)

    def forward(self, input: Tensor, target: Tensor) -> Tensor:  # noqa: A002
        kw = {k: getattr(self, k) for k in self.settings}
        return type(self).fn(input, target, reduction=self.reduction, **kw)

    def extra_repr(self) -> str:
        return "" if self.reduction == "mean" else f"reduction='{self.reduction}'"


class MSELoss(_Loss):
    fn = staticmethod(F.mse_loss)


class L1Loss(_Loss):
    fn = staticmethod(F.l1_loss)


class CrossEntropyLoss(_Loss):
    fn = staticmethod(F.cross_entropy)
    settings = ("weight", "ignore_index", "label_smoothing")

    def __init__(
        self,
        weight: Tensor | None = None,
        ignore_index: int = -100,
        reduction: str = "mean",
        label_smoothing: float = 0.0,
    ) -> None:
        super().__init__(reduction, weight=weight, ignore_index=ignore_index, label_smoothing=label_smoothing)


class NLLLoss(_Loss):
    fn = staticmethod(F.nll_loss)
    settings = ("weight", "ignore_index")

    def __init__(self, weight: Tensor | None = None, ignore_index: int = -100, reduction: str = "mean") -> None:
        super().__init__(reduction, weight=weight, ignore_index=ignore_index)


class BCELoss(_Loss):
    fn = staticmethod(F.binary_cross_entropy)
    settings = ("weight",)

    def __init__(self, weight: Tensor | None = None, reduction: str = "mean") -> None:
        super().__init__(reduction, weight=weight)


class BCEWithLogitsLoss(_Loss):
    fn = staticmethod(F.binary_cross_entropy_with_logits)
    settings = ("weight", "pos_weight")

    def __init__(self, weight: Tensor | None = None, reduction: str = "mean", pos_weight: Tensor | None = None) -> None:
        super().__init__(reduction, weight=weight, pos_weight=pos_weight)
