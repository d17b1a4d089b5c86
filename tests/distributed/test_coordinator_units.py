"""The coordinator's and worker's small pieces as functions: shards, unit sizing, the run spec, the worker's
transport (byte counts, uplink bucket) and its retries."""

from __future__ import annotations

import httpx
import numpy as np
import pytest

from vkblas.distributed.codec import CodecError, from_payload
from vkblas.distributed.coordinator.api.watch import RunWatch
from vkblas.distributed.coordinator.config import RunSpec, normalise_db_url
from vkblas.distributed.coordinator.crud import unit_samples
from vkblas.distributed.shards import (
    assemble,
    build_shards,
    model_shards,
    parse_model_shard,
    parse_shard,
    shard_order,
    unit_indices,
    unit_seed,
)
from vkblas.distributed.worker import transport
from vkblas.distributed.worker.client import Client
from vkblas.distributed.worker.errors import ServerError, UnreachableError


def test_unit_indices_are_a_seeded_slice_of_one_permutation():
    seed = unit_seed(0, 1, 2)
    whole = np.concatenate([unit_indices(100, seed, o, 25) for o in range(0, 100, 25)])
    assert sorted(whole.tolist()) == list(range(100))  # the units of a shard cover it once
    np.testing.assert_array_equal(unit_indices(100, seed, 25, 25), whole[25:50])
    assert unit_seed(0, 1, 2) != unit_seed(0, 2, 2) and sorted(shard_order(0, 3, 6)) == list(range(6))
    with pytest.raises(ValueError, match="outside a shard of 100"):
        unit_indices(100, seed, 90, 20)


def test_data_shards_round_trip_and_refuse_others():
    images = np.arange(5 * 4 * 4, dtype=np.uint8).reshape(5, 4, 4)
    labels = np.arange(5, dtype=np.int32)
    shards = build_shards("mnist", images, labels, per_shard=2)
    assert len(shards) == 3 and shards == build_shards("mnist", images, labels, per_shard=2)  # deterministic bytes
    x, y = parse_shard(shards[2], "mnist")
    np.testing.assert_array_equal(x, images[4:]) and np.testing.assert_array_equal(y, labels[4:])
    with pytest.raises(CodecError, match="not a fashion-mnist data shard"):
        parse_shard(shards[0], "fashion-mnist")
    with pytest.raises(CodecError):
        parse_shard(shards[0][:-3], "mnist")


def test_model_shards_group_small_tensors_cut_large_ones_and_keep_names():
    rng = np.random.default_rng(0)
    params = {"a": np.ones((4, 4), np.float32), "b": np.zeros(3, np.float32), "c": rng.random((9, 7), np.float32)}
    shards = model_shards(params, max_bytes=100)  # a and b fit one shard; c (252 bytes) is cut into 3 pieces
    assert [sorted(parse_model_shard(s)) for s in shards] == [["a", "b"], ["c@0:9x7"], ["c@25:9x7"], ["c@50:9x7"]]
    entries = {k: v for s in shards for k, v in parse_model_shard(s).items()}
    back = assemble(entries)
    assert sorted(back) == ["a", "b", "c"]
    for k in params:
        np.testing.assert_array_equal(back[k], params[k])
    again = model_shards({**params, "c": params["c"] * 2}, max_bytes=100)
    assert again[0] == shards[0] and again[1] != shards[1]  # an unchanged group keeps its bytes, so its hash
    (scalar,) = model_shards({"s": np.array(3.0, np.float32)}, max_bytes=4)
    assert assemble(parse_model_shard(scalar))["s"].shape == ()
    with pytest.raises(CodecError, match="do not cover it once"):
        assemble({k: v for k, v in entries.items() if k != "c@25:9x7"})
    with pytest.raises(CodecError, match="hold 50 of its 63"):
        assemble({k: v for k, v in entries.items() if k != "c@50:9x7"})
    with pytest.raises(ValueError, match="reserve"):
        model_shards({"x@1": np.ones(2, np.float32)})


@pytest.mark.parametrize(
    "name, values",
    [("c@0:3x3", np.ones(10, np.float32)), ("c@x:3", np.ones(1, np.float32)), ("c@0:3", np.ones((1, 1), np.float32))],
)
def test_model_shard_pieces_are_checked(name, values):
    from vkblas.distributed.codec import to_payload
    from vkblas.distributed.shards import MODEL_FORMAT

    with pytest.raises(CodecError):
        parse_model_shard(to_payload({name: values}, {"format": MODEL_FORMAT}))


