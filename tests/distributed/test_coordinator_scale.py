"""A large model through the coordinator, at a size this machine runs: the checkpoint as content-hashed shards and
pieces, fetched in parallel, verified and resumed after an interruption; results uploaded in parts; a round applied
tensor by tensor within one extra copy of the model (peak RSS, in a process of its own)."""

from __future__ import annotations

import gc
import hashlib
import json
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

import httpx
import numpy as np
import pytest

from vkblas.distributed.algorithms import GlobalModel
from vkblas.distributed.codec import RangeDecoder, decode, encode, from_payload
from vkblas.distributed.coordinator import checkpoints
from vkblas.distributed.coordinator.store import Store
from vkblas.distributed.protocol import PART_BYTES, PARTS_CONTENT_TYPE, ModelManifest
from vkblas.distributed.robust import StreamedAggregate, aggregate
from vkblas.distributed.worker.cache import ModelCache
from vkblas.distributed.worker.errors import UnreachableError

from .conftest import InProcess
from .helpers import _error, _lease, _payload, _update

HERE = Path(__file__).parent


def _model(seed: int = 0, big: tuple[int, int] = (300, 100)) -> GlobalModel:
    rng = np.random.default_rng(seed)
    shapes = {"big": big, "w": (50, 20), "b": (20,), "s": ()}
    return GlobalModel({k: rng.standard_normal(s).astype(np.float32) for k, s in shapes.items()}, "diloco")


# ------------------------------------------------------------------------------------------------ rounds
@pytest.mark.parametrize("rule, n", [("mean", 3), ("trimmed-mean", 11)])
@pytest.mark.parametrize("codec", ["int8", "fp16", "fp32"])
def test_streamed_round_is_the_whole_round(monkeypatch, rule, n, codec):
    """Block by block from the encoded payloads (blocks that cut tensors and int8 scale blocks anywhere) gives
    exactly the update of decoding everything and aggregating it whole, and the same outer step."""
    monkeypatch.setattr(StreamedAggregate, "BLOCK", 777)
    rng = np.random.default_rng(1)
    shapes = {"big": (300, 100), "w": (50, 20), "b": (20,), "s": (), "e": (0, 3)}
    encoded = [
        encode({k: rng.standard_normal(s).astype(np.float32) * 1e-2 for k, s in shapes.items()}, codec, 64)
        for _ in range(n)
    ]
    weights = list(rng.integers(1, 100, n).astype(float))
    whole = aggregate([(decode(t, m), w) for (t, m), w in zip(encoded, weights, strict=True)], rule, 0.1)
    sources = [RangeDecoder(t.get, m).values for t, m in encoded]
    streamed = StreamedAggregate(sources, weights, shapes, rule, 0.1)
    assert set(streamed) == set(shapes) and "big" in streamed and "nope" not in streamed
    for k in shapes:
        np.testing.assert_array_equal(streamed[k], whole[k])
        assert streamed[k].shape == shapes[k] and streamed[k].dtype == np.float32
    a, b = _model(), _model()
    a.apply_pseudo_gradient(whole), b.apply_pseudo_gradient(streamed)
    for _ in range(2):  # the momentum buffers too (the second step uses them)
        a.apply_pseudo_gradient(whole), b.apply_pseudo_gradient(streamed)
    for k in a.names:
        np.testing.assert_array_equal(a.params()[k], b.params()[k])


def test_range_decoder_refuses_what_decode_refuses():
    tensors, meta = encode({"x": np.ones(10, np.float32)}, "int8", 4)
    with pytest.raises(ValueError, match="lacks tensor"):
        RangeDecoder(tensors.get, meta).values("y", 0, 1)
    with pytest.raises(ValueError, match="outside"):
        RangeDecoder(tensors.get, meta).values("x", 5, 11)
    bad = {"x": tensors["x"], "x.__scale__": np.array([1.0, np.nan, 1.0], np.float32)}
    with pytest.raises(ValueError, match="scales must be finite"):
        RangeDecoder(bad.get, meta).values("x", 0, 1)
    with pytest.raises(ValueError, match="block size"):
        RangeDecoder(tensors.get, {**meta, "block": "0"})


