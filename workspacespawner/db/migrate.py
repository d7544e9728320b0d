"""Bring a database to the newest schema: the migrations in :mod:`workspacespawner.db.migrations`.

:func:`upgrade` is for the hub to call once at start-up. The ledger and
the audit log also call it on their first use (idempotent: a database at
the newest revision costs one query), so the admin commands, tests and a
hub that did not call it work on a fresh database too.

A database holding the runs table but no version table (made by hand or
by a tool before we versioned it) is adopted first: stamped ``0002`` if
its runs have a ``state`` column, else ``0001``, then upgraded.

alembic keeps its running context in module globals, so upgrades in this
process take turns (:data:`_ALEMBIC_LOCK`, taken before the database's
write lock, never after).
"""

from __future__ import annotations

import functools
import threading
from pathlib import Path

import sqlalchemy as sa

from workspacespawner.db.engine import reporting_unavailable, write_transaction
from workspacespawner.db.migrations import RUNS_TABLE, VERSION_TABLE

#: The alembic script folder (``env.py`` and ``versions/``).
MIGRATIONS = Path(__file__).resolve().parent / "migrations"

_ALEMBIC_LOCK = threading.Lock()


@functools.cache
def head_revision() -> str:
    """The newest schema revision the package's migrations know."""
    from alembic.script import ScriptDirectory

    return ScriptDirectory(str(MIGRATIONS)).get_current_head()


def current_revision(conn: sa.Connection) -> str | None:
    """The revision the database on ``conn`` is at; None if it has no version table (new, or never versioned)."""
    if not sa.inspect(conn).has_table(VERSION_TABLE):
        return None
    return conn.execute(sa.text(f"SELECT version_num FROM {VERSION_TABLE}")).scalar()


def alembic_config():
    """An alembic ``Config`` for our scripts (no alembic.ini); put the connection in ``attributes["connection"]``."""
    from alembic.config import Config

    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS))
    return config


def upgrade(engine: sa.Engine, *, what: str = "the database") -> str:
    """Create or upgrade the schema on ``engine`` to the newest revision (idempotent); returns that revision.

    Raises :class:`~workspacespawner.db.engine.DatabaseUnavailable` (naming
    ``what``) if the database cannot be reached or used.
    """
    head = head_revision()
    with reporting_unavailable(engine.url, what):
        with engine.connect() as conn:
            if current_revision(conn) == head:
                return head
        from alembic import command

        config = alembic_config()
        with _ALEMBIC_LOCK, write_transaction(engine) as conn:
            config.attributes["connection"] = conn
            inspector = sa.inspect(conn)
            tables = set(inspector.get_table_names())
            if RUNS_TABLE in tables and VERSION_TABLE not in tables:
                columns = {c["name"] for c in inspector.get_columns(RUNS_TABLE)}
                command.stamp(config, "0002" if "state" in columns else "0001")
            command.upgrade(config, "head")
            return current_revision(conn)
