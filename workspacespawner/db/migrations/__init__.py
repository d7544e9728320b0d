"""The schema history of our database (ledger and audit trail), as alembic scripts run through alembic's API (no alembic.ini).

:func:`workspacespawner.db.migrate.upgrade` runs them (meant for hub
start-up; the ledger and the audit log also run it on first use): a new database
gets every revision, an older one the revisions it lacks. Our version table
is :data:`VERSION_TABLE`, not alembic's default ``alembic_version``, so our
tables can live in the hub's own database (which JupyterHub versions with
``alembic_version``) without either touching the other's history.

A new revision: copy the newest file in ``versions/``, give it the next
number as ``revision`` and the old one as ``down_revision``, and write its
``upgrade()`` with ``alembic.op``; add a test that upgrades a database of the
previous shape. Table names are constants here, so that the scripts, the
ledger (:mod:`workspacespawner.quota.ledger`) and the audit log
(:mod:`workspacespawner.lifecycle.audit`) agree on them.
"""

#: alembic's version table for our revisions (the name every existing database already has).
VERSION_TABLE = "workspacespawner_alembic_version"
#: The ledger's runs (revisions 0001, 0002).
RUNS_TABLE = "workspacespawner_runs"
#: The ledger's per-user lock rows (revision 0002).
USERS_TABLE = "workspacespawner_quota_users"
#: PostgreSQL only: the pre-spawn check's lock, reservation and read as one call (revision 0005).
RESERVE_FUNCTION = "workspacespawner_reserve"
#: The audit trail of disk operations (:mod:`workspacespawner.lifecycle.audit`), revision 0003.
AUDIT_TABLE = "workspacespawner_audit"
