"""Audit records of disk operations, in the quota ledger's database.

Every expand, snapshot, restore, rebuild, retain, reclaim, purge, delete,
fence and publish (a root disk made a golden image), and every pool disk a
start claims (``claim``; a pool disk's clone and retirement are ``create``
and ``delete`` with user ``""``: nobody's yet), leaves one row: ``time``
(aware UTC), ``actor`` (an admin's name, or ``system`` for the hub and the
purge task), ``user``, ``server`` (the
JupyterHub server name, ``""`` for the default one), ``namespace``,
``disk`` (the PVC or DataVolume name), ``action``, ``before`` and ``after``
(small JSON objects: phase, size, snapshot, node...) and ``result`` (``ok``,
or what went wrong: ``refused: ...``, ``error: ...``).

The table (``workspacespawner_audit``) lives next to the ledger's tables,
created by the same alembic migrations (revision 0003 of
:mod:`workspacespawner.db.migrations`) on the same engine
(the quota ledger's), so one database URL,
``c.WorkspaceQuota.ledger_url``, holds usage and the audit trail.

Calls are synchronous SQLAlchemy; async code uses :meth:`AuditLog.arecord`,
which runs the write on the same database thread as the ledger's calls
(:attr:`AuditLog.executor`, the ledger's
:class:`~workspacespawner.db.executor.DatabaseExecutor` unless given
another), never on the event loop. Database trouble comes out as
:class:`workspacespawner.db.DatabaseUnavailable` (which
:class:`~workspacespawner.quota.ledger.LedgerUnavailable` names too).
"""

from __future__ import annotations

import json
import threading
from dataclasses import asdict, dataclass
from datetime import datetime

import sqlalchemy as sa

from workspacespawner.db import migrate
from workspacespawner.db.engine import UTCDateTime, guarded, make_engine, write_transaction
from workspacespawner.db.executor import DatabaseExecutor, process_executor
from workspacespawner.db.migrations import AUDIT_TABLE
from workspacespawner.lifecycle import phases

#: The actions an audit record may name.
ACTIONS = ("create", "expand", "snapshot", "restore", "rebuild", "retain", "reclaim", "purge", "delete", "fence", "stop",
           "claim", "publish")

_metadata = sa.MetaData()

#: The audit table at the newest revision (the migrations create it; this describes it for queries).
audit_table = sa.Table(
    AUDIT_TABLE,
    _metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("time", UTCDateTime, nullable=False),
    sa.Column("actor", sa.String(255), nullable=False),
    sa.Column("user_name", sa.String(255), nullable=False),
    sa.Column("server_name", sa.String(255), nullable=False),
    sa.Column("namespace", sa.String(253), nullable=False),
    sa.Column("disk", sa.String(253), nullable=False),
    sa.Column("action", sa.String(32), nullable=False),
    sa.Column("before", sa.Text),
    sa.Column("after", sa.Text),
    sa.Column("result", sa.Text, nullable=False),
)

#: One record's insert (the values are bound at each call, the statement built once).
_INSERT_RECORD = audit_table.insert()


@dataclass(frozen=True)
class AuditRecord:
    """One audit row (``before``/``after``: dicts or None; ``time``: aware UTC)."""

    id: int
    time: datetime
    actor: str
    user: str
    server: str
    namespace: str
    disk: str
    action: str
    before: dict | None
    after: dict | None
    result: str

    def to_json(self) -> dict:
        """A JSON-safe dict (``time`` in RFC 3339)."""
        return {**asdict(self), "time": phases.rfc3339(self.time)}


def _load(text: str | None):
    if text is None:
        return None
    try:
        return json.loads(text)
    except ValueError:
        return {"text": text}


#: :func:`~workspacespawner.db.engine.guarded`, naming the database as the audit log in its message.
_guarded = guarded(what="the audit log")


@dataclass(frozen=True)
class Database:
    """A database of the audit log's own: its SQLAlchemy ``engine`` and the ``executor`` its writes run on."""

    engine: sa.Engine
    executor: DatabaseExecutor

    def dispose(self) -> None:
        self.engine.dispose()


