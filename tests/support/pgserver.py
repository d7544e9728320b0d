"""A throw-away PostgreSQL server on a loopback port, for tests of the ledger and audit log on PostgreSQL.

:func:`postgres_url` yields the SQLAlchemy URL of a server: the one named
by ``$WORKSPACESPAWNER_TEST_POSTGRES_URL`` (CI starts one for all its
passes, see below), else a fresh one of its own (``initdb`` + ``pg_ctl`` in
a temporary folder, as the ``postgres`` system user when run as root). It
raises :class:`Unavailable` when the server programs or the psycopg driver
are missing; the ``postgres_server`` fixture (tests/conftest.py) then skips,
or fails when ``$CI`` is set, so no PostgreSQL test is skipped in CI.

From a shell (``.ci/run``)::

    python3 -m tests.support.pgserver start DIR   # prints the server's URL; DIR must be empty or absent
    python3 -m tests.support.pgserver stop DIR    # stops it and deletes DIR
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from contextlib import contextmanager
from pathlib import Path

from localcluster.ports import free_port

URL_VARIABLE = "WORKSPACESPAWNER_TEST_POSTGRES_URL"


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


def _as_user(workdir: Path) -> list[str]:
    """The command prefix running a server program as a non-root user (PostgreSQL refuses root)."""
    if os.geteuid() != 0:
        return []
    if not shutil.which("runuser"):
        raise Unavailable("running as root without runuser")
    shutil.chown(workdir, "postgres")
    return ["runuser", "-u", "postgres", "--"]


def start(workdir: Path) -> str:
    """Start a server with its data and socket in ``workdir`` (made if absent); its ``postgresql+psycopg://`` URL.

    Raises :class:`Unavailable` if the programs are missing or the server does not start.
    """
    initdb, pg_ctl = _programs()
    workdir.mkdir(parents=True, exist_ok=True)
    as_user = _as_user(workdir)
    port = free_port()
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
        stderr = getattr(e, "stderr", b"") or b""
        raise Unavailable(f"PostgreSQL did not start: {e} {stderr.decode(errors='replace').strip()}") from None
    return f"postgresql+psycopg://ledger@127.0.0.1:{port}/postgres"


def stop(workdir: Path) -> None:
    """Stop the server :func:`start` made in ``workdir`` and delete the folder."""
    data = workdir / "data"
    if data.exists():
        _initdb, pg_ctl = _programs()
        subprocess.run([*_as_user(workdir), pg_ctl, "-D", str(data), "-m", "immediate", "stop"], capture_output=True)
    shutil.rmtree(workdir, ignore_errors=True)


def _require_driver() -> None:
    try:
        import psycopg  # noqa: F401
    except ImportError:
        raise Unavailable("the psycopg driver is not installed") from None


@contextmanager
def postgres_url():
    """Yield ``postgresql+psycopg://...`` of a server (see the module docstring); stop one of its own afterwards."""
    _require_driver()
    if os.environ.get(URL_VARIABLE):
        yield os.environ[URL_VARIABLE]
        return
    workdir = Path(tempfile.mkdtemp(prefix="ledger-pg-"))
    try:
        url = start(workdir)
    except Unavailable:
        shutil.rmtree(workdir, ignore_errors=True)
        raise
    try:
        yield url
    finally:
        stop(workdir)


def fresh_database(server_url: str, name: str) -> str:
    """Drop and create database ``name`` on the server at ``server_url``; its URL."""
    import sqlalchemy as sa

    engine = sa.create_engine(server_url, isolation_level="AUTOCOMMIT")
    try:
        with engine.connect() as conn:
            conn.exec_driver_sql(f"DROP DATABASE IF EXISTS {name}")
            conn.exec_driver_sql(f"CREATE DATABASE {name}")
    finally:
        engine.dispose()
    return server_url.rsplit("/", 1)[0] + f"/{name}"


def main(argv: list[str]) -> int:
    if len(argv) != 2 or argv[0] not in ("start", "stop"):
        print("usage: python3 -m tests.support.pgserver start|stop DIR", file=sys.stderr)
        return 2
    workdir = Path(argv[1])
    if argv[0] == "stop":
        stop(workdir)
        return 0
    try:
        print(start(workdir))
    except Unavailable as e:
        print(f"pgserver: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