def test_round_apply_holds_one_extra_copy(tmp_path):
    """~96 MB model, two int8 results: applying the round and checkpointing it, streamed, peaks below one extra
    model copy above the steady state; decoding every result whole (the old way) peaks at several copies, so the
    measurement can tell them apart."""
    out = subprocess.run(
        [sys.executable, str(HERE / "scale_memory.py"), str(tmp_path / "store")],
        capture_output=True, text=True, timeout=300, check=True,
    )  # fmt: skip
    m = json.loads(out.stdout.strip().splitlines()[-1])
    assert m["model_mib"] == 96.0
    assert m["streamed_extra_mib"] < 1.0 * m["model_mib"], m
    assert m["whole_extra_mib"] > 2.0 * m["model_mib"], m


# ------------------------------------------------------------------------------------------------ checkpoints
def test_checkpoint_round_trip_with_pieces(tmp_path):
    store, model = Store(tmp_path), _model()
    model.apply_pseudo_gradient({k: np.full(s, 0.1, np.float32) for k, s in model.shapes.items()})
    manifest, state = checkpoints.write(store, model, shard_bytes=40_000)  # "big" (120 kB) in 3 pieces
    assert len(manifest.shards) == 4 and all(r.bytes <= 40_000 + 256 for r in manifest.shards)
    for ref in manifest.shards:
        assert (
            hashlib.sha256(store.get(ref.sha256)).hexdigest() == ref.sha256
            and store.path(ref.sha256).stat().st_size == ref.bytes
        )
    back = checkpoints.read_params(store, manifest)
    for k, v in model.params().items():
        np.testing.assert_array_equal(back[k], v)
    state_tensors, meta = from_payload(store.get(state))
    assert meta["format"] == checkpoints.STATE_FORMAT and int(state_tensors["__version__"]) == 1
    expect = {k: v for k, v in model.state_dict().items() if k not in model.names}
    assert sorted(state_tensors) == sorted(expect)
    for k, v in expect.items():
        np.testing.assert_array_equal(state_tensors[k], v)
    again, state2 = checkpoints.write(store, model, shard_bytes=40_000)
    assert again == manifest and state2 == state  # the same model: the same names
    from vkblas.distributed.coordinator.config import RunSpec

    spec = RunSpec(algorithm="diloco", limit=600, shard_samples=250, epochs=1, batch_size=64)
    loaded = checkpoints.read(store, spec, manifest, state)  # a restart: weights, momentum and version back
    assert loaded.version == model.version == 1 and checkpoints.StoredWeights(store, manifest).shapes == model.shapes
    for k, v in model.state_dict().items():
        np.testing.assert_array_equal(loaded.state_dict()[k], v)
    bad = manifest.shards[1].sha256  # a damaged piece: refused, not loaded
    store.path(bad).write_bytes(store.path(bad).read_bytes()[:-4] + b"\0\0\0\1")
    with pytest.raises(OSError, match="damaged"):
        checkpoints.read(store, spec, manifest, state)


# ------------------------------------------------------------------------------------------------ downloads
class _Flaky(httpx.BaseTransport):
    """Wraps the app's transport: counts concurrent shard requests (each held ``hold`` s) and bytes of shard
    bodies; after ``cut_after`` shard-body bytes in all, every shard response breaks (a dead link) until
    ``heal()``."""

    def __init__(self, inner: httpx.BaseTransport, cut_after: int | None = None, hold: float = 0.05) -> None:
        self.inner, self.cut_after, self.hold = inner, cut_after, hold
        self.lock = threading.Lock()
        self.active = self.peak = self.body_bytes = 0
        self.ranges: list[str] = []

    def heal(self) -> None:
        self.cut_after = None

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        if "/v1/shards/" not in request.url.path:
            return self.inner.handle_request(request)
        with self.lock:
            self.active += 1
            self.peak = max(self.peak, self.active)
            if "range" in request.headers:
                self.ranges.append(request.headers["range"])
        try:
            time.sleep(self.hold)
            r = self.inner.handle_request(request)
            body = r.read()
        finally:
            with self.lock:
                self.active -= 1
        with self.lock:
            left = None if self.cut_after is None else max(0, self.cut_after - self.body_bytes)
            sent = body if left is None else body[: min(left, 1000)]  # a break mid-shard, at most 1000 bytes in
            self.body_bytes += len(sent)
        if len(sent) == len(body):
            return httpx.Response(r.status_code, headers=r.headers, content=body)

        class Broken(httpx.SyncByteStream):
            def __iter__(self):  # type: ignore[no-untyped-def]
                yield sent
                raise httpx.ReadError("connection reset (test)")

        return httpx.Response(r.status_code, headers=r.headers, stream=Broken())


