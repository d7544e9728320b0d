"""PostgreSQL: the pre-spawn check's lock, reservation and read in one function, so a check is one round trip.

``workspacespawner_reserve(user, server_name, profile, workspace_kind,
gpus, gpu_resource, gpu_product, weight, started, period_start,
period_end)`` returns the user's runs as rows of the runs table: first the
new reservation (state ``reserved``, ``started`` as given), then the user's
other reserved and open runs and the closed ones overlapping the period,
what :meth:`workspacespawner.quota.ledger.Ledger.check_and_reserve` decides
on. In order:

1. the user's lock: the upsert of their row in the lock table, held until
   the caller's transaction ends (as ``Ledger._lock_users`` takes it);
2. the reservation, provisional: the caller deletes it in the same
   transaction when the start is refused;
3. the read. A ``VOLATILE`` function takes a new snapshot for each query
   it runs (PostgreSQL manual, "Function Volatility Categories"), so the
   read, taken after the lock, sees every run committed by a check that
   held the lock before: two checks of the same user never both take the
   last place. The lock and the read in one plain statement would share a
   snapshot taken before the lock was granted.

Three statements sent one by one cost a round trip and a pass through
SQLAlchemy each; the check on PostgreSQL went from 1.4 ms to under 1 ms
(``benchmarks/quota_check.py --postgres auto``). Other databases keep the
statements. A later revision that changes the runs table's columns or
the read must replace this function too (``tests/unit/test_quota_ledger.py``
compares its read with the ledger's).

Revision ID: 0005
"""

from alembic import op

from workspacespawner.db.migrations import RESERVE_FUNCTION, RUNS_TABLE, USERS_TABLE

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None

# Parameters are named apart from the columns, which PL/pgSQL would otherwise confuse with them.
CREATE = f"""
CREATE FUNCTION {RESERVE_FUNCTION}(
    reserving_user varchar, reserved_server varchar, reserved_profile varchar, reserved_kind varchar,
    reserved_gpus integer, reserved_gpu_resource varchar, reserved_gpu_product varchar,
    reserved_weight double precision, reserved_at timestamp, period_start timestamp, period_end timestamp
) RETURNS SETOF {RUNS_TABLE} LANGUAGE plpgsql VOLATILE AS $$
DECLARE
    reservation {RUNS_TABLE};
BEGIN
    INSERT INTO {USERS_TABLE} (user_name) VALUES (reserving_user)
        ON CONFLICT (user_name) DO UPDATE SET user_name = excluded.user_name;
    INSERT INTO {RUNS_TABLE}
        (user_name, server_name, profile, workspace_kind, gpus, gpu_resource, gpu_product, weight, started, state)
        VALUES (reserving_user, reserved_server, reserved_profile, reserved_kind, reserved_gpus,
                reserved_gpu_resource, reserved_gpu_product, reserved_weight, reserved_at, 'reserved')
        RETURNING * INTO reservation;
    RETURN NEXT reservation;
    RETURN QUERY
        SELECT * FROM {RUNS_TABLE}
            WHERE state IN ('reserved', 'open') AND user_name = reserving_user AND id <> reservation.id
        UNION ALL
        SELECT * FROM {RUNS_TABLE}
            WHERE state = 'closed' AND stopped > period_start AND started < period_end AND user_name = reserving_user;
END
$$
"""


def upgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute(CREATE)


def downgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute(f"DROP FUNCTION IF EXISTS {RESERVE_FUNCTION}")
