"""Alembic migrations of the coordinator's database (applied by ``db.migrate`` at start)."""
