"""The first schema: runs, workers, units, leases, updates, checkpoints, evaluations, leaders.

Revision ID: 0001
Revises:
Create Date: 2025-01-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "runs",
        sa.Column("id", sa.String(32), primary_key=True),
        sa.Column("uid", sa.String(32), nullable=False),
        sa.Column("spec", sa.Text(), nullable=False),
        sa.Column("data_manifest", sa.Text(), nullable=False),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("created_at", sa.Float(), nullable=False),
        sa.Column("samples_total", sa.BigInteger(), nullable=False),
        sa.Column("samples_leased", sa.BigInteger(), nullable=False),
        sa.Column("cursor_epoch", sa.Integer(), nullable=False),
        sa.Column("cursor_pos", sa.Integer(), nullable=False),
        sa.Column("cursor_offset", sa.Integer(), nullable=False),
        sa.Column("version", sa.Integer(), nullable=False),
        sa.Column("round_opened_at", sa.Float(), nullable=False),
        sa.Column("samples_applied", sa.BigInteger(), nullable=False),
        sa.Column("apply_cpu_s", sa.Float(), nullable=False),
        sa.Column("updates_applied", sa.BigInteger(), nullable=False),
    )
    op.create_table(
        "workers",
        sa.Column("id", sa.Integer(), primary_key=True, autoincrement=True),
        sa.Column("name", sa.String(64), nullable=False),
        sa.Column("device", sa.String(64), nullable=False),
        sa.Column("token_hash", sa.String(64), nullable=False),
        sa.Column("created_at", sa.Float(), nullable=False),
        sa.Column("last_seen", sa.Float(), nullable=False),
        sa.Column("rate", sa.Text(), nullable=False),
        sa.Column("samples_per_s", sa.Float(), nullable=False),
        sa.Column("wall_s", sa.Float(), nullable=False),
        sa.Column("idle_s", sa.Float(), nullable=False),
        sa.Column("bytes_sent", sa.BigInteger(), nullable=False),
        sa.Column("bytes_received", sa.BigInteger(), nullable=False),
        sa.Column("units_done", sa.Integer(), nullable=False),
        sa.Column("credit", sa.BigInteger(), nullable=False),
        sa.Column("accepted", sa.Integer(), nullable=False),
        sa.Column("stale", sa.Integer(), nullable=False),
        sa.Column("rejected", sa.Integer(), nullable=False),
    )
    op.create_table(
        "units",
        sa.Column("id", sa.Integer(), primary_key=True, autoincrement=True),
        sa.Column("epoch", sa.Integer(), nullable=False),
        sa.Column("shard", sa.Integer(), nullable=False),
        sa.Column("seed", sa.BigInteger(), nullable=False),
        sa.Column("offset", sa.Integer(), nullable=False),
        sa.Column("samples", sa.Integer(), nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("attempts", sa.Integer(), nullable=False),
    )
    op.create_index("ix_units_status", "units", ["status"])
    op.create_table(
        "leases",
        sa.Column("id", sa.String(32), primary_key=True),
        sa.Column("unit_id", sa.Integer(), sa.ForeignKey("units.id"), nullable=False),
        sa.Column("worker_id", sa.Integer(), sa.ForeignKey("workers.id"), nullable=False),
        sa.Column("base_version", sa.Integer(), nullable=False),
        sa.Column("samples", sa.Integer(), nullable=False),
        sa.Column("issued_at", sa.Float(), nullable=False),
        sa.Column("expires_at", sa.Float(), nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
    )
    op.create_index("ix_leases_status_expires", "leases", ["status", "expires_at"])
    op.create_index("ix_leases_worker_version", "leases", ["worker_id", "base_version"])
    op.create_table(
        "updates",
        sa.Column("seq", sa.Integer(), primary_key=True, autoincrement=True),
        sa.Column("lease_id", sa.String(32), sa.ForeignKey("leases.id"), nullable=False),
        sa.Column("worker_id", sa.Integer(), sa.ForeignKey("workers.id"), nullable=False),
        sa.Column("idempotency_key", sa.String(64), nullable=False),
        sa.Column("payload_sha256", sa.String(64), nullable=False),
        sa.Column("payload_bytes", sa.BigInteger(), nullable=False),
        sa.Column("base_version", sa.Integer(), nullable=False),
        sa.Column("samples", sa.Integer(), nullable=False),
        sa.Column("compute_s", sa.Float(), nullable=False),
        sa.Column("loss", sa.Float(), nullable=False),
        sa.Column("norm", sa.Float(), nullable=False),
        sa.Column("created_at", sa.Float(), nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("applied_version", sa.Integer(), nullable=True),
        sa.Column("staleness", sa.Integer(), nullable=True),
        sa.UniqueConstraint("worker_id", "idempotency_key", name="uq_updates_worker_key"),
        sa.UniqueConstraint("lease_id", name="uq_updates_lease"),
    )
    op.create_index("ix_updates_status", "updates", ["status"])
    op.create_table(
        "checkpoints",
        sa.Column("version", sa.Integer(), primary_key=True, autoincrement=False),
        sa.Column("manifest", sa.Text(), nullable=False),
        sa.Column("state_sha256", sa.String(64), nullable=False),
        sa.Column("last_seq", sa.Integer(), nullable=False),
        sa.Column("samples_applied", sa.BigInteger(), nullable=False),
        sa.Column("created_at", sa.Float(), nullable=False),
    )
    op.create_table(
        "evaluations",
        sa.Column("id", sa.Integer(), primary_key=True, autoincrement=True),
        sa.Column("version", sa.Integer(), nullable=False),
        sa.Column("samples", sa.BigInteger(), nullable=False),
        sa.Column("accuracy", sa.Float(), nullable=False),
        sa.Column("loss", sa.Float(), nullable=False),
        sa.Column("created_at", sa.Float(), nullable=False),
    )
    op.create_table(
        "leaders",
        sa.Column("name", sa.String(32), primary_key=True),
        sa.Column("holder", sa.String(64), nullable=False),
        sa.Column("expires_at", sa.Float(), nullable=False),
    )


def downgrade() -> None:
    for table in ("leaders", "evaluations", "checkpoints", "updates", "leases", "units", "workers", "runs"):
        op.drop_table(table)
