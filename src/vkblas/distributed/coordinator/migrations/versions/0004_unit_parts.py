"""A work unit may span data shards: ``units.more`` holds its parts in the shards after its first (JSON).

Revision ID: 0004
Revises: 0003
Create Date: 2026-12-01
"""

from __future__ import annotations

import json

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("units") as t:
        t.add_column(sa.Column("more", sa.Text(), server_default="[]", nullable=False))


def downgrade() -> None:
    # the older code knows one shard a unit: a unit that spans shards shrinks to its first part (the samples of
    # its other parts are not trained on again if it is re-leased; the run's counters keep what was handed out)
    bind = op.get_bind()
    rows = bind.execute(sa.text("SELECT id, samples, more FROM units WHERE more <> '[]'")).all()
    for uid, samples, more in rows:
        rest = sum(int(p["samples"]) for p in json.loads(more))
        bind.execute(sa.text("UPDATE units SET samples = :n WHERE id = :id"), {"n": samples - rest, "id": uid})
    with op.batch_alter_table("units") as t:
        t.drop_column("more")
