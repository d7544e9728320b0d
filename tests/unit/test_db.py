"""The database layer shared by the ledger and the audit trail (:mod:`workspacespawner.db`).

Covers: the executor's one thread (calls in order, results and exceptions
carried back, the caller's context variables, shutdown after the queued
calls and a fresh thread afterwards); the ledger's and the audit log's
writes on that same thread, with the process's executor, one handed to the
quota service, and the hub's services (:class:`~workspacespawner.services.HubServices`); ``upgrade``
on a bare engine (new database, idempotent, an unreachable one as
DatabaseUnavailable, which ``LedgerUnavailable`` names too); aware UTC
times; and the package standing on its own (no quota, workspace,
kubespawner or jupyterhub imported).
"""

from __future__ import annotations

import asyncio
import contextvars
import subprocess
import sys
import threading
import time
from datetime import UTC, datetime, timedelta, timezone

import pytest
import sqlalchemy as sa
from traitlets.config import Config

from workspacespawner.db import (
    DatabaseExecutor,
    DatabaseUnavailable,
    UTCDateTime,
    guarded,
    head_revision,
    make_engine,
    process_executor,
    upgrade,
)
from workspacespawner.db.migrations import AUDIT_TABLE, RUNS_TABLE, USERS_TABLE, VERSION_TABLE
from workspacespawner.lifecycle.audit import AuditLog
from workspacespawner.quota.config import WorkspaceQuota
from workspacespawner.quota.ledger import Ledger, LedgerUnavailable
from workspacespawner.quota.policy import Request
from workspacespawner.quota.service import QuotaService
from workspacespawner.services import HubServices

REQUEST = dict(actor="root", user="ann", disk="home-ann", action="expand", before=None, after=None, result="ok")

# -- the executor --------------------------------------------------------------------------------


async def test_executor_runs_calls_in_order_on_one_thread():
    executor = DatabaseExecutor("test-db")
    seen = []

    def note(i):
        time.sleep(0.001 * (5 - i % 5))  # later calls are quicker: order must come from the queue
        seen.append((i, threading.get_ident(), threading.current_thread().name))
        return i * 2

    try:
        results = await asyncio.gather(*(executor.run(note, i) for i in range(20)))
        assert results == [i * 2 for i in range(20)]
        assert [i for i, _, _ in seen] == list(range(20))
        assert len({ident for _, ident, _ in seen}) == 1
        assert seen[0][1] != threading.get_ident()
        assert seen[0][2].startswith("test-db")
    finally:
        executor.shutdown()


async def test_executor_carries_exceptions_keywords_and_context():
    executor = DatabaseExecutor()
    var = contextvars.ContextVar("var", default="unset")

    def boom():
        raise KeyError("nope")

    try:
        with pytest.raises(KeyError, match="nope"):
            await executor.run(boom)
        var.set("from the caller")
        assert await executor.run(var.get) == "from the caller"
        assert await executor.run(dict, a=1, fn="kept") == {"a": 1, "fn": "kept"}
    finally:
        executor.shutdown()


async def test_executor_shutdown_waits_then_a_later_call_gets_a_new_thread():
    executor = DatabaseExecutor()
    done = []
    first = executor.run(lambda: (time.sleep(0.05), done.append("queued"), threading.current_thread())[-1])
    task = asyncio.ensure_future(first)
    await asyncio.sleep(0.01)
    executor.shutdown(wait=True)
    assert done == ["queued"]
    old = await task
    new = await executor.run(threading.current_thread)
    assert new is not old and not old.is_alive()  # (a thread id may be reused, a Thread object is not)
    executor.shutdown()
    executor.shutdown()  # idempotent


# -- ledger and audit writes share the thread --------------------------------------------------


def spy(obj, name: str, threads: list[int]) -> None:
    """Wrap ``obj.name`` to note the thread each call runs on."""
    original = getattr(obj, name)

    def wrapper(*args, **kwargs):
        threads.append(threading.get_ident())
        return original(*args, **kwargs)

    setattr(obj, name, wrapper)


