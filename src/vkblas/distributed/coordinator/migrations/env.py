"""Alembic's environment: runs migrations on the connection ``db.migrate`` hands over (``config.attributes``), one
transaction per migration, in batch mode on SQLite (it has no ALTER for most changes), as Prefect does."""

from __future__ import annotations

from alembic import context

from vkblas.distributed.coordinator.models import Base

connection = context.config.attributes["connection"]
context.configure(
    connection=connection,
    target_metadata=Base.metadata,
    render_as_batch=connection.dialect.name == "sqlite",
    transaction_per_migration=True,
)
with context.begin_transaction():
    context.run_migrations()
