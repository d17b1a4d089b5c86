"""Run as a script (a fresh process, so its peak RSS is this measurement's alone): the extra memory of applying one
diloco round of int8 results and checkpointing it, streamed (the coordinator's way) and, for comparison, the whole
update at once. Prints one JSON line: the model's bytes and each way's peak RSS above the steady state.

``python scale_memory.py STORE_DIR`` (Linux: the peak is reset through ``/proc/self/clear_refs``)."""

from __future__ import annotations

import gc
import json
import re
import sys
from pathlib import Path

import numpy as np

from vkblas.distributed.algorithms import GlobalModel
from vkblas.distributed.codec import RangeDecoder, decode, encode, from_payload, to_payload
from vkblas.distributed.coordinator import checkpoints
from vkblas.distributed.coordinator.store import Store
from vkblas.distributed.robust import StreamedAggregate, aggregate

MiB = 1 << 20


def _kib(key: str) -> int:
    return int(re.search(rf"{key}:\s+(\d+)", Path("/proc/self/status").read_text()).group(1))


def _reset_peak() -> int:
    gc.collect()
    Path("/proc/self/clear_refs").write_text("5")  # VmHWM := VmRSS
    return _kib("VmRSS")


def main(root: str) -> None:
    rng = np.random.default_rng(0)
    # ~96 MB: 18 tensors of 4 MB and one of 24 MB (cut into pieces by the 16 MB shards)
    shapes = {f"layer{i}.weight": (1024, 1024) for i in range(18)} | {"wte.weight": (6144, 1024)}
    params = {k: rng.standard_normal(s, dtype=np.float32) * 0.02 for k, s in shapes.items()}
    model_bytes = sum(v.nbytes for v in params.values())
    model = GlobalModel(params, "diloco")
    del params
    store = Store(root)
    shas = []
    for seed in (1, 2):
        r = np.random.default_rng(seed)
        update = {k: r.standard_normal(s, dtype=np.float32) * 1e-3 for k, s in shapes.items()}
        shas.append(store.put(to_payload(*encode(update, "int8", 256))))
        del update
    weights = [100.0, 60.0]

    def streamed() -> None:
        stored = [store.open_payload(sha) for sha in shas]
        sources = [RangeDecoder(p.get, p.meta, p).values for p in stored]  # ranges read from the files
        model.apply_pseudo_gradient(StreamedAggregate(sources, weights, shapes))
        checkpoints.write(store, model)

    def whole() -> None:  # what the applier did before: every result decoded, the mean, then state_dict's copy
        updates = [decode(*from_payload(store.get(sha))) for sha in shas]
        model.apply_pseudo_gradient(aggregate(list(zip(updates, weights, strict=True))))
        store.put(to_payload(model.state_dict()))

    streamed()  # the first round makes the momentum buffers: state, not a round's extra memory
    out = {"model_mib": model_bytes / MiB}
    for name, fn in (("streamed", streamed), ("whole", whole)):
        base = _reset_peak()
        fn()
        out[f"{name}_extra_mib"] = (_kib("VmHWM") - base) / 1024
    print(json.dumps(out))


if __name__ == "__main__":
    main(sys.argv[1])