async def _reserve_and_audit(service: QuotaService, audit: AuditLog) -> tuple[list[int], list[int]]:
    ledger_threads: list[int] = []
    audit_threads: list[int] = []
    spy(service.ledger, "check_and_reserve", ledger_threads)
    spy(service.ledger, "open_run", ledger_threads)
    spy(audit, "record", audit_threads)
    reservation = await service.reserve(user="ann", groups=[], request=Request(gpus=0, server_name="cpu"))
    await asyncio.gather(service.running(reservation), audit.arecord(**REQUEST), audit.arecord(**REQUEST))
    assert len(ledger_threads) == 2 and len(audit_threads) == 2
    return ledger_threads, audit_threads


async def test_audit_and_ledger_writes_run_on_the_same_thread(tmp_path):
    service = QuotaService(WorkspaceQuota(), ledger=Ledger(f"sqlite:///{tmp_path / 'ledger.sqlite'}"))
    audit = AuditLog(service.ledger)
    try:
        assert service.executor is audit.executor is process_executor()
        ledger_threads, audit_threads = await _reserve_and_audit(service, audit)
        assert len(set(ledger_threads) | set(audit_threads)) == 1
        assert threading.get_ident() not in ledger_threads
        assert [r.action for r in audit.query()] == ["expand", "expand"]
    finally:
        await service.close()


async def test_an_executor_handed_to_the_service_is_the_audit_logs_too(tmp_path):
    executor = DatabaseExecutor("test-own-db")
    service = QuotaService(
        WorkspaceQuota(), ledger=Ledger(f"sqlite:///{tmp_path / 'ledger.sqlite'}"), executor=executor
    )
    audit = AuditLog(service.ledger)
    names = []
    try:
        assert service.executor is service.ledger.executor is audit.executor is executor
        ledger_threads, audit_threads = await _reserve_and_audit(service, audit)
        assert len(set(ledger_threads) | set(audit_threads)) == 1
        names.append(await executor.run(lambda: threading.current_thread().name))
        assert names[0].startswith("test-own-db")
    finally:
        await service.close()


async def test_the_hubs_audit_log_shares_the_quota_services_thread(tmp_path):
    config = Config()
    config.WorkspaceQuota.ledger_url = f"sqlite:///{tmp_path / 'ledger.sqlite'}"
    services = HubServices(config)
    try:
        audit, service = services.audit, services.quota
        assert audit.ledger is service.ledger and audit.executor is service.executor
        ledger_threads, audit_threads = await _reserve_and_audit(service, audit)
        assert len(set(ledger_threads) | set(audit_threads)) == 1
    finally:
        await services.close()


# -- migrations, errors, times -----------------------------------------------------------------


def test_upgrade_a_bare_engine(tmp_path):
    engine = make_engine(f"sqlite:///{tmp_path / 'new.sqlite'}")
    try:
        assert upgrade(engine) == head_revision() >= "0003"
        assert upgrade(engine) == head_revision()  # idempotent
        tables = set(sa.inspect(engine).get_table_names())
        assert {VERSION_TABLE, RUNS_TABLE, USERS_TABLE, AUDIT_TABLE} <= tables
    finally:
        engine.dispose()


def test_upgrade_in_memory_then_the_ledger_and_audit_log_need_nothing_more():
    ledger = Ledger("sqlite://")
    try:
        upgrade(ledger.engine)
        AuditLog(ledger).record(**REQUEST)
        assert ledger.usage_all((datetime(2025, 6, 1, tzinfo=UTC), datetime(2025, 7, 1, tzinfo=UTC))) == {}
    finally:
        ledger.dispose()


def test_an_unreachable_database_is_database_unavailable(tmp_path):
    url = f"sqlite:///{tmp_path / 'no-such-dir' / 'db.sqlite'}"
    engine = make_engine(url, timeout=0.5)
    with pytest.raises(DatabaseUnavailable, match="the database at .* cannot be used") as caught:
        upgrade(engine)
    assert isinstance(caught.value.__cause__, sa.exc.OperationalError)
    assert LedgerUnavailable is DatabaseUnavailable
    with pytest.raises(LedgerUnavailable, match="the audit log at"):
        AuditLog.from_url(url, timeout=0.5).record(**REQUEST)
    with pytest.raises(LedgerUnavailable, match="the quota ledger at"):
        Ledger(url, timeout=0.5).upgrade()


