"""The layers of ``vkblas.nn``, grouped by kind."""

from .activation import GELU, Identity, LeakyReLU, LogSoftmax, ReLU, Sigmoid, SiLU, Softmax, Tanh
from .conv import AvgPool2d, Conv2d, MaxPool2d
from .linear import Dropout, Embedding, Flatten, Linear
from .norm import BatchNorm1d, BatchNorm2d, LayerNorm, RMSNorm

__all__ = [
    "GELU",
    "AvgPool2d",
    "BatchNorm1d",
    "BatchNorm2d",
    "Conv2d",
    "Dropout",
    "Embedding",
    "Flatten",
    "Identity",
    "LayerNorm",
    "LeakyReLU",
    "LogSoftmax",
    "Linear",
    "MaxPool2d",
    "RMSNorm",
    "ReLU",
    "SiLU",
    "Sigmoid",
    "Softmax",
    "Tanh",
]
