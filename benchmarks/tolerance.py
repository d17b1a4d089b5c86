"""The honest cross-device spread of work-unit results, which sets the validation tolerance
(``vkblas.distributed.agreement``; BENCHMARKS.md, "Validation tolerance").

The same units (data slice, dropout seed, starting weights) are computed by the worker's own code
(``worker.compute.Trainer``) on every device given (default ``cpu`` and ``vulkan``: lavapipe on a machine without a
GPU), for both kinds of work (a ``gradient`` of one batch; DiLoCo ``inner-steps`` with a fresh AdamW), from the
model at several stages of training, and encoded in each codec. For every pair of devices it reports the distance
``||a - b|| / max(||a||, ||b||)`` (the validator's comparison): the largest and the median over the units, beside
what cheats score (a sign flip, a scaled result, the result of another unit of the same model, a free rider).

    PYTHONPATH=src python benchmarks/tolerance.py --units 4 --json out.json
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import print_table  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--devices", default="cpu,vulkan")
    ap.add_argument("--units", type=int, default=4, help="units per stage of training")
    ap.add_argument("--stages", default="0,100,400", help="training steps (on cpu) before the units are computed")
    ap.add_argument("--batch-size", type=int, default=128)
    ap.add_argument("--inner-steps", type=int, default=20)
    ap.add_argument("--data", default=os.environ.get("VKBLAS_DATA"))
    ap.add_argument("--json", default=None)
    args = ap.parse_args()

    from vkblas.distributed.agreement import distance
    from vkblas.distributed.algorithms import GlobalModel
    from vkblas.distributed.codec import CODECS, decode, encode
    from vkblas.distributed.protocol import DataSlice, Lease, ModelManifest, RunInfo
    from vkblas.distributed.shards import UnitSamples, normalise, raw_split, unit_indices
    from vkblas.distributed.worker.compute import Trainer
    from vkblas.training.compare import initial_state

    devices = args.devices.split(",")
    images, labels = raw_split("mnist", True, args.data, 10_000)
    x_all, y_all = normalise("mnist", images), labels
    info = RunInfo(run_id="tol", dataset="mnist", model="mlp", algorithm="diloco", codec="fp32", block=256,
                   batch_size=args.batch_size, limit=None, shard_samples=10_000, data_shards=[])  # fmt: skip
    trainers = {d: Trainer(info, d) for d in devices}

    def lease(kind: str, samples: int, seed: int, offset: int) -> Lease:
        return Lease(lease_id="0" * 32, unit_id=seed, base_version=0, model=ModelManifest(version=0, shards=[]),
                     data=DataSlice(shard=0, seed=seed, offset=offset, samples=samples), batch_size=args.batch_size,
                     kind=kind, lr=1e-3, seed=seed, codec="fp32", block=256, lease_seconds=30,
                     heartbeat_seconds=5)  # fmt: skip

    def unit(kind: str, params: dict, seed: int, device: str) -> dict[str, np.ndarray]:
        samples = args.batch_size * (args.inner_steps if kind == "inner-steps" else 1)
        ls = lease(kind, samples, seed, (seed * 997) % (10_000 - samples))
        idx = unit_indices(10_000, ls.data.seed, ls.data.offset, samples)
        r = trainers[device](ls, params, UnitSamples([(lambda i: (x_all[i], y_all[i]), idx)]))
        return decode(r.tensors, r.meta)

    # the model at several stages: plain Adam on cpu gradients of consecutive batches
    model = GlobalModel(initial_state("mlp", 0), "sync", "adam", 1e-3)
    stages = sorted(int(s) for s in args.stages.split(","))
    spread: dict[tuple[str, str, str], list[float]] = {}
    cheats: dict[tuple[str, str], list[float]] = {}
    done, t0 = 0, time.time()
    for stage in stages:
        while done < stage:
            g = unit("gradient", model.params(), 10_000 + done, "cpu")
            model.apply_gradient(g)
            done += 1
        params = model.params()
        for kind in ("gradient", "inner-steps"):
            for u in range(args.units):
                seed = 1 + stage * 100 + u
                raw = {d: unit(kind, params, seed, d) for d in devices}
                other = unit(kind, params, seed + 50, devices[0])
                for codec in CODECS:
                    enc = {d: decode(*encode(raw[d], codec)) for d in devices}
                    for a, b in itertools.combinations(devices, 2):
                        spread.setdefault((kind, codec, f"{a} vs {b}"), []).append(distance(enc[a], enc[b]))
                ref = raw[devices[0]]
                for name, fake in (
                    ("sign flip", {k: -v for k, v in ref.items()}),
                    ("scaled x1.5", {k: 1.5 * v for k, v in ref.items()}),
                    ("another unit", other),
                    ("free rider (zero)", {k: np.zeros_like(v) for k, v in ref.items()}),
                ):
                    cheats.setdefault((kind, name), []).append(distance(ref, fake))
        print(f"stage {stage}: done ({time.time() - t0:.0f} s)", file=sys.stderr, flush=True)

    rows = [(k, c, pair, max(v), statistics.median(v), len(v)) for (k, c, pair), v in sorted(spread.items())]
    print_table(
        "honest spread (distance between devices)", ("kind", "codec", "devices", "max", "median", "units"), rows
    )
    crow = [(k, n, min(v), statistics.median(v)) for (k, n), v in sorted(cheats.items())]
    print_table("what cheats score against the honest result", ("kind", "cheat", "min", "median"), crow)
    if args.json:
        Path(args.json).write_text(
            json.dumps({"spread": [list(r) for r in rows], "cheats": [list(r) for r in crow]}, indent=2)
        )


if __name__ == "__main__":
    main()
