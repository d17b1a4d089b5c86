"""The Alembic migrations, on SQLite and PostgreSQL: one head; upgrade on an empty database gives exactly the
schema the ORM models describe; down to nothing and up again, with a row in (raw SQL, so ORM edits cannot mask a
broken migration)."""

from __future__ import annotations

from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import inspect, text

from vkblas.distributed.coordinator.config import normalise_db_url
from vkblas.distributed.coordinator.db import HEAD, Database, alembic_config, current_revision, downgrade, migrate
from vkblas.distributed.coordinator.models import Base


def test_one_head():
    assert ScriptDirectory.from_config(alembic_config()).get_heads() == [HEAD]


def test_upgrade_empty_database_matches_the_models(db_url: str):
    db = Database(normalise_db_url(db_url))
    try:
        assert current_revision(db) is None
        migrate(db)
        migrate(db)  # again: nothing to do
        assert current_revision(db) == HEAD
        with db.engine.connect() as conn:
            assert compare_metadata(MigrationContext.configure(conn), Base.metadata) == []
        with db.engine.begin() as conn:
            conn.execute(text("INSERT INTO leaders (name, holder, expires_at) VALUES ('x', 'y', 1.0)"))
        migrate(db, "base")
        assert not set(inspect(db.engine).get_table_names()) & set(Base.metadata.tables)
        migrate(db)
        with db.engine.connect() as conn:
            assert conn.execute(text("SELECT count(*) FROM leaders")).scalar() == 0
    finally:
        db.dispose()


def test_upgrade_from_0001_with_data_in_and_back(db_url: str):
    """A database of the first schema holding a run, a worker, a unit, its lease and an applied result is upgraded
    to the head (the result gets its unit, the unit its count of results, new columns their defaults), and taken
    back to 0001 with its rows intact."""
    db = Database(normalise_db_url(db_url))
    try:
        migrate(db, "0001")
        with db.engine.begin() as conn:
            conn.execute(text(
                "INSERT INTO runs VALUES ('run', 'uid', '{}', '[]', 'running', 1.0, 100, 64, 0, 0, 64, 1, 1.0, 64,"
                " 0.5, 1)"))  # fmt: skip
            conn.execute(text(
                "INSERT INTO workers (id, name, device, token_hash, created_at, last_seen, rate, samples_per_s, wall_s,"
                " idle_s, bytes_sent, bytes_received, units_done, credit, accepted, stale, rejected) VALUES"
                " (1, 'alice', 'cpu', 'h', 1.0, 2.0, '{}', 10.0, 5.0, 1.0, 100, 200, 1, 64, 1, 0, 0)"))  # fmt: skip
            conn.execute(text("INSERT INTO units VALUES (7, 0, 0, 42, 0, 64, 'done', 1)"))
            conn.execute(text("INSERT INTO leases VALUES ('l1', 7, 1, 0, 64, 1.0, 31.0, 'done')"))
            conn.execute(text(
                "INSERT INTO updates (seq, lease_id, worker_id, idempotency_key, payload_sha256, payload_bytes,"
                " base_version, samples, compute_s, loss, norm, created_at, status, applied_version, staleness)"
                " VALUES (1, 'l1', 1, 'key12345', 'sha', 10, 0, 64, 0.1, 2.3, 1.5, 1.5, 'applied', 1, 0)"))  # fmt: skip
        migrate(db)
        assert current_revision(db) == HEAD
        with db.engine.connect() as conn:
            assert compare_metadata(MigrationContext.configure(conn), Base.metadata) == []
            up = conn.execute(text("SELECT unit_id, status, suspicion, content_sha256 FROM updates")).one()
            assert tuple(up) == (7, "applied", "", None)
            unit = conn.execute(text("SELECT quorum, results, base_version, status FROM units")).one()
            assert tuple(unit) == (1, 1, None, "done")
            w = conn.execute(text(
                "SELECT credit, consecutive_valid, valid, invalid, pending_samples, banned, address, user_id"
                " FROM workers")).one()  # fmt: skip
            assert tuple(w) == (64, 0, 0, 0, 0, None, "", None)
            assert conn.execute(text("SELECT role FROM leases")).scalar() == "primary"
            assert conn.execute(text("SELECT state, stop_reason FROM runs")).one() == ("running", "")
        downgrade(db, "0001")
        assert current_revision(db) == "0001"
        with db.engine.connect() as conn:
            assert conn.execute(text("SELECT count(*) FROM updates WHERE status = 'applied'")).scalar() == 1
            assert conn.execute(text("SELECT name, credit FROM workers")).one() == ("alice", 64)
        assert "users" not in inspect(db.engine).get_table_names()
    finally:
        db.dispose()


