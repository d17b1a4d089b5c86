"""The coordinator's evaluation of the model on the test split, as ``vkblas train`` evaluates (same loss, same
data, ``training.loop.evaluate``), on the ``cpu`` device; for a GPT, the mean loss and next-token accuracy on fixed
blocks of the validation split.

It runs beside the serving threads on the same machine as the workers often do, so it is kept small: on at most
``threads`` BLAS threads and cpu-backend threads (numpy's BLAS would otherwise take every core, and OpenBLAS's
threads spin after each product), and the applier runs it at a bounded share of the wall time."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator, Mapping
from contextlib import nullcontext

import numpy as np

from ...autograd import no_grad
from ...backend.base import thread_cap
from ...creation import tensor
from ...training.fit import EVAL_BATCH, load_dataset
from ...training.loop import evaluate
from ..nets import build, load_params
from ..text import block_size, is_text, val_blocks
from .config import RunSpec

TEXT_EVAL_BLOCKS = 16  # blocks of the validation split: a 50M GPT evaluates them in seconds on a CPU
EVAL_THREADS = 2
log = logging.getLogger("vkblas.coordinator")


def blas_limiter() -> object | None:
    """threadpoolctl's controller of this process's BLAS libraries, or None if threadpoolctl is not installed
    (then the evaluation's BLAS uses every core)."""
    try:
        from threadpoolctl import ThreadpoolController
    except ImportError:
        log.warning("threadpoolctl is not installed: the evaluation's BLAS uses every core (pip install threadpoolctl)")
        return None
    return ThreadpoolController()


class _Weights(Mapping[str, np.ndarray]):
    """Weights read one at a time when asked for (``get(name)``), never all at once."""

    def __init__(self, get: Callable[[str], np.ndarray], names: list[str]) -> None:
        self.get, self.names = get, names

    def __getitem__(self, name: str) -> np.ndarray:
        if name not in self.names:
            raise KeyError(name)
        return self.get(name)

    def __contains__(self, name: object) -> bool:
        return name in self.names

    def __iter__(self) -> Iterator[str]:
        return iter(self.names)

    def __len__(self) -> int:
        return len(self.names)


class Evaluator:
    """Call with the model's weights; returns (mean test loss, test accuracy)."""

    def __init__(self, spec: RunSpec, data: str | None, threads: int = EVAL_THREADS) -> None:
        from ... import nn

        self.threads = threads
        self._blas = blas_limiter()

        self.text = is_text(spec.dataset)
        if self.text:
            self.x, self.y = val_blocks(spec.dataset, data, block_size(spec.model), TEXT_EVAL_BLOCKS)
        else:
            ds = load_dataset(spec.dataset, False, data, spec.limit)
            self.x, self.y = ds.get_batch(np.arange(len(ds)))
        self.model = build(spec.model, spec.dataset).to("cpu")
        self.loss_fn = nn.CrossEntropyLoss()

    def __call__(self, params: Mapping[str, np.ndarray]) -> tuple[float, float]:
        load_params(self.model, params)
        return self.run()

    def load(self, get: Callable[[str], np.ndarray], names: list[str]) -> None:
        """Copy the weights ``get(name)`` gives into this evaluator's model, one tensor at a time (the coordinator
        reads them from its model: no whole copy beside the two models)."""
        load_params(self.model, _Weights(get, names))

    def run(self) -> tuple[float, float]:
        """(mean test loss, test accuracy) of the weights loaded last, on at most ``threads`` threads."""
        # BLAS threads are the process's: capped while this runs (the coordinator's only BLAS work), then restored
        blas = self._blas.limit(limits=self.threads, user_api="blas") if self._blas is not None else nullcontext()
        with blas, thread_cap(self.threads):
            return self._run()

    def _run(self) -> tuple[float, float]:
        if self.text:
            return self._text()
        batches = [
            (tensor(self.x[i : i + EVAL_BATCH], device="cpu"), tensor(self.y[i : i + EVAL_BATCH], device="cpu"))
            for i in range(0, len(self.y), EVAL_BATCH)
        ]
        result = evaluate(self.model, batches, self.loss_fn, show=False)
        return result.loss, result.accuracy

    @no_grad()
    def _text(self) -> tuple[float, float]:
        self.model.eval()
        total, right, n = 0.0, 0, 0
        for i in range(0, len(self.y), 8):
            x, y = self.x[i : i + 8], self.y[i : i + 8]
            logits, loss = self.model(tensor(x, device="cpu"), targets=tensor(y, device="cpu"))
            total += float(loss.item()) * y.size
            right += int((logits.numpy().argmax(-1) == y).sum())
            n += y.size
        return total / n, right / n
