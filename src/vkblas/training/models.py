"""The models of ``vkblas train``, written as a PyTorch user writes them.

Each builder takes the ``nn`` namespace to build with (``vkblas.nn`` by default; ``torch.nn`` works too), so the
benchmark trains *the same* model in both frameworks, and the ``state_dict`` names (``0.weight`` …) match: a
checkpoint moves between vkblas and PyTorch as is.

>>> model = mlp()
>>> sum(p.numel() for p in model.parameters())
535818
"""

from __future__ import annotations

from collections.abc import Callable
from types import ModuleType
from typing import Any

Model = Any  # a vkblas.nn.Module (or torch.nn.Module when built with torch.nn)


def _nn(nn: ModuleType | None) -> ModuleType:
    if nn is None:
        from .. import nn as vkblas_nn

        return vkblas_nn
    return nn


def mlp(nn: ModuleType | None = None, num_classes: int = 10, dropout: float = 0.2) -> Model:
    """784-512-256-10 with ReLU and dropout."""
    nn = _nn(nn)
    return nn.Sequential(
        nn.Flatten(),
        nn.Linear(28 * 28, 512),
        nn.ReLU(),
        nn.Dropout(dropout),
        nn.Linear(512, 256),
        nn.ReLU(),
        nn.Dropout(dropout),
        nn.Linear(256, num_classes),
    )


def cnn(nn: ModuleType | None = None, num_classes: int = 10, dropout: float = 0.25) -> Model:
    """Two 3x3 conv layers (32, 64 channels) each followed by 2x2 max-pooling, then 3136-128-10."""
    nn = _nn(nn)
    return nn.Sequential(
        nn.Conv2d(1, 32, kernel_size=3, padding=1),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Conv2d(32, 64, kernel_size=3, padding=1),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Flatten(),
        nn.Linear(64 * 7 * 7, 128),
        nn.ReLU(),
        nn.Dropout(dropout),
        nn.Linear(128, num_classes),
    )


MODELS: dict[str, Callable[..., Model]] = {"mlp": mlp, "cnn": cnn}


def build(name: str, nn: ModuleType | None = None) -> Model:
    """The model called ``name`` (``mlp`` or ``cnn``)."""
    if name not in MODELS:
        raise ValueError(f"unknown model {name!r}: choose from {', '.join(MODELS)}")
    return MODELS[name](nn)