def test_weights_only_versions_go_back_to_their_state_on_downgrade(db_url: str):
    """0003 -> 0002: the versions published without a state file are deleted, the run goes back to the newest one
    with a state, and the updates applied after it are recorded again (the older code replays what is recorded)."""
    db = Database(normalise_db_url(db_url))
    try:
        migrate(db, "0001")  # the rows in the first schema's columns (as above), three applied updates
        with db.engine.begin() as conn:
            conn.execute(text(
                "INSERT INTO runs VALUES ('run', 'uid', '{}', '[]', 'running', 1.0, 1000, 192, 0, 0, 192, 3, 1.0, 192,"
                " 0.5, 3)"))  # fmt: skip
            conn.execute(text(
                "INSERT INTO workers (id, name, device, token_hash, created_at, last_seen, rate, samples_per_s, wall_s,"
                " idle_s, bytes_sent, bytes_received, units_done, credit, accepted, stale, rejected) VALUES"
                " (1, 'alice', 'cpu', 'h', 1.0, 2.0, '{}', 10.0, 5.0, 1.0, 100, 200, 3, 192, 3, 0, 0)"))  # fmt: skip
            for seq in (1, 2, 3):
                conn.execute(text(f"INSERT INTO units VALUES ({seq}, 0, 0, 42, {64 * seq}, 64, 'done', 1)"))
                conn.execute(text(f"INSERT INTO leases VALUES ('l{seq}', {seq}, 1, {seq - 1}, 64, 1.0, 31.0, 'done')"))
                conn.execute(text(
                    "INSERT INTO updates (seq, lease_id, worker_id, idempotency_key, payload_sha256, payload_bytes,"
                    " base_version, samples, compute_s, loss, norm, created_at, status, applied_version, staleness)"
                    f" VALUES ({seq}, 'l{seq}', 1, 'key{seq}0000', 'sha{seq}', 10, {seq - 1}, 64, 0.1, 2.3, 1.5, 1.5,"
                    f" 'applied', {seq}, 0)"))  # fmt: skip
        migrate(db)
        with db.engine.begin() as conn:
            for v, state in ((0, "'s0'"), (1, "'s1'"), (2, "NULL"), (3, "NULL")):
                conn.execute(text(f"INSERT INTO checkpoints VALUES ({v}, '{{}}', {state}, {v}, {64 * v}, 1.0)"))
        downgrade(db, "0002")
        with db.engine.connect() as conn:
            assert conn.execute(text("SELECT version FROM checkpoints ORDER BY version")).scalars().all() == [0, 1]
            assert tuple(conn.execute(text("SELECT version, samples_applied FROM runs")).one()) == (1, 64)
            rows = conn.execute(text("SELECT seq, status, applied_version FROM updates ORDER BY seq")).all()
            assert [tuple(r) for r in rows] == [(1, "applied", 1), (2, "recorded", None), (3, "recorded", None)]
        migrate(db)
        assert current_revision(db) == HEAD
    finally:
        db.dispose()


def test_units_that_span_shards_shrink_to_their_first_part_on_downgrade(db_url: str):
    """0004 -> 0003: the older code knows one shard a unit, so a unit with parts in later shards keeps only its
    first part; a unit of one shard is untouched."""
    db = Database(normalise_db_url(db_url))
    try:
        migrate(db)
        with db.engine.begin() as conn:
            conn.execute(text(
                "INSERT INTO units (id, epoch, shard, seed, \"offset\", samples, more, status, attempts) VALUES"
                " (1, 0, 2, 42, 240, 30, '[{\"shard\": 0, \"seed\": 6, \"offset\": 0, \"samples\": 20}]', 'open', 0),"
                " (2, 0, 0, 6, 20, 64, '[]', 'open', 0)"))  # fmt: skip
        downgrade(db, "0003")
        with db.engine.connect() as conn:
            rows = conn.execute(text("SELECT id, samples FROM units ORDER BY id")).all()
            assert [tuple(r) for r in rows] == [(1, 10), (2, 64)]
        assert "more" not in {c["name"] for c in inspect(db.engine).get_columns("units")}
        migrate(db)
        assert current_revision(db) == HEAD
    finally:
        db.dispose()


def test_pinned_units_get_their_round_on_upgrade(db_url: str):
    """0004 -> 0005: a unit pinned to a version belongs to that version's round; an open one to none yet."""
    db = Database(normalise_db_url(db_url))
    try:
        migrate(db)
        downgrade(db, "0004")
        with db.engine.begin() as conn:
            conn.execute(text(
                "INSERT INTO units (id, epoch, shard, seed, \"offset\", samples, status, attempts, base_version) VALUES"
                " (1, 0, 0, 6, 0, 64, 'leased', 1, 3), (2, 0, 0, 6, 64, 64, 'open', 0, NULL)"))  # fmt: skip
        migrate(db)
        with db.engine.connect() as conn:
            rows = conn.execute(text("SELECT id, for_round FROM units ORDER BY id")).all()
        assert [tuple(r) for r in rows] == [(1, 3), (2, None)]
        downgrade(db, "0004")
        assert "for_round" not in {c["name"] for c in inspect(db.engine).get_columns("units")}
    finally:
        db.dispose()
