"""Weighted card-hours: each run records the GPU resource and product it held and the weight it is charged at.

- ``gpu_resource``: the GPU resource one of its units is (``nvidia.com/gpu``,
  a MIG slice such as ``nvidia.com/mig-1g.10gb``, ``nvidia.com/gpu.shared``,
  a VM's host or mediated device); ``gpus`` stays the count of units.
- ``gpu_product``: the node's ``nvidia.com/gpu.product`` label where the
  workspace was placed, or the product its profile selects; ``""`` until
  known (a run not yet placed, a CPU run, a node without the label).
- ``weight``: card-hours one unit costs per hour, fixed when the run is
  placed on a node (see :meth:`workspacespawner.quota.ledger.Ledger.price_run`).

Existing rows read as whole GPUs of unknown product at weight 1.0: exactly
what they were charged before, so no closed month changes.

Revision ID: 0004
"""

import sqlalchemy as sa
from alembic import op

from workspacespawner.db.migrations import RUNS_TABLE

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table(RUNS_TABLE) as batch:
        batch.add_column(sa.Column("gpu_resource", sa.String(253), nullable=False, server_default="nvidia.com/gpu"))
        batch.add_column(sa.Column("gpu_product", sa.String(255), nullable=False, server_default=""))
        batch.add_column(sa.Column("weight", sa.Float, nullable=False, server_default="1.0"))


def downgrade() -> None:
    with op.batch_alter_table(RUNS_TABLE) as batch:
        for column in ("weight", "gpu_product", "gpu_resource"):
            batch.drop_column(column)