class AuditLog:
    """The audit trail in the database of ``database`` (anything with an ``engine`` and an ``executor``: the quota ledger); blocking calls.

    The schema is brought to the newest revision on first use (the
    database's migrations, :func:`workspacespawner.db.migrate.upgrade`).
    Safe to share between threads. ``executor``: where :meth:`arecord`
    writes (default: the ledger's, so audit and ledger writes take turns on
    one thread).
    """

    def __init__(self, database, *, executor: DatabaseExecutor | None = None):
        #: The database object the log shares (the quota ledger in a hub), kept for who built it.
        self.ledger = database
        self.engine = database.engine
        self.executor = executor or database.executor
        self._ready = False
        self._lock = threading.Lock()

    @classmethod
    def from_url(cls, url: str, *, timeout: float = 10.0, executor: DatabaseExecutor | None = None) -> AuditLog:
        """An audit log on its own engine for the SQLAlchemy ``url`` (the ledger's URL)."""
        return cls(Database(make_engine(url, timeout=timeout), executor or process_executor()))

    def ensure_ready(self) -> None:
        """Create or upgrade the schema once (idempotent); raises DatabaseUnavailable if the database cannot be used."""
        if self._ready:
            return
        with self._lock:
            if not self._ready:
                migrate.upgrade(self.engine, what="the audit log")
                self._ready = True

    @_guarded
    def record(
        self,
        *,
        actor: str,
        user: str,
        disk: str,
        action: str,
        before: dict | None,
        after: dict | None,
        result: str,
        server: str = "",
        namespace: str = "",
        time: datetime | None = None,
    ) -> int:
        """Add one record (see the module docstring); returns its id. ``time`` defaults to :func:`phases.utcnow`."""
        if action not in ACTIONS:
            raise ValueError(f"unknown audit action {action!r} (known: {', '.join(ACTIONS)})")
        self.ensure_ready()
        values = dict(
            time=time or phases.utcnow(),
            actor=actor,
            user_name=user,
            server_name=server,
            namespace=namespace,
            disk=disk,
            action=action,
            before=None if before is None else json.dumps(before, sort_keys=True),
            after=None if after is None else json.dumps(after, sort_keys=True),
            result=result,
        )
        with write_transaction(self.engine) as conn:
            return conn.execute(_INSERT_RECORD, values).inserted_primary_key[0]

    async def arecord(self, **fields) -> int:
        """:meth:`record` on the database thread (:attr:`executor`), for the hub's event loop."""
        return await self.executor.run(self.record, **fields)

    @_guarded
    def query(
        self,
        *,
        user: str | None = None,
        since: datetime | None = None,
        action: str | None = None,
        until: datetime | None = None,
        disk: str | None = None,
        result: str | None = None,
        newest_first: bool = False,
        limit: int | None = None,
        offset: int = 0,
    ) -> list[AuditRecord]:
        """Records, oldest first (``newest_first``: newest first), filtered in SQL by each filter given.

        ``user``, ``action``, ``disk``: equal to it; ``since``: at or after
        it; ``until``: before it (exclusive); ``result``: its first word,
        ``ok``, ``refused`` or ``error`` (a result equal to it, or starting
        with it and a colon). ``limit`` (None: all) and ``offset`` page
        through the sorted records. Raises ValueError for a negative
        ``limit`` or ``offset``.
        """
        if (limit is not None and limit < 0) or offset < 0:
            raise ValueError(f"limit and offset must be >= 0, not {limit!r} and {offset!r}")
        self.ensure_ready()
        order = (audit_table.c.time.desc(), audit_table.c.id.desc()) if newest_first else (audit_table.c.time, audit_table.c.id)
        query = sa.select(audit_table).order_by(*order)
        if user is not None:
            query = query.where(audit_table.c.user_name == user)
        if since is not None:
            query = query.where(audit_table.c.time >= since)
        if until is not None:
            query = query.where(audit_table.c.time < until)
        if action is not None:
            query = query.where(audit_table.c.action == action)
        if disk is not None:
            query = query.where(audit_table.c.disk == disk)
        if result is not None:
            query = query.where(
                sa.or_(audit_table.c.result == result, audit_table.c.result.startswith(f"{result}:", autoescape=True))
            )
        if limit is not None:
            query = query.limit(limit)
        if offset:
            query = query.offset(offset)
        with self.engine.connect() as conn:
            return [
                AuditRecord(
                    id=row.id,
                    time=row.time,
                    actor=row.actor,
                    user=row.user_name,
                    server=row.server_name,
                    namespace=row.namespace,
                    disk=row.disk,
                    action=row.action,
                    before=_load(row.before),
                    after=_load(row.after),
                    result=row.result,
                )
                for row in conn.execute(query)
            ]

    def dispose(self) -> None:
        """Close the database connections."""
        self.engine.dispose()
