"""Our database, shared by the quota ledger and the audit trail of disk operations.

- :mod:`.engine`: :func:`make_engine`, :func:`write_transaction`,
  :class:`UTCDateTime`, :class:`DatabaseUnavailable` and :func:`guarded`;
- :mod:`.migrate`: :func:`upgrade` and :func:`head_revision`, the schema
  history in :mod:`.migrations` (alembic);
- :mod:`.executor`: :class:`DatabaseExecutor`, the one worker thread per
  process that async code runs database calls on.

This package knows tables only by the names in :mod:`.migrations`; the
ledger (:mod:`workspacespawner.quota.ledger`) and the audit log
(:mod:`workspacespawner.lifecycle.audit`) build on it, never the other way
round (nothing here imports quota, workspace, kubespawner or jupyterhub).
"""

from workspacespawner.db.engine import (
    DatabaseUnavailable,
    UTCDateTime,
    guarded,
    make_engine,
    reporting_unavailable,
    write_transaction,
)
from workspacespawner.db.executor import DatabaseExecutor, process_executor
from workspacespawner.db.migrate import head_revision, upgrade

__all__ = [
    "DatabaseExecutor",
    "DatabaseUnavailable",
    "UTCDateTime",
    "guarded",
    "head_revision",
    "make_engine",
    "process_executor",
    "reporting_unavailable",
    "upgrade",
    "write_transaction",
]