def test_streamed_payload_is_a_safetensors_file():
    from vkblas.distributed.codec import payload_chunks

    arrays = {
        "v": np.array(7, np.int64),
        "w": np.arange(12, dtype=np.float32).reshape(3, 4),
        "e": np.zeros(0, np.float32),
    }
    entries = [(k, v.dtype, v.shape) for k, v in arrays.items()]
    data = b"".join(bytes(c) for c in payload_chunks(entries, arrays.__getitem__, {"format": "x"}))
    back, meta = from_payload(data)
    assert meta == {"format": "x"} and sorted(back) == sorted(arrays)
    for k, v in arrays.items():
        np.testing.assert_array_equal(back[k], v) and back[k].dtype == v.dtype
    with pytest.raises(ValueError, match="announced shape"):
        b"".join(payload_chunks([("w", np.float32, (2,))], arrays.__getitem__))


def test_unit_sizes_follow_speed_within_their_caps():
    a = RunSpec(algorithm="async", batch_size=128, unit_seconds=2.0)
    assert unit_samples(a, None) == 128  # calibration: one batch
    assert unit_samples(a, 10_000.0) == 128  # a gradient is never more than a batch
    assert unit_samples(a, 20.0) == 40  # a slow device: about unit_seconds of work
    d = RunSpec(algorithm="diloco", batch_size=32, unit_seconds=1.0, inner_steps=10)
    assert unit_samples(d, None) == 32
    assert unit_samples(d, 100.0) == 96  # 3 whole inner steps
    assert unit_samples(d, 1e6) == 320  # at most inner_steps
    assert unit_samples(d, 1.0) == 32
    # a round waits for its slowest unit: when the fastest worker's unit is capped (320 samples, 0.32 s at
    # 1000/s), the others get that time too, not unit_seconds
    assert unit_samples(d, 500.0, fastest=1000.0) == 160
    assert unit_samples(d, 100.0, fastest=100.0) == 96  # nobody capped: unit_seconds
    assert unit_samples(d, None, fastest=1000.0) == 32  # still calibrating: one batch


def test_units_run_on_into_the_next_shards(db_url, tmp_path):
    """Units are carved from the data order without stopping at a shard's end (a short unit left its DiLoCo round
    waiting): each has the size asked for until the run's last, and every epoch covers every shard exactly once."""
    from vkblas.distributed.coordinator import crud
    from vkblas.distributed.coordinator.models import RUN_ID, Run

    from .conftest import InProcess

    c = InProcess(db_url, tmp_path, algorithm="diloco", epochs=2)  # shards of 250, 250, 100 samples
    seen: dict[tuple[int, int], list[int]] = {}
    sizes, spanning = [], 0
    with c.ctx.db.session() as s:
        run = s.get(Run, RUN_ID)
        while (unit := crud._carve(s, run, c.spec, 192)) is not None:
            data = crud.unit_data(unit)
            parts = data.parts()
            sizes.append(data.samples)
            spanning += len(parts) > 1
            assert sum(p.samples for p in parts) == data.samples and parts[0].samples > 0
            for p in parts:
                positions = unit_indices(SHARDS[p.shard], p.seed, p.offset, p.samples)
                seen.setdefault((p.seed, p.shard), []).extend(positions.tolist())
    assert sizes[:-1] == [192] * (len(sizes) - 1) and sum(sizes) == 1200 and spanning >= 3
    assert len(seen) == 6  # 3 shards x 2 epochs, each a permutation seed of its own
    for (_, shard), positions in seen.items():
        assert sorted(positions) == list(range(SHARDS[shard])), shard


SHARDS = {0: 250, 1: 250, 2: 100}  # InProcess's run: 600 images in shards of 250


def test_unit_samples_batches_straddle_parts_in_order():
    from vkblas.distributed.shards import UnitSamples

    a, b = np.arange(10, 20), np.arange(100, 103)
    unit = UnitSamples([(lambda i: (a[i], -a[i]), np.array([3, 1, 0, 2])), (lambda i: (b[i], -b[i]), np.array([2, 0]))])
    assert len(unit) == 6
    got = [x.tolist() for x, _ in unit.batches(4)]
    assert got == [[13, 11, 10, 12], [102, 100]]
    assert [x.tolist() for x, _ in unit.batches(5)] == [[13, 11, 10, 12, 102], [100]]
    x, y = unit.arrays()
    assert x.tolist() == [13, 11, 10, 12, 102, 100] and y.tolist() == [-13, -11, -10, -12, -102, -100]


