"""The public coordinator: users, the admin credential, reputation and credit of workers, copies of units for
validation by redundancy, update verdicts, the run's history; a run can be paused or stopped.

Revision ID: 0002
Revises: 0001
Create Date: 2026-12-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "users",
        sa.Column("id", sa.Integer(), primary_key=True, autoincrement=True),
        sa.Column("name", sa.String(64), nullable=False),
        sa.Column("token_hash", sa.String(64), nullable=False),
        sa.Column("created_at", sa.Float(), nullable=False),
        sa.UniqueConstraint("name", name="uq_users_name"),
    )
    op.create_table(
        "credentials",
        sa.Column("name", sa.String(32), primary_key=True),
        sa.Column("token_hash", sa.String(64), nullable=False),
        sa.Column("created_at", sa.Float(), nullable=False),
    )
    op.create_table(
        "history",
        sa.Column("id", sa.Integer(), primary_key=True, autoincrement=True),
        sa.Column("created_at", sa.Float(), nullable=False),
        sa.Column("version", sa.Integer(), nullable=False),
        sa.Column("samples_applied", sa.BigInteger(), nullable=False),
        sa.Column("samples_validated", sa.BigInteger(), nullable=False),
        sa.Column("workers_online", sa.Integer(), nullable=False),
    )
    with op.batch_alter_table("runs") as t:
        t.add_column(sa.Column("stop_reason", sa.Text(), nullable=False, server_default=""))
    with op.batch_alter_table("workers") as t:
        t.add_column(sa.Column("user_id", sa.Integer(), nullable=True))
        t.add_column(sa.Column("address", sa.String(64), nullable=False, server_default=""))
        t.add_column(sa.Column("device_class", sa.String(128), nullable=False, server_default=""))
        for name in ("consecutive_valid", "valid", "invalid"):
            t.add_column(sa.Column(name, sa.Integer(), nullable=False, server_default="0"))
        t.add_column(sa.Column("credit_flops", sa.Float(), nullable=False, server_default="0"))
        t.add_column(sa.Column("pending_samples", sa.BigInteger(), nullable=False, server_default="0"))
        t.add_column(sa.Column("pending_flops", sa.Float(), nullable=False, server_default="0"))
        t.add_column(sa.Column("banned", sa.Text(), nullable=True))
        t.create_foreign_key("fk_workers_user", "users", ["user_id"], ["id"])
    with op.batch_alter_table("units") as t:
        t.add_column(sa.Column("quorum", sa.Integer(), nullable=False, server_default="1"))
        t.add_column(sa.Column("results", sa.Integer(), nullable=False, server_default="0"))
        t.add_column(sa.Column("base_version", sa.Integer(), nullable=True))
        t.add_column(sa.Column("lr", sa.Float(), nullable=True))
        t.add_column(sa.Column("device_class", sa.String(128), nullable=True))
        t.add_column(sa.Column("pinned_at", sa.Float(), nullable=True))
    with op.batch_alter_table("leases") as t:
        t.add_column(sa.Column("role", sa.String(16), nullable=False, server_default="primary"))
    with op.batch_alter_table("updates") as t:
        t.add_column(sa.Column("unit_id", sa.Integer(), nullable=True))
        t.add_column(sa.Column("content_sha256", sa.String(64), nullable=True))
        t.add_column(sa.Column("suspicion", sa.Text(), nullable=False, server_default=""))
        t.add_column(sa.Column("distance", sa.Float(), nullable=True))
        t.create_foreign_key("fk_updates_unit", "units", ["unit_id"], ["id"])
        t.create_index("ix_updates_unit", ["unit_id"])
        t.create_index("ix_updates_content", ["content_sha256"])
    # results recorded before this revision were of units of one copy: theirs
    op.execute("UPDATE updates SET unit_id = (SELECT unit_id FROM leases WHERE leases.id = updates.lease_id)")
    op.execute("UPDATE units SET results = (SELECT count(*) FROM updates WHERE updates.unit_id = units.id)")


def downgrade() -> None:
    with op.batch_alter_table("updates") as t:
        t.drop_index("ix_updates_content")
        t.drop_index("ix_updates_unit")
        t.drop_constraint("fk_updates_unit", type_="foreignkey")
        for name in ("distance", "suspicion", "content_sha256", "unit_id"):
            t.drop_column(name)
    with op.batch_alter_table("leases") as t:
        t.drop_column("role")
    with op.batch_alter_table("units") as t:
        for name in ("pinned_at", "device_class", "lr", "base_version", "results", "quorum"):
            t.drop_column(name)
    with op.batch_alter_table("workers") as t:
        t.drop_constraint("fk_workers_user", type_="foreignkey")
        for name in ("banned", "pending_flops", "pending_samples", "credit_flops", "invalid", "valid",
                     "consecutive_valid", "device_class", "address", "user_id"):  # fmt: skip
            t.drop_column(name)
    with op.batch_alter_table("runs") as t:
        t.drop_column("stop_reason")
    for table in ("history", "credentials", "users"):
        op.drop_table(table)
