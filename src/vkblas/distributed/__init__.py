"""Training one model on many workers: on one machine (``local``) or over the internet (``coordinator`` and
``worker``), with one set of update rules, batch sizing, codecs and metrics shared by both transports.

The pure pieces (no transport, no I/O), used by every runner:

* :mod:`.algorithms`: the global model and its update rules: synchronous averaging, asynchronous updates with a
  staleness bound and staleness-aware scaling, and DiLoCo's outer Nesterov step.
* :mod:`.validation`: the checks every incoming update passes before it touches the model.
* :mod:`.sizing`: measured speed -> batch shares and work-unit sizes; idle-time accounting.
* :mod:`.codec`: what travels (fp32, fp16, int8 with per-block scales, error feedback) as safetensors payloads.
* :mod:`.metrics`: per-worker and per-run counters (samples/s, idle fraction, accepted / stale / rejected updates,
  a staleness histogram) for ``metrics.json`` and progress bars.

Over the network (``vkblas distributed serve | join | status``, :mod:`.cli`; docs/PROTOCOL.md):

* :mod:`.protocol`: the ``/v1`` messages, limits and error codes, shared by both sides; :mod:`.shards`: model and
  data shards and the samples of a work unit.
* :mod:`.coordinator`: the ASGI app, its database, migrations, shard store and the applier (server extra).
* :mod:`.worker`: the volunteer's client (httpx only).
"""

from .algorithms import ALGORITHMS, GlobalModel, Judgement, StalenessFilter, pseudo_gradient, weighted_mean
from .codec import CODECS, ErrorFeedback, decode, encode, from_payload, to_payload
from .metrics import RunMetrics, WorkerMetrics
from .sizing import IdleClock, RateMeter, StepTimeModel, batch_for_time, split_batch, split_for_time
from .validation import RejectedUpdateError, Signature, check_update, signature_of

__all__ = [
    "ALGORITHMS",
    "CODECS",
    "ErrorFeedback",
    "GlobalModel",
    "IdleClock",
    "Judgement",
    "RateMeter",
    "RejectedUpdateError",
    "RunMetrics",
    "Signature",
    "StalenessFilter",
    "StepTimeModel",
    "WorkerMetrics",
    "batch_for_time",
    "check_update",
    "decode",
    "encode",
    "from_payload",
    "pseudo_gradient",
    "signature_of",
    "split_batch",
    "split_for_time",
    "to_payload",
    "weighted_mean",
]
