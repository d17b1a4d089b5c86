"""The coordinator's HTTP API in process (Starlette's test client), on SQLite and PostgreSQL: every endpoint, its
error paths, the applier's record -> apply -> checkpoint sequence, crash replay, leader hand-over, lease expiry."""

from __future__ import annotations

import hashlib
import uuid

import numpy as np
import pytest
from sqlalchemy import select, update

from vkblas.distributed.coordinator.copies import MAX_REISSUES
from vkblas.distributed.coordinator.models import Lease, Unit, Update

from .conftest import InProcess, needs_data
from .helpers import _error, _lease, _payload, _put, _update

pytestmark = [needs_data, pytest.mark.filterwarnings("ignore::DeprecationWarning")]


# ------------------------------------------------------------------------------------------------ workers
def test_register_me_and_tokens(coord: InProcess):
    auth = coord.register("alice")
    me = coord.tc.get("/v1/workers/me", headers=auth).json()
    assert me["name"] == "alice" and me["credit"] == 0
    assert _error(coord.tc.get("/v1/workers/me")) == "missing-token"
    wid, _, secret = auth["authorization"].split()[1].partition(".")
    assert _error(coord.tc.get("/v1/workers/me", headers={"authorization": f"Bearer {wid}.x{secret}"})) == "bad-token"
    assert _error(coord.tc.get("/v1/workers/me", headers={"authorization": "Bearer 999.abc"})) == "bad-token"
    assert _error(coord.tc.get("/v1/workers/me", headers={"authorization": "Bearer nonsense"})) == "bad-token"
    with coord.ctx.db.read_session() as s:  # only a hash of the secret is stored
        from vkblas.distributed.coordinator.models import Worker

        stored = s.get(Worker, int(wid)).token_hash
    assert stored == hashlib.sha256(secret.encode()).hexdigest() and secret not in stored


def test_every_answer_carries_server_timing(coord: InProcess):
    """``Server-Timing: app;dur=<ms>`` on answers of every kind: a success, an auth error, a body refused unread."""
    answers = [
        coord.tc.get("/v1/status"),
        coord.tc.get("/v1/workers/me", headers={"authorization": "Bearer 999.abc"}),
        coord.tc.post("/v1/workers", content=b"x" * 20_000),
    ]
    assert [r.status_code for r in answers] == [200, 401, 413]
    for r in answers:
        name, _, dur = r.headers["server-timing"].partition(";dur=")
        assert name == "app" and 0 <= float(dur) < 60_000, r.headers["server-timing"]


def test_bodies_are_bounded_and_strict(coord: InProcess):
    assert _error(coord.tc.post("/v1/workers", content=b"x" * 20_000)) == "too-large"
    assert _error(coord.tc.post("/v1/workers", json={"name": "a", "device": "cpu", "admin": True})) == "invalid-body"
    assert _error(coord.tc.post("/v1/workers", json={"name": "../etc", "device": "cpu"})) == "invalid-body"
    assert _error(coord.tc.post("/v1/workers", content=b"{not json")) == "invalid-body"
    assert _error(coord.tc.get("/v1/nothing")) == "not-found"


def test_openapi_states_the_auth_of_every_endpoint(coord: InProcess):
    schema = coord.tc.get("/openapi.json").json()
    paths = schema["paths"]
    assert {"/v1/workers", "/v1/leases", "/v1/leases/{lease_id}/result", "/v1/shards/{sha256}", "/v1/status"} <= set(
        paths
    )
    auth = {(p, m): {k for s in op.get("security", []) for k in s} for p, ops in paths.items() for m, op in ops.items()}
    assert auth[("/v1/leases", "post")] == auth[("/v1/leases/{lease_id}/result", "put")] == {"workerToken"}
    assert auth[("/v1/workers", "post")] == {"userToken"}  # optional: credits a user
    assert not auth[("/v1/status", "get")] and not auth[("/v1/users", "post")] and not auth[("/v1/dashboard", "get")]
    assert all(v == {"adminToken"} for (p, _), v in auth.items() if p.startswith("/v1/admin/")) and any(
        p.startswith("/v1/admin/") for p, _ in auth
    )