def test_a_unit_names_its_parts_and_refuses_empty_ones():
    from pydantic import ValidationError

    from vkblas.distributed.protocol import DataPart, DataSlice

    d = DataSlice(shard=2, seed=5, offset=240, samples=30, more=[DataPart(shard=0, seed=6, offset=0, samples=20)])
    assert [(p.shard, p.offset, p.samples) for p in d.parts()] == [(2, 240, 10), (0, 0, 20)]
    with pytest.raises(ValidationError, match="cannot continue"):
        DataSlice(shard=2, seed=5, offset=240, samples=20, more=[DataPart(shard=0, seed=6, offset=0, samples=20)])


def test_run_spec_and_db_urls():
    with pytest.raises(ValueError, match="unknown dataset 'cifar'"):
        RunSpec(dataset="cifar")
    with pytest.raises(ValueError, match="batch_size"):
        RunSpec(batch_size=0)
    assert RunSpec(algorithm="diloco").learning_rate == 1e-3 and RunSpec(algorithm="diloco").round_quorum == 0.75
    # overlapped rounds: diloco's default; refused where results one round late would not count, and off by
    # default there
    assert RunSpec().overlaps and not RunSpec(overlap=False).overlaps and not RunSpec(algorithm="sync").overlaps
    assert not RunSpec(max_staleness=0).overlaps
    with pytest.raises(ValueError, match="overlap is for diloco"):
        RunSpec(algorithm="sync", overlap=True)
    with pytest.raises(ValueError, match="max_staleness >= 1"):
        RunSpec(overlap=True, max_staleness=0)
    # a unit leased ahead starts a round late: overlap's default bound is one more, an explicit one stands
    assert RunSpec().staleness_bound == 3 and RunSpec(overlap=False).staleness_bound == 2
    assert RunSpec(max_staleness=1).staleness_bound == 1 and RunSpec(algorithm="sync").staleness_bound == 1
    # diloco's AdamW state: fresh per unit unless asked, and kept only where nothing is checked
    assert RunSpec().inner_state == "fresh" and RunSpec(validate_fraction=0, trust_after=0, inner_state="kept")
    with pytest.raises(ValueError, match="inner_state 'kept' makes a unit depend"):
        RunSpec(inner_state="kept")
    assert normalise_db_url("postgresql://u@h/db") == "postgresql+psycopg://u@h/db"
    assert normalise_db_url("x.db").startswith("sqlite:////")


def test_metered_transport_counts_and_throttles(monkeypatch):
    slept = []
    clock = [0.0]
    monkeypatch.setattr(transport.time, "sleep", lambda s: (slept.append(s), clock.__setitem__(0, clock[0] + s)))
    monkeypatch.setattr(transport.time, "monotonic", lambda: clock[0])
    inner = httpx.MockTransport(lambda req: httpx.Response(200, content=b"x" * 1000))
    m = transport.Metered(inner, uplink_bits=8e5)  # 100 kB/s
    with httpx.Client(transport=m, base_url="http://test") as c:
        assert c.post("/up", content=b"y" * 50_000).content == b"x" * 1000
    assert m.sent > 50_000 and m.received > 1000
    assert sum(slept) == pytest.approx(m.sent / 1e5, rel=0.2)  # the bytes, at the uplink's rate


