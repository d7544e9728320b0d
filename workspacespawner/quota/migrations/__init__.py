"""The ledger's schema history, as alembic migration scripts run through alembic's API (no alembic.ini).

:func:`workspacespawner.quota.ledger.Ledger.upgrade` runs them: a new
database gets every revision, an older one the revisions it lacks. Our
version table is :data:`VERSION_TABLE`, not alembic's default
``alembic_version``, so the ledger can live in the hub's own database (which
JupyterHub versions with ``alembic_version``) without either touching the
other's history.

A new revision: copy the newest file in ``versions/``, give it the next
number as ``revision`` and the old one as ``down_revision``, and write its
``upgrade()`` with ``alembic.op``; add a test that upgrades a database of the
previous shape.
"""

VERSION_TABLE = "workspacespawner_alembic_version"
RUNS_TABLE = "workspacespawner_runs"
USERS_TABLE = "workspacespawner_quota_users"
#: The audit trail of disk operations (:mod:`workspacespawner.workspace.audit`), revision 0003.
AUDIT_TABLE = "workspacespawner_audit"
