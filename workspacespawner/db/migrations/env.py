"""alembic's entry point for our migrations: run on the connection :func:`workspacespawner.db.migrate.upgrade` hands over.

That connection, already inside a write transaction, comes as
``config.attributes["connection"]``; nothing here opens another one, so the
upgrade and the database's write lock (SQLite ``BEGIN IMMEDIATE``) are one.
"""

from alembic import context

from workspacespawner.db.migrations import VERSION_TABLE

connection = context.config.attributes["connection"]
context.configure(connection=connection, version_table=VERSION_TABLE, transactional_ddl=True)
with context.begin_transaction():
    context.run_migrations()
