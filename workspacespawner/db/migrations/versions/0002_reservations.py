"""Atomic reservations and reconciliation: run state, last seen, stop reason, a per-user lock row.

- ``state``: ``reserved`` (a start holds a place), ``open`` (Running),
  ``closed``. Existing rows become ``open`` if not stopped, else ``closed``.
- ``last_seen``: the last time the cluster showed the workspace alive; a
  run whose workspace vanished while the hub was down is closed there.
- ``stop_reason``: why the run ended when it was not the user's stop
  (``card-hours``: stopped by the quota enforcer).
- ``workspacespawner_quota_users``: one row per user, locked with
  ``SELECT ... FOR UPDATE`` while a start is checked and reserved.
- Indexes for the checks that must stay flat as rows grow, however long a
  user's history: ``(user_name, state, stopped)`` finds a user's active
  runs and the closed ones stopped in this period by two range scans;
  ``(state, stopped)`` does the same for all users (the enforcer, the
  ``usage`` command).

Revision ID: 0002
"""

import sqlalchemy as sa
from alembic import op

from workspacespawner.db.migrations import RUNS_TABLE, USERS_TABLE

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column(RUNS_TABLE, sa.Column("state", sa.String(16), nullable=False, server_default="closed"))
    op.add_column(RUNS_TABLE, sa.Column("last_seen", sa.DateTime, nullable=True))
    op.add_column(RUNS_TABLE, sa.Column("stop_reason", sa.String(255), nullable=True))
    runs = sa.table(RUNS_TABLE, sa.column("state", sa.String), sa.column("stopped", sa.DateTime))
    op.execute(runs.update().where(runs.c.stopped.is_(None)).values(state="open"))
    op.create_index("ix_wsruns_user_state_stopped", RUNS_TABLE, ["user_name", "state", "stopped"])
    op.create_index("ix_wsruns_state_stopped", RUNS_TABLE, ["state", "stopped"])
    op.create_table(USERS_TABLE, sa.Column("user_name", sa.String(255), primary_key=True))


def downgrade() -> None:
    op.drop_table(USERS_TABLE)
    for name in ("ix_wsruns_state_stopped", "ix_wsruns_user_state_stopped"):
        op.drop_index(name, table_name=RUNS_TABLE)
    for column in ("stop_reason", "last_seen", "state"):
        op.drop_column(RUNS_TABLE, column)
