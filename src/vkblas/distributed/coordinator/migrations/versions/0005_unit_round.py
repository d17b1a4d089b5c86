"""A unit names the round its result belongs to (``units.for_round``): a DiLoCo unit leased ahead (``--overlap``)
is computed from version v while round v is open and belongs to round v + 1.

Revision ID: 0005
Revises: 0004
Create Date: 2026-12-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("units") as t:
        t.add_column(sa.Column("for_round", sa.Integer(), nullable=True))
    op.execute("UPDATE units SET for_round = base_version WHERE base_version IS NOT NULL")


def downgrade() -> None:
    # the older code takes a unit's round to be its base version: a result leased ahead joins the round open when
    # it arrives, as a fresh one if that round is still its base round (the staleness is judged the same either way)
    with op.batch_alter_table("units") as t:
        t.drop_column("for_round")
