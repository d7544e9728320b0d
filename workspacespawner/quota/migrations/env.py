"""alembic's entry point for the ledger's migrations: run on the connection the ledger hands over.

The ledger passes its connection, already inside a transaction, as
``config.attributes["connection"]``; nothing here opens another one, so
the upgrade and the ledger's lock (SQLite ``BEGIN IMMEDIATE``) are one.
"""

from alembic import context

from workspacespawner.quota.migrations import VERSION_TABLE

connection = context.config.attributes["connection"]
context.configure(connection=connection, version_table=VERSION_TABLE, transactional_ddl=True)
with context.begin_transaction():
    context.run_migrations()