def test_guarded_bare_and_named():
    class Broken:
        engine = make_engine("sqlite://")

        @guarded
        def plain(self):
            raise sa.exc.OperationalError("SELECT 1", {}, Exception("gone"))

        @guarded(what="the test store")
        def named(self):
            raise sa.exc.OperationalError("SELECT 1", {}, Exception("gone"))

        @guarded
        def mistaken(self):
            raise sa.exc.IntegrityError("INSERT", {}, Exception("duplicate"))

    with pytest.raises(DatabaseUnavailable, match="^the database at"):
        Broken().plain()
    with pytest.raises(DatabaseUnavailable, match="^the test store at"):
        Broken().named()
    with pytest.raises(sa.exc.IntegrityError):  # a mistake, not an outage
        Broken().mistaken()
    assert Broken.plain.__name__ == "plain"


def test_utc_datetime_round_trip():
    engine = make_engine("sqlite://")
    table = sa.Table(
        "times", sa.MetaData(), sa.Column("id", sa.Integer, primary_key=True), sa.Column("at", UTCDateTime)
    )
    table.metadata.create_all(engine)
    berlin = timezone(timedelta(hours=2))
    with engine.begin() as conn:
        conn.execute(
            table.insert(),
            [{"at": datetime(2025, 6, 1, 14, tzinfo=berlin)}, {"at": datetime(2025, 6, 1, 12)}, {"at": None}],
        )
        stored = conn.exec_driver_sql("SELECT at FROM times ORDER BY id").scalars().all()
        back = conn.execute(sa.select(table.c.at).order_by(table.c.id)).scalars().all()
    assert [s[:19] if s else s for s in stored] == ["2025-06-01 12:00:00", "2025-06-01 12:00:00", None]
    assert back == [datetime(2025, 6, 1, 12, tzinfo=UTC)] * 2 + [None]
    assert back[0].tzinfo is UTC
    engine.dispose()


def test_the_db_package_stands_on_its_own():
    code = (
        "import sys, workspacespawner.db as db;"
        "db.upgrade(db.make_engine('sqlite://'));"
        "bad = sorted(m for m in sys.modules if m.split('.')[0] in ('kubespawner', 'jupyterhub')"
        " or m.startswith(('workspacespawner.quota', 'workspacespawner.lifecycle', 'workspacespawner.vmdisk', 'workspacespawner.gpu')));"
        "print(bad)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_the_hub_start_brings_the_database_up_to_date(tmp_path, caplog):
    from workspacespawner.services import upgrade_database

    url = f"sqlite:///{tmp_path / 'ledger.sqlite'}"
    assert upgrade_database(Config({"WorkspaceQuota": {"enabled": False, "ledger_url": url}})) is None
    assert not (tmp_path / "ledger.sqlite").exists()  # quotas off: nothing made
    revision = upgrade_database(Config({"WorkspaceQuota": {"ledger_url": url}}))
    assert revision == head_revision()
    engine = sa.create_engine(url)
    try:
        assert {RUNS_TABLE, AUDIT_TABLE, VERSION_TABLE} <= set(sa.inspect(engine).get_table_names())
    finally:
        engine.dispose()
    unreachable = "postgresql+psycopg://nobody@127.0.0.1:1/none" if _has_psycopg() else f"sqlite:///{tmp_path}/no/such/dir/x.sqlite"
    assert upgrade_database(Config({"WorkspaceQuota": {"ledger_url": unreachable, "ledger_timeout": 1}})) is None
    assert "Could not bring the quota ledger's database up to date" in caplog.text


def _has_psycopg() -> bool:
    try:
        import psycopg  # noqa: F401
    except ImportError:
        return False
    return True