def test_client_retries_then_gives_up_with_one_error():
    calls = []

    def flaky(request: httpx.Request) -> httpx.Response:
        calls.append(1)
        if len(calls) < 3:
            raise httpx.ConnectError("refused (test)")
        if len(calls) == 3:
            return httpx.Response(503)
        return httpx.Response(200, json={"error": {"code": "bad-token", "message": "no"}} if len(calls) > 4 else {})

    c = Client("http://test", transport=httpx.MockTransport(flaky), sleep=lambda s: None, retry_for=60)
    assert c.request("GET", "/x").status_code == 200 and len(calls) == 4

    def refuse(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("refused (test)")

    down = Client("http://test", transport=httpx.MockTransport(refuse), sleep=lambda s: None, retry_for=0)
    with pytest.raises(UnreachableError, match="no answer from http://test"):
        down.request("GET", "/x")
    refused = Client("http://test", transport=httpx.MockTransport(
        lambda r: httpx.Response(401, json={"error": {"code": "bad-token", "message": "unknown token"}})))  # fmt: skip
    with pytest.raises(ServerError) as e:
        refused.request("GET", "/x")
    assert (e.value.status, e.value.code) == (401, "bad-token")


@pytest.mark.parametrize("own_lock", [True, False])
def test_sqlite_writers_of_one_process_queue_on_a_lock(tmp_path, monkeypatch, own_lock: bool):
    """Eight threads writing at once with a busy timeout of 1 ms: queued on the process's own lock they all commit
    (and none is lost); without it SQLite refuses some ("database is locked"), which is what the lock spares the
    coordinator's request threads (they used to sleep in SQLite's busy handler instead)."""
    import threading
    import time

    from sqlalchemy import text
    from sqlalchemy.exc import OperationalError

    from vkblas.distributed.coordinator import db as dbmod

    monkeypatch.setattr(dbmod, "SQLITE_BUSY_TIMEOUT_S", 0.001)
    db = dbmod.Database(normalise_db_url(str(tmp_path / "w.db")))
    if not own_lock:
        db._write_lock = None
    with db.session() as s:
        s.execute(text("CREATE TABLE n (v INTEGER)"))
        s.execute(text("INSERT INTO n VALUES (0)"))
    failures: list[Exception] = []

    def writer() -> None:
        for _ in range(20):
            try:
                with db.session() as s:
                    v = s.execute(text("SELECT v FROM n")).scalar_one()
                    time.sleep(0.001)  # hold the write lock a while: the others must wait for it
                    s.execute(text("UPDATE n SET v = :v"), {"v": v + 1})
            except OperationalError as e:
                failures.append(e)

    threads = [threading.Thread(target=writer) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    with db.read_session() as s:
        total = s.execute(text("SELECT v FROM n")).scalar_one()
    db.dispose()
    if own_lock:
        assert not failures and total == 160
    else:
        assert failures and "locked" in str(failures[0]) and total == 160 - len(failures)


def test_run_watch_logs_an_outage_once_and_its_end(caplog):
    """The long-poll watcher reads the run every tick: a database that is away (a restart, a dropped test
    database) gives one logged traceback for the outage and one line when it is back, not one every tick."""
    import asyncio
    import contextlib
    import logging

    class Session:
        def get(self, *a):
            return None

        def scalar(self, *a):
            return 0

    class Flaky:
        down = True

        @contextlib.contextmanager
        def read_session(self):
            if self.down:
                raise ConnectionError("database is away")
            yield Session()

    async def scenario(db):
        watch = RunWatch(db, every=0.01)  # type: ignore[arg-type]
        watch.start()
        await asyncio.sleep(0.15)  # ~15 failing ticks
        db.down = False
        await asyncio.sleep(0.1)
        await watch.stop()

    with caplog.at_level(logging.INFO, logger="vkblas.coordinator"):
        asyncio.run(scenario(Flaky()))
    messages = [(r.levelname, r.getMessage()) for r in caplog.records if "run watch" in r.getMessage()]
    assert [level for level, _ in messages] == ["ERROR", "INFO"], messages
    assert "works again" in messages[1][1]


def test_a_deadlocked_transaction_is_run_again(pg_url):
    """Two transactions that lock two rows in opposite orders: PostgreSQL aborts one (40P01, deadlock detected)
    and ``Database.transaction`` runs it again, so both commit (in the CI run that found this, three transactions,
    a lease request among them, waited on each other; the worker got a 500 and quit)."""
    import threading

    from sqlalchemy import text

    from vkblas.distributed.coordinator.db import Database

    db = Database(normalise_db_url(pg_url))
    try:
        with db.session() as s:
            s.execute(text("CREATE TABLE pair (id integer PRIMARY KEY, v integer NOT NULL)"))
            s.execute(text("INSERT INTO pair VALUES (1, 0), (2, 0)"))
        both_hold_one = threading.Barrier(2, timeout=20)
        attempts: list[int] = []

        def crosswise(first: int, second: int):  # type: ignore[no-untyped-def]
            def work(s):  # type: ignore[no-untyped-def]
                attempts.append(first)
                s.execute(text("UPDATE pair SET v = v + 1 WHERE id = :i"), {"i": first})
                if attempts.count(first) == 1:  # the first attempt waits until the other holds its row too
                    both_hold_one.wait()
                s.execute(text("UPDATE pair SET v = v + 1 WHERE id = :i"), {"i": second})

            return work

        errors: list[BaseException] = []

        def run(work):  # type: ignore[no-untyped-def]
            try:
                db.transaction(work)
            except BaseException as e:  # noqa: BLE001 - reported by the assertion below
                errors.append(e)

        threads = [threading.Thread(target=run, args=(crosswise(a, b),)) for a, b in ((1, 2), (2, 1))]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        assert not errors, errors
        assert len(attempts) == 3, attempts  # one of the two ran again
        with db.read_session() as s:
            assert dict(s.execute(text("SELECT id, v FROM pair")).all()) == {1: 2, 2: 2}
    finally:
        db.dispose()


def test_transaction_gives_up_on_other_errors_at_once(tmp_path):
    """Only a deadlock's or a serialization failure's loser is run again; any other error is the caller's."""
    from sqlalchemy import text
    from sqlalchemy.exc import OperationalError

    from vkblas.distributed.coordinator.db import Database

    db = Database(normalise_db_url(str(tmp_path / "c.db")))
    calls = []

    def broken(s):  # type: ignore[no-untyped-def]
        calls.append(1)
        s.execute(text("SELECT * FROM no_such_table"))

    try:
        with pytest.raises(OperationalError, match="no_such_table"):
            db.transaction(broken)
        assert len(calls) == 1
    finally:
        db.dispose()


def test_a_database_failure_is_503_unavailable_and_the_worker_retries(tmp_path, monkeypatch):
    """A request the database fails (down, or a deadlock lost every attempt) is 503 ``unavailable`` with
    ``Retry-After`` and no SQL in the reply; the worker's client retries it like any 503 and then succeeds."""
    from sqlalchemy.exc import OperationalError

    from vkblas.distributed.coordinator import crud

    from .conftest import InProcess

    class DeadlockError(Exception):
        sqlstate = "40P01"

    real, failures = crud.lease, []

    def flaky(s, **kw):  # type: ignore[no-untyped-def]
        if len(failures) < 7:  # more than one request's attempts: the first request fails, the second works
            failures.append(1)
            raise OperationalError("SELECT secret_table FOR UPDATE", {}, DeadlockError("deadlock detected"))
        return real(s, **kw)

    c = InProcess(str(tmp_path / "c.db"), tmp_path)
    try:
        monkeypatch.setattr(crud, "lease", flaky)
        headers = c.register("w")
        r = c.tc.post("/v1/leases", headers=headers)
        assert r.status_code == 503, r.text
        assert r.json()["error"]["code"] == "unavailable"
        assert r.headers["retry-after"] == "1"
        assert "secret_table" not in r.text and "SELECT" not in r.text
        assert len(failures) == 5  # the transaction's five attempts
        client = c.client()
        client.sleep = lambda s: None
        client.token = headers["authorization"].split()[1]
        reply = client.lease()
        assert reply.status == "work" and len(failures) == 7
    finally:
        c.close()


def test_an_internal_error_is_500_internal_and_the_worker_waits_it_out(tmp_path, monkeypatch):
    """A fault of the coordinator's own (here a lease that raises) is 500 ``internal`` with the protocol's JSON body
    and nothing of the failure in it; a worker's client retries it with backoff instead of leaving (it quit on the
    first 500 before)."""
    from starlette.testclient import TestClient

    from vkblas.distributed.coordinator import crud

    from .conftest import InProcess

    real, failures = crud.lease, []

    def broken(s, **kw):  # type: ignore[no-untyped-def]
        if len(failures) < 3:
            failures.append(1)
            raise RuntimeError("secret detail of the failure")
        return real(s, **kw)

    c = InProcess(str(tmp_path / "c.db"), tmp_path)
    try:
        monkeypatch.setattr(crud, "lease", broken)
        headers = c.register("w")
        quiet = TestClient(c.app, base_url="http://testserver", raise_server_exceptions=False)  # as a server answers
        quiet.__enter__()
        r = quiet.post("/v1/leases", headers=headers)
        assert r.status_code == 500, r.text
        assert r.json()["error"]["code"] == "internal"
        assert "secret" not in r.text and "RuntimeError" not in r.text
        client = c.client(transport=quiet._transport)
        client.sleep = lambda s: None
        client.token = headers["authorization"].split()[1]
        reply = client.lease()
        assert reply.status == "work" and len(failures) == 3
        quiet.__exit__(None, None, None)
    finally:
        c.close()
