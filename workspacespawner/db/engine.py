"""Engines, write transactions, times and errors of our database (the ledger's and the audit trail's).

- :func:`make_engine`: an engine for any SQLAlchemy URL; on SQLite, write
  transactions (:func:`write_transaction`) open with ``BEGIN IMMEDIATE``,
  so they wait for the database's write lock before reading anything, and
  files use WAL.
- :class:`UTCDateTime`: a column type that stores naive UTC and hands out
  aware UTC datetimes (SQLite has no timezones).
- :class:`DatabaseUnavailable` and :func:`guarded`: every error that means
  "cannot reach or use the database" (a server down, a file that is not a
  database) as one exception, the cause chained.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import TypeVar

import sqlalchemy as sa
from sqlalchemy import event, exc
from sqlalchemy.pool import StaticPool

T = TypeVar("T")

#: The execution option that makes a SQLite transaction begin with ``BEGIN IMMEDIATE`` (see :func:`write_transaction`).
WRITE_OPTION = "workspacespawner_write"

#: SQLAlchemy errors that mean the database cannot be reached or used (not a mistake in a query).
UNAVAILABLE_ERRORS = (exc.OperationalError, exc.InterfaceError, exc.TimeoutError, exc.DisconnectionError)


class DatabaseUnavailable(Exception):
    """The database cannot be reached or used right now (the cause is chained)."""


@contextmanager
def reporting_unavailable(url, what: str = "the database") -> Iterator[None]:
    """Turn :data:`UNAVAILABLE_ERRORS` inside the block into :class:`DatabaseUnavailable` naming ``what`` at ``url``."""
    try:
        yield
    except (exc.DatabaseError, *UNAVAILABLE_ERRORS) as e:
        # The DBAPI's plain DatabaseError (no subclass: not a constraint or a query mistake) is a file that
        # is not a database, or a damaged one: unusable too.
        if not isinstance(e, UNAVAILABLE_ERRORS) and type(e) is not exc.DatabaseError:
            raise
        # an engine URL's repr hides its password
        raise DatabaseUnavailable(f"{what} at {url!r} cannot be used: {e}") from e


def guarded(method=None, *, what: str = "the database"):
    """Decorate a method of an object with an ``engine``: database trouble raises :class:`DatabaseUnavailable`.

    ``@guarded`` or ``@guarded(what="the quota ledger")`` (how the message
    names the database). A :class:`DatabaseUnavailable` from a guarded
    method called inside passes through unchanged.
    """

    def decorate(method):
        @functools.wraps(method)
        def wrapper(self, *args, **kwargs):
            with reporting_unavailable(self.engine.url, what):
                return method(self, *args, **kwargs)

        return wrapper

    return decorate if method is None else decorate(method)


def aware(moment: datetime) -> datetime:
    """``moment`` with a timezone: a naive datetime is taken as UTC."""
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)


class UTCDateTime(sa.types.TypeDecorator):
    """Aware datetimes in (naive ones taken as UTC), stored as naive UTC, aware UTC out."""

    impl = sa.DateTime
    cache_ok = True

    def process_bind_param(self, value, dialect):
        if value is None:
            return None
        return aware(value).astimezone(UTC).replace(tzinfo=None)

    def process_result_value(self, value, dialect):
        return None if value is None else value.replace(tzinfo=UTC)


def _sqlite_file(parsed: sa.engine.URL) -> bool:
    return parsed.get_backend_name() == "sqlite" and parsed.database not in (None, "", ":memory:")


def _libpq(parsed: sa.engine.URL) -> bool:
    """PostgreSQL through a libpq driver, which takes ``connect_timeout`` and ``options`` as connect arguments."""
    return parsed.get_backend_name() == "postgresql" and parsed.get_driver_name() in ("psycopg2", "psycopg")


def make_engine(url: str, *, timeout: float = 10.0, wait_for_disk: bool = True, ping: bool = True) -> sa.Engine:
    """An engine for ``url``; SQLite gets ``BEGIN IMMEDIATE`` for write transactions and WAL for files.

    ``timeout`` (seconds): how long to wait for SQLite's lock, or to connect
    to a server database (psycopg and psycopg2 drivers). An in-memory SQLite
    database is one connection shared by every thread (else each would see
    its own empty database).

    ``wait_for_disk=False``: a commit returns once the database has the
    transaction, before its log reaches the disk (a SQLite file:
    ``PRAGMA synchronous=NORMAL`` in WAL mode; PostgreSQL through psycopg or
    psycopg2: ``synchronous_commit=off`` on the connection, as the
    PostgreSQL manual's "Asynchronous Commit" describes). Such a commit is
    never torn and survives the process that made it; a crash of the
    machine (SQLite) or of the database server may lose it, and it becomes
    durable with the next commit that does wait, on any connection (both
    logs are written in order). For writes whose loss a later durable write
    makes good; elsewhere this engine waits as the default one does.

    ``ping``: test a pooled connection with a round trip each time it is
    taken (SQLAlchemy's ``pool_pre_ping``), so one lost while idle (a
    database restart or failover) is replaced before use. ``False`` saves
    that round trip for a caller that runs its transaction again on a lost
    connection instead (:func:`once_more_if_disconnected`).
    """
    parsed = sa.engine.make_url(url)
    kwargs: dict = {"pool_pre_ping": ping}
    if parsed.get_backend_name() == "sqlite":
        kwargs["connect_args"] = {"timeout": timeout, "check_same_thread": False}
        if not _sqlite_file(parsed):
            kwargs["poolclass"] = StaticPool
    elif _libpq(parsed):
        kwargs["connect_args"] = {"connect_timeout": max(1, int(timeout))}
        if not wait_for_disk:
            kwargs["connect_args"]["options"] = "-c synchronous_commit=off"
    engine = sa.create_engine(parsed, **kwargs)
    if parsed.get_backend_name() == "sqlite":
        in_file = _sqlite_file(parsed)

        @event.listens_for(engine, "connect")
        def _on_connect(dbapi_connection, _record):
            dbapi_connection.isolation_level = None  # we issue BEGIN ourselves, below
            cursor = dbapi_connection.cursor()
            if in_file:
                cursor.execute("PRAGMA journal_mode=WAL")
                if not wait_for_disk:
                    cursor.execute("PRAGMA synchronous=NORMAL")
            cursor.close()

        @event.listens_for(engine, "begin")
        def _on_begin(connection):
            immediate = connection.get_execution_options().get(WRITE_OPTION)
            connection.exec_driver_sql("BEGIN IMMEDIATE" if immediate else "BEGIN")

    return engine


def can_commit_without_disk_wait(url: str) -> bool:
    """Whether ``make_engine(url, wait_for_disk=False)`` commits differently: a SQLite file, or PostgreSQL through psycopg(2)."""
    parsed = sa.engine.make_url(url)
    return _sqlite_file(parsed) or _libpq(parsed)


def once_more_if_disconnected(call: Callable[[], T]) -> T:
    """``call()``; again, once, if it failed because its connection was lost (SQLAlchemy invalidated it).

    For an engine made with ``ping=False``: a pooled connection the
    database closed while it was idle fails on its first statement, the
    transaction with it, and SQLAlchemy drops it and every connection
    older than it from the pool, so the second call runs on a new one.
    ``call`` must be safe to run twice: a lost connection may also be one
    whose commit reached the database before the answer was lost. Any
    other error, and a second loss, propagate.
    """
    try:
        return call()
    except exc.DBAPIError as error:
        if not error.connection_invalidated:
            raise
    return call()


@contextmanager
def write_transaction(engine: sa.Engine) -> Iterator[sa.Connection]:
    """A connection in a write transaction, committed at the end: ``BEGIN IMMEDIATE`` on SQLite, an ordinary one elsewhere."""
    with engine.connect() as conn:
        conn.execution_options(**{WRITE_OPTION: True})
        with conn.begin():
            yield conn
