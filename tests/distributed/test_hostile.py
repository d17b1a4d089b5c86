"""Hostile input on every endpoint (in process, SQLite and PostgreSQL): malformed, truncated and oversized bodies and
safetensors files, wrong shapes and dtypes, NaN/Inf, replays, other workers' and expired leases, forged and missing
tokens, path tricks. Each gets a 4xx with a code and a message, nothing is stored, and the server keeps serving.
Then the upload parser and the JSON endpoints under hypothesis (bounded examples)."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sqlalchemy import func, select, update

from vkblas.distributed.codec import CodecError, decode, encode, from_payload, to_payload
from vkblas.distributed.coordinator.models import Lease
from vkblas.distributed.coordinator.models import Update as UpdateRow
from vkblas.distributed.protocol import UPLOAD_META_KEY
from vkblas.distributed.validation import RejectedUpdateError, check_update

from .conftest import InProcess, needs_data
from .helpers import _lease, _payload, _put, _update

pytestmark = [needs_data, pytest.mark.filterwarnings("ignore::DeprecationWarning")]
FUZZ = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


def _updates(c: InProcess) -> int:
    with c.ctx.db.read_session() as s:
        return s.scalar(select(func.count()).select_from(UpdateRow))


def _refused(c: InProcess, r, code: str | None = None) -> str:  # type: ignore[no-untyped-def]
    assert 400 <= r.status_code < 500, (r.status_code, r.text[:300])
    body = r.json()["error"]
    assert body["code"] and body["message"], body
    if code is not None:
        assert body["code"] == code, body
    assert c.tc.get("/healthz").status_code == 200  # still serving
    return body["code"]


def _raw(tensors: dict, meta: dict) -> bytes:
    return to_payload(tensors, meta)


def test_every_json_endpoint_refuses_garbage(coord: InProcess):
    auth, admin = coord.register("alice"), coord.admin()
    lease = _lease(coord, auth)
    hb = f"/v1/leases/{lease['lease_id']}/heartbeat"
    posts = [("/v1/workers", {}), ("/v1/users", {}), (hb, auth), ("/v1/admin/run", admin),
             ("/v1/admin/workers/1/ban", admin)]  # fmt: skip
    bodies = [b"{", b'{"name": "a"', b"[]", b"null", b'"x"', b"\xff\xfe", json.dumps({"name": 5}).encode(),
              json.dumps({"name": "a", "device": "cpu", "extra": 1}).encode(), b"x" * 20_000,
              json.dumps({"wall_s": -1}).encode(), json.dumps({"bytes_sent": 2**70}).encode(),
              json.dumps({"action": "explode"}).encode(), json.dumps({"reason": ""}).encode()]  # fmt: skip
    for path, headers in posts:
        for body in bodies:
            r = coord.tc.post(path, content=body, headers={**headers, "content-type": "application/json"})
            if r.status_code == 200:  # a body that happens to be valid for this endpoint (an empty heartbeat)
                continue
            _refused(coord, r)
    for name in ("../etc/passwd", "a/b", "a\\b", "", "x" * 65, "é", "a b", ".hidden", "-x"):
        _refused(coord, coord.tc.post("/v1/workers", json={"name": name, "device": "cpu"}), "invalid-body")
        _refused(coord, coord.tc.post("/v1/users", json={"name": name}), "invalid-body")
    _refused(coord, coord.tc.post("/v1/leases?wait=-1", headers=auth), "invalid-body")
    _refused(coord, coord.tc.post("/v1/leases?wait=abc", headers=auth), "invalid-body")
    assert _updates(coord) == 0


@pytest.mark.parametrize(
    "header",
    ["", "Bearer", "Bearer .", "Bearer 1.", "Bearer .secret", "Basic dXNlcjpwYXNz", "Bearer 1.x", "Bearer 99999.x",
     "Bearer " + "9" * 16 + ".x", "Bearer 1." + "x" * 300, "Bearer u1.x", "Bearer admin.x", "bearer 1 .x"],
)  # fmt: skip
def test_forged_and_missing_tokens(coord: InProcess, header: str):
    coord.register("alice")
    headers = {"authorization": header} if header else {}
    for method, path in (("get", "/v1/workers/me"), ("post", "/v1/leases"), ("get", "/v1/admin/workers")):
        code = _refused(coord, getattr(coord.tc, method)(path, headers=headers))
        assert code in ("missing-token", "bad-token", "not-admin"), (header, path, code)


def test_path_tricks(coord: InProcess):
    auth = coord.register("alice")
    for path in ("/v1/shards/..%2F..%2Fetc%2Fpasswd", "/v1/shards/" + "A" * 64, "/v1/shards/" + "0" * 63,
                 "/web/..%2Fapp.py", "/web/%2e%2e%2fapp.py", "/web/index.html", "/web/style.css%00.js",
                 "/v1/leases/..%2F..%2Fworkers/heartbeat", "/v1/admin/workers/-1/unban",
                 "/v1/admin/workers/x/ban"):  # fmt: skip
        method = coord.tc.post if "leases" in path or "admin" in path else coord.tc.get
        r = method(path, headers={**auth, **coord.admin()} if "admin" in path else auth)
        assert r.status_code in (404, 405, 422), (path, r.status_code)
    assert coord.tc.get("/web/style.css").status_code == 200 and "<svg" in coord.tc.get("/").text


def test_hostile_uploads_are_refused_and_never_stored(coord: InProcess):
    alice, bob = coord.register("alice"), coord.register("bob")
    lease = _lease(coord, alice)
    good = _update(coord)
    name = next(iter(good))
    meta = {"lease_id": lease["lease_id"], "samples": lease["data"]["samples"], "compute_s": 0.1, "loss": 1.0}
    enc, m = encode(good, "fp32")
    fp32 = {**m, UPLOAD_META_KEY: json.dumps(meta)}
    valid = _raw(enc, fp32)
    header_len = struct.unpack("<Q", valid[:8])[0]
    cases = {
        "empty": b"",
        "seven bytes": valid[:7],
        "header longer than the file": struct.pack("<Q", 10**12) + valid[8:],
        "header past the end": struct.pack("<Q", len(valid)) + valid[8:],
        "header not json": struct.pack("<Q", 4) + b"\x00\x01\x02\x03" + valid[8:],
        "header a list": struct.pack("<Q", 2) + b"[]",
        "truncated data": valid[:-100],
        "one byte too many": valid + b"\x00",
        "offsets overlapping": valid[: 8 + header_len].replace(b'"data_offsets":[0', b'"data_offsets":[4', 1)
        + valid[8 + header_len :],
        "float64 tensor": _raw({**enc, name: good[name].astype(np.float64)}, fp32),
        "int8 tensor in fp32": _raw({**enc, name: good[name].astype(np.int8)}, fp32),
        "wrong shape": _raw({**enc, name: good[name].reshape(-1)[:-1].copy()}, fp32),
        "extra tensor": _raw({**enc, "evil": np.zeros(3, np.float32)}, fp32),
        "NaN": _raw({**enc, name: np.full_like(good[name], np.nan)}, fp32),
        "Inf": _raw({**enc, name: np.full_like(good[name], np.inf)}, fp32),
        "metadata not strings": _raw(enc, {**fp32, UPLOAD_META_KEY: json.dumps({**meta, "samples": "many"})}),
        "metadata nested deep": _raw(enc, {**fp32, UPLOAD_META_KEY: "[" * 100_000 + "]" * 100_000}),
        "metadata missing": _raw(enc, m),
        "metadata for another lease": _raw(enc, {**fp32, UPLOAD_META_KEY: json.dumps({**meta, "lease_id": "0" * 32})}),
        "negative loss": _raw(enc, {**fp32, UPLOAD_META_KEY: json.dumps({**meta, "loss": float("nan")})}),
        "unknown format": _raw(enc, {**fp32, "format": "evil/1"}),
        "oversized": b"\0" * (coord.ctx.upload_limit + 1),
    }
    blobs, rejected = set(coord.ctx.store.all()), 0
    for what, body in cases.items():
        r = _put(coord, alice, lease, body)
        code = _refused(coord, r)
        assert code in ("invalid-payload", "rejected-update", "too-large"), (what, code, r.text[:200])
        rejected += code == "rejected-update"
        assert set(coord.ctx.store.all()) == blobs and _updates(coord) == 0, what
    assert coord.tc.get("/v1/workers/me", headers=alice).json()["rejected"] == rejected
    # missing or malformed headers
    for headers in ({}, {"idempotency-key": "short"}, {"idempotency-key": "k" * 10, "x-content-sha256": "xyz"}):
        r = coord.tc.put(f"/v1/leases/{lease['lease_id']}/result", content=valid, headers={**alice, **headers})
        _refused(coord, r, "invalid-body")
    # another worker's lease, an expired lease, a replay after success
    _refused(coord, _put(coord, bob, lease, valid), "not-your-lease")
    assert _put(coord, alice, lease, valid).status_code == 200
    _refused(coord, _put(coord, alice, lease, _payload(lease, _update(coord, 2e-3))), "lease-finished")
    second = _lease(coord, alice)
    with coord.ctx.db.session() as s:
        s.execute(update(Lease).where(Lease.id == second["lease_id"]).values(expires_at=0.0))
    _refused(coord, _put(coord, alice, second, _payload(second, _update(coord))), "lease-expired")
    third = _lease(coord, bob)
    replay = valid.replace(lease["lease_id"].encode(), third["lease_id"].encode())
    assert _refused(coord, _put(coord, bob, third, replay)) in ("replayed-upload", "invalid-payload")
    assert _updates(coord) == 1


# ------------------------------------------------------------------------------------------------ fuzzing
def _signature() -> dict:
    return {"w": ((4, 3), "float32"), "b": ((3,), "float32")}


def _valid_payload() -> bytes:
    tensors, meta = encode({"w": np.ones((4, 3), np.float32), "b": np.zeros(3, np.float32)}, "int8", 4)
    return to_payload(tensors, meta)


@settings(max_examples=300, deadline=None)
@given(data=st.data())
def test_fuzz_the_upload_parser(data: st.DataObject):
    """Random bytes and damaged valid payloads: the parser, the decoder and the checks raise their own errors only."""
    base = _valid_payload()
    how = data.draw(st.sampled_from(["random", "flip", "truncate", "splice"]))
    if how == "random":
        body = data.draw(st.binary(max_size=600))
    elif how == "flip":
        i = data.draw(st.integers(0, len(base) - 1))
        body = base[:i] + bytes([base[i] ^ data.draw(st.integers(1, 255))]) + base[i + 1 :]
    elif how == "truncate":
        body = base[: data.draw(st.integers(0, len(base) - 1))]
    else:
        i = data.draw(st.integers(0, len(base)))
        body = base[:i] + data.draw(st.binary(min_size=1, max_size=40)) + base[i:]
    try:
        tensors, meta = from_payload(body, max_bytes=4096)
        check_update(decode(tensors, meta), _signature())
    except (CodecError, RejectedUpdateError):
        pass


_json = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=10), inner, max_size=4),
    max_leaves=12,
)


@pytest.fixture
def fuzz_coord(tmp_path: Path):  # type: ignore[no-untyped-def]
    c = InProcess(str(tmp_path / "fuzz.db"), tmp_path, settings={"rate_per_address": 0, "rate_per_token": 0})
    try:
        yield c
    finally:
        c.close()


@FUZZ
@given(body=_json, target=st.sampled_from(["workers", "users", "heartbeat", "admin-run", "ban"]))
def test_fuzz_the_json_endpoints(fuzz_coord: InProcess, body: object, target: str):
    c = fuzz_coord
    if not hasattr(c, "auth"):
        c.auth = c.register("fuzzer")  # type: ignore[attr-defined]
        c.lease_id = _lease(c, c.auth)["lease_id"]  # type: ignore[attr-defined]
    path, headers = {
        "workers": ("/v1/workers", {}),
        "users": ("/v1/users", {}),
        "heartbeat": (f"/v1/leases/{c.lease_id}/heartbeat", c.auth),  # type: ignore[attr-defined]
        "admin-run": ("/v1/admin/run", c.admin()),
        "ban": ("/v1/admin/workers/999/ban", c.admin()),
    }[target]
    r = c.tc.post(
        path, content=json.dumps(body, allow_nan=True), headers={**headers, "content-type": "application/json"}
    )
    assert r.status_code < 500, (target, body, r.text[:300])
    if r.status_code >= 400:
        assert r.json()["error"]["code"]


@FUZZ
@given(data=st.data())
def test_fuzz_the_upload_endpoint(fuzz_coord: InProcess, data: st.DataObject):
    c = fuzz_coord
    auth = c.register("uploader")
    lease = _lease(c, auth)
    base = _payload(lease, _update(c))
    i = data.draw(st.integers(0, len(base) - 1))
    body = base[:i] + data.draw(st.binary(max_size=16)) + base[i + data.draw(st.integers(0, 64)) :]
    blobs = set(c.ctx.store.all())
    r = _put(c, auth, lease, body)
    assert r.status_code in (200, 400, 409, 413, 422), (r.status_code, r.text[:300])
    if r.status_code != 200:
        assert set(c.ctx.store.all()) == blobs and r.json()["error"]["code"]
    c.tc.post(f"/v1/leases/{lease['lease_id']}/return", headers=auth)
