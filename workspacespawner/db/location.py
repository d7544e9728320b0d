"""Where a SQLite database lives: relative paths resolved against a folder, and whether the file exists.

A SQLAlchemy URL ``sqlite:///ledger.sqlite`` names a path relative to the
working directory of whoever opens it. The hub and the admin commands
resolve it against the folder of the hub's config file instead
(:func:`resolved_url`), so both find the same file wherever they run.
Server URLs (PostgreSQL, ...) and in-memory SQLite are left as they are.
"""

from __future__ import annotations

from pathlib import Path

import sqlalchemy as sa


def sqlite_file(url: str) -> Path | None:
    """The file of a SQLite ``url`` (as written, maybe relative); None for a server or an in-memory database.

    Raises ``sqlalchemy.exc.ArgumentError`` for a string that is no URL.
    """
    parsed = sa.engine.make_url(url)
    if parsed.get_backend_name() != "sqlite" or parsed.database in (None, "", ":memory:"):
        return None
    if parsed.database.startswith("file:"):  # a SQLite URI filename (uri=true): left to SQLite
        return None
    return Path(parsed.database)


def resolved_url(url: str, folder: Path) -> str:
    """``url`` with a relative SQLite path made absolute against ``folder``; any other URL unchanged.

    ``resolved_url("sqlite:///ledger.sqlite", Path("/srv/hub"))`` is
    ``"sqlite:////srv/hub/ledger.sqlite"``; query options are kept.
    """
    path = sqlite_file(url)
    if path is None or path.is_absolute():
        return url
    parsed = sa.engine.make_url(url).set(database=str(Path(folder).absolute() / path))
    return parsed.render_as_string(hide_password=False)
