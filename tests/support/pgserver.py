"""A throw-away PostgreSQL server on a loopback port, for tests of the ledger on PostgreSQL.

:func:`postgres_url` starts one (``initdb`` + ``pg_ctl``, as the
``postgres`` system user when run as root) and returns its SQLAlchemy URL;
it raises :class:`Unavailable` when the server programs or the psycopg
driver are missing, so tests skip instead of failing.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
from contextlib import contextmanager
from pathlib import Path


class Unavailable(Exception):
    """No PostgreSQL server programs or no psycopg driver here."""


def _programs() -> tuple[str, str]:
    found = [shutil.which(name) for name in ("initdb", "pg_ctl")]
    if not all(found):
        for bindir in sorted(Path("/usr/lib/postgresql").glob("*/bin"), reverse=True):
            if (bindir / "initdb").exists():
                return str(bindir / "initdb"), str(bindir / "pg_ctl")
        raise Unavailable("initdb and pg_ctl are not installed")
    return found[0], found[1]


@contextmanager
def postgres_url():
    """Yield ``postgresql+psycopg://...`` of a fresh server; stop it and delete its files afterwards."""
    try:
        import psycopg  # noqa: F401
    except ImportError:
        raise Unavailable("the psycopg driver is not installed") from None
    initdb, pg_ctl = _programs()
    as_user: list[str] = []
    workdir = Path(tempfile.mkdtemp(prefix="ledger-pg-"))
    if os.geteuid() == 0:
        if not shutil.which("runuser"):
            raise Unavailable("running as root without runuser")
        as_user = ["runuser", "-u", "postgres", "--"]
        shutil.chown(workdir, "postgres")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    data = workdir / "data"
    try:
        subprocess.run(
            [*as_user, initdb, "-D", str(data), "-U", "ledger", "--auth=trust"], check=True, capture_output=True
        )
        options = f"-p {port} -k {workdir} -c listen_addresses=127.0.0.1"
        subprocess.run(
            [*as_user, pg_ctl, "-D", str(data), "-o", options, "-l", str(workdir / "log"), "-w", "start"],
            check=True,
            capture_output=True,
        )
    except (subprocess.CalledProcessError, OSError) as e:
        shutil.rmtree(workdir, ignore_errors=True)
        raise Unavailable(f"PostgreSQL did not start: {e}") from None
    try:
        yield f"postgresql+psycopg://ledger@127.0.0.1:{port}/postgres"
    finally:
        subprocess.run([*as_user, pg_ctl, "-D", str(data), "-m", "immediate", "stop"], capture_output=True)
        shutil.rmtree(workdir, ignore_errors=True)