# ------------------------------------------------------------------------------------------------ shards
def test_shards_etag_range_if_range(coord: InProcess):
    run = coord.tc.get("/v1/run").json()
    ref = run["data_shards"][0]
    url = f"/v1/shards/{ref['sha256']}"
    whole = coord.tc.get(url)
    assert whole.status_code == 200 and whole.headers["etag"] == f'"{ref["sha256"]}"'
    assert hashlib.sha256(whole.content).hexdigest() == ref["sha256"] and len(whole.content) == ref["bytes"]
    part = coord.tc.get(url, headers={"range": "bytes=100-", "if-range": f'"{ref["sha256"]}"'})
    assert part.status_code == 206 and part.content == whole.content[100:]
    stale = coord.tc.get(url, headers={"range": "bytes=100-", "if-range": '"other"'})
    assert stale.status_code == 200 and stale.content == whole.content  # never other bytes glued on
    weak = coord.tc.get(url, headers={"range": "bytes=100-", "if-range": f'W/"{ref["sha256"]}"'})
    assert weak.status_code == 200
    assert coord.tc.get(url, headers={"range": f"bytes={ref['bytes'] + 5}-"}).status_code == 416
    assert coord.tc.get(url, headers={"range": "bytes=5-4"}).status_code == 400
    assert coord.tc.get(url, headers={"if-none-match": f'"{ref["sha256"]}"'}).status_code == 304
    assert _error(coord.tc.get("/v1/shards/" + "0" * 64)) == "unknown-shard"
    assert coord.tc.get("/v1/shards/..%2F..%2Fetc%2Fpasswd").status_code in (404, 422)


def test_interrupted_download_resumes_and_is_verified(coord: InProcess, tmp_path):
    import httpx

    from vkblas.distributed.worker.errors import IntegrityError

    ref = coord.tc.get("/v1/run").json()["data_shards"][0]
    inner, calls = coord.tc._transport, []

    class CutOnce(httpx.BaseTransport):
        """The first shard response breaks after 1000 bytes (a dropped connection)."""

        def handle_request(self, request: httpx.Request) -> httpx.Response:
            calls.append(dict(request.headers))
            r = inner.handle_request(request)
            if "/v1/shards/" in request.url.path and len(calls) == 1:
                body = r.read()

                class Broken(httpx.SyncByteStream):
                    def __iter__(self):  # type: ignore[no-untyped-def]
                        yield body[:1000]
                        raise httpx.ReadError("connection reset (test)")

                return httpx.Response(r.status_code, headers=r.headers, stream=Broken())
            return r

    client = coord.client(CutOnce())
    path = client.download(ref["sha256"], tmp_path / "dl")
    assert hashlib.sha256(path.read_bytes()).hexdigest() == ref["sha256"]
    assert calls[1]["range"] == "bytes=1000-" and calls[1]["if-range"] == f'"{ref["sha256"]}"'
    # a .part whose resumed whole does not hash to its name is thrown away and fetched again whole
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / f"{ref['sha256']}.part").write_bytes(b"\0" * (ref["bytes"] - 10))
    path = coord.client().download(ref["sha256"], bad)
    assert hashlib.sha256(path.read_bytes()).hexdigest() == ref["sha256"]
    assert not (bad / f"{ref['sha256']}.part").exists()

    class Liar(httpx.BaseTransport):  # a server (or proxy) that sends other bytes every time
        def handle_request(self, request: httpx.Request) -> httpx.Response:
            return httpx.Response(200, content=b"not the shard")

    with pytest.raises(IntegrityError, match="downloaded 3 times"):
        coord.client(Liar()).download(ref["sha256"], tmp_path / "liar")


# ------------------------------------------------------------------------------------------------ leases
def test_lease_upload_apply_and_idempotent_retry(coord: InProcess):
    auth = coord.register()
    lease = _lease(coord, auth)
    assert lease["base_version"] == 0 and lease["kind"] == "gradient" and lease["data"]["samples"] == 64
    hb = coord.tc.post(f"/v1/leases/{lease['lease_id']}/heartbeat", json={"wall_s": 1.0}, headers=auth)
    assert hb.status_code == 200, hb.text
    body = _payload(lease, _update(coord))
    key = uuid.uuid4().hex
    first = _put(coord, auth, lease, body, key=key)
    assert first.status_code == 200, first.text
    again = _put(coord, auth, lease, body, key=key)  # a retry after a lost answer: same reply, nothing new
    assert again.json() == first.json()
    other = _payload(lease, _update(coord, 2e-3))
    assert _error(_put(coord, auth, lease, other, key=key)) == "idempotency-conflict"
    assert _error(_put(coord, auth, lease, other)) == "lease-finished"
    assert coord.tc.get("/v1/status").json()["pending"] == 1
    applier = coord.applier()
    assert applier.step() == 1
    applier.release()  # waits for the evaluation it started (in its own thread)
    st = coord.tc.get("/v1/status").json()
    assert (st["version"], st["accepted"], st["pending"], st["samples_applied"]) == (1, 1, 0, 64)
    assert st["test"] is not None and 0 <= st["test"]["accuracy"] <= 1
    assert coord.tc.get("/v1/workers/me", headers=auth).json()["credit"] == 64
    assert coord.tc.get("/v1/models/latest").json()["version"] == 1


