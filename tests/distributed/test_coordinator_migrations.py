"""The Alembic migrations, on SQLite and PostgreSQL: one head; upgrade on an empty database gives exactly the
schema the ORM models describe; down to nothing and up again, with a row in (raw SQL, so ORM edits cannot mask a
broken migration)."""

from __future__ import annotations

from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import inspect, text

from vkblas.distributed.coordinator.config import normalise_db_url
from vkblas.distributed.coordinator.db import HEAD, Database, alembic_config, current_revision, migrate
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
