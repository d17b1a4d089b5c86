"""``vkblas.nn``: modules, layers, losses, initialisation and functional ops, with PyTorch's names."""

from . import functional, init, utils
from .containers import ModuleDict, ModuleList, ParameterList, Sequential
from .layers import (
    GELU,
    AvgPool2d,
    BatchNorm1d,
    BatchNorm2d,
    Conv2d,
    Dropout,
    Embedding,
    Flatten,
    Identity,
    LayerNorm,
    LeakyReLU,
    Linear,
    LogSoftmax,
    MaxPool2d,
    ReLU,
    RMSNorm,
    Sigmoid,
    SiLU,
    Softmax,
    Tanh,
)
from .losses import BCELoss, BCEWithLogitsLoss, CrossEntropyLoss, L1Loss, MSELoss, NLLLoss
from .module import Module
from .parameter import Parameter

__all__ = [
    "GELU", "AvgPool2d", "BCELoss", "BCEWithLogitsLoss", "BatchNorm1d", "BatchNorm2d", "Conv2d", "CrossEntropyLoss",
    "Dropout", "Embedding", "Flatten", "Identity", "L1Loss", "LayerNorm", "LeakyReLU", "Linear", "LogSoftmax",
    "MSELoss", "MaxPool2d", "Module", "ModuleDict", "ModuleList", "NLLLoss", "Parameter", "ParameterList", "RMSNorm",
    "ReLU", "Sequential", "SiLU", "Sigmoid", "Softmax", "Tanh", "functional", "init", "utils",
]
