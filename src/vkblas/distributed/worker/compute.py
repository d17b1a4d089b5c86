"""One unit of work on the worker's device, and its result as the payload to upload.

* ``gradient`` (sync/async): the gradient of the mean loss over the unit's samples, from the leased weights.
* ``inner-steps`` (diloco): ``ceil(samples / batch_size)`` AdamW steps from the leased weights; the result is the
  pseudo-gradient ``start - end``. With ``inner_state="fresh"`` (the default) every unit starts a new AdamW, so
  the result is a function of the lease alone and another worker can recompute it (validation by redundancy);
  with ``"kept"`` the AdamW state stays on the worker from round to round (as OpenDiLoCo does), and the unit
  cannot be checked.

The result is encoded with the run's codec (optionally with error feedback: what int8/fp16 lost this time is added
to the next result) and carries the unit's seed-named randomness (``manual_seed(lease.seed)``), so the unit can be
recomputed by anyone.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import Any

import numpy as np

from ...creation import tensor
from ...random import manual_seed
from ...training.fit import make_optimizer
from ..algorithms import pseudo_gradient
from ..codec import ErrorFeedback, encode, to_payload
from ..nets import build, load_params
from ..protocol import UPLOAD_META_KEY, Lease, RunInfo, UploadMeta
from ..shards import UnitSamples
from ..text import is_text


def device_class(device: str) -> str:
    """What this device's rounding depends on, for homogeneous redundancy: ``vulkan/<adapter name>/<driver>``, or
    ``cpu/<arch>/<cpu model>/numpy <version>/<BLAS threads>`` (BLAS kernels follow the CPU model, and the thread
    count changes the order of sums)."""
    import os
    import platform

    from ...device import info

    if device.startswith("vulkan"):
        index = int(device.partition(":")[2] or 0)
        adapters = info()["adapters"]
        a = adapters[index] if index < len(adapters) else {}
        return f"vulkan/{a.get('name', '?')}/{a.get('driver', '?')}"[:128]
    model = platform.processor()
    try:
        with open("/proc/cpuinfo") as f:
            model = next((ln.split(":", 1)[1].strip() for ln in f if ln.startswith("model name")), model)
    except OSError:
        pass
    threads = os.environ.get("OPENBLAS_NUM_THREADS") or os.environ.get("OMP_NUM_THREADS") or str(os.cpu_count())
    return f"cpu/{platform.machine()}/{model}/numpy {np.__version__}/{threads} threads"[:128]


@dataclass
class Result:
    tensors: dict[str, np.ndarray]
    meta: dict[str, str]
    samples: int
    loss: float
    compute_s: float

    def payload(self, info: UploadMeta) -> bytes:
        return to_payload(self.tensors, {**self.meta, UPLOAD_META_KEY: json.dumps(info.model_dump())})


class Trainer:
    def __init__(
        self, run: RunInfo, device: str, *, error_feedback: bool = False, delay_per_sample: float = 0.0
    ) -> None:
        from ... import nn

        self.run, self.device = run, device
        self.model = build(run.model, run.dataset).to(device)
        self.text = is_text(run.dataset)
        self.names = [k for k, _ in self.model.named_parameters()]
        self.loss_fn = nn.CrossEntropyLoss()
        self.inner = None  # diloco's AdamW: made for every unit, or at the first and kept (lease.inner_state)
        self.feedback = ErrorFeedback(run.codec, run.block) if error_feedback and run.codec != "fp32" else None
        self.delay_per_sample = delay_per_sample  # a test and benchmark hook: a slower device

    def __call__(self, lease: Lease, params: dict[str, np.ndarray], data: UnitSamples) -> Result:
        t0 = time.perf_counter()
        load_params(self.model, params)
        self.model.train()
        manual_seed(lease.seed)
        if lease.kind == "gradient":
            update, loss = self._gradient(*data.arrays())
        else:
            update, loss = self._inner_steps(lease, params, data)
        if self.delay_per_sample:
            time.sleep(self.delay_per_sample * len(data))
        compute_s = time.perf_counter() - t0
        if self.feedback is not None:
            tensors, meta = self.feedback.compress(update)
        else:
            tensors, meta = encode(update, lease.codec, lease.block)
        return Result(tensors, meta, len(data), loss, compute_s)

    def _gradient(self, x: np.ndarray, y: np.ndarray) -> tuple[dict[str, np.ndarray], float]:
        self.model.zero_grad()
        loss = self._loss(x, y)
        loss.backward()
        grads = {k: p.grad.numpy() for k, p in self.model.named_parameters()}
        return grads, float(loss.item())

    def _loss(self, x: np.ndarray, y: np.ndarray) -> Any:
        """The mean loss of a batch: cross-entropy of the classes, or of every next token (a GPT's own loss)."""
        xt, yt = tensor(x, device=self.device), tensor(y, device=self.device)
        return self.model(xt, targets=yt)[1] if self.text else self.loss_fn(self.model(xt), yt)

    def _inner_steps(
        self, lease: Lease, params: dict[str, np.ndarray], data: UnitSamples
    ) -> tuple[dict[str, np.ndarray], float]:
        if self.inner is None or lease.inner_state == "fresh":
            self.inner = make_optimizer("adamw", self.model.parameters(), lease.lr)
        for group in self.inner.param_groups:
            group["lr"] = lease.lr
        total, n = 0.0, 0
        for xb, yb in data.batches(lease.batch_size):
            self.inner.zero_grad()
            loss = self._loss(xb, yb)
            loss.backward()
            self.inner.step()
            total, n = total + float(loss.item()) * len(yb), n + len(yb)
        end = {k: p.detach().numpy() for k, p in self.model.named_parameters()}
        return pseudo_gradient({k: params[k] for k in end}, end), total / max(n, 1)
