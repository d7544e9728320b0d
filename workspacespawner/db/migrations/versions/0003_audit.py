"""The audit trail of disk operations, in the ledger's database (see :mod:`workspacespawner.lifecycle.audit`).

One row per operation on a workspace disk or its compute: ``time`` (UTC),
``actor`` (an admin's name or ``system``), ``user_name``, ``server_name``,
``namespace``, ``disk`` (the PVC or DataVolume), ``action`` (``create``,
``expand``, ``snapshot``, ``restore``, ``retain``, ``reclaim``, ``purge``,
``delete``, ``fence``), ``before`` and ``after`` (JSON text) and ``result``
(``ok``, or what went wrong). Indexed for ``workspacespawner audit --user U
--since DATE``.

Revision ID: 0003
"""

import sqlalchemy as sa
from alembic import op

from workspacespawner.db.migrations import AUDIT_TABLE

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        AUDIT_TABLE,
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("time", sa.DateTime, nullable=False),
        sa.Column("actor", sa.String(255), nullable=False),
        sa.Column("user_name", sa.String(255), nullable=False),
        sa.Column("server_name", sa.String(255), nullable=False, server_default=""),
        sa.Column("namespace", sa.String(253), nullable=False, server_default=""),
        sa.Column("disk", sa.String(253), nullable=False, server_default=""),
        sa.Column("action", sa.String(32), nullable=False),
        sa.Column("before", sa.Text, nullable=True),
        sa.Column("after", sa.Text, nullable=True),
        sa.Column("result", sa.Text, nullable=False),
    )
    op.create_index("ix_wsaudit_time", AUDIT_TABLE, ["time"])
    op.create_index("ix_wsaudit_user_time", AUDIT_TABLE, ["user_name", "time"])


def downgrade() -> None:
    op.drop_index("ix_wsaudit_user_time", table_name=AUDIT_TABLE)
    op.drop_index("ix_wsaudit_time", table_name=AUDIT_TABLE)
    op.drop_table(AUDIT_TABLE)