def _served_model(coord: InProcess, shard_bytes: int = 40_000) -> tuple[GlobalModel, ModelManifest]:
    model = _model(big=(600, 100))  # 240 kB in 6 pieces, and a shard of the rest
    manifest, _ = checkpoints.write(coord.ctx.store, model, shard_bytes=shard_bytes)
    return model, manifest


def test_model_is_fetched_in_parallel_and_verified(coord: InProcess, tmp_path):
    model, manifest = _served_model(coord)
    flaky = _Flaky(coord.tc._transport)
    params = ModelCache(coord.client(flaky), tmp_path, fetchers=4).params(manifest)
    for k, v in model.params().items():
        np.testing.assert_array_equal(params[k], v)
    assert flaky.peak >= 2, "shards were fetched one after another"
    assert sorted(p.name for p in (tmp_path / "model").iterdir() if not p.name.endswith(".lock")) == sorted(
        {r.sha256 for r in manifest.shards}
    )


def test_interrupted_model_download_resumes_from_what_it_has(coord: InProcess, tmp_path):
    """The link dies after a third of the model; the worker gives up (UnreachableError) with whole shards and a
    .part on disk. A restarted worker on the same cache fetches only the rest (Range from the .part's length)."""
    model, manifest = _served_model(coord)
    total = sum(r.bytes for r in manifest.shards)
    flaky = _Flaky(coord.tc._transport, cut_after=total // 3, hold=0.0)
    client = coord.client(flaky)
    client.retry_for, client.sleep = 0.3, lambda s: None
    with pytest.raises(UnreachableError):
        ModelCache(client, tmp_path, fetchers=2).params(manifest)
    have = sum(p.stat().st_size for p in (tmp_path / "model").iterdir() if not p.name.endswith(".lock"))
    assert 0 < have <= total // 3 + 1000
    again = _Flaky(coord.tc._transport)
    params = ModelCache(coord.client(again), tmp_path, fetchers=2).params(manifest)
    for k, v in model.params().items():
        np.testing.assert_array_equal(params[k], v)
    assert again.body_bytes == total - have  # nothing fetched twice
    assert any(r != "bytes=0-" for r in again.ranges), "the .part was not resumed"


# ------------------------------------------------------------------------------------------------ uploads in parts
@pytest.fixture
def diloco(db_url: str, tmp_path: Path):
    c = InProcess(db_url, tmp_path, algorithm="diloco", codec="int8", block=64, inner_steps=2)
    try:
        yield c
    finally:
        c.close()


def _int8_payload(c: InProcess, lease: dict) -> bytes:
    return _payload(lease, _update(c), codec="int8")


def test_result_in_parts_is_recorded_and_applied(diloco: InProcess):
    auth = diloco.register()
    lease = _lease(diloco, auth)
    body = _int8_payload(diloco, lease)
    client = diloco.client()
    client.token, client.part_bytes = auth["authorization"].split()[1], 100_000
    sent, real = [], client.request

    def counted(method, path, **kw):  # type: ignore[no-untyped-def]
        sent.append((path, len(kw.get("content") or b"")))
        return real(method, path, **kw)

    client.request = counted  # type: ignore[method-assign]
    first = body[:100_000]  # sent before the connection broke: not sent again
    r = diloco.tc.put(f"/v1/leases/{lease['lease_id']}/parts/{hashlib.sha256(first).hexdigest()}", content=first,
                      headers=auth)  # fmt: skip
    assert r.status_code == 200 and r.json()["bytes"] == 100_000
    key = uuid.uuid4().hex
    reply = client.upload(lease["lease_id"], body, key=key)
    assert reply.status == "recorded" and reply.bytes == len(body)
    parts = [(path.rpartition("/")[2], n) for path, n in sent if "/parts/" in path]
    cuts = {hashlib.sha256(body[i : i + 100_000]).hexdigest() for i in range(100_000, len(body), 100_000)}
    cuts -= {hashlib.sha256(first).hexdigest()}
    assert sorted(sha for sha, _ in parts) == sorted(cuts) and max(n for _, n in parts) <= 100_000  # each once
    assert sent[0][0].endswith("/result") and sent[-1][0].endswith("/result")  # the manifest, the parts, again
    assert client.upload(lease["lease_id"], body, key=key) == reply  # a retry: the same answer
    applier = diloco.applier(evaluate=False)
    assert applier.step() == 1
    assert diloco.tc.get("/v1/models/latest").json()["version"] == 1


def test_hostile_parts_are_4xx_and_nothing_is_stored(diloco: InProcess):
    auth, other = diloco.register("a"), diloco.register("b")
    lease = _lease(diloco, auth)
    lid = lease["lease_id"]
    before = set(diloco.ctx.store.all())
    part = b"x" * 1000
    sha = hashlib.sha256(part).hexdigest()
    url = f"/v1/leases/{lid}/parts"
    wrong = hashlib.sha256(b"y").hexdigest()
    assert _error(diloco.tc.put(f"{url}/{wrong}", content=part, headers=auth)) == "checksum-mismatch"
    assert _error(diloco.tc.put(f"{url}/{sha}", content=part, headers=other)) == "not-your-lease"
    assert _error(diloco.tc.put(f"{url}/{sha}", content=part)) == "missing-token"
    assert _error(diloco.tc.put(f"{url}/{sha.upper()}", content=part, headers=auth)) == "invalid-body"
    assert diloco.tc.put(f"{url}/..%2F..%2Fadmin-token", content=part, headers=auth).status_code in (404, 422)
    assert diloco.tc.put(f"{url}/../../admin-token", content=part, headers=auth).status_code in (404, 405, 422)
    big = b"z" * (PART_BYTES + 1)
    assert _error(diloco.tc.put(f"{url}/{hashlib.sha256(big).hexdigest()}", content=big, headers=auth)) == "too-large"
    assert set(diloco.ctx.store.all()) == before

    def result(body: bytes, digest: str | None = None, **kw):  # type: ignore[no-untyped-def]
        headers = {**auth, "idempotency-key": uuid.uuid4().hex, "content-type": PARTS_CONTENT_TYPE,
                   "x-content-sha256": digest or hashlib.sha256(b"").hexdigest()}  # fmt: skip
        return diloco.tc.put(f"/v1/leases/{lid}/result", content=body, headers=headers)

    assert _error(result(json.dumps({"parts": [sha]}).encode())) == "missing-parts"
    assert _error(result(json.dumps({"parts": ["../../etc/passwd"]}).encode())) == "invalid-body"
    assert _error(result(json.dumps({"parts": []}).encode())) == "invalid-body"
    assert _error(result(b"{not json")) == "invalid-body"
    assert _error(result(json.dumps({"parts": [sha], "more": 1}).encode())) == "invalid-body"
    # parts that are there, but assemble into something else than the checksum names, or into no payload
    assert diloco.tc.put(f"{url}/{sha}", content=part, headers=auth).status_code == 200
    assert _error(result(json.dumps({"parts": [sha]}).encode())) == "checksum-mismatch"
    digest = hashlib.sha256(part).hexdigest()
    assert _error(result(json.dumps({"parts": [sha]}).encode(), digest)) == "invalid-payload"
    st = diloco.tc.get("/v1/status").json()
    assert st["pending"] == 0 and st["accepted"] == 0
    # the lease is still the worker's: a good upload in parts goes through afterwards
    body = _int8_payload(diloco, lease)
    client = diloco.client()
    client.token, client.part_bytes = auth["authorization"].split()[1], 50_000
    assert client.upload(lid, body, key=uuid.uuid4().hex).status == "recorded"


def test_a_part_damaged_on_disk_is_dropped_and_asked_for_again(diloco: InProcess):
    """A stored part whose bytes no longer hash to its name (a disk fault) is a 4xx naming it, never a 500, and is
    deleted, so that sending it again stores it afresh and the result goes through."""
    auth = diloco.register()
    lease = _lease(diloco, auth)
    lid, part = lease["lease_id"], b"p" * 1000
    sha = hashlib.sha256(part).hexdigest()
    assert diloco.tc.put(f"/v1/leases/{lid}/parts/{sha}", content=part, headers=auth).status_code == 200
    diloco.ctx.store.path(sha).write_bytes(b"q" * 1000)  # damaged where it lies
    headers = {**auth, "idempotency-key": uuid.uuid4().hex, "content-type": PARTS_CONTENT_TYPE,
               "x-content-sha256": sha}  # fmt: skip
    r = diloco.tc.put(f"/v1/leases/{lid}/result", content=json.dumps({"parts": [sha]}).encode(), headers=headers)
    assert _error(r) == "missing-parts" and sha in r.json()["error"]["message"]
    assert not diloco.ctx.store.path(sha).exists()
    body = _int8_payload(diloco, lease)
    client = diloco.client()
    client.token, client.part_bytes = auth["authorization"].split()[1], 50_000
    assert client.upload(lid, body, key=uuid.uuid4().hex).status == "recorded"


def test_parts_cannot_add_up_past_the_upload_limit(diloco: InProcess, monkeypatch):
    auth = diloco.register()
    lid = _lease(diloco, auth)["lease_id"]
    shas = []
    for i in range(3):
        part = bytes([i]) * 1000
        shas.append(hashlib.sha256(part).hexdigest())
        assert diloco.tc.put(f"/v1/leases/{lid}/parts/{shas[-1]}", content=part, headers=auth).status_code == 200
    monkeypatch.setattr(diloco.ctx, "upload_limit", 2500)
    headers = {**auth, "idempotency-key": uuid.uuid4().hex, "content-type": PARTS_CONTENT_TYPE,
               "x-content-sha256": "0" * 64}  # fmt: skip
    r = diloco.tc.put(f"/v1/leases/{lid}/result", content=json.dumps({"parts": shas}).encode(), headers=headers)
    assert _error(r) == "too-large"


def test_spools_left_by_a_crash_are_collected(tmp_path):
    """An upload cut off by ``kill -9`` leaves its spool file in the store's directory: the GC deletes it once it
    is older than the grace time, and never a spool still being written, nor a stored file."""
    import os

    store = Store(tmp_path)
    kept = store.put(b"a stored file")
    with store.spool() as live:
        live.write(b"being written")
        dead = store.spool()
        dead.write(b"cut off")
        dead.finish()
        old = time.time() - 1000
        os.utime(dead.path, (old, old))
        assert store.stale_temporaries(time.time() - 120) == 1
        assert not dead.path.exists() and live.path.exists() and store.has(kept)
        sha = live.keep()
    assert sha == hashlib.sha256(b"being written").hexdigest() and store.get(sha) == b"being written"
    assert not list(store.blobs.glob(".tmp-*"))


# ------------------------------------------------------------------------------------------------ a GPT run
def test_text_runs_are_gpt_and_diloco():
    from vkblas.distributed.coordinator.config import RunSpec

    assert RunSpec(dataset="shakespeare-char", model="gpt-tiny").algorithm == "diloco"
    for bad, match in [
        (dict(dataset="shakespeare-char", model="mlp"), "does not train on"),
        (dict(dataset="mnist", model="gpt-tiny"), "does not train on"),
        (dict(dataset="shakespeare-char", model="gpt-tiny", algorithm="async"), "diloco only"),
        (dict(dataset="shakespeare-char", model="gpt-9000"), "unknown model"),
    ]:
        with pytest.raises(ValueError, match=match):
            RunSpec(**bad)


def test_text_shards_round_trip_and_are_checked():
    from vkblas.distributed.codec import CodecError, to_payload
    from vkblas.distributed.shards import unit_indices
    from vkblas.distributed.text import FORMAT, blocks, build_text_shards, parse_text_shard

    tokens = np.arange(100, dtype=np.int32) % 65
    shards = build_text_shards("shakespeare-char", tokens, block=8, per_shard=40)
    assert [n for _, n in shards] == [40, 40, 12] and shards == build_text_shards("shakespeare-char", tokens, 8, 40)
    t = parse_text_shard(shards[1][0], "shakespeare-char", 8)
    np.testing.assert_array_equal(t, tokens[40:88])
    idx = unit_indices(len(t) - 8, seed=3, offset=0, samples=40)  # every block of the shard, targets inside it
    x, y = blocks(t, idx, 8)
    assert x.shape == y.shape == (40, 8) and x.dtype == np.int64
    np.testing.assert_array_equal(x[:, 1:], y[:, :-1])
    for data in (
        to_payload({"tokens": np.full(20, 65, np.int32)}, {"format": f"{FORMAT}:shakespeare-char"}),  # outside vocab
        to_payload({"tokens": np.ones(20, np.int64)}, {"format": f"{FORMAT}:shakespeare-char"}),
        to_payload({"tokens": np.ones(8, np.int32)}, {"format": f"{FORMAT}:shakespeare-char"}),  # no block + target
        to_payload({"tokens": np.ones(20, np.int32)}, {"format": f"{FORMAT}:other"}),
        shards[0][0][:-5],
    ):
        with pytest.raises(CodecError):
            parse_text_shard(data, "shakespeare-char", 8)


def test_tiny_gpt_diloco_run_end_to_end(db_url, tmp_path):
    """A whole GPT run through the coordinator and two real worker loops (in process): text shards, int8
    pseudo-gradients uploaded in parts, rounds applied streamed; every block applied once, the loss goes down."""
    from vkblas.distributed.worker.join import JoinOptions, Worker

    c = InProcess(db_url, tmp_path, dataset="shakespeare-char", model="gpt-tiny", algorithm="diloco", codec="int8",
                  block=64, inner_steps=4, batch_size=16, limit=512, shard_samples=256, epochs=2,
                  eval_seconds=0.05, unit_seconds=0.3, round_seconds=5.0)  # fmt: skip
    stop = threading.Event()
    applier = threading.Thread(target=c.applier().run, args=(stop, 0.02))
    applier.start()
    summaries = []

    def work(i: int) -> None:
        client = c.client()
        client.part_bytes = 10_000  # the 27 k-parameter model's int8 results (~29 kB) go in 3 parts
        opts = JoinOptions(server="http://testserver", progress=False, cache=str(tmp_path / f"cache{i}"))
        summaries.append(Worker(opts, client=client).run())

    workers = [threading.Thread(target=work, args=(i,)) for i in range(2)]
    try:
        for w in workers:
            w.start()
        for w in workers:
            w.join(timeout=240)
    finally:
        stop.set()
        applier.join()
    st = c.tc.get("/v1/status").json()
    assert st["state"] == "finished" and st["samples_applied"] == 1024 and st["rejected"] == 0, st
    assert len(summaries) == 2 and sum(s.samples for s in summaries) == 1024
    assert all(s.units > 0 for s in summaries), [s.units for s in summaries]  # both took part
    first, last = st["evaluations"][0], st["evaluations"][-1]
    assert first["version"] == 0 and last["version"] == st["version"] > 1
    assert last["loss"] < first["loss"] - 0.1, (first, last)  # ln(65) = 4.17 at the start
    c.close()


@pytest.mark.timeout(300)
def test_tiny_gpt_run_over_loopback(db_url, procs):
    """The same with the real processes over loopback: ``serve shakespeare-char --model gpt-tiny`` and two
    ``join``; the run finishes, every block applied once, nothing rejected, the loss falls."""
    procs.serve(db_url, "--model", "gpt-tiny", "--algorithm", "diloco", "--codec", "int8", "--limit", "512",
                "--shard-samples", "256", "--batch-size", "16", "--inner-steps", "4", "--unit-seconds", "0.5",
                "--validate-fraction", "0", "--trust-after", "0", "--eval-seconds", "0.2",
                dataset="shakespeare-char")  # fmt: skip
    workers = [procs.join(f"w{i}") for i in range(2)]
    st = procs.wait(lambda st: st["state"] == "finished", timeout=240)
    for p in workers:
        assert p.wait(timeout=60) == 0, p.log.read_text()[-2000:]
    assert st["samples_applied"] == 512 and st["rejected"] == 0 and st["model"] == "gpt-tiny"
    assert st["evaluations"][-1]["loss"] < st["evaluations"][0]["loss"]


# ------------------------------------------------------------------------------------------------ memory
MEMORY_SHAPES = {f"layer{i}.weight": (256, 256) for i in range(40)} | {"head.bias": (1000,)}  # ~10.5 MB, 41 tensors


@pytest.mark.timeout(120)
def test_concurrent_uploads_and_their_round_hold_one_extra_copy(db_url, tmp_path, monkeypatch):
    """A diloco run of new (checked) workers: 8 int8 results uploaded at once (half in parts), then the pass that
    validates them by pairs, applies the round and checkpoints it. Traced (tracemalloc: every Python and numpy
    allocation, the test's own payloads made before the baseline), each phase's peak above the steady state (the
    model, its momentum) stays within one extra copy of the model. Before uploads were spooled to disk and results
    read a range at a time, eight uploads held their bodies' parsed tensors at once and the validator decoded both
    copies of a unit whole (measured: several copies)."""
    import tracemalloc

    from vkblas.distributed.coordinator import checkpoints as cp

    rng = np.random.default_rng(0)
    weights = {k: rng.standard_normal(s).astype(np.float32) * 0.1 for k, s in MEMORY_SHAPES.items()}
    monkeypatch.setattr(cp, "initial_params", lambda *a: weights)
    monkeypatch.setattr(StreamedAggregate, "BLOCK", 1 << 14)  # its blocks as small next to this model as to a GPT's
    model_bytes = sum(v.nbytes for v in weights.values())
    c = InProcess(db_url, tmp_path, algorithm="diloco", codec="int8", block=64, inner_steps=1, batch_size=16,
                  limit=2000, validate_fraction=0.05, trust_after=50, max_unchecked=50)  # fmt: skip
    try:
        applier = c.applier(evaluate=False)

        def round_of(n: int) -> list[tuple]:  # n workers, each unit computed twice (new workers are checked)
            jobs = []
            for i in range(n):
                auth = c.register(f"w{len(jobs)}-{uuid.uuid4().hex[:6]}")
                lease = _lease(c, auth)
                client = c.client()
                client.token = auth["authorization"].split()[1]
                body = _int8_payload(c, lease)
                # half of them in parts of 1 MiB, cut here: the worker's client would copy each part as it sends
                step = 1 << 20 if i % 2 else len(body)
                parts = [body[at : at + step] for at in range(0, len(body), step)] if i % 2 else []
                jobs.append((client, lease, body, parts))
            return jobs

        def upload_all(jobs: list[tuple]) -> None:
            go = threading.Barrier(len(jobs))
            replies: list = []

            def one(client, lease, body, parts) -> None:  # type: ignore[no-untyped-def]
                go.wait()
                for part in parts:
                    sha = hashlib.sha256(part).hexdigest()
                    client.request("PUT", f"/v1/leases/{lease['lease_id']}/parts/{sha}", content=part)
                client.part_bytes = max(map(len, parts)) if parts else len(body)  # parts: the manifest alone
                replies.append(client.upload(lease["lease_id"], body, key=uuid.uuid4().hex))

            threads = [threading.Thread(target=one, args=job) for job in jobs]
            for t in threads:
                t.start()
            for t in threads:
                t.join(timeout=60)
            assert sorted(r.status for r in replies) == ["held"] * len(jobs), replies

        upload_all(round_of(2))  # round 0 makes the momentum buffers: state, not a round's extra memory
        applier.step()
        assert applier.model.version == 1
        jobs = round_of(8)
        peaks: dict[str, float] = {}

        def phase(name: str) -> None:  # the peak since the last phase ended is this one's (the largest, if several)
            peaks[name] = max(peaks.get(name, 0.0), tracemalloc.get_traced_memory()[1] / model_bytes)
            tracemalloc.reset_peak()

        def traced(fn, before: str, after: str):  # type: ignore[no-untyped-def]
            def wrapped(*a, **kw):  # type: ignore[no-untyped-def]
                phase(before)
                out = fn(*a, **kw)
                phase(after)
                return out

            return wrapped

        from vkblas.distributed.coordinator import applier as applier_module

        monkeypatch.setattr(applier_module, "validate", traced(applier_module.validate, "-", "validator"))
        # a round's checkpoint: its weights, then its optimizer state (diloco writes both every round)
        write_weights = traced(cp.write_weights, "round apply", "checkpoint write")
        monkeypatch.setattr(applier_module.checkpoints, "write_weights", write_weights)
        write_state = traced(cp.write_state, "checkpoint write", "checkpoint write")
        monkeypatch.setattr(applier_module.checkpoints, "write_state", write_state)
        gc.collect()
        tracemalloc.start()
        try:
            upload_all(jobs)
            phase("uploads received + validated")
            assert applier.step() == 4 + 4  # four units validated (pairs agreeing), their round applied
        finally:
            tracemalloc.stop()
        assert applier.model.version == 2 and c.tc.get("/v1/status").json()["accepted"] == 5
        peaks.pop("-")
        print(f"extra peak by phase, in copies of the {model_bytes / 1e6:.1f} MB model: {peaks}")
        assert len(peaks) == 4 and max(peaks.values()) <= 1.1, peaks
    finally:
        c.close()
