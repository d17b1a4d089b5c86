"""Requests the coordinator's in-process tests make: lease, build an update and its payload, upload, read an error."""

from __future__ import annotations

import hashlib
import json
import uuid

import numpy as np

from vkblas.distributed.codec import encode, to_payload
from vkblas.distributed.protocol import UPLOAD_META_KEY

from .conftest import InProcess


def _lease(c: InProcess, auth: dict[str, str]) -> dict:
    r = c.tc.post("/v1/leases", headers=auth)
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["status"] == "work", body
    return body["lease"]


_rng = np.random.default_rng(0)


def _update(c: InProcess, value: float = 1e-3) -> dict[str, np.ndarray]:
    """An update of the model's shape, about ``value`` everywhere; every call differs by a relative 1e-6 (as two
    devices' results do: they agree within any tolerance, but are never the same bytes, which would be a replay)."""
    return {
        k: (value * (1 + 1e-6 * _rng.standard_normal(shape))).astype(np.float32)
        for k, (shape, _) in c.ctx.signature.items()
    }


def _payload(lease: dict, update: dict[str, np.ndarray], codec: str = "fp32", **meta: object) -> bytes:
    tensors, m = encode(update, codec)
    info = {"lease_id": lease["lease_id"], "samples": lease["data"]["samples"], "compute_s": 0.1, "loss": 1.0}
    info.update(meta)
    return to_payload(tensors, {**m, UPLOAD_META_KEY: json.dumps(info)})


def _put(c: InProcess, auth: dict, lease: dict, body: bytes, key: str | None = None, digest: str | None = None):  # type: ignore[no-untyped-def]
    headers = {
        **auth,
        "idempotency-key": key or uuid.uuid4().hex,
        "x-content-sha256": digest or hashlib.sha256(body).hexdigest(),
    }
    return c.tc.put(f"/v1/leases/{lease['lease_id']}/result", content=body, headers=headers)


def _error(r) -> str:  # type: ignore[no-untyped-def]
    assert 400 <= r.status_code < 500, (r.status_code, r.text)
    return r.json()["error"]["code"]
