"""A ledger database brought to an older schema revision, for tests of the migrations that follow it."""

from __future__ import annotations

from contextlib import contextmanager

from workspacespawner.db.migrate import alembic_config


@contextmanager
def at_revision(ledger, revision: str):
    """Upgrade ``ledger``'s empty database to ``revision`` only, in one write transaction; yields its connection to
    fill the older tables in the same transaction."""
    from alembic import command

    config = alembic_config()
    with ledger._transaction() as conn:
        config.attributes["connection"] = conn
        command.upgrade(config, revision)
        yield conn
