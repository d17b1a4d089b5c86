"""Transforms on numpy images, for one image ``(H, W)`` / ``(C, H, W)`` or a batch ``(N, ...)`` alike.

Datasets apply them to whole batches at once, so they are vectorised numpy, not per-image Python.

>>> import numpy as np
>>> t = Compose([ToTensor(), Normalize((0.5,), (0.5,))])
>>> t(np.array([[0, 255]], dtype=np.uint8)).tolist()
[[[-1.0, 1.0]]]
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

Transform = Callable[[np.ndarray], np.ndarray]


class Compose:
    def __init__(self, transforms: Sequence[Transform]) -> None:
        self.transforms = list(transforms)
        #: the same input always gives the same output, so a dataset may transform everything once and cache it
        self.deterministic = all(getattr(t, "deterministic", False) for t in self.transforms)

    def __call__(self, x: np.ndarray) -> np.ndarray:
        for t in self.transforms:
            x = t(x)
        return x

    def __repr__(self) -> str:
        return f"Compose({self.transforms!r})"


class ToTensor:
    """uint8 pixels ``[..., H, W]`` -> float32 in [0, 1] with a channel axis: ``[..., 1, H, W]``."""

    deterministic = True

    def __call__(self, x: np.ndarray) -> np.ndarray:
        out = np.array(x, dtype=np.float32)  # a fresh array, so the scaling can run in place (one pass less)
        out *= np.float32(1.0 / 255.0)
        return np.expand_dims(out, -3)

    def __repr__(self) -> str:
        return "ToTensor()"


class Normalize:
    """``(x - mean) / std`` per channel (the channel axis is ``-3``)."""

    deterministic = True

    def __init__(self, mean: Sequence[float], std: Sequence[float]) -> None:
        if len(mean) != len(std):
            raise ValueError(f"Normalize: {len(mean)} means but {len(std)} standard deviations")
        if any(s <= 0 for s in std):
            raise ValueError(f"Normalize: standard deviations must be positive, got {tuple(std)}")
        self.mean = np.asarray(mean, dtype=np.float32).reshape(-1, 1, 1)
        self.inv_std = (1.0 / np.asarray(std, dtype=np.float32)).reshape(-1, 1, 1)

    def __call__(self, x: np.ndarray) -> np.ndarray:
        # x * (1/std) + (-mean/std): one new array, then in place (batches are large; passes over them count)
        out = np.multiply(x, self.inv_std, dtype=np.float32)
        out += -self.mean * self.inv_std
        return out

    def __repr__(self) -> str:
        return f"Normalize(mean={self.mean.ravel().tolist()}, std={(1 / self.inv_std).ravel().tolist()})"
