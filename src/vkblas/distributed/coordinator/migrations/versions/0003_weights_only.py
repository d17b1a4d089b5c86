"""A version may be published with its weights alone: ``checkpoints.state_sha256`` becomes nullable (``async``
writes the optimizer state at most every ``--checkpoint-seconds``; a restart replays from the newest full one).

Revision ID: 0003
Revises: 0002
Create Date: 2026-12-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("checkpoints") as t:
        t.alter_column("state_sha256", existing_type=sa.String(64), nullable=True)


def downgrade() -> None:
    # the older code loads the newest version and needs its state file: the run goes back to the newest full
    # checkpoint, and the updates applied after it are recorded again, to be applied from there (by the version
    # they made, not by seq: an update held for validation is applied after later seqs); the older applier takes
    # every recorded update, whatever its seq
    full = "(SELECT MAX(version) FROM checkpoints WHERE state_sha256 IS NOT NULL)"
    op.execute(
        "UPDATE updates SET status = 'recorded', applied_version = NULL, staleness = NULL"
        f" WHERE (status = 'applied' AND applied_version > {full})"
        f" OR (status = 'stale' AND seq > (SELECT last_seq FROM checkpoints WHERE version = {full}))"
    )
    op.execute(
        f"UPDATE runs SET version = {full},"
        f" samples_applied = (SELECT samples_applied FROM checkpoints WHERE version = {full})"
        " WHERE EXISTS (SELECT 1 FROM checkpoints WHERE state_sha256 IS NULL)"
    )
    op.execute("DELETE FROM checkpoints WHERE state_sha256 IS NULL")
    with op.batch_alter_table("checkpoints") as t:
        t.alter_column("state_sha256", existing_type=sa.String(64), nullable=False)
