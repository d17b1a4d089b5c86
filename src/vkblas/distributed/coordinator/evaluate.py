"""The coordinator's evaluation of the model on the test split, as ``vkblas train`` evaluates (same loss, same
data, ``training.loop.evaluate``), on the ``cpu`` device."""

from __future__ import annotations

import numpy as np

from ...creation import tensor
from ...training.fit import EVAL_BATCH, load_dataset
from ...training.loop import evaluate
from ...training.models import build
from .config import RunSpec


class Evaluator:
    """Call with the model's weights; returns (mean test loss, test accuracy)."""

    def __init__(self, spec: RunSpec, data: str | None) -> None:
        from ... import nn

        ds = load_dataset(spec.dataset, False, data, spec.limit)
        self.x, self.y = ds.get_batch(np.arange(len(ds)))
        self.model = build(spec.model).to("cpu")
        self.loss_fn = nn.CrossEntropyLoss()

    def __call__(self, params: dict[str, np.ndarray]) -> tuple[float, float]:
        self.model.load_state_dict(params)
        batches = [
            (tensor(self.x[i : i + EVAL_BATCH], device="cpu"), tensor(self.y[i : i + EVAL_BATCH], device="cpu"))
            for i in range(0, len(self.y), EVAL_BATCH)
        ]
        result = evaluate(self.model, batches, self.loss_fn, show=False)
        return result.loss, result.accuracy
