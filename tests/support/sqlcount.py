"""Count what a block of code sends to a database: statements and transactions, through SQLAlchemy's events.

For tests that pin the cost of a ledger call (counts, never times) and for
the benchmarks that print it::

    with SQLCount(ledger.engine) as sql:
        ledger.check_and_reserve(...)
    assert (sql.statements, sql.transactions) == (3, 1)

``statements``: cursor executions (``before_cursor_execute``: an
``executemany`` counts once, a SQLite ``BEGIN`` we issue counts as one,
COMMIT and ROLLBACK, which the driver sends itself, do not).
``transactions``: SQLAlchemy ``begin`` events. ``texts`` holds each
statement's SQL, for a failure message that shows what ran.
"""

from __future__ import annotations

import threading

from sqlalchemy import event


class SQLCount:
    """A context manager counting statements and transactions on ``engine`` (from every thread) while it is open."""

    def __init__(self, engine):
        self.engine = engine
        self.statements = 0
        self.transactions = 0
        self.texts: list[str] = []
        self._lock = threading.Lock()

    def _statement(self, _conn, _cursor, statement, _parameters, _context, _executemany):
        with self._lock:
            self.statements += 1
            self.texts.append(" ".join(statement.split()))

    def _begin(self, _conn):
        with self._lock:
            self.transactions += 1

    def reset(self) -> None:
        """Start counting from zero again."""
        with self._lock:
            self.statements = self.transactions = 0
            self.texts = []

    def __enter__(self) -> SQLCount:
        event.listen(self.engine, "before_cursor_execute", self._statement)
        event.listen(self.engine, "begin", self._begin)
        return self

    def __exit__(self, *_exc) -> None:
        event.remove(self.engine, "before_cursor_execute", self._statement)
        event.remove(self.engine, "begin", self._begin)

    def __str__(self) -> str:
        return f"{self.statements} statements in {self.transactions} transactions:\n" + "\n".join(self.texts)
