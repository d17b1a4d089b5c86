"""A public run with malicious workers (BENCHMARKS.md, "Public coordinator: adversaries"): the real app in process
(ASGI, Starlette's test client), the real validator and applier, and workers that compute with the real worker code
(``worker.compute.Trainer``, data and model shards through ``worker.cache``), honest ones on ``cpu`` and some on
``vulkan`` (lavapipe here), so honest copies of a unit differ by real cross-device rounding.

The malicious fifth of the workers, one of each kind (two colluders):

* ``noise``: random values with the honest result's norm; ``scaled``: the honest result times 3 (inside the norm
  band); ``sign-flip``: minus the honest result; ``stale``: computed from the first model it saw, whatever the
  lease says; ``replay``: sends its previous result's tensors again; ``free-rider``: returns the model unchanged
  (a zero pseudo-gradient); ``colluder`` x2: the honest result plus the same unit-seeded noise (the same wrong
  answer, so two colluders checking each other agree).

The simulation is sequential and deterministic in its order (each pass every worker asks for work once; the
applier runs between passes). An upload is *bad* when it differs from the honest result of its lease by more than
the tolerance. Reported: bad uploads caught (refused, or quarantined as invalid / inconclusive / by suspension),
honest uploads wrongly rejected, final test accuracy beside a clean run of the honest workers alone, and the
validation's extra work (copies computed beyond the one result applied per unit), over the run and in its second half.

    PYTHONPATH=src python benchmarks/adversaries.py --json out.json
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import random
import shutil
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import print_table  # noqa: E402

KINDS = ["noise", "scaled", "sign-flip", "stale", "replay", "free-rider", "colluder", "colluder"]


@dataclass
class SimWorker:
    name: str
    kind: str  # honest or one of KINDS
    device: str
    auth: dict[str, str] = field(default_factory=dict)
    first_params: dict | None = None
    last_result: dict | None = None
    stopped: str = ""


class Run:
    def __init__(self, args: argparse.Namespace, tmp: Path, workers: list[SimWorker]) -> None:
        from starlette.testclient import TestClient

        from vkblas.distributed.agreement import distance  # noqa: F401 - imported here for the workers below
        from vkblas.distributed.coordinator.app import create_app
        from vkblas.distributed.coordinator.applier import Applier
        from vkblas.distributed.coordinator.config import RunSpec, ServeSettings
        from vkblas.distributed.coordinator.serve import prepare
        from vkblas.distributed.coordinator.validator import run_tolerance
        from vkblas.distributed.protocol import RunInfo
        from vkblas.distributed.worker.cache import DataCache, ModelCache
        from vkblas.distributed.worker.client import Client
        from vkblas.distributed.worker.compute import Trainer, device_class

        self.args, self.workers = args, workers
        settings = ServeSettings(db=str(tmp / "c.db"), store=str(tmp / "store"), applier=False, data=args.data,
                                 rate_per_address=0, rate_per_token=0)  # fmt: skip
        self.spec = RunSpec(dataset="mnist", algorithm="diloco", epochs=args.epochs, limit=args.limit,
                            batch_size=args.batch_size, inner_steps=args.inner_steps, unit_seconds=1000,
                            lease_seconds=args.lease_seconds,
                            eval_seconds=86_400, seed=args.seed, round_seconds=86_400, trust_after=args.trust_after,
                            validate_fraction=args.validate_fraction,
                            homogeneous=not args.heterogeneous)  # fmt: skip
        prepare(settings, self.spec)
        self.app = create_app(settings)
        self.tc = TestClient(self.app, base_url="http://testserver")
        self.tc.__enter__()
        ctx = self.app.state.ctx
        self.applier = Applier(ctx.db, ctx.store, ctx.spec, data=args.data)
        self.tol = run_tolerance(self.spec)
        client = Client("http://testserver", transport=self.tc._transport, retry_for=5)
        info = RunInfo.model_validate(self.tc.get("/v1/run").json())
        self.models, self.data = ModelCache(client, tmp / "cache"), DataCache(client, info, tmp / "cache", args.data)
        self.trainers = {d: Trainer(info, d) for d in {w.device for w in workers}}
        for w in workers:
            body = {"name": w.name, "device": w.device, "device_class": device_class(w.device)}
            r = self.tc.post("/v1/workers", json=body)
            w.auth = {"authorization": f"Bearer {r.json()['token']}"}
        self.log: list[dict[str, Any]] = []  # one entry per upload
        self.rng = np.random.default_rng(args.seed)

    def close(self) -> None:
        self.applier.release()
        self.tc.__exit__(None, None, None)

    # ------------------------------------------------------------------ one worker's unit
    def _compute(self, w: SimWorker, lease: Any, params: dict) -> dict[str, np.ndarray]:
        from vkblas.distributed.codec import decode

        r = self.trainers[w.device](lease, params, self.data.slice(lease.data))
        return decode(r.tensors, r.meta)

    def _result(self, w: SimWorker, lease: Any) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
        """(what the worker uploads, the honest result of the lease)."""
        params = self.models.params(lease.model)
        if w.first_params is None:
            w.first_params = params
        honest = self._compute(w, lease, params)
        norm = np.sqrt(sum(float((v.astype(np.float64) ** 2).sum()) for v in honest.values()))
        if w.kind == "honest":
            return honest, honest
        if w.kind == "noise":
            noise = {k: self.rng.standard_normal(v.shape).astype(np.float32) for k, v in honest.items()}
            n = np.sqrt(sum(float((v.astype(np.float64) ** 2).sum()) for v in noise.values()))
            return {k: v * np.float32(norm / n) for k, v in noise.items()}, honest
        if w.kind == "scaled":
            return {k: 3 * v for k, v in honest.items()}, honest
        if w.kind == "sign-flip":
            return {k: -v for k, v in honest.items()}, honest
        if w.kind == "stale":
            return self._compute(w, lease, w.first_params), honest
        if w.kind == "replay":
            out = w.last_result if w.last_result is not None else honest
            w.last_result = honest
            return out, honest
        if w.kind == "free-rider":
            return {k: np.zeros_like(v) for k, v in honest.items()}, honest
        if w.kind == "colluder":
            g = np.random.default_rng(lease.unit_id)  # the same wrong answer for the same unit
            noise = {k: g.standard_normal(v.shape).astype(np.float32) for k, v in honest.items()}
            n = np.sqrt(sum(float((v.astype(np.float64) ** 2).sum()) for v in noise.values()))
            return {k: v + noise[k] * np.float32(norm / n) for k, v in honest.items()}, honest
        raise ValueError(f"unknown kind {w.kind!r}")

    def turn(self, w: SimWorker) -> bool:
        """One lease, compute and upload; False when there was nothing to do."""
        from vkblas.distributed.agreement import distance
        from vkblas.distributed.codec import encode, to_payload
        from vkblas.distributed.protocol import UPLOAD_META_KEY, LeaseReply

        if w.stopped:
            return False
        r = self.tc.post("/v1/leases", headers=w.auth)
        if r.status_code == 403:
            w.stopped = r.json()["error"]["code"]
            return False
        reply = LeaseReply.model_validate_json(r.content)
        if reply.status != "work":
            return False
        lease = reply.lease
        t0 = time.perf_counter()
        sent, honest = self._result(w, lease)
        bad = distance(sent, honest) > self.tol
        tensors, meta = encode(sent, lease.codec, lease.block)
        info = {"lease_id": lease.lease_id, "samples": lease.data.samples, "compute_s": 0.05, "loss": 1.0}
        body = to_payload(tensors, {**meta, UPLOAD_META_KEY: json.dumps(info)})
        headers = {**w.auth, "idempotency-key": uuid.uuid4().hex, "x-content-sha256": hashlib.sha256(body).hexdigest()}
        r = self.tc.put(f"/v1/leases/{lease.lease_id}/result", content=body, headers=headers)
        entry = {"worker": w.name, "kind": w.kind, "device": w.device, "bad": bad, "role": lease.role,
                 "unit": lease.unit_id, "compute_s": time.perf_counter() - t0}  # fmt: skip
        if r.status_code == 200:
            entry["update"] = r.json()["update_id"]
        else:
            entry["refused"] = r.json()["error"]["code"]
        self.log.append(entry)
        return True

    def run(self) -> dict[str, Any]:
        order = list(self.workers)
        random.Random(self.args.seed).shuffle(order)
        idle_since = None
        t0 = time.time()
        while True:
            busy = sum(self.turn(w) for w in order)
            self.applier.step()
            st = self.tc.get("/v1/status").json()
            if st["state"] == "finished":
                break
            if busy:
                idle_since = None
            else:  # waiting for leases to expire (refused uploads leave theirs) or for copies to be allowed
                idle_since = idle_since or time.time()
                if time.time() - idle_since > self.args.max_idle:
                    break
                time.sleep(0.2)
            random.Random(self.args.seed + len(self.log)).shuffle(order)
        self.applier._maybe_evaluate(time.time(), force=True)
        wall = time.time() - t0
        return self._report(wall)

    # ------------------------------------------------------------------ what happened
    def _report(self, wall: float) -> dict[str, Any]:
        from sqlalchemy import func, select

        from vkblas.distributed.coordinator.models import Evaluation, Lease, Update

        ctx = self.app.state.ctx
        with ctx.db.read_session() as s:
            status = dict(s.execute(select(Update.seq, Update.status)).all())
            dist = dict(s.execute(select(Update.seq, Update.distance)).all())
            roles = dict(s.execute(select(Update.seq, Lease.role).join(Lease, Lease.id == Update.lease_id)).all())
            acc = s.scalars(select(Evaluation.accuracy).order_by(Evaluation.id.desc()).limit(1)).first()
            flagged = s.scalar(select(func.count()).select_from(Update).where(Update.suspicion != ""))
        caught_states = ("invalid", "inconclusive", "quarantined")
        bad = [e for e in self.log if e["bad"]]
        honest = [e for e in self.log if e["kind"] == "honest"]
        caught = [e for e in bad if "refused" in e or status.get(e.get("update")) in caught_states]
        applied_bad = [e for e in bad if status.get(e.get("update")) in ("applied", "duplicate", "recorded")]
        wrong = [e for e in honest if "refused" in e or status.get(e.get("update")) in ("invalid", "inconclusive")]
        results = [e for e in self.log if "update" in e]
        applied = [e for e in results if status[e["update"]] in ("applied", "stale")]
        extra = len(results) - len(applied)
        half = sorted(e["unit"] for e in results)[len(results) // 2] if results else 0
        late = [e for e in results if e["unit"] >= half]
        late_extra = len(late) - sum(status[e["update"]] in ("applied", "stale") for e in late)
        by_kind: dict[str, list[int]] = {}
        for e in bad:
            k = by_kind.setdefault(e["kind"], [0, 0])
            k[0] += 1
            k[1] += e in caught
        return {
            "uploads": len(self.log),
            "bad": len(bad),
            "caught": len(caught),
            "bad_applied": len(applied_bad),
            "honest": len(honest),
            "honest_wrongly_rejected": len(wrong),
            "honest_replicas": sum(roles.get(e.get("update")) == "replica" for e in honest),
            "accuracy": acc,
            "results": len(results),
            "applied_or_stale": len(applied),
            "overhead": extra / max(1, len(applied)),
            "overhead_second_half": late_extra / max(1, len(late) - late_extra),
            "norm_flagged": flagged,  # results whose norm fell outside the band (their units were checked)
            "by_kind": by_kind,
            "suspended": sorted(w.name for w in self.workers if w.stopped),
            "refusals": sorted({(e["kind"], e["refused"]) for e in self.log if "refused" in e}),
            "statuses": {k: sum(1 for v in status.values() if v == k) for k in set(status.values())},
            "honest_distances": sorted(round(dist[e["update"]], 4) for e in honest if dist.get(e.get("update"))),
            "wrongly_rejected": [
                (e["device"], e["role"], e.get("refused") or status.get(e.get("update"))) for e in wrong
            ],
            "wall_s": wall,
            "tolerance": self.tol,
        }


def make_workers(args: argparse.Namespace, malicious: bool) -> list[SimWorker]:
    out = []
    for i in range(args.honest):
        device = "vulkan" if i < round(args.vulkan_share * args.honest) else "cpu"
        out.append(SimWorker(f"honest{i}", "honest", device))
    if malicious:
        out += [SimWorker(f"{k}{i}", k, "cpu") for i, k in enumerate(KINDS)]
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--honest", type=int, default=32)
    ap.add_argument("--vulkan-share", type=float, default=0.25, help="of the honest workers, on vulkan")
    ap.add_argument("--epochs", type=int, default=1)
    ap.add_argument("--limit", type=int, default=60_000, help="training samples (MNIST has 60,000)")
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--inner-steps", type=int, default=8)
    ap.add_argument("--trust-after", type=int, default=3)
    ap.add_argument("--validate-fraction", type=float, default=0.05)
    ap.add_argument(
        "--heterogeneous", action="store_true", help="copies to any device class (no homogeneous redundancy)"
    )
    ap.add_argument(
        "--lease-seconds", type=float, default=10.0, help="short: refused workers' leases expire soon (no heartbeats)"
    )
    ap.add_argument("--max-idle", type=float, default=30.0, help="stop after this long with nothing to do")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--data", default=os.environ.get("VKBLAS_DATA"))
    ap.add_argument("--json", default=None)
    args = ap.parse_args()

    results = {}
    for name, malicious in (("clean", False), ("attacked", True)):
        tmp = Path(tempfile.mkdtemp(prefix="vkblas-adv-"))
        try:
            run = Run(args, tmp, make_workers(args, malicious))
            try:
                results[name] = run.run()
            finally:
                run.close()
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        print(f"{name}: {json.dumps(results[name])}", file=sys.stderr, flush=True)
    a, c = results["attacked"], results["clean"]
    rows = [
        ("workers", args.honest, f"{args.honest} + {len(KINDS)} malicious"),
        ("uploads", c["uploads"], a["uploads"]),
        ("bad uploads caught", "–", f"{a['caught']} of {a['bad']} ({100 * a['caught'] / max(1, a['bad']):.1f} %)"),
        ("bad uploads applied", "–", a["bad_applied"]),
        (
            "honest uploads wrongly rejected",
            f"{c['honest_wrongly_rejected']} of {c['honest']}",
            f"{a['honest_wrongly_rejected']} of {a['honest']}",
        ),  # fmt: skip
        ("final test accuracy %", f"{100 * c['accuracy']:.2f}", f"{100 * a['accuracy']:.2f}"),
        ("extra work (copies / applied results)", f"{100 * c['overhead']:.1f} %", f"{100 * a['overhead']:.1f} %"),
        (
            "extra work, second half of the run",
            f"{100 * c['overhead_second_half']:.1f} %",
            f"{100 * a['overhead_second_half']:.1f} %",
        ),  # fmt: skip
        ("wall s", f"{c['wall_s']:.0f}", f"{a['wall_s']:.0f}"),
    ]
    print_table(f"tolerance {a['tolerance']:.3g}", ("", "clean", "attacked"), rows)
    print_table("bad uploads by kind", ("kind", "bad", "caught"), [(k, *v) for k, v in sorted(a["by_kind"].items())])
    print(f"suspended: {a['suspended']}; statuses: {a['statuses']}")
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
