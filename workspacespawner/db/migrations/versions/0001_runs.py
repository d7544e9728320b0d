"""The first ledger: one row per workspace run (user, server, profile, kind, GPUs, started, stopped).

Revision ID: 0001
"""

import sqlalchemy as sa
from alembic import op

from workspacespawner.db.migrations import RUNS_TABLE

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        RUNS_TABLE,
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("user_name", sa.String(255), nullable=False),
        sa.Column("server_name", sa.String(255), nullable=False, server_default=""),
        sa.Column("profile", sa.String(255), nullable=False, server_default=""),
        sa.Column("workspace_kind", sa.String(32), nullable=False, server_default="container"),
        sa.Column("gpus", sa.Integer, nullable=False, server_default="0"),
        sa.Column("started", sa.DateTime, nullable=False),
        sa.Column("stopped", sa.DateTime, nullable=True),
    )
    op.create_index("ix_wsruns_user_started", RUNS_TABLE, ["user_name", "started"])


def downgrade() -> None:
    op.drop_index("ix_wsruns_user_started", table_name=RUNS_TABLE)
    op.drop_table(RUNS_TABLE)