@pytest.mark.parametrize(
    "case, code",
    [
        ("checksum", "checksum-mismatch"),
        ("garbage", "invalid-payload"),
        ("truncated", "invalid-payload"),
        ("shape", "rejected-update"),
        ("nan", "rejected-update"),
        ("missing", "rejected-update"),
        ("codec", "invalid-payload"),
        ("samples", "invalid-payload"),
        ("meta", "invalid-payload"),
        ("too-large", "too-large"),
        ("too-large-chunked", "too-large"),  # no Content-Length: refused as the spooled body grows past the limit
    ],
)
def test_bad_uploads_are_4xx_and_never_stored(coord: InProcess, case: str, code: str):
    auth = coord.register()
    lease = _lease(coord, auth)
    good = _payload(lease, _update(coord))
    u = _update(coord)
    name = next(iter(u))
    body, digest = good, None
    if case == "checksum":
        digest = "0" * 64
    elif case == "garbage":
        body = b"\x10\x00\x00\x00\x00\x00\x00\x00{not json}......"
    elif case == "truncated":
        body = good[: len(good) // 2]
    elif case == "shape":
        u[name] = np.zeros((3,), np.float32)
        body = _payload(lease, u)
    elif case == "nan":
        u[name] = u[name].copy()
        u[name].flat[0] = np.nan
        body = _payload(lease, u)
    elif case == "missing":
        del u[name]
        body = _payload(lease, u)
    elif case == "codec":
        body = _payload(lease, u, codec="fp16")
    elif case == "samples":
        body = _payload(lease, u, samples=5)
    elif case == "meta":
        body = _payload(lease, u, compute_s=-1)
    elif case == "too-large":
        body = b"\0" * (coord.ctx.upload_limit + 1)
    elif case == "too-large-chunked":
        chunk = b"\0" * (1 << 16)
        body, digest = (chunk for _ in range(coord.ctx.upload_limit // len(chunk) + 2)), "0" * 64  # type: ignore[assignment]
    blobs = set(coord.ctx.store.all())
    r = _put(coord, auth, lease, body, digest=digest)
    assert _error(r) == code, r.text
    assert r.json()["error"]["message"]
    assert set(coord.ctx.store.all()) == blobs
    assert not list(coord.ctx.store.blobs.glob(".tmp-*"))  # the spooled body is gone too
    st = coord.tc.get("/v1/status").json()
    assert st["pending"] == 0 and st["rejected"] == (1 if code == "rejected-update" else 0)
    assert _put(coord, auth, lease, good).status_code == 200  # the lease is still usable


def test_other_workers_and_unknown_leases(coord: InProcess):
    alice, bob = coord.register("alice"), coord.register("bob")
    lease = _lease(coord, alice)
    body = _payload(lease, _update(coord))
    assert _error(_put(coord, bob, lease, body)) == "not-your-lease"
    assert _error(coord.tc.post(f"/v1/leases/{lease['lease_id']}/heartbeat", json={}, headers=bob)) == "not-your-lease"
    fake = {**lease, "lease_id": "0" * 32}
    assert _error(_put(coord, alice, fake, body)) == "unknown-lease"
    assert _error(coord.tc.post("/v1/leases/not-a-lease/return", headers=alice)) == "invalid-body"


def test_expired_lease_is_reassigned_and_its_late_upload_refused(coord: InProcess):
    alice, bob = coord.register("alice"), coord.register("bob")
    lease = _lease(coord, alice)
    with coord.ctx.db.session() as s:  # alice's heartbeats stopped long ago
        s.execute(update(Lease).where(Lease.id == lease["lease_id"]).values(expires_at=0.0))
    again = _lease(coord, bob)
    assert again["unit_id"] == lease["unit_id"] and again["data"] == lease["data"]
    assert _error(_put(coord, alice, lease, _payload(lease, _update(coord)))) == "lease-expired"
    hb = coord.tc.post(f"/v1/leases/{lease['lease_id']}/heartbeat", json={}, headers=alice)
    assert _error(hb) == "lease-expired"


def test_returned_unit_goes_to_the_next_worker(coord: InProcess):
    alice, bob = coord.register("alice"), coord.register("bob")
    lease = _lease(coord, alice)
    assert coord.tc.post(f"/v1/leases/{lease['lease_id']}/return", headers=alice).status_code == 204
    assert _error(coord.tc.post(f"/v1/leases/{lease['lease_id']}/return", headers=alice)) == "lease-finished"
    assert _lease(coord, bob)["unit_id"] == lease["unit_id"]


# ------------------------------------------------------------------------------------------------ durability
def _record(c: InProcess, auth: dict, n: int) -> None:
    for _ in range(n):
        lease = _lease(c, auth)
        assert _put(c, auth, lease, _payload(lease, _update(c))).status_code == 200


def test_crash_between_apply_and_checkpoint_replays_exactly_once(coord: InProcess, monkeypatch):
    auth = coord.register()
    _record(coord, auth, 2)
    crashing = coord.applier(evaluate=False)

    def crash(*a, **k):  # the process dies after applying in memory, before the checkpoint commits
        raise SystemExit("kill -9")

    monkeypatch.setattr(crashing, "_checkpoint", crash)
    with pytest.raises(SystemExit):
        crashing.step()
    assert coord.tc.get("/v1/status").json()["version"] == 0  # nothing of it was published
    crashing.release()  # (a real crash: its leader lease would expire instead)
    restarted = coord.applier(evaluate=False)
    assert restarted.step() == 2
    _record(coord, auth, 1)
    assert restarted.step() == 1
    st = coord.tc.get("/v1/status").json()
    assert (st["version"], st["accepted"], st["pending"], st["samples_applied"]) == (3, 3, 0, 192)
    with coord.ctx.db.read_session() as s:
        versions = s.scalars(select(Update.applied_version).order_by(Update.seq)).all()
    assert versions == [1, 2, 3]


def test_async_state_every_interval_and_kill_replays_to_the_same_weights(coord: InProcess, caplog):
    """async publishes each version's weights and writes the optimizer state only every checkpoint_seconds: a
    ``kill -9`` in between (no release) loses nothing: the next applier replays the applied updates from the newest
    state to the newest published version, to the very same weights, records the state there and goes on."""
    import time

    from vkblas.distributed.coordinator.models import Checkpoint

    caplog.set_level("INFO", logger="vkblas.coordinator")
    auth = coord.register()
    first = coord.applier(evaluate=False, checkpoint_seconds=3600)
    for _ in range(3):
        _record(coord, auth, 1)
        assert first.step() == 1
    with coord.ctx.db.read_session() as s:
        states = dict(s.execute(select(Checkpoint.version, Checkpoint.state_sha256)).all())
    assert sorted(states) == [0, 1, 2, 3] and states[0] is not None
    assert [states[v] for v in (1, 2, 3)] == [None, None, None]  # published, weights alone
    assert first.gc(time.time() + 1e6) >= 0  # the payloads after the newest state survive any collection
    expected = {k: v.copy() for k, v in first.model.params().items()}
    # kill -9 of the first: no release; its leader lease runs out and the second takes over
    second = coord.applier(evaluate=False, checkpoint_seconds=3600)
    later = time.time() + 60
    assert second.step(now=later) == 0 and second.model is not None
    assert second.model.version == 3 and second.samples_applied == 192
    assert "replayed 3 updates to version 3" in caplog.text and "differs" not in caplog.text
    for k, v in second.model.params().items():
        np.testing.assert_array_equal(v, expected[k], err_msg=k)
    with coord.ctx.db.read_session() as s:
        assert s.get(Checkpoint, 3).state_sha256 is not None  # a restart after this one replays nothing
    _record(coord, auth, 1)
    assert second.step(now=later + 0.1) == 1
    st = coord.tc.get("/v1/status").json()
    with coord.ctx.db.read_session() as s:
        assert s.scalars(select(Update.applied_version).order_by(Update.seq)).all() == [1, 2, 3, 4]
        samples = sum(s.scalars(select(Update.samples)))
        assert s.get(Checkpoint, 4).state_sha256 is None
    assert (st["version"], st["accepted"], st["pending"], st["samples_applied"]) == (4, 4, 0, samples)
    second.release()  # a clean stop records the state of what it published
    with coord.ctx.db.read_session() as s:
        assert s.get(Checkpoint, 4).state_sha256 is not None


def test_evaluation_keeps_to_its_threads_and_share_of_the_time(coord: InProcess, monkeypatch):
    """The evaluation runs every eval_seconds, but a slow one spaces the next out to eval_share of the wall time;
    while it runs, BLAS and the cpu backend keep to eval_threads (and BLAS gets its threads back after)."""
    import time

    from threadpoolctl import threadpool_info

    from vkblas.backend.base import host_thread_cap
    from vkblas.distributed.coordinator import evaluate

    seen: list[tuple[int | None, list[int]]] = []
    inner = evaluate.Evaluator._run

    def spy(self):  # type: ignore[no-untyped-def]
        seen.append((host_thread_cap(), [i["num_threads"] for i in threadpool_info() if i["user_api"] == "blas"]))
        return inner(self)

    monkeypatch.setattr(evaluate.Evaluator, "_run", spy)
    blas_before = [i["num_threads"] for i in threadpool_info() if i["user_api"] == "blas"]
    auth = coord.register()
    applier = coord.applier(eval_threads=1, eval_share=0.1)
    t0 = time.time()
    applier.step(now=t0)  # loads the model and evaluates version 0
    applier._eval_job.result()
    assert seen == [(1, [1] * len(blas_before))]
    assert [i["num_threads"] for i in threadpool_info() if i["user_api"] == "blas"] == blas_before
    applier._eval_cost = 5.0  # as if it had taken 5 s: at most every 50 s, though eval_seconds is 10
    _record(coord, auth, 1)
    assert applier.step(now=t0 + coord.spec.eval_seconds + 1) == 1
    assert applier._eval_job is None or applier._eval_job.done()
    assert applier._last_eval[0] == 0  # version 1 is not evaluated yet
    applier.step(now=t0 + 51)
    applier._eval_job.result()
    assert applier._last_eval[0] == 1 and len(seen) == 2
    applier.release()


def test_one_applier_at_a_time_and_takeover(coord: InProcess):
    auth = coord.register()
    _record(coord, auth, 1)
    first, second = coord.applier(evaluate=False), coord.applier(evaluate=False, leader_ttl=0.5)
    assert first.step() == 1
    _record(coord, auth, 1)
    assert second.step() == 0  # the first one holds the lead
    import time

    later = time.time() + 60
    assert second.step(now=later) == 1  # the first one's lease ran out: the second takes over
    assert coord.tc.get("/v1/status").json()["version"] == 2
    _record(coord, auth, 1)
    first.step()  # the first one still believes it leads (a paused process): it applies, but its commit is fenced
    st = coord.tc.get("/v1/status").json()
    assert (st["version"], st["pending"]) == (2, 1) and first.model is None
    assert second.step(now=later + 0.1) == 1
    assert coord.tc.get("/v1/status").json()["version"] == 3


# ------------------------------------------------------------------------------------------------ rounds
@pytest.mark.parametrize("algorithm", ["sync", "diloco"])
def test_rounds_close_on_quorum_and_weigh_late_results(db_url, tmp_path, algorithm):
    c = InProcess(db_url, tmp_path, algorithm=algorithm, quorum=0.5, round_seconds=3600, max_staleness=1)
    try:
        a, b = c.register("a"), c.register("b")
        la, lb = _lease(c, a), _lease(c, b)
        assert la["kind"] == ("inner-steps" if algorithm == "diloco" else "gradient")
        r = c.tc.post("/v1/leases", headers=a).json()
        assert r["status"] == "wait" and "active lease" in r["reason"]  # one unit per worker per round
        ap = c.applier(evaluate=False)
        assert _put(c, a, la, _payload(la, _update(c))).status_code == 200
        assert ap.step() == 1  # a alone holds half of round 0's leased samples: the quorum
        assert _put(c, b, lb, _payload(lb, _update(c))).status_code == 200  # b is late (computed from version 0)
        la2 = _lease(c, a)
        assert la2["base_version"] == 1
        assert _put(c, a, la2, _payload(la2, _update(c))).status_code == 200
        assert ap.step() == 2  # round 1: a's fresh result and b's late one (staleness 1, weight halved)
        with c.ctx.db.read_session() as s:
            rows = s.execute(select(Update.staleness, Update.status).order_by(Update.seq)).all()
        assert [tuple(r) for r in rows] == [(0, "applied"), (1, "applied"), (0, "applied")]
    finally:
        c.close()


def test_a_unit_dropped_stale_is_trained_again_from_the_current_model(db_url, tmp_path):
    """A result too late for the staleness bound is dropped, but its unit opens again (unpinned) and is leased from
    the current model, so its samples are still trained; at most ``MAX_REISSUES`` times. (A fast worker racing
    rounds ahead once cost a run 64 of its 512 samples.)"""
    c = InProcess(
        db_url,
        tmp_path,
        algorithm="diloco",
        quorum=0.5,
        round_seconds=3600,
        max_staleness=0,
        epochs=4,
        unit_seconds=0.01,
    )
    try:
        a, b = c.register("a"), c.register("b")
        ap = c.applier(evaluate=False)
        la, lb = _lease(c, a), _lease(c, b)
        assert _put(c, a, la, _payload(la, _update(c))).status_code == 200
        assert ap.step() == 1  # a closes round 0 alone
        late = lb
        for attempt in range(MAX_REISSUES + 1):
            assert _put(c, b, late, _payload(late, _update(c))).status_code == 200  # computed from an old version
            la = _lease(c, a)
            assert _put(c, a, la, _payload(la, _update(c))).status_code == 200
            assert ap.step() == 2  # a's fresh unit applied, b's dropped stale
            with c.ctx.db.read_session() as s:
                unit = s.get(Unit, lb["unit_id"])
                assert s.scalar(select(Update.status).where(Update.lease_id == late["lease_id"])) == "stale"
                reopened = unit.status == "open" and unit.base_version is None
            if attempt == MAX_REISSUES:
                assert not reopened  # the cap: a run must end
                break
            assert reopened
            again = _lease(c, b)
            assert again["unit_id"] == lb["unit_id"] and again["data"] == lb["data"]
            assert again["base_version"] == ap.published  # from the current model
            la = _lease(c, a)
            assert _put(c, a, la, _payload(la, _update(c))).status_code == 200
            assert ap.step() == 1  # a closes another round alone: b's copy falls behind again
            late = again
        again = _lease(c, b)
        assert again["unit_id"] != lb["unit_id"]
        assert _put(c, b, again, _payload(again, _update(c))).status_code == 200
        la = _lease(c, a)
        assert _put(c, a, la, _payload(la, _update(c))).status_code == 200
        assert ap.step() == 2
    finally:
        c.close()


def _wait_reason(c: InProcess, auth: dict[str, str]) -> str:
    r = c.tc.post("/v1/leases", headers=auth).json()
    assert r["status"] == "wait", r
    return r["reason"]


def test_overlap_leases_one_unit_ahead_into_the_next_round(db_url, tmp_path):
    """diloco ``overlap``: a worker whose unit of the open round is in leases its next unit at once, from the same
    version; that unit belongs to the next round (it neither counts in nor closes the open one) and is applied
    there with staleness 1; a second unit ahead is refused. A fresh applier (a restart) reads the same rounds from
    the database."""
    c = InProcess(db_url, tmp_path, algorithm="diloco", quorum=0.5, round_seconds=3600, overlap=True)
    try:
        a, b, d = c.register("a"), c.register("b"), c.register("d")
        la, lb, ld = _lease(c, a), _lease(c, b), _lease(c, d)
        ap = c.applier(evaluate=False)
        assert _put(c, a, la, _payload(la, _update(c))).status_code == 200
        assert ap.step() == 0  # a third of round 0's samples: below the quorum
        ahead = _lease(c, a)  # no barrier: the next unit, from the version a already has
        assert ahead["base_version"] == 0 and ahead["data"] != la["data"]
        assert "active lease" in _wait_reason(c, a)
        assert _put(c, a, ahead, _payload(ahead, _update(c))).status_code == 200
        assert ap.step() == 0  # counted as round 0's, a's two units would be half of it: the quorum
        assert "round 0 is waiting" in _wait_reason(c, a)  # one unit ahead at most
        assert _put(c, b, lb, _payload(lb, _update(c))).status_code == 200
        assert ap.step() == 2  # round 0: a's and b's first units; the unit ahead waits for round 1
        assert _put(c, d, ld, _payload(ld, _update(c))).status_code == 200  # late: round 0's, after it closed
        lb2 = _lease(c, b)
        assert lb2["base_version"] == 1
        assert _put(c, b, lb2, _payload(lb2, _update(c))).status_code == 200
        ap.release()  # a restart: nothing of the rounds lives in the applier's memory
        assert c.applier(evaluate=False).step() == 3
        with c.ctx.db.read_session() as s:
            rows = s.execute(select(Update.lease_id, Update.staleness, Update.applied_version)).all()
        got = {lease: (st, version) for lease, st, version in rows}
        ids = [x["lease_id"] for x in (la, lb, ahead, ld, lb2)]
        assert [got[i] for i in ids] == [(0, 1), (0, 1), (1, 2), (1, 2), (0, 2)]
    finally:
        c.close()


def test_a_round_with_no_result_of_its_own_takes_the_units_leased_ahead(db_url, tmp_path):
    """Round 0's only result is quarantined (as the validator does to an invalid one) and its other unit given
    back: the unit leased ahead of it, computed from version 0, closes round 0 as a fresh result instead of
    waiting for a round that would never close."""
    c = InProcess(db_url, tmp_path, algorithm="diloco", quorum=1.0, round_seconds=3600, overlap=True)
    try:
        a, b = c.register("a"), c.register("b")
        la, lb = _lease(c, a), _lease(c, b)
        assert _put(c, a, la, _payload(la, _update(c))).status_code == 200
        ahead = _lease(c, a)
        assert _put(c, a, ahead, _payload(ahead, _update(c))).status_code == 200
        with c.ctx.db.session() as s:
            s.execute(update(Update).where(Update.lease_id == la["lease_id"]).values(status="invalid"))
        ap = c.applier(evaluate=False)
        assert ap.step() == 0  # b still computes round 0's other unit
        assert c.tc.post(f"/v1/leases/{lb['lease_id']}/return", headers=b).status_code == 204
        assert ap.step() == 1
        with c.ctx.db.read_session() as s:
            row = s.execute(
                select(Update.staleness, Update.applied_version).where(Update.lease_id == ahead["lease_id"])
            )
            assert tuple(row.one()) == (0, 1)
    finally:
        c.close()


@pytest.mark.parametrize("overlap", [True, False])
def test_no_unit_ahead_of_a_closing_round_or_without_overlap(db_url, tmp_path, overlap):
    """The worker whose result closes the round waits the applier's pass for a unit from the new version (one a
    round late would be worth less); without ``overlap`` every worker waits at the barrier."""
    c = InProcess(db_url, tmp_path, algorithm="diloco", quorum=1.0, round_seconds=3600, overlap=overlap)
    try:
        a, b = c.register("a"), c.register("b")
        la, lb = _lease(c, a), _lease(c, b)
        assert _put(c, a, la, _payload(la, _update(c))).status_code == 200
        if overlap:
            assert _lease(c, a)["base_version"] == 0  # b still computes: a leases ahead
        else:
            assert "round 0 is waiting" in _wait_reason(c, a)
        assert _put(c, b, lb, _payload(lb, _update(c))).status_code == 200
        assert ("round 0 is closing" if overlap else "round 0 is waiting") in _wait_reason(c, b)
        assert c.applier(evaluate=False).step() == 2
        assert _lease(c, b)["base_version"] == 1
    finally:
        c.close()


def test_worker_uses_a_local_copy_whose_hashes_match(coord: InProcess, tmp_path):
    from vkblas.distributed.protocol import DataSlice, RunInfo
    from vkblas.distributed.worker.cache import DataCache

    from .conftest import DATA

    info = RunInfo.model_validate(coord.tc.get("/v1/run").json())

    class NoNetwork:
        def download(self, *a: object) -> None:
            raise AssertionError("a matching local copy needs no download")

    cache = DataCache(NoNetwork(), info, tmp_path, local=str(DATA))  # type: ignore[arg-type]
    assert sorted(cache.local) == list(range(len(info.data_shards)))
    unit = cache.slice(DataSlice(shard=1, seed=7, offset=3, samples=10))
    x, y = unit.arrays()
    assert len(unit) == 10 and x.shape == (10, 1, 28, 28) and x.dtype == np.float32 and y.shape == (10,)
    # gathered a batch at a time, the same samples in the same order
    parts = list(unit.batches(4))
    assert [len(b) for _, b in parts] == [4, 4, 2]
    np.testing.assert_array_equal(np.concatenate([a for a, _ in parts]), x)
    np.testing.assert_array_equal(np.concatenate([b for _, b in parts]), y)


@pytest.mark.parametrize("codec", ["int8", "fp16"])
def test_diloco_compressed_uploads_with_error_feedback(db_url, tmp_path, codec):
    """A whole small DiLoCo run through the real worker loop (in process): compressed results, error feedback on
    the worker, the applier in its own thread; every unit applied, the uploads a fraction of fp32's size."""
    import threading

    from vkblas.distributed.worker.join import JoinOptions, Worker

    c = InProcess(db_url, tmp_path, algorithm="diloco", codec=codec, block=64, inner_steps=4, eval_seconds=0.2)
    stop = threading.Event()
    applier = threading.Thread(target=c.applier().run, args=(stop, 0.02))
    applier.start()
    try:
        opts = JoinOptions(
            server="http://testserver", progress=False, cache=str(tmp_path / "cache"), error_feedback=True
        )
        worker = Worker(opts, client=c.client())
        summary = worker.run()
        assert worker.trainer.feedback is not None and worker.trainer.feedback.residual
    finally:
        stop.set()
        applier.join()
    st = c.tc.get("/v1/status").json()
    assert st["state"] == "finished" and st["samples_applied"] == 600 and st["rejected"] == 0
    model_bytes = sum(int(np.prod(shape)) * 4 for shape, _ in c.ctx.signature.values())
    assert st["bytes_in"] / st["accepted"] < (0.3 if codec == "int8" else 0.55) * model_bytes
    assert summary.units == st["accepted"] and summary.credit == 600
    c.close()


def test_restart_with_other_options_is_refused(coord: InProcess):
    from vkblas.distributed.coordinator.config import RunSpec
    from vkblas.distributed.coordinator.serve import prepare

    assert prepare(coord.settings, coord.spec) is False  # the same options: resumed, nothing created
    other = RunSpec(**{**coord.spec.model_dump(), "lr": 0.5, "epochs": 2})
    with pytest.raises(ValueError, match=r"other options .*epochs: 1 vs 2.*lr: None vs 0.5"):
        prepare(coord.settings, other)


def test_a_burst_of_uploads_leaves_threads_for_the_other_routes(coord: InProcess, monkeypatch):
    """Uploads run on a thread limiter of their own: with every validation slot taken and more uploads waiting,
    the sync routes (status, heartbeats, leases) still get a thread of the default pool (here cut to 2, the
    number of validations at once, so that the waiting uploads would take all of it)."""
    import threading

    import anyio.to_thread

    from vkblas.distributed.coordinator.api import leases

    release, inside = threading.Event(), threading.Semaphore(0)
    real = leases._validate

    def slow(*a, **kw):  # type: ignore[no-untyped-def]
        inside.release()
        release.wait(30)
        return real(*a, **kw)

    monkeypatch.setattr(leases, "_validate", slow)
    coord.tc.portal.call(lambda: setattr(anyio.to_thread.current_default_thread_limiter(), "total_tokens", 2))
    jobs = []
    for i in range(3):
        auth = coord.register(f"w{i}")
        lease = _lease(coord, auth)
        jobs.append((auth, lease, _payload(lease, _update(coord))))
    replies: list = [None] * 3

    def send(i: int) -> None:
        replies[i] = _put(coord, *jobs[i])

    senders = [threading.Thread(target=send, args=(i,)) for i in range(3)]
    try:
        for t in senders:
            t.start()
        assert inside.acquire(timeout=20) and inside.acquire(timeout=20)  # both validation slots are taken
        got: list = []
        asker = threading.Thread(target=lambda: got.append(coord.tc.get("/v1/status")))
        asker.start()
        asker.join(timeout=10)
        assert got and got[0].status_code == 200, "the status route found no thread while uploads waited"
    finally:
        release.set()
        for t in senders:
            t.join(timeout=30)
        coord.tc.portal.call(lambda: setattr(anyio.to_thread.current_default_thread_limiter(), "total_tokens", 40))
    assert [r.status_code for r in replies] == [200, 200, 200], [r.text for r in replies]


def test_shutdown_leaves_a_pass_still_running_alone(db_url: str, tmp_path, monkeypatch):
    """Shutdown waits for the applier's pass; if the pass is still stepping the model after the wait, the state is
    not recorded underneath it (it could be half-stepped): release() only runs once the thread has ended."""
    import threading

    from vkblas.distributed.coordinator import app as app_module
    from vkblas.distributed.coordinator.applier import Applier

    in_pass, leave, released = threading.Event(), threading.Event(), []

    def stuck(self, now=None):  # type: ignore[no-untyped-def]
        in_pass.set()
        leave.wait(30)
        return 0

    monkeypatch.setattr(Applier, "step", stuck)
    monkeypatch.setattr(Applier, "release", lambda self: released.append(self))
    monkeypatch.setattr(app_module, "APPLIER_STOP_S", 0.2)
    c = InProcess(db_url, tmp_path, settings={"applier": True, "tick_seconds": 0.05})
    try:
        assert in_pass.wait(20)
    finally:
        c.close()
        leave.set()
    assert released == []
